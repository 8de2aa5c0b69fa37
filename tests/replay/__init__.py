"""Teacher replay tests (the teacher endpoint is a loopback double: fake_teacher.py)."""
