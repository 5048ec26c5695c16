"""What the grading tests share: the fixture course's paths and the right answers to its sample.

The fixture course (``tests/fixtures/course``) has one exercise notebook, 99-sample, with
two exercise cells: ``lookup`` (find the index entry at or below a target offset) and the
cell that calls it; ``exercise`` is a student's copy with either or both filled in. ``GOOD_LOOKUP`` and ``GOOD_START`` are a student's right answers to
them, written another way than the reference solution (a loop, not ``bisect``), so a test
shows that the grader compares outputs, not code.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "course"
REFERENCES = FIXTURE / "solutions"
SAMPLE = REFERENCES / "99-sample.ipynb"
SAMPLE_EXERCISE = FIXTURE / "exercises" / "99-sample.ipynb"
SANITIZE = ROOT / "tests" / "nbval-sanitize.cfg"

GOOD_LOOKUP = ("def lookup(index, target):\n"
               "    best = None\n"
               "    for entry in index:\n"
               "        if entry[0] <= target:\n"
               "            best = entry\n"
               "    return best")
GOOD_START = "start_position = lookup(INDEX, 250)[1]\nprint(\"start scanning at byte\", start_position)"


def exercise(lookup=None, start=None, extra_cells=()):
    """The student's copy with the two exercise cells replaced (None: left untouched)."""
    nb = json.loads(SAMPLE_EXERCISE.read_text())
    cells = {cell["id"]: cell for cell in nb["cells"]}
    if lookup is not None:
        cells["exercise-lookup"]["source"] = lookup
    if start is not None:
        cells["exercise-start"]["source"] = start
    for after, cell_id, source in extra_cells:
        position = [c["id"] for c in nb["cells"]].index(after) + 1
        nb["cells"].insert(position, {"cell_type": "code", "id": cell_id, "metadata": {},
                                      "execution_count": None, "outputs": [], "source": source})
    return nb


def solved_submission(name: str, replace: dict[str, str]) -> dict:
    """A student's copy of solutions/NAME with every exercise solved, some cells replaced."""
    solution = json.loads((ROOT / "solutions" / f"{name}.ipynb").read_text())
    submission = json.loads((ROOT / "exercises" / f"{name}.ipynb").read_text())
    solved = {c["id"]: "".join(line for line in c["source"] if "### " not in line) for c in solution["cells"]}
    for cell in submission["cells"]:
        if "exercise" in cell.get("metadata", {}).get("tags", []):
            cell["source"] = replace.get(cell["id"], solved[cell["id"]])
    return submission
