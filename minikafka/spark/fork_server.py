"""Spark's per-query Python process, forked from one that has already imported it.

Theory of operation
-------------------
Spark starts a new Python process for every streaming query's stream reader
(``python -m pyspark.sql.streaming.python_streaming_source_runner``: ``PythonWorkerFactory``'s
simple worker, never its forking daemon, as the runner lives as long as the query). Its
imports (pyspark, pyarrow, numpy, this package) take 0.25-0.35 s of every query's start on
the course machine, a quarter of a 1,000,000-record AvailableNow drain. pyspark's own
``daemon.py`` avoids that cost for task workers the same way this does.

``session()`` starts the server (``python -m minikafka.spark.fork_server SOCKET --serve
MODULE --preload MODULE ...``) next to the JVM. It imports the modules once, then listens on
a Unix socket (bound under a temporary name and renamed, so a socket that exists is ready).
The workers' launcher (``session.worker_python()``) sends it, through ``fork_launcher``, a
request to run a served module: its argv, environment and working directory, and its
stdin, stdout and stderr as file descriptors. The server forks; the child becomes the
process Spark asked for (those descriptors, that environment, directory and ``sys.path``,
default signal handlers) and ``runpy`` runs the module as ``__main__``.

Spark keeps the process it started, the launcher: it kills it to stop the runner and asks
it whether it is alive. So the launcher lives as long as the child: it forwards SIGTERM,
SIGINT and SIGHUP, and exits with the child's status, which the server sends when it reaps
the child. A launcher that dies (SIGKILL) closes its connection, and the server kills its
child. The server exits when the session's process goes (its stdin, a pipe from that
process, closes), and kills the children it still has.

Never: run a request it cannot honour exactly. Interpreter options, a module it was not
told to serve, or an environment that a fresh Python would read differently at start
(``PYTHONHASHSEED`` and the other ``PYTHON*`` settings, the locale) get a refusal, and the
launcher then execs Python as it would have without the server. A child never returns
into the server's loop.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import re
import runpy
import selectors
import signal
import socket
import struct
import sys
import traceback

MAX_REQUEST = 1 << 20
_PARENT = 0  # stdin: a pipe from the session's process, closed when that process goes
# What a fresh interpreter reads from its environment before running anything (PYTHONPATH
# aside: the child builds its sys.path from the request's).
_STARTUP_SETTING = re.compile(r"PYTHON[A-Z]|LANG$|LC_")
_LEAVING = {signal.SIGTERM, signal.SIGINT}  # the signals that end the server through its cleanup


def startup_settings(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if _STARTUP_SETTING.match(k) and k != "PYTHONPATH"}


class ForkServer:
    def __init__(self, path: str, served: list[str]) -> None:
        self.path = path
        self.served = set(served)
        self.settings = startup_settings(dict(os.environ))
        own = os.environ.get("PYTHONPATH", "")
        self._own_pythonpath = [p for p in own.split(os.pathsep) if p]
        self.children: dict[int, socket.socket] = {}  # pid -> its launcher's connection

    # --- the server's loop --------------------------------------------------------------------

    def serve(self) -> None:
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)
        signal.set_wakeup_fd(self._wake_w.fileno())
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, _leave)
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])  # what a child starts with
        self.selector = selectors.DefaultSelector()
        self.selector.register(self._wake_r, selectors.EVENT_READ, "reap")
        self.selector.register(_PARENT, selectors.EVENT_READ, "parent")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            self.listener.bind(tmp)
            self.listener.listen(64)
            self.selector.register(self.listener, selectors.EVENT_READ, "accept")
            os.rename(tmp, self.path)  # a socket at the path is a server that is ready
            while True:
                for key, _ in self.selector.select():
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "reap":
                        self._drain_wakeups()
                        self._reap()
                    elif key.data == "parent":
                        if not os.read(_PARENT, 4096):
                            return  # the session's process is gone
                    else:  # a launcher never writes after its request: this is its end
                        self._launcher_closed(key.data)
        finally:
            for path in (tmp, self.path):
                try:
                    os.unlink(path)
                except OSError:
                    pass
            for pid in list(self.children):
                _kill(pid, signal.SIGKILL)
            for pid in list(self.children):
                try:
                    _, status = os.waitpid(pid, 0)
                except ChildProcessError:
                    continue
                self._report(pid, status)

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        fds: list[int] = []
        try:
            conn.settimeout(10)
            request, fds = _read_request(conn)
            refusal = self._refusal(request, fds)
            if refusal:
                _say(f"refused a request: {refusal}")
                conn.sendall(f"refused {refusal}\n".encode())
                conn.close()
                return
            # A SIGTERM between the fork and the bookkeeping would leave a child that the
            # cleanup cannot find (or a launcher never told its pid): it waits until both are done.
            with _signals_held():
                pid = self._fork(request, fds, conn)
                self._adopt(pid, conn)
        except (OSError, ValueError) as e:
            _say(f"refused a request: {e}")
            try:
                conn.sendall(f"refused {e}\n".encode())
            except OSError:
                pass
            conn.close()
            return
        finally:
            for fd in fds:
                os.close(fd)
        _say(f"forked {pid} to run {request['argv'][1]}")

    def _adopt(self, pid: int, conn: socket.socket) -> None:
        self.children[pid] = conn
        conn.setblocking(False)
        self.selector.register(conn, selectors.EVENT_READ, pid)
        try:
            conn.sendall(f"pid {pid}\n".encode())
        except OSError:
            self._launcher_closed(pid)

    def _refusal(self, request: dict, fds: list[int]) -> str | None:
        if not isinstance(request, dict):
            return "a request is a JSON object"
        argv = request.get("argv")
        if len(fds) != 3:
            return f"3 file descriptors expected, {len(fds)} received"
        if not (isinstance(argv, list) and len(argv) == 2 and argv[0] == "-m" and argv[1] in self.served):
            return f"not a module this server runs: {argv!r}"
        env = request.get("env")
        if not isinstance(env, dict) or not isinstance(request.get("cwd"), str):
            return "a request needs env and cwd"
        if startup_settings(env) != self.settings:
            return "the interpreter's start-up settings differ from the server's"
        return None

    def _launcher_closed(self, pid: int) -> None:
        # The launcher died (Spark's destroyForcibly, or any SIGKILL): nobody is left to
        # stop its child, so we do.
        if pid in self.children:
            _kill(pid, signal.SIGKILL)  # (first: a SIGTERM from here on finds it in children still)
            conn = self.children.pop(pid)
            self.selector.unregister(conn)
            conn.close()
            self._reap()

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self._report(pid, status)

    def _report(self, pid: int, status: int) -> None:
        conn = self.children.pop(pid, None)
        if conn is not None:
            self.selector.unregister(conn)
            said = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                    else f"exit {os.waitstatus_to_exitcode(status)}")
            try:
                conn.setblocking(True)
                conn.sendall(f"{said}\n".encode())
            except OSError:
                pass
            conn.close()

    # --- the child ----------------------------------------------------------------------------

    def _fork(self, request: dict, fds: list[int], conn: socket.socket) -> int:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:
            self._become(request, fds, conn)
            sys.argv = ["-m"]  # runpy puts the module's file first, as `python -m` does
            runpy.run_module(request["argv"][1], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = _exit_code(e)
        except BaseException:
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)

    def _become(self, request: dict, fds: list[int], conn: socket.socket) -> None:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)  # (held since before the fork)
        for s in (self.listener, self._wake_r, self._wake_w, conn, *self.children.values()):
            s.close()
        self.selector.close()
        os.close(_PARENT)  # (before fd 0 becomes the request's stdin)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        fds.clear()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # sys.path as `python -m` would build it here: the working directory, the request's
        # PYTHONPATH, then the interpreter's own entries.
        theirs = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        base = [p for p in sys.path[1:] if p not in self._own_pythonpath]
        sys.path[:] = [os.getcwd(), *theirs, *[p for p in base if p not in theirs]]


def _read_request(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 65536, 3)
    fds = list(fds)
    try:
        data = _read_up_to(conn, data, 4)
        (size,) = struct.unpack(">I", data[:4])
        if size > MAX_REQUEST:
            raise ValueError(f"a request of {size} bytes is larger than {MAX_REQUEST}")
        data = _read_up_to(conn, data, 4 + size)
        return json.loads(data[4:4 + size]), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        fds.clear()
        raise


def _read_up_to(conn: socket.socket, data: bytes, size: int) -> bytes:
    while len(data) < size:
        more = conn.recv(65536)
        if not more:
            raise ValueError("the launcher closed its connection mid-request")
        data += more
    return data


def _leave(number: int, _frame) -> None:
    raise SystemExit(128 + number)  # through serve()'s cleanup: the socket goes, the children too


@contextlib.contextmanager
def _signals_held():
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _LEAVING)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)  # one that came meanwhile is handled now


def _say(what: str) -> None:
    # stderr is the session's log file: what ran where, and why a request went the slow way.
    print(f"fork_server[{os.getpid()}]: {what}", file=sys.stderr, flush=True)


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    print(e.code, file=sys.stderr)
    return 1


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m minikafka.spark.fork_server", description=__doc__.split("\n")[0])
    parser.add_argument("socket", help="the Unix socket to listen on (created when ready)")
    parser.add_argument("--serve", action="append", required=True, help="a module the server runs (repeatable)")
    parser.add_argument("--preload", action="append", default=[], help="a module to import first (repeatable)")
    args = parser.parse_args(argv)
    for name in (*args.serve, *args.preload):
        importlib.import_module(name)
    for name in args.serve:
        # What it imports stays; the module itself runs as __main__ only, as with `python -m`.
        del sys.modules[name]
    ForkServer(args.socket, args.serve).serve()


if __name__ == "__main__":
    main()
