"""Log compaction for ``cleanup.policy=compact`` topics: Kafka's ``LogCleaner``.

Theory of operation
-------------------
A compacted topic is a changelog: only the latest value of each key matters (the
consumer-groups chapter keeps committed offsets in ``__consumer_offsets`` this way). The
cleaner rewrites old segments so that, for every key, only the record with its highest
offset remains. One pass (``LogCleaner().clean(log)``) does:

1. *Dirty range.* The log is split at the cleaner checkpoint (``cleaner-offset-checkpoint``
   in the log's directory, Kafka's file name): below it lies the *clean* part (cleaned
   before), from it up to the *first uncleanable offset* the *dirty* part (appended since).
   As in Kafka, that offset is the smallest of: the active segment's base offset (the
   active segment is never touched: it is still being written); the base offset of the
   first dirty segment holding a record younger than ``min.compaction.lag.ms`` (when that
   is > 0); the high watermark, when the caller gives it (records above it may still
   be truncated away, so they must not supersede anything yet); and the first unstable
   offset (the first offset of a transaction still open, or closed by a marker at or
   above the high watermark: its outcome is not final, so none of it may be judged yet).
2. *Offset map.* Read the dirty range and note, for each key, its latest offset.
3. *Rewrite.* Walk every segment that begins below the end of the dirty range; keep a
   record unless the map holds a later offset for its key. Records without a key are kept,
   and so is every record at or past the end of the dirty range. A tombstone (value None)
   that is the latest for its key is kept for ``delete.retention.ms`` after its timestamp,
   so that consumers have time to see the delete, then removed.
   *Transactions* (KIP-98; Kafka's ``CleanedTransactionMetadata``): a scan of the batch
   headers from the log start finds every transaction (producer id, first offset, marker)
   as ``ProducerStateManager`` does. Batches of an *aborted* transaction are removed whole
   (no reader may ever see them: read_committed ones drop them, read_uncommitted ones
   should have had ``delete.retention.ms`` to read them), except the last batch of its
   producer, kept by this rule so that a rebuilt producer state still knows its sequence
   (Kafka keeps that batch's header, empty; here compaction may still remove its records,
   as it may any producer's last batch). A *marker* (control batch) is kept while any batch of the
   transaction it ends is still in the log, so a read_committed reader always meets the
   marker above an aborted transaction's data it can read; once none is (removed by an
   earlier pass, or superseded by compaction), the marker goes too, ``delete.retention.ms``
   after its timestamp. Never the other way round: no pass removes a marker and leaves
   data of its transaction below it. The broker drops removed abort markers from its
   aborted-transaction index (``CleanerStats.removed_markers``).
4. *Swap.* A changed segment is written to ``<base>.log.cleaned`` and fsynced, renamed to
   ``<base>.log.swap`` (the commit point), then its old indexes are deleted and the swap file
   replaces ``<base>.log``; the segment is reopened and its indexes rebuilt from the new
   file. A crash leaves either the old segment plus a ``.cleaned`` file (deleted on open) or
   a ``.swap`` file (the swap is finished on open, by ``log_loader.py``), never a lost record.
5. *Checkpoint* the end of the dirty range, so the next pass starts from there.

Offsets never change. A batch whose records all survive keeps its bytes; a batch that
loses some is re-encoded with the same baseOffset, lastOffsetDelta, producer id/epoch/base
sequence, partitionLeaderEpoch, codec and timestamps, and each record keeps its offset
delta. So the log has gaps in its offsets, which reads and truncation handle (see
``log.py``: both go to the first batch at or after the wanted offset). A batch with no
record left is dropped; a segment with no batch left is deleted, except the first one,
which stays (empty) so the log start offset does not move.

Simplifications (vs Kafka): the offset map is a dict, not a fixed-size hash table; every
old segment is rewritten alone (Kafka groups small ones); tombstone age is the record's
timestamp (Kafka uses the segment's modification time), and so is a marker's (Kafka,
since KIP-534, counts ``delete.retention.ms`` from the pass that found its transaction's
data gone); the aborted transactions come from a scan of batch headers (Kafka reads its
``.txnindex``). Kafka's cleaner threads wake up every
``log.cleaner.backoff.ms``; here ``LogManager.clean_logs`` makes one pass over every
compacted log that has a dirty range, and the broker calls it on a timer. Like the rest of
``storage/``, this module is allowed to touch log files; nothing outside ``storage/`` is.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from minikafka.errors import IllegalArgumentError
from minikafka.records import Record, RecordBatch
from minikafka.storage.checkpoint import CLEANER_CHECKPOINT_FILE
from minikafka.platform import fsync_dir
from minikafka.storage.log import Log
from minikafka.storage.log_loader import CLEANED_SUFFIX, SWAP_SUFFIX, complete_swap
from minikafka.storage.segment import LogSegment

logger = logging.getLogger("minikafka.storage.cleaner")

__all__ = ["CLEANER_CHECKPOINT_FILE", "CleanerStats", "LogCleaner", "is_compacted", "read_cleaner_checkpoint"]


@dataclass
class CleanerStats:
    """What one pass did. Bytes are those of the segments before the active one."""

    first_dirty_offset: int = 0  # where the dirty range started
    end_offset: int = 0  # where it ended: the new checkpoint
    keys: int = 0  # distinct keys in the offset map
    bytes_before: int = 0
    bytes_after: int = 0
    records_removed: int = 0  # all removed records, tombstones included
    tombstones_removed: int = 0
    batches_removed: int = 0
    segments_cleaned: int = 0  # segments rewritten (an unchanged segment is left alone)
    segments_deleted: int = 0  # segments left empty, and so deleted
    aborted_records_removed: int = 0  # records of aborted transactions (also in records_removed)
    markers_removed: int = 0  # transaction markers whose transaction has no batch left
    removed_markers: list = field(default_factory=list)  # (producer id, offset) of each one removed


# A control record's key: version, type (0 = ABORT, 1 = COMMIT). Read here, not with
# ``broker.transaction_marker``: storage sits below the broker layer and may not import it.
_CONTROL_KEY = struct.Struct(">hh")
_ABORT = 0


@dataclass
class _Transactions:
    """What a scan of the batch headers says about a log's transactions."""

    aborted: dict = field(default_factory=dict)  # producer id -> [(first offset, marker offset)]
    markers_with_data: set = field(default_factory=set)  # offsets of markers whose transaction has a batch
    last_batch: dict = field(default_factory=dict)  # producer id -> base offset of its last data batch
    first_unstable: int | None = None

    def is_aborted(self, batch: RecordBatch) -> bool:
        return any(first <= batch.base_offset < marker
                   for first, marker in self.aborted.get(batch.producer_id, ()))


