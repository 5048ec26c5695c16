"""Transactions (KIP-98) in the simulated world, driven by raw requests.

A tiny transactional client below (``Txn``) speaks the protocol the way kafka-python's
TransactionManager does: FindCoordinator(key_type=1), InitProducerId(transactional_id),
AddPartitionsToTxn before the first write to a partition, transactional Produce batches,
AddOffsetsToTxn + TxnOffsetCommit, EndTxn. Each test asserts what the brokers answer and
what a read_committed or read_uncommitted fetch returns. Seeded, simulated time.
"""

from __future__ import annotations

import pytest

from minikafka.broker.transaction_state_manager import TRANSACTION_STATE_TOPIC, TransactionState
from minikafka.checker.transactions import TransactionHistory, analyse_transactions
from minikafka.cluster import Cluster
from minikafka.messages import (
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_NOT_AVAILABLE,
    INVALID_PRODUCER_EPOCH,
    INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE,
    LATEST_TIMESTAMP,
    NO_ERROR,
    NOT_COORDINATOR,
    PRODUCER_FENCED,
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    FetchPartition,
    FetchRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    OffsetCommitPartition,
    OffsetFetchRequest,
    ProducePartition,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from minikafka.records import MemoryRecords, RecordBatch
from sim_helpers import request

CONFIG = {
    "replica.lag.time.max.ms": 10_000,
    "transaction.state.log.num.partitions": 3,
    "offsets.topic.num.partitions": 3,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1_000,
}
READ_COMMITTED, READ_UNCOMMITTED = 1, 0


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(3, seed=5, config=CONFIG, dir=tmp_path / "c")
    c.create_topic("t", partitions=2, replication_factor=3)
    yield c
    c.close()


def retry(c, dst_of, make, ok=lambda r: True, attempts=60, backoff_ms=200):
    """Ask again (as clients do on retriable errors) until ``ok(response)``; the last answer."""
    response = None
    for _ in range(attempts):
        response = request(c, dst_of(), make)
        if response is not None and ok(response):
            return response
        c.advance(backoff_ms)
    return response


def find_coordinator(c, key, key_type=1):
    def answered(r):
        return r.error == NO_ERROR

    r = retry(c, c._any_live_broker, lambda k: FindCoordinatorRequest(k, key, key_type), answered)
    assert r.error == NO_ERROR, r
    return r.node_id


class Txn:
    """A transactional producer reduced to its requests."""

    def __init__(self, c, transactional_id, timeout_ms=60_000):
        self.c, self.id, self.timeout_ms = c, transactional_id, timeout_ms
        self.pid = self.epoch = -1
        self.seq = {}

    def coordinator(self):
        return find_coordinator(self.c, self.id)

    def init(self):
        r = retry(self.c, self.coordinator, lambda k: InitProducerIdRequest(k, self.id, self.timeout_ms),
                  lambda r: r.error == NO_ERROR)
        assert r.error == NO_ERROR, r
        self.pid, self.epoch, self.seq = r.producer_id, r.producer_epoch, {}
        return r

    def add_partitions(self, *partitions):
        r = retry(self.c, self.coordinator, lambda k: AddPartitionsToTxnRequest(
            k, self.id, self.pid, self.epoch, tuple(partitions)),
            lambda r: all(e not in (CONCURRENT_TRANSACTIONS, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE)
                          for *_, e in r.results))
        return {(t, p): e for t, p, e in r.results}

    def send(self, values, topic="t", partition=0):
        tp = (topic, partition)
        seq = self.seq.get(tp, 0)
        records = bytes(RecordBatch.build(values, producer_id=self.pid, producer_epoch=self.epoch,
                                          base_sequence=seq, is_transactional=True))
        leader = self.c.partition_state(topic, partition).leader
        r = request(self.c, leader, lambda k: ProduceRequest(k, -1, 5_000, (ProducePartition(topic, partition, records),)))
        part = r.partitions[0]
        if part.error == NO_ERROR:
            self.seq[tp] = seq + len(values)
        return part

    def end(self, committed=True):
        r = retry(self.c, self.coordinator, lambda k: EndTxnRequest(k, self.id, self.pid, self.epoch, committed),
                  lambda r: r.error not in (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE))
        return r.error


def fetch(c, offset=0, isolation_level=READ_COMMITTED, topic="t", partition=0):
    """A consumer's fetch: (partition response, [values a client keeps]) with Kafka's
    consumer rule: control batches dropped, and under read_committed the batches of an
    aborted transaction (producer id, from its first offset) dropped."""
    leader = c.partition_state(topic, partition).leader
    r = request(c, leader, lambda k: FetchRequest(k, -1, 0, 1, (FetchPartition(topic, partition, offset),),
                                                  isolation_level=isolation_level))
    part = r.partitions[0]
    pending = sorted(part.aborted_transactions, key=lambda a: a[1])  # consumed in order, as Kafka's Fetcher
    kept = []
    open_aborted = set()
    for b in MemoryRecords(part.records).batches():
        while pending and pending[0][1] <= b.last_offset:
            open_aborted.add(pending.pop(0)[0])
        if b.is_control_batch:
            open_aborted.discard(b.producer_id)
            continue
        if isolation_level == READ_COMMITTED and b.producer_id in open_aborted:
            continue
        kept += [r.value for r in b.records() if r.offset >= offset]
    return part, kept


def wait_complete(c, txn_id, state):
    coordinator = lambda: c.broker(find_coordinator(c, txn_id)).transaction_coordinator  # noqa: E731
    assert c.run_until(lambda: (t := coordinator().state.transactions.get(txn_id)) is not None
                       and t.state == state, 20_000), coordinator().state.transactions.get(txn_id)


# --- tests ------------------------------------------------------------------------------------------


def test_find_coordinator_for_a_transactional_id_names_the_leader_of_its_transaction_state_partition(cluster):
    node = find_coordinator(cluster, "tx-1")
    p = cluster.broker(node).transaction_coordinator.state.partition_for("tx-1")
    assert cluster.partition_state(TRANSACTION_STATE_TOPIC, p).leader == node
    assert sorted(cluster.broker(1).topics[TRANSACTION_STATE_TOPIC].configs)[0] == ("cleanup.policy", "compact")


def test_init_producer_id_bumps_the_epoch_of_the_same_producer_id(cluster):
    first = Txn(cluster, "tx").init()
    second = Txn(cluster, "tx").init()
    assert second.producer_id == first.producer_id
    assert second.producer_epoch == first.producer_epoch + 1
    other = Txn(cluster, "another").init()
    assert other.producer_id != first.producer_id


def test_a_timeout_above_the_brokers_maximum_is_refused(cluster):
    node = find_coordinator(cluster, "tx")
    r = request(cluster, node, lambda k: InitProducerIdRequest(k, "tx", 900_001))
    assert r.error == INVALID_TRANSACTION_TIMEOUT


def test_committed_records_are_invisible_to_read_committed_until_the_commit(cluster):
    txn = Txn(cluster, "tx")
    txn.init()
    assert txn.add_partitions(("t", 0)) == {("t", 0): NO_ERROR}
    assert txn.send([b"a", b"b"]).error == NO_ERROR
    part, values = fetch(cluster, isolation_level=READ_COMMITTED)
    assert values == [] and part.last_stable_offset == 0 and part.high_watermark == 2
    assert fetch(cluster, isolation_level=READ_UNCOMMITTED)[1] == [b"a", b"b"]
    leader = cluster.partition_state("t", 0).leader
    lso = request(cluster, leader, lambda k: ListOffsetsRequest(k, (("t", 0, LATEST_TIMESTAMP),), isolation_level=1))
    assert lso.partitions[0][4] == 0
    assert txn.end(committed=True) == NO_ERROR
    wait_complete(cluster, "tx", TransactionState.COMPLETE_COMMIT)
    part, values = fetch(cluster, isolation_level=READ_COMMITTED)
    assert values == [b"a", b"b"]
    assert part.last_stable_offset == part.high_watermark == 3  # two records and the commit marker
    assert part.aborted_transactions == ()


def test_aborted_records_are_listed_for_read_committed_and_dropped(cluster):
    txn = Txn(cluster, "tx")
    txn.init()
    txn.add_partitions(("t", 0), ("t", 1))
    txn.send([b"x1"], partition=0)
    txn.send([b"y1"], partition=1)
    assert txn.end(committed=False) == NO_ERROR
    wait_complete(cluster, "tx", TransactionState.COMPLETE_ABORT)
    txn.add_partitions(("t", 0))
    txn.send([b"x2"], partition=0)
    assert txn.end(committed=True) == NO_ERROR
    wait_complete(cluster, "tx", TransactionState.COMPLETE_COMMIT)
    part, values = fetch(cluster, isolation_level=READ_COMMITTED)
    assert part.aborted_transactions == ((txn.pid, 0),)
    assert values == [b"x2"]
    assert fetch(cluster, isolation_level=READ_UNCOMMITTED)[1] == [b"x1", b"x2"]
    part1, values1 = fetch(cluster, isolation_level=READ_COMMITTED, partition=1)
    assert values1 == [] and part1.last_stable_offset == 2  # the aborted record and its marker


def test_a_second_producer_with_the_same_id_fences_the_first(cluster):
    zombie = Txn(cluster, "tx")
    zombie.init()
    zombie.add_partitions(("t", 0))
    zombie.send([b"zombie"])
    # The new instance: its first InitProducerId aborts the zombie's open transaction (with
    # the epoch bumped) and is told to retry; the retry gets a newer epoch still.
    fresh = Txn(cluster, "tx")
    fresh.init()
    assert fresh.pid == zombie.pid and fresh.epoch > zombie.epoch
    assert zombie.add_partitions(("t", 1)) == {("t", 1): PRODUCER_FENCED}
    assert zombie.send([b"late"]).error == INVALID_PRODUCER_EPOCH  # the abort marker carried the new epoch
    assert zombie.end(committed=True) == PRODUCER_FENCED
    fresh.add_partitions(("t", 0))
    assert fresh.send([b"fresh"]).error == NO_ERROR
    assert fresh.end() == NO_ERROR
    wait_complete(cluster, "tx", TransactionState.COMPLETE_COMMIT)
    assert fetch(cluster)[1] == [b"fresh"]


def test_a_transaction_left_open_past_its_timeout_is_aborted_and_its_producer_fenced(cluster):
    txn = Txn(cluster, "slow", timeout_ms=5_000)
    txn.init()
    txn.add_partitions(("t", 0))
    txn.send([b"never"])
    cluster.advance(8_000)
    wait_complete(cluster, "slow", TransactionState.COMPLETE_ABORT)
    part, values = fetch(cluster)
    assert values == [] and part.aborted_transactions == ((txn.pid, 0),)
    assert part.last_stable_offset == part.high_watermark == 2
    assert txn.end(committed=True) == PRODUCER_FENCED


def test_ending_a_transaction_that_never_began_is_an_invalid_state(cluster):
    txn = Txn(cluster, "tx")
    txn.init()
    assert txn.end(committed=True) == INVALID_TXN_STATE


def test_offsets_committed_in_a_transaction_appear_only_with_its_commit(cluster):
    txn = Txn(cluster, "rpw")
    txn.init()
    group_coordinator = find_coordinator(cluster, "g", key_type=0)

    def committed():
        r = request(cluster, group_coordinator, lambda k: OffsetFetchRequest(k, "g", (("t", 0),)))
        return r.partitions[0].offset

    for committed_flag, offset, expected in ((False, 5, -1), (True, 7, 7)):
        r = retry(cluster, txn.coordinator, lambda k: AddOffsetsToTxnRequest(k, "rpw", txn.pid, txn.epoch, "g"),
                  lambda r: r.error == NO_ERROR)
        assert r.error == NO_ERROR
        r = request(cluster, group_coordinator, lambda k: TxnOffsetCommitRequest(
            k, "rpw", "g", txn.pid, txn.epoch, (OffsetCommitPartition("t", 0, offset),)))
        assert r.partitions == (("t", 0, NO_ERROR),)
        assert committed() == -1  # pending until the marker: neither 5 nor 7 is visible yet
        assert txn.end(committed=committed_flag) == NO_ERROR
        wait_complete(cluster, "rpw", TransactionState.COMPLETE_COMMIT if committed_flag
                      else TransactionState.COMPLETE_ABORT)
        assert cluster.run_until(lambda: committed() == expected, 5_000), committed()


def test_a_new_coordinator_finishes_a_commit_its_dead_predecessor_decided(cluster):
    cluster.create_topic("u", partitions=3, replication_factor=3)
    txn = Txn(cluster, "tx")
    txn.init()
    old = txn.coordinator()
    remote = [p for p in range(3) if cluster.partition_state("u", p).leader != old]
    assert remote, "some partition of u is led by another broker"
    txn.add_partitions(*[("u", p) for p in range(3)])
    for p in range(3):
        assert txn.send([f"v{p}".encode()], topic="u", partition=p).error == NO_ERROR
    # The network loses every marker the old coordinator sends: its commit is decided
    # (PrepareCommit replicated, the producer answered) but not written on the other leaders.
    deliver = cluster.world.deliver

    def lossy(src, dst, message):
        if src == old and type(message).__name__ == "WriteTxnMarkersRequest":
            return
        deliver(src, dst, message)

    cluster.world.deliver = lossy
    assert txn.end(committed=True) == NO_ERROR
    cluster.advance(500)
    assert cluster.broker(old).transaction_coordinator.state.transactions["tx"].state == TransactionState.PREPARE_COMMIT
    assert fetch(cluster, topic="u", partition=remote[0])[1] == []
    cluster.kill(old)
    cluster.world.deliver = deliver
    assert cluster.run_until(lambda: cluster.partition_state(TRANSACTION_STATE_TOPIC, cluster.broker(
        cluster._any_live_broker()).transaction_coordinator.state.partition_for("tx")).leader not in (old, -1), 30_000)
    new = find_coordinator(cluster, "tx")
    assert new != old
    wait_complete(cluster, "tx", TransactionState.COMPLETE_COMMIT)
    for p in range(3):
        assert fetch(cluster, topic="u", partition=p)[1] == [f"v{p}".encode()]


def test_the_transaction_state_survives_a_restart_of_every_broker(cluster, tmp_path):
    txn = Txn(cluster, "tx")
    txn.init()
    txn.add_partitions(("t", 0))
    txn.send([b"open"])
    for b in list(cluster.broker_ids):
        cluster.kill(b)
    for b in list(cluster.broker_ids):
        cluster.restart(b)
    assert cluster.run_until(lambda: cluster.partition_state("t", 0).leader > 0
                             and fetch(cluster, isolation_level=READ_UNCOMMITTED)[1] == [b"open"], 30_000)
    # The open transaction is known again (rebuilt from the logs): still unstable, then aborted
    # by the fence of a new instance.
    part, values = fetch(cluster)
    assert values == [] and part.last_stable_offset == 0
    fresh = Txn(cluster, "tx")
    fresh.init()
    assert fresh.pid == txn.pid and fresh.epoch >= txn.epoch + 2
    part, values = fetch(cluster)
    assert values == [] and part.aborted_transactions == ((txn.pid, 0),)


def test_our_consumer_honours_read_committed_and_moves_past_the_markers(cluster):
    from minikafka.clients.consumer import KafkaConsumer
    from minikafka.topic import TopicPartition

    txn = Txn(cluster, "tx")
    txn.init()
    txn.add_partitions(("t", 0))
    txn.send([b"kept-1", b"kept-2"])
    assert txn.end(committed=True) == NO_ERROR
    wait_complete(cluster, "tx", TransactionState.COMPLETE_COMMIT)
    txn.add_partitions(("t", 0))
    txn.send([b"dropped"])
    assert txn.end(committed=False) == NO_ERROR
    wait_complete(cluster, "tx", TransactionState.COMPLETE_ABORT)
    txn.add_partitions(("t", 0))
    txn.send([b"open"])  # left open: read_committed stops before it
    tp = TopicPartition("t", 0)
    seen = {}
    for level in ("read_committed", "read_uncommitted"):
        consumer = KafkaConsumer(bootstrap_servers=cluster, isolation_level=level, auto_offset_reset="earliest",
                                 consumer_timeout_ms=3_000)
        consumer.assign([tp])
        seen[level] = ([r.value for r in consumer], consumer.position(tp), consumer.end_offsets([tp])[tp])
        consumer.close()
    # committed: offsets 0-1 and the marker at 2; aborted: 3 and its marker 4; open: 5
    assert seen["read_committed"] == ([b"kept-1", b"kept-2"], 5, 5)  # the position is the LSO, past the abort
    assert seen["read_uncommitted"] == ([b"kept-1", b"kept-2", b"dropped", b"open"], 6, 6)


def test_isolation_level_must_be_one_of_kafkas_two(cluster):
    from minikafka.clients.consumer import KafkaConsumer
    from minikafka.errors import KafkaConfigurationError

    with pytest.raises(KafkaConfigurationError, match="isolation_level"):
        KafkaConsumer(bootstrap_servers=cluster, isolation_level="committed")


# --- our own producer's transactional API (kafka-python's) ---------------------------------------------


def committed_values(cluster, level="read_committed", topic="t"):
    from minikafka.clients.consumer import KafkaConsumer
    from minikafka.topic import TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=cluster, isolation_level=level, auto_offset_reset="earliest",
                             consumer_timeout_ms=3_000)
    consumer.assign([TopicPartition(topic, p) for p in range(2)])
    values = sorted(r.value for r in consumer)
    consumer.close()
    return values


