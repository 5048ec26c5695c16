"""The requests and responses nodes exchange: plain, immutable dataclasses.

They follow Kafka's protocol schemas (``clients/src/main/resources/common/message/*.json``)
field for field where the course needs the field, with Kafka's names in snake_case, so
the wire runtime can map each one to and from a real protocol frame. Errors travel as
Kafka's numeric error codes (``minikafka.errors``), never as exceptions.

Every request carries a ``correlation_id`` that its response echoes, as on the wire.
Record batches travel as opaque ``bytes``.

The broker <-> controller messages are KRaft's and not client-facing: ``BrokerHeartbeat``
(registration and liveness), ``AlterPartition`` (a leader asks for an ISR change),
``AllocateProducerIds``, and CreateTopics/DeleteTopics forwarded by a broker. Brokers learn
the metadata itself by fetching the controllers' metadata log (``minikafka.raft``), not
from a push.
"""

from __future__ import annotations

from minikafka.frozen import frozen_dataclass

NO_ERROR = 0
CONTROLLER_ID = 3000  # the first controller's node id (KRaft controllers often use 3000+)


def controller_ids(n: int) -> tuple[int, ...]:
    """The node ids of an ``n``-voter controller quorum: 3000, 3001, ..."""
    return tuple(range(CONTROLLER_ID, CONTROLLER_ID + n))
CONSUMER_REPLICA_ID = -1


# --- shared pieces -------------------------------------------------------------------------------


@frozen_dataclass
class PartitionState:
    """What the controller decides about one partition."""

    topic: str
    partition: int
    leader: int  # -1: no leader (offline)
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    partition_epoch: int = 0  # bumped on every change, leader or ISR


@frozen_dataclass
class TopicConfig:
    """A topic to create (CreateTopics' ``CreatableTopic``) or one that exists."""

    name: str
    num_partitions: int
    replication_factor: int
    configs: tuple[tuple[str, str], ...] = ()
    # Explicit replicas (kafka-topics --replica-assignment): (partition index, broker ids), as
    # the request lists them, duplicates included, for the controller to judge; then
    # num_partitions and replication_factor must be -1. (): the controller places them.
    assignments: tuple[tuple[int, tuple[int, ...]], ...] = ()

    def config(self, key: str, default=None):
        return dict(self.configs).get(key, default)


# --- metadata ------------------------------------------------------------------------------------


@frozen_dataclass
class MetadataRequest:
    correlation_id: int
    topics: tuple[str, ...] | None = None  # None: all topics
    # Create the named topics that do not exist (if the broker's auto.create.topics.enable
    # allows): what kafka-python's and librdkafka's producers ask. The simulated clients never do.
    allow_auto_topic_creation: bool = False
    topic_ids: tuple[str, ...] = ()  # Metadata v10+: topics asked for by id (KIP-516), answered after the named


@frozen_dataclass
class PartitionMetadata:
    partition: int
    error: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@frozen_dataclass
class TopicMetadata:
    name: str
    error: int
    partitions: tuple[PartitionMetadata, ...] = ()
    topic_id: str | None = None  # the controller's id for it (Kafka's Uuid in base64), if it exists


@frozen_dataclass
class MetadataResponse:
    correlation_id: int
    brokers: tuple[int, ...]
    controller_id: int
    topics: tuple[TopicMetadata, ...]


# --- produce -----------------------------------------------------------------------------------------


@frozen_dataclass
class ProducePartition:
    topic: str
    partition: int
    records: bytes


@frozen_dataclass
class ProduceRequest:
    correlation_id: int
    acks: int  # 0, 1 or -1 (all)
    timeout_ms: int
    partitions: tuple[ProducePartition, ...]
    # A transactional producer's id (its batches carry the producer id, epoch and the
    # transactional bit; Kafka checks this one against the client's rights to the id).
    transactional_id: str | None = None


@frozen_dataclass
class ProducePartitionResponse:
    topic: str
    partition: int
    error: int
    base_offset: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()  # (index in the batch, why): INVALID_RECORD only


@frozen_dataclass
class ProduceResponse:
    correlation_id: int
    partitions: tuple[ProducePartitionResponse, ...]


# --- fetch ----------------------------------------------------------------------------------------------


