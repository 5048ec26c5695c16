"""The wire codec against kafka-python's own client side.

Every API we advertise is checked at both ends of its version range: the request is built
the way kafka-python's producer, consumer, coordinator or admin client builds it, framed by
kafka-python's ``KafkaProtocol`` (what its connections use), decoded by us into the
dataclass the broker handles; our response dataclass is encoded by us and parsed by that
same ``KafkaProtocol``, as the client would parse it. Then the frames no client sends:
truncated, unknown, unsupported, random (hypothesis): ``FrameError`` and nothing else. And
the private frames the controller's messages travel in.
"""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("kafka")  # kafka-python==3.0.12 (the dev and course extras pin it)

import kafka.errors as Errors  # noqa: E402

from kafka.admin._configs import ConfigAdminMixin, ConfigResource, ConfigResourceType  # noqa: E402
from kafka.admin._groups import GroupAdminMixin  # noqa: E402
from kafka.admin._topics import TopicAdminMixin  # noqa: E402
from kafka.cluster import ClusterMetadata  # noqa: E402
from kafka.protocol.admin import (  # noqa: E402
    CreateTopicsRequest as KCreateTopics,
    DeleteGroupsRequest as KDeleteGroups,
    DescribeQuorumRequest as KDescribeQuorum,
    DeleteTopicsRequest as KDeleteTopics,
    DescribeGroupsRequest as KDescribeGroups,
)
from kafka.protocol.broker_version_data import BrokerVersionData  # noqa: E402
from kafka.protocol.consumer import (  # noqa: E402
    FetchRequest as KFetch,
    FetchResponse as KFetchResponse,
    HeartbeatRequest as KHeartbeat,
    JoinGroupRequest as KJoinGroup,
    LeaveGroupRequest as KLeaveGroup,
    ListOffsetsRequest as KListOffsets,
    OffsetCommitRequest as KOffsetCommit,
    OffsetFetchRequest as KOffsetFetch,
    SyncGroupRequest as KSyncGroup,
)
from kafka.protocol.metadata import (  # noqa: E402
    ApiVersionsRequest as KApiVersions,
    FindCoordinatorRequest as KFindCoordinator,
    MetadataRequest as KMetadata,
)
from kafka.protocol.parser import KafkaProtocol  # noqa: E402
from kafka.protocol.producer import InitProducerIdRequest as KInitProducerId  # noqa: E402
from kafka.protocol.producer import ProduceRequest as KProduce  # noqa: E402
from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402
from kafka.record.memory_records import MemoryRecords as KMemoryRecords  # noqa: E402

from minikafka import messages as m  # noqa: E402
from minikafka.raft import messages as raft  # noqa: E402
from minikafka.wire import codec  # noqa: E402
from minikafka.wire.codec import (  # noqa: E402
    ACCEPTED,
    INTERNAL_API_KEYS,
    SUPPORTED,
    ApiVersionsRequest,
    BrokerContext,
    FrameError,
    decode_internal,
    decode_request,
    decode_response,
    encode_api_versions,
    encode_internal,
    encode_outgoing,
    encode_request,
    encode_response,
    is_internal,
)

CLIENT_ID = "kafka-python-3.0.12"
CORR = 4242
CTX = BrokerContext(broker_id=1, brokers={1: ("127.0.0.1", 19092), 2: ("127.0.0.1", 19093)}, cluster_id="mk-test")


def ends(api_key: int) -> list[int]:
    low, high = SUPPORTED[api_key]
    return sorted({low, high})


def batch(*values: bytes, base_sequence: int = 0) -> bytes:
    """A real record batch v2, as kafka-python's producer writes it."""
    builder = DefaultRecordBatchBuilder(2, 0, False, 1000, 0, base_sequence, 1 << 20)
    for i, value in enumerate(values):
        builder.append(i, 1_700_000_000_000 + i, b"key-%d" % i, value, [])
    return bytes(builder.build())


class Client:
    """kafka-python's own framing: ``KafkaProtocol`` writes requests and parses responses
    (the version set as its connection sets it after negotiation)."""

    def __init__(self) -> None:
        self.parser = KafkaProtocol(client_id=CLIENT_ID)

    def send(self, request, version: int, corr: int = CORR) -> bytes:
        request.API_VERSION = version
        self.parser.send_request(request, correlation_id=corr)
        return bytes(self.parser.send_bytes())[4:]  # what our server reads after the length

    def receive(self, data: bytes):
        [(corr, response)] = self.parser.receive_bytes(bytes(data))
        assert corr == CORR
        return response


def roundtrip(request, version: int, expected, response):
    """Client request -> our Decoded (checked) -> our response -> the client's parse of it."""
    client = Client()
    decoded = decode_request(client.send(request, version))
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id, decoded.client_id) == (
        request.API_KEY, version, CORR, CLIENT_ID)
    assert decoded.reply is None
    assert decoded.messages == (expected,)
    assert decoded.message == expected
    return client.receive(encode_response(decoded, response, context=CTX))


# --- version negotiation --------------------------------------------------------------------------------


def client_requests():
    """One request per API, built as kafka-python builds it, and the version it should pick."""
    return [
        (KProduce(transactional_id=None, acks=-1, timeout_ms=1, topic_data=[], min_version=0, max_version=9), 8),
        (KFetch(max_wait_ms=1, min_bytes=1, topics=[], max_version=12), 11),
        (KListOffsets(isolation_level=0, topics=[], min_version=1), 5),
        (KMetadata(topics=None, allow_auto_topic_creation=True), 12),
        (KOffsetCommit(group_id="g", topics=[], max_version=8), 7),
        (KOffsetFetch(group_id="g", topics=None, min_version=2, max_version=8), 5),
        (KFindCoordinator(key="g", key_type=0, coordinator_keys=["g"]), 2),
        (KJoinGroup(group_id="g", protocols=[], max_version=7), 5),
        (KHeartbeat(group_id="g", generation_id=1, member_id="m"), 3),
        (KLeaveGroup(group_id="g", member_id="m", members=[]), 3),
        (KSyncGroup(group_id="g", generation_id=1, member_id="m", assignments=[], max_version=5), 3),
        (KDescribeGroups(groups=["g"], include_authorized_operations=True), 4),
        (GroupAdminMixin._list_groups_request(), 2),
        (KCreateTopics(topics=[], timeout_ms=1, validate_only=False), 4),
        (KDeleteTopics(topics=[], timeout_ms=1), 3),
        (KInitProducerId(transactional_id=None, transaction_timeout_ms=1, max_version=1), 1),
        (ConfigAdminMixin._describe_configs_request([ConfigResource("topic", "t")]), 3),
        (KDeleteGroups(groups_names=["g"]), 1),
        (KDescribeQuorum(topics=[]), 1),
        (KApiVersions(client_software_name="x", client_software_version="1"), 3),
        (KAlterConfigs(resources=[], validate_only=False), 1),
        (KCreatePartitions(topics=[], timeout_ms=1, validate_only=False), 1),
        (KIncrementalAlterConfigs(resources=[], validate_only=False), 0),
        (KDeleteRecords(topics=[], timeout_ms=1), 1),
        (KOffsetForLeaderEpoch(replica_id=-1, topics=[]), 3),
        (KOffsetDelete(group_id="g", topics=[]), 0),
        # as kafka/producer/transaction_manager.py builds them (max_version 3 each)
        (KAddPartitionsToTxn(v3_and_below_transactional_id="tx", v3_and_below_producer_id=1,
                             v3_and_below_producer_epoch=0, v3_and_below_topics=[], max_version=3), 2),
        (KAddOffsetsToTxn(transactional_id="tx", producer_id=1, producer_epoch=0, group_id="g", max_version=3), 2),
        (KEndTxn(transactional_id="tx", producer_id=1, producer_epoch=0, committed=True, max_version=3), 2),
        (KTxnOffsetCommit(transactional_id="tx", group_id="g", producer_id=1, producer_epoch=0, generation_id=-1,
                          member_id="", group_instance_id=None, topics=[], max_version=3), 2),
        (codec.ConsumerGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=0), 1),  # KIP-848
        (codec.ConsumerGroupDescribeRequest(group_ids=["g"], include_authorized_operations=False), 1),
    ]


from kafka.protocol.producer.transaction import (  # noqa: E402
    AddOffsetsToTxnRequest as KAddOffsetsToTxn,
    AddPartitionsToTxnRequest as KAddPartitionsToTxn,
    EndTxnRequest as KEndTxn,
    TxnOffsetCommitRequest as KTxnOffsetCommit,
)


from kafka.protocol.admin import (  # noqa: E402
    AlterConfigsRequest as KAlterConfigs,
    CreatePartitionsRequest as KCreatePartitions,
    DeleteRecordsRequest as KDeleteRecords,
    IncrementalAlterConfigsRequest as KIncrementalAlterConfigs,
)
from kafka.protocol.consumer import OffsetForLeaderEpochRequest as KOffsetForLeaderEpoch  # noqa: E402
from kafka.protocol.consumer import OffsetDeleteRequest as KOffsetDelete  # noqa: E402


def test_kafka_python_negotiates_our_max_everywhere_and_guesses_a_v2_batch_broker():
    bvd = BrokerVersionData(api_versions=SUPPORTED)
    requests = client_requests()
    assert {r.API_KEY for r, _ in requests} == set(SUPPORTED)
    for request, expected in requests:
        assert bvd.api_version(request) == expected, request.name
    # >= (0, 11): v2 record batches; >= (2, 4): the admin client may leave partitions at -1
    assert bvd.broker_version >= (2, 4)


# --- ApiVersions ----------------------------------------------------------------------------------------


def api_versions_request(version: int):
    # kafka-python's connection sends these two fields (v3+)
    return KApiVersions(version=version, client_software_name="kafka-python", client_software_version="3.0.12")


