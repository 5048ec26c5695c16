"""Run a notebook's code cells in a sandboxed kernel and collect each cell's outputs.

Theory of operation: `run_cells(box, cells, budget)` sends each source to the kernel over the shell
channel, as nbval does, and reads the iopub messages whose parent is that request until the kernel
says it is idle. Outputs are built from those messages in the grader's process: nothing the
submission writes to disk is ever read.

Limits are on CPU time, not on the clock, so a grade does not depend on how busy the machine is:
each cell may use `cell_timeout` CPU seconds and the whole run `budget` CPU seconds, counted over
the kernel and everything it started (`Sandbox.cpu_seconds`, read every POLL seconds). A slow but
right submission on a loaded machine takes longer on the clock and uses the same CPU, so it earns
the same points; an endless loop uses its CPU seconds at the same pace whatever the load. A
kernel that sleeps or waits for something that never comes uses no CPU: the clock is the backstop,
WALL_FACTOR times the CPU limits (a cell's and the run's). Where CPU time cannot be read (no /proc
and no psutil), the limits are on the clock, as they were.

On a timeout the kernel is interrupted (KeyboardInterrupt) and the run goes on with the next cell
once the interrupted one has stopped (INTERRUPT_GRACE CPU seconds, the clock again the backstop);
a kernel that ignores the interrupt, or dies (os._exit, a segfault, the memory limit), ends the
run, and every later cell is reported not run with the reason. Where an error or a death shows
that a sandbox limit was hit (a fork refused with EAGAIN under the process limit, a MemoryError
under the memory limit), the reason names that limit (`Sandbox.limit_hit`, `Sandbox.death_note`).

The grader keeps at most MAX_CELL_OUTPUT characters of one cell's outputs (stream text, an error's
name, value and traceback, displayed data and its metadata): a cell that prints gigabytes must not
take the grader's memory, which every kernel of a `--jobs N` run shares. Past the cap the cell's
messages are still read until it is idle, and dropped; the CellRun says so (`truncated`), and a
compared check's verdict says its output was cut (compare.py). An error past the cap still makes
the cell's status "error", its reason clipped to REASON_CHARS.

The outcome of a cell is a `CellRun`: outputs (nbformat output dicts, streams coalesced as nbval
does), `status`: "ok", "error", "timeout", "died" or "not run", with `reason` in words (which limit
was hit, in a student's words), `truncated` (outputs past MAX_CELL_OUTPUT were dropped), and the
clock and CPU seconds it took.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from queue import Empty
from typing import Callable, Collection

from nbformat import NotebookNode
from nbval.plugin import coalesce_streams

INTERRUPT_GRACE = 5.0  # CPU seconds an interrupted cell gets to stop before the run ends
WALL_FACTOR = 10      # the clock's backstop: this many times a CPU limit, for a kernel that waits
POLL = 0.5            # seconds between two readings of the kernel's CPU time, far from its limit
MIN_POLL = 0.02       # ... and near it: CPU accrues at most `CORES` seconds a second
CORES = os.cpu_count() or 1
MAX_CELL_OUTPUT = 1 << 20  # characters of one cell's outputs the grader keeps (1 MiB of text)
REASON_CHARS = 2000        # of an error's value quoted in a cell's reason (a RuleError names rule, call, answer and Kafka's)


@dataclass
class CellRun:
    status: str = "not run"          # ok | error | timeout | died | not run
    outputs: list = field(default_factory=list)
    reason: str = ""
    seconds: float = 0.0             # on the clock
    cpu_seconds: float | None = None  # of the kernel and what it started; None: not measured
    truncated: bool = False          # outputs past MAX_CELL_OUTPUT characters were dropped

    @property
    def stream_text(self) -> str:
        """Everything the cell printed (its stdout and stderr streams), in order."""
        return "".join(o.get("text", "") for o in self.outputs if o.get("output_type") == "stream")


def _output(msg) -> NotebookNode | None:
    kind, content = msg["msg_type"], msg["content"]
    if kind == "stream":
        return NotebookNode(output_type="stream", name=content["name"], text=content["text"])
    if kind in ("display_data", "execute_result"):
        out = NotebookNode(output_type=kind, data=content["data"], metadata=content.get("metadata", {}))
        if kind == "execute_result":
            out.execution_count = content.get("execution_count")
        return out
    if kind == "error":
        return NotebookNode(output_type="error", ename=content["ename"], evalue=content["evalue"],
                            traceback=content.get("traceback", []))
    return None


def _length(value) -> int:
    """Characters in a message's value: its strings' lengths, without copying them."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_length(k) + _length(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(_length(v) for v in value)
    return len(json.dumps(value, default=str))


