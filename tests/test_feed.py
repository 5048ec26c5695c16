"""minikafka.feed: the truck fleet into Kafka, in bulk and live.

Against a simulated ``Cluster`` and against a real 3-broker cluster on 127.0.0.1
(``launch``, shared by the TCP tests, each with its own topic): every report arrives, exactly
as ``truck_positions`` generated it, in order per truck, with its event time as the record
timestamp, in the partition murmur2 of its key picks; a topic that exists is left alone;
``rate`` paces; the live feed's acknowledgements match the partitions' end offsets and its
event times follow its clock; failed sends are counted, never dropped; bad arguments fail
at once, naming the argument. Waits poll with generous deadlines; the only upper bounds on
time are loose ones (seconds where milliseconds are expected).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict

import pytest

from minikafka import Cluster, datasets
from minikafka.datasets import INTERVAL_MS, START_MS, decode_report, encode_report, truck_positions
from minikafka.feed import FeedError, FeedResult, TruckFeed, produce_trucks
from minikafka.partitioner import partition_for_key

pytest.importorskip("kafka")  # kafka-python==3.0.12 (the dev and course extras pin it)

import kafka.errors as Errors  # noqa: E402
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition  # noqa: E402
from kafka.partitioner.default import murmur2 as kafka_python_murmur2  # noqa: E402

from minikafka.wire.process import launch  # noqa: E402
from wire_helpers import wait_until  # noqa: E402


def unique(prefix: str = "trucks") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def by_truck(reports):
    tracks = defaultdict(list)
    for r in reports:
        tracks[r["truck_id"]].append(r)
    return dict(tracks)


def kafka_python_partition(key: bytes, partitions: int) -> int:
    """What kafka-python's DefaultPartitioner picks (its own murmur2, not ours)."""
    return (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions


@pytest.fixture(scope="module")
def cluster():
    with launch(brokers=3) as c:
        yield c


@pytest.fixture(scope="module")
def admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    yield client
    client.close()


def read_topic(bootstrap: str, topic: str, partitions: int) -> dict[int, list]:
    """Every record of the topic, log start to end offset, with a group-less consumer:
    {partition: [ConsumerRecord, ...]}."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out: dict[int, list] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"read {sum(map(len, out.values()))} records; ends {ends}"
            for tp, records in consumer.poll(timeout_ms=200).items():
                out[tp.partition].extend(records)
        return out
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()


def partition_count(admin, topic: str) -> int:
    (described,) = admin.describe_topics([topic])
    return len(described["partitions"])


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- produce_trucks into a simulated cluster ------------------------------------------------------------


def test_produce_trucks_into_a_simulated_cluster_stores_exactly_the_fleets_reports():
    trucks, count, seed = 7, 700, 3
    expected = list(truck_positions(trucks, seed=seed, count=count))
    with Cluster(brokers=3, seed=11) as c:
        result = produce_trucks(c, count=count, trucks=trucks, seed=seed, progress=False)

        assert isinstance(result, FeedResult)
        assert result.topic == "trucks_gps" and result.count == count
        assert (result.first_timestamp_ms, result.last_timestamp_ms) == (
            expected[0]["timestamp_ms"], expected[-1]["timestamp_ms"])
        assert sorted(result.per_partition) == list(range(10))
        assert sum(result.per_partition.values()) == count
        states = c.partitions_of("trucks_gps")  # created: 10 partitions, RF = min(3, brokers)
        assert len(states) == 10 and all(len(s.replicas) == 3 for s in states)

        stored: dict[int, list] = {}
        for s in states:
            logs = [[(r.key, r.value, r.timestamp) for r in c.replica(b, "trucks_gps", s.partition)
                     .log.read(0, 1 << 30).records()] for b in s.replicas]
            assert logs[0] == logs[1] == logs[2], f"replicas of partition {s.partition} differ"
            stored[s.partition] = logs[0]
            assert len(logs[0]) == result.per_partition[s.partition]

    partitions_of_truck = defaultdict(set)
    got = defaultdict(list)
    for partition, records in stored.items():
        for key, value, timestamp in records:
            report = decode_report(value)
            partitions_of_truck[key].add(partition)
            assert key == report["truck_id"].encode() and timestamp == report["timestamp_ms"]
            got[report["truck_id"]].append(report)
    # Each truck in exactly one partition, the one murmur2 of its key picks; in order there.
    assert {k: p for k, (p,) in partitions_of_truck.items()} == {
        k: partition_for_key(k, 10) for k in partitions_of_truck}
    assert got == by_truck(expected)


def test_produce_trucks_counts_failed_sends_and_says_so_never_drops_them():
    with Cluster(brokers=3, seed=1) as c:
        produce_trucks(c, count=10, topic="t", replication_factor=1, progress=False)
        c.kill(2)  # the leader, and only replica, of some partitions
        with pytest.raises(FeedError, match=r"of 300 records sent to topic 't' failed") as caught:
            produce_trucks(c, count=300, topic="t", progress=False,
                           producer_config={"delivery_timeout_ms": 3_000, "request_timeout_ms": 1_000})
        on_dead_broker = {p for p in range(10) if list(c.partition_state("t", p).replicas) == [2]}
    e = caught.value
    assert e.topic == "t" and e.failed > 0 and e.errors and e.__cause__ is e.errors[0]
    assert e.failed + e.result.count == 300  # every send acknowledged or counted as failed
    wanted = Counter(partition_for_key(r["truck_id"].encode(), 10) for r in truck_positions(count=300))
    assert e.result.per_partition == {p: 0 if p in on_dead_broker else wanted.get(p, 0) for p in range(10)}
    assert e.failed == sum(wanted[p] for p in on_dead_broker)


def test_a_simulated_topic_that_exists_is_used_as_it_is():
    with Cluster(brokers=3, seed=2) as c:
        c.create_topic("trucks_gps", partitions=4, replication_factor=2)
        with pytest.warns(UserWarning, match="already exists with 4 partitions") as warned:
            result = produce_trucks(c, count=40, progress=False)
        assert warned[0].filename == __file__  # the warning points at the caller's line
        assert sorted(result.per_partition) == [0, 1, 2, 3]
        assert [len(s.replicas) for s in c.partitions_of("trucks_gps")] == [2, 2, 2, 2]


def test_count_0_creates_the_topic_and_sends_nothing():
    with Cluster(brokers=2, seed=4) as c:
        result = produce_trucks(c, count=0, progress=False)
        assert result == FeedResult("trucks_gps", 0, None, None, dict.fromkeys(range(10), 0))
        assert [len(s.replicas) for s in c.partitions_of("trucks_gps")] == [2] * 10  # RF = min(3, 2 brokers)


def test_rate_paces_the_sends_and_the_progress_bar_counts_them(capsys):
    with Cluster(brokers=1, seed=3) as c:
        start = time.monotonic()
        result = produce_trucks(c, count=50, rate=500, progress=True)
        elapsed = time.monotonic() - start
    assert result.count == 50
    assert elapsed >= 49 / 500 * 0.95  # 49 gaps of 2 ms; never an upper bound
    assert "50/50" in capsys.readouterr().err


# --- produce_trucks over TCP -----------------------------------------------------------------------------


def test_produce_trucks_over_tcp_stores_exactly_the_fleets_reports_where_murmur2_says(cluster, admin):
    topic, trucks, count, seed = unique(), 12, 3_000, 5
    expected = list(truck_positions(trucks, seed=seed, count=count))
    result = produce_trucks(cluster.bootstrap_servers, count=count, trucks=trucks, seed=seed, topic=topic,
                            progress=False)
    assert (result.topic, result.count) == (topic, count)
    assert (result.first_timestamp_ms, result.last_timestamp_ms) == (
        expected[0]["timestamp_ms"], expected[-1]["timestamp_ms"])
    assert partition_count(admin, topic) == 10
    (described,) = admin.describe_topics([topic])
    assert all(len(p["replica_nodes"]) == 3 for p in described["partitions"])

    stored = read_topic(cluster.bootstrap_servers, topic, 10)
    assert {p: len(records) for p, records in stored.items()} == result.per_partition
    got = defaultdict(list)
    for partition, records in stored.items():
        assert [r.offset for r in records] == list(range(len(records)))
        for r in records:
            report = decode_report(r.value)
            assert r.key == report["truck_id"].encode()
            assert (r.timestamp, r.timestamp_type) == (report["timestamp_ms"], 0)  # CreateTime = event time
            assert partition == kafka_python_partition(r.key, 10)
            assert r.value == encode_report(report)[1]
            got[report["truck_id"]].append(report)
    assert got == by_truck(expected)


def test_a_tcp_topic_with_4_partitions_is_left_alone(cluster, admin):
    topic = unique()
    admin.create_topics({topic: {"num_partitions": 4, "replication_factor": 2}}, wait_for_metadata=True)
    with pytest.warns(UserWarning, match="already exists with 4 partitions"):
        # A LocalCluster stands for its bootstrap servers.
        result = produce_trucks(cluster, count=200, topic=topic, progress=False)
    assert partition_count(admin, topic) == 4
    expected = Counter(kafka_python_partition(r["truck_id"].encode(), 4) for r in truck_positions(count=200))
    assert result.per_partition == {p: expected.get(p, 0) for p in range(4)}
    assert {p: len(rs) for p, rs in read_topic(cluster.bootstrap_servers, topic, 4).items()} == result.per_partition


def test_an_unreachable_address_fails_at_once_naming_it():
    address = f"127.0.0.1:{closed_port()}"
    start = time.monotonic()
    with pytest.raises(Errors.KafkaConnectionError, match=address):
        produce_trucks(address, count=10, progress=False)
    feed = TruckFeed([address])
    with pytest.raises(Errors.KafkaConnectionError, match=address):
        feed.start()
    assert time.monotonic() - start < 20  # seconds, not kafka-python's 30 s bootstrap timeout twice
    assert not feed.running


# --- TruckFeed -------------------------------------------------------------------------------------------


def test_truck_feed_sends_in_sped_up_real_time_and_every_ack_matches_the_log(cluster):
    topic, trucks, seed, speedup = unique(), 5, 2, 200.0
    before = time.time()
    feed = TruckFeed(cluster.bootstrap_servers, trucks=trucks, seed=seed, topic=topic, speedup=speedup)
    assert feed.start() is feed and feed.running
    thread = next(t for t in threading.enumerate() if t.name == f"TruckFeed-{topic}")
    assert thread.daemon  # a notebook kernel can exit while it runs
    wait_until(lambda: feed.sent >= 60, 30, "60 acknowledged reports")
    stopping = time.monotonic()
    feed.stop()
    assert time.monotonic() - stopping < 10
    stopped_at = time.time()
    again = time.monotonic()
    feed.stop()  # idempotent, and immediate
    assert time.monotonic() - again < 1
    assert not feed.running and feed.errors == []

    # The clock started at the whole wall-clock second of start().
    assert feed.start_ms % 1000 == 0 and before - 1 <= feed.start_ms / 1000 <= time.time()
    acked = feed.acked
    assert len(acked) == feed.sent >= 60
    offsets = defaultdict(list)
    for partition, offset in acked:
        offsets[partition].append(offset)
    assert all(sorted(o) == list(range(len(o))) for o in offsets.values())  # contiguous from 0
    counts = {p: len(o) for p, o in offsets.items()}
    assert end_offsets(cluster.bootstrap_servers, topic, 10) == {p: counts.get(p, 0) for p in range(10)}

    stored = read_topic(cluster.bootstrap_servers, topic, 10)
    tracks = defaultdict(list)
    for partition, records in stored.items():
        for r in records:
            assert partition == kafka_python_partition(r.key, 10) and r.timestamp_type == 0
            tracks[r.key.decode()].append((r.timestamp, decode_report(r.value)))
    expected = by_truck(truck_positions(trucks, seed=seed, start_ms=feed.start_ms, count=len(acked)))
    for truck, records in tracks.items():
        timestamps = [t for t, _ in records]
        assert all(b - a == INTERVAL_MS for a, b in zip(timestamps, timestamps[1:])), truck
        assert [report for _, report in records] == expected[truck][:len(records)]
        assert timestamps == [report["timestamp_ms"] for _, report in records]
    # Nothing was sent before the simulated clock reached its timestamp.
    latest = max(t for records in tracks.values() for t, _ in records)
    assert latest <= feed.start_ms + (stopped_at - feed.start_ms / 1000) * speedup * 1000


def test_truck_feed_with_a_rate_and_a_start_time_as_a_context_manager(cluster):
    topic = unique()
    with TruckFeed(cluster, trucks=4, topic=topic, rate=200, start_ms=START_MS) as feed:
        assert feed.speedup == 200 * INTERVAL_MS / 1000 / 4
        wait_until(lambda: feed.sent >= 20, 30, "20 acknowledged reports")
    assert not feed.running and feed.errors == []
    stored = read_topic(cluster.bootstrap_servers, topic, 10)
    got = by_truck(decode_report(r.value) for records in stored.values() for r in records)
    expected = by_truck(truck_positions(4, start_ms=START_MS, count=feed.sent))
    assert got == expected


def test_truck_feed_stops_promptly_between_reports(cluster):
    # One truck at speedup 1: a report every 20 s of wall time; stop() must not wait for the next.
    feed = TruckFeed(cluster.bootstrap_servers, trucks=1, topic=unique()).start()
    time.sleep(0.3)
    start = time.monotonic()
    feed.stop()
    assert time.monotonic() - start < 10
    assert not feed.running
    with pytest.raises(RuntimeError, match="runs once"):
        feed.start()


# --- bad arguments -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, error, match", [
    ({"count": -1}, ValueError, "count"),
    ({"count": 2.5}, TypeError, "count"),
    ({"count": 10, "rate": 0}, ValueError, "rate"),
    ({"count": 10, "rate": -5}, ValueError, "rate"),
    ({"count": 10, "trucks": 0}, ValueError, "trucks"),
    ({"count": 10, "partitions": 0}, ValueError, "partitions"),
    ({"count": 10, "replication_factor": 0}, ValueError, "replication_factor"),
    ({"count": 10, "topic": "no spaces"}, ValueError, "topic"),
    ({"count": 10, "producer_config": {"bootstrap_servers": "x:1"}}, ValueError, "bootstrap_servers"),
    ({"count": 10, "producer_config": {"value_serializer": str.encode}}, ValueError, "value_serializer"),
])
def test_produce_trucks_refuses_bad_arguments_before_connecting(kwargs, error, match):
    with pytest.raises(error, match=match):
        produce_trucks("127.0.0.1:1", progress=False, **kwargs)  # nothing listens there: never reached


@pytest.mark.parametrize("servers, error", [(42, TypeError), ("localhost", ValueError), ("", ValueError),
                                            (["127.0.0.1:x"], ValueError)])
def test_bad_bootstrap_servers_are_refused_before_connecting(servers, error):
    with pytest.raises(error, match="bootstrap_servers"):
        produce_trucks(servers, count=1, progress=False)
    with pytest.raises(error, match="bootstrap_servers"):
        TruckFeed(servers)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"speedup": 0}, ValueError, "speedup"),
    ({"speedup": -2.0}, ValueError, "speedup"),
    ({"speedup": float("inf")}, ValueError, "speedup"),
    ({"speedup": "fast"}, TypeError, "speedup"),
    ({"rate": 0}, ValueError, "rate"),
    ({"rate": 10, "speedup": 2.0}, ValueError, "speedup or rate"),
    ({"trucks": 0}, ValueError, "trucks"),
    ({"start_ms": -1}, ValueError, "start_ms"),
])
def test_truck_feed_refuses_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        TruckFeed("127.0.0.1:1", **kwargs)


def test_truck_feed_refuses_a_simulated_cluster():
    with Cluster(brokers=1, seed=0) as c:
        with pytest.raises(TypeError, match=r"not thread-safe.*produce_trucks"):
            TruckFeed(c)


def test_a_feed_never_started_stops_quietly():
    feed = TruckFeed("127.0.0.1:1")
    feed.stop()
    feed.stop()
    assert not feed.running and feed.sent == 0 and feed.acked == [] and feed.errors == []


# --- datasets re-exports the feed lazily ------------------------------------------------------------------


def test_datasets_reexports_the_feed_without_importing_it_up_front():
    from minikafka.datasets import FeedResult as R, TruckFeed as T, produce_trucks as p

    assert (p, T, R) == (produce_trucks, TruckFeed, FeedResult)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        datasets.nope  # noqa: B018
    check = ("import sys, minikafka.datasets; "
             "assert 'minikafka.feed' not in sys.modules and 'kafka' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", check], check=True)
