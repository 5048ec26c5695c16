"""Issue 13: what clients that never finish their large request frames cost a broker.

    .venv/bin/python -m benchmarks.partial_frames [CONNECTIONS] [--seconds S]

A ``launch(brokers=1, controllers=1)`` cluster. CONNECTIONS (40) sockets each announce a
100,000,000-byte frame (under ``socket.request.max.bytes``) and send 90 MB of it, never the
rest, while a watcher sends a small Metadata request every 10 ms on its own connection.
After S seconds (20) of sending: the broker's peak resident memory, how much the senders got
into the broker's socket, and the watcher's longest wait. Not part of ``make bench``.
"""

from __future__ import annotations

import argparse
import socket
import struct
import threading
import time

from benchmarks.metadata_cost import MetadataWatcher

FRAME, SENT = 100_000_000, 90_000_000


def run(connections: int, seconds: float) -> str:
    from minikafka.wire.process import launch

    with launch(brokers=1, controllers=1) as cluster:
        address = (cluster.host, cluster.ports[1])
        sent = [0] * connections
        stop = threading.Event()

        def send(i: int) -> None:
            chunk = bytes(1 << 20)
            try:
                with socket.create_connection(address) as sock:
                    sock.settimeout(1.0)
                    sock.sendall(struct.pack(">i", FRAME))
                    while sent[i] < SENT and not stop.is_set():
                        try:
                            sent[i] += sock.send(chunk[: SENT - sent[i]])
                        except socket.timeout:
                            pass  # the broker reads nothing more from us: try again until told to stop
                    stop.wait()
            except OSError:
                pass

        threads = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(connections)]
        for t in threads:
            t.start()
        watcher = MetadataWatcher(address).start()
        time.sleep(seconds)
        status = open(f"/proc/{cluster.pid(1)}/status").read()
        hwm = int(status.split("VmHWM:")[1].split()[0]) / 1024
        rss = int(status.split("VmRSS:")[1].split()[0]) / 1024
        stop.set()
        watcher.stop()
        for t in threads:
            t.join(timeout=30)
    return (f"{connections} connections x {SENT / 1e6:.0f} MB of a {FRAME / 1e6:.0f} MB frame, {seconds:.0f} s: "
            f"{sum(sent) / 1e9:.2f} GB sent; broker RSS {rss:.0f} MB (peak {hwm:.0f} MB); {watcher.summary()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="What unfinished large request frames cost a broker.")
    parser.add_argument("connections", nargs="?", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=20.0)
    options = parser.parse_args()
    print(run(options.connections, options.seconds), flush=True)
