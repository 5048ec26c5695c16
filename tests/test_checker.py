"""The checker: the analysis on hand-made histories, then the whole loop on simulated
clusters (targeted faults that must show anomalies, a campaign that must show none,
replay and determinism)."""

import pytest

from minikafka.checker import (
    ANOMALIES,
    CAMPAIGN_BROKER_CONFIG,
    CAMPAIGN_PRODUCER_CONFIG,
    DUPLICATE,
    INCONSISTENT_OFFSETS,
    LOST_WRITE,
    NONMONOTONIC_POLL,
    POLL_SKIP,
    History,
    Workload,
    analyse,
    fault_campaign,
    final_read,
    run_schedule,
    start_reader,
)
from minikafka.clients import KafkaProducer
from minikafka.cluster import Cluster
from minikafka.errors import IllegalArgumentError

T = "events"


def acked(h, value, partition, offset, topic=T):
    op = h.invoke(topic, value, partition=partition)
    h.ok(op, partition, offset)
    return op


def clean_history(n=5):
    """n values acked at offsets 0..n-1 of events-0, polled in two polls, read in full."""
    h = History()
    for i in range(n):
        acked(h, f"v-{i}", 0, i)
    h.poll("reader-1", T, 0, [(i, f"v-{i}") for i in range(2)])
    h.poll("reader-1", T, 0, [(i, f"v-{i}") for i in range(2, n)])
    h.final_read(T, 0, [(i, f"v-{i}") for i in range(n)])
    return h


# --- the analysis, on hand-made histories --------------------------------------------------------


def test_a_clean_history_is_ok_and_every_anomaly_is_counted_as_zero():
    report = analyse(clean_history())
    assert report.ok
    assert report.anomalies == dict.fromkeys(ANOMALIES, 0)
    assert list(report.anomalies) == list(ANOMALIES)
    table = report.table()
    assert table.splitlines()[0].split() == ["anomaly", "count", "example"]
    for kind in ANOMALIES:
        assert f"{kind} " in table
    assert "5 ok" in table and table.endswith("verdict: ok")


def test_lost_write_acked_but_missing_from_the_final_read():
    h = History()
    for i in range(4):
        acked(h, f"v-{i}", 0, i)
    h.final_read(T, 0, [(0, "v-0"), (1, "v-1")], high_watermark=2)
    report = analyse(h)
    assert not report.ok
    assert report.anomalies[LOST_WRITE] == 2
    first = report.cases[LOST_WRITE][0]
    assert (first.value, first.topic, first.partition, first.offsets) == ("v-2", T, 0, (2,))
    assert "v-2 acked at events-0 offset 2, not in the final read (offsets 0..1)" in report.table()


def test_indeterminate_and_failed_sends_may_be_missing():
    h = History()
    acked(h, "v-0", 0, 0)
    h.info(h.invoke(T, "v-1", partition=0), TimeoutError("no answer"))
    h.fail(h.invoke(T, "v-2", partition=0), "refused")
    h.invoke(T, "v-3", partition=0)  # never completed: indeterminate too
    h.final_read(T, 0, [(0, "v-0")])
    report = analyse(h)
    assert report.ok
    assert report.counts["ok"] == 1 and report.counts["info"] == 2 and report.counts["fail"] == 1


def test_duplicate_one_value_at_two_offsets():
    h = History()
    acked(h, "v-0", 0, 0)
    acked(h, "v-1", 0, 1)
    h.final_read(T, 0, [(0, "v-0"), (1, "v-1"), (2, "v-1")])
    report = analyse(h)
    assert report.anomalies[DUPLICATE] == 1
    case = report.cases[DUPLICATE][0]
    assert (case.value, case.partition, case.offsets) == ("v-1", 0, (1, 2))
    assert sum(report.anomalies.values()) == 1


def test_inconsistent_offsets_across_reads_and_against_the_ack():
    h = History()
    acked(h, "v-0", 0, 0)
    acked(h, "v-1", 0, 1)  # the ack says offset 1 ...
    h.poll("reader-1", T, 0, [(0, "v-0"), (1, "v-9")])  # ... a reader saw another value there
    h.final_read(T, 0, [(0, "v-0"), (1, "v-1")])
    report = analyse(h)
    assert report.anomalies[INCONSISTENT_OFFSETS] == 1
    case = report.cases[INCONSISTENT_OFFSETS][0]
    assert case.offsets == (1,) and case.values == ("v-1", "v-9")
    assert str(case) == "events-0 offset 1: v-1 (ack, final read) vs v-9 (reader-1)"


