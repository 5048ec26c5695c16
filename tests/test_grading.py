"""The grader against cheats and broken submissions, and the student's check against saving.

One class-sized folder of submissions of the fixture notebook (tests/fixtures/course/solutions/
99-sample.ipynb: Exercise 1 worth 2 points with a hidden check, Exercise 2 worth 1) is graded once
per module, two at a time, with short timeouts so that the looping submissions cost seconds; each
test then reads its student's row. Every cheat listed in issue 12 has a student here.

The lectures' own notebooks are graded the same way: each test's submissions of a lecture (the
solutions beside the cheat or the fitted rule, whose points are compared) form one class, graded
in one `grade_all` on two jobs, so the two kernels run side by side instead of one after the
other; notebook 02's class serves both of its tests (the `graded_02` fixture).
"""

import csv
import json
import os
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from minikafka.cli import main
from minikafka.course.grade import Settings, check_file
from minikafka.course.gradebook import csv_rows, feedback, format_check, grade_all
from grading_helpers import GOOD_LOOKUP, GOOD_START, REFERENCES, ROOT, SAMPLE, SAMPLE_EXERCISE, SANITIZE, exercise, solved_submission

FAST = Settings(sanitize=SANITIZE, cell_timeout=5, budget=15)
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="full isolation needs root")

SOLUTION_LOOKUP = ("def lookup(index, target):\n    offsets = [offset for offset, _ in index]\n"
                   "    i = bisect.bisect_right(offsets, target)\n    return index[i - 1] if i else None\n")


def replay_transformer():
    """An IPython input transformer that answers each visible check with its stored output."""
    nb = json.loads(SAMPLE_EXERCISE.read_text())
    answers = {"".join(c["source"]).split("\n")[0]: "".join("".join(o["text"]) for o in c["outputs"])
               for c in nb["cells"] if c["cell_type"] == "code" and c["outputs"]}
    return (f"ANSWERS = {answers!r}\n"
            "def replay(lines):\n"
            "    first = ''.join(lines).split('\\n')[0]\n"
            "    return [f'print({ANSWERS[first]!r}, end=\"\")\\n'] if first in ANSWERS else lines\n"
            "get_ipython().input_transformers_cleanup.append(replay)\n"
            "def lookup(index, target):\n    return None")


ESCAPES = """import os, socket, subprocess
report = {}
for name, attempt in [
    ("read the reference", lambda: open(REFERENCE).read(100)),
    ("list the other students", lambda: os.listdir(CLASS)),
    ("write next to the submissions", lambda: open(os.path.join(CLASS, "pwned.txt"), "w").write("x")),
    ("write into the repository", lambda: open(os.path.join(REPO, "pwned-by-liam.txt"), "w").write("x")),
    ("leave a file in /tmp", lambda: open("/tmp/pwned-by-liam-7d1f.txt", "w").write("x")),
    ("reach the network", lambda: socket.create_connection(("1.1.1.1", 53), timeout=2)),
]:
    try:
        attempt()
        report[name] = "DONE"
    except Exception as exc:
        report[name] = type(exc).__name__
subprocess.Popen(["sleep", "900.4212"], start_new_session=True)  # a daemon that outlives the kernel?
print(report)
"""


