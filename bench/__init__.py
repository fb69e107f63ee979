"""Benchmarks: ``python -m bench <command>`` or ``replayssm-bench <command>``."""
