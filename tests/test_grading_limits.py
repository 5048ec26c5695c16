"""The grader's bounds on what a submission can make it hold, write or wait for (a red-team trial
of `minikafka grade`): one cell's outputs kept in memory (runner.MAX_CELL_OUTPUT), the length of a
verdict and of every message in the gradebook and the feedback, one feedback file per student
whatever their names, every student folder graded or said, a FIFO or a huge file named like a
notebook, and two notebooks of one exercise in one student's folder.

No kernel starts here: the runner is fed messages by a fake kernel client, and the submissions
graded by `grade_all` are ones it refuses before running anything.
"""

from __future__ import annotations

import csv
import json
import os
import threading
from collections import OrderedDict
from queue import Empty

import nbformat
import pytest

from minikafka.course import runner
from minikafka.course.compare import verdict
from minikafka.course.exercises import MAX_NOTEBOOK_BYTES, read_notebook
from minikafka.course.grade import Check, Exercise, Result, Settings
from minikafka.course.gradebook import (MESSAGE_CHARS, csv_rows, find_submissions, grade_all, write_csv,
                                        write_feedback)
from minikafka.course.runner import MAX_CELL_OUTPUT, CellRun, run_cells
from grading_helpers import GOOD_LOOKUP, GOOD_START, REFERENCES, SANITIZE, exercise

MB = 1_000_000
SETTINGS = Settings(sanitize=SANITIZE, cell_timeout=5, budget=15)
COMPARED = {"check": True, "skip": False, "check_exception": False}


# -- one cell's outputs (D3a) ----------------------------------------------------------------------

class FakeKernel:
    """A kernel client and its box: each `execute` answers with the next cell's messages, then idle."""

    def __init__(self, *cells):
        self.cells, self.pending, self.sent = list(cells), [], 0

    # the client
    def execute(self, source, allow_stdin, store_history):
        self.sent += 1
        msg_id = f"request-{self.sent}"
        self.pending = [(msg_id, kind, content) for kind, content in self.cells.pop(0)]
        self.pending.append((msg_id, "status", {"execution_state": "idle"}))
        return msg_id

    def get_iopub_msg(self, timeout):
        if not self.pending:
            raise Empty
        msg_id, kind, content = self.pending.pop(0)
        return {"parent_header": {"msg_id": msg_id}, "msg_type": kind, "content": content}

    # the box
    @property
    def client(self):
        return self

    def alive(self):
        return True

    def limit_hit(self, text):
        return None

    def interrupt(self):
        raise AssertionError("no cell here runs out of time")


def printed(text, name="stdout"):
    return ("stream", {"name": name, "text": text})


def kept(run: CellRun) -> int:
    """Characters of text the run holds: printed, an error's, displayed."""
    return sum(len(out.get("text", "")) + len(out.get("evalue", ""))
               + sum(len(json.dumps(out[key])) for key in ("traceback", "data") if key in out)
               for out in run.outputs)


def test_a_cell_printing_50_mb_keeps_at_most_the_cap_and_the_next_cell_its_own_output():
    chunk = "x" * (MB - 1) + "\n"
    kernel = FakeKernel([printed(chunk) for _ in range(50)], [printed("next\n")])
    big, after = run_cells(kernel, ["print_a_lot()", "print('next')"], cell_timeout=60, budget=60)
    assert kept(big) <= MAX_CELL_OUTPUT and big.truncated
    assert big.stream_text == (chunk * 2)[:MAX_CELL_OUTPUT]  # what fitted, then nothing
    assert big.status == "ok", big.reason  # a helper cell that prints too much is not failed for it
    assert not kernel.pending  # every message was read (drained up to idle), not left for the next cell
    assert (after.status, after.stream_text, after.truncated) == ("ok", "next\n", False)


