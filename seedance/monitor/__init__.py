"""Watching long runs: the memory and resource monitor (:mod:`.memory`) and the optional Prometheus endpoint
(:mod:`.metrics`)."""
