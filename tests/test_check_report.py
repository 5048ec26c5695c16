"""A student's check shows the fault campaign's verdict their own rule earned: which node called
the rule with what, what it returned, what Kafka's rule returns, and what a user of the cluster
saw (``compare.tester_report``), not only the first line that differs from the expected output."""
import json
from pathlib import Path

import pytest

from minikafka.course import compare  # (its tester_report, imported by name, would be collected as a test)
from minikafka.course.grade import Check, Exercise, Result, Settings, check_file
from minikafka.course.gradebook import csv_rows, feedback, format_check
from minikafka.course.runner import CellRun

ROOT = Path(__file__).resolve().parent.parent
VERDICT = ("FAILED: schedule 1 of 6 (seed 5; retention.ms=3000, segment.ms=1000): gap\n"
           "your rules: index_lookup; 15 index_lookup calls, 3 answered differently from Kafka's\n"
           "t=   284 ms  broker 1: index_lookup(entries=[(2, 217)], offset=1, base_offset=0) -> (2, 217); "
           "Kafka's rule: (0, 0)\n"
           "then: gap: a consumer of trucks_gps-0 that seeks to offset 1 gets offset 2 first\n")


def run_printing(text: str) -> CellRun:
    return CellRun(status="ok", outputs=[{"output_type": "stream", "name": "stdout", "text": text}])


def test_the_report_is_the_verdict_from_its_failed_line_on():
    assert compare.tester_report(run_printing("seek to 5: offset 8\n" + VERDICT)) == VERDICT.rstrip("\n")
    assert compare.tester_report(run_printing("0 anomalies in 6 schedules (seed 0)\n")) == ""
    long = compare.tester_report(run_printing(VERDICT + "".join(f"t={i} ms  nemesis: heal\n" for i in range(100))))
    assert len(long.splitlines()) == compare.REPORT_LINES + 1 and long.endswith("more lines: run the cell to see them)")


def test_the_check_and_the_feedback_show_it_and_the_gradebook_keeps_one_line():
    check = Check("check 5", "ex1-cluster", passed=False, message="output differs: line 1: ...",
                  detail=VERDICT.rstrip("\n"))
    result = Result(student="ann", submission="ann/01-the-log.ipynb", notebook="01-the-log.ipynb", status="graded",
                    exercises=[Exercise("Exercise 1: find the batch", 3, [check])])
    shown = format_check(result).splitlines()
    at = shown.index("        check 5: output differs: line 1: ...")
    assert shown[at + 1:at + 5] == ["          " + line for line in VERDICT.splitlines()]
    assert "  ```\n  FAILED: schedule 1 of 6" in feedback(result)
    assert [row["message"] for row in csv_rows([result])] == ["check 5: output differs: line 1: ..."]


@pytest.mark.notebooks
def test_a_wrong_index_lookup_is_shown_its_cluster_s_verdict_by_the_check(tmp_path):
    # The lookup returns the entry after the one Kafka's rule finds: every table check says "line
    # 1 differs", and the "run your cluster" cell's tester says which call skipped which records.
    nb = json.loads((ROOT / "exercises" / "01-the-log.ipynb").read_text())
    [cell] = [c for c in nb["cells"] if c.get("id") == "ex1a"]
    cell["source"] = ("import bisect\n\ndef index_lookup(entries, offset, base_offset):\n"
                      "    i = bisect.bisect_right([o for o, _ in entries], offset)\n"
                      "    return entries[i] if i < len(entries) else (entries[-1] if entries else (base_offset, 0))\n")
    [rolls] = [c for c in nb["cells"] if c.get("id") == "ex2"]
    rolls["source"] = "def roll_reason(segment, batch, config):\n    return None\n"  # never rolls
    (tmp_path / "01-the-log.ipynb").write_text(json.dumps(nb))
    result = check_file(tmp_path / "01-the-log.ipynb", Settings(sanitize=ROOT / "tests" / "nbval-sanitize.cfg"))
    # After exercise 1's hidden properties (the check draws them too), the check still shows what
    # the code gave: only the grader keeps that from a student, who could carry hidden inputs out.
    rolled = [c for c in result.exercises[1].checks if not c.passed and c.label.startswith("check ")]
    assert rolled and all("your code gave" in c.message for c in rolled), rolled
    [judged] = [c for c in result.exercises[0].checks if c.detail]
    assert judged.detail.startswith("FAILED: schedule ") and not judged.passed
    assert "index_lookup(entries=" in judged.detail and "Kafka's rule: " in judged.detail
    assert "then: gap: " in judged.detail, judged.detail
    assert judged.detail.splitlines()[0] in format_check(result)
