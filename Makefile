# paradiag: one command to try it, one command to test it (README.md opens with both; .ci/run calls `make test`).
SHELL := /bin/bash
PYTHON ?= python3
PEERS ?= $(HOME)/.cache/paradiag-peers
SAMPLE ?= sample_traces
export PARADIAG_HTA_PYTHON ?= $(PEERS)/hta/bin/python
export PARADIAG_MSPROF ?= $(PEERS)/msprof/bin/msprof-analyze

.PHONY: demo test setup-test lint peers

## Install paradiag and open a bundled sample job.
demo:
	$(PYTHON) -m pip install --quiet .
	paradiag serve sample_traces/gpu_llm_slow_rank

## Install everything the tests need (dev dependencies, Debian chromium + chromium-driver, peer tools)
## and run the whole suite: lint, types, tests.
test: setup-test lint
	$(PYTHON) -m pytest

setup-test: peers
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; fi
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[dev]'

lint:
	ruff check .
	mypy

## Peer tools (HTA, msprof-analyze), each in its own venv: their pins clash with ours.
peers: $(PEERS)/hta/.done $(PEERS)/msprof/.done

$(PEERS)/hta/.done:
	rm -rf $(PEERS)/hta && $(PYTHON) -m venv $(PEERS)/hta
	$(PEERS)/hta/bin/pip install --quiet --disable-pip-version-check --no-deps holistictraceanalysis==0.5.0
	$(PEERS)/hta/bin/pip install --quiet --disable-pip-version-check "pandas<3" "numpy<2.3" plotly networkx pydot psutil pyyaml
	touch $@

$(PEERS)/msprof/.done:
	rm -rf $(PEERS)/msprof && $(PYTHON) -m venv $(PEERS)/msprof
	$(PEERS)/msprof/bin/pip install --quiet --disable-pip-version-check msprof-analyze
	touch $@
