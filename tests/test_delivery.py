"""Delivery semantics, proven: the consumer-side checker on hand-made histories, then the
four strategies run on simulated clusters under seeded consumer crashes (at-most-once
loses, at-least-once duplicates, auto commit with a hand-off loses, exactly-once with an
external store does neither), replay and determinism."""

import pytest

from minikafka.checker import (
    STRATEGIES,
    ConsumerHistory,
    DeliveryReport,
    History,
    analyse_delivery,
    delivery_campaign,
    delivery_table,
    draw_plan,
    run_delivery_scenario,
    schedule_seeds,
    topic_records,
)
from minikafka.clients import ConsumerRecord
from minikafka.errors import IllegalArgumentError

T = "work"


def history_of(*processed):
    """A consumer history from (consumer, partition, offset) triples; values are "v-<p>-<o>"."""
    h = ConsumerHistory()
    for i, (consumer, p, o) in enumerate(processed):
        h.processed(consumer, (T, p, o, f"v-{p}-{o}"), time_ms=i)
    return h


def topic(**ends):
    """The topic's records: p0=3 -> offsets 0..2 of work-0."""
    return [(T, int(name[1:]), o, f"v-{name[1:]}-{o}") for name, end in ends.items() for o in range(end)]


# --- the analysis, on hand-made histories -------------------------------------------------------------


def test_a_history_that_processed_everything_once_has_nothing_lost_or_duplicated():
    h = history_of(("c1", 0, 0), ("c1", 0, 1), ("c2", 1, 0))
    report = analyse_delivery(h, topic(p0=2, p1=1), strategy="exactly-once")
    assert (report.records, report.processed, report.lost, report.duplicates) == (3, 3, [], {})
    assert report.kept is True
    assert report.table().splitlines()[:2] == [
        "strategy      records  processed  lost  duplicated",
        "exactly-once        3          3     0           0",
    ]
    assert report.table().endswith("guarantee (no loss and no duplicates): kept")


def test_lost_and_duplicated_records_are_counted_sorted_and_shown():
    # work-0: 0 twice, 1 three times (by two consumers), 2 never; work-1: 0 once, 1..3 never.
    h = history_of(("c1", 0, 1), ("c1", 0, 0), ("c2", 0, 1), ("c2", 0, 0), ("c2", 0, 1), ("c1", 1, 0))
    h.crash("c1", after=(T, 0, 0), unprocessed=1, time_ms=10)
    h.restart("c1", time_ms=20)
    report = analyse_delivery(h, topic(p0=3, p1=4), strategy="at-least-once")
    assert report.lost == [(T, 0, 2, "v-0-2"), (T, 1, 1, "v-1-1"), (T, 1, 2, "v-1-2"), (T, 1, 3, "v-1-3")]
    assert report.duplicates == {(T, 0, 0): 2, (T, 0, 1): 3}
    assert (report.records, report.processed, report.duplicated, report.extra) == (7, 6, 2, 3)
    assert report.anomalies == {"lost": 4, "duplicated": 2}
    assert report.kept is False  # at-least-once promised no loss
    lines = report.table().splitlines()
    assert lines[1] == "at-least-once        7          6     4           2"
    assert lines[2] == "lost: work-0 offset 2; work-1 offsets 1..3"
    assert lines[3] == "duplicated: work-0 offsets 0..1 (1 processed 2 times, 1 processed 3 times)"
    assert "       10 ms  crash c1 after processing work-0 offset 0; 1 polled record(s) not processed" in lines
    assert "       20 ms  restart c1" in lines
    assert lines[-1] == "guarantee (no loss): BROKEN"


def test_a_record_processed_with_the_wrong_value_is_unexpected_not_a_delivery():
    h = history_of(("c1", 0, 0))
    h.processed("c1", (T, 0, 1, "made-up"))
    report = analyse_delivery(h, topic(p0=2), strategy="exactly-once")
    assert [(p.offset, p.value) for p in report.unexpected] == [(1, "made-up")]
    assert report.lost == [(T, 0, 1, "v-0-1")] and report.processed == 1
    assert report.kept is False