@frozen_dataclass
class FetchPartition:
    topic: str
    partition: int
    fetch_offset: int
    last_fetched_epoch: int = -1  # followers: epoch of their last batch (KIP-320/595)
    current_leader_epoch: int = -1
    partition_max_bytes: int = 1024 * 1024


@frozen_dataclass
class FetchRequest:
    correlation_id: int
    replica_id: int  # a follower's broker id, or -1 for a consumer
    max_wait_ms: int
    min_bytes: int
    partitions: tuple[FetchPartition, ...]
    max_bytes: int = 50 * 1024 * 1024
    isolation_level: int = 0  # READ_UNCOMMITTED; 1 = READ_COMMITTED (up to the last stable offset)


@frozen_dataclass
class FetchPartitionResponse:
    topic: str
    partition: int
    error: int
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset): truncate first
    last_stable_offset: int = -1  # -1: not known (a follower's fetch); else <= high_watermark
    # read_committed: (producer id, first offset) of each aborted transaction in the range read
    aborted_transactions: tuple[tuple[int, int], ...] = ()


@frozen_dataclass
class FetchResponse:
    correlation_id: int
    partitions: tuple[FetchPartitionResponse, ...]


# --- offsets, producer ids, topics ------------------------------------------------------------------------

# ListOffsets' special timestamps (Kafka's ``ListOffsetsRequest.EARLIEST_TIMESTAMP`` and
# ``LATEST_TIMESTAMP``): a part of the protocol, so the clients that send them and the log
# that answers them both take them from here.
EARLIEST_TIMESTAMP = -2  # the log start offset
LATEST_TIMESTAMP = -1  # the high watermark (read_committed: the last stable offset)


@frozen_dataclass
class ListOffsetsRequest:
    correlation_id: int
    partitions: tuple[tuple[str, int, int], ...]  # (topic, partition, timestamp or LATEST/EARLIEST_TIMESTAMP)
    isolation_level: int = 0  # 1: "latest" is the last stable offset, not the high watermark


@frozen_dataclass
class ListOffsetsResponse:
    correlation_id: int
    partitions: tuple[tuple[str, int, int, int, int], ...]  # (topic, partition, error, timestamp, offset)


@frozen_dataclass
class InitProducerIdRequest:
    correlation_id: int
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000  # only read with a transactional id


@frozen_dataclass
class InitProducerIdResponse:
    correlation_id: int
    error: int
    producer_id: int = -1
    producer_epoch: int = -1


@frozen_dataclass
class CreateTopicsRequest:
    correlation_id: int
    topics: tuple[TopicConfig, ...]


@frozen_dataclass
class CreateTopicsResponse:
    correlation_id: int
    results: tuple[tuple[str, int, str | None], ...]  # (name, error, message)
    metadata_offset: int = -1  # the controller's: the metadata record that made the change


@frozen_dataclass
class DeleteTopicsRequest:
    correlation_id: int
    topics: tuple[str, ...]
    timeout_ms: int = 30000


@frozen_dataclass
class DeleteTopicsResponse:
    correlation_id: int
    results: tuple[tuple[str, int, str | None], ...]  # (name, error, message)
    metadata_offset: int = -1  # the controller's: the metadata record that made the change


@frozen_dataclass
class CreatePartitionsRequest:
    correlation_id: int
    topics: tuple[tuple[str, int], ...]  # (topic, the new total partition count)
    validate_only: bool = False
    # Explicit replicas for the new partitions (kafka-python's NewPartitions(new_assignments=...)):
    # assignments[i] belongs to topics[i], one broker-id list per new partition, or None for
    # "the controller places them"; () when no topic gives any.
    assignments: tuple[tuple[tuple[int, ...], ...] | None, ...] = ()


@frozen_dataclass
class CreatePartitionsResponse:
    correlation_id: int
    results: tuple[tuple[str, int, str | None], ...]  # (name, error, message)
    metadata_offset: int = -1  # the controller's: the metadata record that made the change


# IncrementalAlterConfigs' operations (Kafka's AlterConfigOp.OpType)
CONFIG_SET, CONFIG_DELETE, CONFIG_APPEND, CONFIG_SUBTRACT = 0, 1, 2, 3


