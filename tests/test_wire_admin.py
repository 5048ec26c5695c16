"""Real Kafka clients changing a running ``minikafka.launch(brokers=3)`` cluster as users do:
producing to a topic that was never created (auto-creation, as in Kafka).

kafka-python 3.0.12 and confluent-kafka (librdkafka) each, against one shared cluster;
every test uses its own topics. Waits poll for a state; nothing asserts how long anything
took. The simulated world's side of the same operations is ``test_topic_admin.py``.
"""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("kafka")  # kafka-python==3.0.12 (the dev and course extras pin it)

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer  # noqa: E402

import minikafka  # noqa: E402

from wire_helpers import poll_until, wait_until  # noqa: E402


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster():
    with minikafka.launch(brokers=3, config={"group.initial.rebalance.delay.ms": 0,
                                             "offsets.topic.num.partitions": 3}) as c:
        yield c


@pytest.fixture(scope="module")
def admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    yield client
    client.close()


# --- auto-creation ---------------------------------------------------------------------------------------------


def test_kafka_python_producer_sends_to_a_topic_never_created_as_the_lecture_notes_do(cluster, admin):
    topic = unique("my-topic")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)  # the lecture notes' snippet
    try:
        metadata = producer.send(topic, b"raw_bytes").get(timeout=30)
    finally:
        producer.close()
    assert (metadata.topic, metadata.partition, metadata.offset) == (topic, 0, 0)
    # num.partitions=1 and default.replication.factor=1: Kafka's defaults
    described = admin.describe_topics([topic])[0]
    assert described["error_code"] == 0 and len(described["partitions"]) == 1
    assert len(described["partitions"][0]["replica_nodes"]) == 1
    consumer = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest")
    try:
        assert [r.value for r in poll_until(consumer, 1)] == [b"raw_bytes"]
    finally:
        consumer.close()


def test_confluent_kafka_producer_sends_to_a_topic_never_created(cluster, admin):
    ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka (librdkafka) comes with the dev extra")
    topic = unique("rdkafka-auto")
    delivered = []
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap_servers})
    p.produce(topic, value=b"raw_bytes", on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
    assert p.flush(30) == 0
    assert delivered == [(None, 0)]
    assert topic in admin.list_topics()


def test_an_illegal_name_is_refused_not_created(cluster, admin):
    ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka (librdkafka) comes with the dev extra")
    errors = []
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap_servers, "message.timeout.ms": 5000})
    try:
        p.produce("bad/name", value=b"x", on_delivery=lambda err, msg: errors.append(err))
    except ck.KafkaException as e:  # refused before sending, by some librdkafka versions
        errors.append(e.args[0])
    p.flush(10)
    assert len(errors) == 1 and errors[0] is not None
    assert "bad/name" not in admin.list_topics()
