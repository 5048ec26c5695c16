"""minikafka.spark.fork_server and its launcher, without Spark: a process started through the
launcher must be what `python -m MODULE` would have been (argv, directory, environment,
sys.path, hash seed, stdin/stdout/stderr, exit status), and signals and deaths must reach
across the fork as they would reach a process Spark started itself."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from minikafka.spark import fork_launcher, fork_server
from wire_helpers import wait_until

TARGET = textwrap.dedent("""
    import json, os, sys


    def main():
        print(json.dumps({
            "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "colour": os.environ.get("COLOUR"),
            "hash": hash("minikafka"), "name": __name__, "stdin": sys.stdin.readline().strip(),
            "in_path": [p for p in sys.path if p.endswith("extra")],
        }), flush=True)
        print("to stderr", file=sys.stderr, flush=True)
        print(json.dumps({"pid": os.getpid(), "ppid": os.getppid()}), flush=True)
        if os.environ.get("WAIT"):
            sys.stdin.read()  # until the test kills us
        sys.exit(int(os.environ.get("CODE", "0")))


    if __name__ == "__main__":  # the server imports it first, as it does pyspark's runner
        main()
""")



# The fork server, but the SIGTERM a test sends arrives while the server is adopting the child
# it has just forked (registering its launcher's connection): the server says when it is there
# (a file), then waits, up to a minute, until the signal has come.
SLOW_ADOPTION = textwrap.dedent("""
    import pathlib, selectors, signal, sys, time

    from minikafka.spark import fork_server


    class SlowToAdopt(selectors.DefaultSelector):
        def register(self, fileobj, events, data=None):
            if isinstance(data, int):  # a child's pid: its launcher's connection
                pathlib.Path("adopting").touch()
                deadline = time.monotonic() + 60
                while signal.SIGTERM not in signal.sigpending() and time.monotonic() < deadline:
                    time.sleep(0.01)  # (a handler, if the signal is not held, raises in here)
            return super().register(fileobj, events, data)


    selectors.DefaultSelector = SlowToAdopt
    fork_server.main()
