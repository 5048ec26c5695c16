"""What every benchmark shares: the result type, batches to write, figures, the machine."""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from minikafka.records import ATTRIBUTES_AT, CRC_AT, MAX_TIMESTAMP_AT, RecordBatch, crc32c

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "benchmarks" / "data"  # git-ignored scratch space, on the repository's disk

KiB, MiB = 1024, 1024 * 1024
MB = 1_000_000  # throughputs are in MB/s (10**6 bytes)
VALUE_BYTES = 100
BASE_TIMESTAMP = 1_700_000_000_000
BASE_TIMESTAMP_AT = 27  # baseTimestamp, followed by maxTimestamp
assert MAX_TIMESTAMP_AT == BASE_TIMESTAMP_AT + 8


@dataclass
class Section:
    """One benchmark's outcome: a table, how it was measured, and its targets."""

    name: str
    title: str
    method: list[str]  # how it was measured, one bullet each
    columns: list[str]
    rows: list[list[str]]
    targets: list[tuple[str, str, str]] = field(default_factory=list)  # (target, measured, met?)


# --- batches ------------------------------------------------------------------------------


def template_batch(target_bytes: int) -> tuple[bytes, int]:
    """A v2 batch of ~100-byte values, as large as fits in ``target_bytes``; (bytes, records).

    Every record carries the batch's timestamp, so ``restamp`` can move the batch in time.
    """
    values = [os.urandom(VALUE_BYTES) for _ in range(max(1, target_bytes // VALUE_BYTES))]

    def build(n: int) -> bytes:
        return bytes(RecordBatch.build(values[:n], timestamp=BASE_TIMESTAMP))

    n = max(1, (target_bytes - 61) // (VALUE_BYTES + 10))
    per_record = (len(build(n)) - 61) / n
    n = max(1, int((target_bytes - 61) / per_record))
    while n > 1 and len(build(n)) > target_bytes:
        n -= 1
    return build(n), n


def restamp(template: bytes, timestamp: int) -> bytes:
    """The same batch at another time (baseTimestamp = maxTimestamp), CRC recomputed."""
    buf = bytearray(template)
    struct.pack_into(">qq", buf, BASE_TIMESTAMP_AT, timestamp, timestamp)
    struct.pack_into(">I", buf, CRC_AT, crc32c(memoryview(buf)[ATTRIBUTES_AT:]))
    return bytes(buf)


def stamped(template: bytes, total_bytes: int, start_ms: int = 0) -> Iterator[bytes]:
    """Enough distinct batches (one millisecond apart, as a producer sends them) to fill
    ``total_bytes``."""
    RecordBatch(restamp(template, BASE_TIMESTAMP)).validate()  # a valid batch, CRC and all
    for i in range(max(1, total_bytes // len(template))):
        yield restamp(template, BASE_TIMESTAMP + start_ms + i)


def batches_for(template: bytes, total_bytes: int, start_ms: int = 0) -> list[bytes]:
    """The same, built in memory before any timing starts."""
    return list(stamped(template, total_bytes, start_ms))


# --- figures ------------------------------------------------------------------------------


def med(values: list[float]) -> float:
    return statistics.median(values)


def fig(values: list[float], fmt: str = "{:,.0f}") -> str:
    """``median (min-max)``, or the bare value when there was one run."""
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(med(values))} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def size_label(n: int) -> str:
    if n >= MiB and n % MiB == 0:
        return f"{n // MiB} MiB"
    if n >= KiB and n % KiB == 0:
        return f"{n // KiB} KiB"
    return f"{n:,} B"


def runs(n: int) -> str:
    return "1 run" if n == 1 else f"{n} runs"


def met(ok: bool) -> str:
    return "met" if ok else "**not met**"


# --- the machine --------------------------------------------------------------------------


def drop_page_cache() -> bool:
    """Write dirty pages out and drop the page cache (needs root); whether it worked."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def _cpuinfo_model() -> str:
    model, virtual = platform.processor() or "unknown", False
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                virtual = virtual or "hypervisor" in line.split()
    except OSError:
        pass
    return model + (" (virtual machine: `hypervisor` flag set)" if virtual else "")


def _ram() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _filesystem(path: Path) -> str:
    """Type, device and free space of the filesystem holding ``path`` (from /proc/mounts)."""
    path = path.resolve()
    best = ("", "?", "?", "")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            device, mount, fstype, options, *_ = line.split()
            if (path == Path(mount) or Path(mount) in path.parents) and len(mount) > len(best[0]):
                best = (mount, device, fstype, options)
    except OSError:
        return "unknown"
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize / 1024**3
    return f"{best[2]} on {best[1]} (mounted at {best[0]}, {best[3]}), {free:.0f} GiB free"


def _git() -> str:
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _shown(path: str) -> str:
    try:
        return str(Path(path).relative_to(REPO))
    except ValueError:
        return path


def machine(data_dir: Path) -> list[tuple[str, str]]:
    cpus = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cpus
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        ("Date (UTC)", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")),
        ("CPU", f"{_cpuinfo_model()}, {cpus} logical cores ({usable} usable)"),
        ("RAM", _ram()),
        ("Kernel", f"{platform.system()} {platform.release()}"),
        ("Data directory", f"{data_dir.relative_to(REPO)}/: {_filesystem(data_dir)}"),
        ("Python", f"{platform.python_implementation()} {platform.python_version()} ({_shown(sys.executable)})"),
        ("minikafka", f"git {_git()}"),
        ("Load average at start (1/5/15 min)", load),
    ]
