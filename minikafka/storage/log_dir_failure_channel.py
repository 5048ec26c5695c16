"""Which log directories have failed: Kafka's ``LogDirFailureChannel``.

Theory of operation
-------------------
A write that fails in a log directory (an append or a roll that hits a full disk, an fsync
that fails) is not retried into safety: Kafka takes the whole directory offline at the first
``IOException`` (``UnifiedLog.maybeHandleIOException`` ->
``LogDirFailureChannel.maybeAddOfflineLogDir``), every replica in it stops being served, and
the broker tells the controller, which moves their leadership to in-sync replicas elsewhere
and takes this broker out of their ISRs. The directory comes back only when the broker
restarts and finds it writable.

This channel is where the storage layer says so and the broker hears it. The ``LogManager``
reports a failure with ``maybe_add_offline_log_dir``; only the first failure of a directory
counts (its reason is kept, and the ``listener`` is called once), so a full disk that fails
every produce for a minute is one event, not thousands. The broker's listener must not act
inside the failing append (it runs in the middle of the replica manager's work): it asks for
a timer, and handles the failure on its own turn, as Kafka's ``LogDirFailureHandler`` thread
takes the directory from the channel's queue.

Here a broker has one log directory, so "the partitions on the offline directory" are all of
its partitions. ``offline_log_dirs`` is what the broker's heartbeat carries (Kafka's
``BrokerHeartbeatRequest.OfflineLogDirs``, which names directories by uuid; ours by name).

Never: does I/O, reads a clock, or brings a directory back online (only a new incarnation,
with a new channel, does).
"""

from __future__ import annotations

from typing import Callable


class LogDirFailureChannel:
    def __init__(self) -> None:
        self._offline: dict[str, str] = {}  # directory -> why it went offline (its first failure)
        self.listener: Callable[[str, str], None] | None = None  # (directory, reason), once per directory

    def maybe_add_offline_log_dir(self, log_dir: str, reason: str) -> bool:
        """Note that ``log_dir`` failed; True the first time (the listener is told then)."""
        if not log_dir:
            raise ValueError("an offline log directory needs a name")
        if log_dir in self._offline:
            return False
        self._offline[log_dir] = reason
        if self.listener is not None:
            self.listener(log_dir, reason)
        return True

    def has_offline_log_dir(self, log_dir: str) -> bool:
        return log_dir in self._offline

    def reason(self, log_dir: str) -> str | None:
        return self._offline.get(log_dir)

    @property
    def offline_log_dirs(self) -> tuple[str, ...]:
        return tuple(sorted(self._offline))
