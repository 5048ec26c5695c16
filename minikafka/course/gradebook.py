"""A class's submissions in, a gradebook out: CSV rows, feedback files and a summary table.

Theory of operation: `find_submissions(folder)` lists every .ipynb under the folder, except in
the folders of Jupyter, git and Python (SKIPPED_FOLDERS: `.ipynb_checkpoints` holds Jupyter's
autosaved copies) and hidden files (`._01-the-log.ipynb` is macOS's resource fork, not a notebook).
Other folders starting with "." are graded: a folder of notebooks in a class's submissions is a
submission, and a student left out without a word is worse than a row the grader can delete. The
student is the first folder below it (`alice/01-the-log.ipynb` -> alice), or the file name for
files directly in it. `match_reference` picks the reference notebook: the `--assignment` given,
else the reference whose name the file name contains, so LMS renames (`01-the-log (1).ipynb`,
`alice_01-the-log.ipynb`) still match. A student with two notebooks of one exercise gets one
`error` result naming both, not two grades for one exercise. `grade_all` grades the rest in
parallel (one thread per job, each submission in a sandbox of its own, since the work is in the
kernels), shows a tqdm bar and returns results in sorted order whatever finished first.

Outputs: `write_csv` (one row per student and exercise: student, notebook, exercise, points,
max_points, status, message), `write_feedback` (one Markdown file per student, for the student,
named by `feedback_names` so that no two students share one), `format_table` (one line per
submission for the terminal). Each message they copy holds at most MESSAGE_CHARS characters (the
verdicts are short already, compare.py; this is the last line of defence). Deterministic: no
timings, no temporary paths.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import unicodedata
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from .compare import shorten
from .exercises import read_notebook
from .grade import Check, Result, Settings, grade_file, plan

CSV_FIELDS = ["student", "notebook", "exercise", "points", "max_points", "status", "message"]
SKIPPED_FOLDERS = frozenset({".ipynb_checkpoints", ".virtual_documents", ".git", "__pycache__"})
MESSAGE_CHARS = 4000  # of one message in the gradebook, the feedback or the table


def find_submissions(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*.ipynb")
                  if not p.name.startswith(".")
                  and not any(part in SKIPPED_FOLDERS for part in p.relative_to(path).parts[:-1]))


def student_of(path: Path, root: Path) -> str:
    if root.is_file():
        return path.stem
    parts = path.relative_to(root).parts
    return parts[0] if len(parts) > 1 else path.stem


def match_reference(path: Path, references: list[Path], assignment: str | None) -> Path:
    """The reference notebook for a submission; ValueError with a clear message if none fits."""
    by_stem = {ref.stem: ref for ref in references}
    if assignment:
        stem = Path(assignment).stem
        if stem not in by_stem:
            raise ValueError(f"no reference notebook named {stem}.ipynb (known: {', '.join(sorted(by_stem))})")
        return by_stem[stem]
    if path.stem in by_stem:
        return by_stem[path.stem]
    # LMS renames: "01-the-log (1)", "alice_01-the-log", "01-the-log-alice". Longest name wins.
    found = sorted((s for s in by_stem if re.search(rf"(?<![\w-]){re.escape(s)}(?![\w])", path.stem)),
                   key=len, reverse=True)
    if found:
        return by_stem[found[0]]
    raise ValueError(f"cannot tell which exercise notebook {path.name} is: no reference name in it; "
                     "grade with --assignment NN-name")


def _not_graded(student: str, shown: str, reference: Path, error: str) -> Result:
    """An `error` result with the reference's exercises, each saying why, as grade_file makes one."""
    result = Result(student=student, submission=shown, notebook=reference.name, status="error", error=error)
    try:
        result.exercises = [e for e, _ in plan(read_notebook(reference))]
    except Exception:  # noqa: BLE001 - a reference that cannot be read: one row without an exercise
        result.exercises = []
    for exercise in result.exercises:
        exercise.checks = [Check("grading", None, False, False, error)]
    return result


