"""A broker's log directory: one ``Log`` per topic-partition (Kafka's ``LogManager``).

Each partition lives in ``<log_dir>/<topic>-<partition>/``. Topic names are validated
before they become directory names, so no name can reach outside ``log_dir``.

Every log writes through the manager's ``Disk`` (``disk.py``). A write that fails in any
of them (an append or a roll on a full disk, a failed fsync) takes the whole directory
offline (``offline``, reported on ``failure_channel``, Kafka's ``LogDirFailureChannel``):
every log refuses appends until the broker restarts, and the broker stops serving its
partitions and tells the controller (``Broker``).

File descriptors: a log keeps three open (its active segment's ``.log``, ``.index`` and
``.timeindex``), so a broker hosting thousands of partitions meets the process's limit
(``ulimit -n``, RLIMIT_NOFILE). Kafka needs that limit raised too, and when it is hit its log
directory fails; here the manager stops short of it instead: it refuses to open a new log
(``KafkaStorageError``, the partition is offline on this broker) while fewer than
``fd_reserve`` descriptors would be left, so the broker keeps descriptors to accept
connections, apply metadata and delete topics (which gives them back). The count of open
descriptors (``/proc/self/fd``) is read only when an estimate nears the limit. A partition
refused this way is opened when a deleted topic gives descriptors back (the broker tries
again), or at the next start; the soft limit is first raised to the hard one, as Kafka's JVM
does.

``clean_logs`` is the log cleaner's periodic pass (Kafka's ``LogCleaner`` threads, which
wake every ``log.cleaner.backoff.ms``): every log whose ``cleanup.policy`` includes
``compact`` and that has a dirty range gets one ``LogCleaner.clean``. A log that fails is
logged and skipped, so the others are still cleaned (Kafka marks such a partition
uncleanable and leaves it alone; here it is simply tried again on the next pass).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from minikafka.errors import KafkaStorageError
from minikafka.rules import REFERENCE, Rules
from minikafka.storage.cleaner import CleanerStats, LogCleaner, is_compacted
from minikafka.storage.disk import OS_DISK, Disk, ReportingDisk
from minikafka.storage.log_dir_failure_channel import LogDirFailureChannel
from minikafka.platform import open_files, raise_open_files_limit
from minikafka.storage.log import Log, wall_clock_ms
from minikafka.storage.log_config import LogConfig
from minikafka.topic import TopicPartition

logger = logging.getLogger("minikafka.storage.cleaner")
storage_log = logging.getLogger("minikafka.storage")
FDS_PER_LOG = 3  # measured: a log holds its active segment's .log, .index and .timeindex open


# This process's limit of open files and how many it holds: see platform.py.
descriptor_limit, descriptors_in_use = raise_open_files_limit, open_files
METADATA_TOPIC = "__cluster_metadata"  # KRaft's metadata log: kept by the Raft client, never a partition


class LogManager:
    def __init__(self, log_dir: Path | str, *, clock: Callable[[], int] = wall_clock_ms, disk: Disk = OS_DISK,
                 rules: Rules = REFERENCE) -> None:
        self.log_dir = Path(log_dir)
        self.rules = rules  # every log here asks them where to roll, what to delete, where a read starts
        self.clock = clock
        # Every log here writes through it: ``disk`` (the fault injection point), and a failed
        # write or fsync is heard here (``log_dir_failed``).
        self.disk = ReportingDisk(disk, lambda why: self.log_dir_failed(f"{self.log_dir.name}: {why}"))
        self.offline: str | None = None  # why the directory went offline (its first failed write)
        self.failure_channel = LogDirFailureChannel()  # the broker listens on it
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._logs: dict[TopicPartition, Log] = {}
        self.cleaner = LogCleaner()
        self.fd_limit = descriptor_limit()
        self.fd_reserve = max(64, (self.fd_limit or 0) // 10)  # for connections, metadata and deletes
        self._fds_counted: int | None = None  # open descriptors when last counted
        self._opened_since = 0  # logs opened since
        self.short_of_fds: str | None = None  # why new logs are refused, until recheck_descriptors()

    def get_or_create_log(
        self, topic: str, partition: int, config: LogConfig | Mapping[str, Any] | None = None
    ) -> Log:
        tp = TopicPartition(topic, partition)
        log = self._logs.get(tp)
        if log is None:
            path = self.log_dir / tp.dir_name  # validates the name first
            self._check_descriptors(tp)
            log = self._logs[tp] = Log(path, config, clock=self.clock, disk=self.disk, rules=self.rules)
            self._opened_since += 1
            if self.offline is not None:
                log.offline = self.offline
        return log

    def _check_descriptors(self, tp: TopicPartition) -> None:
        if self.fd_limit is not None and self.short_of_fds is None:
            room = self.fd_limit - self.fd_reserve
            if self._fds_counted is None or self._fds_counted + (self._opened_since + 1) * FDS_PER_LOG > room:
                used = descriptors_in_use()
                if used is None:
                    self.fd_limit = None  # cannot count here: never refuse on a guess
                    return
                self._fds_counted, self._opened_since = used, 0
                if used + FDS_PER_LOG > room:
                    self.short_of_fds = (
                        f"{used} of the {self.fd_limit} files this process may open (ulimit -n) are open and "
                        f"{self.fd_reserve} are kept for connections; raise `ulimit -n` or delete topics")
                    storage_log.error("log directory %s: no more partitions can be opened: %s",
                                      self.log_dir, self.short_of_fds)
        if self.short_of_fds is not None:
            raise KafkaStorageError(f"{tp}: not opened on this broker: {self.short_of_fds}")

    def recheck_descriptors(self) -> None:
        """Count open descriptors again before the next new log (some may have been closed)."""
        self.short_of_fds = None
        self._fds_counted = None

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get(TopicPartition(topic, partition))

    def delete_log(self, topic: str, partition: int) -> None:
        """A deleted topic's partition: close it and remove its directory. As Kafka, rename
        it first (``<topic>-<p>.<n>-delete``), so a crash halfway leaves no half-deleted
        partition that the next start would try to open."""
        tp = TopicPartition(topic, partition)
        log = self._logs.pop(tp, None)
        if log is not None:
            log.crash()  # release the files; their contents are going anyway
            self.recheck_descriptors()
        path = self.log_dir / tp.dir_name
        if path.exists():
            doomed = path.with_name(f"{path.name}.{len(list(self.log_dir.iterdir()))}-delete")
            path.rename(doomed)
            shutil.rmtree(doomed, ignore_errors=True)

    def partitions_on_disk(self) -> list[TopicPartition]:
        """Every partition directory in the log dir, open or not (the broker's copy of the
        metadata log, ``__cluster_metadata-0``, is the Raft client's, not a partition)."""
        out = []
        for path in sorted(p for p in self.log_dir.iterdir() if p.is_dir()):
            try:
                tp = TopicPartition.from_dir_name(path.name)
            except ValueError:
                continue
            if tp.topic != METADATA_TOPIC:
                out.append(tp)
        return out

    def load_existing(self, configs: Mapping[str, LogConfig] | None = None) -> list[TopicPartition]:
        """Open every partition directory already on disk (a broker restarting)."""
        opened = []
        for path in sorted(p for p in self.log_dir.iterdir() if p.is_dir()):
            try:
                tp = TopicPartition.from_dir_name(path.name)
            except ValueError:
                continue  # not a partition directory
            if tp.topic == METADATA_TOPIC:
                continue
            self.get_or_create_log(tp.topic, tp.partition, (configs or {}).get(tp.topic))
            opened.append(tp)
        return opened

    def __iter__(self) -> Iterator[tuple[TopicPartition, Log]]:
        return iter(sorted(self._logs.items()))

    def clean_logs(
        self, now_ms: int | None = None, *, high_watermarks: Mapping[TopicPartition, int] | None = None
    ) -> dict[TopicPartition, CleanerStats]:
        """One cleaner pass over every compacted log with something dirty; returns what
        was done, by partition (a log with nothing to clean is not in it).

        ``now_ms`` defaults to the manager's clock. ``high_watermarks`` (by partition; a
        ``(topic, partition)`` tuple works too) caps each log's dirty range, as Kafka never
        cleans past the high watermark; a partition not in it is cleaned up to its active
        segment. An error in one log is logged and the others are still cleaned.
        """
        now = self.clock() if now_ms is None else now_ms
        done: dict[TopicPartition, CleanerStats] = {}
        for tp, log in sorted(self._logs.items()):
            if not is_compacted(log):
                continue
            hw = (high_watermarks or {}).get(tp)
            try:
                first_dirty, end = self.cleaner.dirty_range(log, now_ms=now, high_watermark=hw)
                if first_dirty >= end:
                    continue  # nothing rolled (or old enough) since the last pass
                done[tp] = self.cleaner.clean(log, now_ms=now, high_watermark=hw)
            except OSError as e:  # a full or failing disk: no traceback for every pass it lasts
                logger.error("%s: the log cleaner could not write (%s); skipping it this pass", log.name, e.strerror or e)
            except Exception:
                # One damaged log must not stop compaction of the others (__consumer_offsets
                # has 50 partitions); it will be retried on the next pass.
                logger.exception("%s: the log cleaner failed; skipping it this pass", log.name)
        return done

    @property
    def dir_name(self) -> str:
        """The directory's name as the controller hears it (a heartbeat's offline dirs)."""
        return self.log_dir.name

    def log_dir_failed(self, reason: str) -> None:
        """A write failed in this directory (its ``ReportingDisk`` says so): the first time,
        the whole directory goes offline, every log in it refuses appends from now on, and
        the failure channel tells the broker."""
        if self.offline is not None:
            return
        self.offline = reason
        storage_log.error("log directory %s is offline: %s", self.log_dir, reason)
        for log in self._logs.values():
            log.offline = log.offline or reason
        self.failure_channel.maybe_add_offline_log_dir(self.dir_name, reason)

    def flush_all(self) -> str | None:
        """Flush every log. A failed fsync (or a checkpoint write that fails) takes the
        whole directory offline, as Kafka does with a failed log dir: every log here refuses
        appends from then on. Returns why, the first time (None otherwise); a failure that
        did not come from the disk's writes (a rename refused) is logged once and tried
        again next time. An offline directory is not flushed (Kafka no longer touches it)."""
        if self.offline is not None:
            return None
        for log in self._logs.values():
            try:
                log.flush()
            except KafkaStorageError as e:
                if log.offline is not None:
                    self.log_dir_failed(f"{log.name}: {log.offline}")  # (the disk said so already)
                    return self.offline
                if log.append_failing is None:
                    log.append_failing = str(e)
                    logger.error("%s", e)
        return None

    def crash(self, *, lose_unflushed: bool = False) -> None:
        """Release every log without flushing (see ``Log.crash``)."""
        for log in self._logs.values():
            log.crash(lose_unflushed=lose_unflushed)
        self._logs.clear()

    def close(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs.clear()