def _scan_transactions(segments: list[LogSegment], high_watermark: int) -> _Transactions:
    found = _Transactions()
    ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
    for segment in segments:
        for _, batch in segment.iter_batches():
            pid = batch.producer_id
            if pid < 0:
                continue
            if not batch.is_control_batch:
                if batch.base_sequence >= 0:
                    found.last_batch[pid] = batch.base_offset
                if batch.is_transactional:
                    ongoing.setdefault(pid, batch.base_offset)
                continue
            first = ongoing.pop(pid, None)
            if first is None:
                continue  # its transaction's data is gone (or it wrote nothing here)
            found.markers_with_data.add(batch.base_offset)
            if batch.base_offset >= high_watermark:
                ongoing[pid] = first  # closed, but not for good yet: still unstable
                continue
            (record,) = batch.records()
            if record.key is not None and len(record.key) >= _CONTROL_KEY.size \
                    and _CONTROL_KEY.unpack_from(record.key)[1] == _ABORT:
                found.aborted.setdefault(pid, []).append((first, batch.base_offset))
    found.first_unstable = min(ongoing.values()) if ongoing else None
    return found


def read_cleaner_checkpoint(log: Log) -> int:
    return log.checkpoints.read(CLEANER_CHECKPOINT_FILE)


def is_compacted(log: Log) -> bool:
    """Whether ``log``'s cleanup.policy includes ``compact`` (``compact`` or ``compact,delete``)."""
    return "compact" in log.config.cleanup_policy.split(",")