def test_our_producer_commits_and_aborts_transactions(cluster):
    from minikafka.clients.producer import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=cluster, transactional_id="ours")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(4):
        producer.send("t", f"c{i}".encode(), partition=i % 2)
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(2):
        producer.send("t", f"a{i}".encode(), partition=i % 2)
    producer.flush()
    producer.abort_transaction()
    producer.close()
    wait_complete(cluster, "ours", TransactionState.COMPLETE_ABORT)
    assert committed_values(cluster) == [b"c0", b"c1", b"c2", b"c3"]
    assert committed_values(cluster, "read_uncommitted") == [b"a0", b"a1", b"c0", b"c1", b"c2", b"c3"]


def test_our_producer_refuses_to_send_outside_a_transaction(cluster):
    from minikafka.clients.producer import KafkaProducer
    from minikafka.errors import IllegalStateError

    producer = KafkaProducer(bootstrap_servers=cluster, transactional_id="strict")
    producer.init_transactions()
    with pytest.raises(IllegalStateError, match="begin_transaction"):
        producer.send("t", b"stray", partition=0)
    producer.close()


def test_a_second_instance_of_our_producer_fences_the_first(cluster):
    from minikafka.clients.producer import KafkaProducer
    from minikafka.errors import ProducerFencedError

    zombie = KafkaProducer(bootstrap_servers=cluster, transactional_id="dup")
    zombie.init_transactions()
    zombie.begin_transaction()
    zombie.send("t", b"zombie", partition=0)
    zombie.flush()
    fresh = KafkaProducer(bootstrap_servers=cluster, transactional_id="dup")
    fresh.init_transactions()
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    fresh.begin_transaction()
    fresh.send("t", b"fresh", partition=0)
    fresh.commit_transaction()
    wait_complete(cluster, "dup", TransactionState.COMPLETE_COMMIT)
    assert committed_values(cluster) == [b"fresh"]