def test_api_versions_v4_gets_error_35_in_a_v0_body_listing_our_ranges():
    client = Client()
    decoded = decode_request(client.send(api_versions_request(4), 4))
    assert decoded.unsupported_version
    assert decoded.message == ApiVersionsRequest(CORR)
    response = client.receive(encode_api_versions(decoded))
    assert response.error_code == m.UNSUPPORTED_VERSION
    assert response.API_VERSION == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys} == SUPPORTED
    # and kafka-python's retry rule then picks our max
    retry = min(4, next(k.max_version for k in response.api_keys if k.api_key == codec.API_VERSIONS))
    assert retry == 3


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_api_versions_answered_at_the_request_version(version):
    client = Client()
    decoded = decode_request(client.send(api_versions_request(version), version))
    assert not decoded.unsupported_version
    expected_name = "kafka-python" if version >= 3 else None
    assert decoded.message == ApiVersionsRequest(CORR, expected_name, "3.0.12" if version >= 3 else None)
    frame = encode_api_versions(decoded)
    assert encode_response(decoded, None) == frame  # encode_response hands ApiVersions over
    response = client.receive(frame)
    assert response.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys} == SUPPORTED


def test_api_versions_beyond_anything_known_still_gets_the_downgrade_answer():
    frame = struct.pack(">hhih", codec.API_VERSIONS, 77, 9, 3) + b"cli" + b"\x00garbage-body"
    decoded = decode_request(frame)
    assert decoded.unsupported_version and decoded.correlation_id == 9 and decoded.client_id == "cli"
    out = bytes(encode_api_versions(decoded))
    size, corr, error = struct.unpack_from(">iih", out)
    assert (size, corr, error) == (len(out) - 4, 9, 35)


# --- Produce --------------------------------------------------------------------------------------------


def produce_request(acks=-1, transactional_id=None):
    # as kafka/producer/sender.py _produce_request
    Topic = KProduce.TopicProduceData
    Partition = Topic.PartitionProduceData
    return KProduce(
        transactional_id=transactional_id, acks=acks, timeout_ms=30000,
        topic_data=[Topic(name="trucks_gps", partition_data=[Partition(index=0, records=BATCH_A),
                                                             Partition(index=3, records=BATCH_B)]),
                    Topic(name="other", partition_data=[Partition(index=1, records=BATCH_A)])],
        min_version=0, max_version=9)


BATCH_A = batch(b'{"truck": 1, "lat": 52.1}', b'{"truck": 1, "lat": 52.2}')
BATCH_B = batch(b"x" * 300, base_sequence=7)


@pytest.mark.parametrize("v", ends(codec.PRODUCE))
def test_produce(v):
    expected = m.ProduceRequest(CORR, -1, 30000, (
        m.ProducePartition("trucks_gps", 0, BATCH_A), m.ProducePartition("trucks_gps", 3, BATCH_B),
        m.ProducePartition("other", 1, BATCH_A)))
    response = m.ProduceResponse(CORR, (
        m.ProducePartitionResponse("trucks_gps", 0, 0, 100, 5),
        m.ProducePartitionResponse("trucks_gps", 3, m.NOT_LEADER_OR_FOLLOWER),
        m.ProducePartitionResponse("other", 1, m.CORRUPT_MESSAGE, error_message="bad CRC")))
    r = roundtrip(produce_request(), v, expected, response)
    got = {(t.name, p.index): p for t in r.responses for p in t.partition_responses}
    assert [t.name for t in r.responses] == ["trucks_gps", "other"]
    assert (got["trucks_gps", 0].error_code, got["trucks_gps", 0].base_offset) == (0, 100)
    assert got["trucks_gps", 0].log_start_offset == (5 if v >= 5 else -1)
    assert (got["trucks_gps", 3].error_code, got["trucks_gps", 3].base_offset) == (6, -1)
    assert got["other", 1].error_code == 2
    assert got["other", 1].error_message == ("bad CRC" if v >= 8 else None)


def test_produce_records_pass_through_byte_identical():
    decoded = decode_request(Client().send(produce_request(), 8))
    records = [p.records for p in decoded.message.partitions]
    assert records == [BATCH_A, BATCH_B, BATCH_A]
    assert all(type(r) is bytes for r in records)


def test_produce_acks_0_gets_no_answer():
    request = produce_request(acks=0)
    decoded = decode_request(Client().send(request, 8))
    assert not request.expect_response() and not decoded.expects_response
    assert decoded.message.acks == 0
    assert encode_response(decoded, m.ProduceResponse(CORR, ())) == b""


@pytest.mark.parametrize("v", ends(codec.PRODUCE))
def test_a_transactional_produce_reaches_the_broker_with_its_batches_untouched(v):
    client = Client()
    decoded = decode_request(client.send(produce_request(transactional_id="tx-1"), v))
    assert decoded.reply is None
    assert isinstance(decoded.message, m.ProduceRequest) and decoded.message.partitions


# --- Fetch ----------------------------------------------------------------------------------------------


def consumer_fetch_request():
    # as kafka/consumer/fetcher.py _create_fetch_requests (a new session: id 0, epoch 0)
    Topic = KFetch.FetchTopic
    Partition = Topic.FetchPartition
    return KFetch(
        max_wait_ms=500, min_bytes=1, max_bytes=52428800, isolation_level=0, session_id=0, session_epoch=0,
        topics=[Topic(topic="trucks_gps", partitions=[
            Partition(partition=0, current_leader_epoch=3, fetch_offset=42, last_fetched_epoch=2,
                      partition_max_bytes=1048576),
            Partition(partition=1, current_leader_epoch=3, fetch_offset=7, last_fetched_epoch=2,
                      partition_max_bytes=1048576)])],
        forgotten_topics_data=[], rack_id="", min_version=0, max_version=12)


@pytest.mark.parametrize("v", ends(codec.FETCH) + [codec.FOLLOWER_FETCH_VERSION])
def test_consumer_fetch(v):
    epoch = 3 if v >= 9 else -1
    last = 2 if v >= 12 else -1
    expected = m.FetchRequest(CORR, -1, 500, 1, (
        m.FetchPartition("trucks_gps", 0, 42, last, epoch, 1048576),
        m.FetchPartition("trucks_gps", 1, 7, last, epoch, 1048576)), 52428800)
    two_batches = BATCH_A + BATCH_B
    response = m.FetchResponse(CORR, (
        m.FetchPartitionResponse("trucks_gps", 0, 0, 100, 5, two_batches, last_stable_offset=100),
        m.FetchPartitionResponse("trucks_gps", 1, m.OFFSET_OUT_OF_RANGE, 100, 5)))
    r = roundtrip(consumer_fetch_request(), v, expected, response)
    if v >= 7:
        assert (r.error_code, r.session_id) == (0, 0)  # no fetch sessions: full fetches go on
    [topic] = r.responses
    p0, p1 = topic.partitions
    assert topic.topic == "trucks_gps"
    assert (p0.partition_index, p0.error_code, p0.high_watermark, p0.last_stable_offset) == (0, 0, 100, 100)
    assert p0.log_start_offset == (5 if v >= 5 else -1)
    assert p0.records == two_batches  # byte for byte
    assert not p0.aborted_transactions
    records, values = KMemoryRecords(p0.records), []  # the consumer reads both batches
    while (b := records.next_batch()) is not None:
        values += [record.value for record in b]
    assert values == [b'{"truck": 1, "lat": 52.1}', b'{"truck": 1, "lat": 52.2}', b"x" * 300]
    if v >= 11:
        assert p0.preferred_read_replica == -1
    assert (p1.partition_index, p1.error_code) == (1, m.OFFSET_OUT_OF_RANGE)
    assert not p1.records


def test_follower_fetch_round_trip_carries_epochs_and_divergence():
    request = m.FetchRequest(17, 2, 500, 1, (
        m.FetchPartition("trucks_gps", 0, 120, 4, 5, 1 << 20), m.FetchPartition("trucks_gps", 1, 3, 4, 5, 1 << 20),
        m.FetchPartition("b", 0, 0, -1, 0, 1024)))
    frame, expect = encode_outgoing(request, sender=2)
    assert expect == (codec.FETCH, codec.FOLLOWER_FETCH_VERSION)
    decoded = decode_request(bytes(frame[4:]))
    assert decoded.message == request and decoded.client_id == "minikafka-broker-2"
    assert (decoded.api_key, decoded.api_version) == (codec.FETCH, 12)
    response = m.FetchResponse(17, (
        m.FetchPartitionResponse("trucks_gps", 0, 0, 130, 0, BATCH_A),
        m.FetchPartitionResponse("trucks_gps", 1, 0, 130, 0, b"", (3, 2)),
        m.FetchPartitionResponse("b", 0, 0, 0, 0, b"", (-1, 0))))  # "truncate to the log start"
    out = bytes(encode_response(decoded, response))
    assert decode_response(*expect, out[4:]) == response
    # and kafka-python reads the same answer as a v12 client would
    k = KFetchResponse.decode(out[4:], version=12, header=True)
    assert k.responses[0].partitions[1].diverging_epoch.epoch == 3


def test_fetch_below_v12_cannot_carry_a_diverging_epoch():
    decoded = decode_request(Client().send(consumer_fetch_request(), 11))
    with pytest.raises(ValueError, match="v12"):
        encode_response(decoded, m.FetchResponse(CORR, (m.FetchPartitionResponse("t", 0, 0, 1, 0, b"", (1, 1)),)))
    with pytest.raises(ValueError, match="v12"):
        encode_request(m.FetchRequest(1, 2, 1, 1, (m.FetchPartition("t", 0, 5, 1),)), version=11)


# --- ListOffsets, Metadata, InitProducerId ---------------------------------------------------------------------


@pytest.mark.parametrize("v", ends(codec.LIST_OFFSETS))
def test_list_offsets(v):
    # as kafka/consumer/fetcher.py: topics as (name, [partitions]) tuples
    P = KListOffsets.ListOffsetsTopic.ListOffsetsPartition
    request = KListOffsets(isolation_level=0, topics=[
        ("trucks_gps", [P(partition_index=0, current_leader_epoch=-1, timestamp=-2),
                        P(partition_index=1, current_leader_epoch=-1, timestamp=-1)]),
        ("other", [P(partition_index=0, current_leader_epoch=-1, timestamp=1_700_000_000_000)])], min_version=1)
    expected = m.ListOffsetsRequest(CORR, (("trucks_gps", 0, -2), ("trucks_gps", 1, -1), ("other", 0, 1_700_000_000_000)))
    response = m.ListOffsetsResponse(CORR, (
        ("trucks_gps", 0, 0, -1, 0), ("trucks_gps", 1, 0, -1, 100), ("other", 0, 0, 1_700_000_000_123, 7)))
    r = roundtrip(request, v, expected, response)
    got = {(t.name, p.partition_index): (p.error_code, p.timestamp, p.offset) for t in r.topics for p in t.partitions}
    assert got == {("trucks_gps", 0): (0, -1, 0), ("trucks_gps", 1): (0, -1, 100),
                   ("other", 0): (0, 1_700_000_000_123, 7)}


