#!/usr/bin/env bash
# The test suite. Fails when pytest fails *or* runs no test (exit code 5).
# The log ends with the skip count and each reason (tests/conftest.py); under CI=true a
# skip for any reason but a missing GPU is a failure.
#
# Most of the suite waits on servers, sandboxes and subprocesses, so its test files run in
# SWE_TEST_WORKERS processes (pytest-xdist, default 2: one file per worker at a time, the longest
# first: tests/support/timing.py). The sandbox's limit tests (fork and memory bombs, a runtime that
# stops answering: tests/sandbox/test_limits.py) run first, alone, on a quiet machine; the sandbox's
# other tests wait on their sandboxes most of the time and run with the rest. Given test paths, only
# those run (in the workers). SWE_TEST_WORKERS=0 runs everything in this process.
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false
# `make setup` installs without compiling (--no-compile): Python writes each module's bytecode the first
# time a program imports it. With PYTHONDONTWRITEBYTECODE set (some shells and images set it), every
# process would compile torch, transformers and TRL again: the suite took 52 min instead of 28 here.
unset PYTHONDONTWRITEBYTECODE
workers=${SWE_TEST_WORKERS:-2}
QUIET_FIRST=tests/sandbox/test_limits.py

paths=0
for a in "$@"; do [[ "$a" != -* && -e "${a%%::*}" ]] && paths=1; done

run() {  # pytest, with exit code 5 (no test collected) a failure
    .venv/bin/python -m pytest "$@"
    local rc=$?
    if [ $rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; return 1; fi
    return $rc
}

if [ "$workers" = 0 ]; then
    run --durations=40 "$@"
elif [ $paths = 1 ]; then
    run -n "$workers" --dist loadfile --durations=40 "$@"
else
    # the limit tests, unless the caller's -m / -k leaves none of them (`make test-fast`: they are slow)
    .venv/bin/python -m pytest --durations=10 "$@" "$QUIET_FIRST"
    first=$?
    [ $first -eq 5 ] && first=0
    run -n "$workers" --dist loadfile --durations=40 --ignore="$QUIET_FIRST" "$@"
    rest=$?
    [ $first -eq 0 ] && [ $rest -eq 0 ]
fi
