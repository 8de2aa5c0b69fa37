"""Re-export for bench/ scripts (support.BENCH_SHIMS): the helper is tests/trainer/toolcaller_support.py."""

from .toolcaller_support import *  # noqa: F401,F403
