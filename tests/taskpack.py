"""Re-export for bench/ scripts (support.BENCH_SHIMS): the helper is tests/support/taskpacks.py."""

from support.taskpacks import *  # noqa: F401,F403
