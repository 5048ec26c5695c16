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

The state is derived from the log alone: leaders and followers update it on every append
and rebuild it by scanning batch headers after a restart or a truncation, so a new leader
knows every producer its predecessor knew. No I/O of its own, no clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from minikafka.messages import DUPLICATE_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, NO_ERROR, OUT_OF_ORDER_SEQUENCE_NUMBER
from minikafka.records import NO_PRODUCER_ID

BATCHES_KEPT = 5
_SEQ_MOD = 2**31


@dataclass
class ProducerStateEntry:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))  # (first_seq, last_seq, first_offset, last_offset)

    @property
    def last_seq(self) -> int:
        return self.batches[-1][1] if self.batches else -1


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerStateEntry] = {}

    def check(self, producer_id: int, epoch: int, first_seq: int, count: int) -> tuple[int, int]:
        """(error code, offset of the original batch if a duplicate else -1) for a batch the
        leader is about to append."""
        if producer_id == NO_PRODUCER_ID:
            return NO_ERROR, -1
        entry = self.producers.get(producer_id)
        if entry is None:
            return (NO_ERROR, -1) if first_seq == 0 else (OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
        if epoch < entry.epoch:
            return INVALID_PRODUCER_EPOCH, -1
        if epoch > entry.epoch:
            return (NO_ERROR, -1) if first_seq == 0 else (OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
        last_seq = (first_seq + count - 1) % _SEQ_MOD
        for f, l, first_offset, _ in entry.batches:
            if f == first_seq and l == last_seq:
                return DUPLICATE_SEQUENCE_NUMBER, first_offset
        if first_seq != (entry.last_seq + 1) % _SEQ_MOD:
            return OUT_OF_ORDER_SEQUENCE_NUMBER, -1
        return NO_ERROR, -1

    def update(self, producer_id: int, epoch: int, first_seq: int, first_offset: int, last_offset: int) -> None:
        """Remember an appended batch (leader or follower, or a scan of the log)."""
        if producer_id == NO_PRODUCER_ID or first_seq < 0:
            return
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = self.producers[producer_id] = ProducerStateEntry(epoch)
        last_seq = (first_seq + last_offset - first_offset) % _SEQ_MOD
        entry.batches.append((first_seq, last_seq, first_offset, last_offset))

    def rebuild(self, log) -> None:
        """Derive the state from the log's batch headers (after a restart or truncation)."""
        self.producers.clear()
        for segment in log.segments:
            for _, batch in segment.iter_batches():
                self.update(batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.base_offset, batch.last_offset)
