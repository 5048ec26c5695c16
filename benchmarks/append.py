"""Log.append throughput against a raw sequential write of the same bytes, and the cost of
validating each batch first (``LogValidator``, as the broker does for every client append)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from tqdm import tqdm

from minikafka.storage import Log, LogConfig, LogValidator

from benchmarks.common import (
    VALUE_BYTES, KiB, MB, MiB, Section, batches_for, fig, med, met, runs, size_label, template_batch,
)

BATCH_SIZES = [1 * KiB, 4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, 1 * MiB]
TARGET_RATIO = 0.5  # of raw, for batches of TARGET_FROM bytes and up
TARGET_FROM = 16 * KiB


def time_log(path: Path, batches: list[bytes], config: LogConfig, validate: bool = False) -> tuple[float, float]:
    """Seconds to append every batch, and to append them and flush (fsync) the log. With
    ``validate``, each batch first goes through ``LogValidator`` (the broker's client path)."""
    log = Log(path, config)
    validator = LogValidator(max_message_bytes=config.max_message_bytes)
    start = time.perf_counter()
    if validate:
        for batch in batches:
            validator.validate(batch)
            log.append(batch)
    else:
        for batch in batches:
            log.append(batch)
    appended = time.perf_counter()
    log.flush()
    flushed = time.perf_counter()
    log.close()
    shutil.rmtree(path)
    return appended - start, flushed - start


def time_raw(path: Path, batches: list[bytes]) -> tuple[float, float]:
    """The same for plain os.write calls of the same bytes to one file in the same directory."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    start = time.perf_counter()
    for batch in batches:
        os.write(fd, batch)
    written = time.perf_counter()
    os.fsync(fd)
    synced = time.perf_counter()
    os.close(fd)
    os.unlink(path)
    return written - start, synced - start


def run(scratch: Path, quick: bool, repeats: int) -> Section:
    total = 8 * MiB if quick else 256 * MiB
    segment_bytes = total // 4  # so that every run rolls segments too
    config = LogConfig(segment_bytes=segment_bytes, max_message_bytes=2 * MiB)
    rows, targets = [], []
    bar = tqdm(total=len(BATCH_SIZES) * repeats, desc="append", unit="run", leave=False)
    for target in BATCH_SIZES:
        template, per_batch = template_batch(target)
        batches = batches_for(template, total)
        nbytes, nrecords = len(batches) * len(template), len(batches) * per_batch
        log_mbs, raw_mbs, log_rps, ratio, ratio_sync = [], [], [], [], []
        checked_mbs, checked_ratio = [], []
        for r in range(repeats):  # rotate which side goes first
            sides = ["raw", "log", "checked"][r % 3:] + ["raw", "log", "checked"][: r % 3]
            t = {}
            for side in sides:
                if side == "log":
                    t[side] = time_log(scratch / "append-0", batches, config)
                elif side == "checked":
                    t[side] = time_log(scratch / "append-0", batches, config, validate=True)
                else:
                    t[side] = time_raw(scratch / "raw.bin", batches)
            checked_mbs.append(nbytes / t["checked"][0] / MB)
            checked_ratio.append(t["log"][0] / t["checked"][0])
            log_mbs.append(nbytes / t["log"][0] / MB)
            raw_mbs.append(nbytes / t["raw"][0] / MB)
            log_rps.append(nrecords / t["log"][0])
            ratio.append(t["raw"][0] / t["log"][0])
            ratio_sync.append(t["raw"][1] / t["log"][1])
            bar.update()
        rows.append([
            size_label(target), f"{len(template):,}", f"{per_batch:,}", f"{nbytes / MB:,.0f}",
            fig(log_mbs), fig(log_rps), fig(raw_mbs), fig(ratio, "{:.2f}"), fig(ratio_sync, "{:.2f}"),
            fig(checked_mbs), fig(checked_ratio, "{:.2f}"),
        ])
        if target >= TARGET_FROM:
            targets.append((
                f"append at {size_label(target)} batches >= {TARGET_RATIO} of raw",
                f"{med(ratio):.2f}", met(med(ratio) >= TARGET_RATIO),
            ))
        del batches
    bar.close()
    return Section(
        name="append",
        title="1. Log append throughput against a raw sequential write",
        method=[
            f"Batches of about each size hold {VALUE_BYTES}-byte values (no key, no compression), built "
            "with `RecordBatch.build` and given increasing timestamps (1 ms apart) *before* timing; "
            f"{total // MiB} MiB per run and batch size.",
            "**Log**: `Log.append(batch_bytes)` for every batch into a fresh `Log` "
            f"(`segment_bytes` {size_label(segment_bytes)}, so each run rolls segments; "
            "`index_interval_bytes` 4096; `max_message_bytes` 2 MiB). "
            "**Raw**: `os.write(fd, batch_bytes)` of the same bytes, in the same order, to one file "
            "(`O_APPEND`) in the same directory.",
            "**No fsync per append on either side.** The MB/s and records/s columns time the appends "
            "alone (the data reaches the page cache); the last column also includes one final flush "
            "(`Log.flush()` against `os.fsync`), which is mostly the disk's write speed.",
            "**Validated**: `LogValidator.validate(batch)` (every record decoded, as the broker does for a "
            "client's Produce) and then `Log.append(batch)`, into a fresh log again; the last column is log time / "
            "validated time in the same run (1.00 = validation costs nothing).",
            f"{runs(repeats)} per size, rotating which side goes first; ratio = raw time / log time "
            "within each run (so > 1 would mean the log is faster). Median (min–max).",
        ],
        columns=[
            "Batch", "Batch bytes", "Records/batch", "MB per run", "Log MB/s", "Log records/s",
            "Raw MB/s", "Log/raw (no fsync)", "Log/raw (incl. final fsync)", "Validated + log MB/s",
            "Log/validated",
        ],
        rows=rows,
        targets=targets,
    )
