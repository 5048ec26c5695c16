"""Kafka's binary protocol for minikafka's nodes: frames in, dataclasses out, and back.

Theory of operation
-------------------
A Kafka connection carries *frames*: a 4-byte big-endian length, then that many bytes. A
request frame is a header (api key, api version, correlation id, client id; plus tagged
fields in the "flexible" versions) and a body laid out by that API's schema at that version
(Kafka's ``clients/src/main/resources/common/message/*.json``). A response frame is a header
(the correlation id) and a body. This module maps those bodies to and from the dataclasses of
``minikafka.messages``, so the broker state machine the simulation drives is the one that
answers kafka-python and librdkafka over TCP. The body layouts are not written here: they
are kafka-python's ``kafka.protocol`` classes, generated from Kafka's own JSON specs (the
pinned kafka-python 3.0.12; we use its decoders, encoders and nested classes).

Four directions, one per runtime role:

- server side (a broker answering a client or a follower): ``decode_request(frame)`` gives
  a ``Decoded`` (the header, and the dataclass(es) to hand to the node);
  ``encode_response(decoded, response, context=...)`` gives the framed answer at the
  request's version and correlation id; ``encode_api_versions(decoded)`` answers the
  version handshake, which the runtime does itself;
- client side (a follower fetching from its leader, with real Fetch frames, as in Kafka):
  ``encode_request(message)`` and ``decode_response(api_key, version, frame)``;
- the controller's own messages (heartbeats, the Raft quorum's, AlterPartition, producer id
  blocks, forwarded CreateTopics/DeleteTopics/CreatePartitions/AlterConfigs, the last two
  carrying both AlterConfigs and IncrementalAlterConfigs; and WriteTxnMarkers, which a
  transaction coordinator sends to partition leaders): Kafka has no public schema we could reuse
  faithfully, so they travel as *private* frames: a request header with an api key of
  10000 or more (``INTERNAL_KEY_BASE``), the sender's node id as client id, and a JSON body
  that is checked field by field against the dataclass's type hints on the way in
  (``encode_internal``/``decode_internal``). ``encode_outgoing`` picks the right one.

Versions: ``SUPPORTED`` is what we advertise in ApiVersions. We choose old, *non-flexible*
versions that every client accepts (measured with kafka-python 3.0 and librdkafka 2.0):
the floor is Kafka 4.0's (KIP-896 removed older ones), the ceiling the last version before
the API turned flexible, except ApiVersions itself (v3 is what librdkafka opens with). A
client sends ApiVersions v4 first; we answer error 35 (UNSUPPORTED_VERSION) in a v0 body
listing our ranges, and it retries with v3. ``ACCEPTED`` is one step wider: Fetch v12 (the
first flexible one) is accepted but not advertised, because a follower needs its
``last_fetched_epoch`` and the leader's ``diverging_epoch`` (KIP-320/595 log truncation),
which older Fetch versions cannot carry; clients never see v12 offered, so they stay on 11.

Invariants
- Record batches are opaque: Produce records and Fetch records are passed through byte for
  byte, never decoded or re-encoded (the broker validates and stores them as they came).
- Every frame from the network is untrusted. Anything wrong with it (truncated, trailing
  bytes, an unknown api key or version, a null where the schema allows none, invalid UTF-8,
  bad JSON, a field of the wrong type) raises ``FrameError`` with a reason that says what
  was wrong, and nothing else: the runtime closes that one connection and logs the reason.
- A request we understand but do not serve (CreateTopics with ``validate_only``) is not a
  frame error: ``Decoded.reply`` holds the Kafka error answer, built here, for the runtime to
  send back at once. Explicit replica assignments (CreateTopics, CreatePartitions) are passed
  on as they came: the controller judges them, as Kafka's does.
- A response is always encoded at the request's version with the request's correlation id.

Never: unpickle, eval or import anything named by a frame (private bodies are JSON, rebuilt
only into the dataclasses registered below); let a malformed frame raise anything but
``FrameError``; change a record batch.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import types
import typing
import uuid
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, Mapping, Sequence, Union

try:
    import kafka.version
    from kafka.protocol.admin import (
        AlterConfigsRequest as _KAlterConfigsRequest,
        AlterConfigsResponse as _KAlterConfigsResponse,
        CreatePartitionsRequest as _KCreatePartitionsRequest,
        CreatePartitionsResponse as _KCreatePartitionsResponse,
        CreateTopicsRequest as _KCreateTopicsRequest,
        CreateTopicsResponse as _KCreateTopicsResponse,
        DeleteGroupsRequest as _KDeleteGroupsRequest,
        DeleteRecordsRequest as _KDeleteRecordsRequest,
        DeleteRecordsResponse as _KDeleteRecordsResponse,
        DeleteGroupsResponse as _KDeleteGroupsResponse,
        DeleteTopicsRequest as _KDeleteTopicsRequest,
        DeleteTopicsResponse as _KDeleteTopicsResponse,
        DescribeConfigsRequest as _KDescribeConfigsRequest,
        DescribeConfigsResponse as _KDescribeConfigsResponse,
        DescribeGroupsRequest as _KDescribeGroupsRequest,
        DescribeGroupsResponse as _KDescribeGroupsResponse,
        DescribeQuorumRequest as _KDescribeQuorumRequest,
        DescribeQuorumResponse as _KDescribeQuorumResponse,
        IncrementalAlterConfigsRequest as _KIncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse as _KIncrementalAlterConfigsResponse,
        ListGroupsRequest as _KListGroupsRequest,
        ListGroupsResponse as _KListGroupsResponse,
    )
    from kafka.protocol.api_key import ApiKey as _KafkaApiKey
    from kafka.protocol.consumer import (
        FetchRequest as _KFetchRequest,
        FetchResponse as _KFetchResponse,
        HeartbeatRequest as _KHeartbeatRequest,
        HeartbeatResponse as _KHeartbeatResponse,
        JoinGroupRequest as _KJoinGroupRequest,
        JoinGroupResponse as _KJoinGroupResponse,
        LeaveGroupRequest as _KLeaveGroupRequest,
        LeaveGroupResponse as _KLeaveGroupResponse,
        ListOffsetsRequest as _KListOffsetsRequest,
        ListOffsetsResponse as _KListOffsetsResponse,
        OffsetCommitRequest as _KOffsetCommitRequest,
        OffsetCommitResponse as _KOffsetCommitResponse,
        OffsetFetchRequest as _KOffsetFetchRequest,
        OffsetFetchResponse as _KOffsetFetchResponse,
        OffsetDeleteRequest as _KOffsetDeleteRequest,
        OffsetDeleteResponse as _KOffsetDeleteResponse,
        OffsetForLeaderEpochRequest as _KOffsetForLeaderEpochRequest,
        OffsetForLeaderEpochResponse as _KOffsetForLeaderEpochResponse,
        SyncGroupRequest as _KSyncGroupRequest,
        SyncGroupResponse as _KSyncGroupResponse,
    )
    from kafka.protocol.metadata import (
        ApiVersionsRequest as _KApiVersionsRequest,
        ApiVersionsResponse as _KApiVersionsResponse,
        FindCoordinatorRequest as _KFindCoordinatorRequest,
        FindCoordinatorResponse as _KFindCoordinatorResponse,
        MetadataRequest as _KMetadataRequest,
        MetadataResponse as _KMetadataResponse,
    )
    from kafka.protocol.producer.transaction import (
        AddOffsetsToTxnRequest as _KAddOffsetsToTxnRequest,
        AddOffsetsToTxnResponse as _KAddOffsetsToTxnResponse,
        AddPartitionsToTxnRequest as _KAddPartitionsToTxnRequest,
        AddPartitionsToTxnResponse as _KAddPartitionsToTxnResponse,
        EndTxnRequest as _KEndTxnRequest,
        EndTxnResponse as _KEndTxnResponse,
        TxnOffsetCommitRequest as _KTxnOffsetCommitRequest,
        TxnOffsetCommitResponse as _KTxnOffsetCommitResponse,
    )
    from kafka.protocol.producer import (
        InitProducerIdRequest as _KInitProducerIdRequest,
        InitProducerIdResponse as _KInitProducerIdResponse,
        ProduceRequest as _KProduceRequest,
        ProduceResponse as _KProduceResponse,
    )
    from kafka.protocol.api_message import ApiMessage as _KApiMessage

    import minikafka.wire.schemas as _own_schemas

    # KIP-848's heartbeat: kafka-python 3.0.12 has no schema for it; ours is in wire/schemas/.
    class ConsumerGroupHeartbeatRequest(_KApiMessage, load_json=_own_schemas):
        pass

    class ConsumerGroupHeartbeatResponse(_KApiMessage, load_json=_own_schemas):
        pass

    _KConsumerGroupHeartbeatRequest, _KConsumerGroupHeartbeatResponse = (
        ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse)

    # KIP-848's describe (api key 69): not in kafka-python 3.0.12 either.
    class ConsumerGroupDescribeRequest(_KApiMessage, load_json=_own_schemas):
        pass

    class ConsumerGroupDescribeResponse(_KApiMessage, load_json=_own_schemas):
        pass

    _KConsumerGroupDescribeRequest, _KConsumerGroupDescribeResponse = (
        ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse)
except ImportError as _e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "minikafka.wire needs kafka-python 3.0.12 for the Kafka protocol classes it builds on: "
        "pip install 'kafka-python==3.0.12' (or pip install -e '.[course]')"
    ) from _e

from minikafka import messages as m
from minikafka.storage.file_records import FileRecords

KAFKA_PYTHON_VERSION = "3.0.12"  # the protocol classes are kafka-python internals: pinned
if kafka.version.__version__ != KAFKA_PYTHON_VERSION:  # pragma: no cover - depends on the environment
    import warnings

    warnings.warn(
        f"minikafka.wire was written against kafka-python {KAFKA_PYTHON_VERSION}, found "
        f"{kafka.version.__version__}; its protocol classes are an internal API",
        stacklevel=2,
    )

# --- api keys and versions ---------------------------------------------------------------------------

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP = 8, 9, 10, 11, 12, 13
SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS, API_VERSIONS = 14, 15, 16, 18
CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID, DESCRIBE_CONFIGS, DELETE_GROUPS = 19, 20, 22, 32, 42
DESCRIBE_QUORUM = 55
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69  # KIP-848
ALTER_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS = 33, 37, 44
DELETE_RECORDS, OFFSET_FOR_LEADER_EPOCH, OFFSET_DELETE = 21, 23, 47
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
METADATA_TOPIC = "__cluster_metadata"

SUPPORTED: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 8),  # v3: record batch v2 + transactional_id; v9 turns flexible
    FETCH: (4, 11),  # v4: isolation level, last stable offset; v11: rack id; v12 flexible
    LIST_OFFSETS: (1, 5),  # v1: one offset per partition (no old-style list); v6 flexible
    # v4 makes kafka-python guess a >= 0.11 broker and write v2 batches; v10 carries topic ids,
    # v12 asks by them: KIP-848 names topics by id, so a new-protocol consumer needs them
    METADATA: (4, 12),
    # Static membership (KIP-345): JoinGroup v5, SyncGroup/Heartbeat/LeaveGroup v3, OffsetCommit v7
    # and DescribeGroups v4 carry group_instance_id; each is read or written (_INSTANCE_ID_SINCE)
    OFFSET_COMMIT: (2, 7),  # v6: leader epoch; v7: group instance id; v8 flexible
    OFFSET_FETCH: (1, 5),  # v2: null topics = all, top-level error; v5: leader epoch
    FIND_COORDINATOR: (0, 2),  # librdkafka caps it at 2 whatever we offer
    JOIN_GROUP: (0, 5),  # v4: MEMBER_ID_REQUIRED first join; librdkafka caps at 5
    HEARTBEAT: (0, 3),
    LEAVE_GROUP: (0, 3),  # v3: a list of members (kafka-python); librdkafka sends v1
    SYNC_GROUP: (0, 3),
    DESCRIBE_GROUPS: (0, 4),
    LIST_GROUPS: (0, 2),
    API_VERSIONS: (0, 3),  # v3 is flexible, but it is librdkafka's first try; kafka-python's is v4
    CREATE_TOPICS: (2, 4),  # v4: num_partitions/replication_factor may be -1 (broker defaults)
    DELETE_TOPICS: (1, 3),
    INIT_PRODUCER_ID: (0, 1),  # kafka-python's producer is idempotent by default: it asks first
    DESCRIBE_CONFIGS: (1, 3),  # v1: config_source instead of is_default
    DELETE_GROUPS: (0, 1),
    DESCRIBE_QUORUM: (0, 1),  # v1: last fetch / caught-up timestamps; v2 adds directory ids and nodes
    ALTER_CONFIGS: (0, 1),  # v2 turns flexible; kafka-python uses it only without IncrementalAlterConfigs
    CREATE_PARTITIONS: (0, 1),  # v2 turns flexible
    INCREMENTAL_ALTER_CONFIGS: (0, 0),  # v1 turns flexible; both kafka-python and librdkafka send v0
    DELETE_RECORDS: (0, 1),  # v2 turns flexible
    OFFSET_FOR_LEADER_EPOCH: (2, 3),  # v2: Kafka 4's floor (current leader epoch); v4 turns flexible
    OFFSET_DELETE: (0, 0),  # its only version
    # Transactions (KIP-98): librdkafka sends AddPartitionsToTxn/AddOffsetsToTxn v0 whatever we
    # offer; v3 turns flexible. PRODUCER_FENCED is told as INVALID_PRODUCER_EPOCH below v2.
    ADD_PARTITIONS_TO_TXN: (0, 2),
    ADD_OFFSETS_TO_TXN: (0, 2),
    END_TXN: (0, 2),
    TXN_OFFSET_COMMIT: (0, 2),  # v2: leader epoch; v3 (generation, member) turns flexible
    CONSUMER_GROUP_HEARTBEAT: (0, 1),  # KIP-848; v1: the client makes its member id (KIP-1082)
    CONSUMER_GROUP_DESCRIBE: (0, 1),  # KIP-848; v1 adds each member's MemberType (KIP-1099)
}

FOLLOWER_FETCH_VERSION = 12  # the first Fetch with last_fetched_epoch / diverging_epoch
ACCEPTED: dict[int, tuple[int, int]] = {**SUPPORTED, FETCH: (SUPPORTED[FETCH][0], FOLLOWER_FETCH_VERSION)}

INTERNAL_KEY_BASE = 10000  # private api keys (the controller's messages) start here

_INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")  # Metadata's is_internal
# Errors that are about the group (or its coordinator), not one member: LeaveGroup v3+ puts
# them at the top level, as Kafka does, and the others at the member level.
_GROUP_LEVEL_ERRORS = frozenset({
    m.COORDINATOR_LOAD_IN_PROGRESS, m.COORDINATOR_NOT_AVAILABLE, m.NOT_COORDINATOR, m.INVALID_GROUP_ID,
})
# DescribeConfigs v1+ says where a value came from (Kafka's ConfigSource).
_UNKNOWN_CONFIG, _DYNAMIC_TOPIC_CONFIG, _STATIC_BROKER_CONFIG, _DEFAULT_CONFIG = 0, 1, 4, 5
_TOPIC_RESOURCE, _BROKER_RESOURCE = 2, 4


class FrameError(Exception):
    """A frame we cannot (or will not) decode; the message says what was wrong with it."""


@dataclass(frozen=True)
class ApiVersionsRequest:
    """The version handshake. The runtime answers it itself (``encode_api_versions``); it
    never reaches a node, which is why it is not in ``minikafka.messages``."""

    correlation_id: int
    client_software_name: str | None = None  # v3+
    client_software_version: str | None = None


@dataclass(frozen=True)
class BrokerContext:
    """What a response needs that the state machine does not know: where brokers listen.

    ``broker_id`` is the broker that received the request: the controller id a client sees
    in Metadata (minikafka brokers forward CreateTopics and DeleteTopics to the controller,
    as KRaft brokers do, and kafka-python's admin client sends those to "the controller")."""

    broker_id: int
    brokers: Mapping[int, tuple[str, int]]  # node id -> (host, port), the reachable ones
    cluster_id: str = "minikafka"

    @classmethod
    def of(cls, context: BrokerContext | Mapping[str, Any] | None) -> BrokerContext | None:
        """Accept a ``BrokerContext`` or a mapping with the same keys (what a runtime has)."""
        if context is None or isinstance(context, BrokerContext):
            return context
        return cls(int(context["broker_id"]), dict(context["brokers"]), context.get("cluster_id", "minikafka"))


@dataclass(frozen=True)
class Decoded:
    """A decoded request frame.

    ``messages`` is what to hand to the node: one dataclass, with the frame's correlation id;
    a LeaveGroup v3+ naming several members fans out into one ``LeaveGroupRequest`` each (same
    correlation id), whose responses ``encode_response`` takes back as a sequence, in order.
    ``reply``, when set, is a response to send back at once instead (``messages`` is then
    empty). ``unsupported_version`` marks an ApiVersions request newer than ours: only the
    header was read, and ``encode_api_versions`` answers it with error 35.
    ``kafka_request`` is the request as kafka-python decoded it, for fields our dataclasses
    do not carry (Metadata ``allow_auto_topic_creation``, Fetch ``isolation_level``, ...)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    messages: tuple = ()
    reply: Any = None
    unsupported_version: bool = False
    kafka_request: Any = field(default=None, repr=False, compare=False)

    @property
    def message(self) -> Any:
        """The one message for the node (``None`` when ``reply`` answers the request)."""
        if len(self.messages) > 1:
            raise ValueError(
                f"{self.api_name} v{self.api_version} fans out into {len(self.messages)} messages: use .messages")
        return self.messages[0] if self.messages else None

    @property
    def expects_response(self) -> bool:
        """False for Produce with acks=0: Kafka sends nothing back, and the client waits for nothing."""
        return not (self.api_key == PRODUCE and self.kafka_request is not None and self.kafka_request.acks == 0)

    @property
    def api_name(self) -> str:
        return api_name(self.api_key)


def api_name(api_key: int) -> str:
    try:
        return _KafkaApiKey(api_key).name
    except ValueError:
        return f"api key {api_key}"


# --- low-level reading ------------------------------------------------------------------------------


def _uvarint(frame: bytes, pos: int, what: str) -> tuple[int, int]:
    value = shift = 0
    for _ in range(5):
        if pos >= len(frame):
            raise FrameError(f"truncated frame: {what} ends inside a varint")
        b = frame[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
    raise FrameError(f"malformed {what}: varint longer than 5 bytes")


def _skip_tagged_fields(frame: bytes, pos: int, what: str) -> int:
    count, pos = _uvarint(frame, pos, what)
    for _ in range(count):
        _tag, pos = _uvarint(frame, pos, what)
        size, pos = _uvarint(frame, pos, what)
        pos += size
        if pos > len(frame):
            raise FrameError(f"truncated frame: a tagged field of {what} runs past the end")
    return pos


def _read_request_header(frame: bytes) -> tuple[int, int, int, str | None, int]:
    """Request header v1 (the part every version shares): key, version, correlation id,
    client id (a classic nullable string even in flexible header v2). Returns where it ends."""
    if len(frame) < 10:
        raise FrameError(f"truncated frame: {len(frame)} bytes, a request header needs at least 10")
    api_key, version, corr, n = struct.unpack_from(">hhih", frame, 0)
    if n < -1:
        raise FrameError(f"malformed request header: client id length {n}")
    if n == -1:
        return api_key, version, corr, None, 10
    if 10 + n > len(frame):
        raise FrameError(f"truncated frame: client id of {n} bytes, {len(frame) - 10} left")
    try:
        client_id = bytes(frame[10:10 + n]).decode("utf-8")
    except UnicodeDecodeError as e:
        raise FrameError(f"malformed request header: client id is not UTF-8 ({e})") from None
    return api_key, version, corr, client_id, 10 + n


def _decode_body(cls: Any, version: int, frame: bytes, pos: int, what: str) -> Any:
    """Decode a body with kafka-python's compiled decoder, insisting it fills the frame
    exactly, and that no field the schema says is non-null came out null."""
    flexible = cls.flexible_version_q(version)
    # The compiled decoder (not ApiMessage.decode) because it tells where the body ended: a
    # Bytes field reads a short slice without complaint, so only the end position shows a
    # truncated frame, and only it shows trailing bytes.
    decoder = cls._struct.compiled_decode_from(version, compact=flexible, tagged=flexible, data_class=cls[None])
    try:
        obj, end = decoder(memoryview(frame), pos)
    except (struct.error, IndexError) as e:  # read past the end
        raise FrameError(f"truncated frame: {what} ends early ({e})") from None
    except Exception as e:  # an untrusted frame: whatever the decoder trips over is the frame's fault
        raise FrameError(f"malformed {what}: {type(e).__name__}: {e}") from None
    if end > len(frame):
        raise FrameError(f"truncated frame: {what} needs {end} bytes, the frame has {len(frame)}")
    if end < len(frame):
        raise FrameError(f"malformed {what}: {len(frame) - end} trailing bytes")
    _check_nulls(obj, cls._struct, version, what)
    return obj


def _check_nulls(obj: Any, struct_field: Any, version: int, path: str) -> None:
    # The decoders read a length of -1 as null whatever the schema says; a null group id or
    # topic name would crash the node much later, far from the bad frame. Refuse it here.
    for f in struct_field.untagged_fields(version):
        value = getattr(obj, f.name)
        if value is None:
            # A uuid is never null on the wire: kafka-python reads the zero UUID (Kafka's "no
            # id", e.g. a Metadata v10+ topic asked for by name) as None.
            if not f.nullable_for_version_q(version) and getattr(getattr(f, "_type", None), "__name__", "") != "UUID":
                raise FrameError(f"malformed {path}: {f.name} is null")
        elif f.is_struct_array():
            for item in value:
                _check_nulls(item, f, version, f"{path}.{f.name}[]")
        elif f.is_struct():
            _check_nulls(value, f, version, f"{path}.{f.name}")


# --- server side: requests in -----------------------------------------------------------------------


class _Reply(Exception):
    """Raised by a request mapper: answer with this response instead of asking the node."""

    def __init__(self, response: Any) -> None:
        super().__init__(type(response).__name__)
        self.response = response


def _produce_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    # A transactional Produce needs nothing more than its batches: they carry the producer id,
    # epoch and the transactional bit; the partition's producer state does the rest.
    # records: the decoder already copied them out of the frame as bytes; passed on untouched
    return (m.ProduceRequest(corr, r.acks, r.timeout_ms, tuple(
        m.ProducePartition(t.name, p.index, b"" if p.records is None else p.records)
        for t in r.topic_data for p in t.partition_data), r.transactional_id if v >= 3 else None),)


def _fetch_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    # Fields newer than v read as their schema defaults (-1 epochs). Sessions (v7+) are
    # ignored: we always answer session_id 0, so clients keep sending full fetches.
    return (m.FetchRequest(corr, r.replica_id, r.max_wait_ms, r.min_bytes, tuple(
        m.FetchPartition(t.topic, p.partition, p.fetch_offset, p.last_fetched_epoch, p.current_leader_epoch,
                         p.partition_max_bytes)
        for t in r.topics for p in t.partitions), r.max_bytes, isolation_level=r.isolation_level),)


def _list_offsets_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (m.ListOffsetsRequest(corr, tuple(
        (t.name, p.partition_index, p.timestamp) for t in r.topics for p in t.partitions),
        isolation_level=r.isolation_level if v >= 2 else 0),)


_NO_TOPIC_ID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: "no id"


def _uuid_of(topic_id: str | None) -> uuid.UUID:
    """minikafka's topic id (Kafka's ``Uuid.toString``: URL-safe base64, no padding) as a UUID."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "==")) if topic_id else _NO_TOPIC_ID


