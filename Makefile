# Two commands do all set-up on a fresh Debian 12 machine:
#   make demo   - a short real training run against a real local env server (CPU)
#   make test   - the test suite
# Both install what they need first (apt + a project venv); re-running is cheap.

PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

.PHONY: setup system-deps docker-setup demo test test-fast durations bench

system-deps:
	@bash .ci/system-deps.sh

# pip -q says nothing for minutes on a busy machine: .ci/heartbeat.sh adds a line every 20 s
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	bash .ci/heartbeat.sh "install: pip" $(VENV) $(BIN)/pip install -q --upgrade pip
	# torch pinned to the CPU build that lies on these machines' disk, in one resolution with the project;
	# setuptools' notice that an editable install resolves our packages by name (nothing to act on).
	# --no-compile: pip would compile every module of every package (torch's thousands: 111 s of CPU
	# against 40 s without, here); Python compiles, once, the modules a program imports.
	PYTHONWARNINGS="ignore:Editable installation:UserWarning" bash .ci/heartbeat.sh \
	  "install: torch, TRL, the project" $(VENV) $(BIN)/pip install -q --no-compile "torch==2.13.0" -e ".[dev]"
	@rm -f $(VENV)/.installed-* && touch $(STAMP)

setup: system-deps $(STAMP)

# A Docker engine and the offline-built images (the docker sandbox backend, the compose
# tests and the CPU trainer image's smoke run use them). Best effort here; CI sets
# SWE_REQUIRE_DOCKER=1 so a missing engine fails the docker tests instead of skipping them.
docker-setup:
	@bash docker/setup-engine.sh && bash docker/build-images.sh && bash docker/build-env-image.sh \
	  && bash docker/build-trainer-image.sh \
	  || { [ "$${SWE_REQUIRE_DOCKER:-0}" != 1 ] && echo "docker unavailable: docker tests will skip" >&2; }

# `make demo` times its own set-up (the demo prints it with its phase times at the end)
DEMO_T0 := $(if $(filter demo,$(MAKECMDGOALS)),$(shell date +%s.%N))
DEMO_SETUP_NOTE := $(if $(wildcard $(STAMP)),up to date,installed)
$(if $(filter demo,$(MAKECMDGOALS)),$(if $(wildcard $(STAMP)),,$(info == install: system packages, then a project \
  venv in $(VENV) (torch's CPU build, TRL, the project; first run only))))

demo: setup
	@DEMO_SETUP_S=$$(awk -v a=$$(date +%s.%N) -v b="$(DEMO_T0)" 'BEGIN { printf "%.1f", a - b }') \
	  DEMO_SETUP_NOTE="$(DEMO_SETUP_NOTE)" bash .ci/demo.sh

test: setup docker-setup
	@bash .ci/test.sh

# The tier a developer runs on every change: the test files tests/durations.json records under
# 8 s each (tests/support/timing.py marks the rest `slow`), no Docker.
test-fast: setup
	@bash .ci/test.sh -m "not slow and not docker"

# Re-record tests/durations.json (each file's time, the slowest tests) with a full run.
durations: setup docker-setup
	@bash .ci/test.sh --write-durations

# The quick benchmarks (a few minutes); bench/bench_losses.py runs on its own (longer).
bench: setup
	$(BIN)/python bench/bench_sandbox.py
	$(BIN)/python bench/bench_env_server.py
	$(BIN)/python bench/bench_rollout.py
	$(BIN)/python bench/bench_reset.py --resets 20 --rounds 2
	$(BIN)/python bench/bench_cold_reset.py --resets 30
	$(BIN)/python bench/bench_training_resets.py --rounds 2
	$(BIN)/python bench/bench_grading_burst.py --group 16 --bursts 2
	$(BIN)/python bench/bench_cpu_scoring.py
	$(BIN)/python bench/bench_grading.py
	$(BIN)/python bench/bench_image_workspace.py
	$(BIN)/python bench/bench_evaluate.py
	$(BIN)/python bench/bench_profiles.py --rounds 2
