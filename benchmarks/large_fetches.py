"""Issue 13: what many concurrent Fetch requests asking for everything cost a broker.

    .venv/bin/python -m benchmarks.large_fetches [FETCHES]

A ``launch(brokers=1, controllers=1)`` cluster; a 1-partition topic gets 64 batches of 1 MB
(raw Produce requests); then FETCHES (30) connections each send one Fetch from offset 0 with
max_bytes and partition_max_bytes 2^31-1 (the broker caps each answer at ``fetch.max.bytes``,
55 MiB) and read the answer at once. A watcher in a process of its own (so that the fetching
threads' GIL is not in its figures) sends a small Metadata request every 10 ms meanwhile.
Reported: how long the fetches took, the broker's peak resident memory, the watcher's longest
wait. Not part of ``make bench``: run it by hand, before and after a change.
"""

from __future__ import annotations

import argparse
import socket
import struct
import subprocess
import sys
import threading
import time

from kafka.protocol.consumer import FetchRequest

EVERYTHING = 2**31 - 1


def produce_frame(corr: int, batch: bytes, topic: bytes = b"big") -> bytes:
    """Produce v3, acks=1, one batch to partition 0 of ``topic``."""
    body = (struct.pack(">hhih", 0, 3, corr, 1) + b"t" + struct.pack(">hhi", -1, 1, 30_000)
            + struct.pack(">ih", 1, len(topic)) + topic + struct.pack(">iii", 1, 0, len(batch)) + batch)
    return struct.pack(">i", len(body)) + body


def fetch_frame() -> bytes:
    part = FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                  last_fetched_epoch=-1, log_start_offset=-1,
                                                  partition_max_bytes=EVERYTHING)
    request = FetchRequest(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=EVERYTHING, isolation_level=0,
                           session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic="big", partitions=[part])],
                           forgotten_topics_data=[], rack_id="", max_version=11)
    request.API_VERSION = 11
    request.with_header(correlation_id=1, client_id="bench")
    return bytes(request.encode(header=True, framed=True))


def read_frame(sock: socket.socket) -> int:
    size = int.from_bytes(sock.recv(4, socket.MSG_WAITALL), "big")
    view, got = memoryview(bytearray(size)), 0
    while got < size:
        got += sock.recv_into(view[got:], size - got)
    return size


def run(fetches: int) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic

    from minikafka.records import Record, RecordBatch
    from minikafka.wire.process import launch

    with launch(brokers=1, controllers=1, config={"retention.ms": -1}) as cluster:
        address = (cluster.host, cluster.ports[1])
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        admin.create_topics([NewTopic("big", 1, 1)])
        admin.close()
        batch = bytes(RecordBatch.build([Record(None, bytes(1000), 1_700_000_000_000) for _ in range(1000)]))
        with socket.create_connection(address) as sock:
            for corr in range(1, 65):
                while True:  # until the new topic's leader takes it
                    sock.sendall(produce_frame(corr, batch))
                    size = int.from_bytes(sock.recv(4, socket.MSG_WAITALL), "big")
                    answer = sock.recv(size, socket.MSG_WAITALL)
                    # correlation id, 1 topic ("big"), 1 partition: its index, then its error code
                    if struct.unpack_from(">h", answer, 4 + 4 + 2 + 3 + 4 + 4)[0] == 0:
                        break
                    time.sleep(0.1)
        watcher = subprocess.Popen(
            [sys.executable, "-c", "import sys, time; from benchmarks.metadata_cost import MetadataWatcher as W; "
             f"w = W(({address[0]!r}, {address[1]})).start(); sys.stdin.readline(); w.stop(); print(w.summary())"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        frame = fetch_frame()
        sizes = [0] * fetches

        def fetch(i: int) -> None:
            with socket.create_connection(address) as sock:
                sock.sendall(frame)
                sizes[i] = read_frame(sock)

        threads = [threading.Thread(target=fetch, args=(i,)) for i in range(fetches)]
        t = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        took = time.perf_counter() - t
        time.sleep(0.5)
        summary = watcher.communicate("stop\n", timeout=120)[0].strip()
        peak = int(open(f"/proc/{cluster.pid(1)}/status").read().split("VmHWM:")[1].split()[0]) / 1024
    return (f"{fetches} fetches of {min(sizes) / 2**20:.0f} MiB each in {took:.2f} s; broker peak RSS {peak:.0f} MB; "
            f"{summary}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="What concurrent Fetch requests asking for everything cost a broker.")
    parser.add_argument("fetches", nargs="?", type=int, default=30)
    print(run(parser.parse_args().fetches), flush=True)
