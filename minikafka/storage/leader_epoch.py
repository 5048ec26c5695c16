"""Which leader epoch wrote which offsets: Kafka's ``LeaderEpochFileCache`` (KIP-101).

Theory of operation
-------------------
Every batch carries the ``partitionLeaderEpoch`` of the leader that appended it. The cache
keeps one entry per epoch: (epoch, the first offset written in it), in increasing order of
both, checkpointed to ``leader-epoch-checkpoint`` in the partition's directory.

It answers the one question a follower asks after a leader change: *where does my log
stop agreeing with the leader's?* ``end_offset_for(epoch)`` gives the largest epoch at or
below ``epoch`` and the offset where it ended (the start of the next epoch, or the log end
for the latest one). A follower truncates to that offset instead of to its high watermark,
which is what loses or forks data when two leaders fail in a row (the HW-truncation bug
KIP-101 fixed).

The file is written through the log directory's ``Disk``. If the disk refuses (full,
failing), the entries change in memory all the same, ``unwritten`` says so, and the log's
next ``flush`` writes the file (and fsyncs it, as after any change) before it moves its
recovery point. After a crash, recovery reads the epoch of every batch past the recovery
point and those replace the file's entries from there on (``replace_from_batches``, as
Kafka's recovery assigns them), so an epoch the file missed is never lost.

Invariants: epochs and start offsets strictly increase; no entry starts at or after the
log end offset once the log is truncated (the log calls ``truncate_from_end``).
"""

from __future__ import annotations

import bisect
import logging
from pathlib import Path

from minikafka.storage.disk import OS_DISK, Disk

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED = (-1, -1)


class LeaderEpochFileCache:
    def __init__(self, directory: Path, *, disk: Disk = OS_DISK) -> None:
        self.path = Path(directory) / CHECKPOINT_FILE
        self.disk = disk
        self.unwritten = False  # the file is behind these entries: the disk refused a write
        self.synced = True  # no change since the file was last fsynced (or read)
        self._epochs: list[int] = []
        self._starts: list[int] = []
        self._load()

    def _load(self) -> None:
        try:
            lines = self.path.read_text().split("\n")
            count = int(lines[1])
            for line in lines[2 : 2 + count]:
                epoch, start = (int(x) for x in line.split())
                self._epochs.append(epoch)
                self._starts.append(start)
        except (OSError, IndexError, ValueError):
            self._epochs, self._starts = [], []

    def _flush(self) -> None:
        """After each change: the file, not fsynced (the log's next flush does that)."""
        self.synced = False
        try:
            self._write(durable=False)
        except OSError as e:
            if not self.unwritten:
                logger.error("%s: writing it failed (%s); it is written again at the next flush",
                             self.path, e.strerror or e)
            self.unwritten = True

    @property
    def behind(self) -> bool:
        """Whether the file on disk may lack a change: not written, or not fsynced."""
        return self.unwritten or not self.synced

    def flush(self) -> None:
        """Write and fsync the file if it is ``behind``; ``OSError`` if the disk refuses."""
        if self.behind:
            self._write(durable=True)
            self.synced = True

    def _write(self, *, durable: bool) -> None:
        body = "".join(f"{e} {s}\n" for e, s in zip(self._epochs, self._starts))
        self.disk.replace_file(self.path, f"0\n{len(self._epochs)}\n{body}".encode(), durable=durable)
        self.unwritten = False

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        """Note that ``epoch`` starts at ``start_offset`` (if it is new)."""
        if epoch < 0 or (self._epochs and epoch <= self._epochs[-1]):
            return
        # A new epoch that starts no later than an older one supersedes it (that older
        # leader's entries were never written here).
        while self._starts and self._starts[-1] >= start_offset:
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        self._flush()

    def replace_from_batches(self, epochs: list[tuple[int, int]]) -> None:
        """Recovery: ``epochs`` are (epoch, base offset) read from the log's batches, in order,
        from ``epochs[0][1]`` to the log end. They replace the entries from there on (the
        file may be behind them, or hold entries a truncation removed); the file is written
        only if that changes anything."""
        i = bisect.bisect_left(self._starts, epochs[0][1])
        new_epochs, new_starts = self._epochs[:i], self._starts[:i]
        for epoch, start in epochs:
            if epoch < 0 or (new_epochs and epoch <= new_epochs[-1]):
                continue
            while new_starts and new_starts[-1] >= start:
                new_epochs.pop()
                new_starts.pop()
            new_epochs.append(epoch)
            new_starts.append(start)
        if (new_epochs, new_starts) != (self._epochs, self._starts):
            self._epochs, self._starts = new_epochs, new_starts
            self._flush()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest known epoch <= ``epoch``, the offset where it ended); UNDEFINED if none."""
        i = bisect.bisect_right(self._epochs, epoch) - 1
        if i < 0:
            return UNDEFINED
        end = self._starts[i + 1] if i + 1 < len(self._epochs) else log_end_offset
        return self._epochs[i], end

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after ``end_offset`` (the log was cut there)."""
        n = bisect.bisect_left(self._starts, end_offset)
        if n < len(self._starts):
            del self._epochs[n:], self._starts[n:]
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the epoch holding it starts there."""
        i = bisect.bisect_right(self._starts, start_offset) - 1
        if i > 0 or (i == 0 and self._starts[0] < start_offset):
            del self._epochs[:i], self._starts[:i]
            self._starts[0] = start_offset
            self._flush()

    def clear(self) -> None:
        self._epochs, self._starts = [], []
        self._flush()

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self.entries()})"