def test_inconsistent_offsets_ack_alone_disagrees():
    h = History()
    acked(h, "v-0", 0, 0)
    acked(h, "v-1", 0, 0)  # two acks for one offset: one of them is a lie
    h.final_read(T, 0, [(0, "v-0"), (1, "v-1")])
    report = analyse(h)
    assert report.anomalies[INCONSISTENT_OFFSETS] == 1
    assert report.anomalies[LOST_WRITE] == 0


def test_nonmonotonic_poll_a_reader_goes_backwards():
    h = clean_history()
    h.poll("reader-1", T, 0, [(3, "v-3")])  # after reading up to 4
    report = analyse(h)
    assert report.anomalies[NONMONOTONIC_POLL] == 1
    case = report.cases[NONMONOTONIC_POLL][0]
    assert (case.reader, case.offsets, case.values) == ("reader-1", (4, 3), ("v-4", "v-3"))
    assert report.anomalies[POLL_SKIP] == 0


def test_poll_skip_a_reader_jumps_over_offsets_that_exist():
    h = History()
    for i in range(5):
        acked(h, f"v-{i}", 0, i)
    h.poll("reader-1", T, 0, [(0, "v-0"), (1, "v-1")])
    h.poll("reader-1", T, 0, [(4, "v-4")])  # 2 and 3 exist (the final read has them)
    h.poll("reader-2", T, 0, [(0, "v-0"), (2, "v-2")])  # a skip inside one poll counts too
    h.final_read(T, 0, [(i, f"v-{i}") for i in range(5)])
    report = analyse(h)
    assert report.anomalies[POLL_SKIP] == 2
    inside, across = report.cases[POLL_SKIP]  # sorted by partition, then offsets
    assert (across.reader, across.offsets) == ("reader-1", (1, 4))
    assert "reader-1 on events-0 jumped from offset 1 to 4, skipping 2 offset(s) that exist: 2, 3" == str(across)
    assert (inside.reader, inside.offsets) == ("reader-2", (0, 2))


def test_a_gap_nobody_saw_is_not_a_skip():
    h = History()
    h.poll("reader-1", T, 0, [(0, "v-0"), (5, "v-5")])
    h.final_read(T, 0, [(0, "v-0"), (5, "v-5")])
    assert analyse(h).anomalies[POLL_SKIP] == 0


def test_a_partition_without_a_complete_final_read_is_unchecked_not_ok():
    h = History()
    acked(h, "v-0", 0, 0)
    acked(h, "v-1", 1, 0)
    h.final_read(T, 0, [(0, "v-0")])
    h.final_read(T, 1, [], complete=False)
    report = analyse(h)
    assert report.anomalies[LOST_WRITE] == 0
    assert report.unchecked == ["events-1"] and not report.ok
    assert "unchecked: events-1" in report.table()


def test_the_table_is_deterministic_and_sorted():
    def build(order):
        h = History()
        for i in order:
            acked(h, f"v-{i}", 0, i)
        h.final_read(T, 0, [(0, "v-0")])
        return analyse(h)

    a, b = build(range(12)), build(reversed(range(12)))
    assert a.table() == b.table()
    assert [c.value for c in a.cases[LOST_WRITE]][:3] == ["v-1", "v-2", "v-3"]  # natural order, not "v-10"


def test_a_send_completes_once():
    h = History()
    op = acked(h, "v-0", 0, 0)
    with pytest.raises(Exception, match="completed twice"):
        h.ok(op, 0, 1)


def test_examples_name_an_unknown_anomaly_clearly():
    with pytest.raises(KeyError, match="lost-write"):
        analyse(clean_history()).examples("lost-writes")


# --- the reader and the workload on a simulated cluster ----------------------------------------------


def test_reader_and_final_read_see_every_acknowledged_write():
    with Cluster(3, seed=5, record_history=False) as cluster:
        cluster.create_topic(T, 2, 3)
        h = History(clock=lambda: cluster.now)
        producer = KafkaProducer(bootstrap_servers=cluster, acks="all")
        reader = start_reader(cluster, T, h)
        for i in range(40):
            h.send(producer, T, f"v-{i}".encode(), partition=i % 2)
            cluster.advance(5)
        producer.flush()
        cluster.advance(1_000)
        reader.stop()
        assert final_read(cluster, T, h)
    report = analyse(h)
    assert report.ok, report.table()
    assert report.counts["ok"] == 40
    assert report.counts["records polled"] == 40 and report.counts["records in final read"] == 40
    assert {op.partition for op in h.sends} == {0, 1}
    last = h.sends[-1]
    assert last.invoke_ms > 0 and last.complete_ms >= last.invoke_ms  # simulated times, from the clock
    assert [p.records[0][0] for p in h.polls if p.final and p.partition == 0][0] == 0


