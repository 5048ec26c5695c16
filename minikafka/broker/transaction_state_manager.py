"""The transaction coordinator's memory, written down: Kafka's ``TransactionStateManager``.

Theory of operation
-------------------
Every transactional id has one coordinator: the broker that leads partition
``abs(java_hash(transactional_id)) % transaction.state.log.num.partitions`` of the
compacted internal topic ``__transaction_state`` (as groups map to ``__consumer_offsets``).
The coordinator keeps one ``TransactionMetadata`` per transactional id and writes every
state change to that partition (acks=all) *before* acting on it or answering, so the
partition's next leader replays it and knows every transaction: which producer id and
epoch own the id, the state, and which partitions an open transaction wrote to. The
coordinator epoch is that partition's leader epoch: markers carry it.

A transaction moves through Kafka's states (``TransactionState``); ``VALID_PREVIOUS`` is
the table of allowed transitions, checked on every change:

    Empty/CompleteCommit/CompleteAbort --AddPartitions--> Ongoing --EndTxn(commit)--> PrepareCommit
        ^                                                    |   --EndTxn(abort), fence, timeout--> PrepareAbort
        +------- markers written on every partition <---------+   (then CompleteCommit / CompleteAbort)

Records: key ``TransactionLogKey`` (version 0, transactional id), value
``TransactionLogValue`` (version 0: producer id, epoch, timeout, state, partitions, last
update and start timestamps), Kafka's own non-flexible layout.

Never: I/O or a clock of its own; it asks its ``CoordinatorContext`` (``now``, ``append_internal``).
"""

from __future__ import annotations

import enum
import logging
import struct
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

from minikafka.broker.group_coordinator import partition_for
from minikafka.broker.group_metadata import _Reader, _string
from minikafka.broker.internal_topic import replay
from minikafka.errors import CorruptRecordError
from minikafka.messages import NO_ERROR, NOT_COORDINATOR
from minikafka.records import Record, RecordBatch

if TYPE_CHECKING:
    from minikafka.broker.coordinator_context import CoordinatorContext

TRANSACTION_STATE_TOPIC = "__transaction_state"
logger = logging.getLogger("minikafka.broker")


