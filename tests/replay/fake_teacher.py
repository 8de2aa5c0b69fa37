"""Re-export for bench/ scripts (support.BENCH_SHIMS): the double is tests/support/teacher_double.py."""

from tests.support.teacher_double import FakeTeacherServer, Reply

__all__ = ["FakeTeacherServer", "Reply"]
