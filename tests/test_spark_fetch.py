"""A Spark task's Fetch requests on connections of its own (``data_consumer.FetchConnection``),
against a real multi-process cluster and against a fake broker that answers badly. No Spark
session: ``read_range`` is what one task of the source runs."""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid

import pytest

pytest.importorskip("pyspark")

from kafka import KafkaProducer  # noqa: E402
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic  # noqa: E402

from minikafka.spark import data_consumer  # noqa: E402
from minikafka.spark.options import KafkaSourceOptions  # noqa: E402
from minikafka.spark.offset_client import OffsetClient  # noqa: E402
from minikafka.spark.offset_reader import KafkaOffsetReader  # noqa: E402
from minikafka.spark.reader import _POOL, KafkaBatchReader, OffsetRange, close_pooled_consumers, read_range  # noqa: E402
from minikafka.wire.process import launch  # noqa: E402
from wire_helpers import wait_until  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def cluster():
    # The cleaner looks at the compacted logs every 100 ms (Kafka's default: 15 s).
    with launch(brokers=3, config={"log.cleaner.backoff.ms": 100}) as c:
        yield c
        # Before the cluster goes: a pooled consumer left open would keep asking its old
        # addresses for metadata, and a later test's cluster on the same ports would answer it.
        close_pooled_consumers()


@pytest.fixture(scope="module")
def big_topic(cluster):
    """One partition of 10,000 records of 1 KiB: more than one 8 MiB fetch."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    name = f"fetch-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 1, 3)])
    wait_until(lambda: admin.describe_topics([name])[0]["partitions"][0]["leader_id"] >= 0, 20, f"a leader for {name}")
    admin.close()
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=5)
    futures = [producer.send(name, key=b"k%d" % i, value=(b"%06d" % i) * 170) for i in range(10_000)]
    producer.flush()
    producer.close()
    assert sorted(f.get(timeout=30).offset for f in futures) == list(range(10_000))
    return name


def options(cluster, topic: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.parse({"kafka.bootstrap.servers": cluster.bootstrap_servers, "subscribe": topic},
                                    batch=True)


def offsets_and_values(batches) -> list[tuple[int, bytes]]:
    return [(o, v) for b in batches for o, v in zip(b.column("offset").to_pylist(), b.column("value").to_pylist())]


def test_a_task_fetches_on_its_own_connections_and_reads_what_kafka_pythons_would(cluster, big_topic, monkeypatch):
    opts = options(cluster, big_topic)
    own = offsets_and_values(read_range(opts, OffsetRange(big_topic, 0, 0, 10_000)))
    consumers = [c for free in _POOL.values() for c in free]
    assert any(data_consumer._CONNECTIONS.get(c) for c in consumers), "the read did not use a connection of its own"
    assert own == [(i, (b"%06d" % i) * 170) for i in range(10_000)]

    monkeypatch.setattr(data_consumer, "own_connections", lambda consumer: False)
    close_pooled_consumers()
    assert offsets_and_values(read_range(opts, OffsetRange(big_topic, 0, 0, 10_000))) == own
    consumers = [c for free in _POOL.values() for c in free]
    assert consumers and not any(data_consumer._CONNECTIONS.get(c) for c in consumers)


def test_a_task_that_stops_early_leaves_its_connection_readable_for_the_next(cluster, big_topic):
    """Spark stops reading a task early (a LIMIT) while the next Fetch is on its way: the pooled
    consumer's connection still holds that answer, and the next task must skip it."""
    opts = options(cluster, big_topic)
    close_pooled_consumers()
    rows = read_range(opts, OffsetRange(big_topic, 0, 0, 10_000))
    first = next(rows)
    rows.close()
    (consumer,) = [c for free in _POOL.values() for c in free]
    (conn,) = data_consumer._CONNECTIONS[consumer].values()
    assert conn.in_flight, "no Fetch was on its way when the task stopped: the test tests nothing"
    again = offsets_and_values(read_range(opts, OffsetRange(big_topic, 0, 5_000, 10_000)))
    assert again == [(i, (b"%06d" % i) * 170) for i in range(5_000, 10_000)]
    assert list(data_consumer._CONNECTIONS[consumer].values()) == [conn] and conn.sock.fileno() >= 0, \
        "the stale answer cost the connection"
    assert first.column("offset")[0].as_py() == 0


