# Tocsin: `make run` runs the whole product, `make test` runs the whole suite.
# Both create the virtualenv on first use. Without DATABASE_URL / REDIS_URL / AWS settings
# they start embedded PostgreSQL, Redis and a local SES/SNS endpoint themselves.

PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
	&& echo $$p && break; done)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "Tocsin needs Python 3.11 or newer on PATH"; exit 1; }
	@echo "Creating $(VENV) with $(PYTHON) and installing Tocsin ..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/tocsin up

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python -m bench.scan

clean:
	rm -rf $(VENV) .tocsin test-artifacts .mypy_cache .ruff_cache .pytest_cache
