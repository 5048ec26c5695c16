"""`make bench` must keep working: its quick mode runs every benchmark but the notebooks end to end.

Only that it runs and reports is checked here; the figures themselves live in
benchmarks/RESULTS.md (speed is never asserted in tests).
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


# `python -m benchmarks --quick` runs these one after another; here each batch is its own
# command line, so that the two cores share them. Every benchmark of the quick run is in one
# batch (checked below), chaos in-process (test_chaos_benchmark_in_its_quick_mode, its verdicts
# checked too). Each batch's report must hold the headings of its sections and the targets.
QUICK_BATCHES = {
    "spark": ["## Spark: records per second through the minikafka source",
              "## Spark: end-to-end latency, produce to foreachBatch"],
    "kraft": ["## The controller quorum (KRaft)"],
    "flood": ["## Floods: a well-behaved producer's ack latency while another client floods the broker",
              "producer's p99 ack latency during each flood"],
    "consumer wire": ["## Consumer groups: time to reassign", "## Consumer groups: records per second",
                      "## Wire: producer throughput", "## Wire: the broker's ceiling",
                      "## Wire: consumer throughput", "## Wire: end-to-end latency",
                      "broker ceiling (raw Produce, 64 KB batches) >= 1,000,000 msg/s"],
    "append read recovery simulation peer grading transactions": [
        "append", "read", "recovery", "| CPU |", "Validated + log MB/s", "append at 16 KiB batches >= 0.5 of raw",
        "## The simulated cluster",
        "## Peer: minikafka beside Tansu",  # run with the bench extra, else "(not run)"
        "## Grading: a class of submissions", "## Transactions: read-process-write"],
}


def test_the_quick_batches_are_the_whole_quick_run():
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from benchmarks.__main__ import default_names

    batched = [name for batch in QUICK_BATCHES for name in batch.split()] + ["chaos"]
    assert sorted(batched) == sorted(default_names(quick=True))


@pytest.mark.parametrize("batch", [
    pytest.param(b, id=b.replace(" ", "-"),
                 marks=[pytest.mark.spark] if b == "spark" else [])  # a local session, Java 17+
    for b in QUICK_BATCHES])
def test_quick_benchmarks_write_a_report(tmp_path, batch):
    out = tmp_path / "RESULTS.md"
    subprocess.run(
        [sys.executable, "-m", "benchmarks", *batch.split(), "--quick", "--out", str(out)],
        cwd=REPO, check=True, capture_output=True, timeout=300,
    )
    report = out.read_text()
    for heading in ("## Targets", *QUICK_BATCHES[batch]):
        assert heading in report, heading


def test_consumer_benchmark_in_a_tiny_configuration(tmp_path):
    """The consumer-group benchmark, in process: a crash and a clean departure at the smallest
    session timeout, and a few hundred records drained by 3 consumers and by 1."""
    if str(REPO) not in sys.path:  # `python -m pytest` has the repo on sys.path, bare `pytest` not
        sys.path.insert(0, str(REPO))
    from benchmarks import consumer

    crash = consumer.rebalance_run(6000, seed=1, clean=False)
    clean = consumer.rebalance_run(6000, seed=1, clean=True)
    for r in (crash, clean):  # every event was seen, in the protocol's order (no timing asserted)
        assert 0 <= r.detected_ms <= r.assigned_ms <= r.resumed_ms
    for members in (1, 3):
        d = consumer.drain_run(300, members, seed=0)
        assert d.sim_ms > 0 and d.join_ms > 0
    sections = consumer.run(tmp_path, quick=True, repeats=1)
    assert [s.name for s in sections] == ["consumer", "consumer"]
    rebalance, drain = sections
    assert [row[0].split()[0] for row in rebalance.rows] == ["crash", "clean"]
    assert all(len(row) == len(rebalance.columns) for row in rebalance.rows)
    assert [row[0] for row in drain.rows] == ["1 consumer", "3 consumers", "**3 / 1**"]


def test_chaos_benchmark_in_its_quick_mode(tmp_path):
    """The chaos benchmark, tiny: one safe run (a SIGKILL under an idempotent acks=all load)
    and one negative control (acks=1, unclean election). Real processes; the verdicts are
    the checker's: nothing lost, duplicated or reordered in the safe run, losses in the
    control (its scenario forces them: the elected replica missed 300 acknowledged writes)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from benchmarks import chaos
    from benchmarks.__main__ import to_markdown

    section = chaos.run(tmp_path, quick=True, repeats=1)
    assert "## Chaos: SIGKILLs under load" in to_markdown([section], [], "python -m benchmarks chaos --quick", 0)
    safe, control = section.targets
    assert safe[2] == "met", safe
    assert control[2] == "met", control
    labels = [row[0] for row in section.rows]
    assert labels == ["safe 1", "**safe: total of 1**", "control 1", "**control: total of 1**"]