def test_holes_between_offsets_fail_a_read_unless_the_topic_is_compacted(cluster):
    """Only the cleaner leaves offsets missing between records. A topic compacted and then set
    to cleanup.policy=delete keeps its holes: a read that is not told the topic is compacted
    must stop and name them (as it would a broker that lost records), and failOnDataLoss=false
    reads what is there."""
    name = f"positions-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    admin.create_topics([NewTopic(name, 1, 3, topic_configs={"cleanup.policy": "compact", "segment.bytes": "1024"})])
    wait_until(lambda: admin.describe_topics([name])[0]["partitions"][0]["leader_id"] >= 0, 20, f"a leader for {name}")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    for i in range(300):  # one batch each: many closed segments, 10 keys
        producer.send(name, key=b"truck-%d" % (i % 10), value=b"position-%03d" % i).get(timeout=30)
    producer.close()
    opts = options(cluster, name)
    reader = KafkaOffsetReader(opts)
    assert reader.compacted([name]) == {name}
    reader.plain = False  # the kafka-python path asks the same question
    assert reader.compacted([name]) == {name}
    reader.close()
    (task,) = KafkaBatchReader(opts).partitions()
    (planned,) = task.ranges
    assert planned.holes_allowed and (planned.from_offset, planned.until_offset) == (0, 300)

    def survivors() -> list[tuple[int, bytes]]:
        return offsets_and_values(read_range(opts, OffsetRange(name, 0, 0, 300, holes_allowed=True)))

    wait_until(lambda: len(survivors()) < 300, 30, "the cleaner to compact the closed segments")
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, configs={"cleanup.policy": "delete"})])
    admin.close()

    def policy_everywhere() -> bool:
        """Every broker's DescribeConfigs says delete: each has applied the change to its
        logs too (one metadata record does both), so no cleaner pass touches the log again."""
        for b in cluster.broker_ids:
            client = OffsetClient(f"{cluster.host}:{cluster.ports[b]}")  # asks its bootstrap broker first
            try:
                if client.topic_config([name], "cleanup.policy", time.monotonic() + 10).get(name) != "delete":
                    return False
            finally:
                client.close()
        return True

    wait_until(policy_everywhere, 20, "cleanup.policy=delete on every broker")
    kept = survivors()  # the log as the cleaner left it: it no longer changes
    offsets = [o for o, _ in kept]
    assert offsets == sorted(offsets) and offsets[-1] == 299 and len(offsets) < 300
    hole = next(o for o in range(300) if o not in offsets)
    reader = KafkaOffsetReader(opts)
    assert reader.compacted([name]) == set()
    reader.close()
    (task,) = KafkaBatchReader(opts).partitions()
    (planned,) = task.ranges
    assert not planned.holes_allowed
    with pytest.raises(data_consumer.BrokerAnsweredWrongly, match=rf"Offsets {hole} to \d+ of {name}-0 are missing "
                       r"from what the broker 127\.0\.0\.1:\d+ \(broker \d\) .*failOnDataLoss=false"):
        list(read_range(opts, planned))
    lenient = KafkaSourceOptions.parse({"kafka.bootstrap.servers": cluster.bootstrap_servers, "subscribe": name,
                                        "failOnDataLoss": "false"}, batch=True)
    assert offsets_and_values(read_range(lenient, planned)) == kept


