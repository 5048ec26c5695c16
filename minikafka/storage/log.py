"""A partition's log: an ordered list of segments, Kafka's ``UnifiedLog``.

Theory of operation
-------------------
The log is append-only. Each append validates the incoming batches (sizes, magic, CRC),
gives them the next offsets by patching ``baseOffset`` (and ``partitionLeaderEpoch``)
in place, and writes them to the *active* (last) segment. Bytes are never re-encoded.
(What a client sends is also decoded record by record before it gets here, by the
broker's ``LogValidator``; replicated and coordinator appends are not.)

The rules a student writes in notebook 01 (``minikafka.rules``, called here through
``self.rules``, Kafka's own by default) decide; this module applies their answers:

- Roll (``rules.roll_reason``, in ``_maybe_roll``): a new segment starts, named by the next
  offset, when the active one would grow past ``segment.bytes``, when its records span more
  than ``segment.ms``, or before relative offsets would overflow the 4-byte index field.
- Retention (``rules.segments_to_delete``, in ``delete_old_segments``) deletes whole, old
  segments: those whose newest record is older than ``retention.ms``, then the oldest ones
  while the log is over ``retention.bytes``. The log start offset moves up to the first
  remaining segment. Only a log whose ``cleanup.policy`` includes ``delete`` has retention;
  a ``compact`` one keeps every segment (the log cleaner, ``cleaner.py``, keeps it small).
- Read (``rules.index_lookup``, in each segment's offset index): whole batches from the one
  holding the offset asked for.
- Durability: appends reach the OS, ``flush()`` forces them to disk and moves the
  *recovery point* (the offset below which everything is known to be on disk), which is
  checkpointed in the log's directory.
- Disk errors: an append that fails (disk full, I/O error) writes nothing: the segment is
  cut back to where it was (``LogSegment.append``) and ``KafkaStorageError`` is raised, so
  nothing is acknowledged that is not wholly written, and the next append that finds
  space succeeds. A failed *fsync* is different: the kernel may have dropped what it could
  not write, so the log goes ``offline`` and refuses appends until the broker restarts
  (and recovery re-checks everything past the recovery point, which did not move).

The hardening lives beside this file, each part in a module of its own:
``log_config.py`` (``LogConfig``, the settings, checked), ``checkpoint.py`` (the checkpoint
files, and what a refusing disk does to them), ``log_loader.py`` (``LogLoader``: opening the
log, recovery after a crash from the recovery point on, the cleaner's interrupted swap),
``file_records.py`` (a read left in its file, for sendfile).

Invariants: offsets increase strictly through the log; log start <= log end; the active
segment is the only one written to. Offsets need not be contiguous: the cleaner removes
records, so a compacted log has gaps. A read from an offset in a gap starts at the next
batch (in a later segment if the gap runs to the end of one), and a truncation to an offset
in a gap cuts at the next batch and puts the log end at that offset, as Kafka does. This
module, the three above, ``cleaner.py`` and ``segment.py``/``index.py`` are the only code
that touches log files. Time comes from the injected ``clock`` (milliseconds), so the
simulated world can drive it.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import time
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

from minikafka.errors import (
    CorruptRecordError,
    IllegalArgumentError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    MessageSizeTooLargeError,
)
from minikafka.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP  # the protocol's; kept in __all__
from minikafka.records import (
    ATTRIBUTES_AT,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MemoryRecords,
    RecordBatch,
    as_memory_records,
    crc32c,
)
from minikafka.rules import REFERENCE, Rules
from minikafka.storage.checkpoint import (
    CLEANER_CHECKPOINT_FILE,
    LOG_START_FILE,
    RECOVERY_POINT_FILE,
    LogCheckpoints,
)
from minikafka.storage.disk import OS_DISK, Disk
from minikafka.storage.file_records import FileRecords
from minikafka.storage.leader_epoch import LeaderEpochFileCache
from minikafka.storage.log_config import DAY_MS, LogConfig
from minikafka.storage.log_loader import LogLoader, RecoveryReport
from minikafka.storage.segment import LogSegment

_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch: outside the CRC

logger = logging.getLogger("minikafka.storage")

# ListOffsets' special timestamps (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP) are the protocol's: minikafka.messages.


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class ActiveSegment(NamedTuple):
    """What the roll rule sees of the active segment (notebook 01's ``Segment``)."""

    base_offset: int
    size: int
    first_timestamp: int  # the max timestamp of its first batch


class IncomingBatch(NamedTuple):
    """What the roll rule sees of the batches of one append (notebook 01's ``Batch``)."""

    size: int
    max_timestamp: int
    last_offset: int


class SegmentInfo(NamedTuple):
    """What the retention rule sees of a segment (notebook 01's ``SegmentInfo``)."""

    base_offset: int
    size: int
    newest_timestamp: int  # what retention.ms judges it by


# The debug line of a roll, per reason (notebook 01 listens to it).
_ROLL_DETAIL = {
    "segment.bytes": lambda seg, size, config: f"segment.bytes: {seg.size} + {size} bytes > {config.segment_bytes}",
    "segment.ms": lambda seg, size, config: f"segment.ms: the segment spans more than {config.segment_ms} ms",
    "offset overflow": lambda seg, size, config: "relative offsets would overflow the 4-byte index field",
}


class LogAppendInfo(NamedTuple):
    """What an append did (Kafka's LogAppendInfo); a tuple because the hot path makes one."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    num_records: int
    size_in_bytes: int


class Log:
    """One partition's log in directory ``dir`` (e.g. ``/data/trucks_gps-3``)."""

    def __init__(
        self,
        dir: Path | str,
        config: LogConfig | Mapping[str, Any] | None = None,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        disk: Disk = OS_DISK,
        rules: Rules = REFERENCE,
    ) -> None:
        self.dir = Path(dir)
        self.rules = rules  # the roll, retention and (through each segment) index-lookup rules
        self.name = self.dir.name  # (in every read's error context: worked out once)
        self.config = config if isinstance(config, LogConfig) else LogConfig.of(config)
        self.clock = clock
        self.disk = disk
        self.append_failing: str | None = None  # why the last append failed (logged once), until one succeeds
        self.offline: str | None = None  # set by a failed fsync: the log refuses appends from then on
        self.dir.mkdir(parents=True, exist_ok=True)
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []  # segment base offsets, for bisect
        self.checkpoints = LogCheckpoints(self.dir, self.name, disk)  # see checkpoint.py
        self.recovery_point = self.checkpoints.read(RECOVERY_POINT_FILE)
        self._checkpointed: int | None = None  # the recovery point this object last wrote
        self.log_start_offset = self.checkpoints.read(LOG_START_FILE)
        self.leader_epoch_cache = LeaderEpochFileCache(self.dir, disk=disk)
        self.last_recovery = LogLoader(self).load()  # recovery on open: log_loader.py

    # --- segments (opening the log and recovery: log_loader.py) --------------------------------

    def _new_segment_object(self, base: int) -> LogSegment:
        # As Kafka, a segment's creation time is when this process made or opened it.
        return LogSegment(
            self.dir, base, index_interval_bytes=self.config.index_interval_bytes, created_ms=self.clock(),
            disk=self.disk, rules=self.rules,
        )

    def _add_segment(self, segment: LogSegment) -> None:
        self.segments.append(segment)
        self._bases.append(segment.base_offset)

    def _replace_with_empty(self, base: int) -> None:
        for segment in self.segments:
            segment.delete()
        self.segments.clear()
        self._bases.clear()
        self._add_segment(self._new_segment_object(base))

    # --- offsets ---------------------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset  # (the active segment's; asked on every fetch)

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def _segment_for(self, offset: int) -> int:
        """Index of the segment whose range holds ``offset`` (the last base <= offset)."""
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    # --- append ------------------------------------------------------------------------------------

    def append(
        self,
        records: MemoryRecords | RecordBatch | bytes | list,
        *,
        leader_epoch: int | None = None,
        assign_offsets: bool = True,
    ) -> LogAppendInfo:
        """Append one or more batches and return the offsets they got.

        As the leader (``assign_offsets=True``) the log numbers the batches from its end
        offset. As a follower (``False``) it keeps the leader's offsets, which must not go
        backwards. ``records`` may also be a list of ``Record`` s, values or (key, value) pairs,
        which are built into one uncompressed batch first.

        This is the broker's hot path, so it touches each byte once (the CRC) and copies
        none: the caller's bytes go to the file as they are, after a patched 16-byte prefix
        (baseOffset, batchLength, partitionLeaderEpoch) per batch.
        """
        if self.offline is not None:
            raise KafkaStorageError(f"{self.name} is offline: {self.offline}")
        data = records if isinstance(records, (bytes, bytearray)) else bytes(as_memory_records(records))
        view = memoryview(data)
        total = len(view)
        if not total:
            raise IllegalArgumentError("nothing to append: the records are empty")
        max_bytes = self.config.max_message_bytes
        pieces: list[bytes | memoryview] = []
        batches: list[tuple[int, int, int]] = []  # (size, last offset, max timestamp)
        next_offset = first_offset = self.segments[-1].next_offset
        max_ts, offset_of_max_ts, num_records = -1, -1, 0
        latest_epoch = self.leader_epoch_cache.latest_epoch
        new_epochs: list[tuple[int, int]] = []  # noted only once the append is written
        position = 0
        while position < total:
            if total - position < HEADER_SIZE:
                self._refuse(view, position)
            base, length, epoch, magic, crc, _, last_delta, _, ts, _, _, _, count = HEADER.unpack_from(view, position)
            end = position + LOG_OVERHEAD + length
            if magic != MAGIC or end > total or length < HEADER_SIZE - LOG_OVERHEAD:
                self._refuse(view, position)
            if crc32c(view[position + ATTRIBUTES_AT : end]) != crc:
                self._refuse(view, position)
            size = end - position
            if size > max_bytes:
                raise MessageSizeTooLargeError(
                    f"appended records at byte {position}: batch of {size} bytes is larger than "
                    f"max.message.bytes ({max_bytes})"
                )
            if assign_offsets:
                if count != last_delta + 1:
                    raise CorruptRecordError(
                        f"appended records at byte {position}: recordsCount {count} disagrees "
                        f"with lastOffsetDelta {last_delta}"
                    )
                base = next_offset
            elif base < next_offset:
                raise IllegalArgumentError(
                    f"appended records at byte {position}: follower append at offset {base} is "
                    f"below the log end offset {next_offset}"
                )
            elif not batches:
                first_offset = base
            if leader_epoch is not None:
                epoch = leader_epoch
            if epoch > latest_epoch:
                new_epochs.append((epoch, base))
                latest_epoch = epoch
            pieces.append(_PREFIX.pack(base, length, epoch))
            pieces.append(view[position + _PREFIX.size : end])
            last = base + last_delta
            if ts > max_ts:
                max_ts, offset_of_max_ts = ts, last
            batches.append((size, last, ts))
            num_records += count
            next_offset = last + 1
            position = end
        try:
            self._maybe_roll(total, batches[0][2], next_offset - 1, first_offset)
            self.segments[-1].append(pieces, batches)
        except (KafkaStorageError, OSError) as e:
            # One line when appends start failing, one when they work again: a full disk
            # fails every produce until space returns, and must not flood the log.
            if self.append_failing is None:
                logger.error("%s: appends are failing, nothing was written: %s", self.name, e)
            self.append_failing = str(e)
            if isinstance(e, KafkaStorageError):
                raise
            raise KafkaStorageError(f"{self.name}: rolling a new segment failed: {e}") from None
        if self.append_failing is not None:
            logger.warning("%s: appends succeed again (the last failure: %s)", self.name, self.append_failing)
            self.append_failing = None
        for epoch, start in new_epochs:
            self.leader_epoch_cache.assign(epoch, start)
        return LogAppendInfo(first_offset, next_offset - 1, max_ts, offset_of_max_ts, num_records, total)

    def _refuse(self, view: memoryview, position: int) -> None:
        """Raise the precise CorruptRecordError for the batch at ``position`` (a cold path)."""
        where = f"appended records at byte {position}"
        RecordBatch(view[position:], where=where).validate()
        raise CorruptRecordError(f"{where}: malformed batch")  # not reached: validate() raised

    def _maybe_roll(self, size: int, max_timestamp: int, last_offset: int, first_offset: int) -> None:
        segment = self.segments[-1]
        # Whether to roll is a rule (``rules.roll_reason``). As Kafka, segment.ms is judged by
        # record time when records carry timestamps, else by the clock since the segment was
        # created: the rule is shown that clock's two readings in place of the two timestamps.
        first_ts = segment.first_batch_max_timestamp
        if not (first_ts is not None and first_ts >= 0 and max_timestamp >= 0):
            first_ts, max_timestamp = segment.created_ms, self.clock()
        reason = self.rules.roll_reason(ActiveSegment(segment.base_offset, segment.size, first_ts),
                                        IncomingBatch(size, max_timestamp, last_offset), self.config)
        if reason is None:
            return
        logger.debug("%s: rolling at offset %d (%s)", self.name, first_offset, _ROLL_DETAIL[reason](segment, size, self.config))
        self.roll(first_offset)

    def roll(self, base_offset: int | None = None) -> LogSegment:
        """Start a new, empty active segment at ``base_offset`` (default: the log end)."""
        base = max(self.log_end_offset, base_offset or 0)
        if self.active_segment.size == 0:
            return self.active_segment
        self.active_segment.on_become_inactive()
        segment = self._new_segment_object(base)
        segment.next_offset = base
        self._add_segment(segment)
        return segment

    # --- read ----------------------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int = 1024 * 1024,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> MemoryRecords:
        """Whole batches starting with the one that holds ``offset``.

        At most ``max_bytes`` (but one batch at least when ``min_one_message``), and nothing at
        or beyond ``max_offset`` (a broker passes the high watermark for consumers). The
        first batch may begin before ``offset``: clients skip the records below it.
        """
        found = self._span(offset, max_bytes, max_offset, min_one_message)
        if found is None:
            return MemoryRecords(b"", where=self.name)
        segment, (start, end) = found
        return MemoryRecords(segment.read_bytes(start, end - start), where=f"{self.name}/{segment.file_name}")

    def read_bytes(
        self,
        offset: int,
        max_bytes: int = 1024 * 1024,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> bytes:
        """What ``read`` returns, as plain bytes: what a broker sends on without looking
        inside (a fetch answer), so no ``MemoryRecords`` is made for it."""
        found = self._span(offset, max_bytes, max_offset, min_one_message)
        if found is None:
            return b""
        segment, (start, end) = found
        return segment.read_bytes(start, end - start)

    def read_file_records(
        self,
        offset: int,
        max_bytes: int = 1024 * 1024,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> FileRecords | None:
        """What ``read`` would return, left in its segment file (see file_records.py): a
        broker on the wire sends large answers so. None where ``read`` returns nothing."""
        found = self._span(offset, max_bytes, max_offset, min_one_message)
        return None if found is None else found[0].file_records(*found[1])

    def _span(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one_message: bool
    ) -> tuple[LogSegment, tuple[int, int]] | None:
        end = self.log_end_offset
        if offset < self.log_start_offset or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.name}: the log holds "
                f"[{self.log_start_offset}, {end})"
            )
        limit = end if max_offset is None else min(max_offset, end)
        if offset >= limit:
            return None
        i = self._segment_for(offset)
        while i < len(self.segments):
            segment = self.segments[i]
            max_position = None
            if limit < segment.next_offset:  # stop before the batch holding ``limit``
                found = segment.translate_offset(limit)
                max_position = found[0] if found else None
            span = segment.span(offset, max_bytes, max_position, min_one_message)
            # Nothing can mean two things. The segment holds no batch at or after ``offset``
            # (it lies in a gap the cleaner left at the segment's end): the next segment has
            # the records that follow, so go on. Or the first batch did not fit (``limit``,
            # or ``max_bytes`` without ``min_one_message``): then the answer is empty, as
            # in Kafka; a later segment must not be served past a batch left unread.
            if span is not None:
                return segment, span
            if max_position is not None or segment.translate_offset(offset) is not None:
                return None
            i += 1
        return None

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record at or after ``timestamp``, as ListOffsets
        answers; ``EARLIEST_TIMESTAMP``/``LATEST_TIMESTAMP`` give the log's ends. None if
        every record is older."""
        if timestamp == EARLIEST_TIMESTAMP:
            return (-1, self.log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            return (-1, self.log_end_offset)
        if timestamp < 0:
            raise IllegalArgumentError(f"timestamp must be >= 0 or -1/-2, not {timestamp}")
        for segment in self.segments:
            if segment.size and segment.max_timestamp >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp)
                if found and found[1] >= self.log_start_offset:
                    return found
        return None

    # --- truncation, retention -------------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Cut the log so that its end is ``offset`` (a follower does this after a leader
        change). The cut happens at a batch boundary: a batch that straddles ``offset`` goes
        whole, so the end may land below ``offset``. If ``offset`` lies in a gap the cleaner
        left, the cut is at the first batch after it and the end is ``offset`` itself.
        Returns whether anything was cut."""
        if offset < 0:
            raise IllegalArgumentError(f"cannot truncate to a negative offset ({offset})")
        if offset >= self.log_end_offset:
            # Nothing to cut, but an epoch that starts at the end has no records: forget it,
            # or a deposed leader would keep asking its new leader about it (as Kafka does).
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            return False
        if offset <= self.log_start_offset or offset <= self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        while len(self.segments) > 1 and self.active_segment.base_offset >= offset:
            self.segments.pop().delete()
            self._bases.pop()
        active = self.active_segment
        found = active.translate_offset(offset)
        active.truncate_to(offset)
        if found is None or found[1] > offset:
            # ``offset`` is in a gap (compacted away): no batch straddles it, so the end is
            # exactly ``offset``, as in Kafka, and the next append gets ``offset``. As in
            # Kafka, that end lives in memory only: reopened before the next append, the log
            # ends after its last batch again, which is as correct (the gap holds no record).
            active.next_offset = offset
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.checkpoints.write_or_defer(RECOVERY_POINT_FILE, self.recovery_point)
        self.checkpoints.pull_back(CLEANER_CHECKPOINT_FILE, self.log_end_offset)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything and start an empty log at ``offset``."""
        self._replace_with_empty(offset)
        self.leader_epoch_cache.clear()
        self.log_start_offset = self.recovery_point = offset
        self.checkpoints.write_or_defer(RECOVERY_POINT_FILE, offset)
        self.checkpoints.write_or_defer(LOG_START_FILE, offset)
        self.checkpoints.pull_back(CLEANER_CHECKPOINT_FILE, self.log_end_offset)

    def delete_old_segments(self, now_ms: int | None = None, *, high_watermark: int | None = None) -> list[tuple[int, str]]:
        """Apply ``retention.ms`` and then ``retention.bytes``; return (base offset, reason)
        for each segment deleted. Only whole segments go, and none at or past the high
        watermark (default: the log end). A log whose ``cleanup.policy`` lacks ``delete``
        has no retention: nothing goes."""
        if "delete" not in self.config.cleanup_policy.split(","):
            return []  # compact only: old values of a key live until the cleaner supersedes them
        now = self.clock() if now_ms is None else now_ms
        hw = self.log_end_offset if high_watermark is None else high_watermark
        deleted: list[tuple[int, str]] = []
        # Which segments go is a rule (``rules.segments_to_delete``); the log applies its answer
        # from the oldest on, rolling the active segment first if it goes, and stops at the
        # first segment holding records not yet replicated (past the high watermark).
        infos = [SegmentInfo(s.base_offset, s.size, s.largest_timestamp) for s in self.segments]
        chosen = self.rules.segments_to_delete(infos, now, self.config.retention_ms, self.config.retention_bytes)
        for base, reason in chosen:
            segment = self.segments[0]
            if segment.base_offset != base:
                break
            if segment is self.active_segment:
                if self.log_end_offset > hw:
                    break
                self.roll()  # as Kafka: an expired active segment is rolled so it can go
            if self._next_base(segment) > hw:
                break
            if reason == "retention.bytes":
                why = f"retention.bytes: log over {self.config.retention_bytes} bytes"
            elif segment.size:
                why = f"retention.ms: newest record {now - segment.largest_timestamp} ms old"
            else:
                why = "retention.ms: empty, before an expired segment"
            deleted.append(self._delete_segment(segment, why))
        if deleted:
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            self.checkpoints.write_or_defer(LOG_START_FILE, self.log_start_offset)
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        return deleted

    def maybe_increment_log_start_offset(self, offset: int) -> list[tuple[int, str]]:
        """DeleteRecords (Kafka's ``maybeIncrementLogStartOffset``): records below ``offset``
        are gone for readers at once (the log start offset moves, checkpointed); whole
        segments entirely below it are deleted now (Kafka leaves that to its next retention
        check), the one holding ``offset`` stays. Never past the log end; never backwards.
        Returns (base offset, reason) of each segment deleted."""
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(f"cannot delete records before {offset}: {self.name} ends at {self.log_end_offset}")
        if offset <= self.log_start_offset:
            return []
        deleted = []
        for segment in list(self.segments[:-1]):
            if self._next_base(segment) > offset:
                break
            deleted.append(self._delete_segment(segment, f"log start offset moved to {offset} (DeleteRecords)"))
        self.log_start_offset = offset
        self.checkpoints.write_or_defer(LOG_START_FILE, offset)
        self.leader_epoch_cache.truncate_from_start(offset)
        return deleted

    def _next_base(self, segment: LogSegment) -> int:
        i = self.segments.index(segment)
        return self.segments[i + 1].base_offset if i + 1 < len(self.segments) else self.log_end_offset

    def _delete_segment(self, segment: LogSegment, reason: str) -> tuple[int, str]:
        i = self.segments.index(segment)
        del self.segments[i], self._bases[i]
        segment.delete()
        logger.info("%s: deleted segment %d (%s)", self.name, segment.base_offset, reason)
        return segment.base_offset, reason

    # --- durability ------------------------------------------------------------------------------------

    def flush(self) -> None:
        """Force everything appended so far to disk and move the recovery point to the end."""
        if (self.recovery_point == self.log_end_offset and self.unflushed_bytes == 0
                and self._checkpointed == self.recovery_point and not self.checkpoints.unwritten
                and not self.leader_epoch_cache.behind):
            return  # nothing new: an idle log costs no fsync (a broker flushes every log on a timer)
        try:
            for segment in self.segments[self._segment_for(self.recovery_point) :]:
                segment.flush()
        except OSError as e:
            # The kernel may have dropped the pages it could not write, and a second fsync
            # may "succeed" without them: nothing appended here can be called durable again
            # (see disk.py). As Kafka takes the log directory offline, this log refuses
            # appends until the broker restarts and recovers it from the recovery point.
            self.offline = f"fsync failed ({e.strerror or e}) at recovery point {self.recovery_point}"
            raise KafkaStorageError(f"{self.name}: {self.offline}") from None
        try:
            # Which epoch wrote what must be on disk before the recovery point passes it:
            # recovery reads the epochs of the batches after the recovery point only.
            self.leader_epoch_cache.flush()
            self.checkpoints.write_unwritten()
            self.checkpoints.write(RECOVERY_POINT_FILE, self.log_end_offset)
        except OSError as e:  # the old checkpoints stay, which is safe: recovery checks more
            raise KafkaStorageError(f"{self.name}: writing a checkpoint failed: {e.strerror or e}") from None
        self.recovery_point = self.log_end_offset
        self._checkpointed = self.recovery_point

    @property
    def unflushed_bytes(self) -> int:
        return sum(s.size - s.flushed_size for s in self.segments)

    def close(self) -> None:
        """A clean shutdown: flush, so the next open has nothing to recover. On a failing
        disk the files are still closed; the next open recovers from the recovery point."""
        try:
            if self.offline is None:
                self.flush()
        except KafkaStorageError as e:
            logger.error("%s: closed without a final flush: %s", self.name, e)
        finally:
            for segment in self.segments:
                segment.close()

    def crash(self, *, lose_unflushed: bool = False) -> None:
        """Let go of the files as a killed process would (no flush). With
        ``lose_unflushed``, also cut every segment back to what was flushed, as a power loss
        would: the simulated world's way to crash a machine, not just a process."""
        for segment in self.segments:
            if lose_unflushed and segment.flushed_size < segment.size:
                os.truncate(segment.log_path, segment.flushed_size)
            segment.close()

    def __enter__(self) -> "Log":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Log({self.name!r}, log_start_offset={self.log_start_offset}, "
            f"log_end_offset={self.log_end_offset}, segments={len(self.segments)}, "
            f"recovery_point={self.recovery_point})"
        )


# DAY_MS, LogConfig, RecoveryReport and the checkpoint names are importable from here too
# (notebook 01 takes DAY_MS from this module), though they live in log_config.py,
# log_loader.py and checkpoint.py.
__all__ = [
    "CLEANER_CHECKPOINT_FILE", "DAY_MS", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "LOG_START_FILE",
    "RECOVERY_POINT_FILE", "ActiveSegment", "IncomingBatch", "Log", "LogAppendInfo", "LogConfig",
    "RecoveryReport", "SegmentInfo", "wall_clock_ms",
]
