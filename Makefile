# The README's two commands: `make demo` runs a whole flash sale on the local stack,
# `make test` runs lint, types and the tests against the real stack. Both set up what is missing.
# The quick tiers for the loop while working: `make check` (no servers) and `make test-fast`
# (every test that needs no server of the stack; tests/support/tiers.py marks the others).
PY := .venv/bin/python
export PYTHONUNBUFFERED := 1

.PHONY: setup stack demo test test-fast check lint stop status bench image

setup:
	@scripts/bootstrap

stack: setup
	@$(PY) -m flashsale stack up

demo: stack
	@$(PY) -m flashsale demo

check: setup
	@$(PY) -m ruff check .
	@$(PY) -m ruff format --check .
	@$(PY) -m mypy
	@.venv/bin/lint-imports --no-cache
	@promtool test rules deploy/prometheus/tests/*.yml

# `lint` is the name CI and older docs use for `check`.
lint: check

# pytest-xdist workers (tests/support/scheduling.py): gw0 runs the whole-system rows on the
# stack `make stack` starts, at full priority; gw1 the other modules on a stack of its own,
# niced, filling the rows' idle time. The default stays one worker: on two, quiet or under
# stress-ng --cpu 1, the watch's two Ctrl-C tests and the fleet's 1,100-buyer burst still fail on
# the second worker (README, tiers); WORKERS=2 opts in.
WORKERS ?= 1

test-fast: setup
	@$(PY) -m pytest -m "not integration" -n $(WORKERS)

test: stack check
	@$(PY) -m pytest -n $(WORKERS) --dist loadgroup

bench: stack
	@scripts/bootstrap --bench
	@PATH="$(CURDIR)/.venv/bin:$$PATH" $(PY) -m loadtest.bench

# The container image, built with Debian's buildah and started (docs/container.md). Minutes on
# this machine, so not part of `test`.
image: stack
	@scripts/build-image

status:
	@$(PY) -m flashsale stack status

stop:
	@$(PY) -m flashsale stack down
