"""Reading a whole answer from a blocking socket: ``recv_exactly``.

Theory of operation
-------------------
A Kafka frame is a 4-byte big-endian size and then that many bytes, and TCP delivers
them in whatever pieces it likes: one ``recv`` may return a part of the size, or half a
frame. Kafka's ``NetworkReceive`` reads until it has the size, then until it has the
body. The blocking readers here (the client runtime's bootstrap exchange, the admin
probe, the tests' ListOffsets proxy) do the same with ``recv_exactly``, each with its own
check of the size it read. (The broker's asyncio runtime has ``readexactly`` for this.)

A peer that closes the connection before ``n`` bytes came is a ``ConnectionError`` (an
``OSError``, as a reset or a refused connection is) that says how far the read got; a
timeout set on the socket raises ``TimeoutError`` from ``recv`` as usual.
"""

from __future__ import annotations

import socket


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    """The next ``n`` bytes from ``sock``, or ``ConnectionError`` if the peer closes first."""
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"the peer closed the connection after {len(data)} of {n} bytes")
        data += chunk
    return bytes(data)


__all__ = ["recv_exactly"]
