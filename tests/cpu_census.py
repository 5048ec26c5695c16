"""Where the machine's CPU goes during a test run, by kind of process (Linux's /proc; elsewhere nothing).

The CPU report's count per unit of work sees only what a pytest worker waited for. Most of the
suite's CPU is spent elsewhere: in notebook kernels (nbval's and the grader's sandboxes), Spark's
JVMs, broker and controller processes, Chromium. ``Census`` is a daemon thread in the pytest
controller that reads every process's CPU ticks (``/proc/PID/stat``) twice a second and adds each
one's growth to its kind, named from its command line. The command line is read at every sample: a
child seen between its fork and its exec still shows its parent's (a pytest worker's), and once it
execs, all it was counted moves to its own kind (a ``spark-class`` shell that execs ``java`` is a
JVM either way; an empty command line, a zombie's, changes nothing). What a process used before the census started is not counted; a
process that starts and ends between two samples is missed, so the total is a little below the
machine's busy time (``/proc/stat``), which the report prints beside it.
"""

from __future__ import annotations

import os
import re
import threading

# The first pattern that matches a process's command line names its kind.
KINDS = [
    ("Spark's JVMs", re.compile(r"(^|/)java\s|spark-class")),
    ("Spark's Python workers", re.compile(r"pyspark\.daemon|minikafka\.spark\.fork_")),
    ("notebook kernels (nbval, grading sandboxes)", re.compile(r"ipykernel_launcher|minikafka/course/_launch\.py")),
    ("Chromium (the browser tests)", re.compile(r"chrom")),
    ("brokers and controllers", re.compile(r"minikafka\.cli (server|controller)")),
    ("benchmark processes", re.compile(r"-m benchmarks\b")),
    ("pytest workers (in-process tests, simulations)", re.compile(r"-c import sys;exec\(eval\(sys\.stdin")),
    ("pytest's controller", re.compile(r"-m pytest\b")),
]
OTHER = "other processes"
PERIOD_S = 0.5


def kind_of(command: str) -> str:
    return next((name for name, pattern in KINDS if pattern.search(command)), OTHER)


def _read(pid: str) -> tuple[str, int] | None:
    """(start time, CPU ticks so far) of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # the name in parentheses may hold spaces
    return fields[19], int(fields[11]) + int(fields[12])  # starttime; utime + stime


def _command(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Census(threading.Thread):
    def __init__(self):
        super().__init__(name="cpu-census", daemon=True)
        self.ticks: dict[str, int] = {}  # by kind
        self._seen: dict[tuple[str, str], list] = {}  # (pid, start) -> [kind, ticks counted]
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    @staticmethod
    def available() -> bool:
        return os.path.exists("/proc/self/stat")

    def run(self):
        first = True
        while not self._stopping.is_set():
            self._sample(baseline=first)
            first = False
            self._stopping.wait(PERIOD_S)

    def _sample(self, baseline: bool):
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            read = _read(pid)
            if read is None:
                continue
            start, ticks = read
            key = (pid, start)
            command = _command(pid)
            seen = self._seen.get(key)
            if seen is None:  # [kind, ticks at the last sample, ticks counted for it]
                seen = self._seen[key] = [kind_of(command), ticks if baseline else 0, 0]
            with self._lock:
                kind = kind_of(command) if command else seen[0]
                if kind != seen[0]:  # it exec'd: what it was counted goes with it
                    self.ticks[seen[0]] = self.ticks.get(seen[0], 0) - seen[2]
                    self.ticks[kind] = self.ticks.get(kind, 0) + seen[2]
                    seen[0] = kind
                self.ticks[kind] = self.ticks.get(kind, 0) + ticks - seen[1]
            seen[2] += ticks - seen[1]
            seen[1] = ticks

    def stop(self) -> dict[str, float]:
        """Stop sampling; CPU seconds by kind, most first."""
        self._stopping.set()
        self.join(timeout=5)
        hz = os.sysconf("SC_CLK_TCK")
        with self._lock:
            return {k: t / hz for k, t in sorted(self.ticks.items(), key=lambda kv: -kv[1]) if t}
