"""A run of whole batches left in a segment file: Kafka's ``FileRecords``.

Theory of operation
-------------------
A broker on the wire answers a large Fetch without reading the records into memory: the
answer carries ``FileRecords`` (a segment's open file, a position, a size) and the runtime
sends them with ``sendfile``, the kernel copying from the page cache to the socket. Thirty
fetches of 55 MiB each read into bytes took a broker to 1.7 GB and held its event loop for
seconds.

- A segment's descriptor is an ``OpenFile``, closed when nothing uses it any more: neither
  its segment nor any ``FileRecords`` still waiting to be sent. Retention or the cleaner may
  close or delete a segment while an answer naming it waits in a connection's queue; the
  answer still sends what was there when it was read (on Linux an unlinked file lives on
  while a descriptor holds it), and the number is never reused for another file meanwhile.
- A segment is cut only above what it held (a follower truncating its uncommitted tail, an
  append undone). An answer that loses bytes that way finds fewer bytes than it promised:
  ``read`` raises, and the runtime closes the connection rather than send a frame whose
  length lies, as Kafka's ``FileRecords.writeTo`` does. A consumer never reads such bytes
  (they lie above the high watermark); a follower fetches again.
- Nothing here reads a file except ``read``, which ``bytes()`` calls: the simulated world
  never builds these (its messages are bytes), and the codec keeps them as they are.
"""

from __future__ import annotations

import os
import weakref

from minikafka.errors import KafkaStorageError
from minikafka.platform import pread


class OpenFile:
    """A descriptor closed once its segment and every ``FileRecords`` of it let go."""

    __slots__ = ("fd", "__weakref__")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        weakref.finalize(self, os.close, fd)


class FileRecords:
    """``size`` bytes of whole batches at ``position`` in a segment file, unread."""

    __slots__ = ("_file", "position", "size", "where")

    def __init__(self, file: OpenFile, position: int, size: int, *, where: str) -> None:
        self._file = file
        self.position = position
        self.size = size
        self.where = where

    def __len__(self) -> int:
        return self.size

    def fileno(self) -> int:
        """For ``loop.sendfile``, which sends by descriptor and offset (its final ``lseek`` is
        harmless: segments are written with O_APPEND and read with ``pread``)."""
        return self._file.fd

    def read(self, position: int = 0, size: int | None = None) -> bytes:
        """``size`` bytes from ``position`` within these records (all of them by default)."""
        size = self.size - position if size is None else size
        data = pread(self._file.fd, size, self.position + position)
        if len(data) != size:
            raise KafkaStorageError(
                f"{self.where}: {self.size} bytes at byte {self.position} were read for an answer, "
                f"but the file was cut below them before they were sent"
            )
        return data

    def __bytes__(self) -> bytes:
        return self.read()

    def __repr__(self) -> str:
        return f"FileRecords({self.where}, position={self.position}, size={self.size})"


__all__ = ["FileRecords", "OpenFile"]
