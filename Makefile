# The two commands of the quick start: `make demo` and `make test`. Both build .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench clean browser promtool alertmanager

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

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
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache gpufleet-results
