"""Commit and abort markers: Kafka's control batches (``EndTransactionMarker``).

Theory of operation
-------------------
A transaction ends, on every partition it wrote to, with one *control batch*: a v2 batch
with the transactional and control bits set, the transaction's producer id and epoch, no
sequence, and one record whose key says what ended (version 0, type 0 = ABORT, 1 = COMMIT)
and whose value carries the coordinator epoch that decided it (version 0, int32). Only the
transaction coordinator has such batches written (through WriteTxnMarkers, with a
coordinator origin); a client's Produce never may. Consumers never see a control record:
read_uncommitted ones skip them, read_committed ones use them to end aborted transactions.

Never: I/O, a clock (the timestamp is given).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from minikafka.records import Record, RecordBatch

ABORT, COMMIT = 0, 1
_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch


@dataclass(frozen=True)
class TransactionMarker:
    committed: bool
    coordinator_epoch: int

    def to_batch(self, producer_id: int, producer_epoch: int, timestamp: int) -> bytes:
        record = Record(_KEY.pack(0, COMMIT if self.committed else ABORT), _VALUE.pack(0, self.coordinator_epoch),
                        timestamp=timestamp)
        return bytes(RecordBatch.build([record], producer_id=producer_id, producer_epoch=producer_epoch,
                                       is_transactional=True, is_control_batch=True))

    @classmethod
    def of(cls, batch: RecordBatch) -> "TransactionMarker":
        """The marker a control batch holds (``ValueError`` if it is not one)."""
        if not batch.is_control_batch:
            raise ValueError(f"batch at offset {batch.base_offset} is not a control batch")
        (record,) = batch.records()
        if record.key is None or len(record.key) < _KEY.size:
            raise ValueError(f"control batch at offset {batch.base_offset} has no marker key")
        _, kind = _KEY.unpack_from(record.key)
        if kind not in (ABORT, COMMIT):
            raise ValueError(f"control batch at offset {batch.base_offset}: unknown control type {kind}")
        epoch = _VALUE.unpack_from(record.value)[1] if record.value and len(record.value) >= _VALUE.size else -1
        return cls(kind == COMMIT, epoch)