def test_the_topic_is_the_final_read_when_there_is_one_else_the_acknowledged_sends():
    h = History()
    for o in range(3):
        op = h.invoke(T, f"v-{o}", partition=0)
        h.ok(op, 0, o)
    h.fail(h.invoke(T, "never", partition=0))
    assert topic_records(h) == ({(T, 0, 0): "v-0", (T, 0, 1): "v-1", (T, 0, 2): "v-2"}, [])
    # The final read is the truth: an acknowledged value it lacks is not in the topic
    # (the producer checker calls that a lost write), an unacknowledged one it has is.
    h.final_read(T, 0, [(0, "v-0"), (1, "v-1"), (2, "sent-without-ack")])
    h.final_read(T, 1, [], log_start=0, high_watermark=5, complete=False)
    records, unchecked = topic_records(h)
    assert records == {(T, 0, 0): "v-0", (T, 0, 1): "v-1", (T, 0, 2): "sent-without-ack"}
    assert unchecked == [f"{T}-1"]
    report = analyse_delivery(history_of(("c", 0, 0)), h, strategy="at-least-once")
    assert report.unchecked == [f"{T}-1"] and report.kept is False  # it could not see everything
    # Records as the consumer returns them (a ConsumerRecord is a 13-field tuple).
    record = ConsumerRecord(T, 2, 0, 7, 0, 0, None, b"v-7", [], None, -1, 3, -1)
    assert topic_records([record]) == ({(T, 2, 7): "v-7"}, [])


def test_delivery_table_puts_strategies_in_order_whatever_the_input_order():
    def report(strategy, records, processed, lost, dups):
        return DeliveryReport(strategy, records, processed, [("t", 0, i, i) for i in range(lost)],
                              {("t", 0, i): 2 for i in range(dups)})
    table = delivery_table([report("exactly-once", 200, 200, 0, 0), report("auto-commit", 200, 150, 50, 0),
                            report("at-least-once", 200, 216, 0, 16), report("at-most-once", 200, 186, 14, 0)])
    assert table == (
        "strategy       records  processed  lost  duplicated\n"
        "at-most-once       200        186    14           0\n"
        "at-least-once      200        216     0          16\n"
        "auto-commit        200        150    50           0\n"
        "exactly-once       200        200     0           0"
    )


# --- the strategies under crashes ---------------------------------------------------------------------


def test_at_most_once_loses_the_rest_of_the_batch_a_crash_cuts_and_never_duplicates():
    # Seed 4: one consumer; it commits a batch, processes part of it and dies; restarted,
    # it resumes after the committed batch: exactly the unprocessed rest is lost.
    report = run_delivery_scenario("at-most-once", seed=4, crashes=1)
    (crash,) = report.history.crashes
    assert report.plan.consumers == 1 and crash.unprocessed > 0
    assert len(report.lost) == crash.unprocessed
    # A batch runs partition by partition, offset by offset: its rest comes after the crash.
    assert all((t, p, o) > crash.after for t, p, o, _ in report.lost)
    assert report.duplicates == {} and report.complete
    assert report.records == 200 and report.processed == 200 - len(report.lost)
    assert [r.consumer for r in report.history.restarts] == [crash.consumer]
    assert report.kept  # at-most-once promises no duplicates, not no loss


def test_at_most_once_loses_nothing_when_the_crash_falls_between_batches():
    report = run_delivery_scenario("at-most-once", seed=3, crashes=1)
    (crash,) = report.history.crashes
    assert crash.unprocessed == 0
    assert report.lost == [] and report.duplicates == {} and report.processed == report.records


@pytest.mark.campaign
def test_at_most_once_never_duplicates_over_many_schedules():
    campaign = delivery_campaign("at-most-once", schedules=30, seed=0)
    assert campaign.duplicated == 0 and campaign.kept
    assert campaign.lost > 0 and campaign.seeds_with_loss
    assert not campaign.incomplete_seeds


@pytest.mark.campaign
def test_at_least_once_never_loses_and_duplicates_what_a_crash_left_uncommitted():
    campaign = delivery_campaign("at-least-once", schedules=30, seed=0)
    assert campaign.lost == 0 and not campaign.seeds_with_loss and campaign.kept
    assert campaign.duplicated > 0 and campaign.seeds_with_duplicates
    assert not campaign.incomplete_seeds
    assert campaign.processed == campaign.records + campaign.extra  # every record, plus the repeats
    assert campaign.crashes >= 30
    table = campaign.table()
    assert table.splitlines()[1].startswith("at-least-once (30 runs)")
    assert f"replay: run_delivery_scenario('at-least-once', seed={campaign.seeds_with_duplicates[0]})" in table
    assert table.endswith("guarantee: kept in every run")


def test_auto_commit_with_a_hand_off_loses_the_queue_a_crash_takes_with_it():
    # Seed 0: the worker's queue is long when the process dies, and a later poll's auto
    # commit had already covered every record in it: nobody ever processes them.
    report = run_delivery_scenario("auto-commit", seed=0, crashes=1)
    (crash,) = report.history.crashes
    assert crash.unprocessed > 10
    assert len(report.lost) == crash.unprocessed
    assert report.duplicates == {} and report.complete
    assert report.kept is None  # auto commit with a hand-off promises nothing
    # The same crash under at-least-once costs nothing but repeats.
    same = run_delivery_scenario("at-least-once", seed=0, crashes=1)
    assert same.plan == report.plan and len(same.history.crashes) == 1
    assert same.lost == [] and same.duplicated > 0


