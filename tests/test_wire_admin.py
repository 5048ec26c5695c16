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

from wire_helpers import known_everywhere, poll_until, ready_to_join, wait_until  # noqa: E402


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster():
    # Retention checked every 200 ms instead of Kafka's 5 minutes, so that tests see it act.
    with minikafka.launch(brokers=3, config={"group.initial.rebalance.delay.ms": 0,
                                             "offsets.topic.num.partitions": 3,
                                             "log.retention.check.interval.ms": 200}) as c:
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


# --- CreatePartitions -------------------------------------------------------------------------------------------


def partition_count(admin, topic):
    return len(admin.describe_topics([topic])[0]["partitions"])


def new_topic(admin, partitions=1, rf=3, **configs):
    from kafka.admin import NewTopic

    name = unique("t")
    admin.create_topics([NewTopic(name, partitions, rf, topic_configs=configs)])
    wait_until(lambda: partition_count(admin, name) == partitions, 20, f"{name} to exist")
    return name


def test_kafka_python_adds_partitions_and_a_producer_writes_to_them(cluster, admin):
    import kafka.errors as Errors

    topic = new_topic(admin, partitions=2)
    admin.create_partitions({topic: 5})
    described = admin.describe_topics([topic])[0]["partitions"]
    assert sorted(p["partition_index"] for p in described) == [0, 1, 2, 3, 4]
    assert all(len(p["replica_nodes"]) == 3 and p["leader_id"] >= 0 for p in described)
    # Only ever more: fewer or the same count is INVALID_PARTITIONS, an unknown topic says so.
    with pytest.raises(Errors.InvalidPartitionsError):
        admin.create_partitions({topic: 3})
    with pytest.raises(Errors.InvalidPartitionsError):
        admin.create_partitions({topic: 5})
    with pytest.raises(Errors.UnknownTopicOrPartitionError):
        admin.create_partitions({unique("nope"): 2})
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
    try:
        # the producer refreshes its metadata and writes to a new partition
        assert producer.send(topic, b"x", partition=4).get(timeout=30).partition == 4
    finally:
        producer.close()


def test_confluent_kafka_adds_partitions(cluster, admin):
    ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka (librdkafka) comes with the dev extra")
    from confluent_kafka.admin import AdminClient, NewPartitions

    topic = new_topic(admin, partitions=1, rf=2)
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    client.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=30)
    wait_until(lambda: partition_count(admin, topic) == 3, 20, f"{topic} to have 3 partitions")
    with pytest.raises(ck.KafkaException) as refused:
        client.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=30)
    assert refused.value.args[0].code() == ck.KafkaError.INVALID_PARTITIONS


# --- explicit replica assignments (kafka-topics --replica-assignment) ----------------------------------------------


def placement(admin, topic):
    """[(replicas, leader, isr)] per partition, in partition order, as Metadata answers."""
    described = sorted(admin.describe_topics([topic])[0]["partitions"], key=lambda p: p["partition_index"])
    return [(p["replica_nodes"], p["leader_id"], sorted(p["isr_nodes"])) for p in described]


