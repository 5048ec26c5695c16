"""Grade submitted exercise notebooks against the reference solutions, with nbval.

Theory of operation: for each submission `.../NN-name.ipynb`, take the reference notebook of the
same file name from solutions/, put the submission's exercise-cell sources into a copy of it (cells
matched by id; by position among the `exercise` cells when ids do not match, which is reported),
and run nbval on that copy in a temporary directory, in a separate pytest process. The checks are
the reference's code cells tagged `check`, and those tagged `exercise` that have outputs (one that
only defines a function is graded by its check cells); a check passes when nbval ran the cell
without an exception and its outputs equal the reference outputs (after sanitizing). The score is
checks passed / total.

Invariants:

- Only the sources of the student's exercise cells are used. Everything else (check cells, setup
  cells, stored outputs, cell tags) comes from the reference, so a student who ran wrong code and
  saved the matching outputs still fails, and cannot retag or rewrite a check.
- nbval comment markers (`# NBVAL_SKIP`, `# NBVAL_IGNORE_OUTPUT`, ...) in a student's cell are
  neutralized unless the reference cell carries the same marker.
- A reference exercise cell that the submission lacks is graded as its untouched stub.
- Output is deterministic: submissions in sorted order, no timings, no temporary paths.

It must never modify a submission or a reference notebook, and never crash on one bad submission
(a missing reference, unreadable JSON, nbval failing to start): that becomes a row with a message.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from . import CHECK_TAG, EXERCISE_TAG
from .exercises import MarkerError, cell_tags, dumps, read_notebook, source_text, stub_source

DEFAULT_CELL_TIMEOUT = 300  # seconds; the same as the project's own nbval run
_ANSI = re.compile(r"(?:\x1b|#x1B)\[[0-9;]*[A-Za-z]")  # junit xml spells ESC "#x1B"
_NBVAL_MARKER = re.compile(r"^(\s*)#+\s*((?:NBVAL|PYTEST_VALIDATE)_\w+)\s*$")


@dataclass
class Check:
    label: str          # "exercise 2", "check 1": numbered in notebook order, per kind
    cell_id: str | None
    code_cell: int      # index among code cells: nbval's "Cell N"
    passed: bool = False
    reason: str = ""    # why it failed: "output differs", "NotImplementedError: ...", ...


@dataclass
class Result:
    submission: str
    notebook: str | None = None
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # set when the submission could not be graded at all

    @property
    def passed(self) -> int:
        return sum(check.passed for check in self.checks)

    @property
    def total(self) -> int:
        return len(self.checks)

    def as_dict(self) -> dict:
        data = asdict(self)
        data.update(passed=self.passed, total=self.total)
        return data


def find_submissions(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*.ipynb")
                  if not any(part.startswith(".") for part in p.relative_to(path).parts))


def _code_cells(nb) -> list[dict]:
    return [cell for cell in nb["cells"] if cell["cell_type"] == "code"]


def _exercise_cells(nb) -> list[dict]:
    return [cell for cell in _code_cells(nb) if EXERCISE_TAG in cell_tags(cell)]


def _neutralize_markers(student: str, reference: str) -> tuple[str, bool]:
    allowed = {m.group(2) for line in reference.split("\n") if (m := _NBVAL_MARKER.match(line))}
    lines, changed = [], False
    for line in student.split("\n"):
        match = _NBVAL_MARKER.match(line)
        if match and match.group(2) not in allowed:
            line, changed = f"{match.group(1)}# ({match.group(2)} removed by the grader)", True
        lines.append(line)
    return "\n".join(lines), changed


def build_graded(reference, submission) -> tuple[dict, list[str]]:
    """The reference notebook with the submission's exercise sources in it, plus notes to report.

    Neither argument is modified.
    """
    graded = nbformat.from_dict(copy.deepcopy(reference))
    by_id = {cell["id"]: cell for cell in _code_cells(submission) if "id" in cell}
    theirs = _exercise_cells(submission)
    notes = []
    for number, cell in enumerate(_exercise_cells(graded), start=1):
        reference_source = source_text(cell)
        if cell.get("id") in by_id:
            source = source_text(by_id[cell["id"]])
        elif number <= len(theirs):
            source = source_text(theirs[number - 1])
            why = "the submission has no cell ids" if not by_id else \
                f"no cell with id {cell.get('id')!r}"
            notes.append(f"exercise {number}: matched by position ({why})")
        else:
            source = stub_source(reference_source, f"exercise {number}")
            notes.append(f"exercise {number}: not found in the submission, graded as untouched")
        source, changed = _neutralize_markers(source, reference_source)
        if changed:
            notes.append(f"exercise {number}: nbval markers removed from the student's code")
        cell["source"] = source
    return graded, notes


def plan_checks(reference) -> list[Check]:
    checks, counts = [], {EXERCISE_TAG: 0, CHECK_TAG: 0}
    for index, cell in enumerate(_code_cells(reference)):
        tags = cell_tags(cell)
        kind = EXERCISE_TAG if EXERCISE_TAG in tags else CHECK_TAG if CHECK_TAG in tags else None
        if kind:
            counts[kind] += 1
            # An exercise cell that only defines code prints nothing to compare: its check
            # cells grade it. One that prints is graded itself.
            if kind == CHECK_TAG or cell.get("outputs"):
                checks.append(Check(f"{kind} {counts[kind]}", cell.get("id"), index))
    return checks


def _failure_reason(text: str) -> str:
    # nbval's report: a header "Cell N: <what went wrong>", the input, then the kernel's traceback,
    # whose last line is "Name: message". The header is matched, not searched for: the student's
    # code is in the report too.
    text = _ANSI.sub("", text)
    header = re.search(r"^Cell \d+: (.*)$", text, re.MULTILINE)
    what = header.group(1) if header else ""
    if what.startswith("Cell outputs differ"):
        return "output differs"
    if what.startswith("Timeout"):
        return "timed out"
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:120] if lines else "failed"


def run_nbval(notebook: Path, *, cell_timeout: float = DEFAULT_CELL_TIMEOUT,
              sanitize: Path | None = None) -> tuple[int, dict[int, str | None], str]:
    """Run nbval on `notebook` in a fresh pytest process, isolated from any project config.

    Returns (pytest's exit code, {code cell index: None if passed else a reason}, pytest's
    output). Cells nbval never reported are absent from the dict.
    """
    notebook = notebook.resolve()
    with tempfile.TemporaryDirectory(prefix="minikafka-nbval-") as tmp:
        # Our own ini file: the repo's addopts/testpaths must not leak into this run.
        ini = Path(tmp, "pytest.ini")
        ini.write_text("[pytest]\n")
        report = Path(tmp, "junit.xml")
        command = [sys.executable, "-m", "pytest", str(notebook), "-c", str(ini),
                   "--rootdir", tmp, "-p", "no:cacheprovider", "-q", "--color=no",
                   "--nbval", "--nbval-current-env", f"--nbval-cell-timeout={cell_timeout}",
                   f"--junitxml={report}"]
        if sanitize is not None:
            command.append(f"--nbval-sanitize-with={Path(sanitize).resolve()}")
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
        cells = sum(cell["cell_type"] == "code" for cell in read_notebook(notebook)["cells"])
        try:
            done = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True,
                                  timeout=cell_timeout * (cells + 1) + 120)
        except subprocess.TimeoutExpired as exc:
            return -1, {}, f"nbval did not finish in {exc.timeout:.0f} s"
        outcomes: dict[int, str | None] = {}
        if report.exists():
            for case in ET.parse(report).iter("testcase"):
                if not case.get("name", "").startswith("Cell "):
                    continue
                index = int(case.get("name").split()[1])
                problem = next((c for c in case if c.tag in ("failure", "error")), None)
                skipped = case.find("skipped")
                if problem is not None:
                    outcomes[index] = _failure_reason(problem.text or problem.get("message", ""))
                elif skipped is not None:
                    outcomes[index] = ("not run: an earlier cell timed out"
                                       if "xfail" in (skipped.get("type") or "") else "skipped")
                else:
                    outcomes[index] = None
        return done.returncode, outcomes, done.stdout + done.stderr


def grade_one(submission: Path, reference_dir: Path, *, shown_as: str,
              cell_timeout: float = DEFAULT_CELL_TIMEOUT,
              sanitize: Path | None = None) -> Result:
    result = Result(submission=shown_as)
    reference_path = reference_dir / submission.name
    if not reference_path.is_file():
        result.error = f"no reference notebook named {submission.name} in {reference_dir}"
        return result
    result.notebook = submission.name
    unreadable = (ValueError, KeyError, TypeError, MarkerError)  # JSONDecodeError: a ValueError
    try:
        reference = read_notebook(reference_path)
    except unreadable as exc:
        result.error = f"cannot read the reference {reference_path}: {exc}"
        return result
    try:
        graded, result.notes = build_graded(reference, read_notebook(submission))
    except unreadable as exc:
        result.error = f"cannot read the submission: {exc}"
        return result
    result.checks = plan_checks(reference)
    with tempfile.TemporaryDirectory(prefix="minikafka-grade-") as tmp:
        copy_path = Path(tmp, submission.name)
        copy_path.write_bytes(dumps(graded).encode("utf-8"))
        code, outcomes, output = run_nbval(copy_path, cell_timeout=cell_timeout,
                                           sanitize=sanitize)
    if not outcomes:
        tail = " | ".join(_ANSI.sub("", output).strip().splitlines()[-3:])
        result.error = f"nbval did not run (exit code {code}): {tail}"
    for check in result.checks:
        reason = outcomes.get(check.code_cell, "not run")
        check.passed = reason is None
        check.reason = reason or ""
    return result


def grade(path: Path, reference_dir: Path, *, jobs: int = 1,
          cell_timeout: float = DEFAULT_CELL_TIMEOUT, sanitize: Path | None = None) -> list[Result]:
    """Grade one submission file, or every .ipynb under a folder; one Result each, sorted."""
    submissions = find_submissions(path)

    def one(submission: Path) -> Result:
        shown_as = str(submission.relative_to(path)) if path.is_dir() else str(submission)
        return grade_one(submission, reference_dir, shown_as=shown_as,
                         cell_timeout=cell_timeout, sanitize=sanitize)

    # Threads suffice: each grading is a subprocess; map() keeps the input order.
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, submissions))


def _short(reason: str) -> str:
    # The table keeps an exception's name only; --json has the whole reason.
    head = reason.split(":", 1)[0]
    return head if re.fullmatch(r"[\w.]+", head) else reason


def format_table(results: list[Result]) -> str:
    rows = [("submission", "notebook", "score", "failed")]
    notes = []
    for r in results:
        if r.error and not r.checks:
            rows.append((r.submission, r.notebook or "-", "-", r.error))
        else:
            failed = ", ".join(f"{c.label} ({_short(c.reason)})" for c in r.checks if not c.passed)
            rows.append((r.submission, r.notebook, f"{r.passed}/{r.total}", failed or "-"))
        errors = [r.error] if r.error and r.checks else []  # else it is already in the row
        notes += [f"{r.submission}: {note}" for note in r.notes + errors]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[3]]).rstrip()
             for row in rows]
    if not results:
        lines.append("(no .ipynb submissions found)")
    if notes:
        lines += ["", "notes:"] + [f"  {note}" for note in notes]
    return "\n".join(lines) + "\n"


def format_json(results: list[Result]) -> str:
    return json.dumps([r.as_dict() for r in results], indent=2, sort_keys=True) + "\n"
