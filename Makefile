# The commands a newcomer needs. Each creates .venv from the requirements files when
# it is missing or older than them, so a fresh clone needs nothing else:
#   requirements.txt        what `pulumi up` needs (make preview adds the CLI)
#   requirements-ops.txt    the llmp CLI, the project's ops extra
#   requirements-check.txt  the check tier: lint, types, contracts, the platform's tests
#   requirements-dev.txt    the full tier: adds torch, Ray, DeepSpeed, transformers...
# pip runs with --no-compile: Python compiles what it imports on first use, not all of
# site-packages up front (a third of the check tier's install time and 400 MB).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install --quiet --disable-pip-version-check --no-compile
PYTEST := $(BIN)/python -m pytest -q -n auto
STACK ?= pretrain

.PHONY: preview check test lint bench clean

$(VENV)/.runtime: requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) -r requirements.txt
	touch $@

# The operator CLI (llmp): the project's ops extra, pinned.
$(VENV)/.ops: $(VENV)/.runtime requirements-ops.txt
	$(PIP) -e '.[ops]' -r requirements-ops.txt
	touch $@

$(VENV)/.check: $(VENV)/.ops requirements-check.txt
	$(PIP) -r requirements-check.txt
	touch $@

$(VENV)/.dev: $(VENV)/.check requirements-dev.txt
	$(PIP) -r requirements-dev.txt
	touch $@

## make preview STACK=pretrain: offline synthesis of a stack (tree, counts, cost, out/STACK/)
## and its policy pack: exit 1 on a mandatory violation (over the GPU budget, say)
preview: $(VENV)/.ops
	$(BIN)/llmp synth $(STACK)

## make check: the loop while you work: lint, types, the layer contracts and the check
## tier's tests (everything but the code that runs in pods), on every core
check: $(VENV)/.check
	$(MAKE) --no-print-directory lint
	$(PYTEST) --tier check

## make test: both tiers, what CI runs (.ci/run): lint, types, contracts, every test
test: $(VENV)/.dev
	$(MAKE) --no-print-directory lint
	$(PYTEST)

lint: $(VENV)/.check
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(VENV)/.ops
	$(BIN)/python bench/synth.py

clean:
	rm -rf out site .pytest_cache .mypy_cache .ruff_cache
