"""A log's offset checkpoints, and what a failing disk does to them: Kafka's ``OffsetCheckpointFile``.

Theory of operation
-------------------
Three small files in a log's directory each hold one offset: the *recovery point* (below it
everything is on disk, so recovery on open trusts it), the *log start offset* (moved by
retention and DeleteRecords) and the cleaner's checkpoint (where its last pass ended). The
format is Kafka's: a version line ``0``, an entry count ``1``, then ``topic partition offset``.
A file that is missing or unreadable reads as 0, which is the safe side of each: everything
is checked again, the log start is taken from the segments, everything is dirty.

Writing goes through the log's ``Disk`` (``disk.py``): a checkpoint is replaced whole or not
at all. The disk may refuse (full, failing). Then the offset is kept in ``unwritten`` and
written at the log's next ``flush``, which moves the recovery point only once they are all
on disk. Meanwhile the file must never say *more* than the truth: a recovery point above it
would trust bytes never flushed, a log start offset above it would hide records. So a refused
checkpoint that goes *down* (a truncation) removes the old file, which needs no space; one
that goes up keeps the old file, as safe (more checked again, or records DeleteRecords
removed served until the next flush).

This is hardening, not the lesson of notebook 01: ``log.py`` calls ``write_or_defer`` where
an offset moves and ``write_unwritten`` in ``flush``, and reads nothing else of this file.
No clock; its only I/O is these files.
"""

from __future__ import annotations

import logging
from pathlib import Path

from minikafka.storage.disk import Disk
from minikafka.topic import TopicPartition

logger = logging.getLogger("minikafka.storage")

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
# Where the cleaner's last pass ended (cleaner.py); truncation pulls it back (``pull_back``).
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"


class LogCheckpoints:
    """The offset checkpoint files of the log named ``name`` in ``dir``."""

    def __init__(self, dir: Path, name: str, disk: Disk) -> None:
        self.dir = dir
        self.name = name
        self.disk = disk
        self.unwritten: dict[str, int] = {}  # checkpoints the disk refused, for the next flush

    def read(self, filename: str) -> int:
        """The offset in ``filename``; 0 if it is missing or not Kafka's format."""
        path = self.dir / filename
        try:
            lines = path.read_text().split("\n")
            if lines[0] == "0" and lines[1] == "1":
                return int(lines[2].split()[-1])
        except (OSError, IndexError, ValueError):
            pass
        return 0

    def exists(self, filename: str) -> bool:
        return (self.dir / filename).exists()

    def write(self, filename: str, offset: int, *, durable: bool = True) -> None:
        """Replace ``filename`` with ``offset`` (``OSError`` if the disk refuses: then the
        old file is still whole)."""
        try:
            tp = TopicPartition.from_dir_name(self.name)
        except ValueError:  # a log outside a broker's layout, e.g. in a notebook
            tp = TopicPartition(self.name, 0)
        self.disk.replace_file(self.dir / filename, f"0\n1\n{tp.topic} {tp.partition} {offset}\n".encode(),
                               durable=durable)

    def write_or_defer(self, filename: str, offset: int, *, durable: bool = True) -> None:
        """Write a checkpoint, or, if the disk refuses, keep it for ``write_unwritten`` (the
        next flush); a refused one that goes down removes the old file meanwhile (see above)."""
        try:
            self.write(filename, offset, durable=durable)
        except OSError as e:
            if offset < self.read(filename):
                (self.dir / filename).unlink(missing_ok=True)
            if not self.unwritten:
                logger.error("%s: writing %s failed (%s); it is written at the next flush",
                             self.name, filename, e.strerror or e)
            self.unwritten[filename] = offset
        else:
            self.unwritten.pop(filename, None)

    def write_unwritten(self) -> None:
        """Write what the disk refused before (``OSError`` if it refuses again)."""
        for filename, offset in list(self.unwritten.items()):
            self.write(filename, offset)
            del self.unwritten[filename]

    def pull_back(self, filename: str, offset: int) -> None:
        """Lower ``filename`` to ``offset`` if it exists and says more. As Kafka's
        maybeTruncateCheckpoint: records appended after a truncation below the cleaner's
        checkpoint are new and must be seen as dirty by its next pass."""
        if self.exists(filename) and self.read(filename) > offset:
            self.write_or_defer(filename, offset)


__all__ = ["CLEANER_CHECKPOINT_FILE", "LOG_START_FILE", "LogCheckpoints", "RECOVERY_POINT_FILE"]