def test_kafka_python_creates_a_topic_on_explicit_replicas_and_records_land_on_the_assigned_leaders(cluster, admin):
    from kafka.admin import NewTopic

    topic = unique("placed")
    assigned = {0: [1, 2], 1: [2, 3], 2: [3, 1]}
    result = admin.create_topics([NewTopic(topic, num_partitions=-1, replication_factor=-1,
                                           replica_assignments=assigned)])
    assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(topic, 0)]
    wait_until(lambda: known_everywhere(cluster, topic, 3), 20, f"{topic} on every broker")
    # the first of each list leads (the preferred leader), every listed broker is in the ISR
    assert placement(admin, topic) == [(r, r[0], sorted(r)) for r in assigned.values()]

    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    try:
        sent = [producer.send(topic, f"v{p}".encode(), partition=p).get(timeout=30) for p in assigned]
    finally:
        producer.close()
    assert [(m.partition, m.offset) for m in sent] == [(0, 0), (1, 0), (2, 0)]
    # acks=all: the record is in the leader's and the follower's log, and no other broker has the partition
    for p, replicas in assigned.items():
        holders = sorted(b for b in cluster.broker_ids if (cluster.dir / f"broker-{b}" / f"{topic}-{p}").is_dir())
        assert holders == sorted(replicas)
        for b in replicas:
            segments = list((cluster.dir / f"broker-{b}" / f"{topic}-{p}").glob("*.log"))
            assert f"v{p}".encode() in b"".join(s.read_bytes() for s in segments)
    consumer = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest")
    try:
        got = poll_until(consumer, 3)
    finally:
        consumer.close()
    assert sorted((r.partition, r.value) for r in got) == [(0, b"v0"), (1, b"v1"), (2, b"v2")]


@pytest.mark.parametrize("spec, code, message", [
    ({"num_partitions": 2, "assignments": {0: [1], 1: [2]}}, 42,
     "A manual partition assignment was specified, but numPartitions was not set to -1."),
    ({"replication_factor": 2, "assignments": {0: [1, 2]}}, 42,
     "A manual partition assignment was specified, but replication factor was not set to -1."),
    ({"assignments": {0: [1], 2: [2]}}, 39, "partitions should be a consecutive 0-based integer sequence"),
    ({"assignments": {0: [1, 2], 1: [3]}}, 39,
     "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with "
     "previous partitions, which have 2 replica(s)."),
    ({"assignments": {0: [2, 3, 2]}}, 39, "The manual partition assignment includes the broker 2 more than once."),
    ({"assignments": {0: [1, 9]}}, 39, "The manual partition assignment includes broker 9, but no such broker is "
                                       "registered."),
    ({"assignments": {0: []}}, 39, "The manual partition assignment includes an empty replica list."),
])
def test_kafka_python_gets_krafts_error_for_each_invalid_assignment(cluster, admin, spec, code, message):
    import kafka.errors as Errors

    topic = unique("refused")
    result = admin.create_topics({topic: spec}, raise_errors=False)
    assert [(t["name"], t["error_code"], t["error_message"]) for t in result["topics"]] == [(topic, code, message)]
    with pytest.raises({39: Errors.InvalidReplicationAssignmentError, 42: Errors.InvalidRequestError}[code]):
        admin.create_topics({topic: spec})
    assert topic not in admin.list_topics()


def test_kafka_python_adds_partitions_on_explicit_replicas(cluster, admin):
    import kafka.errors as Errors

    topic = new_topic(admin, partitions=1, rf=2)
    with pytest.raises(Errors.InvalidReplicationAssignmentError):  # two new partitions, one list
        admin.create_partitions({topic: {"count": 3, "assignments": [[3, 1]]}})
    refused = admin.create_partitions({topic: {"count": 2, "assignments": [[3, 3]]}}, raise_errors=False)
    assert [(r.error_code, r.error_message) for r in refused.results] == [
        (39, "The manual partition assignment includes the broker 3 more than once.")]
    admin.create_partitions({topic: {"count": 3, "assignments": [[3, 1], [2, 3]]}})
    wait_until(lambda: known_everywhere(cluster, topic, 3), 20, f"{topic}'s new partitions on every broker")
    assert placement(admin, topic)[1:] == [([3, 1], 3, [1, 3]), ([2, 3], 2, [2, 3])]
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    try:
        assert producer.send(topic, b"x", partition=2).get(timeout=30).partition == 2
    finally:
        producer.close()