def test_read_process_write_with_our_clients_counts_each_input_once(cluster):
    from minikafka.clients.consumer import KafkaConsumer
    from minikafka.clients.producer import KafkaProducer
    from minikafka.topic import OffsetAndMetadata, TopicPartition

    cluster.create_topic("in", partitions=1, replication_factor=3)
    seed = KafkaProducer(bootstrap_servers=cluster)
    for i in range(6):
        seed.send("in", f"x{i}".encode(), partition=0)
    seed.close()
    consumer = KafkaConsumer("in", bootstrap_servers=cluster, group_id="rpw", enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level="read_committed")
    producer = KafkaProducer(bootstrap_servers=cluster, transactional_id="rpw-1")
    producer.init_transactions()
    records = []
    while len(records) < 6:
        for batch in consumer.poll(timeout_ms=1_000).values():
            records.extend(batch)
    tp = TopicPartition("in", 0)
    for chunk, commit in ((records[:4], True), (records[4:], False)):
        producer.begin_transaction()
        for r in chunk:
            producer.send("t", r.value.upper(), partition=0)
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(chunk[-1].offset + 1, "", -1)}, "rpw")
        producer.commit_transaction() if commit else producer.abort_transaction()
    producer.close()
    wait_complete(cluster, "rpw-1", TransactionState.COMPLETE_ABORT)
    assert committed_values(cluster) == [b"X0", b"X1", b"X2", b"X3"]
    assert cluster.run_until(lambda: consumer.committed(tp) == 4, 5_000), consumer.committed(tp)
    consumer.close()


