"""The course loop: solutions/ -> exercises/ -> a student's submission -> a score.

The fixture tests/fixtures/course/solutions/99-sample.ipynb is a small executed solutions notebook
(a sparse-index lookup with bisect: two `exercise` cells, two `check` cells). Tests that run nbval
in a subprocess are marked `notebooks` (a few seconds each); the rest are quick.
"""

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from minikafka.cli import main
from minikafka.course.exercises import (MarkerError, compare, dumps, generate, make_exercise,
                                        notebooks_in, read_notebook, stub_source)
from minikafka.course.grade import Settings, build_program, check_file, plan
from minikafka.course.gradebook import format_check

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "course"
SAMPLE = FIXTURE / "solutions" / "99-sample.ipynb"
SAMPLE_EXERCISE = FIXTURE / "exercises" / "99-sample.ipynb"
SANITIZE = ROOT / "tests" / "nbval-sanitize.cfg"


def cell_by_id(nb, cell_id):
    return next(cell for cell in nb["cells"] if cell.get("id") == cell_id)


# -- 1. the generator -------------------------------------------------------------------------

def test_stub_replaces_exactly_the_marked_regions():
    solution = read_notebook(SAMPLE)
    exercise = make_exercise(solution, "sample")

    assert cell_by_id(exercise, "exercise-lookup").source == (
        "def lookup(index, target):\n"
        '    """Return the last (offset, position) entry with offset <= target, or None."""\n'
        '    raise NotImplementedError("exercise: implement lookup()")')
    assert cell_by_id(exercise, "exercise-start").source == (
        'raise NotImplementedError("exercise: replace this line with your code")\n'
        'print("start scanning at byte", start_position)')
    # Everything but the exercise sources is kept: ids, order, outputs, counts, metadata; hidden
    # checks are left out, checked cells carry their expected outputs in metadata, and exercise
    # headings show their points.
    kept = [c for c in solution.cells if "hidden" not in c.metadata.get("tags", [])]
    assert [c.id for c in exercise.cells] == [c.id for c in kept]
    for before, after in zip(kept, exercise.cells):
        after = copy.deepcopy(after)
        if "exercise" in before.metadata.get("tags", []):
            after["source"] = before.source
        if after.get("outputs") and after.cell_type == "code":
            assert after.metadata.pop("minikafka") == {"expected": before.outputs}
        if after.cell_type == "markdown" and after.source.startswith("## Exercise"):
            after["source"] = re.sub(r" \(\d+ points?\)", "", after.source, count=1)
        assert after == before
    assert exercise.metadata == solution.metadata
    assert "### BEGIN SOLUTION" in cell_by_id(solution, "exercise-lookup").source  # not mutated


def test_stub_keeps_the_indentation_of_each_region():
    source = textwrap.dedent("""\
        class Index:
            def find(self, target):
                if target < 0:
                    ### BEGIN SOLUTION
                    return None
                    ### END SOLUTION
                ### BEGIN SOLUTION
                return bisect.bisect_right(self.offsets, target)
                ### END SOLUTION

        ### BEGIN SOLUTION
        index = Index()
        ### END SOLUTION
        print(index)""")
    assert stub_source(source) == textwrap.dedent("""\
        class Index:
            def find(self, target):
                if target < 0:
                    raise NotImplementedError("exercise: implement find()")
                raise NotImplementedError("exercise: implement find()")

        raise NotImplementedError("exercise: replace this line with your code")
        print(index)""")


def exercise_cell(source, cell=new_code_cell):
    cell = cell(source)
    cell.metadata["tags"] = ["exercise"]
    return cell


BAD_CELLS = {
    "no markers": (exercise_cell("def f():\n    return 1"), "has no ### BEGIN SOLUTION"),
    "never closed": (exercise_cell("### BEGIN SOLUTION\nx = 1"), "line 1: .* never closed"),
    "end first": (exercise_cell("x = 1\n### END SOLUTION"), "line 2: ### END SOLUTION without"),
    "nested": (exercise_cell("### BEGIN SOLUTION\n  ### BEGIN SOLUTION\n### END SOLUTION\n"
                             "### END SOLUTION"), "line 2: .* cannot nest"),
    "malformed": (exercise_cell("## BEGIN SOLUTION\nx = 1\n### END SOLUTION"), "malformed marker"),
    "hint on marker": (exercise_cell("### BEGIN SOLUTION: use bisect\nx = 1\n### END SOLUTION"),
                       "malformed marker"),
    "untagged code": (new_code_cell("### BEGIN SOLUTION\nx = 1\n### END SOLUTION"),
                      "not tagged 'exercise'"),
    "untagged markdown": (new_markdown_cell("### BEGIN SOLUTION\nx = 1\n### END SOLUTION"),
                          "not tagged 'exercise'"),
    "tagged markdown": (exercise_cell("### BEGIN SOLUTION\nx\n### END SOLUTION", new_markdown_cell),
                        "only code cells can be exercises"),
}