def submissions(folder: Path) -> dict[str, Path]:
    """The class: one folder per student (the file name as the LMS left it)."""
    def put(student, nb, name="99-sample.ipynb"):
        (folder / student).mkdir(parents=True, exist_ok=True)
        path = folder / student / name
        if isinstance(nb, (str, bytes)):
            path.write_text(nb) if isinstance(nb, str) else path.write_bytes(nb)
        else:
            path.write_text(json.dumps(nb))
        return path

    wrong = json.loads(SAMPLE.read_text())  # reference outputs, wrong code: "ran and saved"
    for cell in wrong["cells"]:
        if cell["id"] == "exercise-lookup":
            cell["source"] = "".join(cell["source"]).replace("bisect_right", "bisect_left")
        cell["source"] = "".join(line for line in "".join(cell["source"]).splitlines(keepends=True)
                                 if "### " not in line)
    escape = ESCAPES.replace("REFERENCE", repr(str(SAMPLE))).replace("CLASS", repr(str(folder))) \
                    .replace("REPO", repr(str(ROOT)))
    paths = {
        "alice": put("alice", exercise(GOOD_LOOKUP, GOOD_START)),
        "bob": put("bob", exercise()),
        "carol": put("carol", wrong),
        "dave": put("dave", exercise(GOOD_LOOKUP, GOOD_START), "scratch.ipynb"),
        "erin": put("erin", SAMPLE.read_bytes()),  # the solutions notebook itself
        "frank": put("frank", exercise(
            "import json\n"
            f"nb = json.load(open({str(SAMPLE)!r}))\n"
            "exec(''.join(next(c['source'] for c in nb['cells'] if c['id'] == 'exercise-lookup')))",
            GOOD_START)),
        "gina": put("gina", exercise(replay_transformer(), "pass")),
        "hank": put("hank", exercise(
            "open('junit.xml', 'w').write('<testsuite tests=\"9\" failures=\"0\"/>')\n"
            "import os, signal\nos.killpg(0, signal.SIGKILL)", GOOD_START)),
        "ivan": put("ivan", exercise(  # the library's function, not the student's (murmur2 = minikafka.murmur2)
            "import bisect, types\nlibrary = types.ModuleType('library')\nlibrary.bisect = bisect\n"
            f"exec({SOLUTION_LOOKUP!r}, library.__dict__)\nlookup = library.lookup", GOOD_START)),
        "judy": put("judy", exercise("def lookup(index, target):\n    while True:\n        pass", None)),
        "kyle": put("kyle", exercise(GOOD_LOOKUP, "import os\nos._exit(3)")),
        "liam": put("liam", exercise(GOOD_LOOKUP, GOOD_START, [("setup", "liam-escape", escape)])),
        "mia": put("mia", '{"cells": [{"cell_type": "code", "source": "trunc'),
        "noah": put("noah", (ROOT / "exercises" / "01-the-log.ipynb").read_bytes()),  # wrong notebook
        "olga": put("olga", exercise(GOOD_LOOKUP, GOOD_START), "99-sample (1).ipynb"),
        "pete": put("pete", exercise("def lookup(index, target):\n    return last_at_most(index, target)",
                                     GOOD_START, [("exercise-lookup", "pete-helper", "def last_at_most(index, target):\n"
                                                  "    return max((e for e in index if e[0] <= target), default=None)")])),
        "sam": put("sam", exercise(GOOD_LOOKUP, "while True:\n    pass")),
        "rose": put("rose", exercise("def lookup(index, target):\n    hog = bytearray(6 * 1024 ** 3)\n"
                                     "    return None", GOOD_START)),
        "quinn": put("quinn", exercise("def lookup(index, target):\n    import signal\n"
                                       "    signal.signal(signal.SIGINT, signal.SIG_IGN)  # no interrupting me\n"
                                       "    while True:\n        pass", None)),
    }
    return paths


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("class")
    submissions(folder)
    results = grade_all(folder, REFERENCES, FAST, jobs=2)
    return folder, {r.student: r for r in results}


def points(result):
    return result.points, result.max_points


@pytest.mark.notebooks
def test_correct_work_gets_full_marks_whatever_the_file_is_called(graded):
    _, by = graded
    for student in ("alice", "olga", "pete"):
        assert (by[student].status, points(by[student])) == ("graded", (3, 3)), feedback(by[student])
    assert by["olga"].submission == "olga/99-sample (1).ipynb"
    assert any("your code cell(s) after 'exercise-lookup' were run" in n for n in by["pete"].notes)


@pytest.mark.notebooks
def test_untouched_and_wrong_work(graded):
    _, by = graded
    assert points(by["bob"]) == (0, 3)
    carol = by["carol"]  # wrong code, with the reference's outputs saved in the file
    assert points(carol) == (1, 3)
    [failed] = [e for e in carol.exercises if not e.passed]
    assert failed.name == "Exercise 1: where does a read start?"
    assert failed.checks[0].message.startswith("output differs: line 1: expected '0 -> (0, 0)', "
                                               "your code gave '0 -> None'")


