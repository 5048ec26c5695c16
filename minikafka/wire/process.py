"""A real multi-process cluster on this machine: one OS process per broker, one controller.

Theory of operation
-------------------
``minikafka server`` runs one broker (``Broker`` in a ``NodeRuntime``) and ``minikafka
controller`` runs the controller; ``launch(brokers=3)`` starts a controller and N brokers as
child processes of the Python process that calls it and returns a ``LocalCluster``:
``bootstrap_servers`` for any Kafka client, ``kill`` (SIGKILL: the process dies at once, its
connections are reset by the kernel, its log directory stays), ``restart`` (a new process on
the same port and directory: it recovers its logs and rejoins), ``pause``/``resume``
(SIGSTOP/SIGCONT: alive but silent, as a long GC pause), and ``close``.

No process outlives the one that launched it: ``close()`` runs at exit, and each child also
holds a *lifeline*, the read end of a pipe whose only write end stays in the launching
process: when that process dies, however it dies (``os._exit``, SIGKILL), the kernel closes
the write end, the child reads end-of-file and exits. (A process the launcher forks without
exec, as multiprocessing's "fork" does, holds a copy of the write end until it exits too.)
``PR_SET_PDEATHSIG`` alone would not do: it fires when the *thread* that started the child
ends, so a cluster launched from a worker thread would die with the thread. It is added when
the launcher is its main thread, for a paused (SIGSTOPped) child, which cannot read its
lifeline but can be killed; and it is what a ``minikafka server --exit-with-parent`` started
by something else relies on (a watch on the parent's pid where prctl does not exist).

Settings are Kafka's names, given to every process (``config=`` or ``--override``): the
broker's and topics' defaults, and ``socket.request.max.bytes``, which belongs to the socket
server (``NodeRuntime``): a request frame larger than that closes its connection.

Everything binds 127.0.0.1 unless told otherwise. Log directories live under ``dir`` (a
temporary directory by default, removed by ``close()``), one per broker, as in the
simulated ``Cluster``; next to them, each process's output (``out_file``: ``broker-1.out``,
``controller.out``), where its warnings go, a closed connection's reason among them. A
process that fails to start is reported with the last lines it wrote there.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Mapping

from minikafka.errors import IllegalArgumentError, KafkaTimeoutError

log = logging.getLogger("minikafka.wire")

LOCALHOST = "127.0.0.1"
LIFELINE_ENV = "MINIKAFKA_LIFELINE_FD"  # the child's end of the launching process's lifeline
MAIN_THREAD_ENV = "MINIKAFKA_LAUNCHED_FROM_MAIN_THREAD"  # "1": PR_SET_PDEATHSIG is safe too
SOCKET_REQUEST_MAX_BYTES = "socket.request.max.bytes"  # the runtime's setting, not the node's


# --- inside a child process ---------------------------------------------------------------------------


def die_with_parent() -> None:
    """Exit when the process that launched this one dies: at end-of-file on the lifeline
    ``LocalCluster`` passes (``MINIKAFKA_LIFELINE_FD``), and by the kernel's
    ``PR_SET_PDEATHSIG`` (Linux) where that is safe: without a lifeline, or when the launcher
    started us from its main thread (then the signal also kills a paused, SIGSTOPped child,
    which cannot read its lifeline). Where prctl does not exist, and there is no lifeline,
    by polling the parent's pid."""
    lifeline = os.environ.pop(LIFELINE_ENV, None)
    from_main_thread = os.environ.pop(MAIN_THREAD_ENV, None) == "1"
    if lifeline is not None and lifeline.isdigit():
        fd = int(lifeline)

        def hold() -> None:
            try:
                while os.read(fd, 1):  # nobody writes: returns b"" once the launcher is gone
                    pass
            except OSError:
                pass
            os._exit(1)

        threading.Thread(target=hold, daemon=True, name="lifeline").start()
        if from_main_thread:
            _kill_me_with_parent()
        return
    if not _kill_me_with_parent():
        parent = os.getppid()

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def _kill_me_with_parent() -> bool:
    """Ask the kernel to SIGKILL this process when the thread that started it ends (Linux's
    ``PR_SET_PDEATHSIG``); False where that cannot be asked."""
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the parent died before we asked
        os._exit(1)
    return True


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise IllegalArgumentError(f"expected HOST:PORT, not {text!r}")
    return host or LOCALHOST, int(port)