@pytest.mark.parametrize("cell, message", BAD_CELLS.values(), ids=BAD_CELLS.keys())
def test_bad_markers_are_refused_with_the_cell_named(cell, message):
    nb = new_notebook(cells=[new_code_cell("import bisect"), cell])
    for number, each in enumerate(nb.cells):
        each.id = f"c{number}"
    with pytest.raises(MarkerError, match=message) as error:
        make_exercise(nb, "bad.ipynb")
    assert "bad.ipynb, cell 2 of 2 (id 'c1')" in str(error.value)


def test_a_bad_notebook_stops_generation_before_anything_is_written(tmp_path):
    solutions, exercises = tmp_path / "solutions", tmp_path / "exercises"
    solutions.mkdir()
    shutil.copy(SAMPLE, solutions / "00-good.ipynb")
    bad = json.loads(SAMPLE.read_text())
    del bad["cells"][3]["metadata"]["tags"]  # the lookup cell: markers outside an exercise cell
    (solutions / "01-bad.ipynb").write_text(json.dumps(bad))
    with pytest.raises(MarkerError, match="01-bad.ipynb, cell 4 of 11 .*not tagged"):
        generate(solutions, exercises)
    assert not exercises.exists()


def test_cells_without_ids_are_refused_in_nbformat_4_5():
    nb = json.loads(SAMPLE.read_text())
    del nb["cells"][1]["id"]
    with pytest.raises(MarkerError, match="cell 2 of 11 has no id"):
        make_exercise(nb)


def test_regenerating_is_byte_stable(tmp_path):
    exercises = tmp_path / "exercises"
    assert generate(FIXTURE / "solutions", exercises).missing == ["99-sample.ipynb"]
    written = (exercises / "99-sample.ipynb").read_bytes()
    assert written.endswith(b"}\n") and written.startswith(b'{\n "cells": [\n  {\n')
    assert generate(FIXTURE / "solutions", exercises).in_sync  # nothing left to write
    assert (exercises / "99-sample.ipynb").read_bytes() == written
    # Canonical: reading and writing it again with nbformat changes no byte.
    assert dumps(read_notebook(exercises / "99-sample.ipynb")).encode() == written


def test_check_names_files_that_differ_are_missing_or_extra(tmp_path, capsys):
    solutions, exercises = tmp_path / "solutions", tmp_path / "exercises"
    shutil.copytree(FIXTURE / "solutions", solutions)
    args = ["exercises", "--solutions", str(solutions), "--exercises", str(exercises)]

    assert main(args + ["--check"]) == 1
    assert "missing: " in capsys.readouterr().out
    assert main(args) == 0 and main(args + ["--check"]) == 0
    capsys.readouterr()

    edited = exercises / "99-sample.ipynb"
    edited.write_text(edited.read_text().replace("implement lookup()", "do it"))
    (exercises / "00-stale.ipynb").write_text("{}")
    shutil.copy(SAMPLE, solutions / "98-new.ipynb")
    assert main(args + ["--check"]) == 1
    out = capsys.readouterr().out
    assert "differs: " in out and "/99-sample.ipynb" in out
    assert "missing: " in out and "/98-new.ipynb" in out
    assert "extra: " in out and "/00-stale.ipynb" in out

    assert main(args) == 0
    assert "removed: " in capsys.readouterr().out
    assert main(args + ["--check"]) == 0
    assert sorted(p.name for p in exercises.iterdir()) == ["98-new.ipynb", "99-sample.ipynb"]


def test_cli_reports_marker_errors_with_exit_code_2(tmp_path, capsys):
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    nb = json.loads(SAMPLE.read_text())
    nb["cells"][3]["source"] = "def lookup(index, target):\n    ### BEGIN SOLUTION\n    pass\n"
    (solutions / "01-x.ipynb").write_text(json.dumps(nb))
    code = main(["exercises", "--solutions", str(solutions), "--exercises", str(tmp_path / "ex")])
    assert code == 2
    assert "never closed" in capsys.readouterr().err


def test_a_mistyped_solutions_folder_never_empties_exercises(tmp_path):
    exercises = tmp_path / "exercises"
    exercises.mkdir()
    shutil.copy(SAMPLE_EXERCISE, exercises)
    args = ["exercises", "--solutions", str(tmp_path / "solutoins"), "--exercises", str(exercises)]
    assert main(args) == 2
    assert (exercises / "99-sample.ipynb").exists()
    assert main(args + ["--check"]) == 1  # the stray exercise is reported as extra


