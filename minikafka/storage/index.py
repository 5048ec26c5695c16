"""Sparse indexes beside each log segment: Kafka's ``OffsetIndex`` and ``TimeIndex``.

Theory of operation
-------------------
A segment's ``.log`` file is only batches back to back; finding offset N in it would mean
reading from the start. So every ``index.interval.bytes`` of appended data the segment
notes one entry:

- ``.index``: (relative offset, file position), 8 bytes an entry (two int32). The offset is
  the *last* offset of the batch that starts at that position.
- ``.timeindex``: (timestamp, relative offset), 12 bytes an entry (int64, int32), the
  largest timestamp seen so far and the offset where it was seen.

Offsets are stored relative to the segment's base offset so they fit in 4 bytes (that is
also why a segment rolls before it spans 2**31 offsets). A lookup is a binary search for
the last entry at or below the target; the segment then scans forward a few KB at most.

Invariants: entries strictly increase (offsets and positions; timestamps). The index is a
*hint* that can always be rebuilt from the ``.log`` file, so recovery may discard it.
Only this file and ``segment.py`` touch index files. Unlike Kafka we do not preallocate and
memory-map the files: entries are appended (unbuffered, through the log directory's
``Disk``), and a copy is kept in memory for lookups. A write that fails leaves the file
and the copy as they were before it.
"""

from __future__ import annotations

import bisect
import errno
import os
import struct
from pathlib import Path

from minikafka.errors import IllegalStateError
from minikafka.platform import O_BINARY
from minikafka.rules import REFERENCE, Rules
from minikafka.storage.disk import OS_DISK, Disk


class _SparseIndex:
    ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int, *, disk: Disk = OS_DISK) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.disk = disk
        self._keys: list[int] = []  # what lookups search: offsets or timestamps
        self._values: list[int] = []
        self._entries: list[tuple[int, int]] = []  # the same, as (key, value) pairs: what a rule is shown
        self.problem: str | None = None  # why the file on disk could not be trusted
        self._load()
        # Unbuffered: an entry is on the file (or its write failed) when ``_append`` returns,
        # so a failed write is seen by the append that made it and can be undone there.
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | O_BINARY, 0o644)

    # The subclasses say which column is the search key.
    def _decode(self, a: int, b: int) -> tuple[int, int]:
        raise NotImplementedError

    def _encode(self, key: int, value: int) -> bytes:
        raise NotImplementedError

    def _load(self) -> None:
        if not self.path.exists():
            self.problem = "missing"
            return
        data = self.path.read_bytes()
        size = self.ENTRY.size
        if len(data) % size:
            self.problem = f"size {len(data)} is not a multiple of the {size}-byte entry"
            return
        for a, b in self.ENTRY.iter_unpack(data):
            key, value = self._decode(a, b)
            if self._keys and (key <= self._keys[-1] or value < self._values[-1]):
                self.problem = f"entry {len(self._keys)} does not increase"
                self._keys.clear()
                self._values.clear()
                self._entries.clear()
                return
            self._keys.append(key)
            self._values.append(value)
            self._entries.append((key, value))

    def __len__(self) -> int:
        return len(self._keys)

    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    def _append(self, key: int, value: int) -> None:
        if self._keys and (key <= self._keys[-1] or value < self._values[-1]):
            raise IllegalStateError(
                f"{self.path.name}: entry ({key}, {value}) does not follow ({self._keys[-1]}, {self._values[-1]})"
            )
        entry = self._encode(key, value)
        try:
            written = self.disk.write(self._fd, entry)
            if written != len(entry):
                raise OSError(errno.ENOSPC, f"short write of an index entry ({written} of {len(entry)} bytes)")
        except OSError:
            os.ftruncate(self._fd, len(self._keys) * self.ENTRY.size)  # no half entry left behind
            raise
        self._keys.append(key)
        self._values.append(value)
        self._entries.append((key, value))

    def _floor(self, key: int) -> int:
        """Index of the last entry whose key is <= ``key``, or -1."""
        return bisect.bisect_right(self._keys, key) - 1

    def _truncate_entries(self, n: int) -> None:
        if n >= len(self._keys):
            return
        del self._keys[n:], self._values[n:], self._entries[n:]
        os.ftruncate(self._fd, n * self.ENTRY.size)

    def reset(self) -> None:
        self._truncate_entries(0)
        self.problem = None

    def truncate_to_entries(self, n: int) -> None:
        """Keep the first ``n`` entries (a failed append undoing what it added)."""
        self._truncate_entries(n)

    def flush(self) -> None:
        self.disk.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class OffsetIndex(_SparseIndex):
    """offset -> position of the batch to start scanning from. Which entry a read starts from is
    a rule (``minikafka.rules.index_lookup``), asked through ``rules`` (Kafka's by default)."""

    ENTRY = struct.Struct(">ii")

    def __init__(self, path: Path, base_offset: int, *, disk: Disk = OS_DISK, rules: Rules = REFERENCE) -> None:
        super().__init__(path, base_offset, disk=disk)
        self.rules = rules

    def _decode(self, rel_offset: int, position: int) -> tuple[int, int]:
        return self.base_offset + rel_offset, position

    def _encode(self, offset: int, position: int) -> bytes:
        return self.ENTRY.pack(offset - self.base_offset, position)

    def append(self, offset: int, position: int) -> None:
        self._append(offset, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry (offset, position) at or below ``offset``; (base, 0) if none."""
        return self.rules.index_lookup(self._entries, offset, self.base_offset)

    def floor_position(self, position: int) -> int:
        """The last indexed batch start at or below ``position`` (0 if none)."""
        i = bisect.bisect_right(self._values, position) - 1
        return self._values[i] if i >= 0 else 0

    @property
    def last_position(self) -> int:
        return self._values[-1] if self._values else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or past ``position`` (the log was cut there)."""
        self._truncate_entries(bisect.bisect_left(self._values, position))


class TimeIndex(_SparseIndex):
    """timestamp -> offset from which records at or after that time can be found."""

    ENTRY = struct.Struct(">qi")

    def _decode(self, timestamp: int, rel_offset: int) -> tuple[int, int]:
        return timestamp, self.base_offset + rel_offset

    def _encode(self, timestamp: int, offset: int) -> bytes:
        return self.ENTRY.pack(timestamp, offset - self.base_offset)

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry only when time has moved forward (entries must increase)."""
        if timestamp >= 0 and (not self._keys or timestamp > self._keys[-1]):
            self._append(timestamp, offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """The last entry (timestamp, offset) at or below ``timestamp``; (-1, base) if none."""
        i = self._floor(timestamp)
        return (-1, self.base_offset) if i < 0 else (self._keys[i], self._values[i])

    @property
    def last_entry(self) -> tuple[int, int]:
        return (self._keys[-1], self._values[-1]) if self._keys else (-1, self.base_offset)

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for offsets at or past ``offset``."""
        self._truncate_entries(bisect.bisect_left(self._values, offset))
