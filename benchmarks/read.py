"""Sequential Log.read throughput against a raw sequential read of the same files."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from tqdm import tqdm

from minikafka.storage import Log, LogConfig

from benchmarks.append import BATCH_SIZES
from benchmarks.common import MB, MiB, Section, batches_for, fig, runs, size_label, template_batch

READ_BYTES = 1 * MiB  # Log.read's max_bytes, and the raw side's chunk size


def time_log(log: Log, batch_bytes: int, per_batch: int) -> tuple[float, int]:
    """Read from offset 0 to the end, 1 MiB at a time, as a consumer would; (seconds, bytes).

    Every batch has the same size, so the next offset follows from the bytes returned
    without decoding anything: what is timed is the log's work, not a client's."""
    offset, end, total = log.log_start_offset, log.log_end_offset, 0
    start = time.perf_counter()
    while offset < end:
        n = len(log.read(offset, READ_BYTES))
        total += n
        offset += n // batch_bytes * per_batch
    return time.perf_counter() - start, total


def time_raw(files: list[Path]) -> tuple[float, int]:
    """os.read of the same segment files, in order, in chunks of the same size."""
    total = 0
    start = time.perf_counter()
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        while chunk := os.read(fd, READ_BYTES):
            total += len(chunk)
        os.close(fd)
    return time.perf_counter() - start, total


def run(scratch: Path, quick: bool, repeats: int) -> Section:
    total = 8 * MiB if quick else 256 * MiB
    config = LogConfig(segment_bytes=total // 4, max_message_bytes=2 * MiB)
    rows = []
    bar = tqdm(total=len(BATCH_SIZES) * (repeats + 1), desc="read", unit="step", leave=False)
    for target in BATCH_SIZES:
        template, per_batch = template_batch(target)
        path = scratch / "read-0"
        with Log(path, config) as log:
            for batch in batches_for(template, total):
                log.append(batch)
        bar.update()
        log = Log(path, config)
        files = [s.log_path for s in log.segments]
        log_mbs, log_rps, raw_mbs, ratio = [], [], [], []
        for r in range(repeats):
            sides = ["raw", "log"] if r % 2 == 0 else ["log", "raw"]
            t = {}
            for side in sides:
                t[side] = time_log(log, len(template), per_batch) if side == "log" else time_raw(files)
            assert t["log"][1] == t["raw"][1] == log.size_in_bytes, (t, log.size_in_bytes)
            nbytes = t["log"][1]
            log_mbs.append(nbytes / t["log"][0] / MB)
            log_rps.append(nbytes // len(template) * per_batch / t["log"][0])
            raw_mbs.append(nbytes / t["raw"][0] / MB)
            ratio.append(t["raw"][0] / t["log"][0])
            bar.update()
        rows.append([
            size_label(target), f"{len(template):,}", f"{nbytes / MB:,.0f}",
            fig(log_mbs), fig(log_rps), fig(raw_mbs), fig(ratio, "{:.2f}"),
        ])
        log.close()
        shutil.rmtree(path)
    bar.close()
    return Section(
        name="read",
        title="2. Sequential read throughput against a raw sequential read",
        method=[
            f"A log of {total // MiB} MiB per batch size, written as in benchmark 1 "
            f"(`segment_bytes` {size_label(total // 4)}), closed and reopened.",
            f"**Log**: `Log.read(offset, max_bytes={size_label(READ_BYTES)})` in a loop from offset 0 "
            "to the log end, each read starting at the offset after the last batch returned. "
            f"**Raw**: `os.read(fd, {size_label(READ_BYTES)})` over the same segment files, in order.",
            "Both read from the page cache (the files were just written; no cache drop), so this "
            "compares the CPU cost per byte, not the disk.",
            f"{runs(repeats)} per size, alternating which side goes first; ratio = raw time / log time "
            "within each run. Median (min–max). No target was set for reads.",
        ],
        columns=["Batch", "Batch bytes", "MB read", "Log MB/s", "Log records/s", "Raw MB/s", "Log/raw"],
        rows=rows,
    )
