# The two README commands. Both set up .venv once (again only when a pyproject changes):
#   make bench   list the devices, then run the standard workloads on the default device
#   make test    system packages (.ci/system-deps.sh), ruff, then the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.jaxcore-installed
PACKAGES := -e "core[test]" -e plugins/cpu -e plugins/wasm -e plugins/webgpu -e plugins/webgl
BENCH_ARGS ?=
# pytest-xdist workers for `make test` (each test file runs on one; conftest.py keeps the webgpu and
# webgl conformance cases with the browser tests that replay them, and spreads the other devices')
TEST_WORKERS ?= 2

.PHONY: bench test venv wheels clean-venv system-deps

venv: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python core/pyproject.toml plugins/cpu/pyproject.toml plugins/wasm/pyproject.toml \
		plugins/webgpu/pyproject.toml plugins/webgl/pyproject.toml
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(PACKAGES)
	touch $@

bench: $(STAMP)
	$(BIN)/jaxcore devices
	$(BIN)/jaxcore bench $(BENCH_ARGS)

system-deps:
	sh .ci/system-deps.sh

test: system-deps $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest tests $(sort $(wildcard plugins/*/tests)) -n $(TEST_WORKERS) --durations=25

# every distribution (core and each plugin) as a wheel in dist/
wheels: $(STAMP)
	$(BIN)/python -m pip wheel --quiet --no-deps --no-build-isolation -w dist ./core plugins/*/

clean-venv:
	rm -rf $(VENV)
