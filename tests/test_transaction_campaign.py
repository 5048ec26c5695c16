"""The transactional fault campaign (``fault_campaign(workload="transactions")``): seeded
read-process-write schedules under kills of the producer, of the transaction coordinator's
broker and of the output's leaders, judged by ``checker.transactions``; and its negative
control, the same loop at-least-once, which the checker must catch."""

from __future__ import annotations

import pytest

from minikafka.checker.campaign import fault_campaign, run_schedule
from minikafka.errors import IllegalArgumentError


@pytest.mark.campaign
def test_a_seeded_transactional_campaign_finds_no_anomaly_while_every_kind_of_kill_strikes():
    report = fault_campaign(12, seed=7, workload="transactions")
    assert report.ok, report.table()
    assert set(report.anomalies) == {"lost-committed", "duplicate", "aborted-visible", "not-atomic",
                                     "input-not-once"}
    assert not any(report.anomalies.values())
    assert report.counts["committed"] > 0 and report.counts["aborted"] > 0, report.counts
    # The faults really happened: the application dying or stalling mid-transaction, the
    # coordinator's broker and the output's leaders killed.
    assert report.faults.get("producer-crash", 0) + report.faults.get("zombie", 0) > 0, report.faults
    assert report.faults.get("zombie", 0) > 0, report.faults
    assert report.faults.get("kill-coordinator", 0) > 0, report.faults
    assert report.faults.get("kill-leader", 0) > 0, report.faults
    assert "transactions: " in report.table() and "kill-coordinator" in report.table()


@pytest.mark.campaign
def test_the_same_loop_at_least_once_under_the_same_faults_counts_inputs_twice():
    """The negative control: without transactions a crash between writing the outputs and
    committing the input offsets makes the next instance process those inputs again."""
    report = fault_campaign(12, seed=7, workload="at-least-once")
    assert not report.ok
    assert report.anomalies["input-not-once"] > 0, report.table()
    assert report.faults.get("producer-crash", 0) + report.faults.get("zombie", 0) > 0


def test_a_transactional_schedule_replays_exactly_from_its_seed():
    first = run_schedule(828244927, workload="transactions")
    second = run_schedule(828244927, workload="transactions")
    assert first.faults == second.faults and first.faults
    assert first.counts == second.counts and first.fault_counts == second.fault_counts
    assert first.anomalies == second.anomalies


def test_markers_refused_at_once_by_the_coordinators_own_broker_are_retried_later_not_at_once():
    """Regression: a campaign schedule in which the coordinator's broker, leader of an output
    partition by its metadata but not yet by its replica, refused its own markers at once;
    the coordinator sent them again at once, and recursed until Python gave up
    (RecursionError). Now a refused marker waits for the retry timer."""
    report = run_schedule(2141656511, workload="transactions")
    assert not any(report.anomalies.values()) and not report.unchecked, report.table()
    assert report.counts["committed"] > 0


def test_a_bad_workload_is_refused_by_name():
    with pytest.raises(IllegalArgumentError, match="workload"):
        fault_campaign(1, workload="exactly-once-please")
    with pytest.raises(IllegalArgumentError, match="inputs"):
        fault_campaign(1, workload="transactions", inputs=0)