def _topic_id_of(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def _metadata_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    # None asks for every topic, [] for none (v1+); allow_auto_topic_creation exists from v4
    # (our floor); from v10 a topic may be asked for by id, with a null name (KIP-516)
    if r.topics is None:
        return (m.MetadataRequest(corr, None, bool(r.allow_auto_topic_creation)),)
    names = tuple(t.name for t in r.topics if t.name is not None)
    ids = tuple(_topic_id_of(t.topic_id) for t in r.topics if t.name is None and t.topic_id is not None)
    if any(t.name is None and t.topic_id in (None, _NO_TOPIC_ID) for t in r.topics):
        raise ValueError("a topic with neither a name nor an id")
    return (m.MetadataRequest(corr, names, bool(r.allow_auto_topic_creation), ids),)


def _init_producer_id_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (m.InitProducerIdRequest(corr, r.transactional_id, r.transaction_timeout_ms),)


def _add_partitions_to_txn_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (m.AddPartitionsToTxnRequest(corr, r.v3_and_below_transactional_id, r.v3_and_below_producer_id,
                                        r.v3_and_below_producer_epoch, tuple(
        (t.name, p) for t in r.v3_and_below_topics for p in t.partitions)),)


def _add_offsets_to_txn_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (m.AddOffsetsToTxnRequest(corr, r.transactional_id, r.producer_id, r.producer_epoch, r.group_id),)


def _end_txn_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (m.EndTxnRequest(corr, r.transactional_id, r.producer_id, r.producer_epoch, bool(r.committed)),)


def _txn_offset_commit_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (m.TxnOffsetCommitRequest(corr, r.transactional_id, r.group_id, r.producer_id, r.producer_epoch, tuple(
        m.OffsetCommitPartition(t.name, p.partition_index, p.committed_offset,
                                p.committed_leader_epoch if v >= 2 else -1, p.committed_metadata)
        for t in r.topics for p in t.partitions)),)


def _create_topics_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    # num_partitions / replication_factor of -1 (v4+: "broker default") are passed on as -1;
    # whoever applies num.partitions / default.replication.factor must replace them.
    # Explicit replicas go on as listed (a partition named twice included): the controller
    # judges them as Kafka's ReplicationControlManager does.
    if r.validate_only:
        refusal = "validate_only is not supported: the topic would really be created"
        raise _Reply(m.CreateTopicsResponse(corr, tuple((t.name, m.INVALID_REQUEST, refusal) for t in r.topics)))
    return (m.CreateTopicsRequest(corr, tuple(
        m.TopicConfig(t.name, t.num_partitions, t.replication_factor,
                      tuple((c.name, c.value) for c in t.configs if c.value is not None),  # null: the default
                      tuple((a.partition_index, tuple(a.broker_ids)) for a in t.assignments))
        for t in r.topics)),)


def _delete_topics_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (m.DeleteTopicsRequest(corr, tuple(r.topic_names), r.timeout_ms),)


def _describe_configs_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (m.DescribeConfigsRequest(corr, tuple(
        (res.resource_type, res.resource_name,
         None if res.configuration_keys is None else tuple(res.configuration_keys))
        for res in r.resources)),)


def _create_partitions_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    # assignments: null (the controller places the new partitions) or one broker list per new one
    assignments = tuple(None if t.assignments is None else tuple(tuple(a.broker_ids) for a in t.assignments)
                        for t in r.topics)
    return (m.CreatePartitionsRequest(corr, tuple((t.name, t.count) for t in r.topics), bool(r.validate_only),
                                      assignments if any(a is not None for a in assignments) else ()),)


def _alter_configs_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    # AlterConfigs: the resource's overrides become exactly these (a null value: not set)
    return (m.AlterConfigsRequest(corr, tuple(
        (res.resource_type, res.resource_name,
         tuple((c.name, m.CONFIG_SET, c.value) for c in res.configs if c.value is not None))
        for res in r.resources), incremental=False, validate_only=bool(r.validate_only)),)


def _incremental_alter_configs_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (m.AlterConfigsRequest(corr, tuple(
        (res.resource_type, res.resource_name, tuple((c.name, c.config_operation, c.value) for c in res.configs))
        for res in r.resources), incremental=True, validate_only=bool(r.validate_only)),)


def _delete_records_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (m.DeleteRecordsRequest(corr, tuple(
        (t.name, p.partition_index, p.offset) for t in r.topics for p in t.partitions), r.timeout_ms),)


def _offset_for_leader_epoch_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    replica_id = r.replica_id if v >= 3 else m.CONSUMER_REPLICA_ID  # v2 has none: a consumer
    return (m.OffsetForLeaderEpochRequest(corr, replica_id, tuple(
        (t.topic, p.partition, p.current_leader_epoch, p.leader_epoch) for t in r.topics for p in t.partitions)),)


def _offset_delete_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (m.OffsetDeleteRequest(corr, r.group_id, tuple(
        (t.name, p.partition_index) for t in r.topics for p in t.partitions)),)


def _find_coordinator_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (m.FindCoordinatorRequest(corr, r.key, r.key_type),)


def _join_group_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    # v0 has no rebalance timeout: Kafka uses the session timeout for it. Only v4+ clients
    # know MEMBER_ID_REQUIRED. v5 carries group_instance_id (static membership, KIP-345).
    rebalance_timeout = r.rebalance_timeout_ms if v >= 1 else r.session_timeout_ms
    return (m.JoinGroupRequest(
        corr, r.group_id, r.session_timeout_ms, rebalance_timeout, r.member_id, r.protocol_type,
        tuple((p.name, p.metadata) for p in r.protocols), client_id=client_id or "",
        require_known_member_id=v >= 4, group_instance_id=_instance_id(JOIN_GROUP, r, v)),)


# Static membership (KIP-345): from these versions a member's requests carry its group.instance.id
# (null: a dynamic member), which the coordinator checks against the instance's current member.
_INSTANCE_ID_SINCE = {JOIN_GROUP: 5, SYNC_GROUP: 3, HEARTBEAT: 3, LEAVE_GROUP: 3, OFFSET_COMMIT: 7,
                      DESCRIBE_GROUPS: 4}


def _instance_id(api_key: int, r: Any, v: int) -> str | None:
    return r.group_instance_id if v >= _INSTANCE_ID_SINCE[api_key] else None


def _sync_group_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (m.SyncGroupRequest(corr, r.group_id, r.generation_id, r.member_id,
                               tuple((a.member_id, a.assignment) for a in r.assignments),
                               _instance_id(SYNC_GROUP, r, v)),)


def _heartbeat_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (m.HeartbeatRequest(corr, r.group_id, r.generation_id, r.member_id, _instance_id(HEARTBEAT, r, v)),)


def _leave_group_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    if v < 3:
        return (m.LeaveGroupRequest(corr, r.group_id, r.member_id),)
    if not r.members:
        raise _Reply(m.LeaveGroupResponse(corr, m.NO_ERROR))  # nobody to remove
    # v3+: a batch of members, each by member id, by instance id, or both (Kafka's MemberIdentity)
    return tuple(m.LeaveGroupRequest(corr, r.group_id, member.member_id, member.group_instance_id)
                 for member in r.members)


def _offset_commit_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    # retention_time_ms (v2-4) is ignored: offsets.retention.minutes applies, as in Kafka 2.1+
    return (m.OffsetCommitRequest(corr, r.group_id, r.generation_id_or_member_epoch, r.member_id, tuple(
        m.OffsetCommitPartition(t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
                                p.committed_metadata)
        for t in r.topics for p in t.partitions), _instance_id(OFFSET_COMMIT, r, v)),)


def _offset_fetch_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    partitions = None if r.topics is None else tuple(
        (t.name, p) for t in r.topics for p in t.partition_indexes)
    return (m.OffsetFetchRequest(corr, r.group_id, partitions),)


def _consumer_group_heartbeat_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    if v >= 1 and r.subscribed_topic_regex:  # librdkafka sends "" for none
        raise _Reply(m.ConsumerGroupHeartbeatResponse(corr, m.INVALID_REQUEST, (
            "SubscribedTopicRegex is not supported by minikafka: subscribe to topic names"), r.member_id or None))
    owned = None if r.topic_partitions is None else tuple(
        (_topic_id_of(t.topic_id or _NO_TOPIC_ID), p) for t in r.topic_partitions for p in t.partitions)
    return (m.ConsumerGroupHeartbeatRequest(
        corr, r.group_id, r.member_id, r.member_epoch, r.instance_id, r.rebalance_timeout_ms,
        None if r.subscribed_topic_names is None else tuple(r.subscribed_topic_names), r.server_assignor, owned,
        client_id=client_id or "", by_topic_id=True),)


def _consumer_group_describe_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (m.ConsumerGroupDescribeRequest(corr, tuple(r.group_ids)),)


def _list_groups_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (m.ListGroupsRequest(corr),)


def _describe_groups_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (m.DescribeGroupsRequest(corr, tuple(r.groups)),)


def _delete_groups_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (m.DeleteGroupsRequest(corr, tuple(r.groups_names)),)


def _describe_quorum_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    asked = [(t.topic_name, p.partition_index) for t in r.topics for p in t.partitions]
    if asked != [(METADATA_TOPIC, 0)]:
        raise _Reply(m.DescribeQuorumResponse(corr, m.INVALID_REQUEST, error_message=(
            f"DescribeQuorum describes {METADATA_TOPIC}-0 only, not {asked}")))
    return (m.DescribeQuorumRequest(corr),)


def _api_versions_in(r: Any, corr: int, v: int, client_id: str | None) -> tuple:
    return (ApiVersionsRequest(corr, r.client_software_name if v >= 3 else None,
                               r.client_software_version if v >= 3 else None),)


# --- server side: responses out ---------------------------------------------------------------------


def _by_topic(items: Sequence[Any], topic_of) -> dict[str, list]:
    """Group per-partition results by topic, topics in first-seen order (as they came)."""
    out: dict[str, list] = {}
    for item in items:
        out.setdefault(topic_of(item), []).append(item)
    return out


def _produce_out(d: Decoded, resp: m.ProduceResponse, ctx: BrokerContext | None, v: int) -> Any:
    K = _KProduceResponse
    T, P = K.TopicProduceResponse, K.TopicProduceResponse.PartitionProduceResponse
    return K(version=v, throttle_time_ms=0, responses=[
        T(name=topic, partition_responses=[
            P(index=p.partition, error_code=p.error, base_offset=p.base_offset, log_append_time_ms=-1,
              log_start_offset=p.log_start_offset, error_message=p.error_message,
              record_errors=[P.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=why)
                             for i, why in p.record_errors])
            for p in parts])
        for topic, parts in _by_topic(resp.partitions, lambda p: p.topic).items()])


