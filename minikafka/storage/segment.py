"""One segment of a partition's log: Kafka's ``LogSegment``.

Theory of operation
-------------------
A segment is three files named by its *base offset* (the first offset it may hold),
zero-padded to 20 digits so they sort: ``00000000000000000000.log`` holds record batches
back to back exactly as producers sent them (offsets patched), ``.index`` and
``.timeindex`` are the sparse indexes (see ``index.py``).

- ``append`` writes whole batches at the end of ``.log`` and, every
  ``index.interval.bytes``, one index entry: the position of the batch being written and
  its last offset. Data is written before its index entry, so an index never points past
  the data a crash left behind. An append is all or nothing: a write that fails (a full
  disk writes part of a ``writev`` and then fails with ENOSPC) is undone, file cut back
  and index entries dropped, before ``KafkaStorageError`` is raised, so the segment never
  holds bytes its ``size`` does not count (the next recovery would cut them, with every
  acknowledged batch appended after them).
- ``read`` finds the first batch holding the wanted offset (index lookup, then a short scan
  of batch headers) and returns whole batches only, up to ``max_size`` (but always at least
  one batch, however large, as Kafka does since KIP-74, so a consumer can make progress).
- ``recover`` re-reads batches from a position, checks each CRC, rebuilds the index entries
  past that position and cuts the file at the first torn or corrupt batch.
- ``flush`` is the only durability point: ``flushed_size`` tells how much of the file a
  crash cannot take away.
- The active segment keeps the bytes of its last append (up to ``TAIL_BYTES``) until the next
  append, a truncation or a roll: followers and consumers keeping up ask for exactly those,
  and are served them (and the headers that locate them) without a ``pread`` each. Anything
  that changes the file's size without an append drops them, so they are never stale.

Only this file and ``index.py`` touch segment files, and they write and fsync only through
the log directory's ``Disk`` (``disk.py``, where faults are injected); nothing here reads a
clock.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from minikafka.errors import CorruptRecordError, KafkaStorageError
from minikafka.platform import O_BINARY, pread
from minikafka.records import HEADER, HEADER_SIZE, LOG_OVERHEAD, MAGIC, RecordBatch
from minikafka.storage.disk import OS_DISK, Disk
from minikafka.storage.file_records import FileRecords, OpenFile
from minikafka.rules import REFERENCE, Rules
from minikafka.storage.index import OffsetIndex, TimeIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta:
# the first 27 bytes of a batch, all that is needed to walk a log and find an offset.
_WALK = struct.Struct(">qiibIhi")
_IOV_MAX = 1024  # Linux's limit on buffers per writev call
TAIL_BYTES = 4 * 1024  # the largest append kept in memory (a broker of 8,000 partitions: 32 MB at most)


def filename_prefix(offset: int) -> str:
    return f"{offset:020d}"


@dataclass(frozen=True)
class ScanResult:
    valid_bytes: int  # where the last good batch ends
    truncated_bytes: int  # what was cut off after it
    problem: str | None  # why the scan stopped early, if it did
    # (epoch, base offset) of each good batch whose partitionLeaderEpoch differs from the
    # batch before it: what recovery tells the leader-epoch cache, as Kafka's does
    epochs: tuple[tuple[int, int], ...] = ()


class LogSegment:
    def __init__(
        self,
        directory: Path | str,
        base_offset: int,
        *,
        index_interval_bytes: int = 4096,
        created_ms: int,
        disk: Disk = OS_DISK,
        rules: Rules = REFERENCE,
    ) -> None:
        self.dir = Path(directory)
        self.disk = disk
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        prefix = filename_prefix(base_offset)
        self.file_name = f"{prefix}{LOG_SUFFIX}"
        self.log_path = self.dir / self.file_name
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND | O_BINARY, 0o644)
        # Closes _fd once neither this segment nor an answer's FileRecords needs it.
        self._file: OpenFile | None = OpenFile(self._fd)
        self.size = os.fstat(self._fd).st_size
        self.flushed_size = self.size  # bytes found at open are as durable as we can know
        self.created_ms = created_ms
        self.offset_index = OffsetIndex(self.dir / f"{prefix}{INDEX_SUFFIX}", base_offset, disk=disk, rules=rules)
        self.time_index = TimeIndex(self.dir / f"{prefix}{TIME_INDEX_SUFFIX}", base_offset, disk=disk)
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.first_batch_max_timestamp: int | None = None  # the clock segment.ms rolls by
        self._bytes_since_last_index_entry = 0
        # A hint for translate_offset: (offset, position) such that every batch before
        # ``position`` ends below ``offset``. Reads come mostly at the log's end (followers,
        # consumers keeping up), where the sparse index would make each one walk every batch
        # header written since its last entry, one pread each.
        self._walk_from: tuple[int, int] | None = None
        self._tail: tuple[int, bytes] | None = None  # (position, what the last append wrote there)

    # --- writing -----------------------------------------------------------------------------

    def append(self, pieces: Sequence[bytes | memoryview], batches: Sequence[tuple[int, int, int]]) -> None:
        """Write whole, validated batches at the end: ``pieces`` are their bytes (written in
        order with one writev), ``batches`` their (size, last offset, max timestamp).

        All or nothing: if any write fails (disk full, I/O error), the file is cut back to
        its size before the append, the indexes lose the entries it added, and
        ``KafkaStorageError`` is raised; the segment is then exactly as it was."""
        before = (
            self.size, len(self.offset_index), len(self.time_index), self.next_offset, self.max_timestamp,
            self.offset_of_max_timestamp, self.first_batch_max_timestamp,
            self._bytes_since_last_index_entry, self._walk_from,
        )
        try:
            self._append(pieces, batches)
        except OSError as e:
            self._undo_append(before)
            raise KafkaStorageError(
                f"{self.log_path.name}: appending {sum(size for size, _, _ in batches)} bytes at byte "
                f"{before[0]} failed ({e.strerror or e}); the segment was cut back to {before[0]} bytes"
            ) from None

    def _undo_append(self, before: tuple) -> None:
        (size, offset_entries, time_entries, self.next_offset, self.max_timestamp,
         self.offset_of_max_timestamp, self.first_batch_max_timestamp,
         self._bytes_since_last_index_entry, self._walk_from) = before
        # Shrinking a file needs no free space; if even this fails the disk is gone, and
        # the error says so (recovery at the next start cuts the torn tail by its CRC).
        os.ftruncate(self._fd, size)
        self.size = size
        self._tail = None
        self.offset_index.truncate_to_entries(offset_entries)
        self.time_index.truncate_to_entries(time_entries)

    def _append(self, pieces: Sequence[bytes | memoryview], batches: Sequence[tuple[int, int, int]]) -> None:
        position = start = self.size
        offset_entries = []
        time_entries = []
        ends_below = self.next_offset  # the batch about to be written is the first to reach it
        for size, last_offset, max_timestamp in batches:
            self._walk_from = (ends_below, position)
            ends_below = last_offset + 1
            if max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, last_offset
            if self.first_batch_max_timestamp is None:
                self.first_batch_max_timestamp = max_timestamp
            if self._bytes_since_last_index_entry > self.index_interval_bytes:
                offset_entries.append((last_offset, position))
                time_entries.append((self.max_timestamp, self.offset_of_max_timestamp))
                self._bytes_since_last_index_entry = 0
            self._bytes_since_last_index_entry += size
            position += size
        self._write_all(pieces, position - self.size)
        self.size = position
        for entry in offset_entries:
            self.offset_index.append(*entry)
        for entry in time_entries:
            self.time_index.maybe_append(*entry)
        self.next_offset = batches[-1][1] + 1
        self._tail = (start, b"".join(pieces)) if position - start <= TAIL_BYTES else None

    def _write_all(self, pieces: Sequence[bytes | memoryview], total: int) -> None:
        writev = self.disk.writev
        if len(pieces) <= _IOV_MAX:
            written = writev(self._fd, pieces)
        else:
            written = sum(writev(self._fd, pieces[i : i + _IOV_MAX]) for i in range(0, len(pieces), _IOV_MAX))
        if written < total:  # a short write (a signal, or the disk filling up): finish it the
            # slow way; a full disk then raises ENOSPC here, and ``append`` cuts back
            rest = b"".join(bytes(p) for p in pieces)[written:]
            while rest:
                rest = rest[self.disk.write(self._fd, rest) :]

    def flush(self) -> None:
        """fsync the data and the indexes; an OSError here is the caller's to judge (a
        failed fsync is fatal to the log directory: see ``disk.py``)."""
        self.disk.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.flushed_size = self.size

    # --- reading -----------------------------------------------------------------------------

    def _walk_header(self, position: int) -> tuple[int, int, int] | None:
        """(base offset, last offset, size) of the batch at ``position``, or None past the end."""
        head = self._from_tail(position, _WALK.size) or pread(self._fd, _WALK.size, position)
        if len(head) < _WALK.size:
            return None
        base, length, _, _, _, _, last_delta = _WALK.unpack(head)
        return base, base + last_delta, LOG_OVERHEAD + length

    def translate_offset(self, offset: int) -> tuple[int, int] | None:
        """(position, base offset) of the first batch whose last offset is >= ``offset``."""
        _, position = self.offset_index.lookup(offset)
        hint = self._walk_from
        if hint is not None and offset >= hint[0] and hint[1] > position:
            position = hint[1]
        while position < self.size:
            found = self._walk_header(position)
            if found is None:
                return None
            base, last, size = found
            if last >= offset:
                if hint is None or position > hint[1]:
                    self._walk_from = (offset, position)
                return position, base
            position += size
        return None

    def read(
        self, offset: int, max_size: int, max_position: int | None = None, min_one_message: bool = True
    ) -> bytes:
        """Whole batches from the one holding ``offset``, at most ``max_size`` bytes (but at
        least one batch if ``min_one_message``), never past ``max_position``."""
        span = self.span(offset, max_size, max_position, min_one_message)
        return b"" if span is None else pread(self._fd, span[1] - span[0], span[0])

    def span(
        self, offset: int, max_size: int, max_position: int | None = None, min_one_message: bool = True
    ) -> tuple[int, int] | None:
        """Where in the file ``read`` would read: (start, end), or None for nothing."""
        found = self.translate_offset(offset)
        if found is None:
            return None
        start = found[0]
        limit = self.size if max_position is None else min(max_position, self.size)
        if start >= limit:
            return None
        # Find where the last whole batch that fits ends: jump with the index to the last
        # indexed batch start below the budget, then walk the few headers after it.
        budget = min(start + max_size, limit)
        if budget == limit:  # everything up to the limit fits, and the limit is a batch boundary
            return start, limit
        end = max(start, self.offset_index.floor_position(budget))
        while end + LOG_OVERHEAD <= budget:
            (length,) = struct.unpack(">i", pread(self._fd, 4, end + 8))
            if end + LOG_OVERHEAD + length > budget:
                break
            end += LOG_OVERHEAD + length
        if end == start:  # the first batch alone is over budget
            if not min_one_message:
                return None
            (length,) = struct.unpack(">i", pread(self._fd, 4, start + 8))
            end = start + LOG_OVERHEAD + length
            if end > limit:
                return None
        return start, end

    def file_records(self, start: int, end: int) -> FileRecords:
        """Bytes [start, end) of the file, unread, for an answer to send (see file_records.py)."""
        assert self._file is not None, f"{self.log_path.name} is closed"
        return FileRecords(self._file, start, end - start, where=str(self.log_path))

    def iter_batches(self, start_position: int = 0) -> Iterator[tuple[int, RecordBatch]]:
        """(position, batch) for every batch from ``start_position``; for tools and notebooks."""
        position = start_position
        while position + LOG_OVERHEAD <= self.size:
            (length,) = struct.unpack(">i", pread(self._fd, 4, position + 8))
            size = LOG_OVERHEAD + length
            yield position, RecordBatch(
                pread(self._fd, size, position), where=f"{self.log_path.name} at byte {position}"
            )
            position += size

    def read_bytes(self, position: int, size: int) -> bytes:
        return self._from_tail(position, size) or pread(self._fd, size, position)

    def _from_tail(self, position: int, size: int) -> bytes | None:
        """Bytes [position, position + size) from the last append's, if it wrote them all."""
        tail = self._tail
        if tail is None or position < tail[0] or position + size > self.size or tail[0] + len(tail[1]) != self.size:
            return None
        start = position - tail[0]
        data = tail[1]
        return data if start == 0 and size == len(data) else data[start : start + size]

    def on_become_inactive(self) -> None:
        """The log rolled past this segment (Kafka's ``onBecomeInactiveSegment``): its
        last append's bytes are read from the file from now on."""
        self._tail = None

    def find_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record whose timestamp is >= ``timestamp``."""
        # The entry just *below* the target: every record up to its offset is older than
        # the target, so the first match lies in that offset's batch or after it.
        _, offset = self.time_index.lookup(timestamp - 1)
        start = self.offset_index.lookup(offset)[1]
        for _, batch in self.iter_batches(start):
            if batch.max_timestamp >= timestamp:
                for record in batch.records():
                    if record.timestamp >= timestamp:
                        return record.timestamp, record.offset
        return None

    @property
    def largest_timestamp(self) -> int:
        """What time retention judges this segment by: its newest record, else (records
        without timestamps) when the segment was created or opened."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.created_ms

    # --- recovery and truncation -------------------------------------------------------------

    def load(self) -> ScanResult | None:
        """Open a segment that was flushed before (below the recovery point): trust its bytes,
        reuse its indexes when they look sane, else rebuild them from headers alone."""
        if self.indexes_look_sane():
            start = self.offset_index.last_position
            rebuilt = False
        else:
            start = 0
            rebuilt = True
        result = self._scan(start, verify_crc=False)
        return result if rebuilt or result.problem else None

    def indexes_look_sane(self) -> bool:
        for index in (self.offset_index, self.time_index):
            if index.problem:
                return False
        if self.offset_index.last_position >= max(self.size, 1) and len(self.offset_index):
            return False
        entries = self.time_index.entries()
        return not entries or entries[-1][1] >= self.base_offset

    def recover(self, start_position: int = 0, verify_from_offset: int = 0) -> ScanResult:
        """Check every batch from ``start_position`` (the CRC of those at or past
        ``verify_from_offset``), rebuild the index entries past it and cut off the first torn
        or corrupt batch and everything after it."""
        result = self._scan(start_position, verify_crc=True, verify_from_offset=verify_from_offset)
        if result.truncated_bytes:
            self._truncate_file(result.valid_bytes)
        return result

    def _scan(self, start: int, verify_crc: bool, verify_from_offset: int = 0) -> ScanResult:
        self.offset_index.truncate_to_position(start + 1)  # keep the entry at ``start`` itself
        if start == 0:
            self.offset_index.reset()
            self.time_index.reset()
            self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
            self.first_batch_max_timestamp = None
            self.next_offset = self.base_offset
        else:
            # Resume from what the earlier, trusted part of the file indexed.
            self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry
        self._bytes_since_last_index_entry = 0
        position, problem = start, None
        epochs: list[tuple[int, int]] = []
        while position < self.size:
            where = f"{self.log_path.name} at byte {position}"
            head = pread(self._fd, HEADER_SIZE, position)
            if len(head) < HEADER_SIZE:
                problem = f"{where}: torn write: {len(head)} bytes, less than a batch header"
                break
            base, length, epoch, magic, _, _, last_delta, _, max_ts, *_ = HEADER.unpack(head)
            size = LOG_OVERHEAD + length
            if magic != MAGIC or length < HEADER_SIZE - LOG_OVERHEAD:
                problem = f"{where}: not a v2 batch (magic {magic}, batchLength {length})"
                break
            if position + size > self.size:
                problem = (
                    f"{where}: torn write: the batch claims {size} bytes, "
                    f"only {self.size - position} are on disk"
                )
                break
            if position > start and base < self.next_offset:
                problem = f"{where}: offset {base} goes backwards (expected >= {self.next_offset})"
                break
            if verify_crc and base + last_delta >= verify_from_offset:
                try:
                    RecordBatch(pread(self._fd, size, position), where=where).validate()
                except CorruptRecordError as e:
                    problem = str(e)
                    break
            self._index_existing(size, base + last_delta, max_ts, position)
            if epoch >= 0 and (not epochs or epochs[-1][0] != epoch):
                epochs.append((epoch, base))
            position += size
        if problem and position == start and start > 0:
            # The batch we resumed from is itself bad: nothing before it can be trusted
            # to tell where the log ends, so scan the whole segment.
            return self._scan(0, verify_crc, verify_from_offset)
        if self.time_index.last_entry[1] >= self.next_offset:
            self.time_index.truncate_to_offset(self.next_offset)
            self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry
        if self.first_batch_max_timestamp is None and position > 0:
            self.first_batch_max_timestamp = HEADER.unpack(pread(self._fd, HEADER_SIZE, 0))[8]
        return ScanResult(position, self.size - position, problem, tuple(epochs))

    def _index_existing(self, size: int, last_offset: int, max_timestamp: int, position: int) -> None:
        """Account for a batch already in the file (recovery): indexes and offsets only."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, last_offset
        if position == 0:
            self.first_batch_max_timestamp = max_timestamp
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            try:
                if not len(self.offset_index) or position > self.offset_index.last_position:
                    self.offset_index.append(last_offset, position)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            except OSError:
                # Rebuilding on a full disk: an index is only a hint, so this segment goes
                # without one (reads scan its batch headers) until it is opened again.
                self.offset_index.reset()
                self.time_index.reset()
                self.index_interval_bytes = 2**62
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += size
        self.next_offset = last_offset + 1

    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding ``offset`` and all after it; return the bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, base = found
        removed = self.size - position
        self._truncate_file(position)
        self.time_index.truncate_to_offset(base)
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry
        if position == 0:
            self.first_batch_max_timestamp = None
        self.next_offset = base
        self._bytes_since_last_index_entry = 0
        return removed

    def _truncate_file(self, position: int) -> None:
        if self._walk_from is not None and self._walk_from[1] >= position:
            self._walk_from = None  # it pointed at bytes that are gone
        self._tail = None
        os.ftruncate(self._fd, position)
        self.size = position
        self.flushed_size = min(self.flushed_size, position)
        self.offset_index.truncate_to_position(position)

    # --- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        # The descriptor closes now, unless an answer still holds FileRecords of it.
        self._file = None
        self._fd = -1
        self.offset_index.close()
        self.time_index.close()

    def delete(self) -> None:
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, next_offset={self.next_offset}, "
            f"size={self.size}, index_entries={len(self.offset_index)})"
        )
