"""Transactions (KIP-98) against a real multi-process cluster, with unmodified clients.

kafka-python 3.0.12 and confluent-kafka (librdkafka) run begin/commit/abort through their
own transaction managers; read_committed consumers must see exactly the committed records,
read_uncommitted ones everything that reached the log. A test waits for the state Kafka
defines (the last stable offset catching up with the high watermark: every marker written),
never for a guessed time.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, ProducerFencedError
from kafka.structs import OffsetAndMetadata

from minikafka.broker.group_coordinator import partition_for
from minikafka.wire.process import launch
from tests.wire_helpers import leader_of, ready_to_join, tolerant, wait_until

TXN_PARTITIONS = 3
CONFIG = {
    "transaction.state.log.num.partitions": TXN_PARTITIONS,
    "offsets.topic.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
    # a killed broker is declared dead within 3 s (Kafka's 9 s would only make the test slower)
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    # and leaves the ISR within 3 s: writes to __transaction_state (acks=all) wait for that
    "replica.lag.time.max.ms": 3000,
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster():
    with launch(brokers=3, config=CONFIG) as c:
        yield c


@pytest.fixture(scope="module")
def admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    yield client
    client.close()


@pytest.fixture
def topic(cluster, admin):
    name = unique("txn")
    admin.create_topics([NewTopic(name, 2, 3)])
    wait_until(lambda: tolerant(lambda: all(leader_of(admin, name, p) >= 0 for p in range(2))), 20, "leaders")
    return name


def end_offsets(bootstrap: str, topic: str, isolation_level: str) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation_level, group_id=None)
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        return {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()


def stable(bootstrap: str, topic: str) -> dict[int, int]:
    """Wait until no transaction is open on ``topic`` (last stable offset = high watermark
    everywhere: every marker written); the end offsets then."""
    def settled():
        lso = tolerant(lambda: end_offsets(bootstrap, topic, "read_committed"))
        hw = tolerant(lambda: end_offsets(bootstrap, topic, "read_uncommitted"))
        return lso if lso and lso == hw else None

    return wait_until(settled, 30, f"every transaction on {topic} decided and marked")


def read(bootstrap: str, topic: str, isolation_level: str) -> list[bytes]:
    """Every value a consumer of this isolation level gets, log start to the stable end."""
    ends = stable(bootstrap, topic)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation_level, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        tps = [TopicPartition(topic, p) for p in sorted(ends)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        values = []
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp.partition] for tp in tps):
            assert time.monotonic() < deadline, f"read {values} of {topic}, ends {ends}"
            for records in consumer.poll(timeout_ms=200).values():
                values.extend(r.value for r in records)
        return sorted(values)
    finally:
        consumer.close()


# --- kafka-python ---------------------------------------------------------------------------------------------


def test_kafka_python_commits_and_aborts_and_read_committed_sees_only_the_commits(cluster, topic):
    bs = cluster.bootstrap_servers
    producer = KafkaProducer(bootstrap_servers=bs, transactional_id=unique("kp"))
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(4):
            producer.send(topic, f"c{i}".encode(), partition=i % 2)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic, f"a{i}".encode(), partition=i % 2)
        producer.flush()  # in the log, then aborted: read_committed must drop them
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"c4", partition=1)
        producer.commit_transaction()
    finally:
        producer.close()
    assert read(bs, topic, "read_committed") == [b"c0", b"c1", b"c2", b"c3", b"c4"]
    assert read(bs, topic, "read_uncommitted") == [b"a0", b"a1", b"a2", b"c0", b"c1", b"c2", b"c3", b"c4"]


def test_kafka_python_a_second_producer_with_the_same_id_fences_the_first(cluster, topic):
    bs = cluster.bootstrap_servers
    txn_id = unique("fence")
    zombie = KafkaProducer(bootstrap_servers=bs, transactional_id=txn_id)
    fresh = KafkaProducer(bootstrap_servers=bs, transactional_id=txn_id)
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send(topic, b"zombie", partition=0)
        zombie.flush()
        fresh.init_transactions()  # aborts the zombie's open transaction and bumps the epoch
        with pytest.raises((ProducerFencedError, KafkaError)):
            zombie.commit_transaction()
        fresh.begin_transaction()
        fresh.send(topic, b"fresh", partition=0)
        fresh.commit_transaction()
    finally:
        zombie.close(timeout=5)
        fresh.close()
    assert read(bs, topic, "read_committed") == [b"fresh"]
    assert read(bs, topic, "read_uncommitted") == [b"fresh", b"zombie"]


def test_kafka_python_read_process_write_commits_the_input_offsets_with_the_output(cluster, admin, topic):
    bs = cluster.bootstrap_servers
    source = unique("src")
    admin.create_topics([NewTopic(source, 1, 3)])
    seed = KafkaProducer(bootstrap_servers=bs)
    for i in range(6):
        seed.send(source, f"in{i}".encode(), partition=0)
    seed.flush()
    seed.close()
    group = unique("rpw")
    consumer = ready_to_join(KafkaConsumer(source, bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                                           auto_offset_reset="earliest", isolation_level="read_committed"), source, 1)
    producer = KafkaProducer(bootstrap_servers=bs, transactional_id=unique("rpw"))
    try:
        producer.init_transactions()
        records = []
        deadline = time.monotonic() + 30
        while len(records) < 6:
            assert time.monotonic() < deadline, f"consumed {len(records)} of 6"
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(batch)
        # first half committed with its offsets, second half aborted (its offsets too)
        for chunk, commit in ((records[:3], True), (records[3:], False)):
            producer.begin_transaction()
            for r in chunk:
                producer.send(topic, r.value.upper(), partition=0)
            producer.send_offsets_to_transaction(
                {TopicPartition(source, 0): OffsetAndMetadata(chunk[-1].offset + 1, "", -1)}, group)
            producer.flush()
            producer.commit_transaction() if commit else producer.abort_transaction()
    finally:
        producer.close()
        consumer.close()
    assert read(bs, topic, "read_committed") == [b"IN0", b"IN1", b"IN2"]
    stable(bs, source)
    reader = KafkaConsumer(bootstrap_servers=bs, group_id=group, enable_auto_commit=False)
    try:
        # the first chunk's offsets, committed with it; the aborted chunk's (6) were dropped
        wait_until(lambda: reader.committed(TopicPartition(source, 0)) == 3, 20, "the group's offset at 3")
    finally:
        reader.close()


# --- confluent-kafka (librdkafka) --------------------------------------------------------------------------------


def test_confluent_kafka_commits_and_aborts_and_read_committed_sees_only_the_commits(cluster, topic):
    ck = pytest.importorskip("confluent_kafka")
    bs = cluster.bootstrap_servers
    producer = ck.Producer({"bootstrap.servers": bs, "transactional.id": unique("ck")})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, f"c{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(2):
        producer.produce(topic, f"a{i}".encode(), partition=i % 2)
    producer.flush(30)
    producer.abort_transaction(30)
    assert read(bs, topic, "read_committed") == [b"c0", b"c1", b"c2", b"c3"]
    assert read(bs, topic, "read_uncommitted") == [b"a0", b"a1", b"c0", b"c1", b"c2", b"c3"]
    # librdkafka's own read_committed consumer agrees
    consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": unique("g"), "isolation.level": "read_committed",
                            "enable.auto.commit": False})
    ends = stable(bs, topic)
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in sorted(ends)])
    values, deadline = [], time.monotonic() + 30
    try:
        while any(consumer.position([ck.TopicPartition(topic, p)])[0].offset < end for p, end in ends.items()):
            assert time.monotonic() < deadline, f"librdkafka read {values}, ends {ends}"
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert sorted(values) == [b"c0", b"c1", b"c2", b"c3"]


def test_confluent_kafka_a_second_producer_with_the_same_id_fences_the_first(cluster, topic):
    ck = pytest.importorskip("confluent_kafka")
    bs = cluster.bootstrap_servers
    txn_id = unique("ckfence")
    zombie = ck.Producer({"bootstrap.servers": bs, "transactional.id": txn_id})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    zombie.flush(30)
    fresh = ck.Producer({"bootstrap.servers": bs, "transactional.id": txn_id})
    fresh.init_transactions(30)
    with pytest.raises(ck.KafkaException) as fenced:
        zombie.commit_transaction(30)
    assert fenced.value.args[0].fatal() or fenced.value.args[0].code() in (
        ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED, ck.KafkaError.INVALID_PRODUCER_EPOCH)
    fresh.begin_transaction()
    fresh.produce(topic, b"fresh", partition=0)
    fresh.commit_transaction(30)
    assert read(bs, topic, "read_committed") == [b"fresh"]


def test_confluent_kafka_commit_survives_a_sigkill_of_the_transaction_coordinator(cluster, admin, topic):
    # (librdkafka here: kafka-python 3.0.12 loses a transactional request whose coordinator
    # connection fails with an exception in Sender._maybe_send_pending_request, so its
    # commit_transaction() never returns after a coordinator SIGKILL; see the report)
    ck = pytest.importorskip("confluent_kafka")
    bs = cluster.bootstrap_servers
    txn_id = unique("failover")
    producer = ck.Producer({"bootstrap.servers": bs, "transactional.id": txn_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, f"v{i}".encode(), partition=i % 2)
    producer.flush(30)
    # the coordinator: the leader of the id's partition of __transaction_state
    coordinator = leader_of(admin, "__transaction_state", partition_for(txn_id, TXN_PARTITIONS))
    cluster.kill(coordinator)  # SIGKILL mid-transaction: its state lives in __transaction_state
    try:
        producer.produce(topic, b"v4", partition=0)
        producer.commit_transaction(60)  # the new coordinator knows the transaction and commits it
    finally:
        cluster.restart(coordinator)
    assert read(bs, topic, "read_committed") == [b"v0", b"v1", b"v2", b"v3", b"v4"]


def test_confluent_kafka_read_process_write_commits_the_input_offsets_with_the_output(cluster, admin, topic):
    ck = pytest.importorskip("confluent_kafka")
    bs = cluster.bootstrap_servers
    source = unique("cksrc")
    admin.create_topics([NewTopic(source, 1, 3)])
    seed = KafkaProducer(bootstrap_servers=bs)
    for i in range(6):
        seed.send(source, f"in{i}".encode(), partition=0)
    seed.flush()
    seed.close()
    group = unique("ckrpw")
    consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                            "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    producer = ck.Producer({"bootstrap.servers": bs, "transactional.id": unique("ckrpw")})
    try:
        producer.init_transactions(30)
        consumer.assign([ck.TopicPartition(source, 0, 0)])
        records, deadline = [], time.monotonic() + 30
        while len(records) < 6:
            assert time.monotonic() < deadline, f"consumed {len(records)} of 6"
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                records.append(message)
        for chunk, commit in ((records[:4], True), (records[4:], False)):
            producer.begin_transaction()
            for r in chunk:
                producer.produce(topic, r.value().upper(), partition=0)
            producer.send_offsets_to_transaction([ck.TopicPartition(source, 0, chunk[-1].offset() + 1)],
                                                 consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    finally:
        consumer.close()
    assert read(bs, topic, "read_committed") == [b"IN0", b"IN1", b"IN2", b"IN3"]
    stable(bs, source)
    reader = KafkaConsumer(bootstrap_servers=bs, group_id=group, enable_auto_commit=False)
    try:
        wait_until(lambda: reader.committed(TopicPartition(source, 0)) == 4, 20, "the group's offset at 4")
    finally:
        reader.close()
