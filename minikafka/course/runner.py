"""Run a notebook's code cells in a sandboxed kernel and collect each cell's outputs.

Theory of operation: `run_cells(box, cells, budget)` sends each source to the kernel over the shell
channel, as nbval does, and reads the iopub messages whose parent is that request until the kernel
says it is idle. Outputs are built from those messages in the grader's process: nothing the
submission writes to disk is ever read. Each cell gets at most `cell_timeout` seconds and the whole
run at most `budget` seconds. On a timeout the kernel is interrupted (KeyboardInterrupt) and the
run goes on with the next cell; a kernel that ignores the interrupt, or dies (os._exit, a
segfault, the memory limit), ends the run, and every later cell is reported not run with the
reason. Where an error or a death shows that a sandbox limit was hit (a fork refused with EAGAIN
under the process limit, a MemoryError under the memory limit), the reason names that limit
(`Sandbox.limit_hit`, `Sandbox.death_note`).

The outcome of a cell is a `CellRun`: outputs (nbformat output dicts, streams coalesced as nbval
does), and `status`: "ok", "error", "timeout" or "not run", with `reason` in words.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from queue import Empty

from nbformat import NotebookNode
from nbval.plugin import coalesce_streams

INTERRUPT_GRACE = 5.0  # seconds an interrupted cell gets to stop before the kernel is killed


@dataclass
class CellRun:
    status: str = "not run"          # ok | error | timeout | died | not run
    outputs: list = field(default_factory=list)
    reason: str = ""
    seconds: float = 0.0


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


def _collect(box, msg_id: str, deadline: float, run: CellRun) -> bool:
    """Read iopub messages of request `msg_id` until idle; False when the deadline passed first."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            msg = box.client.get_iopub_msg(timeout=min(left, 1.0))
        except Empty:
            if not box.alive():
                raise _KernelDied() from None
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return True
        if msg["msg_type"] == "clear_output":
            run.outputs.clear()
            continue
        out = _output(msg)
        if out is not None:
            run.outputs.append(out)
            if out.output_type == "error":
                run.status = "error"
                run.reason = f"{out.ename}: {out.evalue}"
                hit = box.limit_hit(run.reason)
                if hit:
                    run.reason += f" ({hit})"


class _KernelDied(Exception):
    pass


def run_cells(box, sources: list[str], *, cell_timeout: float, budget: float) -> list[CellRun]:
    """One CellRun per source, in order. Never raises for anything the submission does."""
    runs = [CellRun() for _ in sources]
    start = time.monotonic()
    stopped = ""  # why the remaining cells cannot run
    for source, run in zip(sources, runs):
        if stopped:
            run.reason = stopped
            continue
        left = budget - (time.monotonic() - start)
        if left <= 0:
            run.reason = stopped = f"not run: the time budget ({budget:.0f} s) was used up"
            continue
        limit = min(cell_timeout, left)
        began = time.monotonic()
        run.status = "ok"
        try:
            msg_id = box.client.execute(source, allow_stdin=False, store_history=True)
            if not _collect(box, msg_id, began + limit, run):
                run.status = "timeout"
                run.reason = (f"timed out after {limit:.0f} s (an endless loop?)" if limit == cell_timeout
                              else f"timed out: the time budget ({budget:.0f} s) was used up")
                box.interrupt()
                # Drain the interrupted cell so its late outputs are not taken for the next one's.
                if not _collect(box, msg_id, time.monotonic() + INTERRUPT_GRACE, CellRun()):
                    stopped = "not run: the kernel did not stop after a timeout"
        except _KernelDied:
            run.status = "died"
            run.reason = ("the kernel died while running this cell (os._exit, a crash or a resource limit). "
                          + box.death_note(wait=1.0))
            stopped = "not run: the kernel had died"
        run.outputs[:] = coalesce_streams(run.outputs)
        run.seconds = time.monotonic() - began
    return runs
