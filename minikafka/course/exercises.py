"""Generate exercises/ from solutions/, and check that they have not drifted apart.

Theory of operation: each `solutions/*.ipynb` maps to `exercises/` under the same file name. In a
cell tagged `exercise`, every region from a line `### BEGIN SOLUTION` to a line `### END SOLUTION`
(markers included) becomes one line, at the BEGIN marker's indentation:

    raise NotImplementedError("exercise: implement lookup()")

Everything else is kept as it is (the rest of the cell, other cells, cell ids: the grader matches
cells by id, metadata, execution counts and stored outputs), except three things:

- cells tagged `hidden` (grader-only checks) are left out;
- every checked cell (tagged `check`, or an `exercise` cell with outputs) gets its outputs copied
  into its metadata `minikafka.expected`: the stored outputs are overwritten as soon as a student
  runs the cell and saves, the metadata is not, and `minikafka check` compares against it;
- each `## Exercise N: title` heading gets its points from the notebook metadata appended:
  `## Exercise N: title (3 points)`.

Invariants:

- The output is a pure function of the input bytes, written by nbformat with its fixed indent and
  a trailing newline, so regenerating gives identical files and `--check` can compare bytes.
- A notebook is refused, and nothing at all is written, if its markers are missing, unbalanced,
  malformed (`## BEGIN SOLUTION`, `### BEGIN SOLUTION: hint`) or outside an `exercise` cell, or if
  it lacks cell ids that its format version requires.

It must never leak solution code into exercises/ (hence the strict marker rules), never write
outside the exercises folder, and never touch solutions/.
"""

from __future__ import annotations

import copy
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat.v4.rwbase import rejoin_lines

from . import BEGIN_MARKER, CHECK_TAG, END_MARKER, EXERCISE_TAG, HIDDEN_TAG

# Catches near-misses of the markers too: a typo must stop the build, not ship a solution.
_MARKER_LIKE = re.compile(r"^\s*#+\s*(BEGIN|END)\s+SOLUTION\b", re.IGNORECASE)
_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(\w+)")
_HEADING = re.compile(r"^#{1,3}\s*((Exercise\s+\d+)\b[^\n]*?)\s*(?:\(\s*[\d.]+\s+points?\s*\))?\s*$",
                      re.MULTILINE)


def exercise_heading(markdown: str) -> tuple[str, str] | None:
    """("Exercise 1", "Exercise 1: murmur2") for a cell whose first line is such a heading."""
    first = markdown.lstrip("\n").split("\n", 1)[0]
    match = _HEADING.match(first)
    return (re.sub(r"\s+", " ", match.group(2)), match.group(1)) if match else None


def notebook_points(nb) -> dict[str, float]:
    """{"Exercise 1": points, ...} from the notebook metadata `minikafka.points`."""
    points = nb.get("metadata", {}).get("minikafka", {}).get("points", {})
    if not isinstance(points, dict) or not all(
            isinstance(v, (int, float)) and v >= 0 for v in points.values()):
        raise MarkerError("notebook metadata minikafka.points must map 'Exercise N' to a number >= 0")
    return points


def _points_text(points: float) -> str:
    number = int(points) if float(points).is_integer() else points
    return f"({number} point{'' if number == 1 else 's'})"


class MarkerError(ValueError):
    """A solutions notebook whose solution markers cannot be turned into an exercise."""


def cell_tags(cell) -> list[str]:
    tags = cell.get("metadata", {}).get("tags", [])
    return tags if isinstance(tags, list) else []