def _fetch_out(d: Decoded, resp: m.FetchResponse, ctx: BrokerContext | None, v: int) -> Any:
    K = _KFetchResponse
    T, P = K.FetchableTopicResponse, K.FetchableTopicResponse.PartitionData

    def partition(p: m.FetchPartitionResponse) -> Any:
        # The aborted transactions are sent to read_committed fetches only; null otherwise, as Kafka.
        aborted = [P.AbortedTransaction(producer_id=pid, first_offset=first) for pid, first in p.aborted_transactions]
        out = P(partition_index=p.partition, error_code=p.error, high_watermark=p.high_watermark,
                last_stable_offset=p.last_stable_offset, log_start_offset=p.log_start_offset,
                aborted_transactions=aborted if d.kafka_request is None or d.kafka_request.isolation_level == 1
                else None, preferred_read_replica=-1, records=p.records)
        if p.diverging_epoch is not None:
            if v < FOLLOWER_FETCH_VERSION:  # only followers get one, and they fetch with v12
                raise ValueError(f"diverging_epoch needs Fetch v{FOLLOWER_FETCH_VERSION}+, the request was v{v}")
            out.diverging_epoch = P.EpochEndOffset(epoch=p.diverging_epoch[0], end_offset=p.diverging_epoch[1])
        return out

    return K(version=v, throttle_time_ms=0, error_code=0, session_id=0, responses=[
        T(topic=topic, partitions=[partition(p) for p in parts])
        for topic, parts in _by_topic(resp.partitions, lambda p: p.topic).items()])


