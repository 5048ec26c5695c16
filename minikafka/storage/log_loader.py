"""Opening a log, and recovering it after a crash: Kafka's ``LogLoader``.

Theory of operation
-------------------
A log is opened from what its directory holds: segment files (``<base>.log`` and their
indexes), the checkpoints (``checkpoint.py``) and the leader-epoch file. Opening first tidies
what a crash can leave behind, then decides, segment by segment, how far to trust the bytes:

- Strays: ``*.tmp`` files (a checkpoint replaced halfway) go. A cleaner that crashed
  (``cleaner.py``): a ``.cleaned`` file may be half written (the old segment is still whole),
  so it goes; a ``.swap`` file was complete when it got that name (the commit point), so the
  swap is finished (``complete_swap``). An index whose log is gone goes.
- Segments wholly below the recovery point are trusted: their indexes are reused, or rebuilt
  from batch headers. Damage found there is reported (``problems``), never cut: it is not a
  crash's doing.
- From the recovery point on, every batch is re-read and its CRC checked; the first torn or
  corrupt batch and everything after it (later segments too) are cut off and reported.
  Nothing below the recovery point is ever cut.
- The leader-epoch cache is trimmed to what is left, and rewritten from the epochs of the
  batches recovery read (they are the truth; the file may be behind them).
- Then what recovery kept is flushed, so the recovery point moves to the end. A new, empty
  log syncs nothing (its checkpoints read as 0 if lost anyway).

What it found is a ``RecoveryReport`` (``Log.last_recovery``). This is hardening, not the
lesson of notebook 01: ``log.py`` calls ``LogLoader(log).load()`` once, from ``Log.__init__``.
It reads the log's parts and sets them (segments, offsets, epoch cache); it reads no clock
but the log's, and touches no file outside the log's directory.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minikafka.errors import KafkaStorageError
from minikafka.platform import fsync_dir
from minikafka.storage.checkpoint import LOG_START_FILE, RECOVERY_POINT_FILE
from minikafka.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, filename_prefix

logger = logging.getLogger("minikafka.storage")

# The log cleaner (cleaner.py) writes a cleaned segment to ``<base>.log.cleaned``, renames
# it to ``<base>.log.swap`` (the commit point) and then replaces ``<base>.log`` with it.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


def complete_swap(dir: Path, base: int) -> None:
    """Put ``<base>.log.swap`` in place of ``<base>.log`` (the cleaner's last step, also
    redone by recovery). The old indexes go first: they point into the old file, and
    a missing index is rebuilt on open, whereas a stale one would mislead reads."""
    prefix = filename_prefix(base)
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        (dir / f"{prefix}{suffix}").unlink(missing_ok=True)
    os.replace(dir / f"{prefix}{LOG_SUFFIX}{SWAP_SUFFIX}", dir / f"{prefix}{LOG_SUFFIX}")
    fsync_dir(dir)


@dataclass
class RecoveryReport:
    """What opening the log found and did; empty lists mean a clean start."""

    recovery_point: int = 0
    segments_scanned: list[int] = field(default_factory=list)
    bytes_scanned: int = 0
    indexes_rebuilt: list[int] = field(default_factory=list)
    truncated: list[tuple[int, int, str]] = field(default_factory=list)  # (segment, bytes cut, why)
    segments_deleted: list[int] = field(default_factory=list)
    problems: list[tuple[int, str]] = field(default_factory=list)  # damage below the recovery point
    swaps_completed: list[int] = field(default_factory=list)  # cleaner swaps a crash interrupted
    cleaned_discarded: list[int] = field(default_factory=list)  # half-written cleaner output

    @property
    def clean(self) -> bool:
        return not (self.truncated or self.segments_deleted)


class LogLoader:
    """Opens ``log`` (a ``Log`` of log.py whose directory, checkpoints and epoch cache are
    set, with no segments yet): ``load()`` adds its segments and returns what it found."""

    def __init__(self, log: Any) -> None:
        self.log = log

    def load(self) -> RecoveryReport:
        log = self.log
        report = RecoveryReport(recovery_point=log.recovery_point)
        recovered_epochs: list[tuple[int, int]] = []  # (epoch, first offset) of the batches recovery read
        for stray in log.dir.glob("*.tmp"):
            stray.unlink()
        # A cleaner that crashed: a ``.cleaned`` file may be half written (the old segment
        # is still whole), so it goes; a ``.swap`` file was complete when it got that name,
        # so the swap is finished.
        for stray in log.dir.glob(f"*{LOG_SUFFIX}{CLEANED_SUFFIX}"):
            report.cleaned_discarded.append(int(stray.name.split(".")[0]))
            stray.unlink()
            logger.warning("%s: deleted unfinished cleaner output %s", log.name, stray.name)
        for swap in sorted(log.dir.glob(f"*{LOG_SUFFIX}{SWAP_SUFFIX}")):
            base = int(swap.name.split(".")[0])
            complete_swap(log.dir, base)
            report.swaps_completed.append(base)
            logger.warning("%s: completed the cleaner's interrupted swap of segment %d", log.name, base)
        bases = sorted(int(p.name[: -len(LOG_SUFFIX)]) for p in log.dir.glob(f"*{LOG_SUFFIX}") if p.name[:-4].isdigit())
        for suffix in (".index", ".timeindex"):  # an index whose log is gone
            for p in log.dir.glob(f"*{suffix}"):
                if p.name[: -len(suffix)].isdigit() and int(p.name[: -len(suffix)]) not in bases:
                    p.unlink()
        for i, base in enumerate(bases):
            segment = log._new_segment_object(base)
            if report.truncated:  # an earlier segment was cut: everything after it goes
                segment.delete()
                report.segments_deleted.append(base)
                continue
            log._add_segment(segment)
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            if next_base is not None and next_base <= log.recovery_point:
                # Wholly below the recovery point: trusted, never cut. A problem here is
                # damage after the fact (not a crash); say so and leave the bytes alone.
                result = segment.load()
                if result and result.problem:
                    report.problems.append((base, result.problem))
                    logger.error("%s: flushed segment %d is damaged: %s", log.name, base, result.problem)
                elif result:
                    report.indexes_rebuilt.append(base)
                continue
            start = 0
            if base <= log.recovery_point and segment.indexes_look_sane():
                # Holds the recovery point: walk the headers past the last index entry;
                # if nothing lies beyond the recovery point (a clean shutdown), done.
                if segment.load() is None and segment.next_offset <= log.recovery_point:
                    continue
                start = segment.offset_index.lookup(log.recovery_point)[1]
            elif base <= log.recovery_point:
                report.indexes_rebuilt.append(base)
            # Batches below the recovery point were flushed: walk them, but only batches
            # that may hold unflushed bytes are judged by their CRC (and can be cut).
            result = segment.recover(start, verify_from_offset=log.recovery_point)
            recovered_epochs += result.epochs
            report.segments_scanned.append(base)
            report.bytes_scanned += result.valid_bytes - start
            if result.truncated_bytes:
                report.truncated.append((base, result.truncated_bytes, result.problem or ""))
                logger.warning(
                    "%s: recovery cut %d bytes from segment %d: %s",
                    log.name, result.truncated_bytes, base, result.problem,
                )
        fresh = not bases and not any((log.dir / f).exists() for f in (RECOVERY_POINT_FILE, LOG_START_FILE))
        if not log.segments:
            log._add_segment(log._new_segment_object(max(log.log_start_offset, log.recovery_point)))
        log.log_start_offset = max(log.log_start_offset, log.segments[0].base_offset)
        if log.active_segment.size == 0 and log.active_segment.base_offset < log.log_start_offset:
            log._replace_with_empty(log.log_start_offset)
        log.leader_epoch_cache.truncate_from_end(log.log_end_offset)  # recovery may have cut
        if recovered_epochs:
            # As Kafka's recovery: the batches it read say which epoch wrote them. From the
            # first of them on, they are the truth, and the file may be behind them (a full
            # disk refused a write since the last flush, which writes it before moving the
            # recovery point past them): they replace its entries there, before the flush
            # below moves the recovery point.
            log.leader_epoch_cache.replace_from_batches(recovered_epochs)
        log.leader_epoch_cache.truncate_from_start(log.log_start_offset)
        if fresh:
            # A new log: nothing was on disk, so nothing to force to disk; the checkpoints
            # (both 0) are written but not synced, as their loss reads as 0 too. Five fsyncs
            # per log made a 2,000-partition CreateTopics hold each broker's event loop for
            # seconds (Kafka syncs nothing either when it creates a log).
            log.checkpoints.write_or_defer(RECOVERY_POINT_FILE, log.recovery_point, durable=False)
            log.checkpoints.write_or_defer(LOG_START_FILE, log.log_start_offset, durable=False)
            log._checkpointed = log.recovery_point
            return report
        try:
            log.flush()  # what recovery kept is now durable, and the checkpoint says so
            log.checkpoints.write_or_defer(LOG_START_FILE, log.log_start_offset)
        except (KafkaStorageError, OSError) as e:
            # Opened on a failing disk: the log still opens (to be read), and is offline
            # if its fsync failed; the recovery point stays where it was.
            logger.error("%s: could not make what recovery kept durable: %s", log.name, e)
        return report


__all__ = ["CLEANED_SUFFIX", "SWAP_SUFFIX", "LogLoader", "RecoveryReport", "complete_swap"]
