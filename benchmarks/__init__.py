"""Benchmarks of twopc (not part of the installed package; run from the repository root)."""