def _list_offsets_out(d: Decoded, resp: m.ListOffsetsResponse, ctx: BrokerContext | None, v: int) -> Any:
    K = _KListOffsetsResponse
    T, P = K.ListOffsetsTopicResponse, K.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
    return K(version=v, throttle_time_ms=0, topics=[
        T(name=topic, partitions=[
            P(partition_index=p, error_code=error, timestamp=timestamp, offset=offset, leader_epoch=-1)
            for _, p, error, timestamp, offset in parts])
        for topic, parts in _by_topic(resp.partitions, lambda p: p[0]).items()])


def _need(ctx: BrokerContext | None, what: str) -> BrokerContext:
    if ctx is None:
        raise ValueError(f"a {what} response names brokers by address: pass context=BrokerContext(...)")
    return ctx


def _metadata_out(d: Decoded, resp: m.MetadataResponse, ctx: BrokerContext | None, v: int) -> Any:
    ctx = _need(ctx, "Metadata")
    K = _KMetadataResponse
    B, T = K.MetadataResponseBroker, K.MetadataResponseTopic
    P = T.MetadataResponsePartition
    live = set(resp.brokers)
    # Only brokers we can give an address for: a client cannot use the others anyway.
    brokers = [B(node_id=b, host=ctx.brokers[b][0], port=ctx.brokers[b][1], rack=None)
               for b in resp.brokers if b in ctx.brokers]
    # The controller (CONTROLLER_ID) is not a broker a client can reach. kafka-python's admin
    # client sends CreateTopics/DeleteTopics to the controller id it reads here: name the
    # broker that received this request, which forwards them to the controller.
    controller = resp.controller_id if resp.controller_id in ctx.brokers else ctx.broker_id
    # authorized_operations (v8+) are left unset: kafka-python reads "unset" as "not asked".
    return K(version=v, throttle_time_ms=0, brokers=brokers, cluster_id=ctx.cluster_id,
             controller_id=controller, topics=[
                 T(error_code=t.error, name=t.name or None, topic_id=_uuid_of(t.topic_id),
                   is_internal=t.name in _INTERNAL_TOPICS, partitions=[
                     P(error_code=p.error, partition_index=p.partition, leader_id=p.leader,
                       leader_epoch=p.leader_epoch, replica_nodes=list(p.replicas), isr_nodes=list(p.isr),
                       offline_replicas=[r for r in p.replicas if r not in live])
                     for p in t.partitions])
                 for t in resp.topics])


def _init_producer_id_out(d: Decoded, resp: m.InitProducerIdResponse, ctx: BrokerContext | None, v: int) -> Any:
    return _KInitProducerIdResponse(version=v, throttle_time_ms=0, error_code=_fenced(resp.error, v, 4),
                                    producer_id=resp.producer_id, producer_epoch=resp.producer_epoch)


def _fenced(error: int, v: int, since: int) -> int:
    """PRODUCER_FENCED (KIP-588) is told to clients that know it; older versions get
    INVALID_PRODUCER_EPOCH, which they treat as fatal the same way."""
    return m.INVALID_PRODUCER_EPOCH if error == m.PRODUCER_FENCED and v < since else error


def _add_partitions_to_txn_out(d: Decoded, resp: m.AddPartitionsToTxnResponse, ctx: BrokerContext | None,
                               v: int) -> Any:
    K = _KAddPartitionsToTxnResponse
    T = K.AddPartitionsToTxnTopicResult
    return K(version=v, throttle_time_ms=0, results_by_topic_v3_and_below=[
        T(name=topic, results_by_partition=[
            T.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=_fenced(error, v, 2))
            for _, p, error in parts])
        for topic, parts in _by_topic(resp.results, lambda r: r[0]).items()])


def _add_offsets_to_txn_out(d: Decoded, resp: m.AddOffsetsToTxnResponse, ctx: BrokerContext | None, v: int) -> Any:
    return _KAddOffsetsToTxnResponse(version=v, throttle_time_ms=0, error_code=_fenced(resp.error, v, 2))


def _end_txn_out(d: Decoded, resp: m.EndTxnResponse, ctx: BrokerContext | None, v: int) -> Any:
    return _KEndTxnResponse(version=v, throttle_time_ms=0, error_code=_fenced(resp.error, v, 2))


def _txn_offset_commit_out(d: Decoded, resp: m.TxnOffsetCommitResponse, ctx: BrokerContext | None, v: int) -> Any:
    K = _KTxnOffsetCommitResponse
    T = K.TxnOffsetCommitResponseTopic
    return K(version=v, throttle_time_ms=0, topics=[
        T(name=topic, partitions=[T.TxnOffsetCommitResponsePartition(partition_index=p, error_code=_fenced(e, v, 3))
                                  for _, p, e in parts])
        for topic, parts in _by_topic(resp.partitions, lambda r: r[0]).items()])