def _size(out: NotebookNode) -> int:
    """What one output holds, in characters, as counted against MAX_CELL_OUTPUT."""
    if out.output_type == "stream":
        return _length(out.text)
    if out.output_type == "error":
        return _length(out.ename) + _length(out.evalue) + _length(out.traceback)
    return _length(out.data) + _length(out.metadata)


def shorten(text: str, limit: int = REASON_CHARS) -> str:
    """At most `limit` characters of `text` (unquoted), saying how many more there were."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


class _Limit:
    """When a cell (or an interrupted cell's wind-down) must stop: `cpu` CPU seconds of the kernel
    after `cpu_start` (None: not measured here, the clock is the limit), or the clock's `deadline`."""

    def __init__(self, box, cpu: float | None, cpu_start: float | None, deadline: float):
        self.box, self.cpu, self.cpu_start, self.deadline = box, cpu, cpu_start, deadline
        self.used = 0.0
        self._read_at = time.monotonic()

    def hit(self) -> str | None:
        """'clock' or 'cpu' when that limit is reached, else None (reads the CPU every POLL s)."""
        now = time.monotonic()
        if self.cpu is not None and now >= self._read_at:
            total = self.box.cpu_seconds()
            if total is not None:
                self.used = total - self.cpu_start
                if self.used >= self.cpu:
                    return "cpu"
            # Read again before the kernel can have used what is left, so it overshoots by little.
            self._read_at = now + min(POLL, max(MIN_POLL, (self.cpu - self.used) / CORES))
        return "clock" if now >= self.deadline else None

    def wait(self) -> float:
        """How long to wait for a message before looking at the limits again."""
        until = min(self.deadline, self._read_at) if self.cpu is not None else min(self.deadline, time.monotonic() + 1.0)
        return max(0.0, until - time.monotonic())


def _collect(box, msg_id: str, limit: _Limit, run: CellRun) -> str | None:
    """Read iopub messages of request `msg_id` until idle (None); or the limit reached first:
    'cpu' or 'clock'. Keeps at most MAX_CELL_OUTPUT characters of outputs in `run`."""
    kept = 0  # characters in run.outputs
    while True:
        hit = limit.hit()
        if hit:
            return hit
        try:
            msg = box.client.get_iopub_msg(timeout=limit.wait())
        except Empty:
            if not box.alive():
                raise _KernelDied() from None
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return None
        if msg["msg_type"] == "clear_output":  # what was cut is gone too: the cap starts again
            run.outputs.clear()
            kept, run.truncated = 0, False
            continue
        out = _output(msg)
        if out is None:
            continue
        if out.output_type == "error":  # an error counts even where its output is not kept
            run.status = "error"
            run.reason = f"{shorten(str(out.ename), 100)}: {shorten(str(out.evalue))}"
            hit = box.limit_hit(f"{str(out.ename)[:100]}: {str(out.evalue)[:10_000]}")
            if hit:
                run.reason += f" ({hit})"
        if run.truncated:
            continue
        size = _size(out)
        if kept + size > MAX_CELL_OUTPUT:
            run.truncated = True
            room = MAX_CELL_OUTPUT - kept
            if out.output_type == "stream" and isinstance(out.text, str) and room > 0:
                out.text = out.text[:room]  # what fits of a printed text; other outputs whole or not at all
                run.outputs.append(out)
            continue
        kept += size
        run.outputs.append(out)


class _KernelDied(Exception):
    pass


def _cpu(box) -> float | None:
    reader = getattr(box, "cpu_seconds", None)
    return reader() if reader is not None else None


def _seconds(n: float) -> str:
    """'30 s', '0.5 s', '0 s': whole seconds from 10 on, else one decimal, never '0.0'."""
    shown = round(n) if n >= 10 else round(n, 1)
    return f"{shown:g} s"


def run_cells(box, sources: list[str], *, cell_timeout: float, budget: float,
              before: Callable[[int], None] | None = None,
              unrecorded: Collection[int] = ()) -> list[CellRun]:
    """One CellRun per source, in order. Never raises for anything the submission does.
    The cells whose index is in `unrecorded` (the grader's own) stay out of the kernel's input
    history (`In`, `_ih`): a submission cannot read their source back.

    `cell_timeout` and `budget` are CPU seconds where the kernel's CPU time can be read (the clock
    stops a cell after WALL_FACTOR times as long), else seconds on the clock. `before(i)`, if
    given, is called just before cell `i` is sent (the grader's broker learns which call runs)."""
    runs = [CellRun() for _ in sources]
    start, cpu_start = time.monotonic(), _cpu(box)
    on_cpu = cpu_start is not None
    factor = WALL_FACTOR if on_cpu else 1
    stopped = ""  # why the remaining cells cannot run
    for index, (source, run) in enumerate(zip(sources, runs)):
        if stopped:
            run.reason = stopped
            continue
        began, cpu_began = time.monotonic(), _cpu(box) if on_cpu else None
        if on_cpu and cpu_began is None:  # the kernel is gone: the cell will find it dead
            cpu_began = cpu_start
        used = (cpu_began - cpu_start) if on_cpu else began - start
        left = budget - used
        clock_left = factor * budget - (began - start)
        if left <= 0 or clock_left <= 0:
            run.reason = stopped = (f"not run: the notebook's CPU budget ({_seconds(budget)}) was used up"
                                    if on_cpu and left <= 0 else
                                    f"not run: the time budget ({_seconds(factor * budget)} on the clock) was used up")
            continue
        cpu_limit = min(cell_timeout, left)
        clock_limit = min(factor * cell_timeout, clock_left)
        limit = _Limit(box, cpu_limit if on_cpu else None, cpu_began, began + clock_limit)
        run.status = "ok"
        if before is not None:
            before(index)
        try:
            msg_id = box.client.execute(source, allow_stdin=False, store_history=index not in unrecorded)
            hit = _collect(box, msg_id, limit, run)
            if hit:
                run.status = "timeout"
                run.reason = _timeout_reason(hit, on_cpu, cpu_limit, cell_timeout, budget, clock_limit,
                                             factor, limit.used)
                box.interrupt()
                # Drain the interrupted cell so its late outputs are not taken for the next one's.
                grace = _Limit(box, INTERRUPT_GRACE if on_cpu else None, _cpu(box) if on_cpu else None,
                               time.monotonic() + factor * INTERRUPT_GRACE)
                if grace.cpu_start is None:
                    grace.cpu = None
                if _collect(box, msg_id, grace, CellRun()):
                    stopped = "not run: the kernel did not stop after a timeout"
        except _KernelDied:
            run.status = "died"
            run.reason = ("the kernel died while running this cell (os._exit, a crash or a resource limit). "
                          + box.death_note(wait=1.0))
            stopped = "not run: the kernel had died"
        run.outputs[:] = coalesce_streams(run.outputs)
        run.seconds = time.monotonic() - began
        if on_cpu:
            now = _cpu(box)
            run.cpu_seconds = None if now is None else now - cpu_began
    return runs


def _timeout_reason(hit: str, on_cpu: bool, cpu_limit: float, cell_timeout: float, budget: float,
                    clock_limit: float, factor: int, used: float) -> str:
    """Which limit stopped a cell, in a student's words."""
    if not on_cpu:  # the clock is the only limit here
        return (f"timed out after {_seconds(clock_limit)} (an endless loop?)" if clock_limit == cell_timeout
                else f"timed out: the time budget ({_seconds(budget)}) was used up")
    if hit == "cpu":
        return (f"used {_seconds(cpu_limit)} of CPU in this cell: an endless loop?" if cpu_limit == cell_timeout
                else f"timed out: the notebook's CPU budget ({_seconds(budget)}) was used up in this cell")
    if clock_limit == factor * cell_timeout:
        return (f"still running after {_seconds(clock_limit)} on the clock, having used only "
                f"{_seconds(used)} of CPU: waiting for something that never comes (a sleep, a lock, "
                f"a read with no timeout)?")
    return f"timed out: the notebook's time budget on the clock ({_seconds(factor * budget)}) was used up"
