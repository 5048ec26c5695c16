"""The real-world runtime: minikafka's brokers as OS processes, unmodified Kafka clients.

What is proved here, against ``minikafka.wire.process.launch`` (a 3-voter controller quorum and N broker
processes speaking Kafka's protocol over TCP):

- kafka-python 3.0.12, as students use it: the producer (idempotent by default; acks 0, 1,
  all), the consumer (no group: assign and seek; a group with auto commit, with manual
  commit; two members splitting a topic), the admin client (topics, configs, groups,
  committed offsets);
- confluent-kafka (librdkafka), a second, independent implementation of the protocol:
  an idempotent producer and a group consumer;
- bad input against a live broker: a malformed frame, an unknown API, an unsupported
  version, a frame over ``socket.request.max.bytes`` each close only their connection (the
  reason is in the broker's log); a batch over ``max.message.bytes``, an illegal topic name
  and a corrupt batch get Kafka's error codes; a client that never reads its answers costs
  the broker no memory; a vanished client's late answer never reaches the next connection
  that the kernel gives the same port;
- a fuzz run (seeded): over ten thousand random and mutated frames, on thousands of
  connections, leave the broker alive, serving, with every acknowledged record, and its log
  free of any crash (every bad frame refused as a bad frame);
- SIGKILL of a partition leader under an acks=all load (RF 3, min.insync.replicas 2):
  the producer stalls, recovers, the killed broker restarts and rejoins the ISR, and the
  Jepsen-style checker finds no acknowledged write lost (nor duplicated, nor moved), read
  back from all three and then from the restarted broker's copy alone;
- process hygiene: ``minikafka cluster up`` prints its bootstrap servers and leaves nothing
  behind, and no broker outlives a cluster that was closed or whose Python process died
  (launched from a worker thread, or with a broker paused).

One cluster is shared by the client and bad-input tests (each test uses its own topics and
groups); the fuzz and SIGKILL tests get their own, as they are the ones that hurt a cluster.
Waits poll for a state with a generous deadline; nothing asserts how long anything took.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid

import pytest

pytest.importorskip("kafka")  # kafka-python==3.0.12 (the dev and course extras pin it)

import kafka.errors as Errors  # noqa: E402
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic  # noqa: E402
from kafka.protocol.admin import (  # noqa: E402
    CreateTopicsRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
)
from kafka.protocol.consumer import (  # noqa: E402
    FetchRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest  # noqa: E402
from kafka.protocol.producer import InitProducerIdRequest  # noqa: E402
from kafka.structs import OffsetAndMetadata  # noqa: E402

from minikafka import messages as m  # noqa: E402
from minikafka.assignors import Subscription  # noqa: E402
from minikafka.checker import LOST_WRITE, History, analyse  # noqa: E402
from minikafka.records import MemoryRecords  # noqa: E402
from minikafka.wire import codec  # noqa: E402
from minikafka.wire.process import launch, reserve_port  # noqa: E402

from wire_helpers import (  # noqa: E402
    NumberedProducer,
    RawConnection,
    api_versions_request,
    batch,
    children_of,
    frame,
    header_only_frame,
    isr_of,
    kill_all,
    known_everywhere,
    leader_of,
    metadata_request,
    now_ms,
    out_text,
    poll_until,
    produce_request,
    ready_to_join,
    read_partitions,
    running,
    tolerant,
    wait_until,
)

# The shared cluster: groups form at once (no initial rebalance delay), a small
# __consumer_offsets, and a small socket.request.max.bytes to prove the runtime enforces it.
SOCKET_REQUEST_MAX_BYTES = 2 * 1024 * 1024
SHARED_CONFIG = {
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 6,
    "socket.request.max.bytes": SOCKET_REQUEST_MAX_BYTES,
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster():
    with launch(brokers=3, config=SHARED_CONFIG) as c:
        yield c


@pytest.fixture(scope="module")
def admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    yield client
    client.close()


@pytest.fixture
def new_topic(cluster, admin):
    """``new_topic(partitions, replication_factor, **configs)`` -> a fresh topic's name,
    created through the admin client, with a leader for every partition."""

    def create(partitions: int = 1, replication_factor: int = 3, prefix: str = "t", **configs) -> str:
        name = unique(prefix)
        admin.create_topics([NewTopic(name, partitions, replication_factor,
                                      topic_configs={k.replace("_", "."): str(v) for k, v in configs.items()})])
        def led() -> bool:
            parts = admin.describe_topics([name])[0]["partitions"]
            return len(parts) == partitions and all(p["leader_id"] >= 0 for p in parts)

        wait_until(led, 20, f"leaders for {name}")
        wait_until(lambda: known_everywhere(cluster, name, partitions), 20, f"{name} in every broker's metadata")
        return name

    return create


def producer(cluster, **config) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, **config)


def consumer(cluster, *topics, **config) -> KafkaConsumer:
    config.setdefault("auto_offset_reset", "earliest")
    return KafkaConsumer(*topics, bootstrap_servers=cluster.bootstrap_servers, **config)


# --- kafka-python: the producer ------------------------------------------------------------------------


def test_kafka_python_producer_is_idempotent_by_default_and_its_records_land_in_order(cluster, admin, new_topic):
    topic = new_topic(partitions=3)
    p = producer(cluster)  # kafka-python 3.0's defaults: acks=all, enable_idempotence=True
    try:
        futures = [p.send(topic, key=b"k%d" % (i % 5), value=b"v%d" % i) for i in range(60)]
        p.flush()
        acks = [f.get(timeout=10) for f in futures]
    finally:
        p.close()
    by_partition: dict[int, list[tuple[int, bytes]]] = {}
    for i, md in enumerate(acks):
        by_partition.setdefault(md.partition, []).append((md.offset, b"v%d" % i))
    # Each partition's acks: offsets 0, 1, 2, ... in the order the values were sent.
    for part, acked in by_partition.items():
        assert [o for o, _ in acked] == list(range(len(acked))), part
    assert read_partitions(cluster.bootstrap_servers, topic, range(3)) == {
        part: by_partition.get(part, []) for part in range(3)}

    for part in by_partition:
        assert_idempotent(stored_batches(cluster, admin, topic, part))


def stored_batches(cluster, admin, topic: str, partition: int) -> list:
    """The record batches of a partition as its leader stores them (headers and all)."""
    with RawConnection((cluster.host, cluster.ports[leader_of(admin, topic, partition)])) as conn:
        response = conn.request(fetch_request(topic, partition, 0), 11)
    return list(MemoryRecords(bytes(response.responses[0].partitions[0].records)).batches())


def assert_idempotent(batches: list) -> None:
    """Idempotence really was on the wire: the batches carry one producer id (from
    InitProducerId) and sequence numbers that follow on from one batch to the next."""
    assert batches and all(b.producer_id >= 0 for b in batches)
    assert len({b.producer_id for b in batches}) == 1
    sequences = [(b.base_sequence, b.records_count) for b in batches]
    assert sequences[0][0] == 0
    assert all(s + n == s2 for (s, n), (s2, _) in zip(sequences, sequences[1:]))


def fetch_request(topic: str, partition: int, offset: int, max_wait_ms: int = 0) -> FetchRequest:
    T = FetchRequest.FetchTopic
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[T(topic=topic, partitions=[T.FetchPartition(
                            partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)])],
                        forgotten_topics_data=[], rack_id="")


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_kafka_python_producer_acks(cluster, new_topic, acks):
    topic = new_topic(partitions=1)
    # Idempotence needs acks=all: the other settings are plain producers.
    p = producer(cluster, acks=acks, enable_idempotence=acks == "all", linger_ms=5)
    try:
        futures = [p.send(topic, value=b"a%d" % i) for i in range(25)]
        p.flush()
        acked = [f.get(timeout=10) for f in futures]
    finally:
        p.close()
    if acks != 0:  # acks=0: the broker says nothing, so the client knows no offset
        assert [md.offset for md in acked] == list(range(25))
    if acks != "all":
        # Consumers read up to the high watermark, which passes these records only once the
        # followers have them (acks=all waited for that; acks=0 does not even wait for the
        # leader's append).
        wait_until(lambda: partition_sizes(cluster, topic, 1) == [25], 10, "the records below the HW")
    assert read_partitions(cluster.bootstrap_servers, topic, [0])[0] == [(i, b"a%d" % i) for i in range(25)]


def test_a_produce_with_acks_0_gets_no_answer_and_still_lands(cluster, admin, new_topic):
    topic = new_topic(partitions=1)
    with RawConnection((cluster.host, cluster.ports[leader_of(admin, topic)])) as conn:
        conn.send(produce_request(topic, 0, batch(b"silent-1", b"silent-2"), acks=0), 8)
        corr = conn.send(metadata_request(topic), 8)
        # The next answer on the connection is the Metadata's: the Produce got none.
        got, response = conn.receive()
        assert got == corr and response.topics[0].name == topic
    wait_until(lambda: partition_sizes(cluster, topic, 1) == [2], 10, "the records below the HW")
    assert read_partitions(cluster.bootstrap_servers, topic, [0])[0] == [(0, b"silent-1"), (1, b"silent-2")]


# --- kafka-python: the consumer ------------------------------------------------------------------------


def produce_values(cluster, topic: str, values: list[bytes], **send) -> list:
    p = producer(cluster)
    try:
        futures = [p.send(topic, value=v, **send) for v in values]
        p.flush()
        return [f.get(timeout=10) for f in futures]
    finally:
        p.close()


def test_kafka_python_consumer_without_a_group_assigns_and_seeks(cluster, new_topic):
    topic = new_topic(partitions=1)
    produce_values(cluster, topic, [b"s%d" % i for i in range(10)])
    tp = TopicPartition(topic, 0)
    c = consumer(cluster, group_id=None, enable_auto_commit=False)
    try:
        c.assign([tp])
        c.seek(tp, 4)
        assert [(r.offset, r.value) for r in poll_until(c, 6)] == [(i, b"s%d" % i) for i in range(4, 10)]
        assert c.position(tp) == 10
        c.seek_to_beginning(tp)
        assert [r.offset for r in poll_until(c, 10)] == list(range(10))
        c.seek_to_end(tp)
        assert c.position(tp) == 10
        c.seek(tp, 7)
        assert [r.value for r in poll_until(c, 3)] == [b"s7", b"s8", b"s9"]
    finally:
        c.close()


def test_kafka_python_group_consumer_with_auto_commit_resumes_where_it_committed(cluster, admin, new_topic):
    topic, group = new_topic(partitions=2), unique("auto")
    produce_values(cluster, topic, [b"first-%d" % i for i in range(20)])
    ends = {TopicPartition(topic, p): n for p, n in enumerate(partition_sizes(cluster, topic, 2))}

    def committed() -> dict:
        return {tp: om.offset for tp, om in admin.list_group_offsets(group)[group].items()}

    c = ready_to_join(consumer(cluster, topic, group_id=group, enable_auto_commit=True, auto_commit_interval_ms=200),
                      topic, 2)
    try:
        assert sorted(r.value for r in poll_until(c, 20)) == sorted(b"first-%d" % i for i in range(20))
        # Committed in the background of poll(), every auto_commit_interval_ms: not only on close.
        wait_until(lambda: c.poll(timeout_ms=100) == {} and committed() == ends, 15, "the auto commit")
    finally:
        c.close()

    produce_values(cluster, topic, [b"second-%d" % i for i in range(5)])
    c = ready_to_join(consumer(cluster, topic, group_id=group), topic, 2)
    try:
        # Only what came after the committed offsets, nothing consumed twice.
        assert sorted(r.value for r in poll_until(c, 5)) == sorted(b"second-%d" % i for i in range(5))
    finally:
        c.close()


def partition_sizes(cluster, topic: str, partitions: int) -> list[int]:
    return [len(records) for _, records in sorted(read_partitions(cluster.bootstrap_servers, topic,
                                                                  range(partitions)).items())]


def test_kafka_python_group_consumer_with_manual_commit(cluster, new_topic):
    topic, group = new_topic(partitions=1), unique("manual")
    produce_values(cluster, topic, [b"m%d" % i for i in range(10)])
    tp = TopicPartition(topic, 0)
    c = ready_to_join(consumer(cluster, topic, group_id=group, enable_auto_commit=False), topic, 1)
    try:
        assert [r.offset for r in poll_until(c, 10)] == list(range(10))
        assert c.committed(tp) is None  # nothing committed yet
        c.commit()
        assert c.committed(tp) == 10
        c.commit({tp: OffsetAndMetadata(3, "rewound", -1)})
        assert c.committed(tp) == 3
    finally:
        c.close()
    c = ready_to_join(consumer(cluster, topic, group_id=group, enable_auto_commit=False), topic, 1)
    try:
        assert [r.value for r in poll_until(c, 7)] == [b"m%d" % i for i in range(3, 10)]
    finally:
        c.close()


class PollingMember(threading.Thread):
    """A group consumer polled in a thread of its own, as applications run them. (Polling two
    consumers in turn from one thread with short timeouts does not work with kafka-python
    3.0.12: a leader whose JoinGroup completes while the *other* consumer is being polled
    discards the finished join and joins again, so the group rebalances over and over.)"""

    def __init__(self, cluster, topic: str, group: str, **config) -> None:
        super().__init__(daemon=True)
        self.consumer = consumer(cluster, topic, group_id=group, enable_auto_commit=False, **config)
        # Know the topic before joining: a leader that has no metadata for it assigns nothing
        # ("No partition metadata for topic"), and the group must rebalance again later.
        assert self.consumer.partitions_for_topic(topic)
        self.records: list = []
        self.assignment: frozenset = frozenset()
        self.error: BaseException | None = None
        self._stopping = threading.Event()

    def run(self) -> None:
        try:
            while not self._stopping.is_set():
                for records in self.consumer.poll(timeout_ms=100).values():
                    self.records.extend(records)
                self.assignment = frozenset(self.consumer.assignment())
        except BaseException as e:  # reported by the test
            self.error = e
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=30)
        assert self.error is None, self.error


def test_two_kafka_python_consumers_in_one_group_split_the_partitions(cluster, new_topic):
    topic, group = new_topic(partitions=4), unique("pair")
    members = [PollingMember(cluster, topic, group) for _ in range(2)]
    for member in members:
        member.start()
    try:
        # Wait for the group to be stable with both in it: two partitions each.
        wait_until(lambda: all(len(x.assignment) == 2 for x in members), 40, "both members to own two partitions")
        owned = [x.assignment for x in members]
        assert not owned[0] & owned[1]
        assert owned[0] | owned[1] == {TopicPartition(topic, p) for p in range(4)}

        values = [b"p%d" % i for i in range(40)]
        acks = produce_values(cluster, topic, values)
        wait_until(lambda: sum(len(x.records) for x in members) >= len(values), 30, "every record to be read")
    finally:
        for member in members:
            member.stop()
    assert [x.assignment for x in members] == owned  # no rebalance meanwhile
    for x, mine in zip(members, owned):  # each read only its own partitions, and something
        assert x.records and {TopicPartition(r.topic, r.partition) for r in x.records} <= mine
    # Together: every record exactly once.
    everything = [r for x in members for r in x.records]
    assert sorted(r.value for r in everything) == sorted(values)
    assert sorted((r.partition, r.offset) for r in everything) == sorted((a.partition, a.offset) for a in acks)


# --- kafka-python: the admin client ---------------------------------------------------------------------


def test_kafka_python_admin_client(cluster, admin):
    topic, group = unique("admin"), unique("admin-group")
    result = admin.create_topics([NewTopic(topic, 3, 2, topic_configs={"retention.ms": "3600000"})])
    assert result["topics"][0]["error_code"] == 0
    wait_until(lambda: topic in admin.list_topics(), 10, "the topic in list_topics")

    def described():
        (t,) = admin.describe_topics([topic])
        return t if all(p["leader_id"] >= 0 for p in t["partitions"]) else None

    t = wait_until(described, 10, "leaders")
    assert t["error_code"] == 0 and not t["is_internal"]
    assert sorted(p["partition_index"] for p in t["partitions"]) == [0, 1, 2]
    for p in t["partitions"]:
        assert len(p["replica_nodes"]) == 2 and set(p["isr_nodes"]) == set(p["replica_nodes"])
        assert p["leader_id"] == p["replica_nodes"][0]  # the preferred replica leads

    configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    entries = configs["topic"][topic]
    assert entries["retention.ms"]["value"] == "3600000"
    assert entries["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert entries["cleanup.policy"] == {**entries["cleanup.policy"], "value": "delete",
                                         "config_source": "DEFAULT_CONFIG"}

    # A group with committed offsets, then the group APIs.
    produce_values(cluster, topic, [b"x"] * 6, partition=1)
    c = ready_to_join(consumer(cluster, topic, group_id=group, enable_auto_commit=False), topic, 3)
    try:
        poll_until(c, 6)
        c.commit()
        groups = {g["group_id"]: g for g in admin.list_groups()}
        assert groups[group]["protocol_type"] == "consumer"
        g = admin.describe_groups([group])[group]
        assert g["group_state"] == "Stable" and len(g["members"]) == 1
        assert g["members"][0]["client_id"] == c.config["client_id"]
    finally:
        c.close()
    assert admin.describe_groups([group])[group]["group_state"] == "Empty"
    offsets = admin.list_group_offsets(group)[group]
    assert {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic}[1] == 6

    assert admin.delete_topics([topic])["topics"][0]["error_code"] == 0
    wait_until(lambda: topic not in admin.list_topics(), 10, "the topic gone from list_topics")


# --- confluent-kafka (librdkafka) -------------------------------------------------------------------------


def test_confluent_kafka_idempotent_producer_and_group_consumer(cluster, admin, new_topic):
    ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka (librdkafka) comes with the dev extra")
    topic, group = new_topic(partitions=2), unique("rdkafka")
    delivered: list = []

    def on_delivery(err, msg) -> None:
        delivered.append((err, msg.partition(), msg.offset(), msg.value()))

    p = ck.Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True,
                     "acks": "all", "linger.ms": 5})
    for i in range(50):
        p.produce(topic, key=b"k%d" % (i % 7), value=b"r%d" % i, on_delivery=on_delivery)
    assert p.flush(30) == 0
    assert [e for e, *_ in delivered if e is not None] == []
    for part in (0, 1):  # offsets 0, 1, 2, ... per partition, in the order sent
        offsets = [o for _, q, o, _ in delivered if q == part]
        assert offsets == list(range(len(offsets)))
        if offsets:
            assert_idempotent(stored_batches(cluster, admin, topic, part))

    c = ck.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(delivered):
            assert time.monotonic() < deadline, f"librdkafka read {len(got)} of {len(delivered)}"
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.partition(), msg.offset(), msg.value()))
        c.commit(asynchronous=False)
        committed = c.committed([ck.TopicPartition(topic, q) for q in (0, 1)], timeout=10)
    finally:
        c.close()
    assert sorted(got) == sorted((q, o, v) for _, q, o, v in delivered)
    sizes = {q: sum(1 for _, x, _, _ in delivered if x == q) for q in (0, 1)}
    assert {tp.partition: tp.offset for tp in committed} == sizes


# --- bad input against a live broker ------------------------------------------------------------------------


def _bad_frames() -> list:
    metadata = frame(metadata_request("x"), 8)
    cut = metadata[4:-3]  # a whole frame, but its body ends inside a topic name
    return [
        ("malformed", struct.pack(">i", len(cut)) + cut, "truncated frame: Metadata v8 request ends early"),
        ("trailing bytes", struct.pack(">i", len(metadata) - 4 + 2) + metadata[4:] + b"\x00\x00",
         "malformed Metadata v8 request: 2 trailing bytes"),
        ("unknown api key", header_only_frame(999, 0), "unknown api key 999"),
        ("unsupported version", header_only_frame(codec.PRODUCE, 12), "Produce v12 not supported (3–8)"),
        ("below the floor", header_only_frame(codec.METADATA, 0), "Metadata v0 not supported (4–12)"),
        ("over socket.request.max.bytes", struct.pack(">i", SOCKET_REQUEST_MAX_BYTES + 1) + b"\x00" * 64,
         f"frame of {SOCKET_REQUEST_MAX_BYTES + 1} bytes (socket.request.max.bytes is {SOCKET_REQUEST_MAX_BYTES})"),
        ("negative length", struct.pack(">i", -7), "frame of -7 bytes: a length cannot be negative"),
        # A private frame is refused on a client listener before it is even decoded.
        ("private frame", header_only_frame(codec.INTERNAL_KEY_BASE, 0, body=b"{not json"),
         "api key 10000 (BrokerHeartbeatRequest) is inter-node traffic, refused on the client listener"),
    ]


@pytest.mark.parametrize("name,data,reason", _bad_frames(), ids=[case[0] for case in _bad_frames()])
def test_a_bad_frame_closes_only_its_own_connection_and_the_reason_is_logged(cluster, name, data, reason):
    broker = 2
    address = (cluster.host, cluster.ports[broker])
    with RawConnection(address) as witness, RawConnection(address) as bad:
        assert witness.request(api_versions_request(), 3).error_code == 0
        assert bad.request(api_versions_request(), 3).error_code == 0  # it worked before
        bad.send_raw(data)
        assert bad.closed_by_broker(), f"{name}: the connection stayed open"
        # The other connection, opened before, is served as if nothing happened.
        assert {b.node_id for b in witness.request(metadata_request(), 8).brokers} == {1, 2, 3}
        who = "/%s:%d" % bad.sock.getsockname()[:2]
    line = f"closing connection {who}: {reason}"
    wait_until(lambda: line in out_text(cluster, broker), 10, f"{line!r} in broker {broker}'s log")


def test_a_late_answer_never_reaches_a_new_connection_from_the_same_port(cluster, admin, new_topic):
    # A client asks, vanishes, and the kernel gives its port to a new connection, which asks
    # with the same correlation id: the old request's answer, when the broker finally gives it,
    # must not be taken for the new one's. The old request: a JoinGroup that waits for the
    # group's other member to rejoin; the new one: a Fetch that waits for data.
    topic, group = new_topic(partitions=1), unique("late")
    member = PollingMember(cluster, topic, group, heartbeat_interval_ms=1000)
    member.start()
    try:
        wait_until(lambda: member.assignment, 30, "a stable group of one")
        with RawConnection((cluster.host, cluster.ports[1])) as conn:
            coordinator = conn.request(FindCoordinatorRequest(key=group, key_type=0), 2).node_id
        empty = new_topic(partitions=3, replication_factor=1)  # one partition led by each broker
        (described,) = admin.describe_topics([empty])
        parked = next(p["partition_index"] for p in described["partitions"] if p["leader_id"] == coordinator)
        address = (cluster.host, cluster.ports[coordinator])

        J = JoinGroupRequest

        def join(member_id: str) -> JoinGroupRequest:
            return J(group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id=member_id,
                     group_instance_id=None, protocol_type="consumer", protocols=[J.JoinGroupRequestProtocol(
                         name="range", metadata=Subscription((topic,)).encode(version=0))])

        vanished = RawConnection(address)
        port = vanished.sock.getsockname()[1]
        first = vanished.request(join(""), 5)  # correlation id 1: "MEMBER_ID_REQUIRED", with the id
        assert first.error_code == m.MEMBER_ID_REQUIRED
        corr = vanished.send(join(first.member_id), 5)  # 2: waits until the other member rejoins
        time.sleep(0.3)  # let the broker read it: a reset discards what it has not read yet
        vanished.reset()
        with RawConnection(address, source_port=port) as newcomer:  # same address, same port
            newcomer._corr = iter([corr])  # and the same correlation id
            newcomer.send(fetch_request(empty, parked, 0, max_wait_ms=2500), 11)
            got, response = newcomer.receive()  # the JoinGroup completes meanwhile (<= 1 s)
        assert got == corr
        assert [(t.topic, p.partition_index) for t in response.responses for p in t.partitions] == [(empty, parked)]
    finally:
        member.stop()


def test_a_client_that_never_reads_its_answers_costs_the_broker_no_memory(cluster, admin, new_topic):
    topic = new_topic(partitions=1, replication_factor=1)
    produce_values(cluster, topic, [b"x" * 1000] * 1000)  # a 1 MB answer to each Fetch below
    leader = leader_of(admin, topic)
    pid = cluster.pid(leader)
    before = rss_mb(pid)
    greedy = RawConnection((cluster.host, cluster.ports[leader]))
    try:
        request = frame(fetch_request(topic, 0, 0), 11)
        greedy.send_raw(request * 300)  # 300 MB of answers asked for, none of them read
        # Once the socket buffers are full the broker stops reading from this client, so its
        # answers wait in the client's requests, not in the broker's memory.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert rss_mb(pid) - before < 100, f"the broker grew from {before} to {rss_mb(pid)} MB"
            time.sleep(0.1)
        with RawConnection((cluster.host, cluster.ports[leader])) as other:  # and serves the others
            assert other.request(fetch_request(topic, 0, 999), 11).responses[0].partitions[0].error_code == 0
    finally:
        greedy.reset()


def rss_mb(pid: int) -> int:
    status = open(f"/proc/{pid}/status").read()
    return int(status.split("VmRSS:")[1].split()[0]) // 1024


def test_a_record_batch_over_max_message_bytes_is_refused_with_message_too_large(cluster, new_topic):
    topic = new_topic(partitions=1, max_message_bytes=2000)
    # The client would refuse it itself under its own max_request_size: raise that, so the
    # broker is the one saying no.
    p = producer(cluster, max_request_size=1_000_000)
    try:
        with pytest.raises(Errors.MessageSizeTooLargeError, match="larger than max.message.bytes"):
            p.send(topic, value=b"x" * 5000).get(timeout=15)
    finally:
        p.close()  # kafka-python's idempotent producer treats the error as fatal: a new one
    assert produce_values(cluster, topic, [b"small"])[0].offset == 0  # the topic still works


def test_an_illegal_topic_name_gets_invalid_topic_exception(cluster, admin):
    with pytest.raises(Errors.InvalidTopicError):
        admin.create_topics([NewTopic("bad/name", 1, 1)])
    # Names the client might refuse before asking, sent raw.
    names = ["bad/name", "..", ".", "x" * 250, "", "spaces not allowed"]
    request = CreateTopicsRequest(topics=[
        CreateTopicsRequest.CreatableTopic(name=n, num_partitions=1, replication_factor=1, assignments=[], configs=[])
        for n in names], timeout_ms=10_000, validate_only=False)
    with RawConnection((cluster.host, cluster.ports[1])) as conn:
        response = conn.request(request, 4)
        assert {t.name: t.error_code for t in response.topics} == {n: m.INVALID_TOPIC_EXCEPTION for n in names}
        # Producing to such a name is an unknown topic, not a crash; asking about it is an
        # invalid name (as Kafka answers Metadata, auto-creation allowed or not).
        produced = conn.request(produce_request("bad/name", 0, batch(b"v")), 8)
        assert produced.responses[0].partition_responses[0].error_code == m.UNKNOWN_TOPIC_OR_PARTITION
        described = conn.request(metadata_request("bad/name"), 8)
        assert described.topics[0].error_code == m.INVALID_TOPIC_EXCEPTION
    assert not any(n in admin.list_topics() for n in names)


def test_a_corrupt_batch_gets_corrupt_message_and_nothing_is_appended(cluster, admin, new_topic):
    topic = new_topic(partitions=1)
    good = batch(b"hello", b"world")
    corrupt = bytearray(good)
    corrupt[-3] ^= 0x20  # inside the last record, after the CRC was computed over it
    with RawConnection((cluster.host, cluster.ports[leader_of(admin, topic)])) as conn:
        response = conn.request(produce_request(topic, 0, bytes(corrupt)), 8)
        part = response.responses[0].partition_responses[0]
        assert part.error_code == m.CORRUPT_MESSAGE and "CRC" in part.error_message
        # Not a frame error: the connection goes on, and the log holds only the good batch.
        response = conn.request(produce_request(topic, 0, good), 8)
        assert response.responses[0].partition_responses[0].base_offset == 0
    wait_until(lambda: partition_sizes(cluster, topic, 1) == [2], 10, "the good batch below the HW")
    assert read_partitions(cluster.bootstrap_servers, topic, [0])[0] == [(0, b"hello"), (1, b"world")]


# --- fuzzing a live broker ------------------------------------------------------------------------------------

FUZZ_SEED = 20_260_201
FUZZ_FRAMES = 12_000  # frames the broker handles (a bad one ends its connection: more are sent)
FUZZ_THREADS = 4


def seed_frames(topic: str) -> list[bytes]:
    """Valid request frames, as kafka-python's clients would send them (framed by kafka-python),
    for the APIs a producer, a consumer and a group member use. Not CreateTopics/DeleteTopics/
    DeleteGroups: a mutation that stays valid would legitimately create or delete things."""
    J = JoinGroupRequest
    OC = OffsetCommitRequest.OffsetCommitRequestTopic
    OF = OffsetFetchRequest.OffsetFetchRequestTopic
    LO = ListOffsetsRequest.ListOffsetsTopic
    frames = [
        (api_versions_request(), 3), (api_versions_request(), 0),
        (metadata_request(topic), 8), (metadata_request(topic, "other"), 4),
        (MetadataRequest(topics=None, allow_auto_topic_creation=False), 8),
        (produce_request(topic, 0, batch(b"fuzz-a", b"fuzz-b"), acks=1), 8),
        (produce_request(topic, 0, batch(b"fuzz-c"), acks=0), 3),
        (produce_request(topic, 0, batch(b"fuzz-d", producer_id=7, base_sequence=0), acks=-1), 7),
        (fetch_request(topic, 0, 0), 11), (fetch_request(topic, 0, 3), 4),
        (ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[LO(name=topic, partitions=[
            LO.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-2)])]), 5),
        (FindCoordinatorRequest(key="fuzz-group", key_type=0), 2),
        (J(group_id="fuzz-group", session_timeout_ms=6000, rebalance_timeout_ms=6000, member_id="",
           group_instance_id=None, protocol_type="consumer",
           protocols=[J.JoinGroupRequestProtocol(name="range", metadata=Subscription((topic,)).encode(0))]), 5),
        (SyncGroupRequest(group_id="fuzz-group", generation_id=1, member_id="m", group_instance_id=None,
                          assignments=[]), 3),
        (HeartbeatRequest(group_id="fuzz-group", generation_id=1, member_id="m", group_instance_id=None), 3),
        (OffsetCommitRequest(group_id="fuzz-group", generation_id_or_member_epoch=-1, member_id="",
                             group_instance_id=None, retention_time_ms=-1, topics=[OC(name=topic, partitions=[
                                 OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                                 committed_leader_epoch=-1,
                                                                 committed_metadata="")])]), 7),
        (OffsetFetchRequest(group_id="fuzz-group", topics=[OF(name=topic, partition_indexes=[0])]), 5),
        (OffsetFetchRequest(group_id="fuzz-group", topics=None), 2),
        (ListGroupsRequest(states_filter=[]), 2),
        (DescribeGroupsRequest(groups=["fuzz-group"], include_authorized_operations=False), 4),
        (InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 1),
        (DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=2, resource_name=topic, configuration_keys=None)], include_synonyms=False,
            include_documentation=False), 3),
    ]
    return [frame(request, version, correlation_id=i + 1) for i, (request, version) in enumerate(frames)]


def mutate(rng: random.Random, seeds: list[bytes]) -> bytes:
    """One frame to throw: a seed as it is (a third), a seed with odd values that still decodes
    (a third: these reach the broker's handlers), or a seed broken one of several ways."""
    choice = rng.random()
    if choice < 0.35:
        return rng.choice(seeds)
    if choice < 0.7:
        return odd_but_well_formed(rng, seeds)
    return broken(rng, seeds)


def odd_but_well_formed(rng: random.Random, seeds: list[bytes]) -> bytes:
    """A seed with a few bytes changed (ids, offsets, timeouts, acks, names...) such that it
    still decodes: a request a buggy client could send."""
    seed = rng.choice(seeds)
    for _ in range(20):
        body = bytearray(seed[4:])
        for _ in range(rng.randint(1, 3)):
            body[rng.randrange(10, len(body))] = rng.choice([0, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        try:
            codec.decode_request(bytes(body))
        except codec.FrameError:
            continue
        return struct.pack(">i", len(body)) + bytes(body)
    return seed


def broken(rng: random.Random, seeds: list[bytes]) -> bytes:
    data = bytearray(rng.choice(seeds))
    body = data[4:]
    how = rng.randrange(8)
    if how == 0:  # a few bytes flipped anywhere past the length
        for _ in range(rng.randint(1, 4)):
            body[rng.randrange(len(body))] = rng.randrange(256)
    elif how == 1:  # cut short, the length telling the truth
        body = body[:rng.randrange(len(body))]
    elif how == 2:  # random bytes inserted
        at = rng.randrange(len(body) + 1)
        body[at:at] = rng.randbytes(rng.randint(1, 16))
    elif how == 3:  # another API's key and an in-range version over this body
        key = rng.choice(sorted(codec.ACCEPTED))
        low, high = codec.ACCEPTED[key]
        body[0:4] = struct.pack(">hh", key, rng.randint(low, high))
    elif how == 4:  # any key, any version
        body[0:4] = rng.randbytes(4)
    elif how == 5:  # random bytes behind a valid header
        body = body[:rng.randint(10, 14)] + rng.randbytes(rng.randint(0, 80))
    elif how == 6:  # a length that lies, a little or a lot (the next frame starts in the wrong place)
        lie = rng.choice([rng.randint(-8, 8), rng.randint(-2**31, 2**31 - 1)])
        return struct.pack(">i", max(-2**31, min(2**31 - 1, len(body) + lie))) + bytes(body)
    else:  # pure noise
        return rng.randbytes(rng.randint(0, 64))
    return struct.pack(">i", len(body)) + bytes(body)


def frames_handled(stream: bytes, max_request_bytes: int = 100 * 1024 * 1024) -> tuple[int, bool]:
    """How the broker reads ``stream`` (the bytes of one connection), with the same codec: how
    many frames it takes in, and whether it closes the connection on a bad one. A frame whose
    length runs past the end is not taken: the broker waits for the rest, then sees the FIN."""
    pos = taken = 0
    while pos + 4 <= len(stream):
        size = int.from_bytes(stream[pos:pos + 4], "big", signed=True)
        if size < 0 or size > max_request_bytes:
            return taken + 1, True
        if pos + 4 + size > len(stream):
            return taken, False
        body = stream[pos + 4:pos + 4 + size]
        taken += 1
        try:
            codec.decode_internal(body) if codec.is_internal(body) else codec.decode_request(body)
        except codec.FrameError:
            return taken, True
        pos += 4 + size
    return taken, False


def fuzz_connections(rng: random.Random, seeds: list[bytes], frames: int) -> tuple[list[bytes], int]:
    """Connections to open (the bytes each sends) so that the broker handles at least ``frames``
    frames: each connection gets mutated frames until one of them makes the broker close it,
    or up to 12 of them. Returns the connections and the frames the broker will handle."""
    connections, handled = [], 0
    while handled < frames:
        stream, cap = b"", rng.randint(1, 12)
        for _ in range(cap):
            stream += mutate(rng, seeds)
            taken, closes = frames_handled(stream)
            if closes:
                break
        connections.append(stream)
        handled += taken
    return connections, handled


def throw(address: tuple[str, int], stream: bytes) -> int:
    """Send ``stream`` on one connection, say we are done (FIN), read until the broker closes.
    Returns how many bytes came back."""
    received = 0
    with socket.create_connection(address, timeout=10) as sock:
        try:
            sock.sendall(stream)
            sock.shutdown(socket.SHUT_WR)
            while True:
                data = sock.recv(1 << 16)
                if not data:
                    break
                received += len(data)
        except ConnectionError:  # reset on a bad frame: that is the point (a timeout is not)
            pass
    return received


@pytest.fixture(scope="module")
def fuzz_cluster():
    with launch(brokers=1, config={"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0}) as c:
        yield c


def test_fuzzed_frames_leave_the_broker_alive_serving_and_with_every_acknowledged_record(fuzz_cluster):
    c = fuzz_cluster
    address = (c.host, c.ports[1])
    topic = "fuzzed"
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        wait_until(lambda: leader_of(admin, topic) == 1, 10, "a leader")
    finally:
        admin.close()
    acked = produce_values(c, topic, [b"before-%d" % i for i in range(200)])
    assert [a.offset for a in acked] == list(range(200))

    connections, total = fuzz_connections(random.Random(FUZZ_SEED), seed_frames(topic), FUZZ_FRAMES)
    received = [0] * FUZZ_THREADS
    errors: list[BaseException] = []

    def worker(k: int) -> None:  # a few threads: connections at the same time
        try:
            for stream in connections[k::FUZZ_THREADS]:
                received[k] += throw(address, stream)
        except BaseException as e:  # reported below
            errors.append(e)

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(FUZZ_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    assert not errors, errors[0]
    print(f"fuzz: {total} frames handled on {len(connections)} connections in {elapsed:.1f} s "
          f"({total / elapsed:.0f} frames/s), {sum(received)} bytes of answers")
    assert sum(received) > 0  # the valid ones were answered

    # The broker (and the controller) are alive, and real clients still work.
    assert c.alive(1) and all(running(c.pid(n)) for n in c.controller_ids)
    more = produce_values(c, topic, [b"after-%d" % i for i in range(10)])
    with RawConnection(address) as conn:  # ...and so does a plain connection
        assert conn.request(api_versions_request(), 3).error_code == 0
    consumer_ = ready_to_join(consumer(c, topic, group_id=unique("after-fuzz")), topic, 1)
    try:
        values = {r.value for r in poll_until(consumer_, more[-1].offset + 1)}
    finally:
        consumer_.close()
    assert {b"after-%d" % i for i in range(10)} <= values
    # Nothing acknowledged was lost: every value acked before the fuzzing is still there, at
    # the offset its ack gave.
    stored = dict(read_partitions(c.bootstrap_servers, topic, [0])[0])
    assert {a.offset: stored.get(a.offset) for a in acked} == {i: b"before-%d" % i for i in range(200)}
    # Every bad frame was refused as a bad frame, never as a crash of the runtime or the node.
    log_text = out_text(c, 1)
    assert "closing connection" in log_text
    for sign in ("Traceback", "unexpected error", "the node failed", "could not apply", "cannot encode"):
        assert sign not in log_text, log_text[log_text.index(sign) - 2000:][:4000]


# --- SIGKILL of a leader under load ----------------------------------------------------------------------------

# The controller declares a silent broker dead after broker.session.timeout.ms (Kafka's
# default, 9 s, makes a producer stall about 13 s: 8 s to the election, then kafka-python's
# metadata back-off); shorter here to keep the test short.
KILL_CONFIG = {"broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500}


def test_sigkill_of_the_leader_under_acks_all_load_loses_no_acknowledged_write():
    topic = "ledger"
    history = History(clock=now_ms)
    with launch(brokers=3, config=KILL_CONFIG) as c:
        admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers)

        def isr() -> list[int] | None:  # None while the admin client's broker is the dead one
            return tolerant(lambda: isr_of(admin, topic))

        def leader() -> int | None:
            return tolerant(lambda: leader_of(admin, topic))

        try:
            admin.create_topics([NewTopic(topic, 1, 3, topic_configs={"min.insync.replicas": "2"})])
            wait_until(lambda: isr() == [1, 2, 3], 20, "an ISR of three")
            load = NumberedProducer(c, topic, history)
            load.start()
            try:
                wait_until(lambda: load.acked_after(0) >= 300, 30, "300 acks before the kill")
                victim = leader()
                killed_at = now_ms()
                c.kill(victim)  # SIGKILL: no goodbye, the kernel resets its connections
                # Keep producing until the producer recovered: values sent after the kill acked.
                wait_until(lambda: load.acked_after(killed_at) >= 200, 60, "acks for values sent after the kill")
                new_leader = wait_until(lambda: leader() not in (None, -1, victim) and leader(), 30, "a new leader")
                survivors = sorted(set(c.broker_ids) - {victim})
                wait_until(lambda: isr() == survivors, 30, f"broker {victim} out of the ISR")
                c.restart(victim)  # same port, same log directory: recovers, truncates, catches up
                restarted_at = now_ms()
                wait_until(lambda: isr() == [1, 2, 3], 30, f"broker {victim} back in the ISR")
                back_in_isr_ms = now_ms() - restarted_at
                wait_until(lambda: load.acked_after(restarted_at) >= 200, 30, "acks after the restart")
            finally:
                load.stop()

            acks = sorted(op.complete_ms for op in history.sends if op.status == "ok")
            stall = max(b - a for a, b in zip(acks, acks[1:]) if b >= killed_at)
            print(f"\nSIGKILL of leader {victim}: longest time without an ack {stall} ms; {new_leader} led next; "
                  f"restarted, back in the ISR {back_in_isr_ms} ms later; {history.counts()['ok']} values acked")

            # Read it all back (log start to high watermark) while all three are up...
            everything = read_partitions(c.bootstrap_servers, topic, [0])[0]
            history.poll("all-three-up", topic, 0, everything)
        finally:
            admin.close()
        # ...and once more from the killed-and-restarted broker alone: the others killed, it is
        # elected from the ISR, and its copy (recovered, truncated, caught up) is the only one.
        for b in c.broker_ids:
            if b != victim:
                c.kill(b)
        alone = KafkaAdminClient(bootstrap_servers=f"{c.host}:{c.ports[victim]}")
        try:
            wait_until(lambda: tolerant(lambda: leader_of(alone, topic)) == victim, 30, f"broker {victim} leading")
            # ...with an ISR of itself alone: until the second dead broker is fenced too, the
            # high watermark waits for it, and a read would stop short of acknowledged records.
            wait_until(lambda: tolerant(lambda: isr_of(alone, topic)) == [victim], 30, f"an ISR of {victim} alone")
        finally:
            alone.close()
        only_copy = read_partitions(f"{c.host}:{c.ports[victim]}", topic, [0])[0]
        history.final_read(topic, 0, only_copy, log_start=0, high_watermark=len(only_copy))
    report = analyse(history)
    print(report.table())
    assert report.anomalies[LOST_WRITE] == 0, report.table()
    # Nothing else either: no value twice (idempotence), one value per offset in both reads.
    assert report.ok, report.table()
    assert [o for o, _ in only_copy] == list(range(len(only_copy))) and len(only_copy) >= len(everything)


# --- process hygiene ---------------------------------------------------------------------------------------------


def gone(pids, timeout_s: float = 10.0) -> bool:
    wait_until(lambda: not any(running(p) for p in pids), timeout_s, f"processes {sorted(pids)} to exit")
    return True


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_minikafka_cluster_up_prints_the_bootstrap_servers_and_leaves_nothing_behind(stop_signal):
    proc = subprocess.Popen([sys.executable, "-m", "minikafka.cli", "cluster", "up", "--brokers", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    children = []
    try:
        first = proc.stdout.readline().strip()
        assert first.startswith("bootstrap servers: "), (first, proc.stderr.read() if proc.poll() else "")
        servers = first.removeprefix("bootstrap servers: ").split(",")
        assert len(servers) == 2
        assert proc.stdout.readline().startswith("controller quorum voters: 3000@")
        directory = proc.stdout.readline().split("log directories under ", 1)[1].split(";")[0]
        for server in servers:  # real Kafka endpoints
            host, port = server.rsplit(":", 1)
            with RawConnection((host, int(port))) as conn:
                assert conn.request(api_versions_request(), 3).error_code == 0
        children = children_of(proc.pid)
        assert len(children) == 5  # three controllers and two brokers
        proc.send_signal(stop_signal)
        assert proc.wait(timeout=30) == 0
        assert gone(children)
        assert not os.path.exists(directory)  # its temporary log directories too
        # Nothing but the three lines on stdout, nothing at all on stderr: a quiet exit.
        assert proc.stdout.read() == "" and proc.stderr.read() == ""
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_all(children)
        proc.wait()


LAUNCHER = """
import os, sys, threading
from minikafka.wire.process import launch
clusters = []
if sys.argv[1] == "worker-thread":
    # Launched from a worker thread that then ends: the cluster must outlive the thread
    # (PR_SET_PDEATHSIG alone would kill the children when the *thread* that started them ends).
    worker = threading.Thread(target=lambda: clusters.append(launch(brokers=2)))
    worker.start()
    worker.join()
else:  # from the main thread, broker 1 paused: SIGSTOPped, it cannot notice anything itself
    clusters.append(launch(brokers=2))
    clusters[0].pause(1)
print(clusters[0].bootstrap_servers, flush=True)
sys.stdin.readline()
os._exit(1)  # die at once: no atexit, no close(), no cleanup of any kind
"""


@pytest.mark.parametrize("how", ["worker-thread", "main-thread-paused"])
def test_no_broker_outlives_the_python_process_that_launched_it(how):
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, how], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    children = []
    try:
        servers = proc.stdout.readline().strip().split(",")
        children = children_of(proc.pid)
        assert len(children) == 5 and all(running(p) for p in children)  # 3 controllers, 2 brokers
        host, port = servers[1].rsplit(":", 1)
        with RawConnection((host, int(port))) as conn:  # alive (after the launching thread ended)
            assert conn.request(api_versions_request(), 3).error_code == 0
        proc.stdin.write("die\n")
        proc.stdin.flush()
        assert proc.wait(timeout=10) == 1
        assert gone(children)
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_all(children)
        proc.wait()


def test_close_stops_every_process_and_removes_the_log_directories():
    before = set(children_of(os.getpid()))
    c = launch(brokers=2)
    try:
        mine = sorted(set(children_of(os.getpid())) - before)
        assert len(mine) == 5 and all(running(p) for p in mine)  # 3 controllers, 2 brokers
        c.kill(2)
        # While it is down its ports stay the cluster's: a client is refused, and nothing
        # else (no bind(0), no outgoing connection) can take them before the restart.
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((c.host, c.ports[2]), timeout=5).close()
        for port in (c.ports[2], c.inter_broker_ports[2]):
            with pytest.raises(OSError):
                reserve_port(c.host, port).close()
        c.restart(2)  # a restarted broker is a new process: close() must stop it too
        c.kill(3001)
        c.restart(3001)  # a controller too
        mine = sorted(set(children_of(os.getpid())) - before)
        assert len(mine) == 5
    finally:
        c.close()
    assert gone(mine)
    assert not c.dir.exists()
