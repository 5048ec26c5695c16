"""Run a notebook's code cells in a sandboxed kernel and collect each cell's outputs.

Theory of operation: `run_cells(box, cells, budget)` sends each source to the kernel over the shell
channel, as nbval does, and reads the iopub messages whose parent is that request until the kernel
says it is idle, and its execute_reply on shell (which says whether it raised). Outputs are built
from those messages in the grader's process: nothing the submission writes to disk is ever read.

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

Nor does the grader receive a message it would not keep. `limit_messages(client)`, called by the
sandbox before its client connects, makes each of the client's sockets refuse a message part larger
than MAX_MESSAGE_BYTES (libzmq's ZMQ_MAXMSGSIZE: the size is read before anything is allocated, and
the connection is closed). `print("x" * 2**30)` is one such message, on iopub; an exception with a
huge message is two, its error output on iopub and its execute_reply on shell. libzmq does not
connect again after closing a connection for this: a monitor on the iopub and shell sockets sees
the disconnection and the runner connects again (`_Wire`). What the kernel sent meanwhile is lost,
the cell's idle and execute_reply among it; so after a drop a cell is done when a kernel_info_request
sent after the drop is answered on shell and its idle read on iopub (asked again, SYNC_RETRY, while
that answer is lost too): ipykernel reads the next shell request only once the current one is
answered, so that reply means the cell is done, and that idle, published after all of the cell's
messages, that nothing of the cell is still on its way. The cell is then `truncated`, its reason
says an output was dropped, and a last stderr line in its outputs says so where the student reads
it (a compared check cannot pass on what was left). Its status is its execute_reply's where that
was read; where the reply itself was dropped (an exception's message and traceback are in it) the
grader cannot tell, and the cell counts as failed ("error"). The next cell runs on the new
connections, with its own outputs (a drop between two cells, by a thread an earlier cell started,
counts against the next: its first messages may be lost with it). The cap is on each part: a
message the kernel is made to send with many binary buffers (a comm's) is still received whole.

The outcome of a cell is a `CellRun`: outputs (nbformat output dicts, streams coalesced as nbval
does), `status`: "ok", "error", "timeout", "died" or "not run", with `reason` in words (which limit
was hit, in a student's words), `truncated` (outputs past MAX_CELL_OUTPUT, or a message past
MAX_MESSAGE_BYTES, were dropped), and the clock and CPU seconds it took.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import dataclass, field
from queue import Empty
from typing import Callable, Collection

import zmq
from nbformat import NotebookNode
from nbval.plugin import coalesce_streams
from zmq.utils.monitor import recv_monitor_message

INTERRUPT_GRACE = 5.0  # CPU seconds an interrupted cell gets to stop before the run ends
WALL_FACTOR = 10      # the clock's backstop: this many times a CPU limit, for a kernel that waits
POLL = 0.5            # seconds between two readings of the kernel's CPU time, far from its limit
MIN_POLL = 0.02       # ... and near it: CPU accrues at most `CORES` seconds a second
CORES = os.cpu_count() or 1
MAX_CELL_OUTPUT = 1 << 20  # characters of one cell's outputs the grader keeps (1 MiB of text)
REASON_CHARS = 2000        # of an error's value quoted in a cell's reason (a RuleError names rule, call, answer and Kafka's)
MAX_MESSAGE_BYTES = 8 << 20  # of one part of a kernel's message the grader receives (a plot's PNG is ~100 KB)
SYNC_RETRY = 0.2       # seconds before a drop's kernel_info_request is sent again, doubled each time ...
SYNC_RETRY_MAX = 2.0   # ... up to this
SEND_TIMEOUT = 1000    # ms a request waits for a shell connection (one dropped and not yet made again)
DROPPED = (f"an output of this cell was larger than the grader reads ({MAX_MESSAGE_BYTES >> 20} MiB in one "
           "message) and was dropped")
UNREAD = (f"an exception too large for the grader to read, it seems: this cell's result was larger "
          f"than {MAX_MESSAGE_BYTES >> 20} MiB in one message and was dropped, so the grader cannot "
          "tell; the cell counts as failed")  # (said after "raised" in a verdict)


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


def limit_messages(client) -> None:
    """Make every socket `client` opens refuse a message part larger than MAX_MESSAGE_BYTES. Call it
    before the client's channels start: libzmq reads the option when a socket connects."""
    client.context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)


_MONITORS = itertools.count(1)