@pytest.mark.campaign
def test_auto_commit_with_synchronous_processing_is_at_least_once():
    # A hand-off as big as a poll: each batch is processed before the next poll, so an auto
    # commit only ever covers processed records (the module docstring's claim).
    campaign = delivery_campaign("auto-commit", schedules=20, seed=0, handoff=40)
    assert campaign.lost == 0 and not campaign.incomplete_seeds
    assert campaign.duplicated > 0
    handed_off = delivery_campaign("auto-commit", schedules=20, seed=0)
    assert handed_off.lost > 0


@pytest.mark.campaign
def test_exactly_once_loses_nothing_and_duplicates_nothing_over_100_crash_schedules():
    campaign = delivery_campaign("exactly-once", schedules=100, seed=0)
    assert campaign.lost == 0 and campaign.duplicated == 0, campaign.table()
    assert campaign.kept and not campaign.incomplete_seeds
    assert campaign.processed == campaign.records == 100 * 200
    # The crashes were real: as many as planned, many of them in the middle of a batch.
    assert campaign.crashes == sum(len(r.plan.crash_points) for r in campaign.reports.values()) >= 100
    assert campaign.cutting_crashes > 50
    for report in campaign.reports.values():
        # The store holds one result per record processed, every record, and its offsets
        # are the partitions' ends.
        results = set(report.store.results())
        assert results == {p.key for p in report.history.processings} and len(results) == report.records
        ends = {}
        for (t, p, o) in report.store.results():
            ends[p] = max(ends.get(p, 0), o + 1)
        assert {tp.partition: o for tp, o in report.store.offsets().items()} == ends


def test_the_strategies_side_by_side_under_one_seed():
    reports = [run_delivery_scenario(s, seed=1) for s in reversed(STRATEGIES)]
    assert len({r.plan for r in reports}) == 1  # one plan: the same crashes for all four
    table = delivery_table(reports).splitlines()
    assert [line.split()[0] for line in table] == ["strategy", *STRATEGIES]
    by = {r.strategy: r for r in reports}
    assert by["at-most-once"].lost and not by["at-most-once"].duplicates
    assert by["at-least-once"].duplicates and not by["at-least-once"].lost
    assert by["auto-commit"].lost
    assert not by["exactly-once"].lost and not by["exactly-once"].duplicates


# --- replay, determinism, arguments -------------------------------------------------------------------


def test_same_seed_same_run_same_report():
    a = run_delivery_scenario("at-least-once", seed=7)
    b = run_delivery_scenario("at-least-once", seed=7)
    assert a.history.events == b.history.events
    assert a.table() == b.table()
    c = delivery_campaign("at-most-once", schedules=5, seed=3)
    d = delivery_campaign("at-most-once", schedules=5, seed=3)
    assert c.table() == d.table() and list(c.reports) == schedule_seeds(3, 5)


def test_a_report_names_the_call_that_replays_it():
    report = run_delivery_scenario("auto-commit", seed=5, records=60, consumers=2)
    replay = "run_delivery_scenario('auto-commit', seed=5, records=60, consumers=2)"
    assert f"seed: 5; replay: {replay}" in report.table()
    again = eval(replay, {"run_delivery_scenario": run_delivery_scenario})
    assert again.table() == report.table()


def test_the_plan_is_the_seeds_and_fixing_one_draw_leaves_the_others():
    plan = draw_plan(11, records=200)
    assert plan == draw_plan(11, records=200)
    assert 1 <= plan.consumers <= 3 and 1 <= len(plan.crash_points) <= 3
    assert all(1 <= n < 200 for n in plan.crash_points) and list(plan.crash_points) == sorted(plan.crash_points)
    fixed = draw_plan(11, records=200, consumers=3)
    assert fixed.consumers == 3
    assert (fixed.crash_points, fixed.max_poll_records) == (plan.crash_points, plan.max_poll_records)


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(IllegalArgumentError, match="at-most-once, at-least-once, auto-commit, exactly-once"):
        run_delivery_scenario("twice", seed=1)
    with pytest.raises(IllegalArgumentError, match=r"unknown argument\(s\) \['partitionz'\]"):
        run_delivery_scenario("at-most-once", seed=1, partitionz=2)
    with pytest.raises(IllegalArgumentError, match="records must be an int >= 1"):
        run_delivery_scenario("at-most-once", seed=1, records=0)
    with pytest.raises(IllegalArgumentError, match="preload=300 is more than records=200"):
        delivery_campaign("exactly-once", schedules=1, preload=300)
    with pytest.raises(IllegalArgumentError, match="schedules must be an int >= 1"):
        delivery_campaign("exactly-once", schedules=0)
