"""``recv_exactly``: the one blocking "read n bytes" the wire side's readers share."""

from __future__ import annotations

import socket

import pytest

from minikafka.wire.network_receive import recv_exactly


def test_recv_exactly_gathers_a_frame_that_arrives_in_pieces():
    a, b = socket.socketpair()
    with a, b:
        for piece in (b"\x00\x00", b"\x00\x05he", b"llo", b"tail"):
            a.sendall(piece)
        assert recv_exactly(b, 4) == b"\x00\x00\x00\x05"
        assert recv_exactly(b, 5) == b"hello"
        assert recv_exactly(b, 4) == b"tail"


def test_recv_exactly_names_how_far_it_got_when_the_peer_closes_early():
    a, b = socket.socketpair()
    with b:
        a.sendall(b"abc")
        a.close()
        with pytest.raises(ConnectionError, match="closed the connection after 3 of 8 bytes"):
            recv_exactly(b, 8)


def test_recv_exactly_of_nothing_reads_nothing():
    a, b = socket.socketpair()
    with a, b:
        assert recv_exactly(b, 0) == b""