@frozen_dataclass
class AlterConfigsRequest:
    """IncrementalAlterConfigs (``incremental``: each entry an operation on one key) or the
    older AlterConfigs (every override of the resource replaced by the entries, as SETs)."""

    correlation_id: int
    # (resource type, name, ((key, operation, value), ...)); resource types: 2 topic, 4 broker
    resources: tuple[tuple[int, str, tuple[tuple[str, int, str | None], ...]], ...]
    incremental: bool = True
    validate_only: bool = False


@frozen_dataclass
class AlterConfigsResponse:
    correlation_id: int
    results: tuple[tuple[int, str, int, str | None], ...]  # (resource type, name, error, message)
    metadata_offset: int = -1


@frozen_dataclass
class DeleteRecordsRequest:
    """To each partition's leader: records before ``offset`` go (-1: before the high watermark)."""

    correlation_id: int
    partitions: tuple[tuple[str, int, int], ...]  # (topic, partition, offset)
    timeout_ms: int = 30000


@frozen_dataclass
class DeleteRecordsResponse:
    correlation_id: int
    results: tuple[tuple[str, int, int, int], ...]  # (topic, partition, low watermark = new log start, error)


@frozen_dataclass
class OffsetForLeaderEpochRequest:
    """KIP-320: where did ``leader_epoch`` end in the leader's log? A consumer asks after a
    leader change, to find out whether its position was truncated away."""

    correlation_id: int
    replica_id: int
    # (topic, partition, current leader epoch as the client knows it (-1: unknown), epoch asked about)
    partitions: tuple[tuple[str, int, int, int], ...]


@frozen_dataclass
class OffsetForLeaderEpochResponse:
    correlation_id: int
    # (topic, partition, error, largest epoch <= the one asked, its end offset); -1, -1: unknown
    results: tuple[tuple[str, int, int, int, int], ...]


@frozen_dataclass
class OffsetDeleteRequest:
    """To the group's coordinator: forget the group's committed offsets of these partitions."""

    correlation_id: int
    group_id: str
    partitions: tuple[tuple[str, int], ...]


@frozen_dataclass
class OffsetDeleteResponse:
    correlation_id: int
    error: int  # about the group (NOT_COORDINATOR, GROUP_ID_NOT_FOUND, ...)
    results: tuple[tuple[str, int, int], ...] = ()  # (topic, partition, error)


@frozen_dataclass
class DescribeConfigsRequest:
    correlation_id: int
    # (resource type, name, keys or None for every key); Kafka's resource types: 2 topic, 4 broker
    resources: tuple[tuple[int, str, tuple[str, ...] | None], ...]


@frozen_dataclass
class DescribeConfigsResponse:
    correlation_id: int
    # (resource type, name, error, message, entries); an entry is
    # (key, value, read_only, is_default, is_sensitive), value None for a sensitive key
    results: tuple[tuple[int, str, int, str | None, tuple[tuple[str, str | None, bool, bool, bool], ...]], ...]


# --- broker <-> controller ------------------------------------------------------------------------------------


@frozen_dataclass
class BrokerHeartbeatRequest:
    correlation_id: int
    broker_id: int
    incarnation: int  # new on every start: the controller sees a restart (KRaft's incarnationId)
    metadata_offset: int  # the last metadata record the broker has applied (currentMetadataOffset)
    # Where clients reach it (KRaft's BrokerRegistration listeners); empty in the simulation,
    # where node ids are the addresses.
    host: str = ""
    port: int = 0
    # Where other brokers reach it (its inter-broker listener: followers fetch there); 0 in
    # the simulation.
    inter_broker_port: int = 0
    # Its log directories that failed and went offline (Kafka's OfflineLogDirs, v1+, which
    # names them by uuid; ours by name): the controller moves their partitions' leadership.
    offline_log_dirs: tuple[str, ...] = ()


@frozen_dataclass
class BrokerHeartbeatResponse:
    correlation_id: int
    error: int
    is_fenced: bool = True


@frozen_dataclass
class AlterPartitionRequest:
    """Leader -> controller: please change this partition's ISR."""

    correlation_id: int
    broker_id: int
    topic: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


@frozen_dataclass
class AlterPartitionResponse:
    correlation_id: int
    error: int
    state: PartitionState | None = None


@frozen_dataclass
class AllocateProducerIdsRequest:
    correlation_id: int
    broker_id: int