def test_confluent_kafka_creates_a_topic_on_explicit_replicas(cluster, admin):
    ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka (librdkafka) comes with the dev extra")
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, refused = unique("rdkafka-placed"), unique("rdkafka-refused")
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    # librdkafka wants the partition count locally and sends -1 for both counts, as Kafka requires
    client.create_topics([NewTopic(topic, 2, replica_assignment=[[3, 2], [1, 3]])])[topic].result(timeout=30)
    wait_until(lambda: known_everywhere(cluster, topic, 2), 20, f"{topic} on every broker")
    assert placement(admin, topic) == [([3, 2], 3, [2, 3]), ([1, 3], 1, [1, 3])]
    with pytest.raises(ck.KafkaException) as error:
        client.create_topics([NewTopic(refused, 1, replica_assignment=[[1, 7]])])[refused].result(timeout=30)
    assert error.value.args[0].code() == ck.KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert "broker 7, but no such broker is registered" in error.value.args[0].str()


# --- IncrementalAlterConfigs / AlterConfigs ----------------------------------------------------------------------


def test_kafka_python_alters_topic_configs_and_the_running_log_takes_them(cluster, admin):
    from kafka.admin import ConfigResource, ConfigResourceType

    topic = new_topic(admin, partitions=1, rf=3)
    done = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                               {"retention.ms": "60000", "min.insync.replicas": "2"})])
    assert done == {"topic": {topic: "OK"}}
    described = describe(admin, topic)
    assert described["retention.ms"] == "60000" and described["min.insync.replicas"] == "2"
    refused = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {"min.insync.replicas": "0"})],
                                  raise_on_unknown=False)
    assert refused["topic"][topic].startswith("[Error 40] InvalidConfigurationError: min.insync.replicas must be >= 1")
    admin.reset_configs([ConfigResource(ConfigResourceType.TOPIC, topic, ["retention.ms"])])
    described = describe(admin, topic)
    assert described["retention.ms"] == str(7 * 24 * 3600 * 1000) and described["min.insync.replicas"] == "2"
    # The older AlterConfigs (no increments: the overrides become exactly the ones sent;
    # kafka-python adds the other dynamic ones it finds, so min.insync.replicas stays).
    assert admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {"segment.bytes": "2097152"})],
                               incremental=False) == {"topic": {topic: "OK"}}
    described = describe(admin, topic)
    assert described["segment.bytes"] == "2097152" and described["min.insync.replicas"] == "2"


def describe(admin, topic):
    """{key: value} of a topic's configs, as DescribeConfigs answers."""
    from kafka.admin import ConfigResource, ConfigResourceType

    result = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    return {key: entry["value"] for key, entry in result["topic"][topic].items()}


def test_confluent_kafka_alters_topic_configs_incrementally(cluster, admin):
    ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka (librdkafka) comes with the dev extra")
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    topic = new_topic(admin, partitions=1, rf=1)
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    for future in client.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    # The controller committed the change when the futures returned; the broker kafka-python asks
    # answers from its own copy of the metadata log, which follows a moment later (as in Kafka).
    seen = {}

    def applied():
        seen.update(describe(admin, topic))
        return seen["segment.bytes"] == "1048576"
    wait_until(applied, 20, f"{topic}'s new segment.bytes to reach the metadata of the broker asked")
    assert seen["cleanup.policy"] == "compact,delete"  # canonical order
    bad = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("no.such.key", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(ck.KafkaException) as refused:
        for future in client.incremental_alter_configs([bad]).values():
            future.result(timeout=30)
    assert refused.value.args[0].code() == ck.KafkaError.INVALID_CONFIG


# --- retention on a running cluster --------------------------------------------------------------------------


def test_retention_bytes_set_on_a_running_topic_deletes_old_segments_and_a_consumer_behind_is_reset(cluster, admin):
    from kafka import TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType

    topic = new_topic(admin, partitions=1, rf=3, **{"segment.bytes": "1024"})
    tp = TopicPartition(topic, 0)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=0)
    try:
        for i in range(200):  # one batch each (a segment rolls between batches, never inside one)
            producer.send(topic, b"%03d" % i + b"." * 60, partition=0).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        consumer.assign([tp])
        assert consumer.beginning_offsets([tp])[tp] == 0
        assert admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.bytes": "2048"})]) \
            == {"topic": {topic: "OK"}}
        # The brokers' retention timer deletes whole segments; the log start offset moves.
        start = wait_until(lambda: consumer.beginning_offsets([tp])[tp] or None, 30, "the log start offset to move")
        assert 0 < start < 200
        # A consumer at offset 0, now below the log start, gets OFFSET_OUT_OF_RANGE and
        # auto.offset.reset=earliest moves it to the log start.
        consumer.seek(tp, 0)
        records = poll_until(consumer, 1)
        assert records[0].offset >= start and records[0].value.startswith(b"%03d" % records[0].offset)
    finally:
        consumer.close()


