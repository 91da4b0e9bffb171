"""The real runtime: drives the same protocol nodes in OS processes (TCP, fsync, torch.distributed)."""
