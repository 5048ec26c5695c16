"""Errors, named and numbered as Kafka (and kafka-python) name and number them.

Course code catches ``OffsetOutOfRangeError`` here and the same name from
``kafka.errors`` against a real cluster, so names, ``errno`` and ``message`` follow
Kafka's protocol error table. The wire layer maps ``errno`` to and from the protocol;
nothing here does I/O.
"""

from __future__ import annotations


class KafkaError(Exception):
    """Base of every minikafka error."""

    retriable = False
    # Whether a client should refresh its metadata before retrying.
    invalid_metadata = False


class IllegalArgumentError(KafkaError, ValueError):
    """A configuration value or argument is out of range."""


class KafkaConfigurationError(KafkaError, ValueError):
    """A configuration key has a value the client cannot work with (kafka-python's name)."""


class IllegalStateError(KafkaError):
    pass


class KafkaTimeoutError(KafkaError):
    retriable = True


class KafkaConnectionError(KafkaError):
    """The connection to a broker was refused or closed."""

    retriable = True
    invalid_metadata = True


class UnsupportedCodecError(KafkaError):
    pass


class BrokerResponseError(KafkaError):
    """An error a broker returns in a response, with Kafka's error code."""

    errno: int = -1
    message: str = "UNKNOWN_SERVER_ERROR"

    def __str__(self) -> str:
        detail = super().__str__()
        return f"[Error {self.errno}] {self.message}" + (f": {detail}" if detail else "")


class OffsetOutOfRangeError(BrokerResponseError):
    errno = 1
    message = "OFFSET_OUT_OF_RANGE"


class CorruptRecordError(BrokerResponseError):
    """A record batch failed its CRC, is truncated, or is otherwise malformed."""

    errno = 2
    message = "CORRUPT_MESSAGE"


class UnknownTopicOrPartitionError(BrokerResponseError):
    errno = 3
    message = "UNKNOWN_TOPIC_OR_PARTITION"
    invalid_metadata = True
    retriable = True


class NotLeaderForPartitionError(BrokerResponseError):
    errno = 6
    message = "NOT_LEADER_FOR_PARTITION"
    invalid_metadata = True
    retriable = True


class LeaderNotAvailableError(BrokerResponseError):
    errno = 5
    message = "LEADER_NOT_AVAILABLE"
    retriable = True
    invalid_metadata = True


class RequestTimedOutError(BrokerResponseError):
    errno = 7
    message = "REQUEST_TIMED_OUT"
    retriable = True


class MessageSizeTooLargeError(BrokerResponseError):
    errno = 10
    message = "MESSAGE_TOO_LARGE"


class InvalidTopicError(BrokerResponseError, ValueError):
    errno = 17
    message = "INVALID_TOPIC_EXCEPTION"


class RecordListTooLargeError(BrokerResponseError):
    errno = 18
    message = "RECORD_LIST_TOO_LARGE"


class NotEnoughReplicasError(BrokerResponseError):
    errno = 19
    message = "NOT_ENOUGH_REPLICAS"
    retriable = True


class NotEnoughReplicasAfterAppendError(BrokerResponseError):
    errno = 20
    message = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    retriable = True


class InvalidRequiredAcksError(BrokerResponseError):
    errno = 21
    message = "INVALID_REQUIRED_ACKS"


class TopicAlreadyExistsError(BrokerResponseError):
    errno = 36
    message = "TOPIC_ALREADY_EXISTS"


class InvalidPartitionsError(BrokerResponseError):
    errno = 37
    message = "INVALID_PARTITIONS"


class PolicyViolationError(BrokerResponseError):
    errno = 44
    message = "POLICY_VIOLATION"


class InvalidReplicationFactorError(BrokerResponseError):
    errno = 38
    message = "INVALID_REPLICATION_FACTOR"


class InvalidReplicaAssignmentError(BrokerResponseError):
    """Explicit replicas that cannot be used: partitions not numbered 0..n-1, lists of different
    lengths, a broker named twice or not registered, no live broker in a list."""
    errno = 39
    message = "INVALID_REPLICA_ASSIGNMENT"


InvalidReplicationAssignmentError = InvalidReplicaAssignmentError  # kafka-python's name for it


class InvalidConfigurationError(BrokerResponseError):
    errno = 40
    message = "INVALID_CONFIG"


class InvalidRequestError(BrokerResponseError):
    """A request that is well formed but asks something contradictory (e.g. a replica
    assignment together with a partition count)."""
    errno = 42
    message = "INVALID_REQUEST"


class OutOfOrderSequenceNumberError(BrokerResponseError):
    errno = 45
    message = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class DuplicateSequenceNumberError(BrokerResponseError):
    errno = 46
    message = "DUPLICATE_SEQUENCE_NUMBER"


class InvalidProducerEpochError(BrokerResponseError):
    errno = 47
    message = "INVALID_PRODUCER_EPOCH"


class InvalidTxnStateError(BrokerResponseError):
    errno = 48
    message = "INVALID_TXN_STATE"


class InvalidProducerIdMappingError(BrokerResponseError):
    errno = 49
    message = "INVALID_PRODUCER_ID_MAPPING"


class InvalidTransactionTimeoutError(BrokerResponseError):
    errno = 50
    message = "INVALID_TRANSACTION_TIMEOUT"