@pytest.mark.parametrize("v", ends(codec.METADATA))
def test_metadata(v):
    # as kafka/cluster.py metadata_request
    request = KMetadata(topics=[KMetadata.MetadataRequestTopic(name="trucks_gps"), KMetadata.MetadataRequestTopic(name="nope")],
                        allow_auto_topic_creation=True, include_cluster_authorized_operations=False,
                        include_topic_authorized_operations=False)
    expected = m.MetadataRequest(CORR, ("trucks_gps", "nope"), allow_auto_topic_creation=True)
    response = m.MetadataResponse(CORR, brokers=(1, 2, 3), controller_id=m.CONTROLLER_ID, topics=(
        m.TopicMetadata("trucks_gps", 0, (m.PartitionMetadata(0, 0, 2, 4, (2, 1), (2, 1)),
                                          m.PartitionMetadata(1, m.LEADER_NOT_AVAILABLE, -1, -1, (1, 4), (1,)))),
        m.TopicMetadata("nope", m.UNKNOWN_TOPIC_OR_PARTITION),
        m.TopicMetadata("__consumer_offsets", 0, (m.PartitionMetadata(0, 0, 1, 0, (1,), (1,)),))))
    r = roundtrip(request, v, expected, response)
    # broker 3 has no address in the context: left out; the controller is the broker asked
    assert [(b.node_id, b.host, b.port) for b in r.brokers] == [(1, "127.0.0.1", 19092), (2, "127.0.0.1", 19093)]
    assert r.controller_id == 1 and r.cluster_id == "mk-test"
    t0, t1, t2 = r.topics
    assert (t0.name, t0.error_code, t0.is_internal, t2.is_internal) == ("trucks_gps", 0, False, True)
    assert (t1.name, t1.error_code) == ("nope", 3)
    p0, p1 = t0.partitions
    assert (p0.partition_index, p0.leader_id, p0.replica_nodes, p0.isr_nodes) == (0, 2, [2, 1], [2, 1])
    assert p0.leader_epoch == (4 if v >= 7 else -1)
    assert (p1.error_code, p1.leader_id) == (5, -1)
    assert p1.offline_replicas == ([4] if v >= 5 else [])  # broker 4 is not alive
    # the client's own bookkeeping takes it
    cluster = ClusterMetadata()
    cluster.update_metadata(r)
    assert {b.node_id for b in cluster.brokers()} == {1, 2}
    assert cluster.leader_for_partition(_tp("trucks_gps", 0)) == 2
    assert cluster.controller.node_id == 1
    assert cluster.cluster_id == "mk-test"


def _tp(topic, partition):
    from kafka.structs import TopicPartition
    return TopicPartition(topic, partition)


def test_metadata_all_topics_and_no_topics():
    client = Client()
    assert decode_request(client.send(KMetadata(topics=None, allow_auto_topic_creation=False), 8)).message == \
        m.MetadataRequest(CORR, None)
    assert decode_request(Client().send(KMetadata(topics=[], allow_auto_topic_creation=False), 4)).message == \
        m.MetadataRequest(CORR, ())
    decoded = decode_request(Client().send(KMetadata(topics=None, allow_auto_topic_creation=True), 8))
    assert decoded.message == m.MetadataRequest(CORR, None, allow_auto_topic_creation=True)


TOPIC_ID = "AAECAwQFBgcICQoLDA0ODw"  # minikafka's (Kafka's) text form of the UUID 00010203-0405-...


def test_metadata_v12_asks_by_topic_id_and_answers_with_ids():
    import uuid
    as_uuid = uuid.UUID(bytes=bytes(range(16)))
    request = KMetadata(topics=[KMetadata.MetadataRequestTopic(name="trucks_gps"),
                                KMetadata.MetadataRequestTopic(name=None, topic_id=as_uuid)],
                        allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    expected = m.MetadataRequest(CORR, ("trucks_gps",), False, (TOPIC_ID,))
    response = m.MetadataResponse(CORR, brokers=(1,), controller_id=m.CONTROLLER_ID, topics=(
        m.TopicMetadata("trucks_gps", 0, (m.PartitionMetadata(0, 0, 1, 0, (1,), (1,)),), TOPIC_ID),
        m.TopicMetadata("", m.UNKNOWN_TOPIC_ID, topic_id="AAAAAAAAAAAAAAAAAAAAAQ")))
    r = roundtrip(request, 12, expected, response)
    (t0, t1) = r.topics
    assert (t0.name, t0.topic_id) == ("trucks_gps", as_uuid)
    assert (t1.name, t1.error_code, t1.topic_id) == (None, m.UNKNOWN_TOPIC_ID, uuid.UUID(int=1))
    # asked by name (a zero UUID on the wire), a topic id is no null the codec refuses
    assert decode_request(Client().send(KMetadata(topics=[KMetadata.MetadataRequestTopic(name="x")],
                                                  allow_auto_topic_creation=False), 12)).message == \
        m.MetadataRequest(CORR, ("x",))


@pytest.mark.parametrize("v", (0, 1))
def test_consumer_group_heartbeat_names_topics_by_id_on_the_wire(v):
    import uuid
    K = codec.ConsumerGroupHeartbeatRequest
    as_uuid = uuid.UUID(bytes=bytes(range(16)))
    request = K(group_id="g", member_id="m1", member_epoch=3, instance_id=None, rack_id=None,
                rebalance_timeout_ms=-1, subscribed_topic_names=None, server_assignor=None,
                topic_partitions=[K.TopicPartitions(topic_id=as_uuid, partitions=[0, 2])])
    expected = m.ConsumerGroupHeartbeatRequest(CORR, "g", "m1", 3, topic_partitions=((TOPIC_ID, 0), (TOPIC_ID, 2)),
                                               client_id=CLIENT_ID, by_topic_id=True)
    response = m.ConsumerGroupHeartbeatResponse(CORR, 0, None, "m1", 4, 500, (("trucks_gps", 0), ("trucks_gps", 2)),
                                                (("trucks_gps", TOPIC_ID),))
    r = roundtrip(request, v, expected, response)
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (0, "m1", 4, 500)
    [tps] = r.assignment.topic_partitions
    assert (tps.topic_id, tps.partitions) == (as_uuid, [0, 2])
    unchanged = roundtrip(request, v, expected, m.ConsumerGroupHeartbeatResponse(CORR, 0, None, "m1", 4, 500))
    assert unchanged.assignment is None


@pytest.mark.parametrize("v", (0, 1))
def test_consumer_group_describe_answers_epochs_and_both_assignments_with_topic_ids_and_names(v):
    import uuid
    K = codec.ConsumerGroupDescribeRequest
    as_uuid = uuid.UUID(bytes=bytes(range(16)))
    request = K(group_ids=["g", "classic"], include_authorized_operations=False)
    member = m.DescribedConsumerMember("m1", None, 4, "c1", "/127.0.0.1", ("trucks_gps",),
                                       (("trucks_gps", 0),), (("trucks_gps", 0), ("trucks_gps", 2)))
    response = m.ConsumerGroupDescribeResponse(CORR, (
        m.DescribedConsumerGroup(0, "g", None, "Reconciling", 5, 5, "uniform", (member,),
                                 (("trucks_gps", TOPIC_ID),)),
        m.DescribedConsumerGroup(m.GROUP_ID_NOT_FOUND, "classic", "Group classic is not a consumer group.")))
    r = roundtrip(request, v, m.ConsumerGroupDescribeRequest(CORR, ("g", "classic")), response)
    g, classic = r.groups
    assert (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == (
        0, "Reconciling", 5, 5, "uniform")
    [x] = g.members
    assert (x.member_id, x.member_epoch, x.client_id, x.subscribed_topic_names) == ("m1", 4, "c1", ["trucks_gps"])
    [now] = x.assignment.topic_partitions
    [target] = x.target_assignment.topic_partitions
    assert (now.topic_id, now.topic_name, now.partitions) == (as_uuid, "trucks_gps", [0])
    assert (target.topic_id, target.partitions) == (as_uuid, [0, 2])
    if v >= 1:
        assert x.member_type == 1  # a consumer-protocol member (KIP-1099)
    assert (classic.error_code, classic.error_message) == (m.GROUP_ID_NOT_FOUND, "Group classic is not a consumer group.")


def test_a_heartbeat_with_a_topic_regex_is_refused_with_a_reason():
    K = codec.ConsumerGroupHeartbeatRequest
    request = K(group_id="g", member_id="m1", member_epoch=0, rebalance_timeout_ms=1000,
                subscribed_topic_names=[], subscribed_topic_regex="trucks.*", topic_partitions=[])
    decoded = decode_request(Client().send(request, 1))
    assert decoded.reply.error == m.INVALID_REQUEST and "SubscribedTopicRegex" in decoded.reply.error_message


def test_metadata_and_find_coordinator_need_the_context():
    decoded = decode_request(Client().send(KMetadata(topics=None), 8))
    with pytest.raises(ValueError, match="context"):
        encode_response(decoded, m.MetadataResponse(CORR, (1,), 1, ()))
    # a mapping with the same keys does as well (what the runtime hands over)
    out = encode_response(decoded, m.MetadataResponse(CORR, (1,), 1, ()),
                          context={"broker_id": 1, "brokers": {1: ("h", 1)}, "cluster_id": "c"})
    assert len(out) > 4


@pytest.mark.parametrize("v", ends(codec.INIT_PRODUCER_ID))
def test_init_producer_id(v):
    # as kafka/producer/transaction_manager.py for an idempotent producer
    request = KInitProducerId(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                              producer_epoch=-1, max_version=1, min_version=0)
    r = roundtrip(request, v, m.InitProducerIdRequest(CORR, None), m.InitProducerIdResponse(CORR, 0, 1000, 0))
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, 1000, 0)


# --- transactions (KIP-98) -------------------------------------------------------------------------------------


def test_a_read_committed_fetch_carries_the_isolation_level_and_gets_the_lso_and_aborted_transactions():
    request = consumer_fetch_request()
    request.isolation_level = 1
    decoded = decode_request(Client().send(request, 11))
    assert decoded.message.isolation_level == 1
    client = Client()
    decoded = decode_request(client.send(request, 11))
    r = client.receive(encode_response(decoded, m.FetchResponse(CORR, (
        m.FetchPartitionResponse("trucks_gps", 0, 0, 100, 5, BATCH_A, last_stable_offset=60,
                                 aborted_transactions=((7, 10), (9, 40))),))))
    p = r.responses[0].partitions[0]
    assert p.last_stable_offset == 60
    assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(7, 10), (9, 40)]


