"""A TCP proxy in front of one broker that answers ListOffsets "latest" wrongly, for tests.

It stands for a Kafka-compatible broker whose ListOffsets disagrees with its log (Tansu
answered "latest" with the last batch's base offset + 1). Every frame passes through as it
is, except:

- Metadata responses name the proxy instead of the broker, so clients come back through it;
- ListOffsets responses to a "latest" (-1) lookup carry ``lie(topic, partition, offset)``
  instead of the broker's offset.

The broker serves ListOffsets in non-flexible versions only (<= 5) and Metadata up to v12,
flexible from v9 (``minikafka.wire.codec.SUPPORTED``): a flexible response header is the
correlation id and an empty tagged-field section (one byte, 0). kafka-python's protocol
classes decode and encode the bodies.
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Callable

from minikafka.wire.network_receive import recv_exactly

LIST_OFFSETS, METADATA = 2, 3
LATEST = -1
_HEAD = struct.Struct(">hhih")  # api key, api version, correlation id, client id length


def _frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    return recv_exactly(sock, size)


class ListOffsetsProxy:
    """``with ListOffsetsProxy(("127.0.0.1", port), lie) as proxy: proxy.address``"""

    def __init__(self, broker: tuple[str, int], lie: Callable[[str, int, int], int]) -> None:
        self.broker = broker
        self.lie = lie
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.server.getsockname()[1]
        self.lies_told = 0
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.broker)
            self._socks += [client, upstream]
            asked: dict[int, tuple[int, int, set]] = {}
            threading.Thread(target=self._requests, args=(client, upstream, asked), daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client, asked), daemon=True).start()

    def _requests(self, client, upstream, asked) -> None:
        from kafka.protocol.consumer import ListOffsetsRequest

        try:
            while True:
                frame = _frame(client)
                key, version, corr, id_len = _HEAD.unpack_from(frame, 0)
                latest: set = set()
                if key == LIST_OFFSETS:
                    body = frame[_HEAD.size + max(id_len, 0):]
                    request = ListOffsetsRequest.decode(body, version=version)
                    latest = {(t.name, p.partition_index) for t in request.topics for p in t.partitions
                              if p.timestamp == LATEST}
                asked[corr] = (key, version, latest)
                upstream.sendall(struct.pack(">i", len(frame)) + frame)
        except (OSError, ConnectionError):
            self._close(client, upstream)

    def _responses(self, upstream, client, asked) -> None:
        from kafka.protocol.consumer import ListOffsetsResponse
        from kafka.protocol.metadata import MetadataResponse

        host, port = self.address.split(":")
        try:
            while True:
                frame = _frame(upstream)
                (corr,) = struct.unpack_from(">i", frame, 0)
                key, version, latest = asked.pop(corr, (None, None, set()))
                if key == METADATA:
                    header = 5 if MetadataResponse.flexible_version_q(version) else 4
                    if header == 5 and frame[4] != 0:
                        raise ConnectionError(f"a Metadata v{version} response header with tagged fields")
                    response = MetadataResponse.decode(frame[header:], version=version)
                    for b in response.brokers:
                        b.host, b.port = host, int(port)
                    frame = frame[:header] + response.encode()  # in the version it was decoded in
                elif key == LIST_OFFSETS and latest:
                    response = ListOffsetsResponse.decode(frame[4:], version=version)
                    for t in response.topics:
                        for p in t.partitions:
                            if (t.name, p.partition_index) in latest and p.offset >= 0:
                                told = self.lie(t.name, p.partition_index, p.offset)
                                self.lies_told += told != p.offset
                                p.offset = told
                    frame = frame[:4] + response.encode()  # in the version it was decoded in
                client.sendall(struct.pack(">i", len(frame)) + frame)
        except (OSError, ConnectionError):
            self._close(client, upstream)

    @staticmethod
    def _close(*socks) -> None:
        for s in socks:
            try:
                s.close()
            except OSError:
                pass

    def close(self) -> None:
        self.server.close()
        self._close(*self._socks)

    def __enter__(self) -> "ListOffsetsProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