@frozen_dataclass
class AllocateProducerIdsResponse:
    correlation_id: int
    error: int
    first_producer_id: int = -1
    count: int = 0


@frozen_dataclass
class DescribeQuorumRequest:
    """DescribeQuorum (api 55): the metadata quorum's leader, epoch, high watermark and each
    replica's progress, as ``kafka-metadata-quorum describe`` shows them."""

    correlation_id: int


@frozen_dataclass
class QuorumReplica:
    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int = -1
    last_caught_up_timestamp: int = -1


@frozen_dataclass
class DescribeQuorumResponse:
    correlation_id: int
    error: int
    leader_id: int = -1
    leader_epoch: int = -1
    high_watermark: int = -1
    voters: tuple[QuorumReplica, ...] = ()
    observers: tuple[QuorumReplica, ...] = ()
    error_message: str | None = None


# --- consumer groups (the group coordinator's APIs) -----------------------------------------------------
# Membership and assignment travel as opaque bytes (the consumer protocol's Subscription and
# Assignment, see ``minikafka.assignors``): the coordinator never reads them, as in Kafka.


@frozen_dataclass
class FindCoordinatorRequest:
    correlation_id: int
    key: str  # the group id, or the transactional id
    key_type: int = 0  # 0: group (__consumer_offsets), 1: transaction (__transaction_state)


@frozen_dataclass
class FindCoordinatorResponse:
    correlation_id: int
    error: int
    node_id: int = -1
    error_message: str | None = None


@frozen_dataclass
class JoinGroupRequest:
    correlation_id: int
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int  # the consumer's max.poll.interval.ms
    member_id: str  # "" on the first join
    protocol_type: str  # "consumer"
    protocols: tuple[tuple[str, bytes], ...]  # (assignor name, subscription), in preference order
    client_id: str = ""
    # JoinGroup v4+: a new member is first given an id (MEMBER_ID_REQUIRED) and joins with it
    require_known_member_id: bool = True
    group_instance_id: str | None = None  # JoinGroup v5+: static membership (KIP-345)


@frozen_dataclass
class JoinGroupResponse:
    correlation_id: int
    error: int
    generation_id: int = -1
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[tuple[str, bytes], ...] = ()  # only the leader gets them: (member id, subscription)
    # JoinGroup v5+: each member's group.instance.id (None: a dynamic member), in ``members``' order;
    # () when no member is static
    member_instance_ids: tuple[str | None, ...] = ()


@frozen_dataclass
class SyncGroupRequest:
    correlation_id: int
    group_id: str
    generation_id: int
    member_id: str
    assignments: tuple[tuple[str, bytes], ...] = ()  # only from the leader: (member id, assignment)
    group_instance_id: str | None = None  # SyncGroup v3+: a static member (KIP-345)


@frozen_dataclass
class SyncGroupResponse:
    correlation_id: int
    error: int
    assignment: bytes = b""


@frozen_dataclass
class HeartbeatRequest:
    correlation_id: int
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None  # Heartbeat v3+: a static member (KIP-345)


@frozen_dataclass
class HeartbeatResponse:
    correlation_id: int
    error: int


@frozen_dataclass
class ConsumerGroupHeartbeatRequest:
    """KIP-848's one group request (api key 68): join (``member_epoch`` 0), stay and report what
    it owns (its current epoch), leave (-1) or, a static member, leave to come back (-2).
    ``None`` in the optional fields means "unchanged since my last heartbeat", as in Kafka.
    Topics are named, not given by id: the wire codec maps Kafka's topic ids."""

    correlation_id: int
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    server_assignor: str | None = None
    topic_partitions: tuple[tuple[str, int], ...] | None = None  # what the member owns now
    client_id: str = ""
    by_topic_id: bool = False  # topic_partitions name topics by id (what the wire carries)


@frozen_dataclass
class ConsumerGroupHeartbeatResponse:
    correlation_id: int
    error: int
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: tuple[tuple[str, int], ...] | None = None  # None: unchanged since the last answer
    topic_ids: tuple[tuple[str, str], ...] = ()  # (name, id) of the assignment's topics, for the wire


