"""One Kafka request over a plain socket, for tools that need an answer and nothing else.

Theory of operation
-------------------
``LocalCluster`` must know when its brokers are registered, and ``minikafka metadata-quorum``
asks one broker for DescribeQuorum: neither needs a whole client (its metadata refreshes,
its threads, its retries). ``roundtrip`` frames one request with kafka-python's protocol
classes (the ones the codec builds on), sends it, reads one response frame and decodes it.
Any failure (refused, reset, timed out, an unreadable answer) is ``None`` for
``live_brokers`` and an ``OSError`` for ``roundtrip``: callers poll or report.
"""

from __future__ import annotations

import itertools
import socket
from typing import Any

from minikafka.wire.network_receive import recv_exactly

_correlation = itertools.count(1)


def roundtrip(host: str, port: int, request: Any, response_class: Any, version: int,
              *, timeout_s: float = 2.0) -> Any:
    corr = next(_correlation)
    request.with_header(correlation_id=corr, client_id="minikafka-probe")
    data = request.encode(header=True, framed=True)
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(data)
        size = int.from_bytes(recv_exactly(sock, 4), "big", signed=True)
        if size < 4:
            raise OSError(f"a response frame of {size} bytes from {host}:{port}")
        frame = recv_exactly(sock, size)
    try:
        return response_class.decode(frame, version=version, header=True)
    except Exception as e:
        raise OSError(f"unreadable {response_class.__name__} from {host}:{port}: {e}") from None


def live_brokers(host: str, port: int) -> list[int] | None:
    """The broker ids a broker's Metadata answer lists (its live brokers), or None if it
    does not answer."""
    listed = live_endpoints(host, port)
    return None if listed is None else sorted(listed)


def live_endpoints(host: str, port: int) -> dict[int, tuple[str, int]] | None:
    """{broker id: (host, port)} as a broker's Metadata answer lists them, or None if it does
    not answer."""
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    try:
        response = roundtrip(host, port, MetadataRequest(version=4, topics=[], allow_auto_topic_creation=False),
                             MetadataResponse, 4, timeout_s=1.0)
    except OSError:
        return None
    return {b.node_id: (b.host, b.port) for b in response.brokers}