@pytest.mark.notebooks
def test_cheats_earn_nothing(graded):
    _, by = graded
    assert by["erin"].status == "flagged" and points(by["erin"]) == (0, 3)
    assert "copied from the solutions notebook" in by["erin"].error
    assert points(by["frank"]) == (0, 3)          # the reference is unreadable from the sandbox
    assert points(by["gina"]) == (0, 3)           # replayed outputs fail the hidden checks
    gina = by["gina"].exercises[0]
    assert [c.passed for c in gina.checks if not c.hidden] == [True, True]
    assert [c.label for c in gina.checks if not c.passed] == ["hidden check 1"]
    # No junit.xml is ever read, and the kernel is process 1 of its own PID namespace: its
    # SIGKILL to "its parent's" process group reaches nothing outside the sandbox.
    assert points(by["hank"]) == (0, 3)
    ivan = by["ivan"].exercises[0]                # right outputs, but not the student's function
    assert points(by["ivan"]) == (1, 3)
    assert [c.label for c in ivan.checks if not c.passed] == ["your own code"]


@pytest.mark.notebooks
def test_loops_and_kernel_deaths_are_bounded_and_named(graded):
    _, by = graded
    for student in ("judy", "quinn"):
        result = by[student]
        assert result.status == "graded" and points(result) == (0, 3)
        assert "timed out in: Exercise 1: where does a read start?" in result.notes
    assert "used 5 s of CPU in this cell: an endless loop?" in by["judy"].exercises[0].checks[0].message
    sam = by["sam"]  # `while True: pass` in the exercise cell itself
    assert points(sam) == (2, 3) and "timed out in: Exercise 2: the first byte to read" in sam.notes
    assert "did not stop after a timeout" in by["quinn"].exercises[0].checks[1].message
    assert by["rose"].exercises[0].checks[0].message == (  # the 4 GiB limit, named
        "raised MemoryError:  (the sandbox's memory limit was reached: 4 GiB per process (RLIMIT_AS))")
    kyle = by["kyle"]
    assert points(kyle) == (2, 3)
    assert "the kernel died" in kyle.exercises[1].checks[0].message
    assert "the kernel died in: Exercise 2: the first byte to read" in kyle.notes


@pytest.mark.notebooks
def test_files_that_cannot_be_graded_say_why(graded):
    _, by = graded
    assert by["dave"].status == "error" and "cannot tell which exercise notebook scratch.ipynb" in by["dave"].error
    assert by["mia"].status == "error" and by["mia"].error.startswith("not a notebook: invalid JSON")
    assert by["noah"].status == "error" and "none of its cells belong" in by["noah"].error
    rows = [r for r in csv_rows(list(by.values())) if r["student"] == "mia"]
    assert [(r["exercise"], r["points"], r["status"]) for r in rows] == [
        ("Exercise 1: where does a read start?", "0", "error"), ("Exercise 2: the first byte to read", "0", "error")]


@pytest.mark.notebooks
@ROOT_ONLY
def test_the_sandbox_holds(graded):
    folder, by = graded
    assert points(by["liam"]) == (3, 3)
    assert not (folder / "pwned.txt").exists() and not (ROOT / "pwned-by-liam.txt").exists()
    assert not Path("/tmp/pwned-by-liam-7d1f.txt").exists()  # its /tmp was private
    leftovers = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"900.4212" in Path(f"/proc/{pid}/cmdline").read_bytes():
                leftovers.append(pid)
        except OSError:
            pass
    assert leftovers == []


@pytest.mark.notebooks
def test_the_gradebook_cli(tmp_path, capsys):
    folder = tmp_path / "class"
    (folder / "alice").mkdir(parents=True)
    (folder / "alice" / "whatever-the-lms-called-it.ipynb").write_text(json.dumps(exercise(GOOD_LOOKUP, GOOD_START)))
    (folder / "mia").mkdir()
    (folder / "mia" / "99-sample.ipynb").write_text("{")
    gradebook, notes = tmp_path / "term" / "grades.csv", tmp_path / "term" / "feedback"  # folders made as needed
    code = main(["grade", str(folder), "--reference", str(REFERENCES), "--assignment", "99-sample",
                 "--csv", str(gradebook), "--feedback", str(notes), "--jobs", "2", "--quiet"])
    assert code == 1  # mia's file could not be graded
    rows = list(csv.DictReader(gradebook.open()))
    assert list(rows[0]) == ["student", "notebook", "exercise", "points", "max_points", "status", "message"]
    assert [(r["student"], r["exercise"], r["points"], r["max_points"], r["status"]) for r in rows] == [
        ("alice", "Exercise 1: where does a read start?", "2", "2", "passed"),
        ("alice", "Exercise 2: the first byte to read", "1", "1", "passed"),
        ("mia", "Exercise 1: where does a read start?", "0", "2", "error"),
        ("mia", "Exercise 2: the first byte to read", "0", "1", "error")]
    assert (notes / "alice.md").read_text().startswith("# 99-sample.ipynb: 3 / 3 points")
    assert "invalid JSON" in (notes / "mia.md").read_text()


