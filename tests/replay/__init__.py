"""Teacher replay tests (the teacher endpoint is a loopback double: support/teacher_double.py)."""