def test_markers_lost_to_a_leader_that_dies_are_written_on_the_next_leader(cluster):
    txn = Txn(cluster, "tx")
    txn.init()
    coordinator = txn.coordinator()
    victim_partition = next(p for p in range(2) if cluster.partition_state("t", p).leader != coordinator)
    victim = cluster.partition_state("t", victim_partition).leader
    txn.add_partitions(("t", 0), ("t", 1))
    txn.send([b"a"], partition=0)
    txn.send([b"b"], partition=1)
    deliver = cluster.world.deliver

    def lossy(src, dst, message):  # the victim never gets a marker
        if dst == victim and type(message).__name__ == "WriteTxnMarkersRequest":
            return
        deliver(src, dst, message)

    cluster.world.deliver = lossy
    assert txn.end(committed=True) == NO_ERROR
    cluster.advance(1_000)
    assert cluster.broker(coordinator).transaction_coordinator.markers["tx"].remaining == {("t", victim_partition)}
    cluster.kill(victim)
    assert cluster.run_until(lambda: cluster.partition_state("t", victim_partition).leader not in (victim, -1), 30_000)
    wait_complete(cluster, "tx", TransactionState.COMPLETE_COMMIT)
    cluster.world.deliver = deliver
    assert fetch(cluster, partition=0)[1] == [b"a"]
    assert fetch(cluster, partition=1)[1] == [b"b"]


