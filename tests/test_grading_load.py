"""Grades that do not depend on the machine's load (issue 34, item 5).

The grader's limits are CPU seconds of the kernel and what it started, with the clock only a
backstop for a kernel that waits (runner.py). So one small class of the fixture course (a right
submission, a slow but right one, an endless loop and a wrong rule) is graded twice: on the
machine as it is, and with CPU hogs beside the grader (one busy loop pinned to each core, started
here and killed after), and must get the same, expected, scores both times.

The limits are chosen so that wall-clock limits fail this: the slow submission's exercise 2 cell
uses 4 CPU seconds (measured by the kernel's own process_time, so on any machine), its limit is
6 s. With a hog on every core the kernel gets at most half a core, so that cell takes 8 s or more
on the clock: main's 6 s wall-clock limit interrupted it (2/3 instead of 3/3); the CPU limit does not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minikafka import platform
from minikafka.course.grade import Settings
from minikafka.course.gradebook import feedback, grade_all
from minikafka.course.runner import run_cells
from minikafka.course.sandbox import Limits, Sandbox
from grading_helpers import GOOD_LOOKUP, GOOD_START, REFERENCES, SANITIZE, exercise

# 6 CPU seconds a cell (60 s on the clock), 20 a submission.
LIMITS = Settings(sanitize=SANITIZE, cell_timeout=6, budget=20)
CPU_MEASURED = pytest.mark.skipif(platform.cpu_seconds_of_tree(os.getpid()) is None,
                                  reason="CPU time of a process tree cannot be read here: the limits are on the clock")

# Right, and 4 CPU seconds of work first (the kernel's own CPU clock: the same work on any load).
SLOW_START = ("import time\n_began = time.process_time()\n"
              "while time.process_time() - _began < 4.0:\n    sum(range(1000))\n" + GOOD_START)
CLASS = {
    "right": (GOOD_LOOKUP, GOOD_START),
    "slow": (GOOD_LOOKUP, SLOW_START),
    "loop": (GOOD_LOOKUP, "while True:\n    pass"),
    "wrong": (GOOD_LOOKUP.replace("<=", "<"), GOOD_START),
}
EXPECTED = {"right": [2, 1], "slow": [2, 1], "loop": [2, 0], "wrong": [0, 1]}


def _write_class(folder: Path) -> Path:
    for student, (lookup, start) in CLASS.items():
        nb = exercise(lookup, start)
        (folder / student).mkdir(parents=True)
        (folder / student / "99-sample.ipynb").write_text(json.dumps(nb))
    return folder


def _scores(results) -> dict[str, list[float]]:
    return {r.student: [e.earned for e in r.exercises] for r in results}


class Hogs:
    """One busy loop pinned to each core this process may use; each says 'ready' once looping."""

    def __init__(self):
        self.procs = []
        try:
            for cpu in sorted(os.sched_getaffinity(0)):
                proc = subprocess.Popen([sys.executable, "-c", "print('ready', flush=True)\nwhile True:\n    pass"],
                                        stdout=subprocess.PIPE, text=True)
                self.procs.append(proc)
                os.sched_setaffinity(proc.pid, {cpu})
                assert proc.stdout.readline().strip() == "ready"  # looping now: a state, not a sleep
        except BaseException:
            self.close()
            raise

    def cpu_seconds(self) -> float:
        return sum(platform.cpu_seconds_of_tree(p.pid) or 0.0 for p in self.procs)

    def close(self):
        for proc in self.procs:
            proc.kill()
            proc.wait()
            proc.stdout.close()


@pytest.mark.notebooks
@CPU_MEASURED
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pinning a hog to a core needs sched_setaffinity")
def test_the_same_class_gets_the_same_grades_idle_and_beside_cpu_hogs(tmp_path):
    folder = _write_class(tmp_path / "class")
    idle = grade_all(folder, REFERENCES, LIMITS, jobs=2)
    hogs = Hogs()
    try:
        loaded = grade_all(folder, REFERENCES, LIMITS, jobs=2)
        hogged = hogs.cpu_seconds()
    finally:
        hogs.close()
    by = {r.student: r for r in loaded}
    assert _scores(idle) == EXPECTED, [feedback(r) for r in idle]
    assert _scores(loaded) == EXPECTED, [feedback(r) for r in loaded]
    assert hogged > 0  # the hogs ran beside the loaded grading
    # The loop is stopped by its CPU, and says so in a student's words, loaded or not.
    for results in (idle, loaded):
        loop = {r.student: r for r in results}["loop"]
        assert loop.exercises[1].checks[0].message.endswith("used 6 s of CPU in this cell: an endless loop?"), \
            feedback(loop)
        assert "timed out in: Exercise 2: the first byte to read" in loop.notes
    assert by["slow"].notes == [] and by["right"].notes == []


@pytest.mark.notebooks
@CPU_MEASURED
def test_each_limit_that_stops_a_cell_is_named():
    """A loop is stopped by its CPU seconds, a sleep by the clock (10 times the CPU limit), and the
    notebook's CPU budget ends the run; each says which limit in words."""
    cells = ["import time\ntime.sleep(10**6)",
             "while True:\n    pass",
             "print('still here')",
             "x = 0\nwhile True:\n    x += 1",
             "print('never')"]
    with Sandbox(Limits()) as box:
        runs = run_cells(box, cells, cell_timeout=0.5, budget=0.9)
    sleep, loop, here, loop2, never = runs
    assert sleep.status == "timeout" and sleep.reason.startswith(
        "still running after 5 s on the clock, having used only "), sleep.reason
    assert sleep.reason.endswith("of CPU: waiting for something that never comes (a sleep, a lock, a read with no timeout)?")
    assert (loop.status, loop.reason) == ("timeout", "used 0.5 s of CPU in this cell: an endless loop?")
    assert loop.cpu_seconds >= 0.5
    assert (here.status, here.outputs[0]["text"]) == ("ok", "still here\n")
    # The second loop has what is left of the 0.9 s budget (at most 0.4 s): the budget stops it,
    # and the next cell never runs.
    assert (loop2.status, loop2.reason) == ("timeout", "timed out: the notebook's CPU budget (0.9 s) was used up in this cell")
    assert (never.status, never.reason) == ("not run", "not run: the notebook's CPU budget (0.9 s) was used up")
