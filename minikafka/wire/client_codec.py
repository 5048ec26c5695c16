"""Kafka's binary protocol for minikafka's *clients*: their dataclasses out, the answers back in.

Theory of operation
-------------------
``codec.py`` is the broker's side: a request frame in, a ``minikafka.messages`` dataclass for
the broker state machine, and its answer framed back. This module is the mirror image, for
the course's own clients (the producer's ``Sender``, the consumer's ``ConsumerNetworkClient``,
the admin client's node): the dataclass a client state machine sends becomes a request frame
at the version both ends speak (``encode_client_request``), and the response frame becomes
the dataclass the same state machine reads in the simulation (``decode_client_response``).
The layouts are kafka-python 3.0.12's protocol classes, as in ``codec.py``; each mapping
here is the inverse of one ``_X_in``/``_X_out`` pair there, field for field.

Versions: ``negotiate(broker_ranges)`` picks, per API, the highest version both the broker
(its ApiVersions answer) and we (``codec.SUPPORTED``: old, non-flexible versions every Kafka
since 2.4 serves) speak. A broker without one of them gets a clear error naming the API.

Addresses: a Metadata or FindCoordinator answer names brokers by host and port, which the
dataclasses (made for the simulation, where a node id is the address) do not carry.
``decode_client_response`` hands them to the runtime beside the dataclass.

Never: open a socket, read a clock, change a record batch (Produce and Fetch records pass
through byte for byte), or let a malformed frame raise anything but ``FrameError``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from minikafka import messages as m
from minikafka.wire import codec as c
from minikafka.wire.codec import FrameError

_CONSUMER = -1  # replica id of a client's Fetch and ListOffsets


@dataclass(frozen=True)
class Answer:
    """A decoded response: the dataclass for the node, and the broker addresses it named."""

    message: Any
    brokers: Mapping[int, tuple[str, int]]


def api_key_of(message: Any) -> int:
    """The Kafka api key a client dataclass travels as; TypeError if clients cannot send it over TCP."""
    key = _KEYS.get(type(message))
    if isinstance(message, m.AlterConfigsRequest) and not message.incremental:
        key = c.ALTER_CONFIGS
    if key is None:
        raise TypeError(f"{type(message).__name__} is not sent over TCP by minikafka's client runtime "
                        f"(it speaks {', '.join(sorted(c.api_name(k) for k in _ENCODERS))})")
    return key


def negotiate(broker_ranges: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    """Per api key both sides know: the highest version in both ranges (keys without overlap left out)."""
    out = {}
    for key, (low, high) in c.SUPPORTED.items():
        theirs = broker_ranges.get(key)
        if theirs is not None and max(low, theirs[0]) <= min(high, theirs[1]):
            out[key] = min(high, theirs[1])
    return out


# --- requests out ------------------------------------------------------------------------------------


def _by_topic(items, topic_of) -> dict[str, list]:
    out: dict[str, list] = {}
    for item in items:
        out.setdefault(topic_of(item), []).append(item)
    return out


def _produce(r: m.ProduceRequest, v: int) -> Any:
    K = c._KProduceRequest
    T, P = K.TopicProduceData, K.TopicProduceData.PartitionProduceData
    return K(version=v, transactional_id=r.transactional_id, acks=r.acks, timeout_ms=r.timeout_ms, topic_data=[
        T(name=topic, partition_data=[P(index=p.partition, records=p.records) for p in parts])
        for topic, parts in _by_topic(r.partitions, lambda p: p.topic).items()])


def _fetch(r: m.FetchRequest, v: int) -> Any:
    K = c._KFetchRequest
    T, P = K.FetchTopic, K.FetchTopic.FetchPartition
    return K(version=v, replica_id=_CONSUMER, max_wait_ms=r.max_wait_ms, min_bytes=r.min_bytes,
             max_bytes=r.max_bytes, isolation_level=r.isolation_level, session_id=0, session_epoch=-1,
             topics=[T(topic=topic, partitions=[
                 P(partition=p.partition, current_leader_epoch=p.current_leader_epoch, fetch_offset=p.fetch_offset,
                   last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=p.partition_max_bytes)
                 for p in parts])
                 for topic, parts in _by_topic(r.partitions, lambda p: p.topic).items()],
             forgotten_topics_data=[], rack_id="")


def _list_offsets(r: m.ListOffsetsRequest, v: int) -> Any:
    K = c._KListOffsetsRequest
    T, P = K.ListOffsetsTopic, K.ListOffsetsTopic.ListOffsetsPartition
    return K(version=v, replica_id=_CONSUMER, isolation_level=r.isolation_level, topics=[
        T(name=topic, partitions=[P(partition_index=p, current_leader_epoch=-1, timestamp=ts) for _, p, ts in parts])
        for topic, parts in _by_topic(r.partitions, lambda p: p[0]).items()])


def _metadata(r: m.MetadataRequest, v: int) -> Any:
    K = c._KMetadataRequest
    return K(version=v, topics=None if r.topics is None else [K.MetadataRequestTopic(name=t) for t in r.topics],
             allow_auto_topic_creation=r.allow_auto_topic_creation)


def _init_producer_id(r: m.InitProducerIdRequest, v: int) -> Any:
    return c._KInitProducerIdRequest(version=v, transactional_id=r.transactional_id,
                                     transaction_timeout_ms=r.transaction_timeout_ms)


def _find_coordinator(r: m.FindCoordinatorRequest, v: int) -> Any:
    if v < 1 and r.key_type != 0:
        raise ValueError(f"FindCoordinator v{v} finds group coordinators only")
    return c._KFindCoordinatorRequest(version=v, key=r.key, key_type=r.key_type)


def _add_partitions_to_txn(r: m.AddPartitionsToTxnRequest, v: int) -> Any:
    K = c._KAddPartitionsToTxnRequest
    return K(version=v, v3_and_below_transactional_id=r.transactional_id, v3_and_below_producer_id=r.producer_id,
             v3_and_below_producer_epoch=r.producer_epoch, v3_and_below_topics=[
                 K.AddPartitionsToTxnTopic(name=topic, partitions=[p for _, p in parts])
                 for topic, parts in _by_topic(r.partitions, lambda p: p[0]).items()])


def _add_offsets_to_txn(r: m.AddOffsetsToTxnRequest, v: int) -> Any:
    return c._KAddOffsetsToTxnRequest(version=v, transactional_id=r.transactional_id, producer_id=r.producer_id,
                                      producer_epoch=r.producer_epoch, group_id=r.group_id)


def _end_txn(r: m.EndTxnRequest, v: int) -> Any:
    return c._KEndTxnRequest(version=v, transactional_id=r.transactional_id, producer_id=r.producer_id,
                             producer_epoch=r.producer_epoch, committed=r.committed)


def _txn_offset_commit(r: m.TxnOffsetCommitRequest, v: int) -> Any:
    K = c._KTxnOffsetCommitRequest
    T = K.TxnOffsetCommitRequestTopic
    return K(version=v, transactional_id=r.transactional_id, group_id=r.group_id, producer_id=r.producer_id,
             producer_epoch=r.producer_epoch, generation_id=-1, member_id="", group_instance_id=None, topics=[
                 T(name=topic, partitions=[
                     T.TxnOffsetCommitRequestPartition(partition_index=p.partition, committed_offset=p.offset,
                                                       committed_leader_epoch=p.leader_epoch,
                                                       committed_metadata=p.metadata) for p in parts])
                 for topic, parts in _by_topic(r.offsets, lambda p: p.topic).items()])


def _describe_configs(r: m.DescribeConfigsRequest, v: int) -> Any:
    K = c._KDescribeConfigsRequest
    return K(version=v, include_synonyms=False, include_documentation=False, resources=[
        K.DescribeConfigsResource(resource_type=rtype, resource_name=name,
                                  configuration_keys=None if keys is None else list(keys))
        for rtype, name, keys in r.resources])


def _alter_configs(r: m.AlterConfigsRequest, v: int) -> Any:
    if r.incremental:
        K = c._KIncrementalAlterConfigsRequest
        config = lambda key, op, value: K.AlterConfigsResource.AlterableConfig(  # noqa: E731
            name=key, config_operation=op, value=value)
    else:  # every override of the resource replaced by these (all SETs)
        K = c._KAlterConfigsRequest
        config = lambda key, op, value: K.AlterConfigsResource.AlterableConfig(name=key, value=value)  # noqa: E731
    return K(version=v, validate_only=r.validate_only, resources=[
        K.AlterConfigsResource(resource_type=rtype, resource_name=name, configs=[config(*e) for e in entries])
        for rtype, name, entries in r.resources])


def _delete_records(r: m.DeleteRecordsRequest, v: int) -> Any:
    K = c._KDeleteRecordsRequest
    T = K.DeleteRecordsTopic
    return K(version=v, timeout_ms=r.timeout_ms, topics=[
        T(name=topic, partitions=[T.DeleteRecordsPartition(partition_index=p, offset=off) for _, p, off in parts])
        for topic, parts in _by_topic(r.partitions, lambda p: p[0]).items()])


def _offset_delete(r: m.OffsetDeleteRequest, v: int) -> Any:
    K = c._KOffsetDeleteRequest
    T = K.OffsetDeleteRequestTopic
    return K(version=v, group_id=r.group_id, topics=[
        T(name=topic, partitions=[T.OffsetDeleteRequestPartition(partition_index=p) for _, p in parts])
        for topic, parts in _by_topic(r.partitions, lambda p: p[0]).items()])


def _instance_id(api_key: int, r: Any, v: int) -> str | None:
    """A static member's group.instance.id, from the version that carries it (an older broker's
    versions cannot: it then knows the member by its member id alone, as Kafka before 2.3)."""
    if r.group_instance_id is not None and v < c._INSTANCE_ID_SINCE[api_key]:
        return None
    return r.group_instance_id


def _join_group(r: m.JoinGroupRequest, v: int) -> Any:
    K = c._KJoinGroupRequest
    return K(version=v, group_id=r.group_id, session_timeout_ms=r.session_timeout_ms,
             rebalance_timeout_ms=r.rebalance_timeout_ms, member_id=r.member_id,
             group_instance_id=_instance_id(c.JOIN_GROUP, r, v),
             protocol_type=r.protocol_type,
             protocols=[K.JoinGroupRequestProtocol(name=name, metadata=meta) for name, meta in r.protocols])


def _sync_group(r: m.SyncGroupRequest, v: int) -> Any:
    K = c._KSyncGroupRequest
    return K(version=v, group_id=r.group_id, generation_id=r.generation_id, member_id=r.member_id,
             group_instance_id=_instance_id(c.SYNC_GROUP, r, v), assignments=[
                 K.SyncGroupRequestAssignment(member_id=member, assignment=a) for member, a in r.assignments])


def _heartbeat(r: m.HeartbeatRequest, v: int) -> Any:
    return c._KHeartbeatRequest(version=v, group_id=r.group_id, generation_id=r.generation_id,
                                member_id=r.member_id, group_instance_id=_instance_id(c.HEARTBEAT, r, v))


def _leave_group(r: m.LeaveGroupRequest, v: int) -> Any:
    K = c._KLeaveGroupRequest
    if v < 3:
        return K(version=v, group_id=r.group_id, member_id=r.member_id)
    return K(version=v, group_id=r.group_id, members=[
        K.MemberIdentity(member_id=r.member_id, group_instance_id=r.group_instance_id)])


def _offset_commit(r: m.OffsetCommitRequest, v: int) -> Any:
    K = c._KOffsetCommitRequest
    T, P = K.OffsetCommitRequestTopic, K.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    return K(version=v, group_id=r.group_id, generation_id_or_member_epoch=r.generation_id, member_id=r.member_id,
             group_instance_id=_instance_id(c.OFFSET_COMMIT, r, v), retention_time_ms=-1, topics=[
                 T(name=topic, partitions=[
                     P(partition_index=p.partition, committed_offset=p.offset, committed_leader_epoch=p.leader_epoch,
                       committed_metadata=p.metadata) for p in parts])
                 for topic, parts in _by_topic(r.offsets, lambda p: p.topic).items()])


def _offset_fetch(r: m.OffsetFetchRequest, v: int) -> Any:
    K = c._KOffsetFetchRequest
    if r.partitions is None and v < 2:
        raise ValueError(f"OffsetFetch v{v} cannot ask for every partition of a group")
    return K(version=v, group_id=r.group_id, topics=None if r.partitions is None else [
        K.OffsetFetchRequestTopic(name=topic, partition_indexes=[p for _, p in parts])
        for topic, parts in _by_topic(r.partitions, lambda p: p[0]).items()])


def _create_topics(r: m.CreateTopicsRequest, v: int) -> Any:
    K = c._KCreateTopicsRequest
    T = K.CreatableTopic
    return K(version=v, timeout_ms=30000, validate_only=False, topics=[
        T(name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
          assignments=[T.CreatableReplicaAssignment(partition_index=p, broker_ids=list(ids)) for p, ids in t.assignments],
          configs=[T.CreatableTopicConfig(name=k, value=val) for k, val in t.configs])
        for t in r.topics])


def _delete_topics(r: m.DeleteTopicsRequest, v: int) -> Any:
    return c._KDeleteTopicsRequest(version=v, topic_names=list(r.topics), timeout_ms=r.timeout_ms)


def _create_partitions(r: m.CreatePartitionsRequest, v: int) -> Any:
    K = c._KCreatePartitionsRequest
    T = K.CreatePartitionsTopic
    assignments = list(r.assignments) + [None] * (len(r.topics) - len(r.assignments))
    return K(version=v, timeout_ms=30000, validate_only=r.validate_only, topics=[
        T(name=name, count=count, assignments=None if a is None else [
            T.CreatePartitionsAssignment(broker_ids=list(ids)) for ids in a])
        for (name, count), a in zip(r.topics, assignments)])


def _list_groups(r: m.ListGroupsRequest, v: int) -> Any:
    return c._KListGroupsRequest(version=v)


def _describe_groups(r: m.DescribeGroupsRequest, v: int) -> Any:
    return c._KDescribeGroupsRequest(version=v, groups=list(r.groups), include_authorized_operations=False)


def _consumer_group_describe(r: m.ConsumerGroupDescribeRequest, v: int) -> Any:
    return c._KConsumerGroupDescribeRequest(version=v, group_ids=list(r.group_ids), include_authorized_operations=False)


def _delete_groups(r: m.DeleteGroupsRequest, v: int) -> Any:
    return c._KDeleteGroupsRequest(version=v, groups_names=list(r.groups))


_ENCODERS: dict[int, tuple[type, Callable[[Any, int], Any]]] = {
    c.PRODUCE: (m.ProduceRequest, _produce),
    c.FETCH: (m.FetchRequest, _fetch),
    c.LIST_OFFSETS: (m.ListOffsetsRequest, _list_offsets),
    c.METADATA: (m.MetadataRequest, _metadata),
    c.INIT_PRODUCER_ID: (m.InitProducerIdRequest, _init_producer_id),
    c.FIND_COORDINATOR: (m.FindCoordinatorRequest, _find_coordinator),
    c.JOIN_GROUP: (m.JoinGroupRequest, _join_group),
    c.SYNC_GROUP: (m.SyncGroupRequest, _sync_group),
    c.HEARTBEAT: (m.HeartbeatRequest, _heartbeat),
    c.LEAVE_GROUP: (m.LeaveGroupRequest, _leave_group),
    c.OFFSET_COMMIT: (m.OffsetCommitRequest, _offset_commit),
    c.OFFSET_FETCH: (m.OffsetFetchRequest, _offset_fetch),
    c.CREATE_TOPICS: (m.CreateTopicsRequest, _create_topics),
    c.DELETE_TOPICS: (m.DeleteTopicsRequest, _delete_topics),
    c.CREATE_PARTITIONS: (m.CreatePartitionsRequest, _create_partitions),
    c.LIST_GROUPS: (m.ListGroupsRequest, _list_groups),
    c.DESCRIBE_GROUPS: (m.DescribeGroupsRequest, _describe_groups),
    c.DELETE_GROUPS: (m.DeleteGroupsRequest, _delete_groups),
    c.CONSUMER_GROUP_DESCRIBE: (m.ConsumerGroupDescribeRequest, _consumer_group_describe),
    c.ADD_PARTITIONS_TO_TXN: (m.AddPartitionsToTxnRequest, _add_partitions_to_txn),
    c.ADD_OFFSETS_TO_TXN: (m.AddOffsetsToTxnRequest, _add_offsets_to_txn),
    c.END_TXN: (m.EndTxnRequest, _end_txn),
    c.TXN_OFFSET_COMMIT: (m.TxnOffsetCommitRequest, _txn_offset_commit),
    c.DESCRIBE_CONFIGS: (m.DescribeConfigsRequest, _describe_configs),
    c.INCREMENTAL_ALTER_CONFIGS: (m.AlterConfigsRequest, _alter_configs),
    c.ALTER_CONFIGS: (m.AlterConfigsRequest, _alter_configs),
    c.DELETE_RECORDS: (m.DeleteRecordsRequest, _delete_records),
    c.OFFSET_DELETE: (m.OffsetDeleteRequest, _offset_delete),
}
# One dataclass, two APIs: AlterConfigsRequest travels as IncrementalAlterConfigs or AlterConfigs.
_KEYS = {cls: key for key, (cls, _) in _ENCODERS.items() if key != c.ALTER_CONFIGS}


def encode_client_request(message: Any, version: int, *, client_id: str) -> bytes:
    """Frame a client dataclass as a Kafka request at ``version`` (length prefix included)."""
    key = api_key_of(message)
    request = _ENCODERS[key][1](message, version)
    request.with_header(correlation_id=message.correlation_id, client_id=client_id)
    return request.encode(header=True, framed=True)


def expects_response(message: Any) -> bool:
    """False for Produce with acks=0: Kafka answers nothing, and the client waits for nothing."""
    return not (isinstance(message, m.ProduceRequest) and message.acks == 0)


def encode_api_versions_request(correlation_id: int, *, client_id: str) -> bytes:
    """ApiVersions v0: every broker since Kafka 0.10 answers it, so it opens every connection."""
    request = c._KApiVersionsRequest(version=0)
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return request.encode(header=True, framed=True)


def decode_api_versions(frame: bytes) -> tuple[int, dict[int, tuple[int, int]]]:
    """(correlation id, {api key: (min, max)}) from an ApiVersions v0 answer; KafkaError-free:
    a refusal raises FrameError naming the error code."""
    corr, r = _body(c._KApiVersionsResponse, 0, frame, "ApiVersions v0 response")
    if r.error_code != m.NO_ERROR:
        raise FrameError(f"ApiVersions refused with error {r.error_code}")
    return corr, {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}


# --- responses in --------------------------------------------------------------------------------------


def _body(cls: Any, version: int, frame: bytes, what: str) -> tuple[int, Any]:
    if len(frame) < 4:
        raise FrameError(f"truncated frame: {len(frame)} bytes, a response header needs 4")
    (corr,) = struct.unpack_from(">i", frame, 0)
    pos = 4
    if cls.flexible_version_q(version) and cls is not c._KApiVersionsResponse:
        pos = c._skip_tagged_fields(frame, pos, f"{what} header")
    # codec._decode_body's decoder, without its null check: a broker leaves fields it does not
    # fill null (Metadata's authorized_operations); a null we read anyway fails in _DECODERS.
    decoder = cls._struct.compiled_decode_from(version, compact=cls.flexible_version_q(version),
                                               tagged=cls.flexible_version_q(version), data_class=cls[None])
    try:
        obj, end = decoder(memoryview(frame), pos)
    except (struct.error, IndexError) as e:
        raise FrameError(f"truncated frame: {what} ends early ({e})") from None
    except Exception as e:  # noqa: BLE001 - whatever the decoder trips over is the frame's fault
        raise FrameError(f"malformed {what}: {type(e).__name__}: {e}") from None
    if end != len(frame):
        raise FrameError(f"malformed {what}: it ends at byte {end} of a {len(frame)}-byte frame")
    return corr, obj


def _produce_back(corr: int, r: Any, v: int) -> tuple:
    return m.ProduceResponse(corr, tuple(
        m.ProducePartitionResponse(t.name, p.index, p.error_code, p.base_offset, p.log_start_offset,
                                   p.error_message, tuple((e.batch_index, e.batch_index_error_message or "")
                                                          for e in p.record_errors or ()))
        for t in r.responses for p in t.partition_responses)), {}


def _fetch_back(corr: int, r: Any, v: int) -> tuple:
    return m.FetchResponse(corr, tuple(
        m.FetchPartitionResponse(t.topic, p.partition_index, p.error_code, p.high_watermark, p.log_start_offset,
                                 b"" if p.records is None else bytes(p.records), None, p.last_stable_offset,
                                 tuple((a.producer_id, a.first_offset) for a in p.aborted_transactions or ()))
        for t in r.responses for p in t.partitions)), {}


def _list_offsets_back(corr: int, r: Any, v: int) -> tuple:
    return m.ListOffsetsResponse(corr, tuple(
        (t.name, p.partition_index, p.error_code, p.timestamp, p.offset) for t in r.topics for p in t.partitions)), {}


def _metadata_back(corr: int, r: Any, v: int) -> tuple:
    brokers = {b.node_id: (b.host, b.port) for b in r.brokers}
    return m.MetadataResponse(corr, tuple(sorted(brokers)), r.controller_id, tuple(
        m.TopicMetadata(t.name, t.error_code, tuple(
            m.PartitionMetadata(p.partition_index, p.error_code, p.leader_id, p.leader_epoch,
                                tuple(p.replica_nodes), tuple(p.isr_nodes))
            for p in t.partitions))
        for t in r.topics)), brokers


def _init_producer_id_back(corr: int, r: Any, v: int) -> tuple:
    return m.InitProducerIdResponse(corr, r.error_code, r.producer_id, r.producer_epoch), {}


def _find_coordinator_back(corr: int, r: Any, v: int) -> tuple:
    brokers = {r.node_id: (r.host, r.port)} if r.error_code == m.NO_ERROR else {}
    message = r.error_message if v >= 1 else None
    return m.FindCoordinatorResponse(corr, r.error_code, r.node_id, message), brokers


def _join_group_back(corr: int, r: Any, v: int) -> tuple:
    # group_instance_id is in the members from v5 (kafka-python reads older answers as None)
    instance_ids = tuple(x.group_instance_id for x in r.members)
    return m.JoinGroupResponse(corr, r.error_code, r.generation_id, r.protocol_name or None, r.leader, r.member_id,
                               tuple((x.member_id, bytes(x.metadata)) for x in r.members),
                               instance_ids if any(i is not None for i in instance_ids) else ()), {}


def _sync_group_back(corr: int, r: Any, v: int) -> tuple:
    return m.SyncGroupResponse(corr, r.error_code, bytes(r.assignment or b"")), {}


def _heartbeat_back(corr: int, r: Any, v: int) -> tuple:
    return m.HeartbeatResponse(corr, r.error_code), {}


def _leave_group_back(corr: int, r: Any, v: int) -> tuple:
    error = r.error_code
    if v >= 3 and error == m.NO_ERROR and r.members:
        error = r.members[0].error_code
    return m.LeaveGroupResponse(corr, error), {}


def _offset_commit_back(corr: int, r: Any, v: int) -> tuple:
    return m.OffsetCommitResponse(corr, tuple(
        (t.name, p.partition_index, p.error_code) for t in r.topics for p in t.partitions)), {}


def _offset_fetch_back(corr: int, r: Any, v: int) -> tuple:
    return m.OffsetFetchResponse(corr, r.error_code if v >= 2 else m.NO_ERROR, tuple(
        m.OffsetFetchPartition(t.name, p.partition_index, p.committed_offset,
                               p.committed_leader_epoch if v >= 5 else -1, p.metadata, p.error_code)
        for t in r.topics for p in t.partitions)), {}


def _create_topics_back(corr: int, r: Any, v: int) -> tuple:
    return m.CreateTopicsResponse(corr, tuple((t.name, t.error_code, t.error_message) for t in r.topics)), {}


def _delete_topics_back(corr: int, r: Any, v: int) -> tuple:
    return m.DeleteTopicsResponse(corr, tuple((t.name, t.error_code, None) for t in r.responses)), {}


def _create_partitions_back(corr: int, r: Any, v: int) -> tuple:
    return m.CreatePartitionsResponse(corr, tuple((t.name, t.error_code, t.error_message) for t in r.results)), {}


def _list_groups_back(corr: int, r: Any, v: int) -> tuple:
    # group_state is ListGroups v4+; older answers leave it empty
    return m.ListGroupsResponse(corr, r.error_code, tuple(
        (g.group_id, g.protocol_type, g.group_state or "") for g in r.groups)), {}


def _describe_groups_back(corr: int, r: Any, v: int) -> tuple:
    return m.DescribeGroupsResponse(corr, tuple(
        m.DescribedGroup(g.error_code, g.group_id, g.group_state, g.protocol_type, g.protocol_data, tuple(
            m.DescribedMember(x.member_id, x.client_id, x.client_host, bytes(x.member_metadata),
                              bytes(x.member_assignment), x.group_instance_id)  # (instance id: v4+)
            for x in g.members))
        for g in r.groups)), {}


def _consumer_group_describe_back(corr: int, r: Any, v: int) -> tuple:
    def parts(assignment: Any) -> tuple[tuple[str, int], ...]:
        return tuple(sorted((t.topic_name, p) for t in assignment.topic_partitions for p in t.partitions))

    return m.ConsumerGroupDescribeResponse(corr, tuple(
        m.DescribedConsumerGroup(g.error_code, g.group_id, g.error_message, g.group_state, g.group_epoch,
                                 g.assignment_epoch, g.assignor_name, tuple(
            m.DescribedConsumerMember(x.member_id, x.instance_id, x.member_epoch, x.client_id, x.client_host,
                                      tuple(x.subscribed_topic_names), parts(x.assignment),
                                      parts(x.target_assignment))
            for x in g.members))
        for g in r.groups)), {}


def _delete_groups_back(corr: int, r: Any, v: int) -> tuple:
    return m.DeleteGroupsResponse(corr, tuple((g.group_id, g.error_code) for g in r.results)), {}


def _add_partitions_to_txn_back(corr: int, r: Any, v: int) -> tuple:
    return m.AddPartitionsToTxnResponse(corr, tuple(
        (t.name, p.partition_index, p.partition_error_code)
        for t in r.results_by_topic_v3_and_below for p in t.results_by_partition)), {}


def _add_offsets_to_txn_back(corr: int, r: Any, v: int) -> tuple:
    return m.AddOffsetsToTxnResponse(corr, r.error_code), {}


def _end_txn_back(corr: int, r: Any, v: int) -> tuple:
    return m.EndTxnResponse(corr, r.error_code), {}


def _txn_offset_commit_back(corr: int, r: Any, v: int) -> tuple:
    return m.TxnOffsetCommitResponse(corr, tuple(
        (t.name, p.partition_index, p.error_code) for t in r.topics for p in t.partitions)), {}


def _describe_configs_back(corr: int, r: Any, v: int) -> tuple:
    return m.DescribeConfigsResponse(corr, tuple(
        (res.resource_type, res.resource_name, res.error_code, res.error_message, tuple(
            (e.name, e.value, bool(e.read_only),
             bool(e.is_default) if v == 0 else e.config_source == c._DEFAULT_CONFIG, bool(e.is_sensitive))
            for e in res.configs))
        for res in r.results)), {}


def _alter_configs_back(corr: int, r: Any, v: int) -> tuple:
    return m.AlterConfigsResponse(corr, tuple(
        (x.resource_type, x.resource_name, x.error_code, x.error_message) for x in r.responses)), {}


def _delete_records_back(corr: int, r: Any, v: int) -> tuple:
    return m.DeleteRecordsResponse(corr, tuple(
        (t.name, p.partition_index, p.low_watermark, p.error_code) for t in r.topics for p in t.partitions)), {}


def _offset_delete_back(corr: int, r: Any, v: int) -> tuple:
    return m.OffsetDeleteResponse(corr, r.error_code, tuple(
        (t.name, p.partition_index, p.error_code) for t in r.topics for p in t.partitions)), {}


_DECODERS: dict[int, Callable[[int, Any, int], tuple]] = {
    c.PRODUCE: _produce_back, c.FETCH: _fetch_back, c.LIST_OFFSETS: _list_offsets_back,
    c.METADATA: _metadata_back, c.INIT_PRODUCER_ID: _init_producer_id_back,
    c.FIND_COORDINATOR: _find_coordinator_back, c.JOIN_GROUP: _join_group_back, c.SYNC_GROUP: _sync_group_back,
    c.HEARTBEAT: _heartbeat_back, c.LEAVE_GROUP: _leave_group_back, c.OFFSET_COMMIT: _offset_commit_back,
    c.OFFSET_FETCH: _offset_fetch_back, c.CREATE_TOPICS: _create_topics_back, c.DELETE_TOPICS: _delete_topics_back,
    c.CREATE_PARTITIONS: _create_partitions_back, c.LIST_GROUPS: _list_groups_back,
    c.DESCRIBE_GROUPS: _describe_groups_back, c.DELETE_GROUPS: _delete_groups_back,
    c.CONSUMER_GROUP_DESCRIBE: _consumer_group_describe_back,
    c.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn_back, c.ADD_OFFSETS_TO_TXN: _add_offsets_to_txn_back,
    c.END_TXN: _end_txn_back, c.TXN_OFFSET_COMMIT: _txn_offset_commit_back,
    c.DESCRIBE_CONFIGS: _describe_configs_back, c.INCREMENTAL_ALTER_CONFIGS: _alter_configs_back,
    c.ALTER_CONFIGS: _alter_configs_back, c.DELETE_RECORDS: _delete_records_back,
    c.OFFSET_DELETE: _offset_delete_back,
}
assert set(_DECODERS) == set(_ENCODERS)


def decode_client_response(api_key: int, version: int, frame: bytes) -> Answer:
    """Decode a response frame (after the length prefix) to what the request's version says.
    Raises ``FrameError`` for a frame that does not fit."""
    name = c.api_name(api_key)
    what = f"{name} v{version} response"
    corr, r = _body(c._APIS[api_key].response, version, frame, what)
    try:
        message, brokers = _DECODERS[api_key](corr, r, version)
    except FrameError:
        raise
    except Exception as e:  # a field that does not fit our dataclass: the frame's fault
        raise FrameError(f"malformed {what}: {type(e).__name__}: {e}") from None
    return Answer(message, brokers)


def correlation_id_of(frame: bytes) -> int:
    if len(frame) < 4:
        raise FrameError(f"truncated frame: {len(frame)} bytes, a response header needs 4")
    return struct.unpack_from(">i", frame, 0)[0]


__all__ = ["Answer", "api_key_of", "correlation_id_of", "decode_api_versions", "decode_client_response",
           "encode_api_versions_request", "encode_client_request", "expects_response", "negotiate"]