def _create_topics_out(d: Decoded, resp: m.CreateTopicsResponse, ctx: BrokerContext | None, v: int) -> Any:
    K = _KCreateTopicsResponse
    return K(version=v, throttle_time_ms=0, topics=[
        K.CreatableTopicResult(name=name, error_code=error, error_message=message)
        for name, error, message in resp.results])


def _delete_topics_out(d: Decoded, resp: m.DeleteTopicsResponse, ctx: BrokerContext | None, v: int) -> Any:
    K = _KDeleteTopicsResponse
    return K(version=v, throttle_time_ms=0, responses=[
        K.DeletableTopicResult(name=name, error_code=error, error_message=message)  # message: v5+ only
        for name, error, message in resp.results])


def _create_partitions_out(d: Decoded, resp: m.CreatePartitionsResponse, ctx: BrokerContext | None, v: int) -> Any:
    K = _KCreatePartitionsResponse
    return K(version=v, throttle_time_ms=0, results=[
        K.CreatePartitionsTopicResult(name=name, error_code=error, error_message=message)
        for name, error, message in resp.results])


def _alter_configs_out(d: Decoded, resp: m.AlterConfigsResponse, ctx: BrokerContext | None, v: int) -> Any:
    K = _KIncrementalAlterConfigsResponse if d.api_key == INCREMENTAL_ALTER_CONFIGS else _KAlterConfigsResponse
    return K(version=v, throttle_time_ms=0, responses=[
        K.AlterConfigsResourceResponse(error_code=error, error_message=message, resource_type=rtype,
                                       resource_name=name)
        for rtype, name, error, message in resp.results])


def _delete_records_out(d: Decoded, resp: m.DeleteRecordsResponse, ctx: BrokerContext | None, v: int) -> Any:
    K = _KDeleteRecordsResponse
    T = K.DeleteRecordsTopicResult
    by_topic: dict[str, list] = {}
    for topic, partition, low, error in resp.results:
        by_topic.setdefault(topic, []).append(T.DeleteRecordsPartitionResult(
            partition_index=partition, low_watermark=low, error_code=error))
    return K(version=v, throttle_time_ms=0, topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()])


def _offset_for_leader_epoch_out(d: Decoded, resp: m.OffsetForLeaderEpochResponse, ctx: BrokerContext | None,
                                 v: int) -> Any:
    K = _KOffsetForLeaderEpochResponse
    T = K.OffsetForLeaderTopicResult
    by_topic: dict[str, list] = {}
    for topic, partition, error, epoch, end in resp.results:
        by_topic.setdefault(topic, []).append(T.EpochEndOffset(
            error_code=error, partition=partition, leader_epoch=epoch, end_offset=end))
    return K(version=v, throttle_time_ms=0, topics=[T(topic=t, partitions=ps) for t, ps in by_topic.items()])


def _offset_delete_out(d: Decoded, resp: m.OffsetDeleteResponse, ctx: BrokerContext | None, v: int) -> Any:
    K = _KOffsetDeleteResponse
    T = K.OffsetDeleteResponseTopic
    by_topic: dict[str, list] = {}
    for topic, partition, error in resp.results:
        by_topic.setdefault(topic, []).append(T.OffsetDeleteResponsePartition(partition_index=partition,
                                                                              error_code=error))
    return K(version=v, error_code=resp.error, throttle_time_ms=0,
             topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()])


def _config_source(resource_type: int, is_default: bool) -> int:
    if is_default:
        return _DEFAULT_CONFIG
    return {_TOPIC_RESOURCE: _DYNAMIC_TOPIC_CONFIG, _BROKER_RESOURCE: _STATIC_BROKER_CONFIG}.get(
        resource_type, _UNKNOWN_CONFIG)


def _describe_configs_out(d: Decoded, resp: m.DescribeConfigsResponse, ctx: BrokerContext | None, v: int) -> Any:
    K = _KDescribeConfigsResponse
    R = K.DescribeConfigsResult
    C = R.DescribeConfigsResourceResult
    return K(version=v, throttle_time_ms=0, results=[
        R(error_code=error, error_message=message, resource_type=rtype, resource_name=name, configs=[
            C(name=key, value=value, read_only=read_only, is_default=is_default,
              config_source=_config_source(rtype, is_default), is_sensitive=sensitive, synonyms=[],
              config_type=0, documentation=None)
            for key, value, read_only, is_default, sensitive in entries])
        for rtype, name, error, message, entries in resp.results])


def _find_coordinator_out(d: Decoded, resp: m.FindCoordinatorResponse, ctx: BrokerContext | None, v: int) -> Any:
    ctx = _need(ctx, "FindCoordinator")
    error, node, message = resp.error, resp.node_id, resp.error_message
    if error == m.NO_ERROR and node not in ctx.brokers:
        error, message = m.COORDINATOR_NOT_AVAILABLE, f"coordinator broker {node} has no known address"
    host, port = ctx.brokers[node] if error == m.NO_ERROR else ("", -1)
    return _KFindCoordinatorResponse(version=v, throttle_time_ms=0, error_code=error, error_message=message,
                                     node_id=node if error == m.NO_ERROR else -1, host=host, port=port)


def _join_group_out(d: Decoded, resp: m.JoinGroupResponse, ctx: BrokerContext | None, v: int) -> Any:
    K = _KJoinGroupResponse
    instance_ids = resp.member_instance_ids or (None,) * len(resp.members)
    if len(instance_ids) != len(resp.members):
        raise ValueError(f"JoinGroupResponse has {len(resp.members)} members and {len(instance_ids)} instance ids")
    return K(version=v, throttle_time_ms=0, error_code=resp.error, generation_id=resp.generation_id,
             protocol_name=resp.protocol_name or "",  # nullable only from v7
             leader=resp.leader, member_id=resp.member_id, members=[
                 # the leader's assignor sees which members are static (v5+; older versions drop it)
                 K.JoinGroupResponseMember(member_id=member, group_instance_id=instance_id, metadata=metadata)
                 for (member, metadata), instance_id in zip(resp.members, instance_ids)])


def _sync_group_out(d: Decoded, resp: m.SyncGroupResponse, ctx: BrokerContext | None, v: int) -> Any:
    return _KSyncGroupResponse(version=v, throttle_time_ms=0, error_code=resp.error, assignment=resp.assignment)


def _heartbeat_out(d: Decoded, resp: m.HeartbeatResponse, ctx: BrokerContext | None, v: int) -> Any:
    return _KHeartbeatResponse(version=v, throttle_time_ms=0, error_code=resp.error)


def _leave_group_out(d: Decoded, resp: Any, ctx: BrokerContext | None, v: int) -> Any:
    responses = list(resp) if isinstance(resp, (list, tuple)) else [resp]
    if v < 3:
        return _KLeaveGroupResponse(version=v, throttle_time_ms=0, error_code=responses[0].error)
    K = _KLeaveGroupResponse
    identities = list(d.kafka_request.members) if d.kafka_request is not None else []
    top = next((r.error for r in responses if r.error in _GROUP_LEVEL_ERRORS), m.NO_ERROR)
    members = [] if top != m.NO_ERROR else [
        K.MemberResponse(member_id=who.member_id, group_instance_id=who.group_instance_id, error_code=r.error)
        for who, r in zip(identities, responses)]
    return K(version=v, throttle_time_ms=0, error_code=top, members=members)


def _offset_commit_out(d: Decoded, resp: m.OffsetCommitResponse, ctx: BrokerContext | None, v: int) -> Any:
    K = _KOffsetCommitResponse
    T = K.OffsetCommitResponseTopic
    return K(version=v, throttle_time_ms=0, topics=[
        T(name=topic, partitions=[T.OffsetCommitResponsePartition(partition_index=p, error_code=error)
                                  for _, p, error in parts])
        for topic, parts in _by_topic(resp.partitions, lambda p: p[0]).items()])


def _offset_fetch_out(d: Decoded, resp: m.OffsetFetchResponse, ctx: BrokerContext | None, v: int) -> Any:
    K = _KOffsetFetchResponse
    T = K.OffsetFetchResponseTopic
    P = T.OffsetFetchResponsePartition
    parts = list(resp.partitions)
    if v < 2 and resp.error != m.NO_ERROR and not parts:
        # v0-1 have no top-level error: Kafka repeats it on every partition asked for.
        asked = d.messages[0].partitions if d.messages else None
        parts = [m.OffsetFetchPartition(t, p, -1, error=resp.error) for t, p in asked or ()]
    return K(version=v, throttle_time_ms=0, error_code=resp.error, topics=[
        T(name=topic, partitions=[
            P(partition_index=p.partition, committed_offset=p.offset, committed_leader_epoch=p.leader_epoch,
              metadata=p.metadata, error_code=p.error)
            for p in group])
        for topic, group in _by_topic(parts, lambda p: p.topic).items()])


def _consumer_group_heartbeat_out(d: Decoded, resp: m.ConsumerGroupHeartbeatResponse, ctx: BrokerContext | None,
                                  v: int) -> Any:
    K = _KConsumerGroupHeartbeatResponse
    assignment = None
    if resp.assignment is not None:
        ids = dict(resp.topic_ids)
        assignment = K.Assignment(topic_partitions=[
            K.Assignment.TopicPartitions(topic_id=_uuid_of(ids.get(topic)), partitions=[p for _, p in parts])
            for topic, parts in _by_topic(resp.assignment, lambda tp: tp[0]).items()])
    return K(version=v, throttle_time_ms=0, error_code=resp.error, error_message=resp.error_message,
             member_id=resp.member_id, member_epoch=resp.member_epoch,
             heartbeat_interval_ms=resp.heartbeat_interval_ms, assignment=assignment)


_CONSUMER_MEMBER = 1  # ConsumerGroupDescribe v1's MemberType: -1 unknown, 0 classic, 1 consumer


