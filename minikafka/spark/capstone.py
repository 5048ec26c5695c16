"""The capstone's helpers (notebook 10): answers to check a Spark pipeline against, and batch replays.

Theory of operation
-------------------
Notebook 10 runs a Structured Streaming pipeline over the truck fleet (``minikafka.datasets``)
and needs two things that are not Spark lessons in themselves, so they live here:

- **References in plain Python.** ``windowed_reference`` computes what a windowed aggregation
  of the fleet's reports must give (reports and average speed per truck per tumbling event-time
  window), and ``speeding_reference`` the reports above a speed limit. They read the reports
  themselves (``truck_positions(...)``, or decoded record values), not Spark, so a Spark result
  that matches them is right for a reason independent of Spark. Windows are aligned as Spark
  aligns tumbling windows: on multiples of the window length since the epoch (UTC).
- **Checkpoint surgery.** A query's checkpoint keeps an *offset log* (``offsets/N``: the source
  offsets batch N covers, written before the batch runs) and a *commit log* (``commits/N``,
  written after batch N's sink returned). ``checkpoint_batches`` lists both.
  ``forget_last_commit`` deletes the newest commit-log entry, which puts the checkpoint in the
  state a crash leaves after the sink wrote batch N and before Spark recorded it as done: on
  its next start the query runs batch N again, with the same id and the same offsets. That is
  the replay an exactly-once sink must survive, made deterministic for a notebook.
  ``batch_offsets`` reads a batch's source offsets back from the offset log.

Invariants: nothing here talks to Spark or to a broker; the checkpoint helpers only read and
delete files of a query that is not running (Spark's file names: ``N`` and ``.N.crc``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping

__all__ = [
    "REPORT_SCHEMA",
    "windowed_reference",
    "speeding_reference",
    "sliding_reference",
    "positions_reference",
    "checkpoint_batches",
    "batch_offsets",
    "forget_last_commit",
]

# A truck report's JSON (minikafka.datasets.encode_report) as a Spark DDL schema.
REPORT_SCHEMA = ("truck_id string, timestamp_ms long, lat double, lon double, "
                 "speed_kmh double, heading_deg double")


def _reports(reports: Iterable[Any]) -> Iterable[Mapping[str, Any]]:
    """Report dicts from dicts, or from JSON record values (bytes or str)."""
    for report in reports:
        yield json.loads(report) if isinstance(report, (bytes, bytearray, str)) else report


def windowed_reference(reports: Iterable[Any], window_ms: int = 60_000) -> dict[tuple[int, str], tuple[int, float]]:
    """``{(window_start_ms, truck_id): (reports, average speed_kmh)}`` over tumbling windows.

    >>> windowed_reference([{"truck_id": "t", "timestamp_ms": 61_000, "speed_kmh": 50.0},
    ...                     {"truck_id": "t", "timestamp_ms": 119_999, "speed_kmh": 70.0}])
    {(60000, 't'): (2, 60.0)}
    """
    if not isinstance(window_ms, int) or window_ms <= 0:
        raise ValueError(f"window_ms must be a positive int, not {window_ms!r}")
    speeds: dict[tuple[int, str], list[float]] = {}
    for r in _reports(reports):
        start = r["timestamp_ms"] // window_ms * window_ms
        speeds.setdefault((start, r["truck_id"]), []).append(float(r["speed_kmh"]))
    return {key: (len(v), math.fsum(v) / len(v)) for key, v in sorted(speeds.items())}


def speeding_reference(reports: Iterable[Any], limit_kmh: float) -> list[tuple[str, int, float]]:
    """The reports strictly above ``limit_kmh``, as sorted (truck_id, timestamp_ms, speed_kmh)."""
    return sorted((r["truck_id"], r["timestamp_ms"], float(r["speed_kmh"]))
                  for r in _reports(reports) if r["speed_kmh"] > limit_kmh)


def sliding_reference(reports: Iterable[Any], size_ms: int = 300_000,
                      slide_ms: int = 60_000) -> dict[tuple[int, str], tuple[int, float]]:
    """``{(window_start_ms, truck_id): (reports, top speed_kmh)}`` over sliding windows of
    ``size_ms`` every ``slide_ms``: a report is in every window whose start is a multiple of
    ``slide_ms`` in ``(t - size_ms, t]``.

    >>> sliding_reference([{"truck_id": "t", "timestamp_ms": 125_000, "speed_kmh": 50.0}], 180_000, 60_000)
    {(120000, 't'): (1, 50.0), (60000, 't'): (1, 50.0), (0, 't'): (1, 50.0)}
    """
    windows: dict[tuple[int, str], tuple[int, float]] = {}
    for r in _reports(reports):
        t = r["timestamp_ms"]
        for start in range(t // slide_ms * slide_ms, t - size_ms, -slide_ms):  # every window holding t
            n, top = windows.get((start, r["truck_id"]), (0, float("-inf")))
            windows[(start, r["truck_id"])] = (n + 1, max(top, float(r["speed_kmh"])))
    return windows


def positions_reference(reports: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """Each truck's newest report (the largest ``timestamp_ms``) as ``{truck_id: {timestamp_ms,
    lat, lon}}``: the table a compacted topic keyed by truck holds."""
    newest: dict[str, Mapping[str, Any]] = {}
    for r in _reports(reports):
        if r["truck_id"] not in newest or r["timestamp_ms"] > newest[r["truck_id"]]["timestamp_ms"]:
            newest[r["truck_id"]] = r
    return {truck: {"timestamp_ms": r["timestamp_ms"], "lat": r["lat"], "lon": r["lon"]}
            for truck, r in sorted(newest.items())}


def _log_ids(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def checkpoint_batches(checkpoint: str | Path) -> dict[str, list[int]]:
    """The batch ids in a checkpoint's offset log (planned) and commit log (done)."""
    root = Path(checkpoint)
    return {"offsets": _log_ids(root / "offsets"), "commits": _log_ids(root / "commits")}


def batch_offsets(checkpoint: str | Path, batch_id: int) -> dict:
    """The source offsets batch ``batch_id`` ends at, as its offset-log entry records them
    (one source: ``{topic: {partition: offset}}``, the format of Spark's Kafka source)."""
    entry = Path(checkpoint) / "offsets" / str(batch_id)
    if not entry.is_file():
        raise FileNotFoundError(f"batch {batch_id} is not in the offset log of {checkpoint}")
    lines = entry.read_text().splitlines()
    # "v1", then the batch's metadata (watermark, timestamp, conf), then one line per source.
    sources = [json.loads(line) for line in lines[2:] if line.strip()]
    return sources[0] if len(sources) == 1 else sources


def forget_last_commit(checkpoint: str | Path) -> int:
    """Delete the newest commit-log entry; return its batch id. The query must be stopped.

    The next start of the query runs that batch again (same id, same offsets): the state a
    crash between the sink's write and Spark's commit leaves behind.
    """
    root = Path(checkpoint) / "commits"
    ids = _log_ids(root)
    if not ids:
        raise ValueError(f"the checkpoint {checkpoint} has no committed batch to forget")
    last = ids[-1]
    (root / str(last)).unlink()
    crc = root / f".{last}.crc"  # Hadoop's local file system writes a checksum file beside each entry
    if crc.exists():
        crc.unlink()
    return last
