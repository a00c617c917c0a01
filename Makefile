# ctxview: `make run` serves the demo, `make test` runs the whole suite.
# Both create the virtualenv and install everything on first use.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test lint bench clean browser

$(STAMP): requirements.txt sdk/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet -e sdk
	touch $(STAMP)

# Headless Chromium for the browser tests (Debian's package; Playwright's own
# browser download does not work offline), and the vendored plotly.js checked against its pinned
# digest (static/vendor/README.md; the dashboard never loads it from a CDN).
browser: $(STAMP)
	@test -x /usr/bin/chromium || \
	  { echo "installing Debian's chromium for the browser tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@test -x /usr/bin/chromium || { echo "Debian's chromium is missing: the browser tests cannot run" >&2; exit 1; }
	@SECRET_KEY=$${SECRET_KEY:-vendor-step-only} $(PY) manage.py vendor_plotly

run: $(STAMP)
	DEBUG=$${DEBUG:-1} $(PY) manage.py migrate --noinput
	DEBUG=$${DEBUG:-1} CTXVIEW_DEMO_HOST=$(HOST):$(PORT) $(PY) manage.py seed_demo
	@if [ -n "$$REDIS_URL" ]; then \
	  echo "REDIS_URL is set: starting a Celery worker and beat"; \
	  DEBUG=$${DEBUG:-1} $(VENV)/bin/celery -A ctxview worker --beat --loglevel=INFO --concurrency=2 & \
	fi; \
	DEBUG=$${DEBUG:-1} $(PY) manage.py runserver $(HOST):$(PORT)

test: $(STAMP) browser
	SECRET_KEY=$${SECRET_KEY:-test-only-secret-key} $(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	SECRET_KEY=lint $(VENV)/bin/mypy ctxview manifests
	$(VENV)/bin/mypy --config-file sdk/pyproject.toml sdk/ctxkit

bench: $(STAMP)
	$(PY) bench/ingest.py

clean:
	rm -rf $(VENV) staticfiles ctxview.sqlite3 ctxview.sqlite3-*
