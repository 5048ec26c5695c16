# minikafka: one command to install and test, one to install and teach.
#   make lab    creates .venv, installs what a student needs, then JupyterLab on the repository (notebooks/ first)
#   make check NB=exercises/01-the-log.ipynb   a student's check (what the grader will say)
#   make test   the same install plus the test tools, runs every test (what CI runs; the browser test needs Chromium)
#   make test-fast  the inner loop: no notebooks, no Spark, no browser, no real processes, no campaign of seconds
#   make test-core  what CI runs on its other Pythons: test-fast plus real processes and campaigns
#   make grade NB=submissions/ [CSV=grades.csv]  the grader (instructors)
#   make release OUT=../minikafka-students     what students get: no solutions, no hidden checks
#   make bench  the benchmarks (and the optional `bench` extra: Tansu, a peer broker); figures go to benchmarks/RESULTS.md
#   make seed-sweep [ARGS="--seeds 1:201 --only 06:hidden-ex1-judge"]  every judge call of solutions/ on Kafka's rules over many
#               grading seeds (hours; low priority, one process): a seed that fails Kafka's rule is a false positive
#
# Python: the newest of python3.13, python3.12, python3.11 on PATH that runs (a pyenv shim can be on
# PATH and still fail to run: it is skipped), or PYTHON=/path/to/python3.1x. The virtualenv (VENV,
# .venv by default) runs on the Python that built it: when that is another version or interpreter
# than PYTHON (or no longer runs), it is rebuilt, with a line saying so.

PYTHONS := python3.13 python3.12 python3.11
ifeq ($(strip $(PYTHON)),)
  PYTHON := $(firstword $(foreach p,$(PYTHONS),$(shell $(p) -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && echo $(p))))
endif
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEV    := $(VENV)/.installed-dev
# pytest workers for make test (tests/conftest.py says what each runs, heaviest first)
JOBS   ?= 2
# Playwright drives Debian's Chromium (.ci/ensure-chromium); it must never fetch a browser of its own.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD := 1

# "3.13 /usr/bin/python3.13": the version and the interpreter of PYTHON, and of the Python that made
# $(VENV) (empty if that one no longer runs).
IDENTIFY  := -c 'import os, sys; print("%d.%d" % sys.version_info[:2], os.path.realpath(getattr(sys, "_base_executable", sys.executable)))'
PYTHON_ID := $(if $(PYTHON),$(shell $(PYTHON) $(IDENTIFY) 2>/dev/null))
ifneq ($(and $(PYTHON),$(wildcard $(VENV))),)
  VENV_ID := $(shell $(PY) $(IDENTIFY) 2>/dev/null)
  ifneq ($(PYTHON_ID),$(VENV_ID))
    STALE_VENV := 1
  endif
endif

.PHONY: install install-dev test test-fast test-core durations lab bench seed-sweep exercises check grade release clean FORCE

# nbconvert in .venv saves only the widgets a notebook shows (minikafka/widget_state.py), so a
# lecture re-executed with `jupyter nbconvert --execute` keeps no closed dashboard's widgets.
NBCONVERT_CONFIG := $(VENV)/etc/jupyter/jupyter_nbconvert_config.json

# What students need (the course and the capstone); the test tools (the dev extra) come on top for
# the test targets only. Neither needs Chromium: only the browser test does (make test).
install: $(STAMP) $(NBCONVERT_CONFIG)
install-dev: $(DEV) $(NBCONVERT_CONFIG)

$(NBCONVERT_CONFIG): .ci/jupyter_nbconvert_config.json $(STAMP)
	@mkdir -p $(dir $@)
	cp $< $@

# Why no Python will do, and what to type instead.
RETRY     := make $(or $(MAKECMDGOALS),install) PYTHON=/path/to/python3.12
NO_PYTHON := minikafka needs Python 3.11 or newer: none of $(PYTHONS) runs here (a pyenv shim on PATH without its version fails too). Install one, or name it: $(RETRY)

$(STAMP): pyproject.toml $(if $(STALE_VENV),FORCE)
	@test -n "$(PYTHON)" || { echo "$(NO_PYTHON)"; exit 1; }
	@test -n "$(PYTHON_ID)" || { echo "PYTHON=$(PYTHON) does not run; name a Python 3.11 or newer: $(RETRY)"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "PYTHON=$(PYTHON) is Python $(word 1,$(PYTHON_ID)); minikafka needs 3.11 or newer: $(RETRY)"; exit 1; }
