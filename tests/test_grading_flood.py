"""A cell's one huge message does not take the grader's memory (runner.MAX_MESSAGE_BYTES).

A red-team trial of `minikafka grade`: `print("x" * 2**30)` in a student's cell made ipykernel
publish one ~1 GiB message, which the grader received and decoded whole (about 3 times its size at
its peak) before keeping 1 MiB of it; with `--jobs 2` a few such submissions could have the grader
killed by the OOM killer. An exception with a huge message is two such messages (its error output
on iopub, its execute_reply on shell). Now the grader's sockets refuse a message part past
MAX_MESSAGE_BYTES unread, the runner connects again and learns from the kernel when the cell is
done, and the cell says what was dropped.

Each test runs its cells in a real sandboxed kernel, as `minikafka grade` does, from a grader
process of its own: its peak memory (ru_maxrss, which never goes down) then owes nothing to the
tests run before in this process. The old grader's grew by more than a gigabyte here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import OrderedDict

import nbformat
import pytest

from minikafka.course import runner
from minikafka.course.compare import verdict
from minikafka.course.runner import MAX_CELL_OUTPUT, CellRun
from grading_helpers import ROOT

pytestmark = [pytest.mark.notebooks, pytest.mark.processes,
              pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB: Linux's")]

MB = 1_000_000
BOUND = 100 * MB  # the grader's peak may grow by this at most, for a message of hundreds of MB
COMPARED = {"check": True, "skip": False, "check_exception": False}

# The grader: runs the cells given (JSON) in a sandboxed kernel; says how much its peak memory grew
# while they ran, and their CellRuns.
GRADER = textwrap.dedent("""
    import json, resource, sys
    from dataclasses import asdict
    from minikafka.course.runner import run_cells
    from minikafka.course.sandbox import Limits, Sandbox

    with Sandbox(Limits()) as box:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        runs = run_cells(box, json.loads(sys.argv[1]), cell_timeout=120, budget=240)
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"grown": grown * 1024, "runs": [asdict(run) for run in runs]}))
""")


def grade(cells: list[str]) -> tuple[int, list[CellRun]]:
    """(bytes the grader's peak memory grew by, the cells' runs)."""
    done = subprocess.run([sys.executable, "-c", GRADER, json.dumps(cells)], capture_output=True, text=True,
                          cwd=ROOT, timeout=900)  # (a backstop for a hang, not a measure)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.splitlines()[-1])
    runs = [CellRun(**{**run, "outputs": [nbformat.from_dict(o) for o in run["outputs"]]}) for run in said["runs"]]
    return said["grown"], runs


def stream(text: str, name: str = "stdout") -> dict:
    return {"output_type": "stream", "name": name, "text": text}


def dropped() -> dict:
    """The line a cell's outputs end with when a message was dropped."""
    return stream(f"[{runner.DROPPED}]\n", "stderr")


def test_a_cell_printing_400_mb_is_dropped_unread_and_the_next_cells_print_their_own():
    grown, (big, after, long) = grade([
        "print('hello', flush=True)\nprint('x' * 400_000_000)",
        "print('next')",
        "print('y' * 5_000_000)"])  # under MAX_MESSAGE_BYTES: received, and cut at MAX_CELL_OUTPUT as before
    assert grown < BOUND, f"the grader's peak memory grew by {grown / MB:.0f} MB"
    assert (big.status, big.reason, big.truncated) == ("ok", runner.DROPPED, True)
    assert big.outputs == [stream("hello\n"), dropped()]
    # A check whose output was dropped does not pass on what was left, and says why.
    passed, message = verdict(big, COMPARED, [stream("hello\n")], OrderedDict())
    assert not passed and runner.DROPPED in message, message
    assert (after.status, after.outputs, after.truncated) == ("ok", [stream("next\n")], False)
    assert (long.status, long.reason, long.truncated) == ("ok", "", True)
    assert long.stream_text == "y" * MAX_CELL_OUTPUT


def test_an_exception_with_a_200_mb_message_fails_the_cell_unread_and_the_next_cell_runs():
    grown, (boom, after, small) = grade(["raise ValueError('v' * 200_000_000)", "print('after')", "1 / 0"])
    assert grown < BOUND, f"the grader's peak memory grew by {grown / MB:.0f} MB"
    # Its error output and its execute_reply were both dropped: the grader cannot know that it
    # raised, and counts it failed.
    assert (boom.status, boom.reason, boom.truncated) == ("error", runner.UNREAD, True)
    assert boom.outputs == [dropped()]
    for options in (COMPARED, {**COMPARED, "check": False}, {**COMPARED, "check_exception": True}):
        passed, message = verdict(boom, options, [], OrderedDict())
        assert not passed, (options, message)
    assert (after.status, after.outputs, after.truncated) == ("ok", [stream("after\n")], False)
    assert (small.status, small.reason, small.truncated) == ("error", "ZeroDivisionError: division by zero", False)
