"""The sealed sandbox and the cheats that must earn 0 (issue 34, items 1, 4 and part of 6).

A submission's kernel must see the package as installed, the standard library and nothing else
of the repository or the folders beside it: no .git (whose history holds solutions/), no
exercises/, notebooks/, tests/fixtures/.../solutions/. `test_nothing_readable_from_a_submission_
holds_a_hidden_check_or_a_solution` walks / from inside a graded kernel and reads every file.

Then the cheats, each against the small fixture course (tests/fixtures/course) so each test is a
few seconds: reading the solutions from .git, notebooks/ or exercises/; SystemExit,
KeyboardInterrupt and os._exit in a check; replaying the visible expected outputs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from minikafka.course.grade import Settings
from minikafka.course.gradebook import feedback, grade_all
from minikafka.course.runner import run_cells
from minikafka.course.sandbox import Limits, Sandbox

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "course"
REFERENCES = FIXTURE / "solutions"
SAMPLE = REFERENCES / "99-sample.ipynb"
SAMPLE_EXERCISE = FIXTURE / "exercises" / "99-sample.ipynb"
SANITIZE = ROOT / "tests" / "nbval-sanitize.cfg"
FAST = Settings(sanitize=SANITIZE, cell_timeout=10, budget=30)
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the sealed sandbox needs root")
PACKAGE = ROOT / "minikafka"

GOOD_LOOKUP = ("def lookup(index, target):\n"
               "    best = None\n"
               "    for entry in index:\n"
               "        if entry[0] <= target:\n"
               "            best = entry\n"
               "    return best")
GOOD_START = "start_position = lookup(INDEX, 250)[1]\nprint(\"start scanning at byte\", start_position)"


# -- what a submission can read -------------------------------------------------------------------

def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def markers() -> list[str]:
    """Strings that only a hidden check, a solution or a reference cell holds (never the package):
    each hidden cell's longest line (its code: a bare "# Grader only:" is quoted in prose, the
    issue tracker's included), and each long line of code between a solution's markers that the
    package's own source does not contain."""
    package = "\n".join(p.read_text(errors="replace") for p in PACKAGE.rglob("*.py"))
    found = set()
    for notebook in [*sorted((ROOT / "solutions").glob("*.ipynb")), SAMPLE]:
        for cell in _cells(notebook):
            tags = cell.get("metadata", {}).get("tags", [])
            lines = [line.strip() for line in _source(cell).split("\n")]
            if "hidden" in tags:
                found.add(max(lines, key=len))
            elif "exercise" in tags:
                inside = False
                for line in lines:
                    if line.startswith("### BEGIN SOLUTION") or line.startswith("### END SOLUTION"):
                        inside = line.startswith("### BEGIN")
                    elif inside and len(line) >= 30 and line not in package:
                        found.add(line)
    return sorted(found)


# Runs in the sandboxed kernel. Every name under / (bar the kernel's own /proc, /sys and /dev) is
# listed, and any .git fails; grep reads every readable file for the markers (fixed strings) and
# for a solution marker followed by a line break (a notebook's JSON "\n" or a real one: the
# package only names the marker in prose). Reading all of a machine's 20 GB is no unit test: grep
# reads every notebook, and every file of at most 2 MB written in the last 30 days (the course,
# its clones and copies, the venv; not the OS's and the package mirror's files, older).
WALK = r"""
import os, subprocess, json
MARKERS, REPO = {markers!r}, {repo!r}
readable, gits = 0, []
tops = [os.path.join("/", n) for n in sorted(os.listdir("/")) if n not in ("proc", "sys", "dev")]
for top in tops:
    for folder, dirs, files in os.walk(top):
        gits += [os.path.join(folder, n) for n in dirs + files if n == ".git"]
        readable += sum(os.access(os.path.join(folder, f), os.R_OK) for f in files)
with open("markers.txt", "w") as f:
    f.write("\n".join(MARKERS) + "\n")
listed = subprocess.run(["find", *tops, "-type", "f", "-readable", "(", "-name", "*.ipynb", "-o", "(",
                         "-size", "-2M", "-mtime", "-30", ")", ")", "!", "-path", os.path.abspath("markers.txt"),
                         "-print0"], capture_output=True).stdout
with open("files.txt", "wb") as f:
    f.write(listed)
def grep(*how):
    done = subprocess.run(["xargs", "-0", "-a", "files.txt", "grep", "-ls", *how], capture_output=True, text=True)
    return sorted(done.stdout.split())
git = subprocess.run(["git", "-c", "safe.directory=*", "-C", REPO, "show", "HEAD:tests/fixtures/course/solutions/99-sample.ipynb"],
                     capture_output=True, text=True)
print(json.dumps({{"readable": readable, "read": listed.count(b"\0"), "gits": gits,
                  "hits": grep("-F", "-f", "markers.txt"), "solutions": grep("-E", r"### BEGIN SOLUTION(\\n|$)"),
                  "git_show": git.returncode == 0 and "BEGIN SOLUTION" in git.stdout,
                  "repo": sorted(os.listdir(REPO)) if os.path.isdir(REPO) else None,
                  "beside": sorted(os.listdir(os.path.dirname(REPO))) if os.path.isdir(os.path.dirname(REPO)) else None}}))
"""


@pytest.mark.notebooks
@ROOT_ONLY
def test_nothing_readable_from_a_submission_holds_a_hidden_check_or_a_solution():
    found = markers()
    assert len(found) > 50
    host = subprocess.run(["grep", "-rlsF", "-e", found[0], "-e", found[-1], str(ROOT / "solutions"),
                           str(REFERENCES)], capture_output=True, text=True).stdout.split()
    assert host  # the markers are real: the host finds them
    # The hidden paths are the grader's (grade_all): the references and the class's folder.
    with Sandbox(Limits(), hide=(ROOT / "solutions",)) as box:
        [run] = run_cells(box, [WALK.format(markers=found, repo=str(ROOT))], cell_timeout=600, budget=600)
    assert run.status == "ok", run.reason
    seen = json.loads("".join(o.get("text", "") for o in run.outputs if o.get("output_type") == "stream"))
    assert seen["readable"] > 1000 and seen["read"] > 1000  # the standard library and the venv are there
    assert seen["hits"] == [] and seen["solutions"] == [] and seen["gits"] == [], seen
    assert not seen["git_show"]
    assert set(seen["repo"]) <= {"minikafka", ".venv"}, seen["repo"]  # the package and its venv only
    assert seen["beside"] == [ROOT.name], seen["beside"]  # nothing beside the repository


@ROOT_ONLY
def test_the_package_is_read_only_and_imports_inside_the_sandbox():
    probe = ("import minikafka, minikafka.course, os\n"
             "print(os.path.dirname(minikafka.__file__) == {pkg!r})\n"
             "try:\n    open(os.path.join({pkg!r}, 'pwned.py'), 'w')\n    print('written')\n"
             "except OSError as exc:\n    print(type(exc).__name__)\n").format(pkg=str(PACKAGE))
    with Sandbox(Limits()) as box:
        [run] = run_cells(box, [probe], cell_timeout=60, budget=60)
    assert run.status == "ok", run.reason
    assert "".join(o.get("text", "") for o in run.outputs).split() == ["True", "OSError"]
    assert not (PACKAGE / "pwned.py").exists()