def test_a_partition_refuses_a_marker_from_an_older_coordinator(cluster):
    from minikafka.messages import TRANSACTION_COORDINATOR_FENCED, TxnMarker, WriteTxnMarkersRequest

    leader = cluster.partition_state("t", 0).leader

    def marker(coordinator_epoch, committed):
        r = request(cluster, leader, lambda k: WriteTxnMarkersRequest(k, (
            TxnMarker(4242, 0, committed, coordinator_epoch, (("t", 0),)),)))
        return r.results

    assert marker(5, committed=True) == ((4242, "t", 0, NO_ERROR),)
    assert marker(4, committed=False) == ((4242, "t", 0, TRANSACTION_COORDINATOR_FENCED),)
    assert marker(5, committed=False) == ((4242, "t", 0, NO_ERROR),)


# --- read-process-write under faults: each input counted once in the committed output ------------------


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_read_process_write_under_crashes_counts_each_input_exactly_once(tmp_path, seed):
    """Kafka's exactly-once loop: consume, produce, and commit the input offsets in the
    producer's transaction. Faults between and inside the transactions: the producer
    crashing mid-transaction (its replacement, same transactional id, fences it and resumes
    from the committed offsets), the transaction coordinator's broker killed, a leader of
    the output killed. The committed output must hold every input exactly once."""
    import random

    from minikafka.clients.consumer import KafkaConsumer
    from minikafka.clients.producer import KafkaProducer
    from minikafka.errors import KafkaError, ProducerFencedError
    from minikafka.topic import OffsetAndMetadata, TopicPartition

    rng = random.Random(seed)
    c = Cluster(3, seed=seed, config=CONFIG, dir=tmp_path / "c")
    try:
        c.create_topic("in", partitions=2, replication_factor=3)
        c.create_topic("out", partitions=2, replication_factor=3)
        inputs = [f"v{i}".encode() for i in range(30)]
        seed_producer = KafkaProducer(bootstrap_servers=c)
        for i, v in enumerate(inputs):
            seed_producer.send("in", v, partition=i % 2)
        seed_producer.close()

        def instance():
            consumer = KafkaConsumer("in", bootstrap_servers=c, group_id="rpw", enable_auto_commit=False,
                                     auto_offset_reset="earliest", isolation_level="read_committed",
                                     max_poll_records=4, session_timeout_ms=6_000, heartbeat_interval_ms=2_000,
                                     max_poll_interval_ms=10_000)
            producer = KafkaProducer(bootstrap_servers=c, transactional_id="rpw")
            producer.init_transactions()
            return consumer, producer

        consumer, producer = instance()
        history = TransactionHistory()
        faults = {"producer crash": 0, "coordinator killed": 0, "leader killed": 0}
        dead: list[int] = []
        for _ in range(200):
            batches = consumer.poll(timeout_ms=500)
            if not batches:
                if all(consumer.committed(TopicPartition("in", p)) == 15 for p in range(2)):
                    break
                continue
            producer.begin_transaction()
            txn = history.begin()
            for records in batches.values():
                for r in records:
                    value = r.value + f"@{txn.number}".encode()  # unique per attempt
                    producer.send("out", value, partition=r.partition)
                    history.sent(txn, value, r.value)
            producer.send_offsets_to_transaction(
                {tp: OffsetAndMetadata(records[-1].offset + 1, "", -1) for tp, records in batches.items()}, "rpw")
            fault = rng.choice(["none", "none", "producer crash", "coordinator killed", "leader killed"])
            if fault == "producer crash":  # mid-transaction: sent, offsets sent, never committed
                producer.flush()
                c.world.crash(consumer.node_id)
                zombie = producer
                consumer, producer = instance()  # fences the zombie, aborts its transaction
                with pytest.raises(ProducerFencedError):
                    zombie.commit_transaction()
                history.end(txn, "aborted")
                faults[fault] += 1
                continue
            if fault != "none" and not dead:
                if fault == "coordinator killed":
                    victim = find_coordinator(c, "rpw")
                else:
                    victim = c.partition_state("out", rng.randrange(2)).leader
                c.kill(victim)
                dead.append(victim)
                faults[fault] += 1
            try:
                producer.commit_transaction()
                history.end(txn, "committed")
            except KafkaError:
                # (e.g. a timeout while no coordinator could be reached): start over, as an
                # application would, with a new instance; its init aborts what was open
                history.end(txn, "unknown")
                c.world.crash(consumer.node_id)
                consumer, producer = instance()
            if dead and rng.random() < 0.5:
                c.restart(dead.pop())
        for b in dead:
            c.restart(b)
        assert all(consumer.committed(TopicPartition("in", p)) == 15 for p in range(2)), faults
        wait_complete(c, "rpw", TransactionState.COMPLETE_COMMIT)
        out = KafkaConsumer(bootstrap_servers=c, isolation_level="read_committed", auto_offset_reset="earliest",
                            consumer_timeout_ms=3_000)
        out.assign([TopicPartition("out", p) for p in range(2)])
        report = analyse_transactions(history, [r.value for r in out], inputs=inputs)
        assert report.ok, (faults, report.table())
        assert report.counts["committed"] > 0
    finally:
        c.close()