ifdef STALE_VENV
	@echo "$(VENV) was made by $(if $(VENV_ID),Python $(word 1,$(VENV_ID)) ($(word 2,$(VENV_ID))),a Python that no longer runs); rebuilding it with Python $(word 1,$(PYTHON_ID)) ($(word 2,$(PYTHON_ID)))"
	rm -rf $(VENV)
endif
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade --quiet pip
	$(PY) -m pip install --quiet -e '.[course,spark]'
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	@sh .ci/ensure-graphviz
	@touch $@

$(DEV): $(STAMP)
	$(PY) -m pip install --quiet -e '.[course,dev,spark]'
	@touch $@

ifneq ($(wildcard tests/conftest.py),)
# The suite starts hundreds of Python processes (brokers, controllers, kernels, sandboxes): each
# would compile the package again, and each pytest worker rewrite every test module again, where a
# machine sets PYTHONDONTWRITEBYTECODE. The test targets write bytecode (__pycache__/, ignored by git).
PYTEST := PYTHONDONTWRITEBYTECODE= $(PY) -m pytest
# The 30 slowest steps are listed at the end of every run, so each one shows where the time goes.
# The browser test (tests/test_browser.py) drives Debian's Chromium: only the targets that run it ensure it.
test: $(DEV) $(NBCONVERT_CONFIG)
	@sh .ci/ensure-chromium
	$(PYTEST) -n $(JOBS) --durations=30

# The inner loop: no notebooks, no Spark, no browser, no real processes, no campaign of seconds.
test-fast: $(DEV) $(NBCONVERT_CONFIG)
	$(PYTEST) -n $(JOBS) -m "not notebooks and not spark and not browser and not processes and not campaign and not slow"

# What CI runs on each other supported Python: test-fast plus the real processes and the campaigns
# (no notebooks, no Spark, no browser, no long campaign).
test-core: $(DEV) $(NBCONVERT_CONFIG)
	$(PYTEST) -n $(JOBS) -m "not notebooks and not spark and not browser and not slow"

# The whole suite, then tests/durations.json rewritten with what each unit of work took.
durations: $(DEV) $(NBCONVERT_CONFIG)
	@sh .ci/ensure-chromium
	$(PYTEST) -n $(JOBS) --store-durations
else
# The student release has no tests/ (their fixtures hold solutions).
test test-fast test-core durations:
	@echo "this copy of the course has no tests; check an exercise with: make check NB=exercises/01-the-log.ipynb"; exit 2
endif

# Rooted at the repository so exercises/ is reachable too; the file browser opens on notebooks/.
# $(VENV)/bin goes first on PATH so `minikafka check ...` works in JupyterLab's terminal and in `!` cells.
lab: $(STAMP) $(NBCONVERT_CONFIG)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" \
		--LabApp.default_url=/lab/tree/notebooks $(if $(filter 0,$(shell id -u)),--allow-root,)

bench: $(DEV)
	@test -d benchmarks || { echo "this copy of the course has no benchmarks/"; exit 2; }
	@$(PY) -m pip install --quiet -e '.[bench]' || echo "the optional bench extra (Tansu, a peer broker) did not install: the peer benchmark will say it did not run"
	$(PY) -m benchmarks

# Appends to seed-sweep.jsonl (a second run skips what it holds); exits 1 if any seed failed.
seed-sweep: $(STAMP)
	@test -d benchmarks || { echo "this copy of the course has no benchmarks/"; exit 2; }
	nice -n 10 $(PY) -m benchmarks.seed_sweep $(ARGS)

exercises: $(STAMP) $(NBCONVERT_CONFIG)
	$(VENV)/bin/minikafka exercises

check: $(STAMP)
	@test -n "$(NB)" || { echo "usage: make check NB=exercises/NN-name.ipynb"; exit 2; }
	$(VENV)/bin/minikafka check $(NB)

grade: $(STAMP)
	@test -n "$(NB)" || { echo "usage: make grade NB=path/to/submissions/ [CSV=grades.csv] [ASSIGNMENT=NN-name]"; exit 2; }
	$(VENV)/bin/minikafka grade $(NB) $(if $(CSV),--csv $(CSV) --feedback $(basename $(CSV))-feedback,) \
		$(if $(ASSIGNMENT),--assignment $(ASSIGNMENT),)

release: $(STAMP)
	@test -n "$(OUT)" || { echo "usage: make release OUT=../minikafka-students"; exit 2; }
	$(VENV)/bin/minikafka release $(OUT)

clean:
	rm -rf $(VENV) .pytest_cache
