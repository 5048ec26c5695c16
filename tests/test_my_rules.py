"""``my_rules(folder)``: a student's rules gathered from their exercise notebooks, Kafka's for the
rest, and a summary that says which."""

from __future__ import annotations

import ast
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from minikafka import Cluster
from minikafka.course import my_rules
from minikafka.course.exercises import EXERCISE_TAG, cell_tags
from minikafka.course.student_rules import NOT_WRITTEN, YOURS
from minikafka.errors import IllegalArgumentError
from minikafka.rules import RULES

from test_rules import run

ROOT = Path(__file__).resolve().parent.parent


def written_in_solutions() -> set[str]:
    """The rules whose function an exercise cell of solutions/ defines, in its lecture's notebook."""
    found = set()
    for name, rule in RULES.items():
        for path in (ROOT / "solutions").glob(f"{rule.lecture}-*.ipynb"):
            nb = nbformat.read(path, as_version=4)
            for cell in nb.cells:
                if cell.cell_type == "code" and EXERCISE_TAG in cell_tags(cell):
                    tree = ast.parse(cell.source)
                    if any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body):
                        found.add(name)
    return found


def fill(folder: Path, edit=None) -> Path:
    """exercises/ as a student who wrote every exercise would have it: the solutions' exercise cells
    copied into the exercise notebooks (``edit(path, cell)`` may change a cell's source after)."""
    shutil.copytree(ROOT / "exercises", folder)
    for path in sorted(folder.glob("*.ipynb")):
        mine = nbformat.read(path, as_version=4)
        theirs = nbformat.read(ROOT / "solutions" / path.name, as_version=4)
        exercise_cells = [c for c in theirs.cells if EXERCISE_TAG in cell_tags(c)]
        mine_cells = [c for c in mine.cells if EXERCISE_TAG in cell_tags(c)]
        assert len(exercise_cells) == len(mine_cells), path.name
        for cell, solved in zip(mine_cells, exercise_cells):
            cell.source = solved.source
            if edit is not None:
                edit(path.name, cell)
        nbformat.write(mine, path)
    return folder


def test_the_untouched_exercises_give_kafkas_rules_everywhere():
    mine = my_rules(ROOT / "exercises")
    assert len(mine) == 0 and dict(mine) == {}
    assert mine.origin == {name: NOT_WRITTEN for name in mine.origin}
    assert set(mine.origin) == set(RULES)
    text = mine.summary()
    assert text.splitlines()[0].endswith(f"0 yours, {len(RULES)} Kafka's")
    assert "  04  high_watermark" in text and "reference (not written yet)" in text
    # launch(rules=...) then ships nothing: every process runs Kafka's rules, unwrapped.
    from minikafka.wire import node_rules
    assert node_rules.pickled(mine, launched_at_ms=0) is None


def test_a_filled_folder_gives_the_students_functions_and_says_which_fell_back(tmp_path):
    def edit(notebook, cell):
        if notebook.startswith("04-") and "def truncation_offset(" in cell.source:
            cell.source = "undefined_helper()\n" + cell.source  # the cell raises before defining it
        if notebook.startswith("06-") and "def reassign(" in cell.source:
            cell.source = cell.source.replace("def reassign(", "def reassign(extra, ", 1)  # wrong arguments
        if notebook.startswith("04-") and "def high_watermark(" in cell.source:  # calls a helper of theirs
            cell.source = ("def high_watermark(hw, leader, leader_leo, follower_leos, isr, pending_isr):\n"
                           "    return max(hw, smallest_leo(leader, leader_leo, follower_leos,\n"
                           "                                set(isr) | set(pending_isr or ())))\n")
        if notebook.startswith("02-") and "def murmur2(" in cell.source:  # back to the stub
            cell.source = ("def murmur2(data):\n    \"Kafka's murmur2\"\n"
                           "    raise NotImplementedError(\"exercise: implement murmur2()\")\n")

    folder = fill(tmp_path / "exercises", edit)
    # A setup cell's statements other than imports never run (it would build logs or exit).
    nb = nbformat.read(folder / "01-the-log.ipynb", as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell("raise SystemExit('setup ran')\nimport bisect as _bisect"))
    nbformat.write(nb, folder / "01-the-log.ipynb")
    # A helper the student wrote in a cell of their own (no tag), which their rule calls.
    nb = nbformat.read(folder / "04-replication-and-isr.ipynb", as_version=4)
    nb.cells.insert(2, nbformat.v4.new_code_cell(
        "def smallest_leo(leader, leader_leo, follower_leos, members):\n"
        "    return min(leader_leo if b == leader else follower_leos[b] for b in members)\n"
        "print(smallest_leo(1, 8, {2: 3}, {1, 2}))\n"))
    nbformat.write(nb, folder / "04-replication-and-isr.ipynb")

    mine = my_rules(folder)
    assert mine.origin["truncation_offset"] == ("reference (your notebook raised NameError: "
                                                "name 'undefined_helper' is not defined)")
    assert mine.origin["reassign"].startswith("reference (your notebook raised IllegalArgumentError: "
                                              "rules['reassign'] must take the arguments reassign(")
    assert mine.origin["murmur2"] == NOT_WRITTEN
    theirs = written_in_solutions() - {"truncation_offset", "reassign", "murmur2"}
    assert {"high_watermark", "grant_vote", "index_lookup", "range_assign"} <= theirs
    assert set(mine) == theirs
    assert all(mine.origin[n] == YOURS for n in theirs)
    assert all(mine.origin[n] == NOT_WRITTEN for n in set(RULES) - theirs - {"truncation_offset", "reassign"})
    # They are the notebook's functions, run in a namespace named after it, not minikafka's.
    hw = mine["high_watermark"]
    assert hw.__module__ == "<04-replication-and-isr.ipynb>" and hw is not RULES["high_watermark"].reference
    assert hw(5, 1, 8, {2: 8, 3: 5}, (1, 2), (1, 2, 3)) == 5
    # partition_for_key calls the notebook's murmur2 stub: the student's own helper, not Kafka's.
    with pytest.raises(NotImplementedError):
        mine["partition_for_key"](b"truck-01", 10)
    assert f"{len(theirs)} yours" in mine.summary().splitlines()[0]
    assert "  06  reassign" in mine.summary()