def grade_all(path: Path, reference_dir: Path, settings: Settings, *, jobs: int = 1,
              assignment: str | None = None, progress: bool = False) -> list[Result]:
    references = sorted(reference_dir.glob("*.ipynb"))
    hide = tuple({*settings.hide, reference_dir.resolve(), (path if path.is_dir() else path.parent).resolve()})
    results: list[Result] = []
    todo: dict[tuple[str, Path], list[tuple[Path, str]]] = {}  # (student, reference): its notebooks
    for submission in find_submissions(path):
        shown = str(submission.relative_to(path)) if path.is_dir() else str(submission)
        student = student_of(submission, path)
        try:
            reference = match_reference(submission, references, assignment)
        except ValueError as exc:
            results.append(Result(student=student, submission=shown, status="error", error=str(exc)))
            continue
        todo.setdefault((student, reference), []).append((submission, shown))
    for (student, reference), found in list(todo.items()):
        if len(found) > 1:  # one row per student and exercise: which one counts is the grader's call
            names = [shown for _, shown in found]
            results.append(_not_graded(
                student, ", ".join(names), reference,
                f"{len(found)} submissions of {reference.stem} for {student}: {', '.join(names)}; "
                "keep one and grade again (the gradebook has one row per student and exercise)"))
            del todo[(student, reference)]

    def one(submission: Path, shown: str, student: str, reference: Path) -> Result:
        mine = Settings(**{**vars(settings), "hide": hide})
        return grade_file(submission, reference, mine, student=student, shown_as=shown)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(one, submission, shown, student, reference)
                   for (student, reference), [(submission, shown)] in todo.items()]
        done = as_completed(futures)
        if progress:
            from tqdm import tqdm
            done = tqdm(done, total=len(futures), unit="notebook", desc="grading", dynamic_ncols=True)
        for future in done:
            results.append(future.result())
    return sorted(results, key=lambda r: (r.student, r.submission))


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _bounded(text) -> str:
    return shorten(str(text or ""), MESSAGE_CHARS)


def _message(exercise, result: Result) -> str:
    if result.status != "graded":
        return _bounded(result.error)
    failed = [f"{c.label}: {c.message}" for c in exercise.checks if not c.passed]
    return _bounded("; ".join(failed)) if failed else "all checks passed"


def csv_rows(results: list[Result]) -> list[dict]:
    rows = []
    for r in results:
        if not r.exercises:
            rows.append({"student": r.student, "notebook": r.notebook or "", "exercise": "",
                         "points": "0", "max_points": "0", "status": r.status,
                         "message": _bounded(r.error)})
        for e in r.exercises:
            status = r.status if r.status != "graded" else ("passed" if e.passed else "failed")
            rows.append({"student": r.student, "notebook": r.notebook or "", "exercise": e.name,
                         "points": _number(e.earned if r.status == "graded" else 0),
                         "max_points": _number(e.points), "status": status,
                         "message": _message(e, r)})
    return rows


def _cell(text: str) -> str:
    """A student's folder or notebook name as a spreadsheet cell: one starting with =, +, -, @ (or a
    tab or carriage return) would be taken for a formula (`=HYPERLINK(...)`), so it gets a leading
    apostrophe, as OWASP's CSV-injection advice says."""
    return "'" + text if text.startswith(("=", "+", "-", "@", "\t", "\r")) else text


def _write(target: Path, text: str) -> None:
    """Write `text` as UTF-8, whole or not at all: a text the kernel or the file system made
    unencodable (a lone surrogate: a Latin-1 folder name, a kernel sending raw JSON) is written with
    backslash escapes instead of failing the whole class, and an earlier file at `target` is
    replaced only once the new one is complete."""
    target = Path(target)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        partial.write_text(text, encoding="utf-8", errors="backslashreplace")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def write_csv(results: list[Result], target: Path) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({**row, "student": _cell(row["student"]), "notebook": _cell(row["notebook"])}
                     for row in csv_rows(results))
    _write(target, buffer.getvalue())