@frozen_dataclass
class ConsumerGroupDescribeRequest:
    """KIP-848's describe (api key 69): each group of type "consumer" with its epochs and each
    member's epoch, current and target assignment. A classic group is GROUP_ID_NOT_FOUND."""

    correlation_id: int
    group_ids: tuple[str, ...]


@frozen_dataclass
class DescribedConsumerMember:
    member_id: str
    instance_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]
    assignment: tuple[tuple[str, int], ...]  # what the member owns now
    target_assignment: tuple[tuple[str, int], ...]  # what the group's assignor gave it


@frozen_dataclass
class DescribedConsumerGroup:
    error: int
    group_id: str
    error_message: str | None = None
    state: str = ""  # a ConsumerGroupState name (minikafka.group_state); "" with an error
    group_epoch: int = -1
    assignment_epoch: int = -1
    assignor: str = ""
    members: tuple[DescribedConsumerMember, ...] = ()
    topic_ids: tuple[tuple[str, str], ...] = ()  # (name, id) of every topic named above, for the wire


@frozen_dataclass
class ConsumerGroupDescribeResponse:
    correlation_id: int
    groups: tuple[DescribedConsumerGroup, ...]


@frozen_dataclass
class LeaveGroupRequest:
    """One member leaves. LeaveGroup v3+ names members by id and/or ``group_instance_id``: an
    admin tool may remove a static member by its instance id alone (``member_id`` "")."""

    correlation_id: int
    group_id: str
    member_id: str
    group_instance_id: str | None = None


@frozen_dataclass
class LeaveGroupResponse:
    correlation_id: int
    error: int


@frozen_dataclass
class OffsetCommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@frozen_dataclass
class OffsetCommitRequest:
    """A member's commit (its generation and id), or a *simple* commit (generation -1, member
    "") from a client outside any group, or an admin tool; only accepted while the group has no
    members."""

    correlation_id: int
    group_id: str
    generation_id: int
    member_id: str
    offsets: tuple[OffsetCommitPartition, ...]
    group_instance_id: str | None = None  # OffsetCommit v7+: a static member (KIP-345)


@frozen_dataclass
class OffsetCommitResponse:
    correlation_id: int
    partitions: tuple[tuple[str, int, int], ...]  # (topic, partition, error)


@frozen_dataclass
class OffsetFetchRequest:
    correlation_id: int
    group_id: str
    partitions: tuple[tuple[str, int], ...] | None = None  # None: every partition with an offset


@frozen_dataclass
class OffsetFetchPartition:
    topic: str
    partition: int
    offset: int  # -1: nothing committed
    leader_epoch: int = -1
    metadata: str | None = ""
    error: int = 0


@frozen_dataclass
class OffsetFetchResponse:
    correlation_id: int
    error: int
    partitions: tuple[OffsetFetchPartition, ...] = ()


@frozen_dataclass
class ListGroupsRequest:
    correlation_id: int


@frozen_dataclass
class ListGroupsResponse:
    correlation_id: int
    error: int
    groups: tuple[tuple[str, str, str], ...] = ()  # (group id, protocol type, state)
    group_types: tuple[str, ...] = ()  # per group, in the same order: "classic" or "consumer" (KIP-848)


@frozen_dataclass
class DescribedMember:
    member_id: str
    client_id: str
    client_host: str
    metadata: bytes  # the subscription the member joined with
    assignment: bytes
    group_instance_id: str | None = None  # a static member's (DescribeGroups v4+)


@frozen_dataclass
class DescribedGroup:
    error: int
    group_id: str
    state: str = "Dead"  # a GroupState name (minikafka.group_state); a real Kafka may send others
    protocol_type: str = ""
    protocol: str = ""
    members: tuple[DescribedMember, ...] = ()
    group_type: str = "classic"  # "consumer": a KIP-848 group (its members' metadata is empty)


@frozen_dataclass
class DescribeGroupsRequest:
    correlation_id: int
    groups: tuple[str, ...]


@frozen_dataclass
class DescribeGroupsResponse:
    correlation_id: int
    groups: tuple[DescribedGroup, ...]


@frozen_dataclass
class DeleteGroupsRequest:
    correlation_id: int
    groups: tuple[str, ...]


@frozen_dataclass
class DeleteGroupsResponse:
    correlation_id: int
    results: tuple[tuple[str, int], ...]  # (group id, error)