class TransactionState(enum.IntEnum):
    """Kafka's ``TransactionState``, with its ids (what the log stores)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6

    @property
    def label(self) -> str:
        return "".join(w.capitalize() for w in self.name.split("_"))


S = TransactionState
VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
}


@dataclass(frozen=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState = S.EMPTY
    partitions: frozenset = field(default_factory=frozenset)  # {(topic, partition)}
    txn_start_timestamp: int = -1
    last_update_timestamp: int = -1

    def transition(self, state: TransactionState, now: int, **changes) -> "TransactionMetadata":
        if self.state not in VALID_PREVIOUS[state]:
            raise ValueError(f"transaction {self.transactional_id!r}: {self.state.label} -> {state.label} is not allowed")
        return replace(self, state=state, last_update_timestamp=now, **changes)

    # --- Kafka's TransactionLogKey / TransactionLogValue, version 0 ---------------------------------

    def key(self) -> bytes:
        return encode_key(self.transactional_id)

    def value(self) -> bytes:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(partition)
        out = bytearray(struct.pack(">hqhib", 0, self.producer_id, self.producer_epoch, self.timeout_ms,
                                    int(self.state)))
        out += struct.pack(">i", len(by_topic))
        for topic, parts in by_topic.items():
            out += _string(topic) + struct.pack(">i", len(parts)) + b"".join(struct.pack(">i", p) for p in parts)
        out += struct.pack(">qq", self.last_update_timestamp, self.txn_start_timestamp)
        return bytes(out)

    @classmethod
    def decode(cls, transactional_id: str, value: bytes) -> "TransactionMetadata":
        r = _Reader(value, f"transaction state of {transactional_id!r}")
        version = r.int16()
        if version != 0:
            raise CorruptRecordError(f"TransactionLogValue version {version}: only version 0 is known")
        pid, epoch, timeout = r.int64(), r.int16(), r.int32()
        state = TransactionState(r._take(">b"))
        partitions = set()
        for _ in range(r.int32()):
            topic = r.string()
            for _ in range(r.int32()):
                partitions.add((topic, r.int32()))
        last_update, start = r.int64(), r.int64()
        return cls(transactional_id, pid, epoch, timeout, state, frozenset(partitions), start, last_update)


def encode_key(transactional_id: str) -> bytes:
    return struct.pack(">h", 0) + _string(transactional_id)


def decode_key(key: bytes) -> str:
    r = _Reader(key, "TransactionLogKey")
    version = r.int16()
    if version != 0:
        raise CorruptRecordError(f"TransactionLogKey version {version}: only version 0 is known")
    return r.string()


class TransactionStateManager:
    def __init__(self, context: "CoordinatorContext") -> None:
        self.context = context
        self.transactions: dict[str, TransactionMetadata] = {}
        self.owned: dict[int, int] = {}  # partition of __transaction_state -> coordinator epoch
        self.pending: set[str] = set()  # ids with a state change being written

    def num_partitions(self) -> int:
        topic = self.context.topic(TRANSACTION_STATE_TOPIC)
        return topic.num_partitions if topic else self.context.config["transaction.state.log.num.partitions"]

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions())

    def coordinator_epoch(self, transactional_id: str) -> int | None:
        """The epoch we coordinate this id at, or None if another broker does."""
        return self.owned.get(self.partition_for(transactional_id))

    # --- ownership ---------------------------------------------------------------------------------

    def on_metadata_changed(self) -> list[int]:
        """Load the partitions we now lead, drop the others; the partitions loaded."""
        me, loaded = self.context.broker_id, []
        for p, state in sorted(self.context.partition_states(TRANSACTION_STATE_TOPIC), key=lambda ps: ps[0]):
            if state.leader == me and self.owned.get(p) != state.leader_epoch:
                self.load(p, state.leader_epoch)
                loaded.append(p)
            elif state.leader != me and p in self.owned:
                self.unload(p)
        return loaded

    def load(self, p: int, epoch: int) -> None:
        """Replay partition ``p``: the last record of each transactional id is its state."""
        self.unload(p)
        log = self.context.local_log(TRANSACTION_STATE_TOPIC, p)
        if log is None:
            return

        def on_record(record, batch) -> None:
            txn_id = decode_key(record.key)
            if record.value is None:
                self.transactions.pop(txn_id, None)
            else:
                self.transactions[txn_id] = TransactionMetadata.decode(txn_id, record.value)

        replay(log, f"{TRANSACTION_STATE_TOPIC}-{p}", on_record)
        self.owned[p] = epoch

    def unload(self, p: int) -> None:
        self.owned.pop(p, None)
        for txn_id in [t for t in self.transactions if self.partition_for(t) == p]:
            del self.transactions[txn_id]
            self.pending.discard(txn_id)

    # --- writing -------------------------------------------------------------------------------------------

    def append(self, new: TransactionMetadata, callback: Callable[[int], None]) -> None:
        """Write ``new`` (acks=all); once replicated it becomes the id's state in memory, and
        ``callback(error)`` runs either way. One write per id at a time (``pending``)."""
        txn_id = new.transactional_id
        p = self.partition_for(txn_id)
        epoch = self.owned.get(p)
        self.pending.add(txn_id)
        batch = RecordBatch.build([Record(new.key(), new.value(), timestamp=self.context.now)])

        def written(error: int) -> None:
            self.pending.discard(txn_id)
            if error == NO_ERROR and (epoch is None or self.owned.get(p) != epoch):
                error = NOT_COORDINATOR  # we lost the partition meanwhile: its new leader decides
            if error == NO_ERROR:
                self.transactions[txn_id] = new
            callback(error)

        self.context.append_internal(
            TRANSACTION_STATE_TOPIC, p, bytes(batch), self.context.config["request.timeout.ms"], written)
