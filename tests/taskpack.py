"""Re-export for bench/ scripts (support.BENCH_SHIMS): the helper is tests/support/taskpacks.py."""

from support.taskpacks import build_small_pack

__all__ = ["build_small_pack"]
