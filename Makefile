# Tocsin: `make run` runs the whole product, `make test` runs the whole suite.
# Both create the virtualenv on first use. Without DATABASE_URL / REDIS_URL / AWS settings
# they start embedded PostgreSQL, Redis and a local SES/SNS endpoint themselves.

ifndef PYTHON
PYTHON := $(shell for p in python3 python3.13 python3.12 python3.11; do \
	$$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && echo $$p && break; done)
endif
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test test-rabbitmq lint chromium bench bench-portal clean

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

# The browser tests drive Debian's Chromium (Playwright cannot download browsers here).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing Debian's chromium for the browser tests ..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "The browser tests need Chromium: sudo apt-get install chromium"; exit 1; \
	  fi; }

test: lint chromium
	$(BIN)/pytest

# The integration and system tiers with RabbitMQ as the broker (publisher confirms on)
# instead of Redis; each run makes a vhost of its own there and deletes it afterwards.
RABBITMQ_URL ?= amqp://guest:guest@127.0.0.1:5672/%2F
test-rabbitmq: $(STAMP)
	BROKER_URL='$(RABBITMQ_URL)' $(BIN)/pytest tests/integration tests/system

bench: $(STAMP)
	$(BIN)/python -m bench.scan

bench-portal: $(STAMP)
	$(BIN)/python -m bench.portal

clean:
	rm -rf $(VENV) .tocsin test-artifacts .mypy_cache .ruff_cache .pytest_cache
