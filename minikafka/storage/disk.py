"""The system calls log files are written with, and the place to break them: ``Disk``.

Theory of operation
-------------------
Every file in a log directory is written and fsynced through a ``Disk`` (one per log
directory, held by the ``LogManager`` and handed to every ``Log``, and to the broker's
metadata log): segments and indexes, and the small files replaced whole (checkpoints, the
leader-epoch file, the quorum state) by ``replace_file``. The default one is the OS itself. It is
the storage layer's *fault injection point*, as the simulated network is the runtime's:
the simulated cluster keeps one ``Disk`` per broker machine (it outlives the broker's
crashes, as a real disk does) and its campaign fills it up or makes its fsyncs fail at
seeded times; tests do the same. A real full disk (a small tmpfs) behaves the same way
through the default ``Disk``, which is how the real-process test gets ENOSPC.

- ``full``: a write lands *part* of its bytes and then fails with ENOSPC, as Linux does
  when the space runs out in the middle of a ``writev``; what is in the file then is
  exactly what a real full disk leaves, so the code that cuts it back is tested for real.
- ``fsync_fails``: ``fsync`` fails with EIO, as after a lost write-back. Linux may already
  have dropped the dirty pages and a later fsync may succeed without them, so a failed
  fsync cannot be retried into safety (PostgreSQL's "fsyncgate"); ``Log.flush`` reports
  it as fatal, and the broker takes its log directory offline (see ``Broker``).

A ``LogManager`` hands its logs a ``ReportingDisk`` over its ``Disk``: the same calls, but a
write or fsync that fails is reported (to the manager, which takes the whole log directory
offline, as Kafka does at the first ``IOException``; see ``log_dir_failure_channel.py``)
before it is raised to the log, which handles it as it always does. A log on its own (a
test, the broker's metadata log) writes through a plain ``Disk`` and reports to nobody.

Never: a ``Disk`` holds no data and reads nothing; freeing space is the caller's decision
(``full = False``), never a side effect.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Callable, Sequence

from minikafka.platform import O_BINARY, fsync_dir, writev


class Disk:
    """Pass-through to the OS, unless told to fail (``full``, ``fsync_fails``)."""

    def __init__(self, name: str = "disk") -> None:
        self.name = name
        self.full = False
        self.fsync_fails = False

    def writev(self, fd: int, pieces: Sequence[bytes | memoryview]) -> int:
        if self.full:
            self._fill_up(fd, pieces)
        return writev(fd, pieces)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if self.full:
            self._fill_up(fd, [data])
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        if self.fsync_fails:
            raise OSError(errno.EIO, f"Input/output error (fsync on {self.name}, injected)")
        os.fsync(fd)

    def write_file(self, path: Path, data: bytes, *, durable: bool = True) -> None:
        """Create (or empty) ``path`` and write ``data`` to it, fsynced if ``durable``. A
        failed write or fsync removes the file and raises ``OSError``."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | O_BINARY, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[self.write(fd, view):]
            if durable:
                self.fsync(fd)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        os.close(fd)

    def replace_file(self, path: Path, data: bytes, *, durable: bool = True) -> None:
        """Make ``data`` the whole of ``path``, or leave ``path`` as it was (``OSError``): a
        temporary file written by ``write_file``, then renamed over ``path``."""
        tmp = path.with_name(path.name + ".tmp")
        self.write_file(tmp, data, durable=durable)
        os.replace(tmp, path)  # atomic: a crash leaves the old file or the new one

    def sync_dir(self, path: Path) -> None:
        """Make the entries of directory ``path`` durable (a file created or renamed there
        survives a power loss): ``minikafka.platform.fsync_dir``, nothing where a directory
        cannot be opened (Windows)."""
        fsync_dir(path)

    def _fill_up(self, fd: int, pieces: Sequence[bytes | memoryview]) -> None:
        first = bytes(pieces[0]) if pieces else b""
        if len(first) > 1:
            os.write(fd, first[: len(first) // 2])  # what fitted before the space ran out
        raise OSError(errno.ENOSPC, f"No space left on device ({self.name} is full, injected)")

    def __repr__(self) -> str:
        state = [s for s, on in (("full", self.full), ("fsync fails", self.fsync_fails)) if on]
        return f"Disk({self.name!r}{', ' + ', '.join(state) if state else ''})"


class ReportingDisk(Disk):
    """``inner``'s calls, unchanged; a write or fsync that fails calls ``on_error(reason)``
    first, then raises as before. Its ``full`` and ``fsync_fails`` are ``inner``'s."""

    def __init__(self, inner: Disk, on_error: Callable[[str], None]) -> None:  # (no Disk.__init__: no flags of its own)
        self.inner = inner
        self.name = inner.name
        self.on_error = on_error

    full = property(lambda self: self.inner.full, lambda self, v: setattr(self.inner, "full", v))
    fsync_fails = property(lambda self: self.inner.fsync_fails, lambda self, v: setattr(self.inner, "fsync_fails", v))

    def writev(self, fd: int, pieces: Sequence[bytes | memoryview]) -> int:
        try:
            return self.inner.writev(fd, pieces)
        except OSError as e:
            self.on_error(f"a write failed: {e.strerror or e}")
            raise

    def write(self, fd: int, data: bytes | memoryview) -> int:
        try:
            return self.inner.write(fd, data)
        except OSError as e:
            self.on_error(f"a write failed: {e.strerror or e}")
            raise

    def fsync(self, fd: int) -> None:
        try:
            self.inner.fsync(fd)
        except OSError as e:
            self.on_error(f"an fsync failed: {e.strerror or e}")
            raise

    def __repr__(self) -> str:
        return f"ReportingDisk({self.inner!r})"


OS_DISK = Disk("os")  # the default: nothing injected (never set its flags; make your own Disk)