""")


def _start_server(tmp_path: Path, module: str = "minikafka.spark.fork_server"):
    (tmp_path / "fork_target.py").write_text(TARGET)
    (tmp_path / "slow_adoption.py").write_text(SLOW_ADOPTION)
    sock = tmp_path / "fork.sock"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONHASHSEED": "0"}
    proc = subprocess.Popen([sys.executable, "-m", module, str(sock), "--serve", "fork_target",
                             "--preload", "json"], stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    wait_until(lambda: sock.exists() or proc.poll() is not None, 60, "the fork server's socket")
    assert proc.poll() is None, proc.stderr.read()
    return proc, sock


@pytest.fixture
def server(tmp_path):
    proc, sock = _start_server(tmp_path)
    yield proc, sock
    if proc.poll() is None:
        proc.stdin.close()
        proc.wait(timeout=30)


def run(args: list[str], tmp_path: Path, stdin: str = "hello\n", **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": f"{tmp_path}:{tmp_path / 'extra'}", "PYTHONHASHSEED": "0", **env}
    return subprocess.run(args, input=stdin, capture_output=True, text=True, env=full, cwd=tmp_path / "work",
                          timeout=60)


def launcher(sock: Path, module: str = "fork_target") -> list[str]:
    return [sys.executable, "-I", "-S", fork_launcher.__file__, str(sock), sys.executable, "-m", module]


def test_a_forked_run_is_what_python_dash_m_would_have_run(server, tmp_path):
    proc, sock = server
    (tmp_path / "work").mkdir()
    direct = run([sys.executable, "-m", "fork_target"], tmp_path, COLOUR="blue", CODE="3")
    forked = run(launcher(sock), tmp_path, COLOUR="blue", CODE="3")
    assert direct.returncode == forked.returncode == 3
    assert forked.stdout.splitlines()[0] == direct.stdout.splitlines()[0]
    first = direct.stdout.splitlines()[0]
    assert '"argv": ["' + str(tmp_path / "fork_target.py") + '"]' in first and '"stdin": "hello"' in first
    assert '"name": "__main__"' in first and '"colour": "blue"' in first
    assert forked.stderr == direct.stderr == "to stderr\n"
    ids = json.loads(forked.stdout.splitlines()[1])
    assert ids["ppid"] == proc.pid  # forked by the server, not started afresh


def test_requests_it_cannot_honour_exactly_run_as_before(server, tmp_path):
    proc, sock = server
    (tmp_path / "work").mkdir()
    for args, env in [
        (launcher(sock), {"PYTHONHASHSEED": "1"}),  # a different hash seed than the server's
        (launcher(sock), {"PYTHONWARNINGS": "default::UserWarning:fork_target"}),  # another start-up setting
        (launcher(sock, "json.tool"), {}),  # not a module it serves
        (launcher(tmp_path / "no-such.sock"), {}),  # no server
    ]:
        out = run(args, tmp_path, stdin='{"a": 1}\n', **env)
        assert out.returncode == 0, out.stderr
        if args[-1] == "fork_target":
            ids = json.loads(out.stdout.splitlines()[1])
            assert ids["ppid"] != proc.pid
    assert proc.poll() is None


def _start_waiting(sock: Path, tmp_path: Path) -> tuple[subprocess.Popen, int]:
    (tmp_path / "work").mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONHASHSEED": "0", "WAIT": "1"}
    p = subprocess.Popen(launcher(sock), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         env=env, cwd=tmp_path / "work", text=True)
    p.stdin.write("x\n")
    p.stdin.flush()
    p.stdout.readline()
    child = json.loads(p.stdout.readline())["pid"]
    return p, child


def _gone(pid: int, timeout: float = 30) -> bool:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        waiter = select.poll()  # select() refuses descriptors >= 1024, which a long test run reaches
        waiter.register(fd, select.POLLIN)
        return bool(waiter.poll(timeout * 1000))
    finally:
        os.close(fd)


def test_sigterm_to_the_launcher_ends_the_child_and_the_launcher_says_so(server, tmp_path):
    _, sock = server
    p, child = _start_waiting(sock, tmp_path)
    assert child != p.pid
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == -signal.SIGTERM
    assert _gone(child)


def test_a_killed_launcher_takes_its_child_with_it(server, tmp_path):
    proc, sock = server
    p, child = _start_waiting(sock, tmp_path)
    p.kill()
    p.wait(timeout=30)
    assert _gone(child)
    assert proc.poll() is None  # the server goes on


def test_the_server_leaves_with_the_process_that_started_it(server, tmp_path):
    proc, sock = server
    p, child = _start_waiting(sock, tmp_path)
    proc.stdin.close()  # as when the Spark session's Python exits
    assert proc.wait(timeout=30) == 0, proc.stderr.read()
    assert not sock.exists()
    assert _gone(child)
    assert p.wait(timeout=30) == -signal.SIGKILL


def test_a_sigterm_while_the_server_adopts_a_child_still_ends_that_child_and_its_launcher(tmp_path):
    # A clean-clone CI run once sent the SIGTERM above in this window: the server exited 1
    # (a KeyError in its cleanup) instead of 143, and a child could have outlived it.
    proc, sock = _start_server(tmp_path, "slow_adoption")
    try:
        p, child = _start_waiting(sock, tmp_path)
        wait_until(lambda: (tmp_path / "adopting").exists(), 60, "the server adopting its child")
        proc.terminate()
        assert proc.wait(timeout=90) == 128 + signal.SIGTERM, proc.stderr.read().decode()
        assert not sock.exists()
        assert _gone(child)
        assert p.wait(timeout=30) == -signal.SIGKILL  # told its child's pid first, then its end
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_the_server_refuses_interpreter_options_and_anything_but_three_descriptors(server, tmp_path):
    proc, sock = server
    import socket
    import struct

    def ask(argv, fds):
        body = json.dumps(argv if argv == [] else {"argv": argv, "env": dict(os.environ, PYTHONHASHSEED="0"),
                                                    "cwd": str(tmp_path)}).encode()
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(sock))
            socket.send_fds(s, [struct.pack(">I", len(body)) + body], fds)
            return s.makefile("rb").readline().decode()

    assert ask(["-u", "-m", "fork_target"], [0, 1, 2]).startswith("refused not a module this server runs")
    assert ask(["-m", "fork_target"], [0]).startswith("refused 3 file descriptors expected, 1 received")
    assert ask([], [0, 1, 2]).startswith("refused a request is a JSON object")
    assert proc.poll() is None
    assert fork_server.startup_settings({"PYTHONPATH": "x", "PYTHONHASHSEED": "0", "LC_ALL": "C", "HOME": "/"}) == {
        "PYTHONHASHSEED": "0", "LC_ALL": "C"}


def test_a_launcher_whose_server_dies_lives_as_long_as_its_child(server, tmp_path):
    # Spark judges the runner alive by the process it started: that must not end first.
    proc, sock = server
    p, child = _start_waiting(sock, tmp_path)
    proc.kill()
    proc.wait(timeout=30)
    assert not _gone(child, timeout=0.5) and p.poll() is None
    os.kill(child, signal.SIGTERM)
    assert _gone(child)
    assert p.wait(timeout=30) == 1


def test_sigterm_to_the_server_removes_its_socket_and_its_children(server, tmp_path):
    proc, sock = server
    p, child = _start_waiting(sock, tmp_path)
    proc.terminate()
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert not sock.exists()
    assert _gone(child)
    assert p.wait(timeout=30) == -signal.SIGKILL