# --- DeleteRecords -----------------------------------------------------------------------------------------------


def produce_one_batch_each(cluster, topic, n):
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=0)
    try:
        for i in range(n):
            producer.send(topic, b"%03d" % i, partition=0).get(timeout=30)
    finally:
        producer.close()


def test_kafka_python_deletes_records_and_a_consumer_below_the_log_start_is_reset(cluster, admin):
    import kafka.errors as Errors
    from kafka import TopicPartition

    topic = new_topic(admin, partitions=1, rf=3)
    produce_one_batch_each(cluster, topic, 20)
    tp = TopicPartition(topic, 0)
    result = admin.delete_records({tp: 12})
    assert result[tp]["low_watermark"] == 12
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        consumer.assign([tp])
        assert consumer.beginning_offsets([tp])[tp] == 12
        consumer.seek(tp, 0)  # OFFSET_OUT_OF_RANGE, then auto.offset.reset=earliest
        records = poll_until(consumer, 8)
        assert [r.offset for r in records] == list(range(12, 20))
    finally:
        consumer.close()
    with pytest.raises(Errors.OffsetOutOfRangeError):
        admin.delete_records({tp: 21})


def test_confluent_kafka_deletes_records(cluster, admin):
    ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka (librdkafka) comes with the dev extra")
    from confluent_kafka.admin import AdminClient

    topic = new_topic(admin, partitions=1, rf=2)
    produce_one_batch_each(cluster, topic, 10)
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = client.delete_records([ck.TopicPartition(topic, 0, 6)])
    [deleted] = [f.result(timeout=30) for f in futures.values()]
    assert deleted.low_watermark == 6
    c = ck.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": unique("g"),
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        low, high = c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)
        assert (low, high) == (6, 10)
    finally:
        c.close()


# --- OffsetForLeaderEpoch (KIP-320) --------------------------------------------------------------------------------


def offset_for_leader_epoch(cluster, broker, topic, current_epoch, epoch):
    from kafka.protocol.consumer import OffsetForLeaderEpochRequest as R

    from wire_helpers import RawConnection

    P = R.OffsetForLeaderTopic.OffsetForLeaderPartition
    request = R(replica_id=-1, topics=[R.OffsetForLeaderTopic(topic=topic, partitions=[
        P(partition=0, current_leader_epoch=current_epoch, leader_epoch=epoch)])])
    with RawConnection((cluster.host, cluster.ports[broker])) as conn:
        [p] = conn.request(request, 3).topics[0].partitions
        return p.error_code, p.leader_epoch, p.end_offset


