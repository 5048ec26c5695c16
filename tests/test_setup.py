"""Where the course runs: the set-up files ask students only for what students need, agree on the
Python versions, and the Makefile picks its Python and its virtualenv as it says.

The Makefile is read with `make -n` (what it would run, nothing run) against a virtualenv folder
of the test's own, except where a test runs `make install` on a PATH where no Python can be found
(it stops before creating anything). Quick: no install, no kernel.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from minikafka.cli import main

ROOT = Path(__file__).resolve().parent.parent
SUPPORTED = ["3.11", "3.12", "3.13"]
MAKE = shutil.which("make") or "make"


def make(*args, cwd=ROOT, env=None, check=True):
    done = subprocess.run([MAKE, "--no-print-directory", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env=env)
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def dry_run(target, venv, *args, cwd=ROOT):
    "What `make TARGET` would run with a virtualenv still to build at `venv`."
    return make("-n", target, f"VENV={venv}", f"PYTHON={sys.executable}", *args, cwd=cwd).stdout


@pytest.mark.parametrize("target, args", [("lab", []), ("check", ["NB=exercises/01-the-log.ipynb"]),
                                          ("release", ["OUT=/tmp/x"]), ("grade", ["NB=submissions/"]),
                                          ("install", [])])
def test_students_targets_need_no_chromium_and_no_dev_extra(tmp_path, target, args):
    commands = dry_run(target, tmp_path / "venv", *args)
    assert "pip install --quiet -e '.[course,spark]'" in commands
    assert "ensure-chromium" not in commands
    assert "dev," not in commands and ".installed-dev" not in commands  # the dev extra: pytest, Playwright, ...


@pytest.mark.parametrize("target", ["test", "durations"])
def test_only_the_targets_that_run_the_browser_test_ensure_chromium(tmp_path, target):
    commands = dry_run(target, tmp_path / "venv")
    assert "sh .ci/ensure-chromium" in commands and "'.[course,dev,spark]'" in commands
    assert "ensure-chromium" not in dry_run("test-fast", tmp_path / "venv")
    assert "ensure-chromium" not in dry_run("test-core", tmp_path / "venv")


def test_the_inner_loop_leaves_out_real_processes_and_campaigns_and_ci_runs_them_on_every_python(tmp_path):
    from conftest import PROCESS_MODULES

    fast, core = dry_run("test-fast", tmp_path / "venv"), dry_run("test-core", tmp_path / "venv")
    assert "not processes and not campaign" in fast
    assert "not processes" not in core and "not campaign" not in core and "not slow" in core
    assert "make test-core" in (ROOT / ".ci" / "run").read_text()
    missing = sorted(m for m in PROCESS_MODULES if not (ROOT / "tests" / f"{m}.py").is_file())
    assert missing == [], f"PROCESS_MODULES names modules that do not exist: {missing}"


def fake_python(folder: Path, name: str, identity: str | None) -> Path:
    "An executable `name` that answers the Makefile's questions as `identity` would, or fails as a pyenv shim does."
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    body = (f'echo "{identity}"' if identity else
            f'echo "pyenv: {name}: command not found" >&2; exit 127')
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_no_python_that_runs_is_named_with_what_was_tried(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_python(bin_dir, "python3.13", None)  # a shim on PATH without its version
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    done = make("install", f"VENV={tmp_path / 'venv'}", env=env, check=False)
    assert done.returncode != 0
    assert ("minikafka needs Python 3.11 or newer: none of python3.13 python3.12 python3.11 runs here"
            in done.stdout)
    assert "make install PYTHON=/path/to/python3.12" in done.stdout
    assert not (tmp_path / "venv").exists()


def test_a_python_given_that_does_not_run_is_named(tmp_path):
    done = make("install", f"VENV={tmp_path / 'venv'}", "PYTHON=python3.99", check=False)
    assert done.returncode != 0 and "PYTHON=python3.99 does not run" in done.stdout
    assert not (tmp_path / "venv").exists()


def identity(python):
    return subprocess.run([python, "-c", 'import os, sys; print("%d.%d" % sys.version_info[:2], '
                           'os.path.realpath(getattr(sys, "_base_executable", sys.executable)))'],
                          capture_output=True, text=True, check=True).stdout.strip()


def installed_venv(folder: Path, python_identity: str) -> Path:
    "A virtualenv folder whose python says it was made by `python_identity`, installed after pyproject.toml."
    fake_python(folder / "bin", "python", python_identity)
    (folder / ".installed").touch()
    (folder / "etc" / "jupyter").mkdir(parents=True)
    (folder / "etc" / "jupyter" / "jupyter_nbconvert_config.json").touch()
    return folder


def test_a_venv_made_by_the_same_python_is_kept(tmp_path):
    venv = installed_venv(tmp_path / "venv", identity(sys.executable))
    assert "Nothing to be done for 'install'" in dry_run("install", venv)


@pytest.mark.parametrize("made_by, said", [
    ("3.10 /opt/python3.10/bin/python3.10", "was made by Python 3.10 (/opt/python3.10/bin/python3.10)"),
    (None, "was made by a Python that no longer runs")])
def test_a_venv_made_by_another_python_is_rebuilt_with_a_line_saying_so(tmp_path, made_by, said):
    venv = installed_venv(tmp_path / "venv", made_by)
    commands = dry_run("install", venv)
    python_id = identity(sys.executable).split(" ", 1)
    assert f"{said}; rebuilding it with Python {python_id[0]} ({python_id[1]})" in commands
    assert f"rm -rf {venv}\n" in commands and f"-m venv {venv}\n" in commands


def test_the_supported_versions_are_the_same_everywhere():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == f">={SUPPORTED[0]}"
    classified = [c.rsplit(" ", 1)[1] for c in project["classifiers"]
                  if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert classified == SUPPORTED
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^PYTHONS := (.*)$", makefile, re.M).group(1).split() == [
        f"python{v}" for v in reversed(SUPPORTED)]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r'^SUPPORTED="(.*)"$', ci, re.M).group(1).split() == SUPPORTED
    conda = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    assert f"python>={SUPPORTED[0]},<3.{int(SUPPORTED[-1].split('.')[1]) + 1}" in conda
    binder = yaml.safe_load((ROOT / ".binder" / "environment.yml").read_text())["dependencies"]
    assert [d.split("=")[1] for d in binder if str(d).startswith("python=")][0] in SUPPORTED
    readme = (ROOT / "README.md").read_text()
    assert "Python 3.11, 3.12 or 3.13" in readme


def test_binder_installs_java_17_graphviz_and_the_course_as_make_does():
    apt = [line.partition("#")[0].strip() for line in (ROOT / ".binder" / "apt.txt").read_text().splitlines()]
    assert sorted(p for p in apt if p) == ["graphviz", "openjdk-17-jre-headless"]
    post_build = ROOT / ".binder" / "postBuild"
    assert os.access(post_build, os.X_OK)
    assert "pip install --no-cache-dir -e '.[course,spark]'" in post_build.read_text()
    assert "-e '.[course,spark]'" in (ROOT / "Makefile").read_text()
    assert subprocess.run(["bash", "-n", str(post_build)]).returncode == 0


def test_the_notebooks_extra_is_the_course_without_jupyterlab():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    # ... and without the course's jsonschema pin (its import time, for our own JupyterLab and CLI):
    # a hosted Jupyter keeps the jsonschema its own server stack was installed with.
    assert sorted(extras["notebooks"]) == sorted(d for d in extras["course"] if not d.startswith(("jupyterlab", "jsonschema")))


def test_the_release_ships_what_students_targets_use_and_says_it_has_no_tests(tmp_path):
    out = tmp_path / "release"
    assert main(["release", str(out)]) == 0
    assert sorted(p.name for p in (out / ".ci").iterdir()) == ["ensure-graphviz", "jupyter_nbconvert_config.json"]
    assert sorted(p.name for p in (out / ".binder").iterdir()) == ["apt.txt", "environment.yml", "postBuild"]
    assert os.access(out / ".binder" / "postBuild", os.X_OK)
    for target, args in (("lab", []), ("check", ["NB=exercises/01-the-log.ipynb"])):
        commands = dry_run(target, tmp_path / "venv", *args, cwd=out)
        assert "'.[course,spark]'" in commands and "chromium" not in commands
    done = make("test", f"VENV={tmp_path / 'venv'}", f"PYTHON={sys.executable}", cwd=out, check=False)
    assert done.returncode == 2
    assert "this copy of the course has no tests; check an exercise with: make check NB=" in done.stdout
    assert not (tmp_path / "venv").exists()