def source_text(cell) -> str:
    # Raw JSON stores source as a list of lines; nbformat joins it. Accept both.
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _enclosing_def(lines: list[str], marker_indent: int) -> str | None:
    """Name of the innermost `def` whose body holds a marker at `marker_indent`, if any."""
    level = marker_indent
    for line in reversed(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(_indent(line))
        if indent < level:
            match = _DEF.match(line)
            if match:
                return match.group(1)
            level = indent
            if level == 0:
                return None
    return None


def stub_source(source: str, where: str = "cell") -> str:
    """Replace each solution region of one exercise cell's source by a NotImplementedError stub.

    `where` names the cell in error messages. Raises MarkerError when the cell has no region, or
    when its markers are unbalanced, nested or malformed.
    """
    lines = source.split("\n")
    out: list[str] = []
    begin: int | None = None  # line number of the open BEGIN marker, if inside a region
    regions = 0
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped == BEGIN_MARKER:
            if begin is not None:
                raise MarkerError(f"{where}, line {number}: {BEGIN_MARKER} inside the region "
                                  f"opened on line {begin} (regions cannot nest)")
            begin = number
            name = _enclosing_def(lines[: number - 1], len(_indent(line)))
            hint = f"implement {name}()" if name else "replace this line with your code"
            out.append(f'{_indent(line)}raise NotImplementedError("exercise: {hint}")')
        elif stripped == END_MARKER:
            if begin is None:
                raise MarkerError(f"{where}, line {number}: {END_MARKER} without a "
                                  f"{BEGIN_MARKER} before it")
            begin = None
            regions += 1
        elif _MARKER_LIKE.match(line):
            raise MarkerError(f"{where}, line {number}: malformed marker {stripped!r}; "
                              f"write exactly {BEGIN_MARKER!r} or {END_MARKER!r} on its own line")
        elif begin is None:
            out.append(line)
    if begin is not None:
        raise MarkerError(f"{where}, line {begin}: {BEGIN_MARKER} is never closed by {END_MARKER}")
    if regions == 0:
        raise MarkerError(f"{where} is tagged {EXERCISE_TAG!r} but has no "
                          f"{BEGIN_MARKER} ... {END_MARKER} region")
    return "\n".join(out)


def _has_marker(source: str) -> bool:
    return any(_MARKER_LIKE.match(line) for line in source.split("\n"))


def describe_cell(nb, index: int) -> str:
    cell = nb["cells"][index]
    ident = f" (id {cell['id']!r})" if "id" in cell else ""
    return f"cell {index + 1} of {len(nb['cells'])}{ident}"


def make_exercise(nb, name: str = "notebook"):
    """Return the exercise version of a solutions notebook (a new object; `nb` is not changed)."""
    requires_ids = (nb.get("nbformat", 4), nb.get("nbformat_minor", 0)) >= (4, 5)
    seen: set[str] = set()
    result = copy.deepcopy(nb)
    points = notebook_points(nb)
    for index, cell in enumerate(result["cells"]):
        where = f"{name}, {describe_cell(nb, index)}"
        if requires_ids and "id" not in cell:
            # nbformat would invent a random id on write: output would no longer be stable.
            raise MarkerError(f"{where} has no id; open and save the notebook in Jupyter "
                              "(or run nbformat's normalize) to give every cell an id")
        if "id" in cell:
            if cell["id"] in seen:
                raise MarkerError(f"{where}: duplicate cell id; the grader matches cells by id")
            seen.add(cell["id"])
        source = source_text(cell)
        if EXERCISE_TAG in cell_tags(cell):
            if cell["cell_type"] != "code":
                raise MarkerError(f"{where} is a {cell['cell_type']} cell tagged "
                                  f"{EXERCISE_TAG!r}; only code cells can be exercises")
            cell["source"] = stub_source(source, where)
        elif _has_marker(source):
            raise MarkerError(f"{where} has solution markers but is not tagged "
                              f"{EXERCISE_TAG!r}; tag it, or remove the markers")
        tags = cell_tags(cell)
        if HIDDEN_TAG in tags and CHECK_TAG not in tags:
            raise MarkerError(f"{where} is tagged {HIDDEN_TAG!r} but not {CHECK_TAG!r}; "
                              "only check cells can be hidden")
        if cell["cell_type"] == "code" and (CHECK_TAG in tags or
                                            (EXERCISE_TAG in tags and cell.get("outputs"))):
            cell.setdefault("metadata", {})["minikafka"] = {"expected": copy.deepcopy(cell["outputs"])}
        heading = exercise_heading(source) if cell["cell_type"] == "markdown" else None
        if heading and points:
            lead = source[: len(source) - len(source.lstrip("\n"))]
            first, newline, rest = source.lstrip("\n").partition("\n")
            first = re.sub(r"\s*\(\s*[\d.]+\s+points?\s*\)\s*$", "", first.rstrip())
            cell["source"] = f"{lead}{first} {_points_text(points.get(heading[0], 1))}{newline}{rest}"
    result["cells"] = [cell for cell in result["cells"] if HIDDEN_TAG not in cell_tags(cell)]
    return result


MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024  # a notebook larger than this is refused unread


def read_notebook(path: Path):
    """A v4 notebook as nbformat holds it in memory (multi-line strings joined), unvalidated.

    Only a regular file of at most MAX_NOTEBOOK_BYTES is read (ValueError otherwise): a FIFO named
    like a notebook would block `open` forever, and a device or a huge file would fill memory. It
    is opened without blocking and checked again once open, so a swap after the check is caught."""
    # Not nbformat.read: its validation invents random ids for cells that lack them.
    def refuse(mode: int, size: int) -> None:
        if not stat.S_ISREG(mode):
            kind = next((kind for test, kind in (
                (stat.S_ISFIFO, "named pipe (FIFO)"), (stat.S_ISDIR, "folder"), (stat.S_ISCHR, "character device"),
                (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket")) if test(mode)), "special file")
            raise ValueError(f"{path} is not a regular file (it is a {kind}): only a saved .ipynb "
                             "file can be read as a notebook")
        if size > MAX_NOTEBOOK_BYTES:
            raise ValueError(f"{path} is larger than any notebook should be (more than "
                             f"{MAX_NOTEBOOK_BYTES:,} bytes): clear its outputs, save it and submit it again")

    found = os.stat(path)
    refuse(found.st_mode, found.st_size)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as file:
        opened = os.fstat(file.fileno())
        refuse(opened.st_mode, opened.st_size)
        data = file.read(MAX_NOTEBOOK_BYTES + 1)
    refuse(stat.S_IFREG, len(data))  # it may have grown since
    nb = json.loads(data.decode("utf-8"))
    if not isinstance(nb, dict) or nb.get("nbformat") != 4:
        raise ValueError(f"{path} is not a version 4 Jupyter notebook")
    return rejoin_lines(nbformat.from_dict(nb))


def dumps(nb) -> str:
    text = nbformat.writes(nbformat.from_dict(nb), version=nbformat.NO_CONVERT)
    return text if text.endswith("\n") else text + "\n"


def notebooks_in(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.ipynb") if not p.name.startswith("."))


def render(solutions_dir: Path) -> dict[str, str]:
    """Exercise notebook text for every solutions notebook, by file name. Raises MarkerError."""
    return {path.name: dumps(make_exercise(read_notebook(path), str(path)))
            for path in notebooks_in(solutions_dir)}


@dataclass
class SyncReport:
    differ: list[str] = field(default_factory=list)   # present, but not what the generator makes
    missing: list[str] = field(default_factory=list)  # a solution with no exercise
    extra: list[str] = field(default_factory=list)    # an exercise with no solution

    @property
    def in_sync(self) -> bool:
        return not (self.differ or self.missing or self.extra)

    def only(self, names: set[str] | None) -> "SyncReport":
        """The same report restricted to ``names`` (file names); all of it for None."""
        if names is None:
            return self
        return SyncReport(*([n for n in lst if n in names] for lst in (self.differ, self.missing, self.extra)))


def compare(solutions_dir: Path, exercises_dir: Path,
            rendered: dict[str, str] | None = None) -> SyncReport:
    """What differs between exercises_dir and what the generator makes from solutions_dir."""
    expected = render(solutions_dir) if rendered is None else rendered
    present = {p.name: p for p in notebooks_in(exercises_dir)}
    report = SyncReport()
    for name, text in expected.items():
        if name not in present:
            report.missing.append(name)
        elif present[name].read_bytes() != text.encode("utf-8"):
            report.differ.append(name)
    report.extra = sorted(set(present) - set(expected))
    return report


def generate(solutions_dir: Path, exercises_dir: Path, only: set[str] | None = None) -> SyncReport:
    """Bring exercises_dir in line with solutions_dir; returns what had to change.

    Every notebook is rendered before anything is written, so a marker error leaves the folder
    untouched. Stale exercises (no solution any more) are removed: the folder is generated.
    A missing solutions folder is an error, not an empty one: a mistyped path must not empty
    exercises/. ``only`` (file names) limits what is written, so an author regenerating one
    notebook never touches a colleague's work in progress.
    """
    if not solutions_dir.is_dir():
        raise FileNotFoundError(f"solutions folder {solutions_dir} not found")
    rendered = render(solutions_dir)
    report = compare(solutions_dir, exercises_dir, rendered).only(only)
    if rendered:
        exercises_dir.mkdir(parents=True, exist_ok=True)
    for name in report.differ + report.missing:
        # Bytes, not text: no newline translation, so the file is identical on every platform.
        (exercises_dir / name).write_bytes(rendered[name].encode("utf-8"))
    for name in report.extra:
        (exercises_dir / name).unlink()
    return report
