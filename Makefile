# ctxview: `make run` serves the demo, `make test` runs the whole suite.
# Both create the virtualenv and install everything on first use.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test test-fast lint bench clean browser node-clients

$(STAMP): requirements.txt sdk/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet -e 'sdk[proxy]'
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

# The Node clients the proxy tests drive (the official @anthropic-ai/sdk, the Claude Code CLI, the
# Codex CLI and the Gemini CLI), pinned by their committed package-lock.json files; installed only
# when absent.
node-clients:
	@for dir in tests/clients/node tests/clients/claude_code tests/clients/codex tests/clients/gemini_cli; do \
	  test -d $$dir/node_modules || npm ci --prefix $$dir --no-audit --no-fund --loglevel=error; \
	done

run: $(STAMP)
	DEBUG=$${DEBUG:-1} $(PY) manage.py migrate --noinput
	DEBUG=$${DEBUG:-1} CTXVIEW_DEMO_HOST=$(HOST):$(PORT) $(PY) manage.py seed_demo
	@if [ -n "$$REDIS_URL" ]; then \
	  echo "REDIS_URL is set: starting a Celery worker and beat"; \
	  DEBUG=$${DEBUG:-1} $(VENV)/bin/celery -A ctxview worker --beat --loglevel=INFO --concurrency=2 & \
	fi; \
	DEBUG=$${DEBUG:-1} $(PY) manage.py runserver $(HOST):$(PORT)

# The suite runs in TEST_WORKERS processes (pytest-xdist), each with its own test database,
# live server and Chromium; tests of one xdist_group share a process. Bytecode is written even
# where PYTHONDONTWRITEBYTECODE is set: otherwise every process compiles every module, and
# pytest rewrites every test module's asserts, again on each run.
TEST_WORKERS ?= 2
PYTEST := SECRET_KEY=$${SECRET_KEY:-test-only-secret-key} PYTHONDONTWRITEBYTECODE= $(PY) -m pytest \
	-n $(TEST_WORKERS) --dist loadgroup

test: $(STAMP) browser node-clients
	$(PYTEST) $(PYTEST_ARGS)

# Everything but the browser, live-server and property-based (fuzz) tests: markers from conftest.py.
test-fast: $(STAMP) node-clients
	$(PYTEST) -m "not browser and not live and not fuzz" $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	SECRET_KEY=lint $(VENV)/bin/mypy ctxview manifests
	$(VENV)/bin/mypy --config-file sdk/pyproject.toml sdk/ctxkit

bench: $(STAMP)
	$(PY) bench/ingest.py

clean:
	rm -rf $(VENV) staticfiles ctxview.sqlite3 ctxview.sqlite3-*
