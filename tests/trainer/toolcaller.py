"""Re-export for bench/ scripts (support.BENCH_SHIMS): the helper is tests/trainer/toolcaller_support.py."""

from .toolcaller_support import PROBE_INSTANCE, PROBE_PROMPT

__all__ = ["PROBE_INSTANCE", "PROBE_PROMPT"]