def test_init_producer_id_with_a_transactional_id_carries_its_timeout():
    request = KInitProducerId(transactional_id="tx", transaction_timeout_ms=9000, producer_id=-1,
                              producer_epoch=-1, max_version=4, min_version=0)
    r = roundtrip(request, 1, m.InitProducerIdRequest(CORR, "tx", 9000),
                  m.InitProducerIdResponse(CORR, m.PRODUCER_FENCED))
    assert r.error_code == m.INVALID_PRODUCER_EPOCH  # v1 predates PRODUCER_FENCED (KIP-588)


@pytest.mark.parametrize("v", ends(codec.ADD_PARTITIONS_TO_TXN))
def test_add_partitions_to_txn(v):
    Topic = KAddPartitionsToTxn.AddPartitionsToTxnTopic
    request = KAddPartitionsToTxn(v3_and_below_transactional_id="tx", v3_and_below_producer_id=1000,
                                  v3_and_below_producer_epoch=2, v3_and_below_topics=[
                                      Topic(name="t", partitions=[0, 1]), Topic(name="u", partitions=[3])],
                                  max_version=3)
    expected = m.AddPartitionsToTxnRequest(CORR, "tx", 1000, 2, (("t", 0), ("t", 1), ("u", 3)))
    r = roundtrip(request, v, expected, m.AddPartitionsToTxnResponse(CORR, (
        ("t", 0, m.NO_ERROR), ("t", 1, m.PRODUCER_FENCED), ("u", 3, m.CONCURRENT_TRANSACTIONS))))
    got = {(t.name, p.partition_index): p.partition_error_code for t in r.results_by_topic_v3_and_below
           for p in t.results_by_partition}
    fenced = m.PRODUCER_FENCED if v >= 2 else m.INVALID_PRODUCER_EPOCH
    assert got == {("t", 0): 0, ("t", 1): fenced, ("u", 3): m.CONCURRENT_TRANSACTIONS}


@pytest.mark.parametrize("v", ends(codec.ADD_OFFSETS_TO_TXN))
def test_add_offsets_to_txn(v):
    request = KAddOffsetsToTxn(transactional_id="tx", producer_id=1000, producer_epoch=2, group_id="g", max_version=3)
    r = roundtrip(request, v, m.AddOffsetsToTxnRequest(CORR, "tx", 1000, 2, "g"), m.AddOffsetsToTxnResponse(CORR, 0))
    assert r.error_code == 0


@pytest.mark.parametrize("v", ends(codec.END_TXN))
def test_end_txn(v):
    request = KEndTxn(transactional_id="tx", producer_id=1000, producer_epoch=2, committed=False, max_version=3)
    r = roundtrip(request, v, m.EndTxnRequest(CORR, "tx", 1000, 2, False),
                  m.EndTxnResponse(CORR, m.INVALID_TXN_STATE))
    assert r.error_code == m.INVALID_TXN_STATE


@pytest.mark.parametrize("v", ends(codec.TXN_OFFSET_COMMIT))
def test_txn_offset_commit(v):
    Topic = KTxnOffsetCommit.TxnOffsetCommitRequestTopic
    P = Topic.TxnOffsetCommitRequestPartition
    request = KTxnOffsetCommit(transactional_id="tx", group_id="g", producer_id=1000, producer_epoch=2,
                               generation_id=-1, member_id="", group_instance_id=None, topics=[
                                   Topic(name="t", partitions=[P(partition_index=0, committed_offset=42,
                                                                 committed_leader_epoch=3, committed_metadata="")])],
                               max_version=3)
    expected = m.TxnOffsetCommitRequest(CORR, "tx", "g", 1000, 2, (
        m.OffsetCommitPartition("t", 0, 42, 3 if v >= 2 else -1, ""),))
    r = roundtrip(request, v, expected, m.TxnOffsetCommitResponse(CORR, (("t", 0, m.NO_ERROR),)))
    assert [(t.name, p.partition_index, p.error_code) for t in r.topics for p in t.partitions] == [("t", 0, 0)]


def test_write_txn_markers_travel_between_brokers_as_private_frames():
    marker = m.WriteTxnMarkersRequest(5, (m.TxnMarker(1000, 2, True, 4, (("t", 0), ("__consumer_offsets", 7))),))
    frame, _ = codec.encode_outgoing(marker, sender=2)
    assert codec.decode_internal(frame[4:]) == (2, marker)


# --- topics and configs (the admin client) --------------------------------------------------------------------


@pytest.mark.parametrize("v", ends(codec.CREATE_TOPICS))
def test_create_topics(v):
    topics = TopicAdminMixin._process_create_topics_input({
        "trucks_gps": {"num_partitions": 10, "replication_factor": 3, "configs": {"cleanup.policy": "compact"}},
        "defaults": {}})
    request = KCreateTopics(topics=topics, timeout_ms=30000, validate_only=False)
    # -1 means "the broker's default" (v4+): passed on for the broker to fill in
    expected = m.CreateTopicsRequest(CORR, (m.TopicConfig("trucks_gps", 10, 3, (("cleanup.policy", "compact"),)),
                                            m.TopicConfig("defaults", -1, -1, ())))
    response = m.CreateTopicsResponse(CORR, (("trucks_gps", 0, None),
                                             ("defaults", m.INVALID_PARTITIONS, "number of partitions must be at least 1")))
    r = roundtrip(request, v, expected, response)
    assert [(t.name, t.error_code, t.error_message) for t in r.topics] == [
        ("trucks_gps", 0, None), ("defaults", 37, "number of partitions must be at least 1")]


@pytest.mark.parametrize("v", ends(codec.CREATE_TOPICS))
def test_create_topics_with_explicit_replicas_passes_them_on_as_listed(v):
    # kafka-python's NewTopic(name, -1, -1, replica_assignments=...) and kafka-topics
    # --replica-assignment; a partition listed twice and the counts are left for the controller.
    topics = TopicAdminMixin._process_create_topics_input({
        "placed": {"assignments": {0: [1, 2], 1: [2, 3], 2: [3, 1]}},
        "odd": {"num_partitions": 2, "replication_factor": 1, "assignments": {1: [4], 0: [4, 4]}}})
    request = KCreateTopics(topics=topics, timeout_ms=30000, validate_only=False)
    expected = m.CreateTopicsRequest(CORR, (
        m.TopicConfig("placed", -1, -1, (), ((0, (1, 2)), (1, (2, 3)), (2, (3, 1)))),
        m.TopicConfig("odd", 2, 1, (), ((1, (4,)), (0, (4, 4))))))
    response = m.CreateTopicsResponse(CORR, (("placed", 0, None), ("odd", m.INVALID_REQUEST, "both were set")))
    r = roundtrip(request, v, expected, response)
    assert [(t.name, t.error_code, t.error_message) for t in r.topics] == [
        ("placed", 0, None), ("odd", 42, "both were set")]


def test_create_topics_we_cannot_honour_get_an_error_answer():
    topics = TopicAdminMixin._process_create_topics_input({"t": {"num_partitions": 2, "replication_factor": 1}})
    client = Client()
    decoded = decode_request(client.send(KCreateTopics(topics=topics, timeout_ms=1000, validate_only=True), 4))
    assert decoded.messages == ()
    r = client.receive(encode_response(decoded, decoded.reply))
    [t] = r.topics
    assert t.error_code == m.INVALID_REQUEST and "validate_only" in t.error_message


@pytest.mark.parametrize("v", ends(codec.DELETE_TOPICS))
def test_delete_topics(v):
    # as kafka/admin/_topics.py delete_topics (kafka-python turns `topics` into topic_names below v6)
    State = KDeleteTopics.DeleteTopicState
    request = KDeleteTopics(topics=[State(name="a"), State(name="b")], timeout_ms=30000)
    response = m.DeleteTopicsResponse(CORR, (("a", 0, None), ("b", m.UNKNOWN_TOPIC_OR_PARTITION, "no such topic")))
    r = roundtrip(request, v, m.DeleteTopicsRequest(CORR, ("a", "b"), 30000), response)
    assert [(t.name, t.error_code) for t in r.responses] == [("a", 0), ("b", 3)]