def test_positions_are_validated_after_a_leader_change_by_both_clients(cluster, admin):
    """Kill the leader: the new one answers OffsetForLeaderEpoch with where each epoch ended,
    fences a stale epoch, and kafka-python's and librdkafka's consumers, which validate
    their positions with it after the change, go on reading where they were."""
    ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka (librdkafka) comes with the dev extra")
    from kafka import TopicPartition

    from wire_helpers import leader_of, tolerant

    topic = new_topic(admin, partitions=1, rf=3)
    produce_one_batch_each(cluster, topic, 10)
    tp = TopicPartition(topic, 0)
    old_leader = leader_of(admin, topic)
    assert offset_for_leader_epoch(cluster, old_leader, topic, 0, 0) == (0, 0, 10)  # the current epoch: the log end
    kp = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                       enable_auto_commit=False)
    rd = ck.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": unique("g"),
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        kp.assign([tp])
        assert [r.offset for r in poll_until(kp, 10)] == list(range(10))
        rd.assign([ck.TopicPartition(topic, 0, 0)])
        got = []
        wait_until(lambda: got.extend(m for m in [rd.poll(0.2)] if m is not None and m.error() is None)
                   or len(got) >= 10, 30, "librdkafka to read 10 records")
        cluster.kill(old_leader)
        try:
            new_leader = wait_until(lambda: (lambda b: b if b not in (None, -1, old_leader) else None)(
                tolerant(lambda: leader_of(admin, topic))), 30, "a new leader")
            code, epoch, end = offset_for_leader_epoch(cluster, new_leader, topic, 1, 0)
            assert (code, epoch, end) == (0, 0, 10)  # epoch 0 ended where epoch 1 began
            assert offset_for_leader_epoch(cluster, new_leader, topic, 0, 0)[0] == 74  # FENCED_LEADER_EPOCH
            assert offset_for_leader_epoch(cluster, new_leader, topic, 9, 0)[0] == 75  # UNKNOWN_LEADER_EPOCH
            produce_one_batch_each(cluster, topic, 5)
            assert [r.offset for r in poll_until(kp, 5)] == list(range(10, 15))
            wait_until(lambda: got.extend(m for m in [rd.poll(0.2)] if m is not None and m.error() is None)
                       or len(got) >= 15, 30, "librdkafka to read 15 records")
            assert [m.offset() for m in got] == list(range(15))
        finally:
            cluster.restart(old_leader)
            cluster.wait_until_ready()
    finally:
        kp.close()
        rd.close()


# --- OffsetDelete ------------------------------------------------------------------------------------------------


def test_kafka_python_deletes_a_groups_committed_offsets_unless_a_member_subscribes(cluster, admin):
    import kafka.errors as Errors
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    topic, other, group = new_topic(admin, partitions=2, rf=1), new_topic(admin, partitions=1, rf=1), unique("g")
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(5, "", -1),
                         TopicPartition(topic, 1): OffsetAndMetadata(7, "", -1),
                         TopicPartition(other, 0): OffsetAndMetadata(3, "", -1)})
    finally:
        consumer.close()
    result = admin.delete_group_offsets(group, [TopicPartition(topic, 0)])
    assert result == {TopicPartition(topic, 0): Errors.NoError}
    offsets = admin.list_group_offsets([group])[group] if hasattr(admin, "list_group_offsets") else \
        admin.list_consumer_group_offsets(group)
    assert {tp.partition for tp in offsets if tp.topic == topic} == {1}
    # A member subscribed to `other`: its offsets are in use and stay. (It joins once every broker
    # knows `other`: a group leader whose metadata lacks a topic assigns nothing of it.)
    wait_until(lambda: known_everywhere(cluster, other, 1), 20, f"{other} in every broker's metadata")
    member = ready_to_join(KafkaConsumer(other, bootstrap_servers=cluster.bootstrap_servers, group_id=group,
                                         enable_auto_commit=False), other, 1)
    try:
        wait_until(lambda: member.poll(timeout_ms=200) is not None and member.assignment(), 30, "the member's assignment")
        result = admin.delete_group_offsets(group, [TopicPartition(other, 0), TopicPartition(topic, 1)])
        assert result == {TopicPartition(other, 0): Errors.GroupSubscribedToTopicError,
                          TopicPartition(topic, 1): Errors.NoError}
    finally:
        member.close()
    with pytest.raises(Errors.GroupIdNotFoundError):
        admin.delete_group_offsets(unique("nobody"), [TopicPartition(topic, 0)])