def test_an_error_after_the_cap_still_fails_the_cell_with_its_message_clipped():
    kernel = FakeKernel([printed("y" * (2 * MB)),
                         ("error", {"ename": "ValueError", "evalue": "z" * (5 * MB), "traceback": ["t" * MB]})])
    [run] = run_cells(kernel, ["boom()"], cell_timeout=60, budget=60)
    assert kept(run) <= MAX_CELL_OUTPUT and run.truncated
    assert run.status == "error" and run.reason.startswith("ValueError: zzz")
    assert len(run.reason) < runner.REASON_CHARS + 100
    assert run.reason.endswith(f"({5 * MB - runner.REASON_CHARS} more characters)")


def test_a_check_whose_output_was_cut_fails_and_says_so():
    kernel = FakeKernel([printed("0 -> (0, 0)\n" * 200_000)])
    [run] = run_cells(kernel, ["check()"], cell_timeout=60, budget=60)
    expected = [{"output_type": "stream", "name": "stdout", "text": "0 -> (0, 0)\n"}]
    passed, message = verdict(run, COMPARED, expected, OrderedDict())
    assert not passed
    assert message.startswith("output differs: your output has more lines than expected, from line 2: ")
    assert message.endswith(f"(your output was cut at {MAX_CELL_OUTPUT} characters: the grader keeps "
                            "no more of one cell's output)")


# -- verdicts and the gradebook (D3b) ----------------------------------------------------------------

def test_a_50_mb_output_gets_a_short_verdict_that_says_where_it_differs():
    run = CellRun(status="ok", outputs=[nbformat.from_dict({"output_type": "stream", "name": "stdout",
                                                            "text": "answer: 4" + "2" * (50 * MB) + "\n"})])
    expected = [{"output_type": "stream", "name": "stdout", "text": "answer: 42\n"}]
    passed, message = verdict(run, COMPARED, expected, OrderedDict())
    assert not passed and len(message) < 400, message[:1000]
    assert message.startswith("output differs: line 1, character 11: expected 'answer: 42', "
                              "your code gave 'answer: 42222"), message
    assert message.endswith(f"... ({50 * MB + 9 - 200} more characters)")


def test_an_exception_with_a_50_mb_message_gets_a_short_verdict():
    run = CellRun(status="error", reason="ValueError: " + "v" * (50 * MB))
    passed, message = verdict(run, COMPARED, [], OrderedDict())
    assert not passed and message.startswith("raised ValueError: vvv") and len(message) < 2600


def test_the_gradebook_and_the_feedback_bound_every_message(tmp_path):
    huge = "w" * (50 * MB)
    result = Result(student="ann", submission="ann/99-sample.ipynb", notebook="99-sample.ipynb", notes=[huge],
                    exercises=[Exercise("Exercise 1: where does a read start?", 2,
                                        [Check("check 1", "c1", message=huge, detail=huge)])])
    broken = Result(student="bob", submission="bob/99-sample.ipynb", status="error", error=huge)
    write_csv([result, broken], tmp_path / "grades.csv")
    [written_ann, written_bob] = write_feedback([result, broken], tmp_path / "feedback")
    bound = 4 * MESSAGE_CHARS  # a message, a detail and a note of at most MESSAGE_CHARS each, and headings
    assert (tmp_path / "grades.csv").stat().st_size < bound
    assert written_ann.stat().st_size < bound and written_bob.stat().st_size < bound
    rows = list(csv.DictReader((tmp_path / "grades.csv").open()))
    assert [r["student"] for r in rows] == ["ann", "bob"]
    assert rows[0]["message"].startswith("check 1: www") and rows[0]["message"].endswith("more characters)")
    assert "more characters)" in written_bob.read_text()