def test_the_transaction_checker_finds_each_anomaly_it_names():
    history = TransactionHistory()
    committed, aborted, partial, unknown = (history.begin() for _ in range(4))
    for txn, values in ((committed, [b"c1", b"c2"]), (aborted, [b"a1"]), (partial, [b"p1", b"p2"]),
                        (unknown, [b"u1"])):
        for v in values:
            history.sent(txn, v, v[:1])
    history.end(committed, "committed")
    history.end(aborted, "aborted")
    history.end(partial, "committed")
    history.end(unknown, "unknown")
    clean = analyse_transactions(history, [b"c1", b"c2", b"p1", b"p2"])
    assert clean.ok and clean.counts == {"committed": 2, "aborted": 1, "unknown": 1, "open": 0}
    bad = analyse_transactions(history, [b"c1", b"a1", b"p1", b"u1", b"u1"], inputs=[b"c", b"a", b"p", b"u", b"x"])
    assert bad.anomalies == {"lost-committed": 2, "duplicate": 1, "aborted-visible": 1, "not-atomic": 2,
                             "input-not-once": 2}, bad.table()  # u read twice, x never
    assert ("lost-committed", (0, b"c2")) in [(k, e) for k, es in bad.examples.items() for e in es]


# --- the log cleaner and transactions ------------------------------------------------------------------


