"""Changing a running cluster as Kafka users do, in the simulated world (seeded, simulated
time): topics auto-created by a Metadata request that allows it.

The same operations over TCP, with kafka-python and confluent-kafka, are in
``test_wire_admin.py``.
"""

from __future__ import annotations

import pytest

from minikafka.cluster import Cluster
from minikafka.messages import (
    INVALID_TOPIC_EXCEPTION,
    LEADER_NOT_AVAILABLE,
    NO_ERROR,
    UNKNOWN_TOPIC_OR_PARTITION,
    MetadataRequest,
)
from sim_helpers import request

FAST = {"replica.lag.time.max.ms": 10_000, "request.timeout.ms": 10_000}


@pytest.fixture
def make_cluster(tmp_path):
    made = []

    def make(brokers=3, *, seed=1, config=FAST, **kw):
        c = Cluster(brokers, seed=seed, config=config, dir=tmp_path / f"cluster-{len(made)}", **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def errors(answer):
    return {t.name: t.error for t in answer.topics}


# --- auto-creation ------------------------------------------------------------------------------------------


def test_a_metadata_request_that_allows_it_creates_an_unknown_topic_with_the_broker_defaults(make_cluster):
    c = make_cluster(3, config={**FAST, "num.partitions": 2, "default.replication.factor": 3})
    assert c.run_until(lambda: len(c.broker(1).live_brokers) == 3, 10_000)
    first = request(c, 1, lambda k: MetadataRequest(k, ("orders",), allow_auto_topic_creation=True))
    assert errors(first) == {"orders": LEADER_NOT_AVAILABLE}  # what Kafka answers while it creates
    assert c.run_until(lambda: "orders" in c.broker(1).topics, 10_000)
    later = request(c, 1, lambda k: MetadataRequest(k, ("orders",), allow_auto_topic_creation=True))
    assert errors(later) == {"orders": NO_ERROR}
    assert [len(p.replicas) for p in later.topics[0].partitions] == [3, 3]


def test_the_replication_factor_is_capped_at_the_live_brokers(make_cluster):
    c = make_cluster(1, config={**FAST, "default.replication.factor": 3})
    assert c.run_until(lambda: c.broker(1).live_brokers == (1,), 10_000)
    request(c, 1, lambda k: MetadataRequest(k, ("t",), allow_auto_topic_creation=True))
    assert c.run_until(lambda: "t" in c.broker(1).topics, 10_000)
    assert c.broker(1).topics["t"].replication_factor == 1


def test_no_auto_creation_unless_the_client_allows_it_and_the_broker_is_configured_to(make_cluster):
    c = make_cluster(1)
    assert errors(request(c, 1, lambda k: MetadataRequest(k, ("a",)))) == {"a": UNKNOWN_TOPIC_OR_PARTITION}
    off = make_cluster(1, config={**FAST, "auto.create.topics.enable": False})
    answer = request(off, 1, lambda k: MetadataRequest(k, ("b",), allow_auto_topic_creation=True))
    assert errors(answer) == {"b": UNKNOWN_TOPIC_OR_PARTITION}
    c.advance(2_000)
    off.advance(2_000)
    assert "a" not in c.broker(1).topics and "b" not in off.broker(1).topics


def test_an_illegal_name_is_invalid_never_created(make_cluster):
    c = make_cluster(1)
    names = ("bad/name", "..", "__cluster_metadata")
    answer = request(c, 1, lambda k: MetadataRequest(k, names, allow_auto_topic_creation=True))
    assert errors(answer) == {"bad/name": INVALID_TOPIC_EXCEPTION, "..": INVALID_TOPIC_EXCEPTION,
                              "__cluster_metadata": UNKNOWN_TOPIC_OR_PARTITION}
    c.advance(2_000)
    assert not set(names) & set(c.broker(1).topics)


# --- CreateTopics with explicit replicas (kafka-topics --replica-assignment) -------------------------------


def log_values(c, broker, topic, partition):
    replica = c.replica(broker, topic, partition)
    data = replica.log.read(replica.log.log_start_offset, 1 << 30)
    return [r.value for b in data.batches() for r in b.records()]


def test_explicit_replicas_are_placed_as_given_and_records_land_on_the_assigned_leaders(make_cluster):
    from minikafka import KafkaAdminClient, KafkaProducer, NewTopic

    c = make_cluster(3)
    admin = KafkaAdminClient(bootstrap_servers=c)
    assigned = {0: [2, 3], 1: [3, 1], 2: [1, 2]}
    assert admin.create_topics([NewTopic("placed", replica_assignments=assigned)]) == {
        "topics": [{"name": "placed", "error_code": NO_ERROR, "error_message": None}]}
    # kafka-python 3.0's dict form, and the first list's head leads
    admin.create_topics({"solo": {"assignments": {0: [3]}, "configs": {"retention.ms": 60_000}}})
    assert [(s.replicas, s.leader, s.isr) for s in c.partitions_of("placed")] == [
        ((2, 3), 2, (2, 3)), ((3, 1), 3, (3, 1)), ((1, 2), 1, (1, 2))]
    assert [(s.replicas, s.leader) for s in c.partitions_of("solo")] == [((3,), 3)]
    assert c.broker(1).topics["solo"].config("retention.ms") == "60000"

    producer = KafkaProducer(bootstrap_servers=c, acks="all")
    for p in range(3):
        assert producer.send("placed", f"v{p}".encode(), partition=p).get(timeout=10).offset == 0
    producer.close()
    for p, replicas in assigned.items():
        # acks=all: on the leader and its follower; the third broker has no replica at all
        assert [log_values(c, b, "placed", p) for b in replicas] == [[f"v{p}".encode()]] * 2
        assert [b for b in (1, 2, 3) if c.replica(b, "placed", p) is not None] == sorted(replicas)
    admin.close()


@pytest.mark.parametrize("topic, error, message", [
    ({"num_partitions": 2, "assignments": {0: [1], 1: [2]}}, "InvalidRequestError",
     "A manual partition assignment was specified, but numPartitions was not set to -1."),
    ({"replication_factor": 1, "assignments": {0: [1]}}, "InvalidRequestError",
     "A manual partition assignment was specified, but replication factor was not set to -1."),
    ({"assignments": {0: [1], 2: [2]}}, "InvalidReplicationAssignmentError",
     "partitions should be a consecutive 0-based integer sequence"),
    ({"assignments": {0: [1, 2], 1: [3]}}, "InvalidReplicationAssignmentError",
     "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with "
     "previous partitions, which have 2 replica(s)."),
    ({"assignments": {0: [1, 1]}}, "InvalidReplicationAssignmentError",
     "The manual partition assignment includes the broker 1 more than once."),
    ({"assignments": {0: [1, 9]}}, "InvalidReplicationAssignmentError",
     "The manual partition assignment includes broker 9, but no such broker is registered."),
    ({"assignments": {0: []}}, "InvalidReplicationAssignmentError",
     "The manual partition assignment includes an empty replica list."),
    ({"assignments": {0: [1]}, "configs": {"retention.msec": 1}}, "InvalidConfigurationError", "retention.msec"),
])
def test_each_invalid_assignment_is_refused_with_krafts_error_and_nothing_is_created(make_cluster, topic, error,
                                                                                      message):
    import minikafka.errors as Errors
    from minikafka import KafkaAdminClient

    c = make_cluster(3)
    admin = KafkaAdminClient(bootstrap_servers=c)
    with pytest.raises(getattr(Errors, error)) as refused:
        admin.create_topics({"bad": topic})
    assert message in str(refused.value)
    answer = admin.create_topics({"bad": topic, "good": {"assignments": {0: [1, 2]}}}, raise_errors=False)
    assert [(t["name"], t["error_code"], message in t["error_message"]) for t in answer["topics"][:1]] == [
        ("bad", getattr(Errors, error).errno, True)]
    assert answer["topics"][1] == {"name": "good", "error_code": NO_ERROR, "error_message": None}
    assert c.topics() == ["good"]
    admin.close()


def test_a_fenced_broker_may_be_named_it_is_outside_the_isr_until_it_returns(make_cluster):
    from minikafka import KafkaAdminClient, NewTopic
    from minikafka.errors import InvalidReplicationAssignmentError

    c = make_cluster(3)
    admin = KafkaAdminClient(bootstrap_servers=c)
    c.kill(3)
    assert c.run_until(lambda: c.image.live_brokers == (1, 2), 30_000)  # fenced, still registered
    admin.create_topics([NewTopic("t", replica_assignments={0: [3, 1], 1: [2, 3]})])
    # the preferred leader 3 is fenced: the first live replica leads, the ISR is the live ones
    assert [(s.replicas, s.leader, s.isr) for s in c.partitions_of("t")] == [((3, 1), 1, (1,)), ((2, 3), 2, (2,))]
    with pytest.raises(InvalidReplicationAssignmentError, match="All brokers specified in the manual partition "
                       "assignment for partition 0 are fenced or in controlled shutdown"):
        admin.create_topics([NewTopic("u", replica_assignments={0: [3]})])
    c.restart(3)
    assert c.run_until(lambda: all(3 in s.isr for s in c.partitions_of("t")), 30_000)
    admin.close()


def test_explicit_replicas_count_towards_the_partitions_one_request_may_add(make_cluster):
    from minikafka import KafkaAdminClient
    from minikafka.controller import EXCESSIVE_PARTITIONS
    from minikafka.errors import PolicyViolationError

    c = make_cluster(1, config={**FAST, "max.request.partition.size.limit": 3})
    admin = KafkaAdminClient(bootstrap_servers=c)
    with pytest.raises(PolicyViolationError, match=EXCESSIVE_PARTITIONS):
        admin.create_topics({"a": {"assignments": {p: [1] for p in range(2)}},
                             "b": {"assignments": {p: [1] for p in range(2)}}})
    admin.create_topics({"a": {"assignments": {p: [1] for p in range(3)}}})
    assert c.topics() == ["a"]
    admin.close()


def test_create_topics_checks_the_shape_of_what_it_is_given(make_cluster):
    from minikafka import KafkaAdminClient, NewTopic
    from minikafka.errors import IllegalArgumentError

    c = make_cluster(1)
    admin = KafkaAdminClient(bootstrap_servers=c)
    with pytest.raises(IllegalArgumentError, match=r"topic 't''s partition 0 must be a list of broker ids, not 1"):
        admin.create_topics([NewTopic("t", replica_assignments={0: 1})])
    with pytest.raises(IllegalArgumentError, match=r"topic 't': a partition index must be an int, not '0'"):
        admin.create_topics({"t": {"assignments": {"0": [1]}}})
    with pytest.raises(IllegalArgumentError, match=r"unknown option\(s\) \['partitions'\]"):
        admin.create_topics({"t": {"partitions": 3}})
    with pytest.raises(IllegalArgumentError, match="validate_only is not supported"):
        admin.create_topics(["t"], validate_only=True)
    assert c.topics() == []
    # a list of names: the broker's defaults (num.partitions 1, default.replication.factor 1)
    admin.create_topics(["t"])
    assert [(s.replicas, s.leader) for s in c.partitions_of("t")] == [((1,), 1)]
    admin.close()


# --- CreatePartitions ---------------------------------------------------------------------------------------


def test_partitions_are_added_where_kafka_places_them_and_every_replica_is_made(make_cluster):
    from minikafka import KafkaAdminClient
    from minikafka.controller import assign_replicas

    c = make_cluster(3)
    c.create_topic("t", partitions=2, replication_factor=2)
    admin = KafkaAdminClient(bootstrap_servers=c)
    assert admin.create_partitions({"t": 5}) == {"t": "OK"}
    states = [c.partition_state("t", p) for p in range(5)]
    # the new ones continue the round robin that partition 0's first replica starts
    live = [1, 2, 3]
    start = live.index(states[0].replicas[0])
    assert [s.replicas for s in states[2:]] == assign_replicas(5, 2, live, start, start)[2:]
    assert c.run_until(lambda: all(c.replica(b, "t", p) is not None for p in range(2, 5)
                                   for b in c.partition_state("t", p).replicas), 10_000)
    admin.close()


def test_partitions_are_only_ever_added(make_cluster):
    from minikafka import KafkaAdminClient
    from minikafka.errors import IllegalArgumentError, InvalidPartitionsError, UnknownTopicOrPartitionError

    c = make_cluster(1)
    c.create_topic("t", partitions=3)
    admin = KafkaAdminClient(bootstrap_servers=c)
    with pytest.raises(InvalidPartitionsError, match="currently has 3 partition.*2 would not be an increase"):
        admin.create_partitions({"t": 2})
    with pytest.raises(InvalidPartitionsError, match="already has 3"):
        admin.create_partitions({"t": 3})
    with pytest.raises(UnknownTopicOrPartitionError, match="'nope' does not exist"):
        admin.create_partitions({"nope": 4})
    with pytest.raises(IllegalArgumentError, match="int >= 1"):
        admin.create_partitions({"t": "4"})
    assert admin.create_partitions({"t": 4}, validate_only=True) == {"t": "OK"}
    assert c.broker(1).topics["t"].num_partitions == 3  # validated only
    admin.close()


def test_added_partitions_may_name_their_replicas_one_list_per_new_partition(make_cluster):
    from minikafka import KafkaAdminClient, NewPartitions
    from minikafka.errors import InvalidReplicationAssignmentError

    c = make_cluster(3)
    c.create_topic("t", partitions=1, replication_factor=2)
    admin = KafkaAdminClient(bootstrap_servers=c)
    for spec, message in [
        (NewPartitions(3, [[3, 1]]), "Attempted to add 2 additional partition(s), but only 1 assignment(s) were "
                                     "specified."),
        (NewPartitions(2, [[3]]), "includes a partition with 1 replica(s), but this is not consistent with previous "
                                  "partitions, which have 2 replica(s)."),
        ({"count": 2, "assignments": [[3, 7]]}, "includes broker 7, but no such broker is registered."),
        ({"count": 2, "assignments": [[2, 2]]}, "includes the broker 2 more than once."),
    ]:
        with pytest.raises(InvalidReplicationAssignmentError) as refused:
            admin.create_partitions({"t": spec})
        assert message in str(refused.value)
    assert c.image.partition_count("t") == 1
    assert admin.create_partitions({"t": NewPartitions(3, [[3, 1], [1, 2]])}) == {"t": "OK"}
    assert admin.create_partitions({"t": {"count": 4, "assignments": [[2, 3]]}}) == {"t": "OK"}
    assert [(s.replicas, s.leader, s.isr) for s in c.partitions_of("t")][1:] == [
        ((3, 1), 3, (3, 1)), ((1, 2), 1, (1, 2)), ((2, 3), 2, (2, 3))]
    assert c.run_until(lambda: all(c.replica(b, "t", p) is not None for p in range(1, 4)
                                   for b in c.partition_state("t", p).replicas), 10_000)
    admin.close()


def test_create_partitions_assignments_must_be_parallel_to_its_topics(make_cluster):
    from minikafka.messages import INVALID_REQUEST, CreatePartitionsRequest

    c = make_cluster(1)
    c.create_topic("t", partitions=1)
    answer = request(c, 1, lambda k: CreatePartitionsRequest(k, (("t", 2),), False, (None, ((1,),))))
    assert answer.results == (("t", INVALID_REQUEST, "2 assignment entries for 1 topics"),)
    assert c.image.partition_count("t") == 1


# --- IncrementalAlterConfigs, and retention on a timer -------------------------------------------------------


def test_topic_configs_change_on_running_logs_and_retention_deletes_on_its_timer(make_cluster):
    from minikafka import KafkaAdminClient
    from minikafka.clients.admin import ConfigResource
    from minikafka import KafkaProducer

    c = make_cluster(3, config={**FAST, "log.retention.check.interval.ms": 1_000})
    c.create_topic("t", partitions=1, replication_factor=3, config={"segment.bytes": 1024})
    leader = c.partition_state("t", 0).leader
    producer = KafkaProducer(bootstrap_servers=c, acks="all")
    for i in range(40):  # one batch per flush: 40 batches over many 1 KiB segments
        producer.send("t", b"%02d" % i + b"." * 100, partition=0)
        producer.flush(timeout=10)
    producer.close()
    assert c.run_until(lambda: all(c.replica(b, "t", 0).log.log_end_offset == 40 for b in (1, 2, 3)), 10_000)
    c.advance(2_000)
    assert all(c.replica(b, "t", 0).log.log_start_offset == 0 for b in (1, 2, 3))  # no retention limit yet
    admin = KafkaAdminClient(bootstrap_servers=c)
    result = admin.alter_configs([ConfigResource("topic", "t", {"retention.bytes": "2048", "min.insync.replicas": 2})])
    assert result == {"topic": {"t": "OK"}}
    for b in (1, 2, 3):  # every replica's running log and partition took the new values
        assert c.replica(b, "t", 0).log.config.retention_bytes == 2048
        assert c.replica(b, "t", 0).config.min_insync_replicas == 2
    # The next retention check deletes whole old segments on every replica, leader and followers.
    c.advance(1_500)
    starts = {b: c.replica(b, "t", 0).log.log_start_offset for b in (1, 2, 3)}
    assert all(0 < s < 40 for s in starts.values()), starts
    assert all(c.replica(b, "t", 0).log.size_in_bytes <= 2048 + 1024 for b in (1, 2, 3))
    assert sum(c.broker(b).retention_deleted for b in (1, 2, 3)) > 0
    bad = admin.alter_configs([ConfigResource("topic", "t", {"min.insync.replicas": "0"}),
                               ConfigResource("topic", "nope", {"retention.ms": "1"}),
                               ConfigResource("topic", "t", {"no.such.key": "1"})])
    assert bad["topic"]["nope"].startswith("[Error 3] UnknownTopicOrPartitionError")
    assert bad["topic"]["t"].startswith("[Error 40] InvalidConfigurationError")
    assert c.replica(leader, "t", 0).config.min_insync_replicas == 2  # unchanged
    assert admin.alter_configs([ConfigResource("topic", "t", {"min.insync.replicas": None})]) == {"topic": {"t": "OK"}}
    assert c.replica(leader, "t", 0).config.min_insync_replicas == 1  # back to the default
    admin.close()


# --- DeleteRecords -----------------------------------------------------------------------------------------------


def test_delete_records_moves_the_log_start_on_leader_and_followers_and_a_consumer_below_is_reset(make_cluster):
    from minikafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from minikafka.errors import OffsetOutOfRangeError

    c = make_cluster(3)
    c.create_topic("t", partitions=1, replication_factor=3, config={"segment.bytes": 1024})
    producer = KafkaProducer(bootstrap_servers=c, acks="all")
    for i in range(30):
        producer.send("t", b"%02d" % i + b"." * 100, partition=0)
        producer.flush(timeout=10)
    producer.close()
    tp = TopicPartition("t", 0)
    admin = KafkaAdminClient(bootstrap_servers=c)
    assert admin.delete_records({tp: 17}) == {tp: {"low_watermark": 17}}
    # every replica starts at 17 once the followers' next fetch brings the leader's log start
    assert c.run_until(lambda: all(c.replica(b, "t", 0).log.log_start_offset == 17 for b in (1, 2, 3)), 10_000)
    assert all(len(c.replica(b, "t", 0).log.segments) < 20 for b in (1, 2, 3))  # whole segments below it went
    with pytest.raises(OffsetOutOfRangeError, match="past its high watermark"):
        admin.delete_records({tp: 31})
    consumer = KafkaConsumer(bootstrap_servers=c, auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([tp])
    consumer.seek(tp, 3)  # below the log start: OFFSET_OUT_OF_RANGE, reset to earliest
    got = []
    for _ in range(20):
        got += [r for rs in consumer.poll(timeout_ms=500).values() for r in rs]
        if len(got) >= 13:
            break
    assert [r.offset for r in got] == list(range(17, 30))
    consumer.close()
    assert admin.delete_records({tp: -1}) == {tp: {"low_watermark": 30}}  # -1: up to the high watermark
    admin.close()


def test_the_older_alter_configs_replaces_every_override_and_other_resources_are_refused(make_cluster):
    from minikafka.messages import CONFIG_SET, INVALID_REQUEST, AlterConfigsRequest

    c = make_cluster(1)
    c.create_topic("t", config={"retention.ms": 60_000, "min.insync.replicas": 1})
    answer = request(c, 1, lambda k: AlterConfigsRequest(k, ((2, "t", (("segment.bytes", CONFIG_SET, "2048"),)),),
                                                           incremental=False))
    assert answer.results == ((2, "t", NO_ERROR, None),)
    assert dict(c.broker(1).topics["t"].configs) == {"segment.bytes": "2048"}  # the others went
    answer = request(c, 1, lambda k: AlterConfigsRequest(k, ((1, "x", (("retention.ms", CONFIG_SET, "1"),)),)))
    [(rtype, name, error, message)] = answer.results
    assert (rtype, name, error) == (1, "x", INVALID_REQUEST) and "neither a topic (2) nor a broker (4)" in message


def test_dynamic_broker_configs_are_the_topics_defaults_cluster_wide_or_per_broker(make_cluster):
    from minikafka import KafkaAdminClient
    from minikafka.clients.admin import ConfigResource

    c = make_cluster(2)
    c.create_topic("t", partitions=2, replication_factor=2)
    c.create_topic("own", partitions=1, replication_factor=2, config={"retention.ms": 1000})
    admin = KafkaAdminClient(bootstrap_servers=c)
    assert admin.alter_configs([ConfigResource("broker", "", {"retention.ms": 120_000})]) == {"broker": {"": "OK"}}
    assert admin.alter_configs([ConfigResource("broker", "2", {"segment.bytes": 4096})]) == {"broker": {"2": "OK"}}
    for b in (1, 2):
        assert c.replica(b, "t", 0).log.config.retention_ms == 120_000  # the new cluster-wide default
        assert c.replica(b, "own", 0).log.config.retention_ms == 1000  # a topic's own override wins
    assert c.replica(2, "t", 0).log.config.segment_bytes == 4096  # broker 2 only
    assert c.replica(1, "t", 0).log.config.segment_bytes != 4096
    refused = admin.alter_configs([ConfigResource("broker", "9", {"retention.ms": 1}),
                                   ConfigResource("broker", "1", {"num.partitions": 3})])
    assert refused["broker"]["9"].startswith("[Error 42] InvalidRequestError: broker '9' is not registered")
    assert refused["broker"]["1"].startswith("[Error 40] InvalidConfigurationError: unknown dynamic broker config")
    admin.close()

