"""Benchmarks of the purchase path: ``python -m loadtest.bench`` measures the gateway side by side
with its baselines and rewrites ``bench.md``. See ``loadtest/README.md``."""