@pytest.mark.parametrize("v", ends(codec.DESCRIBE_CONFIGS))
def test_describe_configs(v):
    request = ConfigAdminMixin._describe_configs_request([
        ConfigResource(ConfigResourceType.TOPIC, "trucks_gps"),
        ConfigResource(ConfigResourceType.BROKER, "1", ["log.retention.ms"])])
    expected = m.DescribeConfigsRequest(CORR, ((2, "trucks_gps", None), (4, "1", ("log.retention.ms",))))
    response = m.DescribeConfigsResponse(CORR, (
        (2, "trucks_gps", 0, None, (("cleanup.policy", "delete", False, True, False),
                                    ("retention.ms", "1000", False, False, False),
                                    ("secret", None, False, False, True))),
        (4, "1", 0, None, (("log.retention.ms", "604800000", True, False, False),))))
    r = roundtrip(request, v, expected, response)
    assert [(x.resource_type, x.resource_name, x.error_code) for x in r.results] == [(2, "trucks_gps", 0), (4, "1", 0)]
    # what the admin client makes of it
    got = ConfigAdminMixin._describe_configs_process_responses([r], "all")
    assert got["topic"]["trucks_gps"]["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
    assert got["topic"]["trucks_gps"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert got["topic"]["trucks_gps"]["retention.ms"]["value"] == "1000"
    assert got["topic"]["trucks_gps"]["secret"]["is_sensitive"] is True
    assert got["broker"]["1"]["log.retention.ms"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert set(ConfigAdminMixin._describe_configs_process_responses([r], "modified")["topic"]["trucks_gps"]) == \
        {"retention.ms", "secret"}


# --- consumer groups ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("v", ends(codec.FIND_COORDINATOR))
def test_find_coordinator(v):
    # as kafka/coordinator/base.py
    request = KFindCoordinator(key="g", key_type=0, coordinator_keys=["g"])
    expected = m.FindCoordinatorRequest(CORR, "g", 0)
    r = roundtrip(request, v, expected, m.FindCoordinatorResponse(CORR, 0, 2))
    assert (r.error_code, r.node_id, r.host, r.port) == (0, 2, "127.0.0.1", 19093)
    r = roundtrip(KFindCoordinator(key="g", key_type=0, coordinator_keys=["g"]), v, expected,
                  m.FindCoordinatorResponse(CORR, m.COORDINATOR_NOT_AVAILABLE, -1, "being created"))
    assert (r.error_code, r.node_id) == (15, -1)
    if v >= 1:
        assert r.error_message == "being created"
    # a coordinator we cannot give an address for is not available, as far as the client goes
    r = roundtrip(KFindCoordinator(key="g", key_type=0, coordinator_keys=["g"]), v, expected,
                  m.FindCoordinatorResponse(CORR, 0, 9))
    assert (r.error_code, r.node_id) == (15, -1)


@pytest.mark.parametrize("v", ends(codec.JOIN_GROUP))
def test_join_group(v):
    # as kafka/coordinator/base.py _send_join_group_request (protocols: consumer.group_protocols())
    request = KJoinGroup(group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=300000, member_id="",
                         group_instance_id=None, protocol_type="consumer",
                         protocols=[("range", b"sub-r"), ("roundrobin", b"sub-rr")], max_version=7)
    expected = m.JoinGroupRequest(CORR, "g", 10000, 300000 if v >= 1 else 10000, "", "consumer",
                                  (("range", b"sub-r"), ("roundrobin", b"sub-rr")), client_id=CLIENT_ID,
                                  require_known_member_id=v >= 4)
    response = m.JoinGroupResponse(CORR, 0, 3, "range", "m1", "m1", (("m1", b"sub-r"), ("m2", b"sub-r2")))
    r = roundtrip(request, v, expected, response)
    assert (r.error_code, r.generation_id, r.protocol_name, r.leader, r.member_id) == (0, 3, "range", "m1", "m1")
    assert [(x.member_id, x.metadata) for x in r.members] == [("m1", b"sub-r"), ("m2", b"sub-r2")]
    r = roundtrip(request, v, expected, m.JoinGroupResponse(CORR, m.MEMBER_ID_REQUIRED, member_id="m9"))
    assert (r.error_code, r.protocol_name, r.member_id, r.members) == (79, "", "m9", [])


@pytest.mark.parametrize("v", ends(codec.SYNC_GROUP))
def test_sync_group(v):
    # the leader's SyncGroup: assignments are group_assignment.items()
    request = KSyncGroup(group_id="g", generation_id=3, member_id="m1", group_instance_id=None,
                         protocol_type="consumer", protocol_name="range",
                         assignments={"m1": b"asg-1", "m2": b"asg-2"}.items(), max_version=5)
    expected = m.SyncGroupRequest(CORR, "g", 3, "m1", (("m1", b"asg-1"), ("m2", b"asg-2")))
    r = roundtrip(request, v, expected, m.SyncGroupResponse(CORR, 0, b"asg-1"))
    assert (r.error_code, r.assignment) == (0, b"asg-1")


@pytest.mark.parametrize("v", ends(codec.HEARTBEAT))
def test_heartbeat(v):
    request = KHeartbeat(group_id="g", generation_id=3, member_id="m1", group_instance_id=None)
    r = roundtrip(request, v, m.HeartbeatRequest(CORR, "g", 3, "m1"), m.HeartbeatResponse(CORR, m.REBALANCE_IN_PROGRESS))
    assert r.error_code == 27


@pytest.mark.parametrize("v", ends(codec.LEAVE_GROUP))
def test_leave_group_of_a_consumer(v):
    # as kafka/coordinator/base.py maybe_leave_group: member_id (v0-2) and a one-member list (v3+)
    request = KLeaveGroup(group_id="g", member_id="m1", members=[
        KLeaveGroup.MemberIdentity(member_id="m1", group_instance_id=None, reason=None)])
    r = roundtrip(request, v, m.LeaveGroupRequest(CORR, "g", "m1"), m.LeaveGroupResponse(CORR, 0))
    assert r.error_code == 0
    if v >= 3:
        assert [(x.member_id, x.error_code) for x in r.members] == [("m1", 0)]


def test_leave_group_of_several_members_fans_out():
    # as the admin client's remove_group_members (LeaveGroup v3+)
    from kafka.admin import MemberToRemove
    request = GroupAdminMixin._remove_group_members_batch_request(
        "g", [MemberToRemove(member_id="m1"), MemberToRemove(member_id="m2")], 3)
    client = Client()
    decoded = decode_request(client.send(request, 3))
    assert decoded.messages == (m.LeaveGroupRequest(CORR, "g", "m1"), m.LeaveGroupRequest(CORR, "g", "m2"))
    with pytest.raises(ValueError, match="fans out"):
        decoded.message
    r = client.receive(encode_response(decoded, [m.LeaveGroupResponse(CORR, 0),
                                                 m.LeaveGroupResponse(CORR, m.UNKNOWN_MEMBER_ID)]))
    assert r.error_code == 0
    assert GroupAdminMixin._remove_group_members_process_batch_response(r) == {
        "m1": Errors.NoError, "m2": Errors.UnknownMemberIdError}
    # an error about the group (not a member) goes to the top, as Kafka puts it
    client = Client()
    decoded = decode_request(client.send(GroupAdminMixin._remove_group_members_batch_request(
        "g", [MemberToRemove(member_id="m1"), MemberToRemove(member_id="m2")], 3), 3))
    r = client.receive(encode_response(decoded, (m.LeaveGroupResponse(CORR, m.NOT_COORDINATOR),) * 2))
    assert (r.error_code, r.members) == (m.NOT_COORDINATOR, [])


@pytest.mark.parametrize("v", ends(codec.OFFSET_COMMIT))
def test_offset_commit(v):
    # as kafka/coordinator/consumer.py _send_offset_commit_request
    T = KOffsetCommit.OffsetCommitRequestTopic
    P = T.OffsetCommitRequestPartition
    request = KOffsetCommit(max_version=8, group_id="g", generation_id_or_member_epoch=3, member_id="m1",
                            group_instance_id=None, topics=[T(name="trucks_gps", partitions=[
                                P(partition_index=0, committed_offset=42, committed_leader_epoch=4, committed_metadata=""),
                                P(partition_index=1, committed_offset=7, committed_leader_epoch=-1,
                                  committed_metadata=None)])])
    expected = m.OffsetCommitRequest(CORR, "g", 3, "m1", (
        m.OffsetCommitPartition("trucks_gps", 0, 42, 4 if v >= 6 else -1, ""),
        m.OffsetCommitPartition("trucks_gps", 1, 7, -1, None)))
    response = m.OffsetCommitResponse(CORR, (("trucks_gps", 0, 0), ("trucks_gps", 1, m.ILLEGAL_GENERATION)))
    r = roundtrip(request, v, expected, response)
    assert [(t.name, p.partition_index, p.error_code) for t in r.topics for p in t.partitions] == [
        ("trucks_gps", 0, 0), ("trucks_gps", 1, 22)]


def test_offset_commit_from_the_admin_client_is_a_simple_commit():
    from kafka.structs import OffsetAndMetadata
    request = GroupAdminMixin._alter_group_offsets_request("g", {_tp("t", 0): OffsetAndMetadata(5, "", None)})
    decoded = decode_request(Client().send(request, 7))
    assert decoded.message == m.OffsetCommitRequest(CORR, "g", -1, "", (m.OffsetCommitPartition("t", 0, 5, -1, ""),))


# --- static membership (KIP-345): group_instance_id on every group request that has it ---------------


@pytest.mark.parametrize("api_key, since", [(codec.JOIN_GROUP, 5), (codec.SYNC_GROUP, 3), (codec.HEARTBEAT, 3),
                                            (codec.LEAVE_GROUP, 3), (codec.OFFSET_COMMIT, 7),
                                            (codec.DESCRIBE_GROUPS, 4)])
def test_every_advertised_version_whose_schema_has_group_instance_id_is_one_we_read_or_write(api_key, since):
    # Kafka's specs (kafka-python's classes are generated from them) say where the field starts;
    # our table must agree, and our ranges must reach it (a client then sends it to us).
    def names(struct, v):
        out = set()
        for f in struct.untagged_fields(v):
            out.add(f.name)
            if f.is_struct_array() or f.is_struct():
                out |= names(f, v)
        return out

    api = codec._APIS[api_key]
    first = min(v for v in range(api.request.min_version, api.request.max_version + 1)
                if "group_instance_id" in names(api.request._struct, v) | names(api.response._struct, v))
    assert codec._INSTANCE_ID_SINCE[api_key] == first == since
    assert SUPPORTED[api_key][1] >= since


def test_static_members_requests_carry_their_instance_id_to_the_coordinator():
    sync = KSyncGroup(group_id="g", generation_id=3, member_id="m1", group_instance_id="truck-a",
                      protocol_type="consumer", protocol_name="range", assignments=[], max_version=5)
    assert decode_request(Client().send(sync, 3)).message == m.SyncGroupRequest(CORR, "g", 3, "m1", (), "truck-a")
    beat = KHeartbeat(group_id="g", generation_id=3, member_id="m1", group_instance_id="truck-a")
    assert decode_request(Client().send(beat, 3)).message == m.HeartbeatRequest(CORR, "g", 3, "m1", "truck-a")
    T = KOffsetCommit.OffsetCommitRequestTopic
    commit = KOffsetCommit(max_version=8, group_id="g", generation_id_or_member_epoch=3, member_id="m1",
                           group_instance_id="truck-a", topics=[T(name="t", partitions=[
                               T.OffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                                              committed_leader_epoch=-1, committed_metadata="")])])
    assert decode_request(Client().send(commit, 7)).message == m.OffsetCommitRequest(
        CORR, "g", 3, "m1", (m.OffsetCommitPartition("t", 0, 5, -1, ""),), "truck-a")
    # below the version that has the field, nothing is read (the frame has no such bytes)
    assert decode_request(Client().send(beat, 2)).message.group_instance_id is None
    assert decode_request(Client().send(commit, 6)).message.group_instance_id is None


def test_leave_group_v3_names_members_by_instance_id_and_echoes_it():
    # as the admin client's remove_group_members with static members: by instance id alone
    from kafka.admin import MemberToRemove
    request = GroupAdminMixin._remove_group_members_batch_request(
        "g", [MemberToRemove(group_instance_id="truck-a"), MemberToRemove(member_id="m2")], 3)
    client = Client()
    decoded = decode_request(client.send(request, 3))
    assert decoded.messages == (m.LeaveGroupRequest(CORR, "g", "", "truck-a"), m.LeaveGroupRequest(CORR, "g", "m2"))
    r = client.receive(encode_response(decoded, [m.LeaveGroupResponse(CORR, 0),
                                                 m.LeaveGroupResponse(CORR, m.FENCED_INSTANCE_ID)]))
    assert [(x.member_id, x.group_instance_id, x.error_code) for x in r.members] == [
        ("", "truck-a", 0), ("m2", None, m.FENCED_INSTANCE_ID)]


@pytest.mark.parametrize("v", ends(codec.JOIN_GROUP))
def test_join_group_tells_the_leader_which_members_are_static(v):
    request = KJoinGroup(group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=300000, member_id="",
                         group_instance_id="truck-a", protocol_type="consumer", protocols=[("range", b"s")],
                         max_version=7)
    decoded = decode_request(Client().send(request, v))
    assert decoded.message.group_instance_id == ("truck-a" if v >= 5 else None)
    response = m.JoinGroupResponse(CORR, 0, 3, "range", "m1", "m1", (("m1", b"s"), ("m2", b"s")),
                                   ("truck-a", None))
    client = Client()
    client.send(request, v)
    r = client.receive(encode_response(decoded, response))
    assert [(x.member_id, x.group_instance_id) for x in r.members] == [
        ("m1", "truck-a" if v >= 5 else None), ("m2", None)]
    with pytest.raises(ValueError, match="2 members and 1 instance ids"):
        encode_response(decoded, m.JoinGroupResponse(CORR, 0, 3, "range", "m1", "m1", (("m1", b"s"), ("m2", b"s")),
                                                     ("truck-a",)))


@pytest.mark.parametrize("v", ends(codec.DESCRIBE_GROUPS))
def test_describe_groups_reports_a_static_members_instance_id(v):
    request = GroupAdminMixin._describe_groups_request(None, ["g"])
    response = m.DescribeGroupsResponse(CORR, (m.DescribedGroup(0, "g", "Stable", "consumer", "range", (
        m.DescribedMember("m1", "cli-1", "/127.0.0.1", b"", b"", "truck-a"),
        m.DescribedMember("m2", "cli-2", "/127.0.0.1", b"", b""))),))
    r = roundtrip(request, v, m.DescribeGroupsRequest(CORR, ("g",)), response)
    assert [(x.member_id, x.group_instance_id) for x in r.groups[0].members] == [
        ("m1", "truck-a" if v >= 4 else None), ("m2", None)]


@pytest.mark.parametrize("v", ends(codec.OFFSET_FETCH))
def test_offset_fetch(v):
    # as kafka/coordinator/consumer.py _send_offset_fetch_request
    T = KOffsetFetch.OffsetFetchRequestTopic
    G = KOffsetFetch.OffsetFetchRequestGroup
    request = KOffsetFetch(group_id="g", topics=[T(name="trucks_gps", partition_indexes=[0, 1])],
                           groups=[G(group_id="g", topics=[G.OffsetFetchRequestTopics(name="trucks_gps",
                                                                                     partition_indexes=[0, 1])])],
                           require_stable=False, min_version=0, max_version=8)
    expected = m.OffsetFetchRequest(CORR, "g", (("trucks_gps", 0), ("trucks_gps", 1)))
    response = m.OffsetFetchResponse(CORR, 0, (m.OffsetFetchPartition("trucks_gps", 0, 42, 4, "meta"),
                                               m.OffsetFetchPartition("trucks_gps", 1, -1, -1, "")))
    r = roundtrip(request, v, expected, response)
    [t] = r.topics
    got = [(p.partition_index, p.committed_offset, p.metadata, p.error_code) for p in t.partitions]
    assert (t.name, got) == ("trucks_gps", [(0, 42, "meta", 0), (1, -1, "", 0)])
    assert t.partitions[0].committed_leader_epoch == (4 if v >= 5 else -1)
    # a group-level error: v2+ has a field for it, v1 repeats it on every partition asked for
    r = roundtrip(request, v, expected, m.OffsetFetchResponse(CORR, m.NOT_COORDINATOR))
    if v >= 2:
        assert (r.error_code, r.topics) == (16, [])
    else:
        assert [(p.partition_index, p.error_code) for p in r.topics[0].partitions] == [(0, 16), (1, 16)]


def test_offset_fetch_of_every_partition():
    request = KOffsetFetch(group_id="g", topics=None, groups=[], require_stable=False, min_version=2, max_version=8)
    assert decode_request(Client().send(request, 5)).message == m.OffsetFetchRequest(CORR, "g", None)


@pytest.mark.parametrize("v", ends(codec.LIST_GROUPS))
def test_list_groups(v):
    r = roundtrip(GroupAdminMixin._list_groups_request(), v, m.ListGroupsRequest(CORR),
                  m.ListGroupsResponse(CORR, 0, (("g", "consumer", "Stable"), ("h", "consumer", "Empty"))))
    assert (r.error_code, [(g.group_id, g.protocol_type) for g in r.groups]) == (
        0, [("g", "consumer"), ("h", "consumer")])


@pytest.mark.parametrize("v", ends(codec.DESCRIBE_GROUPS))
def test_describe_groups(v):
    # as kafka/admin/_groups.py; members' subscription and assignment in the consumer protocol
    from kafka.admin._acls import ACLAdminMixin
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

    subscription = bytes(ConsumerProtocolSubscription(topics=["trucks_gps"], user_data=b"").encode(version=0))
    assignment = bytes(ConsumerProtocolAssignment(assigned_partitions=[("trucks_gps", [0, 1])],
                                                  user_data=b"").encode(version=0))
    request = GroupAdminMixin._describe_groups_request(None, ["g", "h"])
    response = m.DescribeGroupsResponse(CORR, (
        m.DescribedGroup(0, "g", "Stable", "consumer", "range", (
            m.DescribedMember("m1", "cli-1", "/127.0.0.1", subscription, assignment),)),
        m.DescribedGroup(0, "h")))
    r = roundtrip(request, v, m.DescribeGroupsRequest(CORR, ("g", "h")), response)
    g, h = r.groups
    assert (g.error_code, g.group_id, g.group_state, g.protocol_type, g.protocol_data) == (
        0, "g", "Stable", "consumer", "range")
    [x] = g.members
    assert (x.member_id, x.client_id, x.client_host, x.member_metadata, x.member_assignment) == (
        "m1", "cli-1", "/127.0.0.1", subscription, assignment)
    assert (h.group_id, h.group_state, h.members) == ("h", "Dead", [])

    class Admin(GroupAdminMixin, ACLAdminMixin):
        pass

    got = Admin()._describe_groups_process_response(r)
    assert got["g"]["error"] is None and got["g"]["group_state"] == "Stable"
    [member] = got["g"]["members"]
    assert member["member_metadata"]["topics"] == ["trucks_gps"]
    assert member["member_assignment"]["assigned_partitions"] == [{"topic": "trucks_gps", "partitions": [0, 1]}]


@pytest.mark.parametrize("v", ends(codec.DELETE_GROUPS))
def test_delete_groups(v):
    request = KDeleteGroups(groups_names=["g", "h"])
    response = m.DeleteGroupsResponse(CORR, (("g", 0), ("h", m.NON_EMPTY_GROUP)))
    r = roundtrip(request, v, m.DeleteGroupsRequest(CORR, ("g", "h")), response)
    assert [(x.group_id, x.error_code) for x in r.results] == [("g", 0), ("h", 68)]


def test_a_response_of_the_wrong_kind_is_a_bug_not_a_frame():
    decoded = decode_request(Client().send(KHeartbeat(group_id="g", generation_id=1, member_id="m"), 3))
    with pytest.raises(TypeError, match="HeartbeatResponse"):
        encode_response(decoded, m.SyncGroupResponse(CORR, 0))


def test_the_answer_carries_the_request_correlation_id_not_the_dataclass_one():
    client = Client()
    decoded = decode_request(client.send(KHeartbeat(group_id="g", generation_id=1, member_id="m"), 3))
    assert client.receive(encode_response(decoded, m.HeartbeatResponse(99, 0))).error_code == 0


# --- frames no client sends -------------------------------------------------------------------------------


def valid_frames() -> dict[str, bytes]:
    frames = {
        "produce v8": Client().send(produce_request(), 8),
        "produce v3": Client().send(produce_request(), 3),
        "fetch v11": Client().send(consumer_fetch_request(), 11),
        "metadata v8": Client().send(KMetadata(topics=[KMetadata.MetadataRequestTopic(name="t")]), 8),
        "api versions v3": Client().send(api_versions_request(3), 3),
        "join group v5": Client().send(KJoinGroup(group_id="g", session_timeout_ms=1, rebalance_timeout_ms=1,
                                                  member_id="", protocol_type="consumer",
                                                  protocols=[("range", b"s")]), 5),
        "describe configs v3": Client().send(ConfigAdminMixin._describe_configs_request(
            [ConfigResource("topic", "t", ["a"])]), 3),
    }
    follower, _ = encode_outgoing(m.FetchRequest(1, 2, 1, 1, (m.FetchPartition("t", 0, 5, 1, 1),)), sender=2)
    frames["fetch v12 follower"] = bytes(follower[4:])
    return frames


VALID = valid_frames()


@pytest.mark.parametrize("name", sorted(VALID))
def test_every_truncation_of_a_valid_frame_is_a_frame_error(name):
    frame = VALID[name]
    decode_request(frame)  # whole: fine
    for cut in range(len(frame)):
        with pytest.raises(FrameError):
            decode_request(frame[:cut])


def test_reasons_say_what_was_wrong():
    with pytest.raises(FrameError, match="truncated frame"):
        decode_request(VALID["produce v8"][:30])
    with pytest.raises(FrameError, match="truncated frame: 3 bytes"):
        decode_request(b"\x00\x00\x00")
    with pytest.raises(FrameError, match="trailing bytes"):
        decode_request(VALID["metadata v8"] + b"\x00")
    with pytest.raises(FrameError, match="^unknown api key 999$"):
        decode_request(struct.pack(">hhih", 999, 0, 1, -1))
    with pytest.raises(FrameError, match=r"api key 60 \(DescribeCluster\) is not supported"):
        decode_request(struct.pack(">hhih", 60, 0, 1, -1))
    with pytest.raises(FrameError, match="^Produce v12 not supported \\(3–8\\)$"):
        decode_request(struct.pack(">hhih", 0, 12, 1, -1))
    with pytest.raises(FrameError, match="^Produce v2 not supported"):
        decode_request(struct.pack(">hhih", 0, 2, 1, -1))
    with pytest.raises(FrameError, match="^Fetch v13 not supported \\(4–12\\)$"):
        decode_request(struct.pack(">hhih", 1, 13, 1, -1))
    with pytest.raises(FrameError, match="private"):
        decode_request(bytes(encode_internal(m.BrokerHeartbeatResponse(1, 0), sender=3000)[4:]))


def test_a_null_where_the_schema_allows_none_is_refused():
    # kafka-python's decoder reads length -1 as None whatever the schema says; a null group
    # id would crash the coordinator much later
    frame = Client().send(KJoinGroup(group_id=None, session_timeout_ms=1, rebalance_timeout_ms=1, member_id="",
                                     protocol_type="consumer", protocols=[]), 5)
    with pytest.raises(FrameError, match="group_id is null"):
        decode_request(frame)
    frame = Client().send(KProduce(transactional_id=None, acks=1, timeout_ms=1, topic_data=[
        KProduce.TopicProduceData(name=None, partition_data=[])]), 8)
    with pytest.raises(FrameError, match="name is null"):
        decode_request(frame)


def test_invalid_utf8_is_a_frame_error():
    frame = bytearray(VALID["metadata v8"])
    i = frame.index(b"t", 10 + len(CLIENT_ID))
    frame[i] = 0xFF
    with pytest.raises(FrameError, match="malformed"):
        decode_request(bytes(frame))


def _decode_or_frame_error(frame: bytes) -> None:
    try:
        decoded = decode_request(frame)
    except FrameError:
        return
    # whatever survived is something the runtime can act on
    assert decoded.unsupported_version or decoded.reply is not None or decoded.messages
    for message in decoded.messages:
        assert type(message).__module__ in ("minikafka.messages", "minikafka.wire.codec")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_random_bytes_are_frame_errors_only(frame):
    _decode_or_frame_error(frame)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(sorted((k, v) for k, (lo, hi) in ACCEPTED.items() for v in range(lo, hi + 1))),
       st.integers(-(1 << 31), (1 << 31) - 1), st.binary(max_size=200))
def test_a_valid_header_and_a_random_body_is_a_frame_error_only(key_version, corr, body):
    key, version = key_version
    header = struct.pack(">hhih", key, version, corr, 3) + b"cli"
    if version >= 12 or (key == codec.API_VERSIONS and version >= 3):
        header += b"\x00"  # empty tagged fields of a flexible header
    _decode_or_frame_error(header + body)


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(sorted(VALID)), st.data())
def test_mutated_valid_frames_are_frame_errors_or_decode(name, data):
    frame = bytearray(VALID[name])
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(frame) - 1))
        frame[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(0, len(frame)))
        frame = frame[:cut] + data.draw(st.binary(max_size=20))
    _decode_or_frame_error(bytes(frame))


