"""The course's own clients over TCP: ``minikafka.KafkaProducer``, ``KafkaConsumer`` and
``KafkaAdminClient``, the state machines the simulation drives, against real broker processes
(``launch()`` and a lone ``minikafka server``), with kafka-python as the independent witness
of what they did. Every wait is for a Kafka state (an acknowledged offset, a committed offset,
a record read), never a sleep."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

pytest.importorskip("kafka")

import kafka  # noqa: E402

from minikafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, NewTopic  # noqa: E402
from minikafka import messages as m  # noqa: E402
from minikafka.errors import (  # noqa: E402
    KafkaConfigurationError,
    KafkaConnectionError,
    KafkaTimeoutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from minikafka.topic import OffsetAndMetadata, TopicPartition  # noqa: E402
from minikafka.wire import client_codec as cc  # noqa: E402
from minikafka.wire import codec  # noqa: E402
from minikafka.wire.client_runtime import WireCluster  # noqa: E402
from minikafka.wire.process import PORTS_RESERVED_ENV, launch, reserve_port, wait_for_port  # noqa: E402

from wire_helpers import known_everywhere, wait_until  # noqa: E402

CONFIG = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def poll_values(consumer: KafkaConsumer, count: int, polls: int = 60) -> list[bytes]:
    """Poll (each poll waits up to a second for records) until ``count`` values came."""
    got: list[bytes] = []
    for _ in range(polls):
        for records in consumer.poll(timeout_ms=1000).values():
            got.extend(r.value for r in records)
        if len(got) >= count:
            return got
    raise AssertionError(f"got {len(got)} of {count} records in {polls} polls")


def witness_values(bootstrap: str, topic: str) -> list[bytes]:
    """Every record of ``topic``, read by kafka-python (not our code)."""
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                   enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        parts = [kafka.TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(parts)
        ends = consumer.end_offsets(parts)
        out = []
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            for records in consumer.poll(timeout_ms=1000).values():
                out.extend(r.value for r in records)
        return out
    finally:
        consumer.close()


# --- the codec: a client's dataclass, through the broker's codec and back, unchanged ------------------------

_ROUND_TRIPS = [
    (m.MetadataRequest(5, ("a", "b"), True),
     m.MetadataResponse(5, (1, 2), 1, (m.TopicMetadata("a", 0, (m.PartitionMetadata(0, 0, 1, 3, (1, 2), (1,)),)),))),
    (m.ProduceRequest(6, -1, 3000, (m.ProducePartition("a", 0, b"opaque batch bytes"),)),
     m.ProduceResponse(6, (m.ProducePartitionResponse("a", 0, 0, 7, 0),))),
    (m.FetchRequest(7, -1, 500, 1, (m.FetchPartition("a", 0, 3),), isolation_level=1),
     m.FetchResponse(7, (m.FetchPartitionResponse("a", 0, 0, 9, 0, b"", None, 9, ((4, 5),)),))),
    (m.ListOffsetsRequest(8, (("a", 0, -1),)), m.ListOffsetsResponse(8, (("a", 0, 0, -1, 9),))),
    (m.InitProducerIdRequest(9), m.InitProducerIdResponse(9, 0, 4000, 0)),
    (m.FindCoordinatorRequest(10, "g"), m.FindCoordinatorResponse(10, 0, 2)),
    (m.JoinGroupRequest(11, "g", 10000, 30000, "", "consumer", (("range", b"s"),), client_id="cl"),
     m.JoinGroupResponse(11, 0, 1, "range", "m1", "m1", (("m1", b"s"),))),
    (m.SyncGroupRequest(12, "g", 1, "m1", (("m1", b"a"),)), m.SyncGroupResponse(12, 0, b"a")),
    (m.HeartbeatRequest(13, "g", 1, "m1"), m.HeartbeatResponse(13, m.REBALANCE_IN_PROGRESS)),
    (m.LeaveGroupRequest(14, "g", "m1"), m.LeaveGroupResponse(14, 0)),
    (m.OffsetCommitRequest(15, "g", 1, "m1", (m.OffsetCommitPartition("a", 0, 5, 2, ""),)),
     m.OffsetCommitResponse(15, (("a", 0, 0),))),
    (m.OffsetFetchRequest(16, "g", (("a", 0),)), m.OffsetFetchResponse(16, 0, (m.OffsetFetchPartition("a", 0, 5, 2, ""),))),
    (m.CreateTopicsRequest(17, (m.TopicConfig("t", 3, 1, (("retention.ms", "5"),)),)),
     m.CreateTopicsResponse(17, (("t", 0, None),))),
    (m.DeleteTopicsRequest(18, ("t",)), m.DeleteTopicsResponse(18, (("t", 0, None),))),
    (m.CreatePartitionsRequest(19, (("t", 5),)), m.CreatePartitionsResponse(19, (("t", 0, None),))),
    (m.ListGroupsRequest(20), m.ListGroupsResponse(20, 0, (("g", "consumer", ""),))),
    (m.DescribeGroupsRequest(21, ("g",)), m.DescribeGroupsResponse(21, (m.DescribedGroup(
        0, "g", "Stable", "consumer", "range", (m.DescribedMember("m1", "cl", "/1", b"s", b"a"),)),))),
    (m.DeleteGroupsRequest(22, ("g",)), m.DeleteGroupsResponse(22, (("g", 0),))),
    (m.ProduceRequest(23, -1, 3000, (m.ProducePartition("a", 1, b"transactional batch"),), "tx"),
     m.ProduceResponse(23, (m.ProducePartitionResponse("a", 1, 0, 3, 0),))),
    (m.AddPartitionsToTxnRequest(24, "tx", 4000, 1, (("a", 0), ("a", 1), ("b", 0))),
     m.AddPartitionsToTxnResponse(24, (("a", 0, 0), ("a", 1, 0), ("b", 0, m.CONCURRENT_TRANSACTIONS)))),
    (m.AddOffsetsToTxnRequest(25, "tx", 4000, 1, "g"), m.AddOffsetsToTxnResponse(25, 0)),
    (m.EndTxnRequest(26, "tx", 4000, 1, False), m.EndTxnResponse(26, m.PRODUCER_FENCED)),
    (m.TxnOffsetCommitRequest(27, "tx", "g", 4000, 1, (m.OffsetCommitPartition("a", 0, 5, 2, "meta"),)),
     m.TxnOffsetCommitResponse(27, (("a", 0, 0),))),
    (m.DescribeConfigsRequest(28, ((2, "a", ("retention.ms",)), (4, "1", None))),
     m.DescribeConfigsResponse(28, ((2, "a", 0, None, (("retention.ms", "60000", False, False, False),)),
                                    (4, "1", 0, None, (("log.dirs", "/d", True, True, False),
                                                       ("sasl.jaas.config", None, False, True, True)))))),
    (m.AlterConfigsRequest(29, ((2, "a", (("retention.ms", m.CONFIG_SET, "5"), ("segment.ms", m.CONFIG_DELETE, None))),)),
     m.AlterConfigsResponse(29, ((2, "a", m.INVALID_CONFIG, "segment.ms: no such key"),))),
    (m.AlterConfigsRequest(30, ((2, "a", (("retention.ms", m.CONFIG_SET, "5"),)),), incremental=False),
     m.AlterConfigsResponse(30, ((2, "a", 0, None),))),
    (m.DeleteRecordsRequest(31, (("a", 0, 5), ("a", 1, -1)), 1000),
     m.DeleteRecordsResponse(31, (("a", 0, 5, 0), ("a", 1, -1, m.NOT_LEADER_OR_FOLLOWER)))),
    (m.OffsetDeleteRequest(32, "g", (("a", 0),)), m.OffsetDeleteResponse(32, 0, (("a", 0, m.GROUP_SUBSCRIBED_TO_TOPIC),))),
    # static membership (KIP-345): the instance id travels with every group request that has it
    (m.JoinGroupRequest(33, "g", 10000, 30000, "", "consumer", (("range", b"s"),), client_id="cl",
                        group_instance_id="truck-a"),
     m.JoinGroupResponse(33, 0, 1, "range", "m1", "m1", (("m1", b"s"), ("m2", b"s")), ("truck-a", None))),
    (m.SyncGroupRequest(34, "g", 1, "m1", (), "truck-a"), m.SyncGroupResponse(34, m.FENCED_INSTANCE_ID)),
    (m.HeartbeatRequest(35, "g", 1, "m1", "truck-a"), m.HeartbeatResponse(35, m.FENCED_INSTANCE_ID)),
    (m.LeaveGroupRequest(36, "g", "m1", "truck-a"), m.LeaveGroupResponse(36, 0)),
    (m.OffsetCommitRequest(37, "g", 1, "m1", (m.OffsetCommitPartition("a", 0, 5, 2, ""),), "truck-a"),
     m.OffsetCommitResponse(37, (("a", 0, m.FENCED_INSTANCE_ID),))),
    (m.DescribeGroupsRequest(38, ("g",)), m.DescribeGroupsResponse(38, (m.DescribedGroup(
        0, "g", "Stable", "consumer", "range", (m.DescribedMember("m1", "cl", "/1", b"s", b"a", "truck-a"),)),))),
]


@pytest.mark.parametrize("request_, response", _ROUND_TRIPS, ids=lambda x: type(x).__name__)
def test_every_client_request_and_answer_survive_the_broker_codec_unchanged(request_, response):
    """At the version a minikafka broker negotiates (the highest both speak), what a client
    state machine sends is what the broker's state machine receives, and the broker's answer is
    what the client's state machine reads: the two codecs are each other's inverse."""
    key = cc.api_key_of(request_)
    version = cc.negotiate(codec.SUPPORTED)[key]
    assert version == codec.SUPPORTED[key][1]
    decoded = codec.decode_request(cc.encode_client_request(request_, version, client_id="cl")[4:])
    assert decoded.messages == (request_,)
    frame = codec.encode_response(decoded, response, context=codec.BrokerContext(1, {1: ("h", 9), 2: ("g", 8)}))
    answer = cc.decode_client_response(key, version, frame[4:])
    assert answer.message == response
    if key == codec.METADATA:
        assert answer.brokers == {1: ("h", 9), 2: ("g", 8)}  # the addresses, for the runtime


def test_a_request_the_runtime_does_not_carry_and_a_bad_frame_are_named():
    with pytest.raises(TypeError, match="DescribeQuorumRequest is not sent over TCP"):  # a controller's API
        cc.api_key_of(m.DescribeQuorumRequest(1))
    with pytest.raises(codec.FrameError, match="Heartbeat v3 response"):
        cc.decode_client_response(codec.HEARTBEAT, 3, b"\x00\x00\x00\x01\x00")  # one byte short


# --- addresses: refused by name, unreachable ones named -----------------------------------------------------


@pytest.mark.parametrize("client", [KafkaProducer, KafkaConsumer, KafkaAdminClient])
def test_a_bad_address_is_refused_by_name_and_an_unreachable_one_is_named(client):
    with pytest.raises(KafkaConfigurationError, match="bad bootstrap_servers entry 'broker1'"):
        client(bootstrap_servers="127.0.0.1:9092,broker1")
    with pytest.raises(KafkaConfigurationError, match="must be a minikafka Cluster, a launch"):
        client(bootstrap_servers={"host": "127.0.0.1"})
    # A bound port that does not listen refuses connections, and nothing else can take it.
    held = [reserve_port(), reserve_port()]
    try:
        addresses = [f"127.0.0.1:{s.getsockname()[1]}" for s in held]
        with pytest.raises(KafkaConnectionError) as caught:
            client(bootstrap_servers=addresses)
        assert str(caught.value).startswith("no broker reachable at bootstrap_servers: ")
        for address in addresses:
            assert f"{address} (" in str(caught.value)
    finally:
        for s in held:
            s.close()


# --- a launch() cluster ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    with launch(brokers=3, config=CONFIG) as c:
        yield c


def test_admin_creates_describes_and_deletes_topics(cluster):
    admin = KafkaAdminClient(bootstrap_servers=cluster)  # the LocalCluster itself
    topic = unique("fleet")
    try:
        assert admin.create_topics([NewTopic(topic, 3, 3, topic_configs={"min.insync.replicas": "2"})]) == {
            "topics": [{"name": topic, "error_code": 0, "error_message": None}]}
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic, 1, 1)])
        (described,) = admin.describe_topics([topic])
        assert [p["partition_index"] for p in described["partitions"]] == [0, 1, 2]
        for p in described["partitions"]:
            assert sorted(p["replica_nodes"]) == sorted(cluster.broker_ids) and p["leader_id"] in p["isr_nodes"]
        witness = kafka.KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        try:
            assert topic in witness.list_topics()
            assert admin.delete_topics([topic]) == {"topics": [{"name": topic, "error_code": 0, "error_message": None}]}
            assert topic not in admin.list_topics()
            wait_until(lambda: topic not in witness.list_topics(), 30, f"every broker to forget {topic}")
        finally:
            witness.close()
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics([topic])
    finally:
        admin.close()


def test_producer_with_acks_all_writes_what_kafka_python_reads(cluster):
    topic = unique("acks-all")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    admin.create_topics([NewTopic(topic, 2, 3)])
    admin.close()
    # A list of addresses, as kafka-python takes, the first one dead: the bootstrap goes on.
    dead = reserve_port()
    try:
        producer = KafkaProducer(bootstrap_servers=[f"127.0.0.1:{dead.getsockname()[1]}", cluster.bootstrap_servers],
                                 acks="all", linger_ms=5)
    finally:
        dead.close()
    futures = [producer.send(topic, key=b"truck-%d" % (i % 4), value=b"%d" % i) for i in range(40)]
    producer.flush()
    metadata = [f.get(timeout=10) for f in futures]
    producer.close()
    by_partition: dict[int, list[int]] = {}
    for md in metadata:
        by_partition.setdefault(md.partition, []).append(md.offset)
    assert all(offsets == list(range(len(offsets))) for offsets in by_partition.values())  # in order, no gaps
    assert sorted(witness_values(cluster.bootstrap_servers, topic), key=int) == [b"%d" % i for i in range(40)]


def test_a_producer_over_tcp_asks_the_brokers_to_create_a_topic_they_do_not_know(cluster):
    # As kafka-python's and Java's producers do (allow_auto_create_topics, default on), and the
    # brokers' auto.create.topics.enable (on, as in Kafka) lets them: the first send waits for it.
    topic = unique("auto")
    producer = KafkaProducer(bootstrap_servers=cluster, acks="all")
    try:
        assert producer.send(topic, value=b"first").get(timeout=30).offset == 0
    finally:
        producer.close()
    assert witness_values(cluster.bootstrap_servers, topic) == [b"first"]
    # Told not to ask, it waits max_block_ms for a topic nobody creates, then says how to create it.
    producer = KafkaProducer(bootstrap_servers=cluster, allow_auto_create_topics=False, max_block_ms=500)
    try:
        with pytest.raises(KafkaTimeoutError, match=r"allow_auto_create_topics=False: create it first: "
                                                    r"KafkaAdminClient\(...\)\.create_topics"):
            producer.send(unique("not-auto"), value=b"never")
    finally:
        producer.close()


@pytest.mark.parametrize("acks", [0, 1])
def test_producer_with_acks_0_and_1_over_tcp(cluster, acks):
    """acks=0 gets no answer at all (Kafka sends none), acks=1 the leader's; both arrive once
    the leader knows the partition. (An acks=0 Produce that reaches a broker before the metadata
    log has -- NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION -- is lost with no word to the
    producer: that is what acks=0 means, so the test starts from the state where it cannot be.)"""
    topic = unique(f"acks-{acks}")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    admin.create_topics([NewTopic(topic, 1, 3)])
    admin.close()
    wait_until(lambda: known_everywhere(cluster, topic, 1), 30, f"{topic} in every broker's metadata")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=acks)
    assert producer.config["enable_idempotence"] is (acks == -1)  # quietly off, as kafka-python
    futures = [producer.send(topic, value=b"%d" % i) for i in range(5)]
    producer.flush()
    offsets = [f.get(timeout=10).offset for f in futures]
    producer.close()
    assert offsets == ([-1] * 5 if acks == 0 else [0, 1, 2, 3, 4])  # acks=0: no offset known
    wait_until(lambda: len(witness_values(cluster.bootstrap_servers, topic)) == 5, 30, "the 5 records")
    assert witness_values(cluster.bootstrap_servers, topic) == [b"%d" % i for i in range(5)]


def test_a_transactional_producer_commits_and_aborts_over_tcp(cluster):
    """Lecture 07's transactional producer against real processes: what it commits (records
    and a group's offsets) is read by kafka-python's read_committed consumer, what it aborts
    is not; a read_uncommitted reader sees both, the markers take offsets of their own."""
    topic, group = unique("txn"), unique("txn-group")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    admin.create_topics([NewTopic(topic, 1, 3, topic_configs={"min.insync.replicas": "2"})])
    admin.close()
    wait_until(lambda: known_everywhere(cluster, topic, 1), 30, f"{topic} in every broker's metadata")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=unique("tx"))
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(3):
        producer.send(topic, value=b"kept-%d" % i)
    producer.send_offsets_to_transaction({TopicPartition(topic, 0): OffsetAndMetadata(7, "", -1)}, group)
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(2):
        producer.send(topic, value=b"dropped-%d" % i)
    producer.flush()
    producer.abort_transaction()
    producer.close()

    def read(isolation: str) -> list[tuple[int, bytes]]:
        consumer = kafka.KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, isolation_level=isolation,
                                       auto_offset_reset="earliest", enable_auto_commit=False)
        try:
            tp = kafka.TopicPartition(topic, 0)
            consumer.assign([tp])
            end = consumer.end_offsets([tp])[tp]
            out = []
            while consumer.position(tp) < end:
                out.extend((r.offset, r.value) for r in consumer.poll(timeout_ms=1000).get(tp, []))
            return out
        finally:
            consumer.close()

    # 3 records, a commit marker (offset 3), 2 records, an abort marker (offset 6)
    assert read("read_committed") == [(0, b"kept-0"), (1, b"kept-1"), (2, b"kept-2")]
    assert read("read_uncommitted") == [(0, b"kept-0"), (1, b"kept-1"), (2, b"kept-2"),
                                        (4, b"dropped-0"), (5, b"dropped-1")]
    witness = kafka.KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        offsets = witness.list_group_offsets(group)[group]
        assert {(tp.topic, tp.partition): o.offset for tp, o in offsets.items()} == {(topic, 0): 7}
    finally:
        witness.close()


def test_admin_alters_configs_and_deletes_records_over_tcp(cluster):
    """What kafka-python then reads: the topic's new retention.ms, and a log start offset
    moved to where the records were deleted."""
    from minikafka.clients.admin import ConfigResource

    topic = unique("admin-io")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        admin.create_topics([NewTopic(topic, 1, 3)])
        wait_until(lambda: known_everywhere(cluster, topic, 1), 30, f"{topic} in every broker's metadata")
        assert admin.alter_configs([ConfigResource("topic", topic, {"retention.ms": "3600000"})]) == \
            {"topic": {topic: "OK"}}
        refused = admin.alter_configs([ConfigResource("topic", topic, {"retention.ms": "soon"})])
        assert refused["topic"][topic].startswith("[Error 40] InvalidConfigurationError")
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
        for i in range(10):
            producer.send(topic, value=b"%d" % i)
        producer.flush()
        producer.close()
        assert admin.delete_records({TopicPartition(topic, 0): 4}) == {TopicPartition(topic, 0): {"low_watermark": 4}}
    finally:
        admin.close()
    witness = kafka.KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        described = witness.describe_configs([kafka.admin.ConfigResource("TOPIC", topic)], config_filter="all")
        retention = described["topic"][topic]["retention.ms"]
        assert (retention["value"], retention["config_source"]) == ("3600000", "DYNAMIC_TOPIC_CONFIG")
    finally:
        witness.close()
    assert witness_values(cluster.bootstrap_servers, topic) == [b"%d" % i for i in range(4, 10)]


def test_admin_adds_partitions_and_lists_and_deletes_a_group(cluster):
    topic, group = unique("grow"), unique("idle")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        admin.create_topics([NewTopic(topic, 1, 2)])
        assert admin.create_partitions({topic: 3}) == {topic: "OK"}
        assert [p["partition_index"] for p in admin.describe_topics([topic])[0]["partitions"]] == [0, 1, 2]
        consumer = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id=group)
        for _ in range(30):  # until the group has given it the partitions
            consumer.poll(timeout_ms=1000)
            if consumer.assignment():
                break
        assert consumer.assignment() == {TopicPartition(topic, p) for p in range(3)}
        consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(0, "", -1)})
        consumer.close()
        assert (group, "consumer") in admin.list_consumer_groups()
        admin.delete_consumer_groups([group])
        assert group not in [g for g, _ in admin.list_consumer_groups()]
    finally:
        admin.close()


def test_a_group_commits_and_a_new_consumer_resumes_from_the_committed_offsets(cluster):
    topic, group = unique("resume"), unique("dispatch")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    admin.create_topics([NewTopic(topic, 1, 3)])  # (our producer does not ask Metadata to auto-create)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    for i in range(10):
        producer.send(topic, value=b"first-%d" % i)
    producer.flush()

    first = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id=group,
                          auto_offset_reset="earliest", enable_auto_commit=False)
    assert sorted(poll_values(first, 10)) == sorted(b"first-%d" % i for i in range(10))
    assert first.assignment() == {TopicPartition(topic, 0)}
    first.commit()
    assert first.committed(TopicPartition(topic, 0)) == 10
    first.close()
    witness = kafka.KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        offsets = witness.list_group_offsets(group)[group]
        assert {(tp.topic, tp.partition): o.offset for tp, o in offsets.items()} == {(topic, 0): 10}
    finally:
        witness.close()

    for i in range(5):
        producer.send(topic, value=b"second-%d" % i)
    producer.flush()
    producer.close()
    second = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id=group,
                           auto_offset_reset="earliest", enable_auto_commit=True)
    assert poll_values(second, 5) == [b"second-%d" % i for i in range(5)]  # nothing of the first 10 again
    second.close()  # auto commit on close
    try:
        assert admin.list_consumer_group_offsets(group)[TopicPartition(topic, 0)].offset == 15
        (described,) = admin.describe_consumer_groups([group])
        assert described.state == "Empty" and described.members == []
    finally:
        admin.close()


def test_the_consumer_lists_topics_through_the_runtime(cluster):
    topic = unique("listed")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers)
    try:
        assert topic in consumer.topics() and "__consumer_offsets" not in consumer.topics()
        assert consumer.partitions_for_topic(topic) == {0}
    finally:
        consumer.close()
    assert isinstance(consumer._cluster, WireCluster)


# --- a lone `minikafka server` (Kafka 4's combined mode) ---------------------------------------------------------


def test_a_lone_server_serves_the_course_clients(tmp_path):
    held = [reserve_port(), reserve_port()]
    port, controller_port = (s.getsockname()[1] for s in held)
    proc = subprocess.Popen([sys.executable, "-m", "minikafka.cli", "server", "--port", str(port),
                             "--controller-port", str(controller_port), "--log-dir", str(tmp_path / "data"),
                             "--exit-with-parent", "--override", "group.initial.rebalance.delay.ms=0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, PORTS_RESERVED_ENV: "1"})
    bootstrap = f"127.0.0.1:{port}"
    try:
        wait_for_port("127.0.0.1", port, 30, proc)
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        topic = "quickstart-events"
        admin.create_topics([NewTopic(topic, 2, 1)], timeout_ms=30_000)  # retried while the controller elects itself
        assert [p["leader_id"] for p in admin.describe_topics([topic])[0]["partitions"]] == [1, 1]
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        offsets = [producer.send(topic, key=b"k", value=b"event-%d" % i).get(timeout=10).offset for i in range(6)]
        assert offsets == list(range(6))  # one key: one partition, in order
        producer.close()
        consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="quickstart",
                                 auto_offset_reset="earliest")
        assert poll_values(consumer, 6) == [b"event-%d" % i for i in range(6)]
        consumer.close()
        assert sum(o.offset for o in admin.list_consumer_group_offsets("quickstart").values()) == 6
        admin.delete_topics([topic])
        assert topic not in admin.list_topics()
        admin.close()
    finally:
        proc.kill()
        proc.wait()
        for s in held:
            s.close()


def test_the_session_timeout_kafka_python_sees(cluster):
    """kafka-python 3.0.12 guesses the broker's version from the API versions minikafka
    advertises, and picks its session timeout from that guess (README)."""
    consumer = kafka.KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers)
    try:
        assert consumer.config["api_version"] == (2, 4)
        assert consumer.config["session_timeout_ms"] == 30000
    finally:
        consumer.close()