# --- the results page (benchmarks/RESULTS.md) ------------------------------------------------------


def _page_tools():
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from benchmarks import __main__ as bench
    from benchmarks.common import Section

    return bench, Section


ABOUT = [("Date (UTC)", "2026-12-01 09:30:00"),
         ("CPU", "AMD EPYC 7B13 (virtual machine: `hypervisor` flag set), 2 logical cores (2 usable)"),
         ("Kernel", "Linux 6.18.44"), ("minikafka", "git abc1234"),
         ("Load average at start (1/5/15 min)", "0.50 / 0.40 / 0.30")]


def test_the_results_page_is_one_table_of_figures_and_a_log_under_300_lines():
    bench, _ = _page_tools()
    page = (REPO / "benchmarks" / "RESULTS.md").read_text()
    lines = page.splitlines()
    assert len(lines) < 300
    start = lines.index(bench.FIGURES_HEADING)
    header = next(i for i in range(start, len(lines)) if lines[i].startswith("|"))
    assert bench._cells(lines[header]) == bench.FIGURE_COLUMNS
    rows = [bench._cells(line) for line in lines[header + 2:] if line.startswith("|")][:100]
    rows = rows[:next((i for i, r in enumerate(rows) if len(r) != 6), len(rows))]
    assert len(rows) >= 20
    for target, figure, status, date, commit, machine in rows:
        assert target and figure and machine, target
        assert status in ("met", "**not met**"), (target, status)
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", date), (target, date)
        assert re.fullmatch(r"[0-9a-f]{7,40}", commit), (target, commit)
    assert bench.LOG_HEADING in lines


def test_a_run_rewrites_its_targets_rows_and_adds_a_log_entry_leaving_the_rest():
    bench, Section = _page_tools()
    page = (REPO / "benchmarks" / "RESULTS.md").read_text()
    section = Section("append", "append", [], ["x"], [["1"]], targets=[
        ("append at 16 KiB batches >= 0.5 of raw", "0.61", "met"),
        ("a target | with a bar", "0.1", "**not met**")])
    new = bench.update_results(page, [section], ABOUT, "python -m benchmarks append", 42.0)
    old_lines, new_lines = page.splitlines(), new.splitlines()
    changed = [line for line in new_lines if line not in old_lines]
    assert changed[0] == ("| append at 16 KiB batches >= 0.5 of raw | 0.61 | met | 2026-12-01 09:30 | abc1234 "
                          "| AMD EPYC 7B13, 2 cores, Linux 6.18.44 |")
    assert changed[1].startswith("| a target \\| with a bar | 0.1 | **not met** | 2026-12-01 09:30 |")
    entry = " ".join(line.strip() for line in changed[2:])
    assert entry.startswith("- **2026-12-01 09:30 UTC, `python -m benchmarks append`** (append; git abc1234; 42 s;")
    assert entry.endswith("2 target(s) measured, 1 met; not met: a target | with a bar.")
    assert len(new_lines) == len(old_lines) + len(changed) - 1  # one row replaced, the rest added
    assert [line for line in old_lines if line not in new_lines] == [
        next(line for line in old_lines if line.startswith("| append at 16 KiB"))]
    log = new_lines.index(bench.LOG_HEADING)
    assert new_lines[log + 2] == changed[2]  # the newest entry first
    again = bench.update_results(new, [section], ABOUT, "python -m benchmarks append", 42.0)
    assert again.count("| a target \\| with a bar |") == 1  # its row is found again by its target


def test_a_page_of_another_layout_is_started_afresh():
    bench, Section = _page_tools()
    section = Section("read", "read", [], ["x"], [["1"]], targets=[("read >= 1", "2", "met")])
    page = bench.update_results("# minikafka benchmarks\n\nsomething else\n", [section], ABOUT, "python -m benchmarks read", 1.0)
    assert "something else" not in page
    assert "| read >= 1 | 2 | met | 2026-12-01 09:30 | abc1234 | AMD EPYC 7B13, 2 cores, Linux 6.18.44 |" in page
    assert page.index(bench.FIGURES_HEADING) < page.index("| read >= 1 |") < page.index(bench.LOG_HEADING)
