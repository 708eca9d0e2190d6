# agpt: `make demo` runs the main job end to end; `make test` sets up, lints and tests.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: help setup lint test bats pytest demo bench clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 12

setup:  ## install apt packages and the pinned .venv (idempotent, quick when done)
	@bin/agpt-setup

lint: setup  ## shellcheck every shell file, ruff, mypy
	@tests/lint

test: setup  ## setup + lint + bats + pytest; ends with "N passed, N failed"
	@tests/run

bats: setup  ## only the bats suites (T=tests/bats/FILE.bats for one)
	@tests/run --bats-only $(T)

pytest: setup  ## only pytest (T=tests/python/test_X.py for one)
	@tests/run --pytest-only $(T)

demo: setup  ## the end-to-end demo on the embedded default (site/generic + local Slurm)
	@bin/agpt-demo

bench: setup  ## run the benchmarks in tests/bench (ratios, not timed tests)
	@for b in tests/bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:  ## remove caches (keeps .venv)
	rm -rf .mypy_cache .ruff_cache .pytest_cache demo-out
