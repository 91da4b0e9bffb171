"""Histories and checkers, sweeps, statistics, figures and LaTeX tables."""
