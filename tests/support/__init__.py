"""The test suite's own helpers: one package, one naming rule.

Where a helper lives and what it is called:

- ``tests/support/<thing>.py``, imported as ``support.<thing>``: every helper that more than
  one test folder uses (``servers``: the one in-thread server factory and the one subprocess
  server starter; ``venvs``: the one cached-venv builder; ``git_repos``: the one ``git`` and the
  one-commit task repository; ``taskpacks``, ``layouts``,
  ``requirements``, ``timing`` (the pytest plugin of tests/durations.json), ``diff_states``, ``pairs``,
  and the doubles ``policy_double``, ``teacher_double``, ``mux_double``).
- ``tests/<folder>/<thing>_support.py``: a helper that only that folder's tests import (a
  folder without ``__init__.py`` imports it by its name, e.g. ``from env_support import run``;
  a package folder relatively, ``from .rollouts_support import make_grpo_batch``). The name
  is unique across the suite (pytest's default ``prepend`` import mode puts each such folder
  on ``sys.path``). A helper a second folder needs moves here.
- ``tests/<folder>/<thing>_episode.py``: a script a test runs by path with another
  interpreter (a framework's or a client's venv); it is never imported.
- ``conftest.py``, ``__init__.py`` and ``test_*.py``; nothing else. Scripts under bench/ that use
  a test helper import it by these names too (``support.taskpacks``, ``trainer.toolcaller_support``).

tests/ itself is on ``sys.path`` by pytest's default import mode (tests/conftest.py is in a
folder without ``__init__.py``); no test file or conftest edits ``sys.path``. A cached venv
is built only by ``support.venvs`` (``cached_venv``: its file lock, ready stamp, fresh build or
project reinstall; ``venv_step``: one more locked install step). A test writes its git repositories
and runs git through ``support.git_repos`` (only a test of git's own behaviour runs the machine's git).
tests/unit/test_suite_layout.py enforces all of this.
"""