def _cut_then_kill_the_leader(cluster, workload, *, before_ms=500, cut_ms=300, after_ms=3_000):
    """Write for a while; cut the leader off from its followers; keep writing (only the
    leader gets these); kill it; keep writing to the new leader."""
    workload.run(before_ms)
    leader = cluster.partitions_of(T)[0].leader
    cluster.partition([leader], [b for b in cluster.broker_ids if b != leader])
    cut_at = len(workload.history.sends)
    workload.run(cut_ms)
    cluster.kill(leader)
    workload.run(after_ms)
    return leader, cut_at


def test_acks_1_loses_writes_when_the_leader_dies_before_replicating():
    with Cluster(3, seed=1, config=CAMPAIGN_BROKER_CONFIG, record_history=False) as cluster:
        cluster.create_topic(T, 1, 3)
        workload = Workload(cluster, T, **{**CAMPAIGN_PRODUCER_CONFIG, "acks": 1, "enable_idempotence": False})
        leader, cut_at = _cut_then_kill_the_leader(cluster, workload)
        assert cluster.partitions_of(T)[0].leader != leader
        report = workload.finish()
    assert not report.ok
    lost = report.cases[LOST_WRITE]
    assert report.anomalies[LOST_WRITE] == len(lost) > 10
    # Exactly the writes the leader alone acknowledged between the cut and its death.
    lost_ids = sorted(int(c.value.split("-")[1]) for c in lost)
    assert all(cut_at <= i < cut_at + 30 for i in lost_ids)
    # Their offsets went to other values: the new leader wrote there.
    assert report.anomalies[INCONSISTENT_OFFSETS] > 0
    assert report.anomalies[NONMONOTONIC_POLL] == report.anomalies[POLL_SKIP] == 0


def test_acks_all_survives_the_same_fault():
    with Cluster(3, seed=1, config={**CAMPAIGN_BROKER_CONFIG, "min.insync.replicas": 2},
                 record_history=False) as cluster:
        cluster.create_topic(T, 1, 3)
        workload = Workload(cluster, T, **{**CAMPAIGN_PRODUCER_CONFIG, "acks": "all", "enable_idempotence": True})
        _cut_then_kill_the_leader(cluster, workload)
        report = workload.finish()
    assert report.ok, report.table()
    assert report.counts["ok"] > 300


def _unclean_scenario(unclean: bool):
    """RF 2, min.insync.replicas 1: the follower is cut off and leaves the ISR, the leader
    alone acknowledges acks=all writes, then dies. Only an unclean election lets the
    out-of-sync follower lead, and it never had those writes."""
    config = {**CAMPAIGN_BROKER_CONFIG, "min.insync.replicas": 1, "unclean.leader.election.enable": unclean}
    with Cluster(3, seed=2, config=config, record_history=False) as cluster:
        cluster.create_topic(T, 1, 2)
        workload = Workload(cluster, T, **{**CAMPAIGN_PRODUCER_CONFIG, "acks": "all", "enable_idempotence": True})
        workload.run(500)
        state = cluster.partitions_of(T)[0]
        follower = next(r for r in state.replicas if r != state.leader)
        cluster.partition([follower], [state.leader])
        workload.run(3_000)  # long enough to leave the ISR (replica.lag.time.max.ms)
        assert cluster.partitions_of(T)[0].isr == (state.leader,)
        cluster.kill(state.leader)
        workload.run(3_000)
        new_leader = cluster.partitions_of(T)[0].leader
        report = workload.finish()
    return report, new_leader, follower


def test_unclean_election_loses_acknowledged_writes():
    report, new_leader, follower = _unclean_scenario(unclean=True)
    assert new_leader == follower
    assert report.anomalies[LOST_WRITE] > 50


def test_without_unclean_election_the_partition_waits_and_loses_nothing():
    report, new_leader, _ = _unclean_scenario(unclean=False)
    assert new_leader == -1  # offline until the old leader comes back
    assert report.ok, report.table()


# --- campaigns ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_acks_all_min_isr_2_rf_3_loses_nothing_over_200_schedules():
    report = fault_campaign(schedules=200, seed=2024, acks="all", min_insync_replicas=2, replication_factor=3,
                            unclean_leader_election=False, enable_idempotence=True)
    assert report.ok, report.table()
    assert report.anomalies == dict.fromkeys(ANOMALIES, 0)
    assert report.failing_seeds == []
    assert report.counts["ok"] > 200 * 250


@pytest.mark.campaign
def test_acks_all_without_idempotence_duplicates_but_never_loses():
    # At-least-once: a retry after a lost answer writes the value again. Nothing else.
    report = fault_campaign(schedules=30, seed=5, acks="all", enable_idempotence=False)
    assert report.anomalies[DUPLICATE] > 0
    assert {k: v for k, v in report.anomalies.items() if k != DUPLICATE} == dict.fromkeys(
        [LOST_WRITE, INCONSISTENT_OFFSETS, NONMONOTONIC_POLL, POLL_SKIP], 0)