def test_the_gradebook_cli_refuses_an_output_it_cannot_write_before_grading(tmp_path, capsys):
    # Grading a class takes an hour: an output path that cannot be written is said at once, not
    # after the grading (a traceback in write_csv, every grade lost).
    folder = tmp_path / "class"
    (folder / "alice").mkdir(parents=True)
    (folder / "alice" / "99-sample.ipynb").write_text(json.dumps(exercise(GOOD_LOOKUP, GOOD_START)))
    (tmp_path / "taken").write_text("a file where a folder should be")
    args = ["grade", str(folder), "--reference", str(REFERENCES), "--quiet"]
    for extra, said in ((["--csv", str(tmp_path / "taken" / "grades.csv")], "error: --csv "),
                        (["--feedback", str(tmp_path / "taken")], "is a file, not a folder"),
                        (["--csv", str(tmp_path)], "is a folder; give a file name")):
        assert main(args + extra) == 2
        err = capsys.readouterr().err
        assert said in err and "seed" not in err, err  # nothing graded: no seed was even drawn
    assert not (tmp_path / "taken").is_dir()


def run_and_save(nb: dict, path: Path) -> Path:
    """Execute the notebook as Jupyter would (errors and all) and save it with its new outputs."""
    node = nbformat.reads(json.dumps(nb), as_version=4)
    NotebookClient(node, kernel_name="python3", allow_errors=True, timeout=60,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    nbformat.write(node, str(path))
    return path


@pytest.mark.notebooks
def test_saving_in_jupyter_never_changes_the_check(tmp_path):
    right = run_and_save(exercise(GOOD_LOOKUP, GOOD_START), tmp_path / "right" / "99-sample.ipynb") \
        if (tmp_path / "right").mkdir() is None else None
    wrong = run_and_save(exercise(SOLUTION_LOOKUP.replace("bisect_right", "bisect_left"), GOOD_START),
                         tmp_path / "wrong" / "99-sample.ipynb") if (tmp_path / "wrong").mkdir() is None else None
    # The saved outputs are now the code's own: comparing against them would pass anything.
    saved = nbformat.read(str(wrong), as_version=4)
    assert "0 -> None\n119 -> (0, 0)\n120 -> (0, 0)" in "".join(
        o.get("text", "") for c in saved.cells if c.get("id") == "check-lookup" for o in c.outputs)
    mine, theirs = check_file(right, FAST), check_file(wrong, FAST)
    assert [e.passed for e in mine.exercises] == [True, True], format_check(mine)
    assert [e.passed for e in theirs.exercises] == [False, True], format_check(theirs)
    assert "FAIL  Exercise 1: where does a read start?  (2 points)" in format_check(theirs)
    assert "line 1: expected '0 -> (0, 0)', your code gave '0 -> None'" in format_check(theirs)
    # The grader agrees on the same files.
    for path, expected in ((right, (3, 3)), (wrong, (1, 3))):
        [result] = grade_all(path, REFERENCES, FAST)
        assert points(result) == expected
    assert main(["check", str(right)]) == 0
    assert main(["check", str(wrong)]) == 1


def test_check_refuses_a_notebook_without_expectations(tmp_path, capsys):
    plain = tmp_path / "99-sample.ipynb"
    shutil.copy(SAMPLE, plain)
    nb = json.loads(plain.read_text())
    for cell in nb["cells"]:
        cell.get("metadata", {}).pop("minikafka", None)
    plain.write_text(json.dumps(nb))
    assert main(["check", str(plain)]) == 2
    assert "holds no expected outputs" in capsys.readouterr().err


def _grade(name: str, students: dict[str, dict[str, str]]) -> dict:
    """One class of solutions/NAME, {student: the cells replaced in a solved copy}, graded in one
    grade_all on two jobs (each submission in a sandbox of its own, two kernels side by side):
    {student: Result}."""
    folder = Path(tempfile.mkdtemp(prefix=f"minikafka-{name[:2]}-"))
    try:
        for student, replace in students.items():
            (folder / student).mkdir()
            (folder / student / f"{name}.ipynb").write_text(json.dumps(solved_submission(name, replace)))
        results = grade_all(folder, ROOT / "solutions", Settings(sanitize=SANITIZE), jobs=2)
    finally:
        shutil.rmtree(folder)
    assert [r.student for r in results] == sorted(students)  # one result per submission
    return {r.student: r for r in results}


# Issue 12's wrapper cheat: a private reference to the package's function, called by a function
# of the student's own (its __module__ is __main__, so the provenance check alone lets it pass).
WRAPPERS_02 = {
    "ex1": "_m = minikafka.murmur2\ndef murmur2(data):\n    return _m(data)\n",
    # A copy of the function object (same code, new globals): not the package's object any more.
    "ex2": ("import types\n_p = types.FunctionType(minikafka.partition_for_key.__code__, vars(minikafka))\n"
            "def to_positive(n):\n    return n & 0x7FFFFFFF\n\n"
            "def partition_for_key(key, num_partitions):\n    return _p(key, num_partitions)\n"),
}


@pytest.fixture(scope="module")
def graded_02():
    """Notebook 02's class, graded once for its two tests: the solutions, the wrappers, a wrapper
    that switches tracing off, the library's function in place of the exercise."""
    return _grade("02-topics-and-partitions", {
        "correct": {},
        "cheat": WRAPPERS_02,
        # Switching the grader's tracing off from inside the exercise is no way round it.
        "untraced": {"ex1": "import sys\n_m = minikafka.murmur2\ndef murmur2(data):\n    sys.settrace(None)\n"
                            "    return _m(data)\n"},
        "library": {"ex1": "murmur2 = minikafka.murmur2"},
    })


@pytest.mark.notebooks
def test_a_wrapper_around_the_package_earns_nothing_in_02(graded_02):
    correct, result, untraced = (graded_02[student] for student in ("correct", "cheat", "untraced"))
    assert points(correct) == (10, 10), feedback(correct)
    assert [e.earned for e in result.exercises] == [0, 0, 4], feedback(result)
    # Exercise 1's checks call murmur2 alone, which its property watches strictly; exercise 2's
    # checks of to_positive (no property of its own) call the wrapper too, under the watch.
    for exercise, spec, watched in zip(result.exercises, ("minikafka.partitioner:murmur2",
                                                          "minikafka.partitioner:partition_for_key"), (False, True)):
        failed = [c for c in exercise.checks if not c.passed]
        assert [c.label for c in failed] == ["your own code"] * watched + [
            f"hidden property: {spec.split(':')[1]}"], failed
        assert all(spec in c.message for c in failed), failed
    # Switching tracing off is refused (RuntimeError): every check that calls that murmur2 fails,
    # exercise 3's included, and the watch says why.
    result = untraced
    assert [e.earned for e in result.exercises] == [0, 0, 0], feedback(result)
    assert "sys.settrace was called" in feedback(result)


@pytest.mark.notebooks
def test_the_library_in_place_of_the_exercise_earns_nothing(graded_02):
    """Issue 12's cheat on the real notebook 02: `murmur2 = minikafka.murmur2` (minikafka is the
    setup cell's name for minikafka.partitioner), the other two exercises solved properly."""
    result = graded_02["library"]
    assert points(result) == (7, 10), feedback(result)
    first = result.exercises[0]
    # Taken from the package (provenance), and its code runs where the student's should (the
    # property's watch). Its "run your cluster" (check 3) runs Kafka's murmur2 itself: the
    # producer never calls "yours".
    assert [c.label for c in first.checks if not c.passed] == ["hidden check 1", "check 3", "your own code",
                                                               "hidden property: murmur2"]


@pytest.mark.notebooks
def test_a_rule_that_passes_every_table_but_loses_data_scores_0_in_04():
    # Kafka's rule wherever the tables look (logs of at most 40 records: the hand-made cases, the
    # random ones compared with the package, the hidden cases), the leader's log end beyond. Only
    # a cluster running it finds the acknowledged writes a new leader never had: the "run your
    # cluster" cells and the tester's fault campaign, with the grader's own seed in a hidden check.
    fitted = ("def high_watermark(hw, leader, leader_leo, follower_leos, isr, pending_isr):\n"
              "    if leader_leo > 40:\n"
              "        return max(hw, leader_leo)\n"
              "    members = set(isr) | set(pending_isr or ())\n"
              "    return max(hw, min([leader_leo] + [follower_leos.get(b, -1) for b in members if b != leader]))\n")
    by = _grade("04-replication-and-isr", {"correct": {}, "fitted": {"ex1": fitted}})
    correct, result = by["correct"], by["fitted"]
    assert correct.points == correct.max_points, feedback(correct)
    first = result.exercises[0]
    passed = {c.cell_id for c in first.checks if c.passed}
    assert {"ex1-check-hand", "ex1-check-generated", "hidden-ex1"} <= passed, feedback(result)
    # ... and the hidden property, whose draws reach logs of up to 50 records.
    assert {c.cell_id or c.label for c in first.checks if not c.passed} == {
        "ex1-run", "ex1-cluster", "hidden-ex1-judge", "hidden property: high_watermark"}
    assert first.earned == 0 and result.points == correct.points - first.points, feedback(result)
    [judged] = [c for c in first.checks if c.cell_id == "hidden-ex1-judge"]
    assert "the fault campaign on a grading seed found a '" in judged.message  # the kind, not the schedule


@pytest.mark.notebooks
def test_a_wrapper_around_kafkas_recipes_earns_nothing_in_07():
    # Exercise 1's loops are minikafka.recipes' (the judge's reference): calling them from the
    # student's own functions earns nothing, though every check's output is right.
    wrapper = ("from minikafka import recipes as _r\n\n"
               "def no_record_lost(consumer, process):\n    return _r.no_record_lost(consumer, process)\n\n"
               "def no_record_twice(consumer, process):\n    return _r.no_record_twice(consumer, process)\n")
    by = _grade("07-offsets-and-delivery", {"correct": {}, "cheat": {"exercise-commit-order": wrapper}})
    correct, cheat = by["correct"], by["cheat"]
    assert correct.points == correct.max_points, feedback(correct)
    assert [e.earned for e in cheat.exercises] == [0] + [e.points for e in correct.exercises[1:]], feedback(cheat)
    failed = [c for c in cheat.exercises[0].checks if not c.passed]
    # The hidden properties' watch over each drawn call (every check calls those two functions
    # alone, so none has a watch of its own: grade._needs_watch).
    assert [c.label for c in failed] == ["hidden property: no_record_lost", "hidden property: no_record_twice"], failed
    assert all("minikafka.recipes:no_record_" in c.message for c in failed), failed


@pytest.mark.notebooks
def test_a_wrapper_around_the_package_earns_nothing_in_03():
    # The setup cell names minikafka.controller `minikafka`; a helper of the student's in between.
    wrapper = ("_place = minikafka.assign_replicas\n"
               "def _helper(*args):\n    return _place(*args)\n\n"
               "def assign_replicas(n_partitions, rf, brokers, start_index, next_replica_shift):\n"
               "    return _helper(n_partitions, rf, brokers, start_index, next_replica_shift)\n")
    # Exercise 2's rule, the controller's election, imported from where the package keeps it.
    elect = ("from minikafka.replicas import elect_leader as _elect\n"
             "def elect_leader(replicas, isr, live_brokers, unclean):\n"
             "    return _elect(replicas, isr, live_brokers, unclean)\n")
    by = _grade("03-brokers-and-cluster", {"correct": {}, "cheat": {"ex1": wrapper, "ex2-elect": elect}})
    correct, cheat = by["correct"], by["cheat"]
    assert correct.points == correct.max_points, feedback(correct)
    assert cheat.exercises[0].earned == cheat.exercises[1].earned == 0, feedback(cheat)
    assert cheat.points == correct.points - correct.exercises[0].points - correct.exercises[1].points
    # Named where the package keeps them (minikafka.controller re-exports assign_replicas): the
    # checks call each function alone, so the hidden properties' watch is the one that finds them.
    assert "minikafka.replicas:assign_replicas" in feedback(cheat)
    assert "minikafka.replicas:elect_leader" in feedback(cheat)


@ROOT_ONLY
def test_sandboxes_running_at_once_never_share_a_user():
    """Each sandbox kills every process of its user when it closes: two graders (or two test
    suites) on one machine must never be handed the same user."""
    from minikafka.course.sandbox import take_user

    first, second = take_user(), take_user()
    try:
        assert first[0] != second[0]
    finally:
        os.close(first[2])
        os.close(second[2])


# Bob's write_positions: the last row of each truck in collection order, not the newest report.
LAST_ROW_WINS = """def write_positions(batch_df, producer, topic):
    newest = {}
    for r in parse_reports(batch_df).collect():
        newest[r.truck_id] = json.dumps({"timestamp_ms": r.timestamp_ms, "lat": r.lat, "lon": r.lon})
    for truck, value in newest.items():
        producer.send(topic, key=truck.encode(), value=value.encode())
    producer.flush()
    return len(newest)
"""


@pytest.mark.notebooks
@pytest.mark.spark
def test_the_capstone_hidden_checks_catch_code_fitted_to_the_visible_ones(tmp_path):
    """Notebook 10: code that only works on what the visible checks pass it loses the exercise.
    The solutions pass every hidden property (tested by the class benchmark's quick mode and here:
    each fitted student keeps the exercises done properly).

    Two students, two fitted functions each (one capstone grading per student: each takes a
    kernel and a JVM, so four one-function students took twice the suite's time for the same
    four functions). Ann's `windowed_speeds` and `sliding_speeds` ignore their argument and
    aggregate the setup's own topic (right for every visible check, which passes it that topic).
    Bob's `write_alerts` writes above a hard-coded 95 km/h, and his `write_positions` keeps each
    truck's last row in the order they come, which is the newest only while the reports come in
    time order. Each fitted exercise fails its own function's hidden property and nothing else,
    and each keeps the points of the exercises done properly.
    """
    name = "10-capstone-spark"
    solution = json.loads((ROOT / "solutions" / f"{name}.ipynb").read_text())
    solved = {c["id"]: "".join(line for line in c["source"] if "### " not in line) for c in solution["cells"]}
    ex1, ex2, ex3, ex4 = "capstone-ex-005", "capstone-ex-013", "capstone-ex3-002", "capstone-ex4-002"
    fitted = {
        "ann": {ex1: solved[ex1].replace("return (parse_reports(kafka_df)", "return (parse_reports(trucks_stream())"),
                ex3: solved[ex3].replace("return (parse_reports(kafka_df)", "return (parse_reports(trucks_stream())")},
        "bob": {ex2: solved[ex2].replace("> SPEED_LIMIT_KMH", "> 95.0"), ex4: LAST_ROW_WINS},
    }
    for student, replace in fitted.items():
        assert all(replace[k] != solved[k] for k in replace)
        submission = json.loads((ROOT / "exercises" / f"{name}.ipynb").read_text())
        for cell in submission["cells"]:
            if "exercise" in cell.get("metadata", {}).get("tags", []):
                cell["source"] = replace.get(cell["id"], solved[cell["id"]])
        (tmp_path / student).mkdir()
        (tmp_path / student / f"{name}.ipynb").write_text(json.dumps(submission))
    results = {r.student: r for r in grade_all(tmp_path, ROOT / "solutions", Settings(sanitize=SANITIZE), jobs=2)}
    for student, earned, functions in (("ann", [0, 3, 0, 2], {0: "windowed_speeds", 2: "sliding_speeds"}),
                                       ("bob", [3, 0, 2, 0], {1: "write_alerts", 3: "write_positions"})):
        result = results[student]
        assert [e.earned for e in result.exercises] == earned, feedback(result)
        for index, function in functions.items():
            # The hidden property of the function fitted, on fleets drawn for this grading (capstone_properties).
            lost = result.exercises[index]
            assert [c.label for c in lost.checks if not c.passed] == [f"hidden property: {function}"], feedback(result)
        assert "truck-" not in feedback(result)  # never an input


@pytest.mark.spark
def test_spark_kernels_share_a_read_only_class_archive():
    """The one thing submissions share is a file the grader built: a Spark notebook's kernel gets
    JAVA_TOOL_OPTIONS naming it, other notebooks get nothing, and the file is read-only."""
    from minikafka.course.exercises import read_notebook
    from minikafka.course.grade import _kernel_env

    assert _kernel_env(read_notebook(ROOT / "solutions" / "01-the-log.ipynb")) == {}
    options = _kernel_env(read_notebook(ROOT / "solutions" / "10-capstone-spark.ipynb"))["JAVA_TOOL_OPTIONS"]
    assert "-XX:TieredStopAtLevel=1" in options
    [archive] = [o.split("=", 1)[1] for o in options.split() if o.startswith("-XX:SharedArchiveFile=")]
    assert Path(archive).is_file() and Path(archive).stat().st_mode & 0o222 == 0


@ROOT_ONLY
@pytest.mark.spark
def test_a_submission_cannot_change_the_shared_class_archive():
    from minikafka.course.jvm_cache import ensure_archive
    from minikafka.course.runner import run_cells
    from minikafka.course.sandbox import Sandbox

    archive = ensure_archive()
    before = archive.read_bytes()[:4096], archive.stat().st_mtime
    attack = (f"import os\nfor how in (lambda: open({str(archive)!r}, 'r+b'), lambda: os.chmod({str(archive)!r}, 0o666),\n"
              f"            lambda: os.replace({str(archive)!r}, {str(archive)!r} + '.x'),\n"
              f"            lambda: open({str(archive.parent / 'evil.jsa')!r}, 'wb')):\n"
              "    try:\n        how()\n        print('changed')\n    except OSError as exc:\n"
              "        import errno\n        print(errno.errorcode[exc.errno])\n")
    with Sandbox() as box:
        [run] = run_cells(box, [attack], cell_timeout=30, budget=30)
    assert run.status == "ok", run.reason
    # Refused as the sandbox user (EACCES, EPERM) or by the sealed, read-only virtualenv (EROFS).
    said = "".join(o.get("text", "") for o in run.outputs).split()
    assert len(said) == 4 and set(said) <= {"EACCES", "EPERM", "EROFS"}, said
    assert (archive.read_bytes()[:4096], archive.stat().st_mtime) == before


@pytest.mark.notebooks
def test_hidden_checks_run_with_the_seed_chosen_at_grading_time(tmp_path):
    """A hidden check's `judge(..., seed=grading_seed())` runs on the grader's seed, not on the
    solutions' (GRADING_SEED): here a hidden check that passes only when the two differ."""
    reference = json.loads(SAMPLE.read_text())
    cell = next(c for c in reference["cells"] if c["id"] == "hidden-start")
    cell["source"] = ("# Grader only: the campaign's seed is the grader's.\n"
                      "from minikafka.course import grading_seed\n"
                      "print(start_position == lookup(INDEX, 250)[1], grading_seed() != 2024)")
    cell["outputs"] = [{"name": "stdout", "output_type": "stream", "text": ["True True\n"]}]
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "99-sample.ipynb").write_text(json.dumps(reference))
    (tmp_path / "class" / "alice").mkdir(parents=True)
    (tmp_path / "class" / "alice" / "99-sample.ipynb").write_text(json.dumps(exercise(GOOD_LOOKUP, GOOD_START)))
    by_seed = {}
    for seed in (7, 2024):
        settings = Settings(sanitize=SANITIZE, cell_timeout=5, budget=15, seed=seed)
        [result] = grade_all(tmp_path / "class", tmp_path / "ref", settings, jobs=1)
        assert result.seed == seed and result.as_dict()["seed"] == seed
        by_seed[seed] = points(result)
    assert by_seed == {7: (3, 3), 2024: (2, 3)}  # exercise 2 (1 point) fails its hidden check at 2024