def plain_write(c, topic, key, value):
    records = bytes(RecordBatch.build([(key, value)]))
    leader = c.partition_state(topic, 0).leader
    r = request(c, leader, lambda k: ProduceRequest(k, -1, 5_000, (ProducePartition(topic, 0, records),)))
    assert r.partitions[0].error == NO_ERROR


def read_kv(c, level="read_committed"):
    """Every value of kv-0 our consumer returns, from the beginning to the end offset."""
    from minikafka.clients.consumer import KafkaConsumer
    from minikafka.topic import TopicPartition

    tp = TopicPartition("kv", 0)
    consumer = KafkaConsumer(bootstrap_servers=c, isolation_level=level, auto_offset_reset="earliest")
    consumer.assign([tp])
    end = consumer.end_offsets([tp])[tp]
    values = []
    while consumer.position(tp) < end:
        values += [r.value for records in consumer.poll(timeout_ms=200).values() for r in records]
    consumer.close()
    return values


def stored(c, topic):
    """Per live replica: (data values, marker offsets) in its log, as the cleaner left it."""
    out = {}
    for b in c.broker_ids:
        replica = c.replica(b, topic, 0)
        if replica is None:
            continue
        batches = [batch for s in replica.log.segments for _, batch in s.iter_batches()]
        out[b] = ([r.value for batch in batches if not batch.is_control_batch for r in batch.records()],
                  [batch.base_offset for batch in batches if batch.is_control_batch])
    return out