def _consumer_group_describe_out(d: Decoded, resp: m.ConsumerGroupDescribeResponse, ctx: BrokerContext | None,
                                 v: int) -> Any:
    K = _KConsumerGroupDescribeResponse
    G = K.DescribedGroup
    M = G.Member
    A = M.Assignment
    T = A.TopicPartitions

    def assignment(parts: tuple[tuple[str, int], ...], ids: dict[str, str]) -> Any:
        return A(topic_partitions=[
            T(topic_id=_uuid_of(ids.get(topic)), topic_name=topic, partitions=[p for _, p in group])
            for topic, group in _by_topic(parts, lambda tp: tp[0]).items()])

    def member(x: m.DescribedConsumerMember, ids: dict[str, str]) -> Any:
        fields = dict(member_id=x.member_id, instance_id=x.instance_id, rack_id=None, member_epoch=x.member_epoch,
                      client_id=x.client_id, client_host=x.client_host,
                      subscribed_topic_names=list(x.subscribed_topics), subscribed_topic_regex=None,
                      assignment=assignment(x.assignment, ids),
                      target_assignment=assignment(x.target_assignment, ids))
        if v >= 1:
            fields["member_type"] = _CONSUMER_MEMBER
        return M(**fields)

    return K(version=v, throttle_time_ms=0, groups=[
        G(error_code=g.error, error_message=g.error_message, group_id=g.group_id, group_state=g.state,
          group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch, assignor_name=g.assignor,
          members=[member(x, dict(g.topic_ids)) for x in g.members], authorized_operations=-(1 << 31))
        for g in resp.groups])


def _list_groups_out(d: Decoded, resp: m.ListGroupsResponse, ctx: BrokerContext | None, v: int) -> Any:
    K = _KListGroupsResponse
    return K(version=v, throttle_time_ms=0, error_code=resp.error, groups=[
        K.ListedGroup(group_id=group, protocol_type=protocol_type, group_state=state)  # state: v4+ only
        for group, protocol_type, state in resp.groups])


def _describe_groups_out(d: Decoded, resp: m.DescribeGroupsResponse, ctx: BrokerContext | None, v: int) -> Any:
    K = _KDescribeGroupsResponse
    G = K.DescribedGroup
    M = G.DescribedGroupMember
    return K(version=v, throttle_time_ms=0, groups=[
        G(error_code=g.error, group_id=g.group_id, group_state=g.state, protocol_type=g.protocol_type,
          protocol_data=g.protocol, members=[
              M(member_id=x.member_id, group_instance_id=x.group_instance_id, client_id=x.client_id,
                client_host=x.client_host,
                member_metadata=x.metadata, member_assignment=x.assignment)
              for x in g.members])
        for g in resp.groups])


def _delete_groups_out(d: Decoded, resp: m.DeleteGroupsResponse, ctx: BrokerContext | None, v: int) -> Any:
    K = _KDeleteGroupsResponse
    return K(version=v, throttle_time_ms=0, results=[
        K.DeletableGroupResult(group_id=group, error_code=error) for group, error in resp.results])


def _describe_quorum_out(d: Decoded, resp: m.DescribeQuorumResponse, ctx: BrokerContext | None, v: int) -> Any:
    K = _KDescribeQuorumResponse
    T = K.TopicData
    P = T.PartitionData
    R = P.ReplicaState

    def replicas(rows: Sequence[m.QuorumReplica]) -> list:
        return [R(replica_id=r.replica_id, log_end_offset=r.log_end_offset,
                  last_fetch_timestamp=r.last_fetch_timestamp, last_caught_up_timestamp=r.last_caught_up_timestamp)
                for r in rows]

    partition = P(partition_index=0, error_code=resp.error, leader_id=resp.leader_id, leader_epoch=resp.leader_epoch,
                  high_watermark=resp.high_watermark, current_voters=replicas(resp.voters),
                  observers=replicas(resp.observers))
    # A refusal of the request itself (not the partition) is the top-level error.
    top = resp.error if resp.error in (m.INVALID_REQUEST, m.REQUEST_TIMED_OUT) else m.NO_ERROR
    return K(version=v, error_code=top, topics=[T(topic_name=METADATA_TOPIC, partitions=[partition])])


@dataclass(frozen=True)
class _Api:
    request: Any  # kafka-python request class
    response: Any  # kafka-python response class
    answer: type | None  # our response dataclass
    decode: Any  # (kafka request, corr, version, client id) -> tuple of messages, or raise _Reply
    encode: Any  # (decoded, our response(s), context, version) -> kafka response


_APIS: dict[int, _Api] = {
    PRODUCE: _Api(_KProduceRequest, _KProduceResponse, m.ProduceResponse, _produce_in, _produce_out),
    FETCH: _Api(_KFetchRequest, _KFetchResponse, m.FetchResponse, _fetch_in, _fetch_out),
    LIST_OFFSETS: _Api(_KListOffsetsRequest, _KListOffsetsResponse, m.ListOffsetsResponse,
                       _list_offsets_in, _list_offsets_out),
    METADATA: _Api(_KMetadataRequest, _KMetadataResponse, m.MetadataResponse, _metadata_in, _metadata_out),
    OFFSET_COMMIT: _Api(_KOffsetCommitRequest, _KOffsetCommitResponse, m.OffsetCommitResponse,
                        _offset_commit_in, _offset_commit_out),
    OFFSET_FETCH: _Api(_KOffsetFetchRequest, _KOffsetFetchResponse, m.OffsetFetchResponse,
                       _offset_fetch_in, _offset_fetch_out),
    FIND_COORDINATOR: _Api(_KFindCoordinatorRequest, _KFindCoordinatorResponse, m.FindCoordinatorResponse,
                           _find_coordinator_in, _find_coordinator_out),
    JOIN_GROUP: _Api(_KJoinGroupRequest, _KJoinGroupResponse, m.JoinGroupResponse, _join_group_in, _join_group_out),
    HEARTBEAT: _Api(_KHeartbeatRequest, _KHeartbeatResponse, m.HeartbeatResponse, _heartbeat_in, _heartbeat_out),
    LEAVE_GROUP: _Api(_KLeaveGroupRequest, _KLeaveGroupResponse, m.LeaveGroupResponse,
                      _leave_group_in, _leave_group_out),
    SYNC_GROUP: _Api(_KSyncGroupRequest, _KSyncGroupResponse, m.SyncGroupResponse, _sync_group_in, _sync_group_out),
    DESCRIBE_GROUPS: _Api(_KDescribeGroupsRequest, _KDescribeGroupsResponse, m.DescribeGroupsResponse,
                          _describe_groups_in, _describe_groups_out),
    LIST_GROUPS: _Api(_KListGroupsRequest, _KListGroupsResponse, m.ListGroupsResponse,
                      _list_groups_in, _list_groups_out),
    API_VERSIONS: _Api(_KApiVersionsRequest, _KApiVersionsResponse, None, _api_versions_in, None),
    CREATE_TOPICS: _Api(_KCreateTopicsRequest, _KCreateTopicsResponse, m.CreateTopicsResponse,
                        _create_topics_in, _create_topics_out),
    DELETE_TOPICS: _Api(_KDeleteTopicsRequest, _KDeleteTopicsResponse, m.DeleteTopicsResponse,
                        _delete_topics_in, _delete_topics_out),
    INIT_PRODUCER_ID: _Api(_KInitProducerIdRequest, _KInitProducerIdResponse, m.InitProducerIdResponse,
                           _init_producer_id_in, _init_producer_id_out),
    DESCRIBE_CONFIGS: _Api(_KDescribeConfigsRequest, _KDescribeConfigsResponse, m.DescribeConfigsResponse,
                           _describe_configs_in, _describe_configs_out),
    DELETE_GROUPS: _Api(_KDeleteGroupsRequest, _KDeleteGroupsResponse, m.DeleteGroupsResponse,
                        _delete_groups_in, _delete_groups_out),
    DESCRIBE_QUORUM: _Api(_KDescribeQuorumRequest, _KDescribeQuorumResponse, m.DescribeQuorumResponse,
                          _describe_quorum_in, _describe_quorum_out),
    ALTER_CONFIGS: _Api(_KAlterConfigsRequest, _KAlterConfigsResponse, m.AlterConfigsResponse,
                        _alter_configs_in, _alter_configs_out),
    CREATE_PARTITIONS: _Api(_KCreatePartitionsRequest, _KCreatePartitionsResponse, m.CreatePartitionsResponse,
                            _create_partitions_in, _create_partitions_out),
    INCREMENTAL_ALTER_CONFIGS: _Api(_KIncrementalAlterConfigsRequest, _KIncrementalAlterConfigsResponse,
                                    m.AlterConfigsResponse, _incremental_alter_configs_in, _alter_configs_out),
    DELETE_RECORDS: _Api(_KDeleteRecordsRequest, _KDeleteRecordsResponse, m.DeleteRecordsResponse,
                         _delete_records_in, _delete_records_out),
    OFFSET_FOR_LEADER_EPOCH: _Api(_KOffsetForLeaderEpochRequest, _KOffsetForLeaderEpochResponse,
                                  m.OffsetForLeaderEpochResponse, _offset_for_leader_epoch_in,
                                  _offset_for_leader_epoch_out),
    OFFSET_DELETE: _Api(_KOffsetDeleteRequest, _KOffsetDeleteResponse, m.OffsetDeleteResponse,
                        _offset_delete_in, _offset_delete_out),
    ADD_PARTITIONS_TO_TXN: _Api(_KAddPartitionsToTxnRequest, _KAddPartitionsToTxnResponse, m.AddPartitionsToTxnResponse,
                                _add_partitions_to_txn_in, _add_partitions_to_txn_out),
    ADD_OFFSETS_TO_TXN: _Api(_KAddOffsetsToTxnRequest, _KAddOffsetsToTxnResponse, m.AddOffsetsToTxnResponse,
                             _add_offsets_to_txn_in, _add_offsets_to_txn_out),
    END_TXN: _Api(_KEndTxnRequest, _KEndTxnResponse, m.EndTxnResponse, _end_txn_in, _end_txn_out),
    CONSUMER_GROUP_HEARTBEAT: _Api(_KConsumerGroupHeartbeatRequest, _KConsumerGroupHeartbeatResponse,
                                   m.ConsumerGroupHeartbeatResponse, _consumer_group_heartbeat_in,
                                   _consumer_group_heartbeat_out),
    CONSUMER_GROUP_DESCRIBE: _Api(_KConsumerGroupDescribeRequest, _KConsumerGroupDescribeResponse,
                                  m.ConsumerGroupDescribeResponse, _consumer_group_describe_in,
                                  _consumer_group_describe_out),
    TXN_OFFSET_COMMIT: _Api(_KTxnOffsetCommitRequest, _KTxnOffsetCommitResponse, m.TxnOffsetCommitResponse,
                            _txn_offset_commit_in, _txn_offset_commit_out),
}
assert set(_APIS) == set(SUPPORTED) == set(ACCEPTED)