def test_first_hole_reads_batch_headers_only():
    def header(base: int, last_delta: int, count: int) -> bytes:
        body = b"\0" * (61 - 12)
        raw = struct.pack(">qi", base, len(body)) + body
        raw = raw[:23] + struct.pack(">i", last_delta) + raw[27:57] + struct.pack(">i", count)
        return raw

    dense = header(0, 4, 5) + header(5, 2, 3)
    assert data_consumer.first_hole(dense, 0) is None
    assert data_consumer.first_hole(dense, 3) is None  # the fetch starts inside the first batch
    assert data_consumer.first_hole(header(0, 4, 5) + header(7, 0, 1), 2) == (5, 6)  # between batches
    assert data_consumer.first_hole(header(0, 4, 3), 0) == (0, 4)  # inside one: 3 records over 5 offsets
    assert data_consumer.first_hole(header(10, 0, 1), 8) == (8, 9)  # before the first
    assert data_consumer.first_hole(dense[:70], 0) is None  # a partial last batch is not read
    assert data_consumer.next_fetch_offset(dense, 0) == 8 and data_consumer.batch_across(dense, 6) == (5, 7)


class FakeBroker:
    """Accepts one connection and answers every request with ``reply(correlation id)``, then
    hangs up if ``hang_up``."""

    def __init__(self, reply, hang_up: bool) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.reply, self.hang_up = reply, hang_up
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        with conn:
            while True:
                head = conn.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                frame = conn.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
                (correlation,) = struct.unpack_from(">i", frame, 4)
                conn.sendall(self.reply(correlation))
                if self.hang_up:
                    return


@pytest.mark.parametrize("reply, message", [
    (lambda corr: struct.pack(">ii", 4, corr + 1), "answered correlation id"),
    (lambda corr: struct.pack(">i", 2_000_000_000), "a response frame of 2000000000 bytes"),
    (lambda corr: struct.pack(">iii", 8, corr, 7), "an unreadable FetchResponse"),
    (lambda corr: struct.pack(">i", 100) + b"\0" * 10, "closed the connection"),
])
def test_a_bad_answer_closes_the_connection_with_the_fault_named(reply, message):
    from kafka.protocol.consumer import FetchRequest, FetchResponse

    broker = FakeBroker(reply, hang_up=message == "closed the connection")
    conn = data_consumer.FetchConnection("127.0.0.1", broker.port, timeout_s=5, client_id="t", max_frame=1 << 20)
    request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                           session_id=0, session_epoch=-1, topics=[], forgotten_topics_data=[], rack_id="")
    request.API_VERSION = 11
    corr = conn.send(request)
    with pytest.raises(OSError, match=message):
        conn.receive(corr, FetchResponse, 11)
    assert conn.sock.fileno() < 0 and not conn.in_flight


def test_a_task_whose_records_were_deleted_fails_naming_them_or_skips_them_with_a_warning(cluster, caplog):
    """Retention (here DeleteRecords) deleted offsets 10..39 after the batch was planned: with
    failOnDataLoss=true (the default) the task fails naming them; with false it reads on from
    the log start and logs a warning naming them, as Spark's Kafka source does."""
    from minikafka.spark.offset_reader import KafkaSourceError

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    name = f"deleted-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 1, 3)])
    wait_until(lambda: admin.describe_topics([name])[0]["partitions"][0]["leader_id"] >= 0, 20, f"a leader for {name}")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    futures = [producer.send(name, value=b"%03d" % i) for i in range(100)]
    producer.flush()
    producer.close()
    assert sorted(f.get(timeout=30).offset for f in futures) == list(range(100))
    from kafka import TopicPartition

    admin.delete_records({TopicPartition(name, 0): 40})
    admin.close()

    with pytest.raises(KafkaSourceError, match=rf"Offsets 10 to 39 of {name}-0 were deleted"):
        list(read_range(options(cluster, name), OffsetRange(name, 0, 10, 100)))
    lenient = KafkaSourceOptions.parse({"kafka.bootstrap.servers": cluster.bootstrap_servers, "subscribe": name,
                                        "failOnDataLoss": "false"}, batch=True)
    with caplog.at_level("WARNING", logger="minikafka.spark.source"):
        read = offsets_and_values(read_range(lenient, OffsetRange(name, 0, 10, 100)))
    assert read == [(i, b"%03d" % i) for i in range(40, 100)]
    assert [r.getMessage() for r in caplog.records if r.name == "minikafka.spark.source"] == [
        f"Data loss: offsets 10 to 39 of {name}-0 were deleted before the query read them. "
        "Skipped, because failOnDataLoss=false."]
