"""Idempotent producers on the broker side: Kafka's ``ProducerStateManager``.

Theory of operation
-------------------
An idempotent producer stamps each batch with its producer id, epoch and the sequence
number of its first record; sequences count per partition from 0. For each producer id
the partition remembers the epoch and the last few batches it appended (Kafka keeps 5,
the most a producer may have in flight). When a batch arrives:

- same sequences as a remembered batch: a *duplicate* (the producer retried after a lost
  response). It is not appended again; the producer gets the original offset.
- first sequence = last sequence + 1: in order, append it.
- anything else: ``OUT_OF_ORDER_SEQUENCE_NUMBER`` (a batch was lost before it, or the
  producer is confused); an older epoch is ``INVALID_PRODUCER_EPOCH`` (a zombie).

That decision is a rule (``minikafka.rules.check_batch``, notebook 05's exercise), asked
through ``self.rules`` (the partition's: Kafka's by default) with the producer's entry as
the exercise's ``state`` ({producer id: (epoch, [(first_seq, last_seq), ...])}); ``check``
turns its answer into the error code (and, for a duplicate, the original batch's offset).

Transactions (KIP-98): a transactional batch opens, for its producer id, a transaction
on this partition (``ongoing``: its first offset) until a control batch (the coordinator's
commit or abort marker) closes it. An aborted one goes into the aborted-transaction index
(Kafka's ``.txnindex``: producer id, first offset, marker offset), which read_committed
fetches are answered from. The *first unstable offset* is the first offset of any
transaction still open, or closed by a marker the high watermark has not passed yet: the
last stable offset (LSO) is that, capped by the high watermark. A marker with a newer
epoch raises the producer's epoch here, so a fenced zombie's later batches are refused.

The state is derived from the log alone: leaders and followers update it on every append
and rebuild it by scanning batch headers after a restart or a truncation, so a new leader
knows every producer its predecessor knew. No I/O of its own, no clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from minikafka.messages import (
    DUPLICATE_SEQUENCE_NUMBER,
    INVALID_PRODUCER_EPOCH,
    NO_ERROR,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    TRANSACTION_COORDINATOR_FENCED,
)
from minikafka.broker.transaction_marker import TransactionMarker
from minikafka.records import HEADER, LOG_OVERHEAD, NO_PRODUCER_ID, TRANSACTIONAL_BIT, RecordBatch
from minikafka.rules import REFERENCE, Rules

BATCHES_KEPT = 5
_SEQ_MOD = 2**31


@dataclass
class ProducerStateEntry:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))  # (first_seq, last_seq, first_offset, last_offset)

    @property
    def last_seq(self) -> int:
        return self.batches[-1][1] if self.batches else -1


_ERRORS = {"append": NO_ERROR, "out of order": OUT_OF_ORDER_SEQUENCE_NUMBER, "fenced": INVALID_PRODUCER_EPOCH}


class ProducerStateManager:
    def __init__(self, rules: Rules = REFERENCE) -> None:
        self.rules = rules  # the idempotence check (minikafka.rules.check_batch): Kafka's by default
        self.producers: dict[int, ProducerStateEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.aborted: list[tuple[int, int, int]] = []  # (producer id, first offset, marker offset)
        self.completed: list[tuple[int, int]] = []  # (first offset, marker offset): marker maybe above the HW
        self.coordinator_epochs: dict[int, int] = {}  # producer id -> coordinator epoch of its last marker

    # --- transactions ---------------------------------------------------------------------------

    def update_transaction(self, batch: RecordBatch, first_offset: int, last_offset: int) -> None:
        """Open or close a transaction for an appended batch (leader, follower or log scan)."""
        if not batch.is_transactional or batch.producer_id == NO_PRODUCER_ID:
            return
        pid = batch.producer_id
        if not batch.is_control_batch:
            self.ongoing.setdefault(pid, first_offset)
            return
        try:
            marker = TransactionMarker.of(batch)
        except ValueError:
            return  # not ours to judge here: the log validator refuses malformed control batches
        entry = self.producers.get(pid)
        if entry is None or batch.producer_epoch > entry.epoch:
            self.producers[pid] = ProducerStateEntry(batch.producer_epoch)  # a fence: sequences restart
        self.coordinator_epochs[pid] = max(self.coordinator_epochs.get(pid, -1), marker.coordinator_epoch)
        first = self.ongoing.pop(pid, None)
        if first is None:
            return  # a marker retried, or for a transaction that wrote nothing here
        self.completed.append((first, last_offset))
        if not marker.committed:
            self.aborted.append((pid, first, last_offset))

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset a read_committed consumer may not read yet (None: none)."""
        if not self.ongoing and not self.completed:
            return None  # no transaction here (every consumer fetch asks)
        self.completed = [(f, m) for f, m in self.completed if m >= high_watermark]
        firsts = list(self.ongoing.values()) + [f for f, _ in self.completed]
        return min(firsts) if firsts else None

    def aborted_transactions(self, fetch_offset: int, upper: int) -> tuple[tuple[int, int], ...]:
        """(producer id, first offset) of the aborted transactions that overlap [fetch_offset, upper)."""
        return tuple((pid, first) for pid, first, marker in self.aborted
                     if marker >= fetch_offset and first < upper)

    def forget_markers(self, offsets: set[int]) -> None:
        """The log cleaner removed these markers (their transactions had no batch left):
        their aborted transactions leave the index too, as Kafka's cleaner rewrites the
        ``.txnindex``. Kept, a reader would be told of an abort whose marker never comes."""
        self.aborted = [(pid, first, marker) for pid, first, marker in self.aborted if marker not in offsets]

    def check_epoch(self, producer_id: int, epoch: int, coordinator_epoch: int = -1) -> int:
        """For a batch the coordinator writes (a marker, transactional offsets): sequences are
        not checked, only that the epoch is not older than the producer's, and, for a
        marker, that its coordinator is not older than the one of the last marker (a
        coordinator that lost its partition of __transaction_state is a zombie)."""
        entry = self.producers.get(producer_id)
        if entry is not None and epoch < entry.epoch:
            return INVALID_PRODUCER_EPOCH
        if coordinator_epoch >= 0 and coordinator_epoch < self.coordinator_epochs.get(producer_id, -1):
            return TRANSACTION_COORDINATOR_FENCED
        return NO_ERROR

    def check(self, producer_id: int, epoch: int, first_seq: int, count: int) -> tuple[int, int]:
        """(error code, offset of the original batch if a duplicate else -1) for a batch the
        leader is about to append: the rule ``check_batch`` decides."""
        entry = self.producers.get(producer_id)
        state = {} if entry is None else {producer_id: (entry.epoch, [(f, l) for f, l, _, _ in entry.batches])}
        decision = self.rules.check_batch(state, producer_id, epoch, first_seq, count)
        if decision != "duplicate":
            return _ERRORS[decision], -1
        last_seq = (first_seq + count - 1) % _SEQ_MOD
        for f, l, first_offset, _ in entry.batches:  # the remembered batch it repeats ...
            if f == first_seq and l == last_seq:
                return DUPLICATE_SEQUENCE_NUMBER, first_offset
        for f, _, first_offset, _ in entry.batches:  # ... or, for a rule that compares only first sequences, that one
            if f == first_seq:
                return DUPLICATE_SEQUENCE_NUMBER, first_offset
        raise AssertionError("check_batch's contract: a duplicate repeats a remembered batch")

    def update(self, producer_id: int, epoch: int, first_seq: int, first_offset: int, last_offset: int) -> None:
        """Remember an appended batch (leader or follower, or a scan of the log)."""
        if producer_id == NO_PRODUCER_ID or first_seq < 0:
            return
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = self.producers[producer_id] = ProducerStateEntry(epoch)
        last_seq = (first_seq + last_offset - first_offset) % _SEQ_MOD
        entry.batches.append((first_seq, last_seq, first_offset, last_offset))

    def update_appended(self, records: bytes) -> None:
        """Remember every batch of ``records``, which a follower's log has just appended
        under the leader's offsets (so each batch is whole, its CRC checked). Headers are
        all ``update`` needs; only a transactional batch is read whole (a marker's record
        says commit or abort). Every fetch a follower answers comes this way."""
        position, total = 0, len(records)
        while position < total:
            (base, length, _, _, _, attributes, last_delta, _, _, producer_id, epoch, first_seq,
             _) = HEADER.unpack_from(records, position)
            end = position + LOG_OVERHEAD + length
            self.update(producer_id, epoch, first_seq, base, base + last_delta)
            if attributes & TRANSACTIONAL_BIT and producer_id != NO_PRODUCER_ID:
                self.update_transaction(RecordBatch(memoryview(records)[position:end]), base, base + last_delta)
            position = end

    def rebuild(self, log) -> None:
        """Derive the state from the log's batch headers (after a restart or truncation)."""
        self.producers.clear()
        self.ongoing.clear()
        self.aborted.clear()
        self.completed.clear()
        self.coordinator_epochs.clear()
        for segment in log.segments:
            for _, batch in segment.iter_batches():
                self.update(batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.base_offset, batch.last_offset)
                self.update_transaction(batch, batch.base_offset, batch.last_offset)
