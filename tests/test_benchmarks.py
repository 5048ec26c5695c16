"""`make bench` must keep working: its quick mode runs every benchmark but the notebooks end to end.

Only that it runs and reports is checked here; the figures themselves live in
benchmarks/RESULTS.md (speed is never asserted in tests).
"""

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