# --- private frames: the controller's messages ----------------------------------------------------------


STATE = m.PartitionState("trucks_gps", 3, 2, 5, (2, 1), (2, 1, 3), 9)
TOPIC = m.TopicConfig("trucks_gps", 10, 3, (("cleanup.policy", "compact"), ("retention.ms", "1000")))
INTERNAL_SAMPLES = [
    m.BrokerHeartbeatRequest(1, 2, 7, -1),
    m.BrokerHeartbeatRequest(2, 2, 7, 41, "127.0.0.1", 9092),
    m.BrokerHeartbeatRequest(3, 2, 7, 41, "127.0.0.1", 9092, 9093, ("broker-2",)),  # a log dir offline
    m.BrokerHeartbeatResponse(1, 0),
    m.BrokerHeartbeatResponse(2, m.NOT_CONTROLLER, False),
    m.AlterPartitionRequest(5, 2, "trucks_gps", 3, 5, 9, (2, 1)),
    m.AlterPartitionResponse(5, 0, STATE),
    m.AlterPartitionResponse(6, m.FENCED_LEADER_EPOCH, None),
    m.AllocateProducerIdsRequest(8, 2),
    m.AllocateProducerIdsResponse(8, 0, 1000, 1000),
    m.CreateTopicsRequest(9, (TOPIC, m.TopicConfig("été", 1, 1), m.TopicConfig("placed", -1, -1, (),
                                                                              ((0, (1, 2)), (1, (2, 3)))))),
    m.CreateTopicsResponse(9, (("trucks_gps", 0, None), ("x", m.TOPIC_ALREADY_EXISTS, "exists: ☃"))),
    m.DeleteTopicsRequest(10, ("a", "b"), 5000),
    m.DeleteTopicsResponse(10, (("a", 0, None), ("b", 3, "no such topic"))),
    m.CreateTopicsRequest(-(1 << 31), ()),
    m.DescribeQuorumRequest(11),
    m.DescribeQuorumResponse(11, 0, 3001, 4, 57, (m.QuorumReplica(3001, 57, -1, 1700000000000),
                                                   m.QuorumReplica(3000, 50)), (m.QuorumReplica(1, 57, 5, 6),)),
    m.DescribeQuorumResponse(12, m.NOT_CONTROLLER, error_message="not the leader"),
    m.CreatePartitionsRequest(13, (("t", 6), ("u", 2)), validate_only=True),
    m.CreatePartitionsRequest(13, (("t", 6), ("u", 2)), False, (None, ((1, 2),))),
    m.CreatePartitionsResponse(13, (("t", 0, None), ("u", m.INVALID_PARTITIONS, "not an increase")), 57),
    m.AlterConfigsRequest(14, ((2, "t", (("retention.ms", m.CONFIG_SET, "60000"), ("segment.bytes", m.CONFIG_DELETE, None))),),
                          incremental=False),
    m.AlterConfigsResponse(14, ((2, "t", 0, None), (4, "1", m.INVALID_REQUEST, "broker configs are static")), 58),
    m.WriteTxnMarkersRequest(15, (m.TxnMarker(1000, 2, True, 4, (("t", 0), ("t", 1))),
                                  m.TxnMarker(1001, 0, False, 4, (("__consumer_offsets", 7),)))),
    m.WriteTxnMarkersResponse(15, ((1000, "t", 0, 0), (1001, "__consumer_offsets", 7, m.INVALID_PRODUCER_EPOCH))),
    raft.VoteRequest(20, 3, 3001, 2, 40, True),
    raft.VoteResponse(20, 0, -1, 3, True),
    raft.BeginQuorumEpochRequest(21, 3, 3001),
    raft.BeginQuorumEpochResponse(21, 0, 3001, 3),
    raft.EndQuorumEpochRequest(22, 3, 3001, (3000, 3002)),
    raft.EndQuorumEpochResponse(22, 0, 3001, 3),
    raft.RaftFetchRequest(23, 1, 3, 40, 2, 500),
    raft.RaftFetchResponse(23, 0, 3001, 3, 40, 0, b"\x00\x01", (2, 38)),
    raft.RaftFetchResponse(24, m.FENCED_LEADER_EPOCH, 3001, 4, -1, 0, b""),
]


