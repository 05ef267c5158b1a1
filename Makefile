# Loraplex — the two commands a newcomer needs: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test install services lint typecheck clean

run: install ## install, migrate and start the embedded all-in-one (SQLite, local store)
	$(VENV)/bin/loraplex up

test: install services ## set up what the tests need and run the whole suite
	$(PY) -m pytest

install: $(STAMP)

# torch is installed first and pinned: on CPU machines pip takes the local CPU wheel;
# letting the ml extra pull torch by range would fetch a multi-GB CUDA build.
$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[ml,dev]'
	touch $(STAMP)

services: ## PostgreSQL and Redis on loopback: reuse running ones, else start Debian's
	bash deploy/local/services.sh

lint:
	$(VENV)/bin/ruff check .

typecheck:
	$(VENV)/bin/mypy platform/serving/policy

clean:
	rm -rf var .pytest_cache .hypothesis