# -- 2. exercises/ is exactly what the generator makes from solutions/ --------------------------

@pytest.mark.parametrize("solutions, exercises", [
    pytest.param(ROOT / "solutions", ROOT / "exercises", id="repo"),
    pytest.param(FIXTURE / "solutions", FIXTURE / "exercises", id="fixture"),
])
def test_exercises_are_generated_from_solutions(solutions, exercises):
    report = compare(solutions, exercises)
    assert report.in_sync, f"{exercises} is stale ({report}): run `make exercises`"


# -- 3. every untouched exercise notebook fails the check -------------------------------------

@pytest.mark.notebooks
@pytest.mark.parametrize("notebook", [
    *(pytest.param(p, id=f"exercises/{p.name}") for p in notebooks_in(ROOT / "exercises")),
    pytest.param(SAMPLE_EXERCISE, id="fixture"),
])
def test_untouched_exercise_fails_the_check(notebook):
    result = check_file(notebook, Settings(sanitize=SANITIZE))
    assert result.status == "graded" and result.exercises
    assert not any(e.passed for e in result.exercises), format_check(result)


# -- 4. grading (see tests/test_grading.py for the cheats and bad submissions) ------------------

def test_cells_are_matched_by_position_when_the_submission_has_no_ids():
    reference = read_notebook(SAMPLE)
    submission = json.loads(SAMPLE.read_text())
    cell_by_id(submission, "exercise-lookup")["source"] = "def lookup(i, t):\n    return bisect.bisect_left(i, t)"
    for cell in submission["cells"]:
        del cell["id"]
    submission["nbformat_minor"] = 4
    program, notes, flagged = build_program(reference, submission)
    assert any("bisect_left" in source for source, _ in program)
    assert notes[:2] == ["exercise cell 1: matched by position (the submission has no cell ids)",
                         "exercise cell 2: matched by position (the submission has no cell ids)"]


def test_only_the_students_exercise_sources_and_added_cells_are_used():
    reference = read_notebook(SAMPLE)
    submission = json.loads(SAMPLE.read_text())
    cell_by_id(submission, "check-lookup")["source"] = "print('I always pass')"
    cell_by_id(submission, "exercise-lookup")["source"] = "# NBVAL_SKIP\ndef lookup(i, t): pass"
    helper = new_code_cell("def helper():\n    return 1")
    helper.id = "my-helper"
    position = [c["id"] for c in submission["cells"]].index("exercise-lookup")
    submission["cells"].insert(position, helper)
    submission["cells"] = [c for c in submission["cells"] if c["id"] != "exercise-start"]
    program, notes, flagged = build_program(reference, submission)
    sources = [source for source, _ in program]
    assert "print('I always pass')" not in sources
    assert "# (NBVAL_SKIP removed by the grader)\ndef lookup(i, t): pass" in sources
    assert sources.index("def helper():\n    return 1") == sources.index(
        "# (NBVAL_SKIP removed by the grader)\ndef lookup(i, t): pass") - 1  # where the student put it
    assert any(s.startswith('raise NotImplementedError("exercise: replace') for s in sources)
    assert "exercise cell 2: not found in the submission, graded as untouched" in notes
    assert flagged is None
    assert "bisect_right" in cell_by_id(reference, "exercise-lookup").source  # not mutated


def test_points_come_from_the_notebook_metadata_and_show_in_the_exercise():
    exercise = read_notebook(SAMPLE_EXERCISE)
    assert cell_by_id(exercise, "lookup-task").source.startswith(
        "## Exercise 1: where does a read start? (2 points)\n")
    assert cell_by_id(exercise, "start-task").source.startswith("## Exercise 2: the first byte to read (1 point)\n")
    planned = plan(read_notebook(SAMPLE))
    assert [(e.name, e.points, [c["id"] for c in cells]) for e, cells in planned] == [
        ("Exercise 1: where does a read start?", 2, ["check-lookup", "check-before-start", "hidden-lookup"]),
        ("Exercise 2: the first byte to read", 1, ["exercise-start", "hidden-start"])]
    # The student's copy has no hidden check, and the same exercises by name.
    assert "hidden-lookup" not in [c.id for c in exercise.cells]
    assert [e.name for e, _ in plan(exercise, from_metadata=True)] == [e.name for e, _ in planned]


