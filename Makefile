# The two commands of the quick start: `make demo` and `make test`. Both build .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Every package of .[dev], and the build's setuptools and wheel, at the version the tests ran
# with and with the sha256 of each of its files on PyPI (pip refuses any other file).
LOCK := requirements.lock
# The same pins, less the dev extra: what the container image installs (Dockerfile).
RUNTIME_LOCK := requirements-runtime.lock
LOCK_TOOLS := .lock-tools
PIP_TOOLS := pip-tools==7.5.3

.PHONY: demo test lint typecheck unit bench clean browser promtool alertmanager lock

# The lock first, hashes required; then gpufleet itself, without resolving anything more and
# built with the locked setuptools (build isolation would fetch an unpinned one).
$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# After changing pyproject.toml's dependencies: `make lock` (pins that still fit are kept, and
# the runtime lock takes the dev lock's);
# `make lock UPGRADE=1` moves every pin to the newest release that fits. pip-tools runs from a
# venv of its own, never the project's; the lock is resolved for the Python it runs on (3.11,
# Linux x86_64 in CI). tests/test_lock.py checks the lock against pyproject.toml and .venv.
lock:
	$(PYTHON) -m venv $(LOCK_TOOLS)
	$(LOCK_TOOLS)/bin/python -m pip install --quiet '$(PIP_TOOLS)'
	CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_TOOLS)/bin/pip-compile --quiet --generate-hashes \
		--allow-unsafe --all-build-deps --extra dev --strip-extras --no-emit-index-url \
		--no-emit-find-links $(if $(UPGRADE),--upgrade) -o $(LOCK) pyproject.toml
	CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_TOOLS)/bin/pip-compile --quiet --generate-hashes \
		--allow-unsafe --all-build-deps --strip-extras --no-emit-index-url --no-emit-find-links \
		-c $(LOCK) -o $(RUNTIME_LOCK) pyproject.toml

demo: $(STAMP)
	$(BIN)/gpufleet demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# The dashboard's browser test needs Chromium (Debian's package): installed here, system-wide,
# when it is missing and this is root with apt-get (as in CI), saying so; otherwise that one
# test skips, saying why. The README's Quick start says the same.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
		&& echo "installing Debian's chromium package (apt-get, system-wide) for the dashboard's browser test" \
		&& apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "chromium not installed: the dashboard's browser test will skip"

# The test that the exported alert rules give Prometheus' verdicts runs promtool (Debian's
# prometheus package brings it): installed the same way, or that test skips, saying why.
promtool:
	@command -v promtool >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
		&& echo "installing Debian's prometheus package (apt-get, system-wide) for promtool, to test the exported alert rules" \
		&& apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; } \
		|| echo "promtool not installed: the test of the exported alert rules against Prometheus will skip"

# The test that gpufleet's webhook payloads are Alertmanager's runs a real Alertmanager (Debian's
# prometheus-alertmanager package): installed the same way, or that test skips, saying why.
alertmanager:
	@command -v prometheus-alertmanager >/dev/null 2>&1 || command -v alertmanager >/dev/null 2>&1 \
		|| { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
		&& echo "installing Debian's prometheus-alertmanager package (apt-get, system-wide) to test gpufleet's alert webhooks against it" \
		&& apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus-alertmanager >/dev/null; } \
		|| echo "alertmanager not installed: the test of gpufleet's webhook payloads against Alertmanager will skip"

unit: $(STAMP) browser promtool alertmanager
	$(BIN)/pytest -n auto -q

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python benchmarks/fgd_reproduction.py
	$(BIN)/python benchmarks/speed.py

clean:
	rm -rf $(VENV) $(LOCK_TOOLS) .mypy_cache .ruff_cache .pytest_cache gpufleet-results
