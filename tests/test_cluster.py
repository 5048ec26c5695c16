"""Brokers and the controller in the simulated world, driven by raw requests.

No producer or consumer client here: a test speaks to the brokers through the cluster's
``AdminNode`` (``request``, ``produce``, ``fetch`` below), so each test sees exactly what a
broker answers. Every scenario is seeded and runs in simulated time.

Replication settings follow the course's seeds: ``replica.lag.time.max.ms`` = 10 s (the
broker checks every 5 s, so a follower leaves the ISR between 10 and 15 s after it last
caught up), ``broker.session.timeout.ms`` = 9 s, ``replica.fetch.wait.max.ms`` = 500 ms,
``replica.socket.timeout.ms`` = 30 s.
"""

from __future__ import annotations

import itertools

import pytest

from minikafka.cluster import Cluster
from minikafka.controller import INELIGIBLE_REPLICA, assign_replicas
from minikafka.errors import BrokerResponseError, IllegalArgumentError, for_code
from minikafka.messages import (
    CONTROLLER_ID,
    FENCED_LEADER_EPOCH,
    INVALID_CONFIG,
    INVALID_PARTITIONS,
    INVALID_PRODUCER_EPOCH,
    INVALID_REPLICATION_FACTOR,
    INVALID_REQUIRED_ACKS,
    INVALID_TOPIC_EXCEPTION,
    INVALID_UPDATE_VERSION,
    LEADER_NOT_AVAILABLE,
    NO_ERROR,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_NOT_AVAILABLE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    REQUEST_TIMED_OUT,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_OR_PARTITION,
    AlterPartitionRequest,
    CreateTopicsRequest,
    FetchPartition,
    FetchRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    MetadataRequest,
    ProducePartition,
    ProduceRequest,
    TopicConfig,
)
from minikafka.records import MemoryRecords, RecordBatch
from minikafka.topic import TopicPartition
from sim_helpers import request

LAG = {"replica.lag.time.max.ms": 10_000}


# --- a tiny client: raw requests through the cluster's admin node ------------------------------------


