#!/usr/bin/env bash
# The test suite. Fails when pytest fails *or* runs no test (exit code 5).
# The log ends with the skip count and each reason (tests/conftest.py); under CI=true a
# skip for any reason but a missing GPU is a failure.
# Test files run in SWE_TEST_WORKERS processes (pytest-xdist, one file per worker at a time, the
# longest first: tests/timing.py); most of the suite waits on servers, sandboxes and subprocesses,
# so 2 workers overlap those waits on 2 cores. SWE_TEST_WORKERS=0 runs everything in this process.
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false
workers=${SWE_TEST_WORKERS:-2}
if [ "$workers" = 0 ]; then dist=(); else dist=(-n "$workers" --dist loadfile); fi
.venv/bin/python -m pytest "${dist[@]}" --durations=40 "$@"
rc=$?
if [ $rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
exit $rc
