#!/usr/bin/env bash
# The test suite. Fails when pytest fails *or* runs no test (exit code 5).
# The log ends with the skip count and each reason (tests/conftest.py); under CI=true a
# skip for any reason but a missing GPU is a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/python -m pytest --durations=40 "$@"
rc=$?
if [ $rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
exit $rc
