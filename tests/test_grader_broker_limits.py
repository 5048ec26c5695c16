"""The grader's broker (``minikafka/course/grader_broker.py``) holds at most a few threads and file
descriptors for one call, however many connections the submission opens.

A red team opened 2,000 connections during one ``api_versions`` call: the grader held ~800
threads and ~830 fds, one of each per connection, in the process that (``--jobs`` > 1) grades
other students at the same time. Now at most ``MAX_OPEN`` connections of a call are served at
once and ``MAX_PER_CALL`` in all; the others are closed at once, with no thread. The clients here
are this process's own sockets; every wait is on a state (a socket's end), never a guessed sleep.
"""

from __future__ import annotations

import os
import select
import socket
import threading
from types import SimpleNamespace

import pytest

from minikafka.course import grader_broker, properties
from minikafka.course.grader_broker import GraderBroker

CASE = SimpleNamespace(answer=(0, {18: (0, 3)}), split=False)
CONNECTIONS = 300
MAX_OPEN, MAX_PER_CALL = 8, 64  # the module's caps (checked below)
PROC_FD = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="fds are counted in /proc")


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def ended(sock: socket.socket) -> bool:
    """Whether the broker closed its end (a read gives b"" or an error) without our waiting."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


class Peak:
    """The most threads, and fds beside our own open clients, seen above a baseline."""

    def __init__(self) -> None:
        self.threads0, self.fds0 = threading.active_count(), fds()
        self.threads = self.fds = 0

    def sample(self, ours: int) -> None:
        self.threads = max(self.threads, threading.active_count() - self.threads0)
        self.fds = max(self.fds, fds() - self.fds0 - ours)


def wait_until_all_but(clients: list[socket.socket], left: int, peak: Peak | None = None,
                       timeout: float = 20) -> list[socket.socket]:
    """Wait (select) until the broker has closed all but `left` of `clients` (or `timeout` seconds
    pass with none closed); the ones still open. The closed ones are closed here too."""
    open_ = list(clients)
    while len(open_) > left:
        if peak:
            peak.sample(len(open_))
        readable, _, _ = select.select(open_, [], [], timeout)
        if not readable:
            break
        for sock in readable:
            if ended(sock):
                sock.close()
                open_.remove(sock)
    if peak:
        peak.sample(len(open_))
    return open_


def flood(address, n: int) -> list[socket.socket]:
    """n connections, each sending one byte of a frame (never a whole one: a served one waits)."""
    clients = []
    for _ in range(n):
        sock = socket.create_connection(address)
        sock.sendall(b"\0")
        clients.append(sock)
    return clients


@PROC_FD
def test_a_call_that_opens_hundreds_of_connections_costs_the_grader_a_few_threads_and_fds(monkeypatch):
    # The served connections (one byte of a frame each) stay open while this test looks.
    monkeypatch.setattr(grader_broker, "READ_TIMEOUT", 60.0)
    with GraderBroker() as broker:
        slot = broker.expect(CASE)
        broker.start()
        peak = Peak()  # the accepting thread and the listener are in the baseline
        broker.serve(slot)
        clients = flood(broker.address, CONNECTIONS)
        try:
            kept = wait_until_all_but(clients, MAX_OPEN, peak)  # the rest the broker closed at once
            # The broker's share: its threads beside the accepting one; its fds beside our clients
            # (one more: a connection accepted and not yet closed).
            assert peak.threads <= MAX_OPEN, f"{peak.threads} threads for one call"
            assert peak.fds <= MAX_OPEN + 1, f"{peak.fds} fds for one call"
            assert len(kept) == MAX_OPEN
        finally:
            broker.serve(None)
            for sock in clients:
                sock.close()
        record = broker.record(slot)
        assert len(record) == MAX_PER_CALL  # counted (the judge sees many), up to the cap
        # The judge still says what was wrong: more than one connection in one call.
        said = properties.judge("api_versions", (CASE, record), None)
        assert said and "more than one connection" in said
    assert (grader_broker.MAX_OPEN, grader_broker.MAX_PER_CALL) == (MAX_OPEN, MAX_PER_CALL)


def test_a_flooded_call_leaves_the_next_call_served():
    with GraderBroker() as broker:
        flooded, next_call = broker.expect(CASE), broker.expect(CASE)
        broker.start()
        broker.serve(flooded)
        clients = flood(broker.address, 2 * MAX_PER_CALL)
        for sock in wait_until_all_but(clients, MAX_OPEN):
            sock.close()
        broker.serve(next_call)
        with socket.create_connection(broker.address, timeout=10) as sock:  # one whole ApiVersions v0 request
            body = b"\x00\x12\x00\x00" + (7).to_bytes(4, "big") + b"\x00\x01c"
            sock.sendall(len(body).to_bytes(4, "big") + body)
            answer = b""
            while len(answer) < 4 or len(answer) < 4 + int.from_bytes(answer[:4], "big"):
                chunk = sock.recv(4096)
                assert chunk, "the next call's connection was not answered"
                answer += chunk
        assert answer == grader_broker.answer_frame(7, *CASE.answer)
        broker.serve(None)
        assert len(broker.record(next_call)) == 1  # (its `answered` is set just after the answer is sent)