class _Wire:
    """A kernel client's iopub and shell, read one message at a time without waiting; a connection
    libzmq closed (a message past MAX_MESSAGE_BYTES) is seen by a monitor and made again (`mend`).
    A client without zmq sockets (a test's fake) is read the same way, and never drops."""

    def __init__(self, client):
        self.client = client
        self.sockets: dict[str, zmq.Socket] = {}
        self.monitors: dict[zmq.Socket, str] = {}
        for name in ("iopub", "shell"):
            sock = getattr(getattr(client, f"{name}_channel", None), "socket", None)
            if isinstance(sock, zmq.Socket):
                self.sockets[name] = sock
                # An endpoint of its own each time: pyzmq's default (one per socket's fd) can still be
                # bound by the last run_cells' monitor ("Address already in use").
                endpoint = f"inproc://minikafka-runner-monitor-{name}-{os.getpid()}-{next(_MONITORS)}"
                self.monitors[sock.get_monitor_socket(zmq.EVENT_DISCONNECTED, endpoint)] = name
        self.poller = zmq.Poller()
        for sock in (*self.sockets.values(), *self.monitors):
            self.poller.register(sock, zmq.POLLIN)
        # A request sent while shell has no connection (dropped, not yet made again) would wait for
        # ever: it waits SEND_TIMEOUT, and is sent again once the connection is mended (`_send`).
        self._send_timeout = self.sockets["shell"].sndtimeo if "shell" in self.sockets else None
        if "shell" in self.sockets:
            self.sockets["shell"].sndtimeo = SEND_TIMEOUT

    def read(self, name: str):
        """The next message on `name` ("iopub" or "shell"), or None if none has come."""
        try:
            if name in self.sockets:  # the channel itself: no event loop per call, as get_*_msg runs
                return getattr(self.client, f"{name}_channel").get_msg(timeout=0)
            return getattr(self.client, f"get_{name}_msg")(timeout=0)
        except Empty:
            return None

    def wait(self, seconds: float) -> bool:
        """Wait at most `seconds` for a message or a drop; False if none came."""
        if not self.sockets:
            return True  # a fake's messages are all there already
        return bool(self.poller.poll(max(0, round(seconds * 1000))))

    def send(self, request) -> str | None:
        """`request()`'s msg_id (a client method that sends on shell), or None if shell had no
        connection for SEND_TIMEOUT."""
        try:
            return request()
        except zmq.Again:
            return None

    def mend(self) -> set[str]:
        """The channels ("iopub", "shell") whose connection was closed since last asked, each
        connected again (a closed connection that libzmq makes again itself is made anew)."""
        closed: dict[str, set[str]] = {}
        for monitor, name in self.monitors.items():
            while monitor.poll(0):
                event = recv_monitor_message(monitor)
                if event["event"] == zmq.EVENT_DISCONNECTED:
                    endpoint = event["endpoint"]
                    closed.setdefault(name, set()).add(
                        endpoint.decode() if isinstance(endpoint, bytes) else endpoint)
        for name, endpoints in closed.items():
            for endpoint in endpoints:
                try:
                    self.sockets[name].disconnect(endpoint)
                except zmq.ZMQError:  # already forgotten
                    pass
                self.sockets[name].connect(endpoint)
        return set(closed)

    def close(self) -> None:
        for monitor, name in self.monitors.items():
            self.sockets[name].disable_monitor()
            monitor.close(linger=0)
        if self._send_timeout is not None:
            self.sockets["shell"].sndtimeo = self._send_timeout


def _failed(box, run: CellRun, ename, evalue) -> None:
    """The cell raised `ename`: `evalue`; its reason names the sandbox's limit that shows."""
    run.status = "error"
    run.reason = f"{shorten(str(ename), 100)}: {shorten(str(evalue))}"
    hit = box.limit_hit(f"{str(ename)[:100]}: {str(evalue)[:10_000]}")
    if hit:
        run.reason += f" ({hit})"