def decode_request(frame: bytes) -> Decoded:
    """Decode a request frame (the bytes after the length prefix). Raises ``FrameError``."""
    api_key, version, corr, client_id, pos = _read_request_header(frame)
    if api_key >= INTERNAL_KEY_BASE:
        raise FrameError(f"api key {api_key} is a private (controller) frame: decode_internal reads those")
    api = _APIS.get(api_key)
    if api is None:
        name = api_name(api_key)
        raise FrameError(f"unknown api key {api_key}" if name.startswith("api key") else
                         f"api key {api_key} ({name}) is not supported")
    low, high = ACCEPTED[api_key]
    name = api_name(api_key)
    if not low <= version <= high:
        if api_key == API_VERSIONS and version > high:
            # The client is newer than us: answer error 35 with our ranges in a v0 body, and
            # it retries with our max. Its header may be flexible (v2); the fields we need
            # (correlation id, client id) come first either way.
            return Decoded(api_key, version, corr, client_id, (ApiVersionsRequest(corr),), unsupported_version=True)
        raise FrameError(f"{name} v{version} not supported ({low}–{high})")
    what = f"{name} v{version} request"
    if api.request.flexible_version_q(version):
        pos = _skip_tagged_fields(frame, pos, f"{what} header")
    request = _decode_body(api.request, version, frame, pos, what)
    try:
        messages = api.decode(request, corr, version, client_id)
    except _Reply as reply:
        return Decoded(api_key, version, corr, client_id, (), reply.response, kafka_request=request)
    except Exception as e:  # a well-formed body with nonsense in it: still the frame's fault
        raise FrameError(f"malformed {what}: {type(e).__name__}: {e}") from None
    return Decoded(api_key, version, corr, client_id, messages, kafka_request=request)


def _framed(kafka_response: Any, correlation_id: int) -> bytes:
    kafka_response.with_header(correlation_id=correlation_id)
    # a bytearray (one copy fewer than bytes); sockets and StreamWriter take it as it is
    return kafka_response.encode(header=True, framed=True)


def encode_response(decoded: Decoded, response: Any, *,
                    context: BrokerContext | Mapping[str, Any] | None = None) -> bytes:
    """The framed answer to ``decoded``: length, response header, body at the request's version,
    with the request's correlation id (not the dataclass's: the node may have used its own).

    ``response`` is our response dataclass (for a fanned-out LeaveGroup: the sequence of
    responses, in the order of ``decoded.messages``). Metadata and FindCoordinator name
    brokers by address: they need ``context`` (a ``BrokerContext`` or a mapping with its
    fields). Returns ``b""`` for a request that gets no answer (Produce with acks=0)."""
    if decoded.api_key == API_VERSIONS:
        return encode_api_versions(decoded)
    if not decoded.expects_response:
        return b""
    api = _APIS[decoded.api_key]
    if isinstance(response, (list, tuple)):  # only a fanned-out request has several answers
        if decoded.api_key != LEAVE_GROUP or len(response) != len(decoded.messages):
            raise ValueError(f"{len(response)} responses to a {decoded.api_name} request of "
                             f"{len(decoded.messages)} message(s)")
    for r in response if isinstance(response, (list, tuple)) else (response,):
        if type(r) is not api.answer:
            raise TypeError(f"a {decoded.api_name} request is answered with {api.answer.__name__}, "
                            f"not {type(r).__name__}")
    if type(response) is m.FetchResponse:
        response = _records_read(response)
    kafka_response = api.encode(decoded, response, BrokerContext.of(context), decoded.api_version)
    return _framed(kafka_response, decoded.correlation_id)


def _records_read(response: m.FetchResponse) -> m.FetchResponse:
    """The answer with any ``FileRecords`` read into bytes (``encode_response_parts`` sends
    large ones unread; a small one, or a caller of ``encode_response``, gets their bytes)."""
    if not any(isinstance(p.records, FileRecords) for p in response.partitions):
        return response
    return replace(response, partitions=tuple(
        replace(p, records=p.records.read()) if isinstance(p.records, FileRecords) else p
        for p in response.partitions))


# Record sets at least this large are not copied into an encoded Fetch answer: the answer is
# a list of buffers, each such record set its own (see ``encode_response_parts``).
SPLICED_RECORDS_BYTES = 64 * 1024
_MARK_BYTES = 16


def encode_response_parts(decoded: Decoded, response: Any, *,
                          context: BrokerContext | Mapping[str, Any] | None = None) -> list:
    """``encode_response`` as a list of buffers whose concatenation it is. A Fetch answer's
    large record sets are their own buffers, never copied into the frame: 30 answers of
    55 MiB were copied twice each on the broker's loop (kafka-python's encode buffer, then
    bytes). Each such record set is encoded as a random 16-byte mark, found again in the
    frame, and its length prefix (int32, or a varint in flexible versions) rewritten. A
    record set left in its segment (``FileRecords``) stays so, for the runtime to sendfile."""
    if decoded.api_key != FETCH or type(response) is not m.FetchResponse or not any(
            len(p.records) >= SPLICED_RECORDS_BYTES for p in response.partitions):
        return [encode_response(decoded, response, context=context)]
    marks: dict[bytes, bytes] = {}
    parts = []
    for p in response.partitions:
        if len(p.records) >= SPLICED_RECORDS_BYTES:
            mark = os.urandom(_MARK_BYTES)
            marks[mark] = p.records
            p = replace(p, records=mark)
        parts.append(p)
    frame = encode_response(decoded, replace(response, partitions=tuple(parts)), context=context)
    from kafka.protocol.schemas.fields.codecs import UnsignedVarInt32  # compact lengths (flexible versions)

    flexible = decoded.api_version >= 12
    old_prefix = UnsignedVarInt32.encode(_MARK_BYTES + 1) if flexible else struct.pack(">i", _MARK_BYTES)
    found = sorted((frame.find(mark), mark) for mark in marks)
    out: list = []
    position = 0
    for at, mark in found:
        if at < 0 or frame[at - len(old_prefix):at] != old_prefix:
            raise ValueError("a record set's mark is not where the encoder should have put it")
        records = marks[mark]
        out.append(frame[position:at - len(old_prefix)])
        out.append(UnsignedVarInt32.encode(len(records) + 1) if flexible else struct.pack(">i", len(records)))
        out.append(records)
        position = at + _MARK_BYTES
    out.append(frame[position:])
    size = sum(len(b) for b in out) - 4
    out[0] = struct.pack(">i", size) + bytes(out[0][4:])
    return out


def encode_api_versions(decoded: Decoded) -> bytes:
    """Answer ApiVersions: our ``SUPPORTED`` ranges at the request's version, or, for a request
    newer than we know, error 35 (UNSUPPORTED_VERSION) in a v0 body, which every client reads."""
    if decoded.api_key != API_VERSIONS:
        raise ValueError(f"not an ApiVersions request: {decoded.api_name}")
    K = _KApiVersionsResponse
    version, error = (0, m.UNSUPPORTED_VERSION) if decoded.unsupported_version else (decoded.api_version, m.NO_ERROR)
    response = K(version=version, error_code=error, throttle_time_ms=0, api_keys=[
        K.ApiVersion(api_key=key, min_version=low, max_version=high) for key, (low, high) in sorted(SUPPORTED.items())])
    # kafka-python writes this header unflexible at every version, as Kafka does (KIP-511)
    return _framed(response, decoded.correlation_id)


# --- client side: a follower's Fetch --------------------------------------------------------------------


def encode_request(message: Any, *, version: int | None = None, client_id: str | None = None) -> bytes:
    """Frame a request a broker sends to another broker as a Kafka client would. Only Fetch
    (followers replicate with real Fetch requests, ``replica_id`` = their broker id), at
    ``FOLLOWER_FETCH_VERSION`` unless told otherwise."""
    if not isinstance(message, m.FetchRequest):
        raise TypeError(f"only FetchRequest travels broker to broker as a Kafka request, not {type(message).__name__}")
    version = FOLLOWER_FETCH_VERSION if version is None else version
    low, high = ACCEPTED[FETCH]
    if not low <= version <= high:
        raise ValueError(f"Fetch v{version} is outside {low}–{high}")
    if version < FOLLOWER_FETCH_VERSION and any(p.last_fetched_epoch >= 0 for p in message.partitions):
        raise ValueError(f"last_fetched_epoch needs Fetch v{FOLLOWER_FETCH_VERSION}+")
    K = _KFetchRequest
    T, P = K.FetchTopic, K.FetchTopic.FetchPartition
    request = K(
        version=version, replica_id=message.replica_id, max_wait_ms=message.max_wait_ms,
        min_bytes=message.min_bytes, max_bytes=message.max_bytes, isolation_level=0,
        session_id=0, session_epoch=-1,  # no fetch session: every fetch is a full one
        topics=[T(topic=topic, partitions=[
            P(partition=p.partition, current_leader_epoch=p.current_leader_epoch, fetch_offset=p.fetch_offset,
              last_fetched_epoch=p.last_fetched_epoch, log_start_offset=-1,
              partition_max_bytes=p.partition_max_bytes)
            for p in parts])
            for topic, parts in _by_topic(message.partitions, lambda p: p.topic).items()],
        forgotten_topics_data=[], rack_id="")
    request.with_header(correlation_id=message.correlation_id,
                        client_id=client_id if client_id is not None else f"minikafka-broker-{message.replica_id}")
    return request.encode(header=True, framed=True)


