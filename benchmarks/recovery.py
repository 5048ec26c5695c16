"""Opening a ~1 GB log after a crash: a torn tail past the recovery point, then no recovery point."""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import time
import traceback
from pathlib import Path

from tqdm import tqdm

from minikafka.storage import Log, LogConfig
from minikafka.storage.log import RECOVERY_POINT_FILE

from benchmarks.common import (
    KiB, MB, MiB, Section, drop_page_cache, fig, med, met, runs, size_label, stamped, template_batch,
)

BATCH = 64 * KiB
TARGET_SECONDS = 2.0
CONFIG = LogConfig()  # Kafka's defaults: segment.bytes 1 GiB, index.interval.bytes 4096


def _crash_after(path: Path, template: bytes, flushed: int, unflushed: int, start_ms: int) -> None:
    """In a forked child: append ``flushed`` bytes of batches, flush, append ``unflushed``
    bytes more, then die without closing anything (os._exit: Python's buffered index
    writes are lost, as in a crash)."""
    try:
        log = Log(path, CONFIG)
        if flushed:
            count = flushed // len(template)
            for batch in tqdm(stamped(template, flushed, start_ms), total=count, desc="building the log",
                              unit="batch", leave=False, disable=count < 1000):
                log.append(batch)
            log.flush()
        if unflushed:
            for batch in stamped(template, unflushed, start_ms):
                log.append(batch)
        os._exit(0)
    except BaseException:
        traceback.print_exc()
        os._exit(1)


def crash(path: Path, template: bytes, flushed: int, unflushed: int, start_ms: int = 0) -> None:
    args = (path, template, flushed, unflushed, start_ms)
    child = multiprocessing.get_context("fork").Process(target=_crash_after, args=args)
    child.start()
    child.join()
    if child.exitcode != 0:
        raise RuntimeError(f"the child writing the log failed (exit code {child.exitcode})")


def tear_last_batch(path: Path, batch_bytes: int) -> int:
    """Cut the last batch of the last segment in half, as a torn write would; bytes removed
    (recovery must then cut the other half)."""
    last = max(path.glob("*.log"))
    cut = batch_bytes // 2
    os.truncate(last, last.stat().st_size - cut)
    return cut


def time_open(path: Path) -> tuple[float, Log]:
    start = time.perf_counter()
    log = Log(path, CONFIG)
    return time.perf_counter() - start, log


def run(scratch: Path, quick: bool, repeats: int) -> Section:
    logging.getLogger("minikafka.storage").setLevel(logging.ERROR)  # the cuts are reported below
    total = 32 * MiB if quick else 1000 * MiB
    tail = 2 * MiB if quick else 4 * MiB
    template, _ = template_batch(BATCH)
    path = scratch / "recovery-0"
    crash(path, template, total, 0)  # the flushed ~1 GB (not timed)
    rows, tail_times, full_times, cold = [], [], [], True
    for r in tqdm(range(repeats), desc="recovery", unit="run", leave=False):
        # A fresh torn tail each run: the log is clean (flushed) after the previous open.
        # Timestamps go on increasing, by less than segment.ms (a jump would roll a segment).
        crash(path, template, 0, tail, start_ms=(r + 1) * 1_000_000)
        removed = tear_last_batch(path, len(template))
        cold &= not quick and drop_page_cache()  # a smoke test leaves the machine's cache alone
        seconds, log = time_open(path)
        report = log.last_recovery
        cut_by_recovery = sum(n for _, n, _ in report.truncated)
        rows.append([
            f"tail (run {r + 1})", f"{seconds:.3f}", f"{report.bytes_scanned / MB:,.1f}",
            f"{removed:,}", f"{cut_by_recovery:,}", str(len(report.segments_scanned)),
        ])
        tail_times.append(seconds)
        log.close()
    for r in range(repeats):
        (path / RECOVERY_POINT_FILE).unlink()
        cold &= not quick and drop_page_cache()
        seconds, log = time_open(path)
        report = log.last_recovery
        rows.append([
            f"full, no recovery point (run {r + 1})", f"{seconds:.3f}",
            f"{report.bytes_scanned / MB:,.1f}", "0", f"{sum(n for _, n, _ in report.truncated):,}",
            str(len(report.segments_scanned)),
        ])
        full_times.append(seconds)
        log.close()
    size = sum(p.stat().st_size for p in path.glob("*.log"))
    segments = len(list(path.glob("*.log")))
    shutil.rmtree(path)
    rows.append(["**tail, median (min–max)**", fig(tail_times, "{:.3f}"), "", "", "", ""])
    rows.append(["**full, median (min–max)**", fig(full_times, "{:.3f}"), "", "", "", ""])
    return Section(
        name="recovery",
        title="3. Recovery of a 1 GB log with a torn tail",
        method=[
            f"A log of {total // MiB} MiB in {size_label(BATCH)} batches with Kafka's default `LogConfig` "
            f"(`segment_bytes` {size_label(CONFIG.segment_bytes)}: one segment; `index_interval_bytes` "
            f"{CONFIG.index_interval_bytes}), written and `flush()`ed by a child process, so the recovery "
            f"point is at its end. Final size {size / MB:,.0f} MB in {segments} segment(s).",
            f"Each run: a child process opens the log, appends {tail // MiB} MiB more *without* flushing "
            "and dies with `os._exit` (its buffered index writes are lost, as in a crash); the last "
            "batch is then cut in half with `os.truncate`; then `os.sync()` and "
            + ("the page cache is dropped (`/proc/sys/vm/drop_caches`: worked, so reads are cold). "
               if cold else "the page cache is *not* dropped (--quick) so reads are warm. " if quick
               else "an attempt to drop the page cache *failed* (not root?), so reads are warm. ")
            + "Timed: `Log(dir)`, i.e. open + recovery + the final flush and checkpoint writes.",
            "**tail**: the recovery point checkpoint is kept: only the batches after it are CRC-checked. "
            "**full**: the recovery point checkpoint is deleted first, so every batch of the "
            "log is re-read and CRC-checked (the torn tail was already cut by then).",
            f"MB scanned is `log.last_recovery.bytes_scanned`; bytes cut is the sum of "
            f"`log.last_recovery.truncated`. {runs(repeats)} each, median (min–max) at the end. "
            "Dropping the cache empties only this kernel's page cache: on a virtual machine the host "
            "may still cache the file, so the first full run is the coldest one.",
        ],
        columns=["Open", "Seconds", "MB scanned", "Bytes removed by os.truncate", "Bytes cut by recovery",
                 "Segments scanned"],
        rows=rows,
        targets=[(
            f"tail recovery of a 1 GB log < {TARGET_SECONDS:g} s",
            f"{med(tail_times):.3f} s", met(med(tail_times) < TARGET_SECONDS),
        )],
    )