def test_the_release_has_no_solutions_and_no_hidden_checks(tmp_path, capsys):
    out = tmp_path / "release"
    assert main(["release", str(out)]) == 0
    assert not (out / "solutions").exists() and not (out / "tests" / "fixtures").exists()
    assert sorted(p.name for p in (out / "exercises").iterdir()) == sorted(
        p.name for p in (ROOT / "exercises").iterdir())
    assert (out / "notebooks").is_dir() and (out / "minikafka" / "course" / "grade.py").is_file()
    for path in (out / "exercises").glob("*.ipynb"):
        text = path.read_text()
        assert "### BEGIN SOLUTION" not in text and '"hidden"' not in text
    assert main(["release", str(out)]) == 2  # exists: refused without --force
    assert "use --force" in capsys.readouterr().err



# -- the README's student commands, as written ---------------------------------------------------

def readme_commands(heading):
    "The shell block of the README's section `heading`, as a student would copy it."
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.search(r"```sh\n(.*?)```", text[text.index(f"\n{heading}\n"):], re.S).group(1)


def fresh_shell():
    "The environment of a new terminal: no virtualenv active, no `minikafka` on PATH."
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(d for d in env["PATH"].split(os.pathsep)
                                  if d and not (Path(d) / "minikafka").exists())
    return env


@pytest.mark.notebooks  # runs `minikafka check` on an untouched exercise: a kernel, seconds
@pytest.mark.parametrize("where", ["repository", "release"])
def test_the_readmes_student_commands_work_as_written_in_a_fresh_shell(tmp_path, where):
    """In a folder laid out as the instructor's repository or as the release, with `.venv` the
    virtualenv these tests run in, the README's block runs verbatim in `sh`: the check answers
    (the untouched exercise fails) instead of `minikafka: not found`."""
    if where == "repository":
        folder = tmp_path / "repository"
        folder.mkdir()
        (folder / "exercises").symlink_to(ROOT / "exercises")  # resolves to this repository's root
    else:
        folder = tmp_path / "release"
        assert main(["release", str(folder)]) == 0
    (folder / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    commands = readme_commands("## For students: exercises")
    activate, check = [line for line in commands.splitlines() if line.strip()]
    assert activate.startswith(". .venv/bin/activate") and check.startswith("minikafka check exercises/")

    def run(script):
        return subprocess.run(["sh", "-c", script], cwd=folder, env=fresh_shell(), capture_output=True,
                              text=True, timeout=600)

    without = run(check)  # what the README used to say: a new terminal does not know the command
    assert without.returncode == 127 and "not found" in without.stderr
    done = run(commands)
    assert done.returncode == 1, done.stdout + done.stderr  # 1: the check ran and found failures
    assert re.search(r"^FAIL  Exercise 1: ", done.stdout, re.M), done.stdout
    assert re.search(r"^0 of \d+ exercises pass the checks in this notebook", done.stdout, re.M), done.stdout

# -- pytest configuration -----------------------------------------------------------------------

@pytest.mark.notebooks  # two pytest subprocesses: seconds, not milliseconds
def test_plain_pytest_collects_lectures_and_solutions_but_not_exercises(tmp_path):
    """A scratch project with the repo's pytest config and one notebook in every folder."""
    for folder in ("notebooks", "solutions", "exercises", "tests/fixtures/course/solutions"):
        (tmp_path / folder).mkdir(parents=True)
        shutil.copy(SAMPLE, tmp_path / folder / "00-x.ipynb")
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for name in ("conftest.py", "cpu_census.py"):  # the conftest and the module it imports
        shutil.copy(ROOT / "tests" / name, tmp_path / "tests")
    (tmp_path / "tests" / "test_plain.py").write_text("def test_plain():\n    pass\n")

    def collected(*args):
        done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                               "-p", "no:cacheprovider", *args],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return {line.split("::")[0] for line in done.stdout.splitlines() if "::" in line}

    assert collected() == {"tests/test_plain.py", "notebooks/00-x.ipynb", "solutions/00-x.ipynb"}
    assert collected("-m", "not notebooks") == {"tests/test_plain.py"}


def test_regenerating_one_notebook_leaves_the_others_alone(tmp_path):
    solutions = tmp_path / "solutions"
    exercises = tmp_path / "exercises"
    solutions.mkdir()
    shutil.copy(FIXTURE / "solutions" / "99-sample.ipynb", solutions / "99-sample.ipynb")
    shutil.copy(FIXTURE / "solutions" / "99-sample.ipynb", solutions / "98-other.ipynb")
    args = ["exercises", "--solutions", str(solutions), "--exercises", str(exercises)]
    assert main(args + ["99-sample.ipynb"]) == 0
    assert sorted(p.name for p in exercises.iterdir()) == ["99-sample.ipynb"]
    assert main(args + ["--check", "solutions/99-sample.ipynb"]) == 0  # a path works too
    assert main(args + ["--check"]) == 1  # 98-other is still missing
    assert main(args + ["nope.ipynb"]) == 2
