# minikafka: one command to install and test, one to install and teach.
#   make test   creates .venv, installs everything, runs every test (what CI runs)
#   make lab    the same install, then JupyterLab on notebooks/
#   make bench  the benchmarks (and the optional `bench` extra: Tansu, a peer broker); figures go to benchmarks/RESULTS.md

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
JOBS   ?= 2

.PHONY: install test test-fast lab bench exercises grade clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "minikafka needs Python 3.11: '$(PYTHON)' was not found (set PYTHON=/path/to/python3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade --quiet pip
	$(PY) -m pip install --quiet -e '.[course,dev,spark]'
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	@sh .ci/ensure-graphviz
	@touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest

test-fast: $(STAMP)
	$(PY) -m pytest -m "not notebooks"

lab: $(STAMP)
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root,)

bench: $(STAMP)
	@$(PY) -m pip install --quiet -e '.[bench]' || echo "the optional bench extra (Tansu, a peer broker) did not install: the peer benchmark will say it did not run"
	$(PY) -m benchmarks

exercises: $(STAMP)
	$(VENV)/bin/minikafka exercises

grade: $(STAMP)
	@test -n "$(NB)" || { echo "usage: make grade NB=path/to/submission.ipynb (or a folder of them)"; exit 2; }
	$(VENV)/bin/minikafka grade $(NB)

clean:
	rm -rf $(VENV) .pytest_cache