def feedback(result: Result) -> str:
    """Markdown for the student: per exercise, points and what each check said."""
    lines = [f"# {result.notebook or result.submission}: {_number(result.points)} / "
             f"{_number(result.max_points)} points", ""]
    if result.status != "graded":
        lines += [f"**Not graded ({result.status}):** {_bounded(result.error)}", ""]
    for e in result.exercises:
        lines += [f"## {e.name}: {_number(e.earned if result.status == 'graded' else 0)} / {_number(e.points)}", ""]
        for c in e.checks:
            lines.append(f"- {'passed' if c.passed else 'FAILED'}: {c.label}: {_bounded(c.message)}")
            if c.detail:
                lines += ["", "  ```"] + [f"  {line}" for line in _bounded(c.detail).splitlines()] + ["  ```", ""]
        if e.checks and not e.passed and result.status == "graded":
            lines.append("- (an exercise earns its points when all its checks pass, hidden ones included)")
        lines.append("")
    if result.notes:
        lines += ["## Notes", ""] + [f"- {_bounded(n)}" for n in result.notes] + [""]
    return "\n".join(lines)


def _folded(name: str) -> str:
    # What a case-insensitive, normalizing file system (macOS, Windows) takes for the same name.
    return unicodedata.normalize("NFC", name).casefold()


def feedback_names(students) -> dict[str, str]:
    """A feedback file name per student, no two alike (case folded too): the student's name where it
    is already a safe, visible file name and free; else the safe name plus a hash of the exact
    name (`x y` -> `x_y-9c4b1d2e.md`, never `x_y`'s `x_y.md`). Deterministic: the same class gives
    the same names."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for student in sorted(set(students)):
        safe = re.sub(r"[^\w.-]+", "_", student)[:100] or "student"
        if safe.startswith("."):  # a hidden file would look missing
            safe = "_" + safe[1:]
        name = safe
        if safe != student or _folded(name) in taken:
            digest = hashlib.sha256(student.encode("utf-8", "surrogatepass")).hexdigest()
            tried = [f"{safe}-{digest[:width]}" for width in range(8, 65, 8)]
            tried += (f"{safe}-{digest}-{n}" for n in range(2, len(taken) + 3))
            name = next(n for n in tried if _folded(n) not in taken)
        taken.add(_folded(name))
        names[student] = name + ".md"
    return names


def write_feedback(results: list[Result], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for student, name in feedback_names(r.student for r in results).items():
        mine = [r for r in results if r.student == student]
        target = folder / name
        _write(target, "\n".join(feedback(r) for r in mine))
        written.append(target)
    return written


def format_table(results: list[Result]) -> str:
    rows = [("student", "submission", "points", "status / failed")]
    for r in results:
        if r.status != "graded":
            rows.append((r.student, r.submission, f"0/{_number(r.max_points)}", f"{r.status}: {_bounded(r.error)}"))
        else:
            failed = ", ".join(e.name.split(":")[0] for e in r.exercises if not e.passed)
            rows.append((r.student, r.submission, f"{_number(r.points)}/{_number(r.max_points)}",
                         f"failed: {failed}" if failed else "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[3]]).rstrip() for row in rows]
    if not results:
        lines.append("(no .ipynb submissions found)")
    return "\n".join(lines) + "\n"


def format_json(results: list[Result]) -> str:
    return json.dumps([r.as_dict() for r in results], indent=2, sort_keys=True) + "\n"


def format_check(result: Result) -> str:
    """The student's check, in plain words: per exercise, pass/fail and why."""
    lines = []
    for e in result.exercises:
        visible = [c for c in e.checks if not c.hidden]
        ok = all(c.passed for c in visible) and bool(visible)
        lines.append(f"{'PASS' if ok else 'FAIL'}  {e.name}  ({_number(e.points)} "
                     f"point{'' if e.points == 1 else 's'})")
        for c in visible:
            if not c.passed:
                first, *more = c.message.splitlines() or [""]
                lines.append(f"        {c.label}: {first}")
                lines += [f"          {line.strip()}" for line in more] + \
                         [f"          {line}" for line in c.detail.splitlines()]
    for note in result.notes:
        lines.append(f"note: {note}")
    if result.status == "flagged":
        lines.append(f"FLAGGED: {result.error}")
    passed = sum(all(c.passed for c in e.checks if not c.hidden) and any(not c.hidden for c in e.checks)
                 for e in result.exercises)
    lines.append(f"{passed} of {len(result.exercises)} exercises pass the checks in this notebook "
                 "(the grader runs these and hidden ones too, on your code only: saved outputs never count)")
    return "\n".join(lines) + "\n"


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