def _collect(box, wire: _Wire, msg_id: str, limit: _Limit, run: CellRun, dropped: bool = False) -> str | None:
    """Read the messages of request `msg_id` until the kernel is done with it (None): its idle on
    iopub and its execute_reply on shell read, or, once a connection was dropped (`dropped`: before
    the cell was sent), a later kernel_info_request's reply and idle; or the limit reached first:
    'cpu' or 'clock'. Keeps at most MAX_CELL_OUTPUT characters of outputs in `run`."""
    kept = 0  # characters in run.outputs
    idle = replied = False  # the cell's own
    synced = {"iopub": False, "shell": False}  # a kernel_info_request's (sent after a drop) idle, reply
    syncs: set[str] = set()  # those requests' msg_ids
    retry, next_sync = SYNC_RETRY, time.monotonic()
    while True:
        if wire.mend():  # the kernel_info_request's answer, if sent, may be lost too: ask again now
            dropped, retry, next_sync = True, SYNC_RETRY, time.monotonic()
        hit = limit.hit()
        if hit:
            if dropped:
                _mark_dropped(run)
            return hit
        if dropped and time.monotonic() >= next_sync:
            sent = wire.send(box.client.kernel_info)
            if sent is not None:
                syncs.add(sent)
            next_sync, retry = time.monotonic() + retry, min(2 * retry, SYNC_RETRY_MAX)
        got = False
        msg = wire.read("shell")
        if msg is not None:
            got = True
            parent = msg["parent_header"].get("msg_id")
            if parent in syncs:
                synced["shell"] = True
            elif parent == msg_id and msg["msg_type"] == "execute_reply":
                replied = True
                content = msg["content"]
                if content.get("status") == "error" and run.status != "error":  # its error output was dropped
                    _failed(box, run, content.get("ename", ""), content.get("evalue", ""))
        msg = wire.read("iopub")
        if msg is not None:
            got = True
            kept = _on_iopub(box, msg, msg_id, run, kept)
            parent = msg["parent_header"].get("msg_id")
            if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
                idle = idle or parent == msg_id
                synced["iopub"] = synced["iopub"] or parent in syncs
        # After a drop, what came before it on a closed connection may still be queued: read it all.
        if (idle or synced["iopub"]) and (replied or synced["shell"]) and not (dropped and got):
            if dropped:
                _mark_dropped(run)
                if run.status != "error":
                    run.status, run.reason = ("ok", DROPPED) if replied else ("error", UNREAD)
                else:
                    run.reason += f"; {DROPPED}"
            return None
        if not got:
            seconds = limit.wait()
            if dropped:
                seconds = min(seconds, max(0.0, next_sync - time.monotonic()))
            if not wire.wait(seconds) and not box.alive():
                raise _KernelDied()


def _mark_dropped(run: CellRun) -> None:
    """Say in the cell's outputs that a message was dropped (a compared check cannot pass without it)."""
    run.truncated = True
    run.outputs.append(NotebookNode(output_type="stream", name="stderr", text=f"[{DROPPED}]\n"))


def _on_iopub(box, msg, msg_id: str, run: CellRun, kept: int) -> int:
    """Keep what an iopub message of request `msg_id` adds to `run`; the characters kept after it."""
    if msg["parent_header"].get("msg_id") != msg_id:
        return kept
    if msg["msg_type"] == "clear_output":  # what was cut is gone too: the cap starts again
        run.outputs.clear()
        run.truncated = False
        return 0
    out = _output(msg)
    if out is None:
        return kept
    if out.output_type == "error":  # an error counts even where its output is not kept
        _failed(box, run, out.ename, out.evalue)
    if run.truncated:
        return kept
    size = _size(out)
    if kept + size > MAX_CELL_OUTPUT:
        run.truncated = True
        room = MAX_CELL_OUTPUT - kept
        if out.output_type == "stream" and isinstance(out.text, str) and room > 0:
            out.text = out.text[:room]  # what fits of a printed text; other outputs whole or not at all
            run.outputs.append(out)
        return kept
    run.outputs.append(out)
    return kept + size


class _KernelDied(Exception):
    """The kernel is gone (or, with a reason, cannot be reached)."""


def _send(box, wire: _Wire, limit: _Limit, request) -> str:
    """`request()`'s msg_id, sent on shell once it has a connection again (see _Wire)."""
    while True:
        msg_id = wire.send(request)
        if msg_id is not None:
            return msg_id
        wire.mend()
        if not box.alive():
            raise _KernelDied()
        if limit.hit():
            raise _KernelDied("the grader could not send this cell to the kernel: its connection "
                              "was dropped again and again")


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
    wire = _Wire(box.client)
    try:
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
                dropped = bool(wire.mend())  # since the last cell: its connection is made again first
                msg_id = _send(box, wire, limit, lambda: box.client.execute(
                    source, allow_stdin=False, store_history=index not in unrecorded))
                hit = _collect(box, wire, msg_id, limit, run, dropped)
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
                    # (after a drop its idle or execute_reply may be lost: the wind-down is synced too)
                    if _collect(box, wire, msg_id, grace, CellRun(), dropped=run.truncated):
                        stopped = "not run: the kernel did not stop after a timeout"
            except _KernelDied as exc:
                run.status = "died"
                run.reason = str(exc) or ("the kernel died while running this cell (os._exit, a crash or a "
                                          "resource limit). " + box.death_note(wait=1.0))
                stopped = ("not run: the kernel could not be reached" if str(exc) else
                           "not run: the kernel had died")
            run.outputs[:] = coalesce_streams(run.outputs)
            run.seconds = time.monotonic() - began
            if on_cpu:
                now = _cpu(box)
                run.cpu_seconds = None if now is None else now - cpu_began
    finally:
        wire.close()
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