def test_the_log_cleaner_removes_aborted_transactions_then_their_markers_and_reads_stay_right(tmp_path):
    c = Cluster(3, seed=5, config={**CONFIG, "log.cleaner.backoff.ms": 200}, dir=tmp_path / "c")
    try:
        c.create_topic("kv", partitions=1, replication_factor=3,
                       config={"cleanup.policy": "compact", "segment.bytes": 100, "delete.retention.ms": 5_000})
        txn = Txn(c, "tx")
        txn.init()

        def transaction(records, commit):
            assert txn.add_partitions(("kv", 0)) == {("kv", 0): NO_ERROR}
            assert txn.send(records, topic="kv").error == NO_ERROR
            assert txn.end(committed=commit) == NO_ERROR
            wait_complete(c, "tx", TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT)

        transaction([(b"a", b"a1")], commit=True)  # offsets 0, marker 1
        transaction([(b"a", b"a2"), (b"b", b"b0")], commit=False)  # 2-3, marker 4
        transaction([(b"b", b"b1")], commit=True)  # 5, marker 6
        for i in range(3):  # later writes, so the transactions' segments roll and get cleaned
            plain_write(c, "kv", b"z", f"z{i}".encode())
        # Every replica cleans its own log: the aborted records go, a2 superseding nothing.
        assert c.run_until(lambda: all(b"a2" not in values and b"b0" not in values
                                       for values, _ in stored(c, "kv").values()), 20_000), stored(c, "kv")
        for values, markers in stored(c, "kv").values():
            assert values[:2] == [b"a1", b"b1"]
            assert markers == [1, 4, 6]  # each marker's transaction had a batch when the pass began
        assert read_kv(c)[:2] == [b"a1", b"b1"] and read_kv(c, "read_uncommitted")[:2] == [b"a1", b"b1"]
        assert fetch(c, offset=2, topic="kv")[0].aborted_transactions == ((txn.pid, 2),)  # its marker still ends it
        # delete.retention.ms later (and a dirty range to clean), the abort marker, whose
        # transaction has no batch left, goes; the commit markers stay with a1 and b1.
        c.advance(5_000)
        for i in range(3, 6):
            plain_write(c, "kv", b"z", f"z{i}".encode())
        assert c.run_until(lambda: all(markers == [1, 6] for _, markers in stored(c, "kv").values()), 20_000), \
            stored(c, "kv")
        assert fetch(c, offset=2, topic="kv")[0].aborted_transactions == ()  # forgotten with its marker
        assert read_kv(c)[:2] == [b"a1", b"b1"] and read_kv(c, "read_uncommitted")[:2] == [b"a1", b"b1"]
        # The producer goes on: its sequences and epoch are intact.
        transaction([(b"a", b"a3")], commit=True)
        assert read_kv(c)[-1] == b"a3"
    finally:
        c.close()


def test_a_compacted_transaction_state_log_still_recovers_the_coordinator(tmp_path):
    config = {**CONFIG, "log.cleaner.backoff.ms": 200, "transaction.state.log.segment.bytes": 300}
    c = Cluster(3, seed=5, config=config, dir=tmp_path / "c")
    try:
        c.create_topic("t", partitions=2, replication_factor=3)
        txn = Txn(c, "tx")
        txn.init()
        for i in range(8):
            txn.add_partitions(("t", i % 2))
            assert txn.send([f"v{i}".encode()], partition=i % 2).error == NO_ERROR
            assert txn.end(committed=i % 3 != 2) == NO_ERROR
            wait_complete(c, "tx", TransactionState.COMPLETE_COMMIT if i % 3 != 2 else TransactionState.COMPLETE_ABORT)
        old = txn.coordinator()
        state_partition = c.broker(old).transaction_coordinator.state.partition_for("tx")

        def state_records(broker):
            log = c.replica(broker, TRANSACTION_STATE_TOPIC, state_partition).log
            return sum(len(b.records()) for s in log.segments for _, b in s.iter_batches()), log.log_end_offset

        # Compaction keeps only the latest records of "tx" (and whatever is in the active segment).
        assert c.run_until(lambda: state_records(old)[0] < state_records(old)[1] // 2, 20_000), state_records(old)
        c.kill(old)
        assert c.run_until(lambda: find_coordinator(c, "tx") != old, 30_000)
        fresh = Txn(c, "tx")
        fresh.init()  # answered from the compacted log: same producer id, the next epoch
        assert (fresh.pid, fresh.epoch) == (txn.pid, txn.epoch + 1)
        fresh.add_partitions(("t", 0))
        assert fresh.send([b"after"]).error == NO_ERROR
        assert fresh.end() == NO_ERROR
        wait_complete(c, "tx", TransactionState.COMPLETE_COMMIT)
        assert fetch(c)[1] == [b"v0", b"v4", b"v6", b"after"]
    finally:
        c.close()
