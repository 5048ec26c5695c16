"""Issue 13: what one large Metadata request naming topics costs a broker, and its other clients.

    .venv/bin/python benchmarks/metadata_cost.py [TOPICS] [--auto] [--no-tcp]

In process: the request (~24 bytes per name) decoded by the codec, handled by a ``Broker``
(its own log directory, no cluster), the answer encoded: wall time of each step and the
growth of the process's resident memory. Over TCP: a ``launch(brokers=1, controllers=1)``
cluster, one client sending the large request while another sends a small Metadata request
every 10 ms; the longest wait of the small ones is how long the broker stalled everyone else.
``--auto`` asks for auto-creation of every name (what a producer's Metadata request does).
Not part of ``make bench``: run it by hand, before and after a change.
"""

from __future__ import annotations

import gc
import socket
import struct
import sys
import tempfile
import threading
import time

from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.parser import KafkaProtocol


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 1e6


def request_frame(n: int, auto: bool, corr: int = 1) -> bytes:
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=f"missing-topic-{i:08d}")
                                  for i in range(n)], allow_auto_topic_creation=auto)
    req.API_VERSION = 8
    parser = KafkaProtocol(client_id="bench")
    parser.send_request(req, correlation_id=corr)
    return bytes(parser.send_bytes())


def in_process(n: int, auto: bool) -> str:
    from minikafka.broker.broker import Broker
    from minikafka.broker.config import BrokerConfig
    from minikafka.wire import codec

    frame = request_frame(n, auto)[4:]
    gc.collect()
    broker = Broker(1, tempfile.mkdtemp(), BrokerConfig())
    broker.start(0)
    base = rss_mb()
    t0 = time.perf_counter()
    decoded = codec.decode_request(frame)
    t1 = time.perf_counter()
    effects = broker.handle(1, "/client", decoded.messages[0])
    t2 = time.perf_counter()
    (answer,) = [e.message for e in effects if getattr(e, "dst", None) == "/client"]
    out = codec.encode_response(decoded, answer, context={"brokers": {1: ("127.0.0.1", 9092)},
                                                          "cluster_id": "bench", "broker_id": 1})
    t3 = time.perf_counter()
    return (f"in process: {len(frame):,} B request, {n:,} names: decode {t1 - t0:.2f} s, broker {t2 - t1:.2f} s, "
            f"encode {t3 - t2:.2f} s; answer {len(out):,} B; RSS +{rss_mb() - base:.0f} MB")


def small_metadata(sock: socket.socket, corr: int) -> None:
    parser = KafkaProtocol(client_id="watcher")
    req = MetadataRequest(topics=[], allow_auto_topic_creation=False)
    req.API_VERSION = 4
    parser.send_request(req, correlation_id=corr)
    sock.sendall(bytes(parser.send_bytes()))
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    sock.recv(size, socket.MSG_WAITALL)


class MetadataWatcher:
    """Another client: a small Metadata request every 10 ms on its own connection to
    ``address``, in a thread, from ``start()`` to ``stop()``; ``waits`` holds how long each took."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.waits: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        with socket.create_connection(self.address, timeout=120) as sock:
            corr = 0
            while not self._stop.is_set():
                corr += 1
                t = time.perf_counter()
                small_metadata(sock, corr)
                self.waits.append(time.perf_counter() - t)
                time.sleep(0.01)

    def start(self) -> "MetadataWatcher":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def summary(self) -> str:
        waits = sorted(self.waits)
        return (f"another client's Metadata waited at most {waits[-1] * 1000:.0f} ms "
                f"(median {waits[len(waits) // 2] * 1000:.1f} ms, {len(waits)} requests)")


def over_tcp(n: int, auto: bool) -> str:
    from minikafka.wire.process import launch

    frame = request_frame(n, auto)
    with launch(brokers=1, controllers=1) as cluster:
        address = (cluster.host, cluster.ports[1])
        watcher = MetadataWatcher(address).start()
        time.sleep(1.0)
        with socket.create_connection(address, timeout=300) as big:
            t = time.perf_counter()
            big.sendall(frame)
            size = struct.unpack(">i", big.recv(4, socket.MSG_WAITALL))[0]
            big.recv(size, socket.MSG_WAITALL)
            took = time.perf_counter() - t
        time.sleep(1.0)
        watcher.stop()
        rss = int(open(f"/proc/{cluster.pid(1)}/status").read().split("VmHWM:")[1].split()[0]) / 1024
    return f"over TCP: the large request answered in {took:.2f} s; {watcher.summary()}; broker peak RSS {rss:.0f} MB"


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    topics = int(args[0]) if args else 2_000_000 // 24
    auto = "--auto" in sys.argv
    print(in_process(topics, auto), flush=True)
    if "--no-tcp" not in sys.argv:
        print(over_tcp(topics, auto), flush=True)
