# paradiag: one command to try it, one command to test it (README.md opens with both; .ci/run calls `make test`).
# Everything runs in the project's own virtual environment ($(VENV), ignored by git), created from any
# Python >= 3.11 found as $(PYTHON); the system interpreter's site-packages are never touched.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PEERS ?= $(HOME)/.cache/paradiag-peers
# Build tools pinned where the build needs them: a PEP 639 licence string needs setuptools >= 77.
BUILD_TOOLS := "pip>=24" "setuptools>=77,<90" "wheel>=0.44"
export PARADIAG_HTA_PYTHON ?= $(PEERS)/hta/bin/python
export PARADIAG_MSPROF ?= $(PEERS)/msprof/bin/msprof-analyze
export PARADIAG_TORCH_PYTHON ?= $(PEERS)/torch/bin/python
# Extra pip options for torch, e.g. TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu" where the
# default index would fetch a CUDA build of several GB (this machine's pip finds the CPU wheel on disk).
TORCH_PIP_ARGS ?=

.PHONY: demo test unit venv setup-test browser lint peers

## Install paradiag into .venv and open a bundled sample job.
demo: $(VENV)/.ready
	$(VENV)/bin/paradiag serve sample_traces/gpu_llm_slow_rank

## Install everything the tests need (dev dependencies, Debian chromium + chromium-driver, peer tools)
## and run the whole suite: lint, types, tests: the unit tests under coverage, which fails below its floor
## (fail_under in pyproject.toml), then the others (tests/conftest.py says which). Coverage measures the unit
## tests only: on the others (servers, browsers, big jobs) its tracer would cost far more than 15 % of the time.
## Both runs run; either failing fails the target.
test: setup-test lint
	status=0; $(PY) -m pytest --unit --cov || status=$$?; $(PY) -m pytest --not-unit || status=$$?; exit $$status

## The fast tests only, in under a minute (no browser, no real or peer-tool jobs, no big simulated jobs, no
## servers): a test is one unless marked slow, browser, real or peer (tests/conftest.py).
unit: $(VENV)/.ready
	$(PY) -m pytest --unit -q

venv: $(VENV)/.ready

$(VENV)/.ready: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "paradiag needs Python >= 3.11 (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade $(BUILD_TOOLS)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[web,dev]'  # the dashboard (web) and the tests' tools
	$(PY) -m paradiag.app.plotly_bundle  # plotly.js's cartesian bundle from the npm registry (app/plotly_bundle.py)
	touch $@

setup-test: $(VENV)/.ready browser peers

## Debian chromium + chromium-driver for the browser tests, and jemalloc for the real jobs' ranks (glibc's malloc
## makes a profiled CPU rank's large-output operators 4-30x slower at random: tests/realjobs/__init__.py); apt as
## root, else through sudo.
browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null \
		|| ! /sbin/ldconfig -p | grep -q libjemalloc.so.2; then \
		sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq chromium chromium-driver libjemalloc2; fi

lint: $(VENV)/.ready
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

## Peer tools (HTA, msprof-analyze), each in its own venv: their pins clash with ours; and PyTorch (CPU) for the
## real torch.distributed jobs of tests/realjobs (never a dependency of paradiag).
peers: $(PEERS)/hta/.done $(PEERS)/msprof/.done $(PEERS)/torch/.done

$(PEERS)/hta/.done:
	rm -rf $(PEERS)/hta && $(PYTHON) -m venv $(PEERS)/hta
	$(PEERS)/hta/bin/pip install --quiet --disable-pip-version-check --no-deps holistictraceanalysis==0.5.0
	$(PEERS)/hta/bin/pip install --quiet --disable-pip-version-check "pandas<3" "numpy<2.3" plotly networkx pydot psutil pyyaml
	touch $@

$(PEERS)/msprof/.done:
	rm -rf $(PEERS)/msprof && $(PYTHON) -m venv $(PEERS)/msprof
	$(PEERS)/msprof/bin/pip install --quiet --disable-pip-version-check msprof-analyze
	touch $@

# A venv that already holds torch 2.13.0 (made by hand) is kept, not rebuilt.
$(PEERS)/torch/.done:
	@if ! $(PEERS)/torch/bin/python -c 'import sys, numpy, torch, torch.distributed as d; sys.exit(not (torch.__version__.startswith("2.13.0") and d.is_available()))' 2>/dev/null; then \
		rm -rf $(PEERS)/torch && $(PYTHON) -m venv $(PEERS)/torch && \
		$(PEERS)/torch/bin/pip install --quiet --disable-pip-version-check $(TORCH_PIP_ARGS) torch==2.13.0 numpy; fi
	touch $@
