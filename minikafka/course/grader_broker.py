"""A broker of the grader's own, for the hidden property of an exercise that asks a broker.

Theory of operation
-------------------
Lecture 09's ``api_versions(address, correlation_id, client_id, api_version)`` sends one
ApiVersions request to ``address`` and returns the broker's answer. Its property needs answers
the submission cannot know: the grader runs this broker in its own process and, for each call,
answers with API ranges drawn for this grading (``wire_properties``), never sent to the kernel
before the student's code asks for them.

- ``GraderBroker()`` binds 127.0.0.1 on a free port of the grader's own network (``port``,
  ``address``), on first use only. The sandboxed kernel usually has a network namespace of its
  own, whose 127.0.0.1 is not the grader's: ``Sandbox(listen_port=port)`` then hands over a
  socket listening on the same port inside the kernel's namespace, which ``adopt`` serves on
  instead. Either way the call cells pass the same ``("127.0.0.1", port)``.
- ``expect(case)`` registers one call's case (its drawn answer) and gives its slot; the runner
  calls ``serve(slot)`` just before it sends the call's cell (``serve(None)`` for any other
  cell). A connection accepted while slot k runs is answered from case k and recorded
  (``record(k)``: every frame the client sent, per connection), for the judge to check the
  request (correlation id, client id, version, an empty body) and the answer.
- A request is answered as a broker answers ApiVersions v0: the request's correlation id, then
  the drawn error code and ranges in a v0 body. The cases that say ``split`` send the answer in
  two pieces a moment apart, so a client that reads once instead of reading the whole answer
  (the exercise's ``recv`` rule) gets half of it.

Never: answer outside a call (the connection is closed at once), wait for a client without a
deadline (a client that sends no whole frame, or does not close, is dropped after
``READ_TIMEOUT``/``LINGER`` seconds: a submission waiting for us never waits long), read more
than ``MAX_FRAME`` bytes of a frame, or hold more than ``MAX_OPEN`` of one call's connections open
at once or serve more than ``MAX_PER_CALL`` in all (a call opens one; past either cap the
connection is closed at once, with no thread, and past ``MAX_PER_CALL`` not recorded either), so
a submission that opens thousands of connections never costs the grader, which may be grading
other students at the same time (``--jobs``), more than a few threads and file descriptors.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

READ_TIMEOUT = 5.0   # seconds a client has to send a whole request
LINGER = 2.0         # seconds we wait for the client to close after the answer
SPLIT_PAUSE = 0.25   # seconds between the two pieces of a split answer
MAX_FRAME = 1 << 20  # an ApiVersions request is a few dozen bytes
MAX_OPEN = 8         # connections of one call served at once (the exercise opens one)
MAX_PER_CALL = 64    # connections of one call recorded, and served, in all


@dataclass
class Connection:
    """What one client connection sent: each frame whole (its size included), and raw bytes
    left over that made no whole frame."""

    frames: list[bytes] = field(default_factory=list)
    leftover: bytes = b""
    answered: bool = False


def answer_frame(correlation_id: int, error_code: int, api_keys: dict[int, tuple[int, int]]) -> bytes:
    """An ApiVersions v0 answer, framed: size, correlation id, error code, then the ranges."""
    body = struct.pack(">ihi", correlation_id, error_code, len(api_keys)) + b"".join(
        struct.pack(">hhh", key, low, high) for key, (low, high) in api_keys.items())
    return struct.pack(">i", len(body)) + body


class GraderBroker:
    """One listening socket, answering each connection from the case of the call running now."""

    def __init__(self) -> None:
        self._server: socket.socket | None = None
        self._cases: list[Any] = []
        self._records: list[list[Connection]] = []
        self._current: int | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._open: dict[int, int] = {}  # slot -> its connections being served now

    # -- setting up -----------------------------------------------------------------------------

    @property
    def bound(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        if self._server is None:
            self._server = socket.create_server(("127.0.0.1", 0))
        return self._server.getsockname()[1]

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def expect(self, case: Any) -> int:
        """Register one call's case (``case.answer``: correlation id aside, the error code and the
        ranges to serve; ``case.split``); returns its slot."""
        self._cases.append(case)
        self._records.append([])
        return len(self._cases) - 1

    def adopt(self, listener: socket.socket | None) -> None:
        """Serve on ``listener`` (bound to our port in the kernel's network) instead of our own."""
        if listener is None:
            return
        if self._server is not None:
            self._server.close()
        self._server = listener

    def start(self) -> None:
        if self._threads:
            return
        self.port  # bound now if it was not yet
        self._server.settimeout(0.2)
        thread = threading.Thread(target=self._accept, daemon=True, name="grader-broker")
        thread.start()
        self._threads.append(thread)

    def serve(self, slot: int | None) -> None:
        """From now on connections are answered from case ``slot`` (None: refused)."""
        with self._lock:
            self._current = slot

    def record(self, slot: int) -> list[Connection]:
        with self._lock:
            return list(self._records[slot])

    def close(self) -> None:
        self._stop.set()
        for thread in list(self._threads):
            thread.join(READ_TIMEOUT + LINGER + SPLIT_PAUSE + 1)
        if self._server is not None:
            self._server.close()
            self._server = None

    def __enter__(self) -> "GraderBroker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- serving --------------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._lock:
                slot = self._current
                served = False
                if slot is not None and len(self._records[slot]) < MAX_PER_CALL:
                    connection = Connection()  # recorded even when refused: the judge counts them
                    self._records[slot].append(connection)
                    served = self._open.get(slot, 0) < MAX_OPEN
                    if served:
                        self._open[slot] = self._open.get(slot, 0) + 1
            if not served:  # outside a call, or past a cap: no thread, no fd kept
                conn.close()
                continue
            thread = threading.Thread(target=self._handle, args=(conn, slot, connection),
                                      daemon=True, name="grader-broker-connection")
            self._threads = [t for t in self._threads if t.is_alive()]  # the finished ones go
            self._threads.append(thread)
            thread.start()

    def _handle(self, conn: socket.socket, slot: int, connection: Connection) -> None:
        case = self._cases[slot]
        try:
            conn.settimeout(READ_TIMEOUT)
            frame = self._read_frame(conn, connection)
            if frame is None:
                return
            if len(frame) >= 12:  # size, api key, version, correlation id: echo it, as brokers do
                (correlation_id,) = struct.unpack_from(">i", frame, 8)
                error_code, api_keys = case.answer
                answer = answer_frame(correlation_id, error_code, api_keys)
                if case.split:
                    cut = min(len(answer) - 1, 9)
                    conn.sendall(answer[:cut])
                    time.sleep(SPLIT_PAUSE)
                    conn.sendall(answer[cut:])
                else:
                    conn.sendall(answer)
                connection.answered = True
            conn.settimeout(LINGER)
            while self._read_frame(conn, connection) is not None:
                pass
        except OSError:
            pass
        finally:
            conn.close()
            with self._lock:
                self._open[slot] -= 1

    @staticmethod
    def _read_frame(conn: socket.socket, connection: Connection) -> bytes | None:
        """One whole frame (recorded), or None at the end of the stream, a bad size or a timeout
        (what came is kept as ``leftover``)."""
        data = _read(conn, 4)
        if len(data) == 4:
            (size,) = struct.unpack(">i", data)
            if 0 <= size <= MAX_FRAME:
                data += _read(conn, size)
                if len(data) == 4 + size:
                    connection.frames.append(data)
                    return data
        connection.leftover += data
        return None


def _read(conn: socket.socket, n: int) -> bytes:
    """Up to ``n`` bytes: fewer at the end of the stream or a timeout."""
    data = b""
    try:
        while len(data) < n:
            chunk = conn.recv(min(65536, n - len(data)))
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    return data