def parse_config(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise IllegalArgumentError(f"expected key=value, not {item!r}")
        out[key.strip()] = value.strip()
    return out


def split_config(config: Mapping[str, Any] | None) -> tuple[dict[str, Any], int]:
    """The node's settings, and the socket server's ``socket.request.max.bytes`` (Kafka's
    default, 100 MiB, when not given), which ``BrokerConfig`` does not know."""
    from minikafka.wire.runtime import DEFAULT_MAX_REQUEST_BYTES

    node_config = dict(config or {})
    raw = node_config.pop(SOCKET_REQUEST_MAX_BYTES, DEFAULT_MAX_REQUEST_BYTES)
    try:
        max_bytes = int(raw)
    except (TypeError, ValueError):
        max_bytes = 0
    if max_bytes < 1:
        raise IllegalArgumentError(f"{SOCKET_REQUEST_MAX_BYTES} must be an integer >= 1, not {raw!r}")
    return node_config, max_bytes


def _serve(runtime) -> None:
    try:
        asyncio.run(runtime.serve_forever())
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: leave quietly
        pass


def run_broker(broker_id: int, host: str, port: int, log_dir: str | Path, controller: tuple[str, int],
               config: Mapping[str, Any] | None = None) -> None:
    """Serve one broker until killed (``minikafka server``)."""
    from minikafka.broker.broker import Broker
    from minikafka.broker.config import BrokerConfig
    from minikafka.messages import CONTROLLER_ID
    from minikafka.wire.runtime import NodeRuntime, wall_clock_ms

    node_config, max_bytes = split_config(config)
    broker = Broker(broker_id, log_dir, BrokerConfig(node_config), incarnation=wall_clock_ms(),
                    advertised=(host, port))
    runtime = NodeRuntime(broker, host, port, addresses={CONTROLLER_ID: controller},
                          context=lambda: broker_context(broker, host, port),
                          resolve=lambda node: broker.endpoints.get(node), max_request_bytes=max_bytes)
    _serve(runtime)


def run_controller(host: str, port: int, config: Mapping[str, Any] | None = None, *, seed: int = 0) -> None:
    """Serve the controller until killed (``minikafka controller``)."""
    from minikafka.broker.config import BrokerConfig
    from minikafka.controller import Controller
    from minikafka.wire.runtime import NodeRuntime

    node_config, max_bytes = split_config(config)
    controller = Controller(BrokerConfig(node_config), seed=seed)
    def resolve(node):  # brokers register their address in every heartbeat
        reg = controller.brokers.get(node)
        return (reg.host, reg.port) if reg is not None and reg.host else None

    runtime = NodeRuntime(controller, host, port, resolve=resolve, max_request_bytes=max_bytes)
    _serve(runtime)


def broker_context(broker, host: str, port: int) -> dict:
    """What the codec needs to describe the cluster to a client: every live broker's address."""
    endpoints = dict(broker.endpoints)
    endpoints.setdefault(broker.broker_id, (host, port))
    return {"brokers": endpoints, "cluster_id": "minikafka", "broker_id": broker.broker_id}


# --- in the parent: LocalCluster --------------------------------------------------------------------------


def free_port(host: str = LOCALHOST) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_port(host: str, port: int, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise KafkaTimeoutError(f"the process for {host}:{port} exited with code {proc.returncode}")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise KafkaTimeoutError(f"nothing listens on {host}:{port} after {timeout_s} s")


class LocalCluster:
    """A controller and N broker processes on this machine (see ``launch``)."""

    def __init__(self, brokers: int = 3, *, base_port: int | None = None, host: str = LOCALHOST,
                 dir: str | Path | None = None, config: Mapping[str, Any] | None = None,
                 startup_timeout_s: float = 30.0) -> None:
        if not isinstance(brokers, int) or brokers < 1:
            raise IllegalArgumentError(f"a cluster needs at least 1 broker, not {brokers!r}")
        self.host = host
        self.config = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in (config or {}).items()}
        self._own_dir = dir is None
        self.dir = Path(tempfile.mkdtemp(prefix="minikafka-wire-") if dir is None else dir)
        self.broker_ids = list(range(1, brokers + 1))
        if base_port is None:
            self.ports = {b: free_port(host) for b in self.broker_ids}
            self.controller_port = free_port(host)
        else:
            self.ports = {b: base_port + b - 1 for b in self.broker_ids}
            self.controller_port = base_port + brokers
        self.startup_timeout_s = startup_timeout_s
        self._procs: dict[Any, subprocess.Popen] = {}
        self._closed = False
        # The lifeline: children inherit only the read end; the write end (not inheritable,
        # as os.pipe makes it) lives and dies with this process.
        self._lifeline_read, self._lifeline_write = os.pipe()
        atexit.register(self.close)
        try:
            self._start("controller")
            for b in self.broker_ids:
                self._start(b)
        except BaseException:  # one failed to start: stop the ones that did
            self.close()
            raise

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.host}:{self.ports[b]}" for b in self.broker_ids)

    def _command(self, who: Any) -> list[str]:
        base = [sys.executable, "-m", "minikafka.cli"]
        extra_flags = ["--exit-with-parent"]
        extra = [arg for k, v in sorted(self.config.items()) for arg in ("--override", f"{k}={v}")]
        if who == "controller":
            return base + ["controller", "--host", self.host, "--port", str(self.controller_port), *extra,
                           *extra_flags]
        return base + ["server", "--broker-id", str(who), "--host", self.host, "--port", str(self.ports[who]),
                       "--log-dir", str(self.dir / f"broker-{who}"),
                       "--controller", f"{self.host}:{self.controller_port}", *extra, *extra_flags]

    def out_file(self, who: Any) -> Path:
        """Where a process's stdout and stderr go (its log: warnings, closed connections)."""
        return self.dir / f"{'controller' if who == 'controller' else f'broker-{who}'}.out"

    def _start(self, who: Any) -> None:
        out = open(self.out_file(who), "ab")
        env = {**os.environ, LIFELINE_ENV: str(self._lifeline_read),
               MAIN_THREAD_ENV: "1" if threading.current_thread() is threading.main_thread() else "0"}
        proc = subprocess.Popen(self._command(who), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=False,
                                pass_fds=(self._lifeline_read,), env=env)
        out.close()
        self._procs[who] = proc
        port = self.controller_port if who == "controller" else self.ports[who]
        try:
            wait_for_port(self.host, port, self.startup_timeout_s, proc)
        except KafkaTimeoutError as e:  # say why: the last lines the process wrote
            tail = self.out_file(who).read_text(errors="replace").strip().splitlines()[-5:]
            raise KafkaTimeoutError("\n".join([str(e), *tail])) from None

    def _proc(self, broker_id: int) -> subprocess.Popen:
        if broker_id not in self.broker_ids:
            raise IllegalArgumentError(f"no broker {broker_id}; brokers are {self.broker_ids}")
        return self._procs[broker_id]

    def pid(self, who: Any) -> int:
        """The OS process id of a broker, or of ``"controller"``."""
        return (self._procs["controller"] if who == "controller" else self._proc(who)).pid

    def alive(self, broker_id: int) -> bool:
        return self._proc(broker_id).poll() is None

    def kill(self, broker_id: int) -> None:
        """SIGKILL the broker's process (its log directory stays, for ``restart``)."""
        proc = self._proc(broker_id)
        if proc.poll() is not None:
            raise IllegalArgumentError(f"broker {broker_id} is not running")
        proc.send_signal(signal.SIGCONT)  # a paused process must be able to die
        proc.kill()
        proc.wait()

    def restart(self, broker_id: int) -> None:
        """Start a killed broker again: same port, same log directory."""
        if self.alive(broker_id):
            raise IllegalArgumentError(f"broker {broker_id} is running; kill it first")
        self._start(broker_id)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the process is alive but does nothing (no heartbeats, no answers)."""
        self._proc(broker_id).send_signal(signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        self._proc(broker_id).send_signal(signal.SIGCONT)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
        for proc in self._procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for fd in (self._lifeline_read, self._lifeline_write):
            try:
                os.close(fd)
            except OSError:
                pass
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        try:
            atexit.unregister(self.close)
        except Exception:
            pass

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        alive = [b for b in self.broker_ids if self.alive(b)]
        return f"LocalCluster(bootstrap_servers={self.bootstrap_servers!r}, alive={alive})"


def launch(brokers: int = 3, **kwargs: Any) -> LocalCluster:
    """Start a local multi-process cluster: ``with minikafka.launch(brokers=3) as cluster: ...``"""
    return LocalCluster(brokers, **kwargs)