def decode_response(api_key: int, version: int, frame: bytes) -> Any:
    """Decode the answer to ``encode_request`` (the bytes after the length prefix): our
    dataclass, with the frame's correlation id. Raises ``FrameError`` for a bad frame."""
    if api_key != FETCH:
        raise ValueError(f"only Fetch responses are decoded on the client side, not {api_name(api_key)}")
    if len(frame) < 4:
        raise FrameError(f"truncated frame: {len(frame)} bytes, a response header needs 4")
    (corr,) = struct.unpack_from(">i", frame, 0)
    what = f"Fetch v{version} response"
    pos = 4
    if _KFetchResponse.flexible_version_q(version):
        pos = _skip_tagged_fields(frame, pos, f"{what} header")
    r = _decode_body(_KFetchResponse, version, frame, pos, what)
    # The top-level error (v7+) is about fetch sessions, which we never open: not carried.
    try:
        parts = []
        for t in r.responses:
            for p in t.partitions:
                div = p.diverging_epoch if version >= FOLLOWER_FETCH_VERSION else None
                diverging = (div.epoch, div.end_offset) if div is not None and div.end_offset >= 0 else None
                parts.append(m.FetchPartitionResponse(
                    t.topic, p.partition_index, p.error_code, p.high_watermark, p.log_start_offset,
                    b"" if p.records is None else p.records, diverging))
    except Exception as e:
        raise FrameError(f"malformed {what}: {type(e).__name__}: {e}") from None
    return m.FetchResponse(corr, tuple(parts))


# --- private frames: the controller's messages ---------------------------------------------------------
# Stable numbers: both ends of a connection must agree on them. Add new ones at the end.

from minikafka.raft import messages as _raft  # noqa: E402 (the Raft quorum's messages travel privately too)

INTERNAL_API_KEYS: dict[type, int] = {
    m.BrokerHeartbeatRequest: 10000,
    m.BrokerHeartbeatResponse: 10001,
    # 10002 was the ZooKeeper-era UpdateMetadata push: brokers now fetch the metadata log
    m.AlterPartitionRequest: 10003,
    m.AlterPartitionResponse: 10004,
    m.AllocateProducerIdsRequest: 10005,
    m.AllocateProducerIdsResponse: 10006,
    m.CreateTopicsRequest: 10007,
    m.CreateTopicsResponse: 10008,
    m.DeleteTopicsRequest: 10009,
    m.DeleteTopicsResponse: 10010,
    m.DescribeQuorumRequest: 10011,  # a broker forwarding a client's DescribeQuorum
    m.DescribeQuorumResponse: 10012,
    m.CreatePartitionsRequest: 10013,
    m.CreatePartitionsResponse: 10014,
    m.AlterConfigsRequest: 10015,
    m.AlterConfigsResponse: 10016,
    m.WriteTxnMarkersRequest: 10017,  # coordinator -> partition leader (Kafka's api 27, broker-only)
    m.WriteTxnMarkersResponse: 10018,
    **{cls: 10020 + i for i, cls in enumerate(_raft.RAFT_MESSAGES)},  # Vote, BeginQuorumEpoch, ..., Fetch
}
_INTERNAL_CLASSES = {key: cls for cls, key in INTERNAL_API_KEYS.items()}
_INT64 = (-(1 << 63), (1 << 63) - 1)


def is_private(message: Any) -> bool:
    """Does ``message`` travel as one of our private frames?"""
    return type(message) in INTERNAL_API_KEYS


def is_internal(frame: bytes) -> bool:
    """Is this frame (after the length prefix) one of our private ones?"""
    return len(frame) >= 2 and struct.unpack_from(">h", frame, 0)[0] >= INTERNAL_KEY_BASE


def _to_json(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:  # the other side would refuse it: fail here, loudly
            raise ValueError(f"{value} does not fit a 64-bit int")
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")  # the type hint says bytes on the way back
    if isinstance(value, (tuple, list)):
        return [_to_json(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_json(getattr(value, f.name)) for f in fields(value)}
    raise TypeError(f"cannot put a {type(value).__name__} in a private frame")


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def _from_json(value: Any, hint: Any, path: str) -> Any:
    """Rebuild a value of type ``hint`` from JSON, refusing anything else: the type hints of
    the dataclasses are the schema of a private frame."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        others = [a for a in args if a is not type(None)]
        if len(others) != 1:
            raise TypeError(f"{path}: ambiguous type {hint}")  # not in our messages; a bug if it appears
        return _from_json(value, others[0], path)
    if hint is bool:
        if type(value) is not bool:
            raise FrameError(f"malformed private frame: {path} should be a bool, not {value!r:.40}")
        return value
    if hint is int:
        if type(value) is not int or not _INT64[0] <= value <= _INT64[1]:
            raise FrameError(f"malformed private frame: {path} should be a 64-bit int, not {value!r:.40}")
        return value
    if hint is str:
        if type(value) is not str:
            raise FrameError(f"malformed private frame: {path} should be a string, not {value!r:.40}")
        return value
    if hint is bytes:
        if type(value) is not str:
            raise FrameError(f"malformed private frame: {path} should be base64 bytes, not {value!r:.40}")
        try:
            return base64.b64decode(value, validate=True)
        except ValueError as e:
            raise FrameError(f"malformed private frame: {path} is not base64 ({e})") from None
    if origin is tuple:
        if type(value) is not list:
            raise FrameError(f"malformed private frame: {path} should be a list, not {value!r:.40}")
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_from_json(v, args[0], f"{path}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise FrameError(f"malformed private frame: {path} should have {len(args)} items, not {len(value)}")
        return tuple(_from_json(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if isinstance(hint, type) and is_dataclass(hint):
        if type(value) is not dict:
            raise FrameError(f"malformed private frame: {path} should be an object, not {value!r:.40}")
        hints = _hints(hint)
        unknown = set(value) - set(hints)
        if unknown:
            raise FrameError(f"malformed private frame: {path} has unknown fields {sorted(unknown)}")
        kwargs = {name: _from_json(v, hints[name], f"{path}.{name}") for name, v in value.items()}
        try:
            return hint(**kwargs)
        except TypeError as e:  # a required field missing
            raise FrameError(f"malformed private frame: {path}: {e}") from None
    raise TypeError(f"{path}: no private encoding for {hint}")  # a message type we cannot carry: a bug


def _check_schema(hint: Any, path: str) -> None:
    """Every type a private message uses must be one ``_from_json`` rebuilds unambiguously;
    checked once at import, so decoding an untrusted frame can only fail with FrameError."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        others = [a for a in args if a is not type(None)]
        if len(others) != 1:
            raise TypeError(f"{path}: private frames carry only 'X | None' unions, not {hint}")
        _check_schema(others[0], path)
    elif origin is tuple:
        for i, a in enumerate(args):
            if a is not Ellipsis:
                _check_schema(a, f"{path}[{i}]")
    elif isinstance(hint, type) and is_dataclass(hint):
        for name, h in _hints(hint).items():
            _check_schema(h, f"{path}.{name}")
    elif hint not in (bool, int, str, bytes):
        raise TypeError(f"{path}: no private encoding for {hint}")


for _cls in INTERNAL_API_KEYS:
    _check_schema(_cls, _cls.__name__)


def _sender_text(sender: Any) -> str | None:
    if sender is None:
        return None
    if isinstance(sender, bool) or not isinstance(sender, (int, str)):
        raise TypeError(f"a sender is a node id (int or str), not {sender!r}")
    return json.dumps(sender)  # 3000 or "name": the type survives the trip


def encode_internal(message: Any, *, sender: int | str | None = None) -> bytes:
    """Frame one of the controller's messages: request header v1 with a private api key, the
    sender's node id (JSON) as client id, and the dataclass as a JSON object."""
    key = INTERNAL_API_KEYS.get(type(message))
    if key is None:
        raise TypeError(f"{type(message).__name__} has no private api key (INTERNAL_API_KEYS)")
    body = json.dumps(_to_json(message), separators=(",", ":"), allow_nan=False).encode("ascii")
    client = _sender_text(sender)
    client_bytes = b"" if client is None else client.encode("utf-8")
    corr = getattr(message, "correlation_id", 0)
    if not -(1 << 31) <= corr < (1 << 31):
        raise ValueError(f"correlation id {corr} does not fit the header's 32 bits")
    header = struct.pack(">hhih", key, 0, corr, -1 if client is None else len(client_bytes)) + client_bytes
    return struct.pack(">i", len(header) + len(body)) + header + body


def decode_internal(frame: bytes) -> tuple[int | str | None, Any]:
    """Decode a private frame (after the length prefix) into ``(sender, message)``. Raises
    ``FrameError`` for anything but a frame ``encode_internal`` could have written."""
    api_key, version, corr, client_id, pos = _read_request_header(frame)
    cls = _INTERNAL_CLASSES.get(api_key)
    if cls is None:
        raise FrameError(f"unknown private api key {api_key}")
    if version != 0:
        raise FrameError(f"private {cls.__name__} v{version} not supported (0–0)")
    sender = None
    if client_id is not None:
        try:
            sender = json.loads(client_id)
        except ValueError:
            sender = client_id
        if isinstance(sender, bool) or not isinstance(sender, (int, str)):
            raise FrameError(f"malformed private frame: sender {client_id!r:.40} is not a node id")
    try:
        body = json.loads(bytes(frame[pos:]).decode("utf-8"))
    except (ValueError, RecursionError) as e:  # RecursionError: "[[[[..." nested too deep
        raise FrameError(f"malformed private {cls.__name__}: not JSON ({type(e).__name__}: {e})") from None
    message = _from_json(body, cls, cls.__name__)
    body_corr = getattr(message, "correlation_id", 0)  # a message without one: 0 in the header
    if body_corr != corr:
        raise FrameError(f"malformed private {cls.__name__}: header correlation id {corr} != body {body_corr}")
    return sender, message


def encode_outgoing(message: Any, *, sender: int | str) -> tuple[bytes, tuple[int, int] | None]:
    """Frame a message a node sends to another node: a follower's Fetch as a real Kafka request
    (then ``(FETCH, version)`` says how to decode the answer that comes back on the same
    connection), anything else as a private frame (answers come as frames of their own)."""
    if isinstance(message, m.FetchRequest):
        return encode_request(message, client_id=f"minikafka-broker-{sender}"), (FETCH, FOLLOWER_FETCH_VERSION)
    return encode_internal(message, sender=sender), None


__all__ = [
    "ACCEPTED", "API_VERSIONS", "FOLLOWER_FETCH_VERSION", "INTERNAL_API_KEYS", "INTERNAL_KEY_BASE",
    "SUPPORTED", "ApiVersionsRequest", "BrokerContext", "Decoded", "FrameError", "api_name",
    "decode_internal", "decode_request", "decode_response", "encode_api_versions", "encode_internal",
    "encode_outgoing", "encode_request", "encode_response", "is_internal",
]
