"""The broker's Produce ceiling with and without record validation, for a before/after run by
hand (not part of ``make bench``): one process measures whichever ``minikafka`` its
``PYTHONPATH`` imports, so a shell loop can alternate a checkout from before validation
(git feb7030) with this tree on the same loaded machine and compare ratios within one run.

    cd /tmp/somewhere-neutral   # not a repository root: ``python -m`` puts the cwd first on sys.path
    PYTHONPATH=/path/to/tree python /path/to/this/file LABEL ROUNDS

A 1-broker cluster (``launch(brokers=1)``, RF 1, acks=1); per round, for each batch kind, the
*Wire* section's broker-ceiling writer (pre-encoded Produce v3 frames of one 64 KiB batch, 32 in
flight, every answer's error checked): ``uniform`` is that section's batch (595 random 100-byte
values, no key: one record layout), ``variable`` has keys ``key-<i>`` and values of 50 to 150
random bytes with timestamps 0 to 59 ms apart (the general walker's case). Last, one batch whose
CRC holds but whose record is garbage is sent, and its error code printed: 0 means this broker
does not validate (the before side), 87 (INVALID_RECORD) that it does. Prints one JSON line.

``client`` is what a producer application sees of the same cost: per round, confluent-kafka
(librdkafka, the fastest client here) sends ``CLIENT_RECORDS`` records with keys ``key-<i>`` and
values of 50 to 150 bytes (the variable batch's records) into a 3-partition topic, acks=1,
``linger.ms`` 5, and every delivery report is checked; records/s from the first send to the last
acknowledgement, and the broker's CPU% over that time.
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import sys
import tempfile
import time

import minikafka
from minikafka.records import ATTRIBUTES_AT, CRC_AT, HEADER, HEADER_SIZE, LOG_OVERHEAD, Record, RecordBatch, crc32c
from minikafka.wire.process import launch

from benchmarks.wire import BrokerCpu, RAW_BATCH_BYTES, RAW_IN_FLIGHT, VALUE_BYTES, create_topic, produce_frame, raw_produce

RECORDS_PER_ROUND = 3_000_000
CLIENT_RECORDS = 1_000_000


def fill(make) -> bytes:
    """The largest batch of ``make(i)`` records (i = 0, 1, ...) within RAW_BATCH_BYTES."""
    records = [make(0)]
    while len(bytes(RecordBatch.build(records + [make(len(records))]))) <= RAW_BATCH_BYTES:
        records.append(make(len(records)))
    return bytes(RecordBatch.build(records))


def batches() -> dict[str, bytes]:
    rng = random.Random(13)
    values = [rng.randbytes(VALUE_BYTES) for _ in range(1000)]
    stamps = [1_700_000_000_000 + rng.randrange(60) for _ in range(1000)]
    sizes = [rng.randint(50, 150) for _ in range(1000)]
    return {"uniform": fill(lambda i: values[i]),
            "variable": fill(lambda i: Record(f"key-{i}".encode(), values[i][: sizes[i]], stamps[i]))}


def garbage_batch() -> bytes:
    """One record whose value length (60) runs past the record: the CRC is computed over it."""
    body = bytes([0, 0, 0, 1]) + bytes([120]) + b"ab" + bytes([0])  # attributes, ts, offset, null key, value 60
    record = bytes([2 * len(body)]) + body
    buf = bytearray(HEADER.pack(0, HEADER_SIZE - LOG_OVERHEAD + len(record), -1, 2, 0, 0, 0, 1000, 1000, -1, 0, -1, 1)
                    + record)
    struct.pack_into(">I", buf, CRC_AT, crc32c(memoryview(buf)[ATTRIBUTES_AT:]))
    return bytes(buf)


def produce_error(host: str, port: int, topic: str, batch: bytes) -> int:
    with socket.create_connection((host, port)) as sock:
        sock.sendall(produce_frame(topic, 0, batch, 1))
        head = sock.recv(4, socket.MSG_WAITALL)
        body = sock.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
    return struct.unpack_from(">h", body, 4 + 4 + 2 + len(topic.encode()) + 4 + 4)[0]


def client_produce(servers: str, topic: str, n: int) -> float:
    """Wall seconds for confluent-kafka to send ``n`` keyed records of 50-150 B and have them acked.

    Not ``benchmarks.wire.ck_produce``: that one sends one fixed value without a key (the uniform
    case), and this file must run unchanged against the before tree's ``benchmarks`` package."""
    import confluent_kafka as ck

    rng = random.Random(17)
    records = [(f"key-{i}".encode(), rng.randbytes(rng.randint(50, 150))) for i in range(1000)]
    producer = ck.Producer({"bootstrap.servers": servers, "acks": "1", "linger.ms": 5,
                            "queue.buffering.max.messages": 1_000_000})
    errors: list = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(err)

    producer.produce(topic, key=b"warm-up", value=b"x", on_delivery=on_delivery)
    producer.flush(30)
    start = time.perf_counter()
    for i in range(n):
        key, value = records[i % 1000]
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.001)
    if producer.flush(120) != 0:
        raise RuntimeError("confluent-kafka: records left unsent")
    wall = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"confluent-kafka delivery errors: {errors[:3]}")
    return wall


def main() -> None:
    label, rounds = sys.argv[1], int(sys.argv[2])
    kinds = batches()
    out = {"label": label, "minikafka": os.path.dirname(minikafka.__file__),
           "batches": {k: [len(b), HEADER.unpack_from(b)[-1]] for k, b in kinds.items()}}
    with tempfile.TemporaryDirectory() as d, launch(brokers=1, dir=d, config={"min.insync.replicas": 1}) as c:
        host, port = c.host, c.ports[1]
        for kind in kinds:
            create_topic(c, kind, 1, 1)
            out[kind], out[kind + "_cpu"] = [], []
        out["client"], out["client_cpu"] = [], []
        for r in range(rounds):
            create_topic(c, f"client-{r}", 3, 1)
            with BrokerCpu(c) as cpu:
                wall = client_produce(c.bootstrap_servers, f"client-{r}", CLIENT_RECORDS)
            out["client"].append(round(CLIENT_RECORDS / wall))
            out["client_cpu"].append(round(cpu.percent[0]))
            for kind, batch in kinds.items():
                frames = [produce_frame(kind, 0, batch, i) for i in range(RAW_IN_FLIGHT * 2)]
                per_batch = HEADER.unpack_from(batch)[-1]
                count = RECORDS_PER_ROUND // per_batch
                with BrokerCpu(c) as cpu:
                    wall = raw_produce(host, port, kind, frames, count)
                out[kind].append(round(count * per_batch / wall))
                out[kind + "_cpu"].append(round(cpu.percent[0]))
        create_topic(c, "garbage", 1, 1)
        out["garbage_error"] = produce_error(host, port, "garbage", garbage_batch())
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