def test_gathered_rules_run_a_cluster_as_kafkas_do_and_ship_to_another_process(tmp_path):
    mine = my_rules(fill(tmp_path / "exercises"))
    assert {"high_watermark", "last_caught_up", "truncation_offset"} <= set(mine)
    outcomes = []
    for rules in (None, mine):
        with Cluster(brokers=3, seed=5, rules=rules) as cluster:
            outcomes.append((run(cluster), cluster.describe("t"), cluster.now, cluster.world.events_processed))
            calls = dict(cluster.rule_trace.calls)
    assert outcomes[0] == outcomes[1] and calls["high_watermark"] > 20
    # By value, as launch(rules=...) ships them: a fresh Python runs them without the notebooks.
    import cloudpickle

    shipped = tmp_path / "rules.pickle"
    shipped.write_bytes(cloudpickle.dumps(dict(mine)))
    moved = tmp_path / "elsewhere"
    shutil.move(tmp_path / "exercises", moved)
    out = subprocess.run([sys.executable, "-c", (
        "import pickle, sys; rules = pickle.load(open(sys.argv[1], 'rb')); "
        "print(rules['high_watermark'](5, 1, 8, {2: 8, 3: 5}, (1, 2), None), rules['murmur2'](b'truck-01'))"),
        str(shipped)], capture_output=True, text=True, check=True, cwd=tmp_path)
    from minikafka.partitioner import murmur2
    assert out.stdout.split() == ["8", str(murmur2(b"truck-01"))]
    assert pickle.loads(shipped.read_bytes()).keys() == dict(mine).keys()


def test_a_missing_folder_or_notebook_is_said_plainly(tmp_path):
    with pytest.raises(IllegalArgumentError, match="my_rules\\('nowhere'\\): no such folder"):
        my_rules("nowhere")
    (tmp_path / "ex").mkdir()
    shutil.copy(ROOT / "solutions" / "04-replication-and-isr.ipynb", tmp_path / "ex")
    mine = my_rules(tmp_path / "ex")
    assert mine.origin["high_watermark"] == YOURS
    assert mine.origin["grant_vote"] == f"reference (no 08-*.ipynb in {tmp_path / 'ex'})"
    # The lectures' folder, named by mistake: its notebooks have the exercises' names, not their cells.
    lectures = my_rules(ROOT / "notebooks")
    assert len(lectures) == 0
    assert lectures.origin["index_lookup"] == (f"reference ({ROOT / 'notebooks' / '01-the-log.ipynb'} has no "
                                               "exercise cells: a lecture? give the exercises folder)")


def test_an_exercise_cell_that_never_ends_even_catching_everything_falls_back_and_says_why(tmp_path, monkeypatch):
    """Gathering runs each exercise cell in this process, as the student's kernel would: a cell
    whose top level loops for ever, catching everything (the interruption too), is stopped after
    ``CELL_BUDGET_S`` and its rules fall back to Kafka's, the summary saying why."""
    from minikafka.course import student_rules

    monkeypatch.setattr(student_rules, "CELL_BUDGET_S", 0.2)

    def edit(notebook, cell):
        if notebook.startswith("04-") and "def high_watermark(" in cell.source:
            cell.source += ("\nwhile True:  # waiting for something that never comes\n"
                            "    try:\n        sum(range(100))\n    except:\n        pass\n")

    mine = my_rules(fill(tmp_path / "exercises", edit))
    assert "high_watermark" not in mine
    assert mine.origin["high_watermark"] == ("reference (your notebook raised TimeoutError: the cell ran longer "
                                             "than 0.2 s)")
    assert mine.origin["last_caught_up"] == YOURS  # (another cell of the same notebook)