@pytest.fixture
def make_cluster(tmp_path):
    made = []

    def make(brokers=3, *, seed=1, config=LAG, **kw):
        c = Cluster(brokers, seed=seed, config=config, dir=tmp_path / f"cluster-{len(made)}", **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def leader_of(c, topic="t", partition=0):
    return c.partition_state(topic, partition).leader


def batch(values, **kw):
    return bytes(RecordBatch.build(values, **kw))


def produce(c, values, *, acks=-1, topic="t", partition=0, to=None, timeout_ms=5_000, records=None):
    """One ProduceRequest (to the leader unless ``to``); its ProducePartitionResponse."""
    dst = leader_of(c, topic, partition) if to is None else to
    data = batch(values) if records is None else records

    def make(corr):
        return ProduceRequest(corr, acks, timeout_ms, (ProducePartition(topic, partition, data),))

    if acks == 0:
        c.world.call_node(c.admin_id, lambda node: node.request(dst, make))
        return None
    response = request(c, dst, make, timeout_ms + 1_000)
    assert response is not None, f"no answer to a produce sent to {dst}"
    return response.partitions[0]


def fetch(c, offset, *, topic="t", partition=0, to=None, replica_id=-1):
    """A consumer's fetch (replica_id -1, no wait): (partition response, [(offset, value)])."""
    dst = leader_of(c, topic, partition) if to is None else to
    response = request(c, dst, lambda corr: FetchRequest(
        corr, replica_id, 0, 1, (FetchPartition(topic, partition, offset),)
    ))
    part = response.partitions[0]
    records = [
        (r.offset, r.value) for b in MemoryRecords(part.records).batches() for r in b.records() if r.offset >= offset
    ]
    return part, records


def log_values(c, broker, topic="t", partition=0):
    rep = c.replica(broker, topic, partition)
    data = rep.log.read(rep.log.log_start_offset, 1 << 30)
    return [(r.offset, r.value) for b in data.batches() for r in b.records()]


def log_bytes(c, broker, topic="t", partition=0):
    rep = c.replica(broker, topic, partition)
    return bytes(rep.log.read(rep.log.log_start_offset, 1 << 30))


def rep(c, broker, topic="t", partition=0):
    return c.replica(broker, topic, partition)


def wait(c, condition, timeout_ms, what):
    assert c.run_until(condition, timeout_ms), f"{what}: not within {timeout_ms} ms (now {c.now})"


def leading(c, broker, topic="t", partition=0):
    """The controller chose ``broker`` and the broker has taken over."""
    r = c.replica(broker, topic, partition) if c.alive(broker) else None
    return leader_of(c, topic, partition) == broker and r is not None and r.is_leader


def roles(c, topic="t", partition=0):
    s = c.partition_state(topic, partition)
    return s.leader, [r for r in s.replicas if r != s.leader]


# --- determinism ---------------------------------------------------------------------------------------


def faulty_scenario(make_cluster, seed):
    c = make_cluster(3, seed=seed)
    c.create_topic("t", partitions=2, replication_factor=3, config={"min.insync.replicas": 2})
    for i in range(5):
        produce(c, [b"a%d" % i], acks=-1, partition=i % 2)
    first = leader_of(c, "t", 0)
    c.partition([first], [b for b in c.broker_ids if b != first])
    for i in range(3):
        produce(c, [b"b%d" % i], acks=1)
    c.advance(3_000)
    c.kill(first)
    c.heal()
    c.advance(12_000)
    for i in range(4):
        produce(c, [b"c%d" % i], acks=-1, partition=i % 2)
    c.restart(first)
    c.advance(20_000)
    second = leader_of(c, "t", 1)
    c.kill(second, power_loss=True)
    c.advance(12_000)
    produce(c, [b"d"], acks=1, partition=1)
    c.restart(second)
    c.advance(40_000)
    logs = {(b, p): log_bytes(c, b, "t", p) for b in c.broker_ids for p in (0, 1)}
    return c, logs


def test_same_seed_same_history_and_same_logs(make_cluster):
    c1, logs1 = faulty_scenario(make_cluster, 5)
    c2, logs2 = faulty_scenario(make_cluster, 5)
    assert len(c1.world.history) > 500
    assert c1.world.history == c2.world.history
    assert logs1 == logs2
    assert c1.describe("t") == c2.describe("t")
    assert c1.controller.elections == c2.controller.elections
    assert any(e[1] == "crash" for e in c1.world.history) and any(e[1] == "drop" for e in c1.world.history)
    # the faults really happened: leaders changed, and every replica converged
    assert len(c1.controller.elections) >= 2
    for p in (0, 1):
        assert len({logs1[(b, p)] for b in c1.broker_ids}) == 1


def test_a_different_seed_places_replicas_differently(make_cluster):
    c1, _ = faulty_scenario(make_cluster, 5)
    c2, _ = faulty_scenario(make_cluster, 6)
    assert [s.replicas for s in c1.partitions_of("t")] != [s.replicas for s in c2.partitions_of("t")]
    assert c1.world.history != c2.world.history


# --- replication: acks, the high watermark, what consumers see ---------------------------------------------------


def test_acks_all_answers_only_after_every_isr_follower_has_the_records(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    leader, followers = roles(c)
    slow = followers[0]
    c.slow(leader, slow, 200)  # the fetch answers reach this follower 200 ms late
    c.advance(1_000)

    start = c.now
    ack1 = produce(c, [b"one"], acks=1)
    assert ack1.error == NO_ERROR and ack1.base_offset == 0
    assert c.now - start <= 3  # acks=1: as soon as the leader has it...
    assert rep(c, slow).log_end_offset == 0  # ...while a follower does not have it yet

    c.advance(1_000)
    start = c.now
    acked = produce(c, [b"two", b"three"], acks=-1)
    assert acked.error == NO_ERROR and acked.base_offset == 1
    assert c.now - start >= 200  # acks=all waited for the slow follower
    for b in c.broker_ids:  # every ISR member has both records by the time of the answer
        assert rep(c, b).log_end_offset >= 3
    assert rep(c, leader).high_watermark == 3


def test_acks_all_times_out_while_a_follower_is_stuck_but_the_leader_keeps_the_record(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    leader, followers = roles(c)
    c.partition([leader], followers)
    answer = produce(c, [b"x"], acks=-1, timeout_ms=2_000)
    assert answer.error == REQUEST_TIMED_OUT
    assert rep(c, leader).log_end_offset == 1  # appended, just not acknowledged
    assert rep(c, leader).high_watermark == 0


def test_high_watermark_is_the_minimum_leo_over_the_isr(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    leader, (f1, f2) = roles(c)
    c.slow(leader, f1, 300)
    c.slow(leader, f2, 40)
    p = rep(c, leader)
    checked = 0
    for i in range(40):
        produce(c, [b"%d" % i], acks=1)
        c.advance(37)
        actual = [rep(c, b).log_end_offset for b in c.broker_ids]
        view = [p.log_end_offset] + [p.followers[r].log_end_offset for r in (f1, f2)]
        assert p.high_watermark == min(view)  # the leader's rule, on what it knows
        assert p.high_watermark <= min(actual)  # never ahead of a real ISR member
        checked += p.high_watermark < p.log_end_offset
    assert checked > 10  # the HW really trailed the LEO
    c.advance(2_000)
    assert p.high_watermark == p.log_end_offset == 40
    assert sorted(p.isr) == sorted(c.broker_ids)


def test_a_consumer_never_reads_at_or_past_the_high_watermark(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    leader, followers = roles(c)
    assert produce(c, [b"c0", b"c1"]).error == NO_ERROR
    c.advance(1_000)
    c.partition([leader], followers)  # the followers cannot fetch; the controller still sees all
    for v in (b"u2", b"u3", b"u4"):
        assert produce(c, [v], acks=1).error == NO_ERROR
    p = rep(c, leader)
    assert (p.log_end_offset, p.high_watermark) == (5, 2)

    part, got = fetch(c, 0)
    assert part.error == NO_ERROR and part.high_watermark == 2
    assert got == [(0, b"c0"), (1, b"c1")]
    part, got = fetch(c, 2)  # at the HW: nothing, and no error
    assert part.error == NO_ERROR and got == []
    latest = request(c, leader, lambda k: ListOffsetsRequest(k, (("t", 0, -1),)))
    assert latest.partitions == (("t", 0, NO_ERROR, -1, 2),)
    # a follower's fetch (replica_id >= 0) does read past the HW, to the LEO
    other = [b for b in c.broker_ids if b not in (leader,)][0]
    part, got = fetch(c, 2, replica_id=other)
    assert [v for _, v in got] == [b"u2", b"u3", b"u4"]


def test_a_consumer_fetch_between_the_hw_and_the_leo_is_empty_not_out_of_range(make_cluster):
    """A consumer that read up to the old leader's HW fetches from there on the new leader,
    whose HW may still be behind (it learns the HW from the next fetch). Kafka answers an
    offset in (HW, LEO] with no records and no error; OFFSET_OUT_OF_RANGE would send the
    consumer to auto.offset.reset (re-reading or skipping everything)."""
    c = make_cluster()
    c.create_topic("t", 1, 3)
    a, (b, other) = roles(c)
    assert produce(c, [b"m0", b"m1"]).error == NO_ERROR
    part, got = fetch(c, 0)
    assert got == [(0, b"m0"), (1, b"m1")]  # the consumer's position is now 2
    c.partition([b], [other])  # so that the new leader's HW stays where it is for a while
    c.kill(a)
    wait(c, lambda: leading(c, b), 20_000, "b leads")
    assert rep(c, b).log_end_offset == 2 and rep(c, b).high_watermark < 2
    part, got = fetch(c, 2)
    assert (part.error, got) == (NO_ERROR, [])


def test_a_new_leader_whose_hw_lags_its_epoch_start_answers_latest_offset_not_available(make_cluster):
    """ListOffsets "latest" is the high watermark; a new leader's is what it heard as a
    follower, possibly below what the old leader answered (a consumer or a Spark query that
    had read to 2 would see the log shrink to 0 and call it data loss). Kafka answers
    OFFSET_NOT_AVAILABLE (78, retriable) until the HW reaches the start of the leader's
    epoch, for "latest" and for a timestamp found nowhere below it; "earliest" is answered."""
    c = make_cluster()
    c.create_topic("t", 1, 3)
    a, (b, other) = roles(c)
    assert produce(c, [b"m0", b"m1"]).error == NO_ERROR
    c.partition([b], [other])
    c.kill(a)
    wait(c, lambda: leading(c, b), 20_000, "b leads")
    assert rep(c, b).high_watermark < 2 == rep(c, b).log_end_offset

    def list_offsets(timestamp):
        return request(c, b, lambda k: ListOffsetsRequest(k, (("t", 0, timestamp),))).partitions[0][2:]

    assert list_offsets(-1) == (OFFSET_NOT_AVAILABLE, -1, -1)
    assert list_offsets(10**13) == (OFFSET_NOT_AVAILABLE, -1, -1)  # after every record
    assert list_offsets(-2) == (NO_ERROR, -1, 0)
    # The course's admin client (consumer-groups --describe, --reset-offsets) retries: it gets
    # 2 once the new leader's ISR has shrunk to what it can reach, never the stale 0.
    assert c.admin()._list_offsets([TopicPartition("t", 0)], -1) == {TopicPartition("t", 0): 2}
    c.heal()
    wait(c, lambda: rep(c, b).high_watermark == 2, 20_000, "b's HW at 2")  # already: the ISR shrank
    assert list_offsets(-1) == (NO_ERROR, -1, 2)
    assert list_offsets(10**13) == (NO_ERROR, -1, -1)


def test_followers_high_watermark_follows_the_leaders(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    leader, followers = roles(c)
    produce(c, [b"a", b"b", b"c"])
    hws = {b: rep(c, b).high_watermark for b in followers}
    assert rep(c, leader).high_watermark == 3
    assert all(hw <= 3 for hw in hws.values())  # a follower learns the HW a fetch later
    c.advance(1_000)
    assert {b: rep(c, b).high_watermark for b in c.broker_ids} == {b: 3 for b in c.broker_ids}
    produce(c, [b"d"], acks=1)
    c.advance(1_000)
    assert {b: (rep(c, b).log_end_offset, rep(c, b).high_watermark) for b in c.broker_ids} == {
        b: (4, 4) for b in c.broker_ids
    }


def test_produce_to_a_follower_or_an_unknown_partition_is_refused(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 2)
    leader, (follower,) = roles(c)
    assert produce(c, [b"x"], to=follower).error == NOT_LEADER_OR_FOLLOWER
    assert produce(c, [b"x"], partition=7, to=leader).error == UNKNOWN_TOPIC_OR_PARTITION
    assert rep(c, leader).log_end_offset == 0


@pytest.mark.parametrize("acks", [2, 5, -2])
def test_invalid_acks_are_refused(make_cluster, acks):
    """Kafka accepts acks 0, 1 and -1 only; anything else is INVALID_REQUIRED_ACKS (21) and
    nothing is appended."""
    c = make_cluster()
    c.create_topic("t", 1, 3)
    answer = produce(c, [b"x"], acks=acks)
    assert answer.error == INVALID_REQUIRED_ACKS
    assert rep(c, leader_of(c)).log_end_offset == 0


# --- the ISR: shrink (stuck, slow), expand, maximal ISR, min.insync.replicas --------------------------------------------


def test_isr_shrinks_for_a_stuck_follower_and_expands_after_heal(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    leader, (stuck, ok) = roles(c)
    produce(c, [b"before"])
    c.advance(1_000)
    cut_at = c.now
    c.partition([stuck], [leader])  # it still talks to the controller and to the other follower

    # an acks=all produce now waits for the stuck follower ... until it leaves the ISR
    start = c.now
    answer = produce(c, [b"during"], acks=-1, timeout_ms=30_000)
    waited = c.now - start
    assert answer.error == NO_ERROR
    state = c.partition_state("t", 0)
    assert stuck not in state.isr and sorted(state.isr) == sorted([leader, ok])
    assert 10_000 <= c.now - cut_at <= 15_000 + 100  # lag.time.max, plus at most one check period
    assert waited >= 9_000
    assert state.leader_epoch == 0  # an ISR change is not a leader change
    assert rep(c, leader).high_watermark == 2

    c.heal()
    wait(c, lambda: stuck in c.partition_state("t", 0).isr, 40_000, "the follower rejoins")
    assert log_values(c, stuck) == [(0, b"before"), (1, b"during")]
    assert rep(c, stuck).log_end_offset == rep(c, leader).log_end_offset


def test_isr_shrinks_for_a_slow_follower_that_fetches_but_cannot_catch_up(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    leader, (slow, ok) = roles(c)
    c.slow(leader, slow, 12_000)  # every fetch answer takes 12 s: it fetches, but lags
    p = rep(c, leader)
    leo_then = rep(c, slow).log_end_offset
    fetches = set()
    removed_at = None
    for i in range(80):  # continuous produce, one record every 500 ms
        assert produce(c, [b"%d" % i], acks=1).error == NO_ERROR
        c.advance(500)
        fetches.add(p.followers[slow].last_fetch_time_ms)
        if removed_at is None and slow not in c.partition_state("t", 0).isr:
            removed_at = c.now
    assert removed_at is not None and removed_at <= 30_000
    assert slow not in c.partition_state("t", 0).isr and ok in c.partition_state("t", 0).isr
    assert len(fetches) >= 3  # it kept fetching...
    assert leo_then < rep(c, slow).log_end_offset < p.log_end_offset  # ...and progressing, behind

    c.heal()  # a normal link again: it catches up and comes back
    for i in range(80, 120):
        produce(c, [b"%d" % i], acks=1)
        c.advance(500)
    wait(c, lambda: slow in c.partition_state("t", 0).isr, 30_000, "the slow follower rejoins")
    c.advance(1_000)
    assert log_bytes(c, slow) == log_bytes(c, leader)


def test_hw_uses_the_maximal_isr_while_a_shrink_is_in_flight(make_cluster):
    """KIP-497: until the controller commits a shrink, the leaving follower still counts for
    the HW, so the HW never gets ahead of what the controller believes the ISR is."""
    c = make_cluster()
    c.create_topic("t", 1, 3)
    leader, (stuck, ok) = roles(c)
    c.partition([stuck], [leader])
    c.slow(leader, CONTROLLER_ID, 3_000)  # AlterPartition takes 3 s to arrive
    p = rep(c, leader)
    produce(c, [b"x"], acks=1)
    wait(c, lambda: p.pending_isr is not None, 20_000, "a shrink is proposed")
    proposed_at = c.now
    assert sorted(p.pending_isr) == sorted([leader, ok])
    assert stuck in p.isr and stuck in p.maximal_isr
    for v in (b"y", b"z"):
        produce(c, [v], acks=1)
    c.advance(1_000)
    assert stuck in c.partition_state("t", 0).isr  # not committed yet
    assert rep(c, ok).log_end_offset == p.log_end_offset == 3
    assert p.high_watermark == 0  # the stuck follower still holds it back
    wait(c, lambda: p.pending_isr is None, 10_000, "the controller answers")
    assert c.now - proposed_at >= 3_000
    assert stuck not in p.isr and stuck not in c.partition_state("t", 0).isr
    assert p.high_watermark == 3


def test_hw_counts_a_rejoining_follower_while_its_expansion_is_in_flight(make_cluster):
    """KIP-497's other half: once the leader proposes a follower back into the ISR, the HW
    waits for that follower too, even before the controller commits it."""
    c = make_cluster()
    c.create_topic("t", 1, 3)
    leader, (back, fast) = roles(c)
    produce(c, [b"m0"])
    c.partition([leader], [back])
    wait(c, lambda: back not in c.partition_state("t", 0).isr, 20_000, "it leaves the ISR")
    produce(c, [b"m1"])
    c.heal()
    c.slow(leader, CONTROLLER_ID, 3_000)  # the expansion stays pending for 3 s
    c.slow(leader, back, 400)  # and the returning follower fetches slowly
    p = rep(c, leader)
    wait(c, lambda: p.pending_isr is not None, 60_000, "an expansion is proposed")
    assert back in p.pending_isr and back not in p.isr and back in p.maximal_isr
    assert p.high_watermark == p.followers[back].log_end_offset == 2
    produce(c, [b"m2"], acks=1)
    c.advance(50)
    assert p.followers[fast].log_end_offset == p.log_end_offset == 3  # the ISR proper has it
    assert p.high_watermark == 2  # but the proposed member does not yet
    wait(c, lambda: p.pending_isr is None, 10_000, "the controller commits")
    assert back in c.partition_state("t", 0).isr and p.high_watermark == 3


def test_an_expansion_stays_pending_past_the_socket_timeout_until_the_controller_answers(make_cluster):
    """The same, with AlterPartition's answer later than replica.socket.timeout.ms (1 s): the
    controller may still commit the proposal, so the leader keeps it pending (and asks again)
    instead of forgetting it and acknowledging writes the rejoining follower lacks."""
    c = make_cluster(config={**LAG, "replica.socket.timeout.ms": 1_000})
    c.create_topic("t", 1, 3)
    leader, (back, fast) = roles(c)
    produce(c, [b"m0"])
    c.partition([leader], [back])
    wait(c, lambda: back not in c.partition_state("t", 0).isr, 20_000, "it leaves the ISR")
    produce(c, [b"m1"])
    c.heal()
    c.slow(leader, CONTROLLER_ID, 3_000)  # every AlterPartition takes 3 s to arrive
    c.slow(leader, back, 400)
    p = rep(c, leader)
    wait(c, lambda: p.pending_isr is not None, 60_000, "an expansion is proposed")
    proposed_at, epoch = c.now, c.partition_state("t", 0).partition_epoch
    wait(c, lambda: c.now >= proposed_at + 1_100, 2_000, "past the socket timeout")
    assert p.pending_isr is not None and back in p.pending_isr  # still pending, not forgotten
    assert back not in c.partition_state("t", 0).isr
    produce(c, [b"m2"], acks=1)
    c.advance(50)
    assert p.followers[fast].log_end_offset == p.log_end_offset == 3
    assert p.high_watermark == p.followers[back].log_end_offset == 2  # the proposed member still counts
    wait(c, lambda: p.pending_isr is None, 10_000, "the controller answers")
    assert back in p.isr and c.partition_state("t", 0).isr == p.isr
    assert c.partition_state("t", 0).partition_epoch == p.partition_epoch == epoch + 1  # committed once
    sent = [e for e in c.world.history if e[1:] == ("recv", leader, CONTROLLER_ID, "AlterPartitionRequest")]
    assert len(sent) >= 2  # sent again while the first was still on its way
    wait(c, lambda: p.high_watermark == 3, 5_000, "the rejoined follower fetches m2")


def test_min_insync_replicas_refuses_acks_all_but_not_acks_1(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3, config={"min.insync.replicas": 2})
    leader, followers = roles(c)
    assert produce(c, [b"a"]).error == NO_ERROR
    c.partition([leader], followers)
    wait(c, lambda: c.partition_state("t", 0).isr == (leader,), 20_000, "the ISR shrinks to the leader")
    leo = rep(c, leader).log_end_offset

    refused = produce(c, [b"b"], acks=-1)
    assert refused.error == NOT_ENOUGH_REPLICAS == 19
    assert "min.insync.replicas=2" in refused.error_message and str([leader]) in refused.error_message
    assert refused.base_offset == -1
    assert rep(c, leader).log_end_offset == leo  # nothing appended
    assert for_code(refused.error).__name__ == "NotEnoughReplicasError"

    ok = produce(c, [b"c"], acks=1)
    assert ok.error == NO_ERROR and ok.base_offset == leo
    assert rep(c, leader).log_end_offset == leo + 1


def test_min_insync_replicas_is_met_with_one_follower_out(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3, config={"min.insync.replicas": 2})
    leader, (out, stays) = roles(c)
    c.partition([leader], [out])
    wait(c, lambda: out not in c.partition_state("t", 0).isr, 20_000, "one follower leaves the ISR")
    answer = produce(c, [b"v"], acks=-1)
    assert answer.error == NO_ERROR
    assert rep(c, stays).log_end_offset == 1 and rep(c, out).log_end_offset == 0


# --- leader election ------------------------------------------------------------------------------------------------


def test_the_next_isr_replica_in_assignment_order_leads_when_the_leader_dies(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    before = c.partition_state("t", 0)
    a, b, third = before.replicas
    assert before.leader == a and before.leader_epoch == 0
    produce(c, [b"x"])
    c.kill(a)
    wait(c, lambda: leading(c, b), 15_000, "the second replica leads")
    after = c.partition_state("t", 0)
    assert after.leader_epoch == 1
    assert sorted(after.isr) == sorted([b, third])
    assert c.controller.elections[-1][1:] == ("t", 0, a, b, False)
    assert fetch(c, 0)[1] == [(0, b"x")]
    assert produce(c, [b"y"]).base_offset == 1


def test_an_alive_replica_out_of_the_isr_is_skipped(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    a, b, third = c.partition_state("t", 0).replicas
    c.partition([a], [b])  # b falls out of the ISR, yet stays alive (it reaches the controller)
    wait(c, lambda: b not in c.partition_state("t", 0).isr, 20_000, "b leaves the ISR")
    c.kill(a)
    wait(c, lambda: leading(c, third), 15_000, "the third replica leads")
    state = c.partition_state("t", 0)
    assert state.leader == third and state.leader_epoch == 1 and state.isr == (third,)
    assert c.alive(b)


def test_no_live_isr_replica_means_an_offline_partition(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 2)
    a, b = c.partition_state("t", 0).replicas
    produce(c, [b"first"])
    c.partition([a], [b])
    wait(c, lambda: c.partition_state("t", 0).isr == (a,), 20_000, "b leaves the ISR")
    assert produce(c, [b"only-on-a"], acks=-1).error == NO_ERROR  # min.insync.replicas=1
    c.kill(a)
    c.heal()
    wait(c, lambda: leader_of(c) == -1, 15_000, "the partition goes offline")
    state = c.partition_state("t", 0)
    assert state.isr == (a,) and c.controller.elections[-1][3:] == (a, -1, False)
    c.advance(500)
    meta = request(c, b, lambda k: MetadataRequest(k, ("t",)))
    assert meta.topics[0].partitions[0].error == LEADER_NOT_AVAILABLE
    assert meta.topics[0].partitions[0].leader == -1
    assert produce(c, [b"x"], to=b).error == NOT_LEADER_OR_FOLLOWER
    assert "Leader: none" in c.describe("t")

    c.restart(a)  # the last ISR member comes back and leads again: nothing was lost
    wait(c, lambda: leading(c, a), 15_000, "a leads again")
    assert c.partition_state("t", 0).leader_epoch > state.leader_epoch
    assert fetch(c, 0)[1] == [(0, b"first"), (1, b"only-on-a")]


def test_unclean_election_lets_an_out_of_sync_replica_lead_and_loses_acknowledged_writes(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 2, config={"unclean.leader.election.enable": True})
    a, b = c.partition_state("t", 0).replicas
    assert produce(c, [b"both-0", b"both-1"]).error == NO_ERROR
    c.partition([a], [b])
    wait(c, lambda: c.partition_state("t", 0).isr == (a,), 20_000, "b leaves the ISR")
    acked = [produce(c, [b"a-only-%d" % i], acks=-1) for i in range(3)]
    assert [r.error for r in acked] == [NO_ERROR] * 3  # acknowledged to the producer
    acked_offsets = [r.base_offset for r in acked]
    c.kill(a)
    c.heal()
    wait(c, lambda: leading(c, b), 15_000, "b leads, uncleanly")
    state = c.partition_state("t", 0)
    assert state.isr == (b,) and state.leader_epoch == 1
    assert c.controller.elections[-1][3:] == (a, b, True)

    survived = fetch(c, 0)[1]
    assert survived == [(0, b"both-0"), (1, b"both-1")]
    lost = [o for o in acked_offsets if o not in dict(survived)]
    assert lost == [2, 3, 4]
    # the new leader hands the lost offsets to new records
    assert produce(c, [b"new"]).base_offset == 2
    # and the old leader, back, gives up its version of them
    c.restart(a)
    wait(c, lambda: a in c.partition_state("t", 0).isr, 40_000, "a rejoins as a follower")
    assert log_values(c, a) == [(0, b"both-0"), (1, b"both-1"), (2, b"new")]


def test_unclean_election_is_off_by_default_even_with_a_live_replica(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 2)
    a, b = c.partition_state("t", 0).replicas
    c.partition([a], [b])
    wait(c, lambda: c.partition_state("t", 0).isr == (a,), 20_000, "b leaves the ISR")
    c.kill(a)
    c.heal()
    c.advance(15_000)
    assert leader_of(c) == -1 and c.alive(b)


def test_acks_all_fails_after_append_when_the_isr_shrinks_below_min_insync(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3, config={"min.insync.replicas": 2})
    leader, followers = roles(c)
    c.partition([leader], followers)
    answer = produce(c, [b"x"], acks=-1, timeout_ms=30_000)  # the ISR is still full: accepted, waits
    assert answer.error == NOT_ENOUGH_REPLICAS_AFTER_APPEND == 20
    assert c.partition_state("t", 0).isr == (leader,)
    assert rep(c, leader).log_end_offset == 1  # appended (and now committed by an ISR of one)


def test_acks_0_appends_without_an_answer(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    admin = c.world.nodes[c.admin_id]
    produce(c, [b"fire", b"forget"], acks=0)
    c.advance(1_000)
    assert admin.responses == {}
    assert fetch(c, 0)[1] == [(0, b"fire"), (1, b"forget")]


def test_a_long_poll_consumer_fetch_is_answered_when_the_hw_moves(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    leader, (slow, _) = roles(c)
    c.slow(leader, slow, 300)
    c.advance(1_000)
    admin = c.world.nodes[c.admin_id]
    corr = c.world.call_node(c.admin_id, lambda node: node.request(leader, lambda k: FetchRequest(
        k, -1, 5_000, 1, (FetchPartition("t", 0, 0),))))
    start = c.now
    c.advance(100)
    produce(c, [b"x"], acks=1)  # appended at ~100 ms, committed when the slow follower has it
    c.advance(250)
    assert corr not in admin.responses  # appended but not committed: the consumer still waits
    wait(c, lambda: corr in admin.responses, 5_000, "the long poll is answered")
    assert 300 <= c.now - start < 1_000
    part = admin.responses[corr].partitions[0]
    assert part.high_watermark == 1 and [r.value for r in MemoryRecords(part.records).records()] == [b"x"]


def test_a_zombie_leader_is_deposed_and_its_writes_are_truncated(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    a, b, third = c.partition_state("t", 0).replicas
    produce(c, [b"m0"])
    c.advance(1_000)
    c.partition([a], [b, third, "controller"])  # a still hears from clients, from nobody else
    admin = c.world.nodes[c.admin_id]
    waiting = c.world.call_node(c.admin_id, lambda node: node.request(a, lambda k: ProduceRequest(
        k, -1, 60_000, (ProducePartition("t", 0, batch([b"zombie-all"])),))))
    wait(c, lambda: leading(c, b), 15_000, "b leads while a is cut off")
    assert rep(c, a).is_leader  # a does not know yet
    assert produce(c, [b"zombie-1"], acks=1, to=a).error == NO_ERROR  # split brain: acks=1 loses this
    assert produce(c, [b"real-1"]).base_offset == 1
    c.heal()
    wait(c, lambda: waiting in admin.responses, 10_000, "the waiting produce is answered")
    assert admin.responses[waiting].partitions[0].error == NOT_LEADER_OR_FOLLOWER
    wait(c, lambda: a in c.partition_state("t", 0).isr, 40_000, "a rejoins as a follower")
    assert log_values(c, a) == log_values(c, b) == [(0, b"m0"), (1, b"real-1")]


def test_a_leader_deposed_before_writing_in_its_epoch_can_follow_again(make_cluster):
    """b leads epoch 1 but writes nothing, so its epoch cache ends with (1, LEO) and no
    record. Deposed without a restart, it must still converge on c's log: the divergence
    answer points at b's own LEO, and the truncation there must drop the empty epoch (as
    Kafka's UnifiedLog.truncateTo does) or b asks again, forever."""
    c = make_cluster()
    c.create_topic("t", 1, 3)
    a, b, third = c.partition_state("t", 0).replicas
    produce(c, [b"m0", b"m1"])
    c.advance(1_000)
    c.kill(a)
    wait(c, lambda: leading(c, b), 15_000, "b leads epoch 1")
    assert rep(c, b).log.leader_epoch_cache.entries() == [(0, 0), (1, 2)]
    c.partition([b], [third, "controller"])
    wait(c, lambda: leading(c, third), 15_000, "c leads epoch 2")
    assert produce(c, [b"c2"]).base_offset == 2
    c.heal()
    events = c.world.events_processed
    c.advance(40_000)
    assert b in c.partition_state("t", 0).isr
    assert log_values(c, b) == [(0, b"m0"), (1, b"m1"), (2, b"c2")]
    assert c.world.events_processed - events < 2_000  # no busy fetch loop


# --- leader epochs: the divergent log (KIP-101) ---------------------------------------------------------------------


def test_a_returning_leader_truncates_its_divergent_suffix(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    a, b, third = c.partition_state("t", 0).replicas
    assert produce(c, [b"m0", b"m1", b"m2"]).error == NO_ERROR
    c.advance(1_000)
    c.partition([a], [b, third])
    for v in (b"a-only-3", b"a-only-4"):
        assert produce(c, [v], acks=1).error == NO_ERROR  # written on a alone
    assert rep(c, a).log_end_offset == 5 and rep(c, a).high_watermark == 3
    c.kill(a)
    wait(c, lambda: leading(c, b), 15_000, "b leads")
    assert c.partition_state("t", 0).leader_epoch == 1
    assert produce(c, [b"b-3"]).base_offset == 3  # the same offsets, different records
    assert produce(c, [b"b-4", b"b-5"]).base_offset == 4
    c.heal()
    c.restart(a)
    wait(c, lambda: rep(c, a) is not None and rep(c, a).log_end_offset != 5, 10_000, "a truncates")
    assert rep(c, a).log_end_offset == 3  # exactly at the divergence: the common prefix stays
    assert log_values(c, a) == [(0, b"m0"), (1, b"m1"), (2, b"m2")]
    wait(c, lambda: a in c.partition_state("t", 0).isr, 30_000, "a rejoins")
    expected = [(0, b"m0"), (1, b"m1"), (2, b"m2"), (3, b"b-3"), (4, b"b-4"), (5, b"b-5")]
    assert log_values(c, a) == log_values(c, b) == log_values(c, third) == expected
    assert log_bytes(c, a) == log_bytes(c, b)
    assert rep(c, a).log.leader_epoch_cache.entries() == [(0, 0), (1, 3)]


def test_epoch_truncation_drops_a_record_below_the_old_leaders_hw(make_cluster):
    """The case truncating to the HW gets wrong (KIP-101's second scenario): a's HW covers
    offset 1, but the replica that leads next lost offset 1 in a power cut and wrote another
    record there. a must follow the epochs, not its HW."""
    c = make_cluster()
    c.create_topic("t", 1, 2)
    a, b = c.partition_state("t", 0).replicas
    assert produce(c, [b"m0"]).error == NO_ERROR
    c.kill(b)  # a clean restart of b: its log is reopened, so m0 is flushed there
    c.restart(b)
    wait(c, lambda: b in c.partition_state("t", 0).isr and rep(c, b) is not None, 30_000, "b back")
    assert rep(c, b).log_end_offset == 1 and rep(c, b).log.unflushed_bytes == 0
    assert produce(c, [b"m1"]).error == NO_ERROR  # committed: on a and (unflushed) on b
    c.advance(1_000)
    assert rep(c, a).high_watermark == 2 and rep(c, b).log_end_offset == 2
    c.kill(a)
    wait(c, lambda: leading(c, b), 15_000, "b leads")
    c.kill(b, power_loss=True)  # b loses m1 ...
    wait(c, lambda: leader_of(c) == -1, 15_000, "offline")
    c.restart(b)  # ... and, the last ISR member, leads again without it
    wait(c, lambda: leading(c, b), 15_000, "b leads again")
    assert log_values(c, b) == [(0, b"m0")]
    assert produce(c, [b"n1"]).base_offset == 1
    c.restart(a)
    wait(c, lambda: a in c.partition_state("t", 0).isr, 30_000, "a rejoins")
    assert log_values(c, a) == log_values(c, b) == [(0, b"m0"), (1, b"n1")]
    assert log_bytes(c, a) == log_bytes(c, b)


def test_a_deposed_leader_truncates_below_its_own_hw_after_an_unclean_election(make_cluster):
    """a's records 2..4 are committed by a's ISR of one, so a's HW (5) covers them; b, out of
    sync, leads uncleanly and writes other records at 2... Truncating a to its HW would keep
    a's 2..4 and fork the log for good; the epochs say to cut at 2."""
    c = make_cluster()
    c.create_topic("t", 1, 2, config={"unclean.leader.election.enable": True})
    a, b = c.partition_state("t", 0).replicas
    assert produce(c, [b"m0", b"m1"]).error == NO_ERROR
    c.partition([a], [b])
    wait(c, lambda: c.partition_state("t", 0).isr == (a,), 20_000, "b leaves the ISR")
    for i in range(2, 5):
        assert produce(c, [b"a-%d" % i]).error == NO_ERROR
    assert rep(c, a).high_watermark == 5
    c.partition([a], ["controller"])  # a is alive but deposed: it keeps its HW in memory
    wait(c, lambda: leading(c, b), 20_000, "b leads uncleanly")
    assert [produce(c, [v]).base_offset for v in (b"b-2", b"b-3")] == [2, 3]
    c.heal()
    wait(c, lambda: not rep(c, a).is_leader and rep(c, a).log_end_offset < 5, 10_000, "a truncates")
    assert log_values(c, a) == [(0, b"m0"), (1, b"m1")]
    wait(c, lambda: a in c.partition_state("t", 0).isr, 40_000, "a rejoins")
    assert log_values(c, a) == log_values(c, b) == [(0, b"m0"), (1, b"m1"), (2, b"b-2"), (3, b"b-3")]
    assert log_bytes(c, a) == log_bytes(c, b)


def test_a_new_leader_keeps_committed_records_beyond_its_own_hw(make_cluster):
    """The other half of KIP-101: a follower that had a record but not yet the HW saying it
    was committed must not drop it when it becomes leader."""
    c = make_cluster()
    c.create_topic("t", 1, 2)
    a, b = c.partition_state("t", 0).replicas
    assert produce(c, [b"m0"]).error == NO_ERROR
    c.advance(1_000)
    assert produce(c, [b"m1"]).error == NO_ERROR  # acknowledged: b has it
    assert rep(c, b).log_end_offset == 2 and rep(c, b).high_watermark == 1  # b's HW is a fetch behind
    c.kill(a)
    wait(c, lambda: leading(c, b), 15_000, "b leads")
    assert fetch(c, 0)[1] == [(0, b"m0"), (1, b"m1")]


# --- restarts -------------------------------------------------------------------------------------------------------


def test_a_killed_broker_recovers_its_log_from_disk_and_rejoins(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    leader, (victim, other) = roles(c)
    for i in range(4):
        produce(c, [b"%d" % i])
    c.advance(1_000)
    c.kill(victim)
    wait(c, lambda: victim not in c.partition_state("t", 0).isr, 15_000, "the controller sees it die")
    for i in range(4, 7):
        produce(c, [b"%d" % i])
    c.restart(victim)
    wait(c, lambda: rep(c, victim) is not None, 5_000, "it reopens its log")
    recovered = rep(c, victim)
    assert recovered.log_end_offset == 4  # what it had, from disk, before fetching anything
    assert recovered.log.last_recovery.truncated == []
    wait(c, lambda: victim in c.partition_state("t", 0).isr, 30_000, "it rejoins the ISR")
    assert log_bytes(c, victim) == log_bytes(c, leader)
    assert [v for _, v in log_values(c, victim)] == [b"%d" % i for i in range(7)]


def test_power_loss_loses_unflushed_bytes_and_the_broker_catches_up(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    leader, (victim, other) = roles(c)
    for i in range(4):
        produce(c, [b"%d" % i])
    c.advance(1_000)
    before = rep(c, victim).log_end_offset
    assert before == 4 and rep(c, victim).log.unflushed_bytes > 0
    c.kill(victim, power_loss=True)
    c.restart(victim)
    wait(c, lambda: rep(c, victim) is not None, 5_000, "it reopens its log")
    assert rep(c, victim).log_end_offset == 0 < before  # nothing had been fsync'd
    wait(c, lambda: victim in c.partition_state("t", 0).isr, 30_000, "it rejoins the ISR")
    assert rep(c, victim).log_end_offset == 4
    assert log_bytes(c, victim) == log_bytes(c, leader)


# --- the idempotent producer, on the broker ------------------------------------------------------------------------------


def init_producer_id(c, broker):
    answer = request(c, broker, lambda k: InitProducerIdRequest(k))
    assert answer.error == NO_ERROR
    return answer.producer_id, answer.producer_epoch


def idem(values, pid, epoch, seq):
    return batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_producer_ids_are_unique_across_brokers(make_cluster):
    c = make_cluster()
    ids = [init_producer_id(c, b) for b in c.broker_ids for _ in range(2)]
    assert len({pid for pid, _ in ids}) == 6
    assert all(epoch == 0 and pid >= 0 for pid, epoch in ids)


def test_a_duplicate_batch_is_not_appended_again_and_gets_the_original_offset(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    pid, epoch = init_producer_id(c, leader_of(c))
    produce(c, [b"other"])  # so the producer's first batch is not at offset 0
    first = produce(c, None, records=idem([b"a", b"b"], pid, epoch, 0))
    assert (first.error, first.base_offset) == (NO_ERROR, 1)
    second = produce(c, None, records=idem([b"c"], pid, epoch, 2))
    assert (second.error, second.base_offset) == (NO_ERROR, 3)
    leo = rep(c, leader_of(c)).log_end_offset
    again = produce(c, None, records=idem([b"a", b"b"], pid, epoch, 0))  # a retry
    assert (again.error, again.base_offset) == (NO_ERROR, 1)
    again = produce(c, None, records=idem([b"c"], pid, epoch, 2), acks=1)
    assert (again.error, again.base_offset) == (NO_ERROR, 3)
    assert rep(c, leader_of(c)).log_end_offset == leo == 4
    assert [v for _, v in fetch(c, 0)[1]] == [b"other", b"a", b"b", b"c"]


def test_an_out_of_order_sequence_is_refused(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    pid, epoch = init_producer_id(c, leader_of(c))
    assert produce(c, None, records=idem([b"a"], pid, epoch, 0)).error == NO_ERROR
    gap = produce(c, None, records=idem([b"c"], pid, epoch, 2))  # sequence 1 never arrived
    assert gap.error == OUT_OF_ORDER_SEQUENCE_NUMBER == 45
    assert rep(c, leader_of(c)).log_end_offset == 1
    fresh = produce(c, None, records=idem([b"x"], pid + 999, epoch, 5))  # unknown producer, not at 0
    assert fresh.error == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(c, None, records=idem([b"b"], pid, epoch, 1)).base_offset == 1  # the right one
    stale = produce(c, None, records=idem([b"z"], pid, epoch - 1, 2))
    assert stale.error == INVALID_PRODUCER_EPOCH
    newer = produce(c, None, records=idem([b"n"], pid, epoch + 1, 0))  # a new epoch starts at 0
    assert (newer.error, newer.base_offset) == (NO_ERROR, 2)


def test_the_new_leader_still_deduplicates_after_failover(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    a, b, _ = c.partition_state("t", 0).replicas
    pid, epoch = init_producer_id(c, a)
    assert produce(c, None, records=idem([b"p0"], pid, epoch, 0)).base_offset == 0
    assert produce(c, None, records=idem([b"p1", b"p2"], pid, epoch, 1)).base_offset == 1
    c.kill(a)
    wait(c, lambda: leading(c, b), 15_000, "b leads")
    retry = produce(c, None, records=idem([b"p1", b"p2"], pid, epoch, 1))  # the answer was lost
    assert (retry.error, retry.base_offset) == (NO_ERROR, 1)
    assert produce(c, None, records=idem([b"p4"], pid, epoch, 4)).error == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(c, None, records=idem([b"p3"], pid, epoch, 3)).base_offset == 3
    assert [v for _, v in fetch(c, 0)[1]] == [b"p0", b"p1", b"p2", b"p3"]


def test_a_restarted_broker_rebuilds_producer_state_from_its_log(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 1)
    (a,) = c.partition_state("t", 0).replicas
    pid, epoch = init_producer_id(c, a)
    assert produce(c, None, records=idem([b"p0", b"p1"], pid, epoch, 0)).base_offset == 0
    c.kill(a)
    c.restart(a)
    wait(c, lambda: leading(c, a), 15_000, "a leads again")
    retry = produce(c, None, records=idem([b"p0", b"p1"], pid, epoch, 0))
    assert (retry.error, retry.base_offset) == (NO_ERROR, 0)
    assert rep(c, a).log_end_offset == 2
    assert produce(c, None, records=idem([b"p2"], pid, epoch, 2)).base_offset == 2


# --- the controller --------------------------------------------------------------------------------------------------


def test_assign_replicas_is_kafkas_algorithm():
    # Kafka's AdminTest.testReplicaAssignment: 5 brokers, 10 partitions, RF 3, start index 0
    assert assign_replicas(10, 3, [0, 1, 2, 3, 4], 0, 0) == [
        (0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1),
        (0, 2, 3), (1, 3, 4), (2, 4, 0), (3, 0, 1), (4, 1, 2),
    ]
    assert assign_replicas(4, 2, [1, 2, 3], 2, 1) == [(3, 2), (1, 3), (2, 1), (3, 1)]
    assert assign_replicas(3, 1, [5, 7, 9], 1, 0) == [(7,), (9,), (5,)]
    for start, shift in itertools.product(range(4), range(4)):
        placement = assign_replicas(8, 3, [1, 2, 3, 4], start, shift)
        assert all(len(set(r)) == 3 for r in placement)  # never twice on one broker
        leaders = [r[0] for r in placement]
        assert sorted(leaders) == [1, 1, 2, 2, 3, 3, 4, 4]  # leaders spread evenly


def test_placement_is_kafkas_and_deterministic_for_a_seed(make_cluster):
    placements = []
    for seed in (3, 3, 4, 5, 6, 7):
        c = make_cluster(4, seed=seed)
        c.create_topic("t", 6, 3)
        placement = [s.replicas for s in c.partitions_of("t")]
        candidates = [assign_replicas(6, 3, [1, 2, 3, 4], st, sh) for st in range(4) for sh in range(4)]
        assert placement in [list(x) for x in candidates]
        assert [s.leader for s in c.partitions_of("t")] == [r[0] for r in placement]
        assert all(s.isr == s.replicas and s.leader_epoch == 0 for s in c.partitions_of("t"))
        placements.append(placement)
    assert placements[0] == placements[1]
    assert len({tuple(p) for p in placements}) > 2


def create_raw(c, topic, via=None):
    answer = request(c, c.broker_ids[0] if via is None else via, lambda k: CreateTopicsRequest(k, (topic,)))
    ((name, error, message),) = answer.results
    return error, message


def test_create_topics_error_codes_and_messages(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 1)
    cases = [
        (TopicConfig("t", 1, 1), TOPIC_ALREADY_EXISTS, "'t' already exists"),
        (TopicConfig("big", 1, 4), INVALID_REPLICATION_FACTOR, "replication factor 4"),
        (TopicConfig("zero-rf", 1, 0), INVALID_REPLICATION_FACTOR, "replication factor 0"),
        (TopicConfig("bad/name", 1, 1), INVALID_TOPIC_EXCEPTION, "'bad/name' is illegal"),
        (TopicConfig("..", 1, 1), INVALID_TOPIC_EXCEPTION, "'..'"),
        (TopicConfig("nop", 0, 1), INVALID_PARTITIONS, "at least 1, not 0"),
        (TopicConfig("cfg", 1, 1, (("retention.msec", "1"),)), INVALID_CONFIG, "'retention.msec'"),
        (TopicConfig("cfg2", 1, 1, (("min.insync.replicas", "two"),)), INVALID_CONFIG, "min.insync.replicas"),
    ]
    for topic, code, fragment in cases:
        error, message = create_raw(c, topic, via=c.broker_ids[-1])
        assert (topic.name, error) == (topic.name, code)
        assert fragment in message
    assert c.topics() == ["t"]  # none of them was created


@pytest.mark.parametrize(
    "args, kwargs, errno, class_name, fragment",
    [
        (("t", 1, 1), {}, TOPIC_ALREADY_EXISTS, "TopicAlreadyExistsError", "already exists"),
        (("big", 1, 4), {}, INVALID_REPLICATION_FACTOR, "InvalidReplicationFactorError", "replication factor 4"),
        (("no partitions", 1, 1), {}, INVALID_TOPIC_EXCEPTION, "InvalidTopicError", "' '"),
        (("cfg", 1, 1), {"config": {"retention.msec": 1}}, INVALID_CONFIG, "InvalidConfigurationError", "retention.msec"),
        (("nop", 0, 1), {}, INVALID_PARTITIONS, "InvalidPartitionsError", "not 0"),
    ],
)
def test_create_topic_raises_the_error_class_of_the_code(make_cluster, args, kwargs, errno, class_name, fragment):
    """``Cluster.create_topic`` raises ``for_code(error)``: the class must carry Kafka's
    number and name (kafka-python's class names), not UNKNOWN_SERVER_ERROR (-1)."""
    c = make_cluster()
    c.create_topic("t", 1, 1)
    with pytest.raises(BrokerResponseError) as info:
        c.create_topic(*args, **kwargs)
    err = info.value
    assert isinstance(err, for_code(errno))
    assert type(err).__name__ == class_name
    assert err.errno == errno
    assert fragment in str(err) and str(err).startswith(f"[Error {errno}] ")


def test_metadata_from_any_broker(make_cluster):
    c = make_cluster()
    c.create_topic("t", 2, 2)
    c.create_topic("u", 1, 3)
    answers = [request(c, b, lambda k: MetadataRequest(k)) for b in c.broker_ids]
    assert all(a.brokers == (1, 2, 3) and a.controller_id == CONTROLLER_ID for a in answers)
    assert len({a.topics for a in answers}) == 1
    topics = {t.name: t for t in answers[0].topics}
    assert sorted(topics) == ["t", "u"]
    for t in ("t", "u"):
        for pm in topics[t].partitions:
            s = c.partition_state(t, pm.partition)
            assert (pm.error, pm.leader, pm.leader_epoch, pm.replicas, pm.isr) == (
                NO_ERROR, s.leader, s.leader_epoch, s.replicas, s.isr
            )
    unknown = request(c, 2, lambda k: MetadataRequest(k, ("nope",)))
    assert [(t.name, t.error) for t in unknown.topics] == [("nope", UNKNOWN_TOPIC_OR_PARTITION)]
    # after a leader change, every live broker's answer shows it
    victim = leader_of(c, "u", 0)
    c.kill(victim)
    wait(c, lambda: leader_of(c, "u", 0) not in (victim, -1), 15_000, "a new leader")
    c.advance(100)
    for b in c.broker_ids:
        if b != victim:
            meta = request(c, b, lambda k: MetadataRequest(k, ("u",)))
            assert meta.brokers == tuple(x for x in c.broker_ids if x != victim)
            assert meta.topics[0].partitions[0].leader == leader_of(c, "u", 0)


def test_alter_partition_is_refused_unless_it_names_the_current_epochs(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 3)
    a, b, third = c.partition_state("t", 0).replicas
    c.kill(a)
    wait(c, lambda: leading(c, b), 15_000, "b leads (epoch 1)")
    c.restart(a)
    wait(c, lambda: a in c.partition_state("t", 0).isr, 30_000, "a back in the ISR")
    c.kill(b)
    wait(c, lambda: leading(c, a) or leading(c, third), 15_000, "a new leader (epoch 2)")
    state = c.partition_state("t", 0)
    assert state.leader_epoch == 2
    lead = state.leader

    def alter(broker, epoch, pepoch, isr):
        return request(c, CONTROLLER_ID, lambda k: AlterPartitionRequest(k, broker, "t", 0, epoch, pepoch, isr))

    stale = alter(lead, 1, state.partition_epoch, (lead,))  # the leader epoch of an earlier reign
    assert stale.error == FENCED_LEADER_EPOCH
    assert stale.state == state  # the answer tells the caller what is current
    assert alter(lead, 2, state.partition_epoch - 1, (lead,)).error == INVALID_UPDATE_VERSION
    assert alter(third if lead != third else a, 2, state.partition_epoch, (lead,)).error == NOT_LEADER_OR_FOLLOWER
    assert alter(lead, 2, state.partition_epoch, (lead, b)).error == INELIGIBLE_REPLICA  # b is dead
    assert c.partition_state("t", 0) == state  # none of them changed anything
    good = alter(lead, 2, state.partition_epoch, (lead,))
    assert good.error == NO_ERROR and good.state.isr == (lead,)
    assert good.state.partition_epoch == state.partition_epoch + 1 and good.state.leader_epoch == 2


def test_describe_is_a_deterministic_table(make_cluster):
    c = make_cluster(3, seed=1)
    c.create_topic("t", 2, 2)
    produce(c, [b"a", b"b"], partition=0)
    produce(c, [b"c"], partition=1)
    c.advance(1_000)
    c.kill(3)
    c.advance(10_000)
    produce(c, [b"d"], partition=1)
    assert c.describe("t") == (
        "Topic: t\tPartitionCount: 2\tReplicationFactor: 2\n"
        "\tPartition: 0\tLeader: 2\tEpoch: 1\tReplicas: 3,2\tIsr: 2\tLEO/HW: 3:dead 2:2/2\n"
        "\tPartition: 1\tLeader: 1\tEpoch: 0\tReplicas: 1,3\tIsr: 1\tLEO/HW: 1:2/2 3:dead"
    )


def test_alter_partition_refuses_a_member_that_is_not_a_replica(make_cluster):
    """The controller checks that every member of a proposed ISR is alive; it must also be
    one of the partition's replicas (Kafka refuses anything else)."""
    c = make_cluster()
    c.create_topic("t", 1, 2)
    state = c.partition_state("t", 0)
    (outsider,) = [x for x in c.broker_ids if x not in state.replicas]
    answer = request(c, CONTROLLER_ID, lambda k: AlterPartitionRequest(
        k, state.leader, "t", 0, state.leader_epoch, state.partition_epoch, state.replicas + (outsider,)))
    assert answer.error != NO_ERROR
    assert c.partition_state("t", 0) == state


def test_describe_an_unknown_topic_says_so(make_cluster):
    c = make_cluster()
    c.create_topic("t", 1, 1)
    with pytest.raises(IllegalArgumentError, match="no topic 'nope'"):
        c.describe("nope")


def test_two_brokers_expiring_together_are_both_dead_before_any_election():
    cluster = Cluster(brokers=3, seed=7)
    cluster.create_topic("t", partitions=1, replication_factor=3)
    leader = cluster.partition_state("t", 0).leader
    follower = next(r for r in cluster.partition_state("t", 0).replicas if r != leader)
    cluster.kill(leader)
    cluster.kill(follower)
    cluster.advance(12_000)
    survivor = next(b for b in cluster.broker_ids if b not in (leader, follower))
    elections = [(old, new) for _, topic, _, old, new, _ in cluster.controller.elections if topic == "t"]
    assert elections == [(leader, survivor)]  # straight to the live one, no dead leader in between
    cluster.close()


def test_the_admin_client_survives_a_request_to_a_dead_broker():
    cluster = Cluster(brokers=3, seed=7)
    cluster.kill(2)
    admin = cluster.world.nodes[cluster.admin_id]
    cluster.world.call_node(cluster.admin_id, lambda n: n.request(2, lambda k: MetadataRequest(k)))
    cluster.advance(100)
    assert admin.disconnected == [2]
    cluster.close()


def test_a_lossy_link_drops_what_it_should_and_heal_restores_it():
    cluster = Cluster(brokers=3, seed=7)
    cluster.create_topic("t", partitions=1, replication_factor=3)
    admin = cluster.world.nodes[cluster.admin_id]
    leader = cluster.partition_state("t", 0).leader
    cluster.lossy(leader, cluster.admin_id, 1.0)  # the leader's answers to the admin are lost
    corr = cluster.world.call_node(cluster.admin_id, lambda n: n.request(leader, lambda k: MetadataRequest(k)))
    cluster.advance(1_000)
    assert corr not in admin.responses
    cluster.heal()
    corr = cluster.world.call_node(cluster.admin_id, lambda n: n.request(leader, lambda k: MetadataRequest(k)))
    cluster.advance(1_000)
    assert corr in admin.responses
    with pytest.raises(IllegalArgumentError, match="loss must be between 0 and 1, not 1.5"):
        cluster.lossy(1, 2, 1.5)
    with pytest.raises(IllegalArgumentError, match="latency_ms must be >= 0, not -1"):
        cluster.slow(1, 2, -1)
    cluster.close()


@pytest.mark.parametrize("workload, seed", [("produce", 2586018467), ("produce", 1748275134), ("transactions", 3538985212)])
def test_a_parked_fetch_is_skipped_on_wake_only_when_reading_it_would_not_answer(monkeypatch, workload, seed):
    # ReplicaManager._answers_now spares _wake_fetches a full _read: for every parked fetch
    # woken in fault schedules (leader changes, truncations, transactions), a False from it
    # must mean that _read finds no error and no records.
    from minikafka.broker.replica_manager import ReplicaManager
    from minikafka.checker import run_schedule

    answers_now = ReplicaManager._answers_now
    seen = {True: 0, False: 0}

    def checked(self, request):
        verdict = answers_now(self, request)
        if not verdict:
            parts, size, urgent = self._read(request)
            assert not urgent and size < request.min_bytes, (request, parts)
        seen[verdict] += 1
        return verdict

    monkeypatch.setattr(ReplicaManager, "_answers_now", checked)
    acks = 1 if seed == 2586018467 else "all"  # that schedule loses writes with acks=1
    report = run_schedule(seed, workload=workload, acks=acks) if workload == "produce" \
        else run_schedule(seed, workload=workload)
    assert seen[True] > 100 and seen[False] > 100, seen
    assert report.counts


def test_followers_send_one_fetch_per_leader_for_a_whole_new_topic():
    """A follower that gains many partitions of a leader at once (a CreateTopics) sends that
    leader one fetch naming them all, not one per partition, each naming every partition so
    far: 2,000 partitions made ~1,300 requests of up to 1,300 partitions per follower, and
    every broker stalled its clients for seconds."""
    import collections

    cluster = Cluster(brokers=3, seed=0)
    start = len(cluster.world.history)
    cluster.create_topic("wide", partitions=60, replication_factor=3)
    cluster.advance(200)
    brokers = set(cluster.broker_ids)
    fetches = [e for e in cluster.world.history[start:]
               if e[1] == "recv" and e[4] == "FetchRequest" and e[2] in brokers and e[3] in brokers]
    per_step = collections.Counter((at, src, dst) for at, _, src, dst, _ in fetches)
    assert fetches and max(per_step.values()) == 1, per_step.most_common(3)
    assert len(fetches) <= 6 * 2  # each of the 6 follower-leader pairs: the first fetch, maybe one more
    cluster.close()
