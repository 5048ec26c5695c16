"""Build the students' copy of the course (nbgrader's "release" step).

Theory of operation: the instructor's repository holds solutions/ (reference code and the hidden,
grader-only checks) and everything students need. `release(root, out)` copies into `out` only
what students get: the lectures (notebooks/), the exercises (exercises/, regenerated from
solutions/ in memory first, so a stale folder cannot leak or miss anything), the package
(minikafka/), the set-up files (pyproject.toml, Makefile, README.md, environment.yml, the Binder
configuration .binder/, and from .ci/ only what the students' make targets use) and the nbval
sanitize file the check uses. The Makefile is the instructor's: in a copy without tests/ its test
targets say so, and none of the students' targets (lab, check) needs Chromium or the dev extra.
It never copies solutions/, tests/ (whose fixtures hold solutions too), benchmarks/ or the CI
scripts, and it refuses to finish if any solution marker or hidden check cell made it into the copy.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from . import BEGIN_MARKER, HIDDEN_TAG
from .exercises import render

TOP_FILES = ["README.md", "pyproject.toml", "Makefile", "environment.yml", ".gitignore"]
TREES = ["notebooks", "minikafka", ".binder"]
# What `make lab` and `make check` run from .ci/ (not the CI script, not the browser's installer).
CI_FILES = ["ensure-graphviz", "jupyter_nbconvert_config.json"]
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", "*.egg-info")


class ReleaseError(ValueError):
    pass


def release(root: Path, out: Path, *, force: bool = False) -> int:
    """Write the student release of the project at `root` into `out`; returns the file count."""
    root, out = root.resolve(), out.resolve()
    if not (root / "solutions").is_dir():
        raise ReleaseError(f"{root} has no solutions/ folder: is it the instructor's repository?")
    if out == root or root in out.parents and out.parent == root:
        raise ReleaseError(f"{out} is inside the repository; choose a folder outside it")
    if out.exists():
        if not force:
            raise ReleaseError(f"{out} exists; use --force to replace it")
        shutil.rmtree(out)
    exercises = render(root / "solutions")  # raises MarkerError on a bad solutions notebook
    out.mkdir(parents=True)
    for name in TOP_FILES:
        if (root / name).is_file():
            shutil.copy2(root / name, out / name)
    for tree in TREES:
        if (root / tree).is_dir():
            shutil.copytree(root / tree, out / tree, ignore=_IGNORE)
    (out / ".ci").mkdir()
    for name in CI_FILES:
        shutil.copy2(root / ".ci" / name, out / ".ci" / name)
    (out / "exercises").mkdir()
    for name, text in exercises.items():
        (out / "exercises" / name).write_bytes(text.encode("utf-8"))
    (out / "tests").mkdir()
    shutil.copy2(root / "tests" / "nbval-sanitize.cfg", out / "tests" / "nbval-sanitize.cfg")
    _verify(out)
    return sum(1 for p in out.rglob("*") if p.is_file())


def _verify(out: Path) -> None:
    if (out / "solutions").exists():
        raise ReleaseError("solutions/ ended up in the release")
    for path in (out / "exercises").glob("*.ipynb"):
        text = path.read_text(encoding="utf-8")
        if BEGIN_MARKER in text or f'"{HIDDEN_TAG}"' in text:
            raise ReleaseError(f"{path.name} in the release holds a solution or a hidden check")
