"""Re-export for bench/ scripts (support.BENCH_SHIMS): the double is tests/support/policy_double.py."""

from tests.support.policy_double import PolicyDouble

__all__ = ["PolicyDouble"]