# --- transactions (KIP-98: the transaction coordinator's APIs and its markers) ----------------------


@frozen_dataclass
class AddPartitionsToTxnRequest:
    correlation_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[tuple[str, int], ...]


@frozen_dataclass
class AddPartitionsToTxnResponse:
    correlation_id: int
    results: tuple[tuple[str, int, int], ...]  # (topic, partition, error)


@frozen_dataclass
class AddOffsetsToTxnRequest:
    correlation_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str


@frozen_dataclass
class AddOffsetsToTxnResponse:
    correlation_id: int
    error: int


@frozen_dataclass
class EndTxnRequest:
    correlation_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool


@frozen_dataclass
class EndTxnResponse:
    correlation_id: int
    error: int


@frozen_dataclass
class TxnOffsetCommitRequest:
    """Offsets a transactional producer commits for a group: pending in the group's
    coordinator until the transaction's marker reaches that partition of __consumer_offsets."""

    correlation_id: int
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    offsets: tuple[OffsetCommitPartition, ...]


@frozen_dataclass
class TxnOffsetCommitResponse:
    correlation_id: int
    partitions: tuple[tuple[str, int, int], ...]  # (topic, partition, error)


@frozen_dataclass
class TxnMarker:
    """One transaction's end, for the partitions one leader hosts (Kafka's WritableTxnMarker)."""

    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: tuple[tuple[str, int], ...]


@frozen_dataclass
class WriteTxnMarkersRequest:
    """Coordinator -> partition leader (Kafka's api 27, broker to broker only)."""

    correlation_id: int
    markers: tuple[TxnMarker, ...]


@frozen_dataclass
class WriteTxnMarkersResponse:
    correlation_id: int
    results: tuple[tuple[int, str, int, int], ...]  # (producer id, topic, partition, error)


@frozen_dataclass
class Disconnected:
    """From the runtime, not a node: the connection to ``node`` was refused or closed (a
    crashed process's port refuses at once; a partitioned one just stays silent)."""

    node: object


# Error codes the state machines use (Kafka's numbers; names as in Kafka's Errors enum).
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
INVALID_TIMESTAMP = 32
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
KAFKA_STORAGE_ERROR = 56
INVALID_RECORD = 87
NOT_CONTROLLER = 41
INVALID_TOPIC_EXCEPTION = 17
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
INVALID_REQUIRED_ACKS = 21
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
INVALID_CONFIG = 40
UNKNOWN_PRODUCER_ID = 59
BROKER_NOT_AVAILABLE = 8
STALE_BROKER_EPOCH = 77
OFFSET_NOT_AVAILABLE = 78
INVALID_UPDATE_VERSION = 96
INELIGIBLE_REPLICA = 107  # AlterPartition: a proposed member is fenced, or not a replica
OFFSET_METADATA_TOO_LARGE = 12
UNKNOWN_SERVER_ERROR = -1  # Kafka's answer for a failure it has no code for
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
GROUP_ID_NOT_FOUND = 69
NON_EMPTY_GROUP = 68
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82  # a static member replaced by a newer instance with the same group.instance.id
FENCED_MEMBER_EPOCH = 110  # KIP-848: a heartbeat or commit from an epoch the member no longer has
UNRELEASED_INSTANCE_ID = 111  # a static member's instance id is still held by a live member
UNSUPPORTED_ASSIGNOR = 112  # a server assignor the broker does not have
UNKNOWN_TOPIC_ID = 100  # Metadata (or a heartbeat) names a topic by an id no topic has
STALE_MEMBER_EPOCH = 113  # a commit from an older epoch of a live member
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
POLICY_VIOLATION = 44
GROUP_SUBSCRIBED_TO_TOPIC = 86
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
TRANSACTION_COORDINATOR_FENCED = 52
PRODUCER_FENCED = 90
OPERATION_NOT_ATTEMPTED = 55

ERROR_NAMES = {
    value: name for name, value in dict(globals()).items() if name.isupper() and isinstance(value, int)
    and name not in ("CONTROLLER_ID", "CONSUMER_REPLICA_ID")
}
ERROR_NAMES[NO_ERROR] = "NONE"

__all__ = [name for name in dict(globals()) if not name.startswith("_") and name not in ("annotations", "frozen_dataclass")]
