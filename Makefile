# The two README commands. Both set up .venv once (again only when a pyproject changes):
#   make bench   list the devices, then run the standard workloads on the default device
#   make test    ruff, then the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.jaxcore-installed
PACKAGES := -e "core[test]" -e plugins/cpu -e plugins/wasm -e plugins/webgl
BENCH_ARGS ?=

.PHONY: bench test venv clean-venv

venv: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python core/pyproject.toml plugins/cpu/pyproject.toml plugins/wasm/pyproject.toml plugins/webgl/pyproject.toml
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(PACKAGES)
	touch $@

bench: $(STAMP)
	$(BIN)/jaxcore devices
	$(BIN)/jaxcore bench $(BENCH_ARGS)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest
	$(BIN)/python -m pytest -q plugins/webgl/tests  # EGL, and glfw on Xvfb (started by the fixture)

clean-venv:
	rm -rf $(VENV)
