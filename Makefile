# The README's two commands: `make demo` runs a whole flash sale on the local stack,
# `make test` runs lint, types and the tests against the real stack. Both set up what is missing.
PY := .venv/bin/python
export PYTHONUNBUFFERED := 1

.PHONY: setup stack demo test lint stop status bench

setup:
	@scripts/bootstrap

stack: setup
	@$(PY) -m flashsale stack up

demo: stack
	@$(PY) -m flashsale demo

lint: setup
	@$(PY) -m ruff check .
	@$(PY) -m ruff format --check .
	@$(PY) -m mypy
	@.venv/bin/lint-imports --no-cache
	@promtool test rules deploy/prometheus/tests/*.yml

test: stack lint
	@$(PY) -m pytest

bench: stack
	@$(PY) -m loadtest.bench

status:
	@$(PY) -m flashsale stack status

stop:
	@$(PY) -m flashsale stack down