@pytest.mark.notebooks
def test_a_ready_rule_that_passes_every_table_but_hangs_flush_scores_0_in_05():
    # Kafka's rule wherever the tables look (flushing is asked there with linger_ms=10, and
    # batch_departures never flushes); a producer flushing with a longer linger waits it out.
    # Only the tester's flush() check sees it: the "run your cluster" cell's verdict and the
    # hidden judge with the grader's seed.
    fitted = ("def batch_ready(batch_bytes, batch_size, queued_behind, waited_ms, linger_ms, flushing):\n"
              "    return (queued_behind > 0 or batch_bytes >= batch_size or waited_ms >= linger_ms\n"
              "            or (flushing and linger_ms <= 10))\n")
    by = _grade("05-producers-and-acks", {"correct": {}, "fitted": {"ex3": fitted}})
    correct, result = by["correct"], by["fitted"]
    assert correct.points == correct.max_points, feedback(correct)
    third = result.exercises[2]
    failed = {c.cell_id for c in third.checks if not c.passed}
    assert failed == {"ex3-cluster", "hidden-ex3-judge", None}, feedback(result)  # None: the hidden property batch_ready
    assert {"ex3-check-ready", "ex3-check-examples", "ex3-check-simulated", "hidden-ex3"} <= {
        c.cell_id for c in third.checks if c.passed}, feedback(result)
    assert third.earned == 0 and result.points == correct.points - third.points, feedback(result)