def test_every_private_message_type_has_a_sample():
    assert {type(x) for x in INTERNAL_SAMPLES} == set(INTERNAL_API_KEYS)
    assert all(key >= codec.INTERNAL_KEY_BASE for key in INTERNAL_API_KEYS.values())
    assert len(set(INTERNAL_API_KEYS.values())) == len(INTERNAL_API_KEYS)


@pytest.mark.parametrize("sample", INTERNAL_SAMPLES, ids=lambda x: type(x).__name__)
@pytest.mark.parametrize("sender", [2, m.CONTROLLER_ID, "broker-x", None])
def test_private_round_trip(sample, sender):
    framed = encode_internal(sample, sender=sender)
    (size,) = struct.unpack_from(">i", framed)
    frame = bytes(framed[4:])
    assert size == len(frame)
    assert is_internal(frame)
    assert decode_internal(frame) == (sender, sample)
    assert encode_outgoing(sample, sender=2) == (encode_internal(sample, sender=2), None)


def strategy_for(hint):
    """Any value of a type hint of our messages (the types a private frame may carry)."""
    import types as _types
    import typing

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, _types.UnionType):
        return st.one_of(*[st.none() if a is type(None) else strategy_for(a) for a in args])
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(strategy_for(args[0]), max_size=4).map(tuple)
        return st.tuples(*map(strategy_for, args))
    if hint is bool:
        return st.booleans()
    if hint is int:
        return st.integers(-(1 << 63), (1 << 63) - 1)
    if hint is str:
        return st.text(max_size=12)
    if hint is bytes:
        return st.binary(max_size=12)
    return st.builds(hint, **{name: st.integers(-(1 << 31), (1 << 31) - 1) if name == "correlation_id"  # int32
                              else strategy_for(h) for name, h in typing.get_type_hints(hint).items()})


@settings(max_examples=60, deadline=None)
@given(st.data())
@pytest.mark.campaign
def test_private_messages_round_trip_whatever_their_fields_hold(data):
    for cls in INTERNAL_API_KEYS:
        message = data.draw(strategy_for(cls), label=cls.__name__)
        sender = data.draw(st.one_of(st.integers(-(1 << 31), (1 << 31) - 1), st.text(max_size=8)))
        assert decode_internal(bytes(encode_internal(message, sender=sender)[4:])) == (sender, message)


def test_a_private_message_that_would_not_decode_is_not_encoded():
    with pytest.raises(ValueError, match="64-bit"):
        encode_internal(m.BrokerHeartbeatRequest(1, 1 << 64, 0, 0))
    with pytest.raises(ValueError, match="32 bits"):
        encode_internal(m.BrokerHeartbeatRequest(1 << 31, 1, 0, 0))
    with pytest.raises(TypeError, match="no private api key"):
        encode_internal(m.HeartbeatRequest(1, "g", 1, "m"))


def test_kafka_frames_are_not_private_and_the_other_way_round():
    assert not any(is_internal(f) for f in VALID.values())
    assert not is_internal(b"") and not is_internal(b"\x27")
    with pytest.raises(FrameError, match="unknown private api key 0"):
        decode_internal(VALID["produce v8"])


