# Loraplex — the two commands a newcomer needs: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test install services browser prometheus oidc screenshots lint typecheck clean

run: install ## install, migrate and start the embedded all-in-one (SQLite, local store)
	$(VENV)/bin/loraplex up

test: install services browser prometheus oidc ## set up what the tests need and run the whole suite
	$(PY) -m pytest

install: $(STAMP)

# torch is installed first and pinned: on CPU machines pip takes the local CPU wheel;
# letting the ml extra pull torch by range would fetch a multi-GB CUDA build.
# The console's front-end libraries (htmx) come from npm into web/node_modules.
$(STAMP): pyproject.toml setup.py web/package-lock.json
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	npm ci --prefix web --no-audit --no-fund --loglevel=error
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[ml,dev]'
	touch $(STAMP)

services: ## PostgreSQL and Redis on loopback: reuse running ones, else start Debian's
	bash deploy/local/services.sh

browser: ## Debian's Chromium, for the console's browser tests
	bash deploy/local/browser.sh

prometheus: ## Debian's prometheus and promtool, for the rule tests and the system harness
	bash deploy/local/prometheus.sh

oidc: tests/support/oidc/node_modules/.package-lock.json ## the OpenID Provider the single sign-on tests start (Node)

tests/support/oidc/node_modules/.package-lock.json: tests/support/oidc/package-lock.json
	npm ci --prefix tests/support/oidc --no-audit --no-fund --loglevel=error

screenshots: install services browser ## every console and admin page at laptop and phone width, into var/screenshots/
	LORAPLEX_SCREENSHOTS=$(CURDIR)/var/screenshots $(PY) -m pytest -q tests/integration/web

lint:
	$(VENV)/bin/ruff check .

typecheck:
	$(VENV)/bin/mypy platform/serving/policy
	$(VENV)/bin/mypy --strict platform/gateway/admission/core
	$(VENV)/bin/mypy --strict platform/control/budgets/money.py
	$(VENV)/bin/mypy --strict platform/control/canary

clean:
	rm -rf var .pytest_cache .hypothesis