class LogCleaner:
    """Compacts one log per ``clean`` call, synchronously (Kafka runs cleaner threads)."""

    def dirty_range(self, log: Log, *, now_ms: int | None = None, high_watermark: int | None = None) -> tuple[int, int]:
        """(first dirty offset, first uncleanable offset) of ``log``: what ``clean`` would
        compact now (step 1 of the module docstring); empty when the two are equal. Cheap:
        one small file read and, with ``min.compaction.lag.ms``, a walk of segment headers
        already in memory."""
        now = log.clock() if now_ms is None else now_ms
        end = log.active_segment.base_offset
        checkpoint = read_cleaner_checkpoint(log)
        # Retention or truncation may have moved the log under the checkpoint: start over.
        if checkpoint > log.log_end_offset:
            checkpoint = log.log_start_offset
        first_dirty = max(checkpoint, log.log_start_offset)
        if high_watermark is not None:
            end = min(end, high_watermark)
        lag = log.config.min_compaction_lag_ms
        if lag > 0:
            for segment in log.segments[:-1]:
                if segment.base_offset >= end:
                    break
                # Only dirty segments (those reaching past first_dirty) can end the range.
                if segment.next_offset > first_dirty and segment.size and segment.largest_timestamp > now - lag:
                    end = min(end, segment.base_offset)
                    break
        return first_dirty, max(first_dirty, end)

    def clean(
        self,
        log: Log,
        *,
        now_ms: int | None = None,
        delete_retention_ms: int | None = None,
        high_watermark: int | None = None,
    ) -> CleanerStats:
        """One cleaning pass over ``log`` (see the module docstring). ``now_ms`` defaults
        to the log's clock, ``delete_retention_ms`` to the log's ``delete.retention.ms``;
        ``high_watermark`` (none by default) is where the dirty range must end at the latest."""
        if not is_compacted(log):
            raise IllegalArgumentError(
                f"{log.name}: cleanup.policy is {log.config.cleanup_policy!r}; only a "
                f"log with cleanup.policy=compact can be cleaned"
            )
        if high_watermark is not None and (isinstance(high_watermark, bool) or not isinstance(high_watermark, int)):
            raise IllegalArgumentError(f"high_watermark must be an integer offset, not {high_watermark!r}")
        if delete_retention_ms is None:
            delete_retention_ms = log.config.delete_retention_ms
        if isinstance(delete_retention_ms, bool) or not isinstance(delete_retention_ms, int) or delete_retention_ms < 0:
            raise IllegalArgumentError(f"delete.retention.ms must be an integer >= 0, not {delete_retention_ms!r}")
        now = log.clock() if now_ms is None else now_ms
        if isinstance(now, bool) or not isinstance(now, int):
            raise IllegalArgumentError(f"now_ms must be an integer (milliseconds), not {now!r}")

        first_dirty, end = self.dirty_range(log, now_ms=now, high_watermark=high_watermark)
        txns = _scan_transactions(log.segments, log.log_end_offset if high_watermark is None else high_watermark)
        if txns.first_unstable is not None:
            end = max(first_dirty, min(end, txns.first_unstable))
        old = log.segments[:-1]
        stats = CleanerStats(first_dirty_offset=first_dirty, end_offset=end)
        stats.bytes_before = stats.bytes_after = sum(s.size for s in old)
        if first_dirty >= end:
            return stats  # nothing cleanable appended since the last pass: nothing to do

        offset_map = self._build_offset_map(old, first_dirty, end, txns)
        stats.keys = len(offset_map)
        for segment in [s for s in old if s.base_offset < end]:
            self._clean_segment(log, segment, offset_map, end, now, delete_retention_ms, stats, txns)
        stats.bytes_after = sum(s.size for s in log.segments[:-1])
        # Only now: a crash before this point just means the next pass redoes the work.
        log.checkpoints.write(CLEANER_CHECKPOINT_FILE, end)
        logger.info(
            "%s: cleaned [%d, %d): %d -> %d bytes, %d records removed (%d tombstones)",
            log.name, first_dirty, end, stats.bytes_before, stats.bytes_after,
            stats.records_removed, stats.tombstones_removed,
        )
        return stats

    # --- the offset map ---------------------------------------------------------------------

    @staticmethod
    def _build_offset_map(segments: list[LogSegment], start: int, end: int,
                          txns: _Transactions | None = None) -> dict[bytes, int]:
        offset_map: dict[bytes, int] = {}
        for segment in segments:
            if segment.size == 0 or segment.next_offset <= start:
                continue
            for _, batch in segment.iter_batches():
                if batch.last_offset < start or batch.is_control_batch:
                    continue
                if txns is not None and batch.is_transactional and txns.is_aborted(batch):
                    continue  # an aborted value never happened: it supersedes nothing
                for record in batch.records():
                    # Offsets increase through the log, so the last one seen wins.
                    if record.key is not None and start <= record.offset < end:
                        offset_map[record.key] = record.offset
        return offset_map

    # --- rewriting one segment -------------------------------------------------------------

    def _clean_segment(
        self,
        log: Log,
        segment: LogSegment,
        offset_map: dict[bytes, int],
        end: int,
        now: int,
        delete_retention_ms: int,
        stats: CleanerStats,
        txns: _Transactions,
    ) -> None:
        pieces: list[bytes] = []
        changed = False
        for _, batch in segment.iter_batches():
            if batch.is_control_batch:
                # A marker goes only once no batch of its transaction is left (found by the
                # scan before this pass removed anything) and delete.retention.ms has passed.
                if batch.base_offset < end and batch.base_offset not in txns.markers_with_data \
                        and now - batch.max_timestamp >= delete_retention_ms:
                    stats.markers_removed += 1
                    stats.batches_removed += 1
                    stats.removed_markers.append((batch.producer_id, batch.base_offset))
                    changed = True
                else:
                    pieces.append(bytes(batch))
                continue
            if batch.is_transactional and batch.last_offset < end and txns.is_aborted(batch) \
                    and txns.last_batch.get(batch.producer_id) != batch.base_offset:
                n = batch.records_count
                stats.records_removed += n
                stats.aborted_records_removed += n
                stats.batches_removed += 1
                changed = True
                continue
            records = batch.records()
            kept: list[Record] = []
            for record in records:
                if record.offset >= end or self.should_retain_record(
                        record, batch, segment, offset_map, now, delete_retention_ms):
                    kept.append(record)
                else:
                    stats.records_removed += 1
                    stats.tombstones_removed += record.value is None
            if len(kept) == len(records):
                pieces.append(bytes(batch))  # untouched: keep the producer's bytes as they are
            elif kept:
                pieces.append(bytes(self._rebuild(batch, kept)))
                changed = True
            else:
                stats.batches_removed += 1
                changed = True
        if not changed:
            return
        i = log.segments.index(segment)
        if not pieces and i > 0:
            # Nothing left: the segment goes. Its offsets now read as a gap in the previous one.
            log._delete_segment(segment, "log cleaner: no record left")
            stats.segments_deleted += 1
            return
        self._swap(log, i, b"".join(pieces))
        stats.segments_cleaned += 1

    @staticmethod
    def should_retain_record(
        record: Record,
        batch: RecordBatch,
        segment: LogSegment,
        offset_map: dict[bytes, int],
        now: int,
        delete_retention_ms: int,
    ) -> bool:
        """Whether a record of a cleaned segment stays (Kafka's ``Cleaner.shouldRetainRecord``);
        ``offset_map`` holds the latest offset of each key in the dirty range."""
        if record.key is None:
            return True  # nothing to compact it by
        latest = offset_map.get(record.key)
        if latest is not None and latest > record.offset:
            return False  # a later record for the key supersedes this one
        if record.value is None:
            # The latest record is a delete: keep it long enough for consumers to see it.
            # A record without a timestamp is judged by its batch's, else its segment's.
            ts = record.timestamp if record.timestamp is not None and record.timestamp >= 0 else -1
            if ts < 0:
                ts = batch.max_timestamp if batch.max_timestamp >= 0 else segment.largest_timestamp
            return now - ts < delete_retention_ms
        return True

    @staticmethod
    def _rebuild(batch: RecordBatch, kept: list[Record]) -> RecordBatch:
        # Same header as the original, fewer records: offsets and producer state intact.
        return RecordBatch.build(
            kept,
            base_offset=batch.base_offset,
            compression=batch.compression,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            is_transactional=batch.is_transactional,
            partition_leader_epoch=batch.partition_leader_epoch,
            use_record_offsets=True,
            last_offset_delta=batch.last_offset_delta,
            base_timestamp=batch.base_timestamp,
            max_timestamp=batch.max_timestamp,
            timestamp_type=batch.timestamp_type,
        )

    @staticmethod
    def _swap(log: Log, i: int, data: bytes) -> None:
        old = log.segments[i]
        log_path: Path = old.log_path
        cleaned = log_path.with_name(log_path.name + CLEANED_SUFFIX)
        swap = log_path.with_name(log_path.name + SWAP_SUFFIX)
        # Whole and durable before it may become the segment; if the disk refuses (full,
        # failing), the old segment stays as it is and the pass fails, to be tried again.
        log.disk.write_file(cleaned, data)
        os.replace(cleaned, swap)  # the commit point: from here on recovery finishes the swap
        fsync_dir(log.dir)
        old.close()
        complete_swap(log.dir, old.base_offset)
        segment = log._new_segment_object(old.base_offset)
        segment.created_ms = old.created_ms  # the data is as old as it was
        segment.load()  # indexes are gone with the old file: rebuilt from batch headers
        segment.flush()
        log.segments[i] = segment
