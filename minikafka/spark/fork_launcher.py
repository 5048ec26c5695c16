"""The process Spark starts, standing in for the one ``fork_server`` forks.

    python -I -S fork_launcher.py SOCKET PYTHON -m MODULE

Run as a script by the workers' launcher (``session.worker_python()``), with no site and
nothing imported but the standard library's, so it starts in milliseconds. It hands its
argv, environment, working directory and stdin/stdout/stderr to the server at SOCKET, then
lives as long as the child the server forked for it: signals Spark sends it (SIGTERM,
SIGINT, SIGHUP) go on to the child, and it exits as the child did. If there is no server,
or it refuses, it execs ``PYTHON -m MODULE`` itself, exactly what it was asked to run.
See ``fork_server`` for the whole design.
"""

import json
import os
import signal
import socket
import struct
import sys


def main() -> None:
    path, python, *args = sys.argv[1:]
    status = _run_forked(path, args)
    if status is None:
        os.execv(python, [python, *args])
    kind, number = status
    if kind == "signal":
        if number != signal.SIGKILL:  # (whose handler cannot be set)
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        number += 128
    os._exit(number)


def _run_forked(path: str, args: list) -> "tuple[str, int] | None":
    """The child's end, ("exit", code) or ("signal", number); None if no child was forked."""
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        body = json.dumps({"argv": args, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
        message = struct.pack(">I", len(body)) + body
        sent = socket.send_fds(conn, [message], [0, 1, 2])
        conn.sendall(message[sent:])
        answers = conn.makefile("rb")
        first = answers.readline().split()
    except OSError:
        return None
    if len(first) != 2 or first[0] != b"pid":
        return None
    child = int(first[1])

    def forward(number, _frame):
        try:
            os.kill(child, number)
        except ProcessLookupError:
            pass

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, forward)
    try:
        last = answers.readline().split()
    except OSError:
        last = []
    if len(last) == 2 and last[0] in (b"exit", b"signal"):
        return last[0].decode(), int(last[1])
    # The server went without a word: wait for the child to be gone, then say it failed.
    import select

    try:
        waiter = select.poll()  # (poll, not select: select refuses a descriptor numbered 1024 or more)
        waiter.register(os.pidfd_open(child), select.POLLIN)
        waiter.poll()
    except OSError:  # (gone already)
        pass
    return ("exit", 1)


if __name__ == "__main__":
    main()