def test_a_name_or_message_no_file_can_encode_never_costs_the_class_its_gradebook(tmp_path):
    """A red team: a lone surrogate (a kernel sending raw JSON, a Latin-1 folder name from a zip
    export) in one student's message made write_csv raise UnicodeEncodeError after the whole class was
    graded: grades.csv truncated to 0 bytes (an older gradebook at that path gone) and no feedback
    for anyone. Now both are written, the surrogate escaped, and a gradebook is replaced whole."""
    target = tmp_path / "grades.csv"
    target.write_text("the gradebook of last week\n")
    odd = Result(student="caf\udce9", submission="caf\udce9/99-sample.ipynb", notebook="99-sample.ipynb",
                 exercises=[Exercise("Exercise 1: where does a read start?", 2,
                                     [Check("check 1", "c1", message="your code raised ValueError: no \udc80")])])
    honest = Result(student="zoe", submission="zoe/99-sample.ipynb", notebook="99-sample.ipynb",
                    exercises=[Exercise("Exercise 1: where does a read start?", 2, [Check("check 1", "c1", passed=True)])])
    write_csv([odd, honest], target)
    rows = list(csv.DictReader(target.open(encoding="utf-8")))
    assert [r["student"] for r in rows] == ["caf\\udce9", "zoe"]
    assert rows[0]["message"].endswith("no \\udc80") and rows[1]["points"] == "2"
    written = write_feedback([odd, honest], tmp_path / "feedback")
    assert len(written) == 2 and "no \\udc80" in written[0].read_text(encoding="utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["feedback", "grades.csv"]  # no partial file left


def test_a_student_folder_named_like_a_formula_is_not_a_formula_in_the_gradebook(tmp_path):
    results = [Result(student=name, submission=f"{name}/99-sample.ipynb", status="error", error="x")
               for name in ("=HYPERLINK(\"http://x\",\"y\")", "+1", "-1", "@SUM(A1)", "ann")]
    write_csv(results, tmp_path / "grades.csv")
    students = [r["student"] for r in csv.DictReader((tmp_path / "grades.csv").open())]
    assert students == ["'=HYPERLINK(\"http://x\",\"y\")", "'+1", "'-1", "'@SUM(A1)", "ann"]


# -- feedback file names (D5) ------------------------------------------------------------------------

def test_students_whose_names_sanitize_alike_each_get_their_own_feedback_file(tmp_path):
    students = ["x y", "x_y", "x~y", "Ann", "ann", ".dot"]
    results = [Result(student=s, submission=f"{s}/99-sample.ipynb", status="error", error=f"marker of {s!r}")
               for s in students]
    written = write_feedback(results, tmp_path)
    assert len(written) == len(set(written)) == len(students) == len(list(tmp_path.iterdir()))
    for student in students:
        [mine] = [p for p in written if f"marker of {student!r}" in p.read_text()]
        assert all(f"marker of {other!r}" not in mine.read_text() for other in students if other != student)
        assert not mine.name.startswith(".")
    assert len({p.name.casefold() for p in written}) == len(students)  # apart on macOS and Windows too
    assert (tmp_path / "x_y.md").read_text().count("marker of 'x_y'") == 1  # a plain name stays plain
    assert [p.name for p in write_feedback(results, tmp_path / "again")] == [p.name for p in written]


# -- which folders are graded (D6) ------------------------------------------------------------------

def test_a_student_folder_starting_with_a_dot_is_graded_and_tool_folders_are_not(tmp_path):
    notebooks = [".alice/99-sample.ipynb", "bob/99-sample.ipynb", "bob/.ipynb_checkpoints/99-sample-checkpoint.ipynb",
                 ".ipynb_checkpoints/99-sample-checkpoint.ipynb", ".git/99-sample.ipynb",
                 "carl/__pycache__/99-sample.ipynb", "bob/._99-sample.ipynb"]
    for name in notebooks:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{")
    assert [p.relative_to(tmp_path).as_posix() for p in find_submissions(tmp_path)] == \
        [".alice/99-sample.ipynb", "bob/99-sample.ipynb"]
    results = grade_all(tmp_path, REFERENCES, SETTINGS)  # both unreadable: graded without a kernel
    assert [(r.student, r.status) for r in results] == [(".alice", "error"), ("bob", "error")]
    assert results[0].error.startswith("not a notebook: invalid JSON")


# -- what is read as a notebook (D7) ------------------------------------------------------------------

def test_a_fifo_named_like_a_notebook_is_an_error_row_and_the_class_goes_on(tmp_path):
    (tmp_path / "alice").mkdir()
    (tmp_path / "bob").mkdir()
    fifo = tmp_path / "alice" / "99-sample.ipynb"
    os.mkfifo(fifo)
    (tmp_path / "bob" / "99-sample.ipynb").write_text("{")

    def release():  # the old grader blocked in open() for ever: a writer coming and going frees it
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # no reader waiting: nothing to free
            pass

    watchdog = threading.Timer(3.0, release)
    watchdog.start()
    try:
        results = grade_all(tmp_path, REFERENCES, SETTINGS, jobs=2)
    finally:
        watchdog.cancel()
    by = {r.student: r for r in results}
    assert by["alice"].status == "error"
    assert by["alice"].error == (f"not a notebook: {fifo} is not a regular file (it is a named pipe (FIFO)): "
                                 "only a saved .ipynb file can be read as a notebook")
    assert by["bob"].status == "error" and by["bob"].error.startswith("not a notebook: invalid JSON")


def test_a_notebook_file_larger_than_the_limit_is_refused_unread(tmp_path):
    path = tmp_path / "99-sample.ipynb"
    with path.open("wb") as file:
        file.truncate(MAX_NOTEBOOK_BYTES + 1)  # sparse: no disk used
    with pytest.raises(ValueError, match=r"is larger than any notebook should be \(more than 52,428,800 bytes\)"):
        read_notebook(path)


# -- one row per student and exercise (D8) --------------------------------------------------------------

def test_two_notebooks_of_one_exercise_in_a_students_folder_are_one_error_naming_both(tmp_path):
    (tmp_path / "alice").mkdir()
    for name in ("99-sample.ipynb", "99-sample (1).ipynb"):
        (tmp_path / "alice" / name).write_text(json.dumps(exercise(GOOD_LOOKUP, GOOD_START)))
    (tmp_path / "bob").mkdir()
    (tmp_path / "bob" / "99-sample.ipynb").write_text("{")
    results = grade_all(tmp_path, REFERENCES, SETTINGS, jobs=2)
    assert [(r.student, r.status) for r in results] == [("alice", "error"), ("bob", "error")]
    said = ("2 submissions of 99-sample for alice: alice/99-sample (1).ipynb, alice/99-sample.ipynb; "
            "keep one and grade again (the gradebook has one row per student and exercise)")
    assert results[0].error == said
    rows = [r for r in csv_rows(results) if r["student"] == "alice"]
    assert [(r["exercise"], r["points"], r["status"], r["message"]) for r in rows] == [
        ("Exercise 1: where does a read start?", "0", "error", said),
        ("Exercise 2: the first byte to read", "0", "error", said)]


def test_a_rule_error_is_quoted_whole_its_call_its_answer_and_kafkas():
    # A student trial: 01's check cut a hanging index_lookup's RuleError after 200 characters,
    # before "it returned" and "Kafka's rule returns", the lines that teach.
    from minikafka.rules import RuleCall, RuleError

    entries = [(31 + 8 * i, 536 * i) for i in range(40)]
    call = RuleCall(4012, 1, "index_lookup", {"entries": entries, "offset": 33, "base_offset": 31}, None,
                    (31, 0), "nothing: still running after 2.0 s")
    error = RuleError(call, "it was still running after 2.0 s of wall time (a loop that never ends?)")
    kernel = FakeKernel([("error", {"ename": "RuleError", "evalue": str(error), "traceback": []})])
    [run] = run_cells(kernel, ["check()"], cell_timeout=60, budget=60)
    passed, message = verdict(run, COMPARED, [], OrderedDict())
    assert len(str(error)) > 800 and not passed
    assert message == f"raised RuleError: {error}", message
