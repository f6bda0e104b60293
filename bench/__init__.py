"""Benchmarks: figures printed by scripts (`python -m bench.scan`), never timed tests."""
