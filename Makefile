# The two commands a newcomer needs. Both create .venv from the requirements
# files when it is missing or older than them, so a fresh clone needs nothing else:
# requirements.txt (what `pulumi up` needs), requirements-ops.txt (the llmp CLI, the
# project's ops extra) and requirements-dev.txt (the tests and their peers).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACK ?= pretrain

.PHONY: preview test lint bench clean

$(VENV)/.runtime: requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

# The operator CLI (llmp): the project's ops extra, pinned.
$(VENV)/.ops: $(VENV)/.runtime requirements-ops.txt
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[ops]' -r requirements-ops.txt
	touch $@

$(VENV)/.dev: $(VENV)/.ops requirements-dev.txt
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

## make preview STACK=pretrain: offline synthesis of a stack (tree, counts, cost, out/STACK/)
## and its policy pack: exit 1 on a mandatory violation (over the GPU budget, say)
preview: $(VENV)/.ops
	$(BIN)/llmp synth $(STACK)

## make test: lint, type-check, the layer contracts and the whole test suite
test: $(VENV)/.dev lint
	$(BIN)/python -m pytest -q

lint: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(VENV)/.ops
	$(BIN)/python bench/synth.py

clean:
	rm -rf out .pytest_cache .mypy_cache .ruff_cache
