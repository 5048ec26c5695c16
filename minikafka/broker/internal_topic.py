"""Replaying an internal topic's partition: how a coordinator gets its state back.

The group coordinator (``__consumer_offsets``) and the transaction coordinator
(``__transaction_state``) keep their state as records of a compacted topic: the latest
record of a key is the state of that key. A broker that becomes the leader of one of those
partitions reads it from the log start to the log end and applies each record in order
(Kafka's ``CoordinatorLoaderImpl``). ``replay`` is that loop, once for both: the record's
meaning stays with each coordinator.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from minikafka.records import MemoryRecords
from minikafka.rules import RuleError

logger = logging.getLogger("minikafka.broker")  # the coordinators' logger

READ_BYTES = 1024 * 1024  # one read of the log: Kafka's loader reads in buffers of this order


def replay(log: Any, name: str, on_record: Callable[[Any, Any], None],
           on_control: Callable[[Any], None] | None = None) -> int:
    """Apply every keyed record of ``log`` (``name``: "topic-partition", for the log lines),
    in offset order: ``on_record(record, batch)``; a control batch (a transaction marker)
    goes to ``on_control(batch)`` instead, once. A record ``on_record`` cannot apply is
    skipped (one warning), never a failure loop over one bad record; a student's rule that
    broke (``RuleError``) stops the load. Returns the number of records skipped."""
    offset, end = log.log_start_offset, log.log_end_offset
    skipped = 0
    while offset < end:
        batches = list(MemoryRecords(bytes(log.read(offset, READ_BYTES))).batches())
        if not batches:
            break
        for batch in batches:
            if batch.is_control_batch and on_control is not None:
                if batch.base_offset >= offset:
                    on_control(batch)
                offset = max(offset, batch.last_offset + 1)
                continue
            for record in batch.records():
                if record.offset < offset or record.key is None:
                    continue
                try:
                    on_record(record, batch)
                except RuleError:
                    raise  # a student's rule broke: the cluster stops (minikafka.rules)
                except Exception as e:
                    skipped += 1
                    if skipped == 1:
                        logger.warning("%s: skipped the unreadable record at offset %d (%s: %s)",
                                       name, record.offset, type(e).__name__, e)
            offset = max(offset, batch.last_offset + 1)
    return skipped