def private_frame(key: int, body: bytes, corr: int = 1, sender: bytes = b"2", version: int = 0) -> bytes:
    return struct.pack(">hhih", key, version, corr, len(sender)) + sender + body


HEARTBEAT_KEY = INTERNAL_API_KEYS[m.BrokerHeartbeatRequest]
GOOD_BODY = {"correlation_id": 1, "broker_id": 2, "incarnation": 7, "metadata_offset": -1}


@pytest.mark.parametrize("body, why", [
    ({**GOOD_BODY, "broker_id": "2"}, "broker_id should be a 64-bit int"),
    ({**GOOD_BODY, "broker_id": True}, "broker_id should be a 64-bit int"),
    ({**GOOD_BODY, "broker_id": 1 << 70}, "broker_id should be a 64-bit int"),
    ({**GOOD_BODY, "broker_id": 2.0}, "broker_id should be a 64-bit int"),
    ({**GOOD_BODY, "extra": 1}, "unknown fields"),
    ({**GOOD_BODY, "offline_log_dirs": "broker-2"}, "offline_log_dirs should be a list"),
    ({**GOOD_BODY, "offline_log_dirs": [2]}, r"offline_log_dirs\[0\] should be a string"),
    ({k: v for k, v in GOOD_BODY.items() if k != "incarnation"}, "incarnation"),
    ([1, 2, 7, -1], "should be an object"),
    ({**GOOD_BODY, "correlation_id": 2}, "correlation id"),
])
def test_private_bodies_are_checked_against_the_type_hints(body, why):
    with pytest.raises(FrameError, match=why):
        decode_internal(private_frame(HEARTBEAT_KEY, json.dumps(body).encode()))


def test_private_nested_values_are_checked_too():
    key = INTERNAL_API_KEYS[m.AlterPartitionResponse]
    good = json.loads(encode_internal(m.AlterPartitionResponse(5, 0, STATE))[4 + 10:].decode())
    bad = {**good, "state": {**good["state"], "isr": [2, "1"]}}
    with pytest.raises(FrameError, match=r"state\.isr\[1\] should be a 64-bit int"):
        decode_internal(private_frame(key, json.dumps(bad).encode(), corr=5))
    bad = {**good, "state": {**good["state"], "isr": {"0": 2}}}
    with pytest.raises(FrameError, match="should be a list"):
        decode_internal(private_frame(key, json.dumps(bad).encode(), corr=5))
    key = INTERNAL_API_KEYS[m.CreateTopicsResponse]
    bad = {"correlation_id": 1, "results": [["t", 0]]}  # (name, error, message): three items
    with pytest.raises(FrameError, match="should have 3 items"):
        decode_internal(private_frame(key, json.dumps(bad).encode()))


@pytest.mark.parametrize("frame, why", [
    (private_frame(HEARTBEAT_KEY, b"[" * 100_000 + b"]" * 100_000), "not JSON"),
    (private_frame(HEARTBEAT_KEY, b'{"correlation_id": 1, \xff}'), "not JSON"),
    (private_frame(HEARTBEAT_KEY, b"NaN"), "should be an object"),
    (private_frame(HEARTBEAT_KEY, json.dumps(GOOD_BODY).encode(), version=1), "v1 not supported"),
    (private_frame(10999, b"{}"), "unknown private api key 10999"),
    (private_frame(HEARTBEAT_KEY, json.dumps(GOOD_BODY).encode(), sender=b"1.5"), "not a node id"),
    (private_frame(HEARTBEAT_KEY, b"", sender=b"\xff"), "not UTF-8"),
    (private_frame(HEARTBEAT_KEY, b"")[:7], "truncated"),
])
def test_bad_private_frames(frame, why):
    with pytest.raises(FrameError, match=why):
        decode_internal(frame)


def _decode_internal_or_frame_error(frame: bytes) -> None:
    try:
        _, message = decode_internal(frame)
    except FrameError:
        return
    assert type(message) in INTERNAL_API_KEYS


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(sorted(INTERNAL_API_KEYS.values())), st.binary(max_size=200))
def test_random_private_bodies_are_frame_errors_only(key, body):
    _decode_internal_or_frame_error(private_frame(key, body))


@settings(max_examples=800, deadline=None)
@given(st.sampled_from(range(len(INTERNAL_SAMPLES))), st.data())
@pytest.mark.campaign
def test_mutated_private_frames_are_frame_errors_or_decode(index, data):
    frame = bytearray(encode_internal(INTERNAL_SAMPLES[index], sender=2)[4:])
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(frame) - 1))
        frame[i] = data.draw(st.sampled_from([0, 0x22, 0x2C, 0x30, 0x31, 0x5B, 0x5D, 0x7B, 0x7D, 0x74, 0x6E, 0xFF])
                             if data.draw(st.booleans()) else st.integers(0, 255))
    if data.draw(st.booleans()):
        frame = frame[:data.draw(st.integers(0, len(frame)))]
    _decode_internal_or_frame_error(bytes(frame))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_as_private_frames_are_frame_errors_only(frame):
    _decode_internal_or_frame_error(frame)


@pytest.mark.parametrize("v", [2, 3])
def test_offset_for_leader_epoch(v):
    P = KOffsetForLeaderEpoch.OffsetForLeaderTopic.OffsetForLeaderPartition
    request = KOffsetForLeaderEpoch(replica_id=-1, topics=[KOffsetForLeaderEpoch.OffsetForLeaderTopic(
        topic="t", partitions=[P(partition=0, current_leader_epoch=4, leader_epoch=2),
                               P(partition=1, current_leader_epoch=-1, leader_epoch=0)])])
    expected = m.OffsetForLeaderEpochRequest(CORR, -1, (("t", 0, 4, 2), ("t", 1, -1, 0)))
    response = m.OffsetForLeaderEpochResponse(CORR, (("t", 0, 0, 2, 57), ("t", 1, m.FENCED_LEADER_EPOCH, -1, -1)))
    r = roundtrip(request, v, expected, response)
    [t] = r.topics
    assert [(p.partition, p.error_code, p.leader_epoch, p.end_offset) for p in t.partitions] == [
        (0, 0, 2, 57), (1, m.FENCED_LEADER_EPOCH, -1, -1)]


def test_delete_records_and_create_partitions_and_configs_round_trip():
    D = KDeleteRecords.DeleteRecordsTopic
    request = KDeleteRecords(topics=[D(name="t", partitions=[D.DeleteRecordsPartition(partition_index=0, offset=5)])],
                             timeout_ms=100)
    r = roundtrip(request, 1, m.DeleteRecordsRequest(CORR, (("t", 0, 5),), 100),
                  m.DeleteRecordsResponse(CORR, (("t", 0, 5, 0),)))
    assert [(p.partition_index, p.low_watermark, p.error_code) for p in r.topics[0].partitions] == [(0, 5, 0)]
    C = KCreatePartitions.CreatePartitionsTopic
    r = roundtrip(KCreatePartitions(topics=[C(name="t", count=4, assignments=None)], timeout_ms=1, validate_only=False),
                  1, m.CreatePartitionsRequest(CORR, (("t", 4),)),
                  m.CreatePartitionsResponse(CORR, (("t", m.INVALID_PARTITIONS, "not an increase"),)))
    assert [(x.name, x.error_code, x.error_message) for x in r.results] == [("t", 37, "not an increase")]
    # explicit replicas for the new partitions (NewPartitions(new_assignments=...)): one list per new
    # partition, null for a topic the controller places
    request = KCreatePartitions(topics=[
        C(name="t", count=3, assignments=None),
        C(name="u", count=4, assignments=[C.CreatePartitionsAssignment(broker_ids=[2, 3]),
                                          C.CreatePartitionsAssignment(broker_ids=[3, 1])])],
        timeout_ms=1, validate_only=False)
    r = roundtrip(request, 1, m.CreatePartitionsRequest(CORR, (("t", 3), ("u", 4)), False,
                                                        (None, ((2, 3), (3, 1)))),
                  m.CreatePartitionsResponse(CORR, (("t", 0, None), ("u", 39, "broker 3 is not registered"))))
    assert [(x.name, x.error_code) for x in r.results] == [("t", 0), ("u", 39)]
    A = KIncrementalAlterConfigs.AlterConfigsResource
    request = KIncrementalAlterConfigs(resources=[A(resource_type=2, resource_name="t", configs=[
        A.AlterableConfig(name="retention.ms", config_operation=0, value="1000"),
        A.AlterableConfig(name="segment.bytes", config_operation=1, value=None)])], validate_only=False)
    r = roundtrip(request, 0, m.AlterConfigsRequest(CORR, ((2, "t", (("retention.ms", 0, "1000"),
                                                                     ("segment.bytes", 1, None))),)),
                  m.AlterConfigsResponse(CORR, ((2, "t", 0, None),)))
    assert [(x.resource_type, x.resource_name, x.error_code) for x in r.responses] == [(2, "t", 0)]


@pytest.mark.parametrize("follower", [False, True])
def test_a_fetch_answers_large_record_sets_are_buffers_of_their_own_and_the_frame_is_the_same(follower):
    # 30 answers of 55 MiB were each copied twice on the broker's loop while being encoded.
    big = bytes(batch(b"x" * 100_000))
    huge = bytes(batch(b"y" * 300_000))
    response = m.FetchResponse(17, (
        m.FetchPartitionResponse("trucks_gps", 0, 0, 130, 0, big),
        m.FetchPartitionResponse("trucks_gps", 1, 0, 130, 0, BATCH_A),  # small: in the frame
        m.FetchPartitionResponse("b", 0, 0, 130, 0, huge)))
    if follower:
        frame, _ = encode_outgoing(m.FetchRequest(17, 2, 500, 1, (m.FetchPartition("trucks_gps", 0, 0, -1, 0, 1 << 20),)),
                                   sender=2)
        decoded = decode_request(bytes(frame[4:]))
    else:
        decoded = decode_request(Client().send(consumer_fetch_request(), 11))
    parts = codec.encode_response_parts(decoded, response)
    assert b"".join(parts) == bytes(encode_response(decoded, response))
    assert any(part is big for part in parts) and any(part is huge for part in parts)  # not copied
    assert len(parts) == 7  # per large set: the frame up to it, its length, itself; then the rest