@pytest.mark.campaign
def test_acks_1_campaign_finds_lost_writes_and_replay_reproduces_them():
    report = fault_campaign(schedules=12, seed=1, acks=1)
    assert report.anomalies[LOST_WRITE] > 0
    assert report.failing_seeds and report.schedules_with[LOST_WRITE] <= len(report.failing_seeds)
    assert sum(r.anomalies[LOST_WRITE] for r in report.reports.values()) == report.anomalies[LOST_WRITE]
    seed = report.failing_seeds[0]
    assert report.replay(seed) == f"run_schedule(seed={seed}, acks=1)"
    replayed = run_schedule(seed=seed, acks=1)
    original = report.reports[seed]
    assert replayed.anomalies == original.anomalies
    assert replayed.cases == original.cases
    assert replayed.table() == original.table()
    assert "failing seeds: " in report.table() and "replay: run_schedule(" in report.table()


@pytest.mark.campaign
def test_unclean_election_campaign_finds_lost_writes():
    report = fault_campaign(schedules=40, seed=0, acks="all", unclean_leader_election=True,
                            enable_idempotence=True, faults=8)
    assert report.anomalies[LOST_WRITE] > 0, report.table()


@pytest.mark.campaign
def test_power_loss_faults_are_behind_a_flag():
    def faults(**kwargs):
        return [f for seed in range(6) for _, f in run_schedule(seed=seed, faults=4, **kwargs).faults]

    assert any(f.startswith("power loss on") for f in faults(power_loss=True))
    assert not any(f.startswith("power loss") for f in faults())


@pytest.mark.campaign
def test_same_seed_same_report():
    a = run_schedule(seed=77, acks=1, faults=4)
    b = run_schedule(seed=77, acks=1, faults=4)
    assert a.table() == b.table()
    assert a.cases == b.cases and a.faults == b.faults and a.faults
    c1 = fault_campaign(schedules=3, seed=9, acks=1)
    c2 = fault_campaign(schedules=3, seed=9, acks=1)
    assert c1.table() == c2.table()


@pytest.mark.campaign
def test_a_campaign_in_worker_processes_reports_what_one_process_reports():
    # Schedules share nothing and are added up in seed order: jobs change the wall time only.
    alone = fault_campaign(schedules=6, seed=1, acks=1)
    forked = fault_campaign(schedules=6, seed=1, acks=1, jobs=2)
    assert alone.anomalies[LOST_WRITE] > 0  # something to compare
    assert forked.table() == alone.table()
    assert (forked.failing_seeds, forked.faults, forked.counts) == (alone.failing_seeds, alone.faults, alone.counts)
    assert {s: r.table() for s, r in forked.reports.items()} == {s: r.table() for s, r in alone.reports.items()}


def test_campaign_table_has_every_anomaly():
    report = fault_campaign(schedules=1, seed=3)
    lines = report.table().splitlines()
    assert lines[0].split() == ["anomaly", "count", "schedules", "example"]
    assert [line.split()[0] for line in lines[1:6]] == list(ANOMALIES)
    assert set(report.anomalies) == set(ANOMALIES)


@pytest.mark.parametrize("kwargs, message", [
    (dict(schedules=0), "schedules must be an int >= 1, not 0"),
    (dict(schedules=2.5), "not 2.5"),
    (dict(acks="two"), "acks must be 0, 1 or 'all' (-1), not 'two'"),
    (dict(acks=True), "not True"),
    (dict(replication_factor=4), "replication_factor=4 is more than the 3 brokers"),
    (dict(replication_factor=0), "replication_factor must be an int >= 1, not 0"),
    (dict(min_insync_replicas=4), "min_insync_replicas=4 is more than replication_factor=3"),
    (dict(brokers=0), "brokers must be an int >= 1, not 0"),
    (dict(partitions=0), "partitions must be an int >= 1, not 0"),
    (dict(duration_ms=-5), "duration_ms must be an int >= 1, not -5"),
    (dict(acks=1, enable_idempotence=True), "enable_idempotence=True needs acks='all', not acks=1"),
    (dict(unclean_leader_election="yes"), "unclean_leader_election must be True or False, not 'yes'"),
    (dict(config=["min.insync.replicas"]), "config must be a dict"),
    (dict(jobs=-1), "jobs must be an int >= 0 (0: one per core), not -1"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(IllegalArgumentError) as e:
        fault_campaign(**kwargs)
    assert message in str(e.value)


def test_run_schedule_refuses_unknown_arguments_and_bad_seeds():
    with pytest.raises(IllegalArgumentError, match="unknown argument.*'ack'"):
        run_schedule(seed=1, ack=1)
    with pytest.raises(IllegalArgumentError, match="seed must be an int, not '1'"):
        run_schedule(seed="1")