class ConcurrentTransactionsError(BrokerResponseError):
    errno = 51
    message = "CONCURRENT_TRANSACTIONS"
    retriable = True


class TransactionCoordinatorFencedError(BrokerResponseError):
    errno = 52
    message = "TRANSACTION_COORDINATOR_FENCED"


class ProducerFencedError(BrokerResponseError):
    """Another producer with the same transactional id was initialised (KIP-98's fencing)."""

    errno = 90
    message = "PRODUCER_FENCED"


class UnknownProducerIdError(BrokerResponseError):
    errno = 59
    message = "UNKNOWN_PRODUCER_ID"


class FencedLeaderEpochError(BrokerResponseError):
    errno = 74
    message = "FENCED_LEADER_EPOCH"
    retriable = True
    invalid_metadata = True


class UnknownLeaderEpochError(BrokerResponseError):
    errno = 75
    message = "UNKNOWN_LEADER_EPOCH"
    retriable = True


class InvalidTimestampError(BrokerResponseError):
    errno = 32
    message = "INVALID_TIMESTAMP"


class UnsupportedForMessageFormatError(BrokerResponseError):
    errno = 43
    message = "UNSUPPORTED_FOR_MESSAGE_FORMAT"


class KafkaStorageError(BrokerResponseError):
    """A disk error (full, failing) stopped a write; the broker wrote nothing of it.

    Retriable, as in Kafka: the producer tries again, and may find a new leader."""

    errno = 56
    message = "KAFKA_STORAGE_ERROR"
    retriable = True
    invalid_metadata = True


class InvalidRecordError(BrokerResponseError):
    """A batch whose CRC holds but whose records break the format's rules (Kafka's
    ``InvalidRecordException``). ``record_errors`` names the records: (index in the
    batch, why), as Produce v8+ carries them."""

    errno = 87
    message = "INVALID_RECORD"

    def __init__(self, *args: object, record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(*args)
        self.record_errors = tuple(record_errors)


# --- consumer groups -------------------------------------------------------------------------------


class CommitFailedError(KafkaError):
    """A synchronous commit failed for good: the group rebalanced and the partitions may
    now belong to another member (kafka-python's name and meaning)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args or (
            "Commit cannot be completed since the group has already rebalanced and assigned "
            "the partitions to another member. This means that the time between subsequent "
            "calls to poll() was longer than the configured max_poll_interval_ms, or the "
            "group is rebalancing (the member's session timed out).",))


class NoOffsetForPartitionError(KafkaError):
    """No committed offset and ``auto_offset_reset='none'``: the consumer will not guess."""


class OffsetMetadataTooLargeError(BrokerResponseError):
    errno = 12
    message = "OFFSET_METADATA_TOO_LARGE"


class CoordinatorLoadInProgressError(BrokerResponseError):
    errno = 14
    message = "COORDINATOR_LOAD_IN_PROGRESS"
    retriable = True


class CoordinatorNotAvailableError(BrokerResponseError):
    errno = 15
    message = "COORDINATOR_NOT_AVAILABLE"
    retriable = True


class NotCoordinatorError(BrokerResponseError):
    errno = 16
    message = "NOT_COORDINATOR"
    retriable = True


class IllegalGenerationError(BrokerResponseError):
    errno = 22
    message = "ILLEGAL_GENERATION"


class InconsistentGroupProtocolError(BrokerResponseError):
    errno = 23
    message = "INCONSISTENT_GROUP_PROTOCOL"


class InvalidGroupIdError(BrokerResponseError):
    errno = 24
    message = "INVALID_GROUP_ID"


class UnknownMemberIdError(BrokerResponseError):
    errno = 25
    message = "UNKNOWN_MEMBER_ID"


class InvalidSessionTimeoutError(BrokerResponseError):
    errno = 26
    message = "INVALID_SESSION_TIMEOUT"


class RebalanceInProgressError(BrokerResponseError):
    errno = 27
    message = "REBALANCE_IN_PROGRESS"


class NonEmptyGroupError(BrokerResponseError):
    errno = 68
    message = "NON_EMPTY_GROUP"


class GroupIdNotFoundError(BrokerResponseError):
    errno = 69
    message = "GROUP_ID_NOT_FOUND"


class MemberIdRequiredError(BrokerResponseError):
    errno = 79
    message = "MEMBER_ID_REQUIRED"


class OffsetNotAvailableError(BrokerResponseError):
    """A new leader's high watermark is still behind the start of its epoch: ask again."""
    errno = 78
    message = "OFFSET_NOT_AVAILABLE"
    retriable = True


class GroupMaxSizeReachedError(BrokerResponseError):
    errno = 81
    message = "GROUP_MAX_SIZE_REACHED"


class UnsupportedVersionError(BrokerResponseError):
    """The broker serves no version of an API that the client speaks."""
    errno = 35
    message = "UNSUPPORTED_VERSION"


def _by_errno() -> dict[int, type[BrokerResponseError]]:
    table: dict[int, type[BrokerResponseError]] = {}
    pending = list(BrokerResponseError.__subclasses__())
    while pending:
        cls = pending.pop()
        table.setdefault(cls.errno, cls)
        pending.extend(cls.__subclasses__())
    return table


def for_code(errno: int) -> type[BrokerResponseError]:
    """The error class for a protocol error code (used by the wire layer)."""
    return _by_errno().get(errno, BrokerResponseError)
