"""The real multi-process cluster (``minikafka.wire``) on loopback, with 100-byte values:
producer throughput with kafka-python and confluent-kafka (1 broker RF=1 acks=1, 3 brokers
RF=3 acks=all), the broker's own ceiling (pre-encoded Produce requests of 64 KB batches
written over a raw socket), consumer throughput, and end-to-end latency at a moderate rate.

Everything (clients, brokers, controller) shares this machine's cores, so the client figures
include the clients' own CPU cost; broker CPU% is read from /proc/<pid>/stat (utime+stime)
of every broker process over each run (100% = one core).
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from pathlib import Path

from minikafka.records import RecordBatch
from minikafka.wire.process import launch

from benchmarks.common import MB, VALUE_BYTES, Section, fig, med, met, runs

TOPIC = "bench"
PARTITIONS = 3
CLK_TCK = os.sysconf("SC_CLK_TCK")
RAW_BATCH_BYTES = 64 * 1024
RAW_IN_FLIGHT = 32  # Produce requests written ahead of their answers, per connection


def sizes(quick: bool) -> dict[str, int]:
    if quick:
        return {"kp": 2_000, "ck": 5_000, "raw": 20_000, "drain": 5_000, "latency": 200, "rate": 1_000}
    return {"kp": 200_000, "ck": 1_000_000, "raw": 6_000_000, "drain": 500_000, "latency": 5_000, "rate": 1_000}


# --- helpers ---------------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


class BrokerCpu:
    """CPU% of every broker process (100% = one core) between start() and stop()."""

    def __init__(self, cluster) -> None:
        self.pids = [cluster.pid(b) for b in cluster.broker_ids]

    def __enter__(self) -> "BrokerCpu":
        self.cpu0 = [cpu_seconds(p) for p in self.pids]
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self.t0
        self.percent = [100 * (cpu_seconds(p) - c) / wall for p, c in zip(self.pids, self.cpu0)]


def create_topic(cluster, name: str, partitions: int, rf: int) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        admin.create_topics([NewTopic(name, partitions, rf)])
        deadline = time.monotonic() + 30
        while not all(p["leader_id"] >= 0 for p in admin.describe_topics([name])[0]["partitions"]):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no leaders for {name}")
            time.sleep(0.1)
    finally:
        admin.close()


def kp_produce(servers: str, topic: str, n: int, acks) -> float:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=servers, acks=acks, linger_ms=5, batch_size=64 * 1024,
                      enable_idempotence=(acks == "all"))
    value = os.urandom(VALUE_BYTES)
    try:
        p.send(topic, value=value).get(timeout=30)  # metadata and connections first
        t = time.perf_counter()
        for _ in range(n):
            p.send(topic, value=value)
        p.flush(timeout=120)
        return time.perf_counter() - t
    finally:
        p.close()


def ck_produce(servers: str, topic: str, n: int, acks) -> float:
    import confluent_kafka as ck

    p = ck.Producer({"bootstrap.servers": servers, "acks": str(acks), "linger.ms": 5,
                     "queue.buffering.max.messages": 1_000_000})
    value = os.urandom(VALUE_BYTES)
    errors: list = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(err)

    p.produce(topic, value=value, on_delivery=on_delivery)
    p.flush(30)
    t = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.001)
    if p.flush(120) != 0:
        raise RuntimeError("confluent-kafka: records left unsent")
    wall = time.perf_counter() - t
    if errors:
        raise RuntimeError(f"confluent-kafka delivery errors: {errors[:3]}")
    return wall


# --- the broker's ceiling: raw Produce frames ----------------------------------------------------------


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def produce_frame(topic: str, partition: int, batch: bytes, correlation_id: int, acks: int = 1) -> bytes:
    """A framed Produce v3 request (non-flexible): header, null transactional id, acks,
    timeout, one topic with one partition's records."""
    body = (struct.pack(">hhi", 0, 3, correlation_id) + _string("bench-raw")
            + struct.pack(">hhi", -1, acks, 30_000) + struct.pack(">i", 1) + _string(topic)
            + struct.pack(">iii", 1, partition, len(batch)) + batch)
    return struct.pack(">i", len(body)) + body


def _recv_exact(sock: socket.socket, n: int, buf: bytearray) -> None:
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:n])
        if not k:
            raise ConnectionError("broker closed the connection")
        got += k


def raw_produce(host: str, port: int, topic: str, frames: list[bytes], count: int) -> float:
    """Write ``count`` Produce frames (cycling through ``frames``) over one connection, at most
    RAW_IN_FLIGHT ahead of the answers; check every answer's error code. Wall seconds."""
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 1024 * 1024)
    window = threading.Semaphore(RAW_IN_FLIGHT)
    failure: list = []
    err_at = 4 + 4 + 2 + len(topic.encode()) + 4 + 4  # corr, topics count, name, partitions count, index

    def read() -> None:
        head, body = bytearray(4), bytearray(1024)
        try:
            for _ in range(count):
                _recv_exact(sock, 4, head)
                (size,) = struct.unpack(">i", head)
                if size > len(body):
                    body = bytearray(size)
                _recv_exact(sock, size, body)
                (err,) = struct.unpack_from(">h", body, err_at)
                if err:
                    raise RuntimeError(f"Produce answered error {err}")
                window.release()
        except BaseException as e:  # noqa: BLE001 - reported by the writer
            failure.append(e)
            for _ in range(RAW_IN_FLIGHT):
                window.release()

    reader = threading.Thread(target=read, daemon=True)
    t = time.perf_counter()
    reader.start()
    try:
        for i in range(count):
            window.acquire()
            if failure:
                break
            sock.sendall(frames[i % len(frames)])
        reader.join(120)
        wall = time.perf_counter() - t
    finally:
        sock.close()
    if failure:
        raise RuntimeError(f"raw produce failed: {failure[0]!r}")
    if reader.is_alive():
        raise RuntimeError("raw produce: answers still missing after 120 s")
    return wall


# --- consumers and latency -----------------------------------------------------------------------------


def kp_drain(servers: str, topic: str, n: int) -> float:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=servers, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", max_partition_fetch_bytes=1024 * 1024)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        got = 0
        t = time.perf_counter()
        deadline = time.monotonic() + 120
        while got < n:
            for records in c.poll(timeout_ms=200, max_records=10_000).values():
                got += len(records)
            if time.monotonic() > deadline:
                raise RuntimeError(f"kafka-python consumer read {got} of {n}")
        return time.perf_counter() - t
    finally:
        c.close()


def ck_drain(servers: str, topic: str, n: int) -> float:
    import confluent_kafka as ck

    c = ck.Consumer({"bootstrap.servers": servers, "group.id": f"drain-{time.monotonic_ns()}",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got = 0
        t = time.perf_counter()
        deadline = time.monotonic() + 120
        while got < n:
            for msg in c.consume(num_messages=10_000, timeout=0.2):
                if msg.error() is None:
                    got += 1
            if time.monotonic() > deadline:
                raise RuntimeError(f"confluent-kafka consumer read {got} of {n}")
        return time.perf_counter() - t
    finally:
        c.close()


def latency(servers: str, topic: str, n: int, rate: int) -> list[float]:
    """confluent-kafka producer (acks=1, linger 0) and consumer in this process: each value
    carries its send time; milliseconds from produce() to the consumer's poll() returning it."""
    import confluent_kafka as ck

    c = ck.Consumer({"bootstrap.servers": servers, "group.id": f"lat-{time.monotonic_ns()}",
                     "enable.auto.commit": False, "auto.offset.reset": "latest", "fetch.wait.max.ms": 100})
    p = ck.Producer({"bootstrap.servers": servers, "acks": "1", "linger.ms": 0})
    try:
        c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_END)])
        p.produce(topic, value=b"warm", partition=0)
        p.flush(30)
        deadline = time.monotonic() + 30
        while True:  # the consumer is in place once it sees a record sent after it started
            p.produce(topic, value=b"warm", partition=0)
            p.flush(30)
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("latency: the consumer never started")
        while c.poll(0.2) is not None:
            pass
        out: list[float] = []
        pad = b"\0" * (VALUE_BYTES - 8)
        start = time.perf_counter()
        sent = 0
        deadline = time.monotonic() + n / rate + 60
        while len(out) < n:
            due = start + sent / rate
            if sent < n and time.perf_counter() >= due:
                p.produce(topic, value=struct.pack(">d", time.perf_counter()) + pad, partition=0)
                sent += 1
                p.poll(0)
            msg = c.poll(max(0.0, min(0.001, due - time.perf_counter())) if sent < n else 0.1)
            if msg is not None and msg.error() is None and len(msg.value()) == VALUE_BYTES:
                out.append((time.perf_counter() - struct.unpack_from(">d", msg.value())[0]) * 1000)
            if time.monotonic() > deadline:
                raise RuntimeError(f"latency: {len(out)} of {n} records came back")
        return out
    finally:
        p.flush(10)
        c.close()


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


# --- run -----------------------------------------------------------------------------------------------


def run(scratch: Path, quick: bool, repeats: int) -> list[Section]:
    n = sizes(quick)
    reps = min(repeats, 3)
    data: dict = {}
    cluster_dir = Path(scratch) / "wire"

    def rate_cells(count: int, walls: list[float]) -> list[str]:
        return [fig([count / w for w in walls]), fig([count * VALUE_BYTES / w / MB for w in walls], "{:.1f}")]

    prod_rows: list[list[str]] = []
    setups = [(1, 1, 1, "1"), (3, 3, "all", "all")]
    kp_cpu: dict[int, list[list[float]]] = {}
    ck_rf3: list[float] = []
    raw_row: list[str] = []
    raw_rates: list[float] = []
    raw_mbs: list[float] = []
    raw_batch = (0, 0)
    drain_rows: list[list[str]] = []
    lat_row: list[str] = []
    for brokers, rf, acks, acks_text in setups:
        (cluster_dir / f"b{brokers}").mkdir(parents=True, exist_ok=True)
        with launch(brokers=brokers, dir=cluster_dir / f"b{brokers}",
                    config={"min.insync.replicas": 1 if rf == 1 else 2}) as cluster:
            servers = cluster.bootstrap_servers
            for client, fn, count in (("kafka-python", kp_produce, n["kp"]), ("confluent-kafka", ck_produce, n["ck"])):
                walls, cpus = [], []
                for r in range(reps):
                    topic = f"{TOPIC}-{client}-{r}"
                    create_topic(cluster, topic, PARTITIONS, rf)
                    with BrokerCpu(cluster) as cpu:
                        walls.append(fn(servers, topic, count, acks))
                    cpus.append(cpu.percent)
                if client == "kafka-python":
                    kp_cpu[brokers] = cpus
                if client == "confluent-kafka" and rf == 3:
                    ck_rf3 = [count / w for w in walls]
                cpu_cell = " / ".join(f"{med([c[i] for c in cpus]):.0f}" for i in range(brokers))
                prod_rows.append([client, f"{brokers} broker{'s' if brokers > 1 else ''}, RF={rf}, acks={acks_text}",
                                  f"{count:,}", runs(reps), *rate_cells(count, walls), cpu_cell])
            if brokers == 1:
                # the broker's ceiling: raw Produce frames, one partition
                create_topic(cluster, "raw", 1, 1)
                values = [os.urandom(VALUE_BYTES) for _ in range(1000)]
                k = 1
                while len(bytes(RecordBatch.build(values[:k + 1]))) <= RAW_BATCH_BYTES and k < 999:
                    k += 1
                batch = bytes(RecordBatch.build(values[:k]))
                raw_batch = (len(batch), k)
                frames = [produce_frame("raw", 0, batch, i) for i in range(RAW_IN_FLIGHT * 2)]
                count = max(1, n["raw"] // k)
                host, port = cluster.host, cluster.ports[1]
                walls, cpus = [], []
                for _ in range(reps):
                    with BrokerCpu(cluster) as cpu:
                        walls.append(raw_produce(host, port, "raw", frames, count))
                    cpus.append(cpu.percent[0])
                raw_rates = [count * k / w for w in walls]
                raw_mbs = [count * len(batch) / w / MB for w in walls]
                raw_row = ["raw socket, pre-encoded Produce v3", f"{len(batch):,} B ({k} records)", f"{count * k:,}",
                           runs(reps), fig(raw_rates), fig([count * k * VALUE_BYTES / w / MB for w in walls], "{:.1f}"),
                           fig(raw_mbs, "{:.1f}"), fig(cpus)]
                # consumers: drain preloaded records
                create_topic(cluster, "drain", PARTITIONS, 1)
                ck_produce(servers, "drain", n["drain"], 1)
                for client, fn in (("kafka-python", kp_drain), ("confluent-kafka", ck_drain)):
                    walls = [fn(servers, "drain", n["drain"]) for _ in range(reps)]
                    drain_rows.append([client, f"{n['drain']:,}", runs(reps), *rate_cells(n["drain"], walls)])
                # end-to-end latency
                create_topic(cluster, "latency", 1, 1)
                lats = latency(servers, "latency", n["latency"], n["rate"])
                lat_row = ["confluent-kafka → confluent-kafka, 1 broker, acks=1", f"{n['rate']:,}",
                           f"{len(lats):,}", f"{pct(lats, 0.5):.2f}", f"{pct(lats, 0.99):.2f}", f"{max(lats):.2f}"]

    kp_max_cpu = max(max(c) for cpus in kp_cpu.values() for c in cpus)
    ck_med = med(ck_rf3) if ck_rf3 else 0.0
    raw_rate, raw_mb = med(raw_rates), med(raw_mbs)
    producers = Section(
        name="wire",
        title="Wire: producer throughput on loopback (kafka-python and confluent-kafka)",
        method=[
            f"A real cluster (`minikafka.wire.launch`: one OS process per broker and a controller) on 127.0.0.1; "
            f"a fresh topic of {PARTITIONS} partitions per run; {VALUE_BYTES}-byte values, no key, no compression. "
            "1 broker: RF=1, acks=1; 3 brokers: RF=3, acks=all, `min.insync.replicas` 2.",
            "kafka-python 3.0.12 `KafkaProducer(linger_ms=5, batch_size=64 KiB)` (idempotent with acks=all, as "
            "its default; not with acks=1); confluent-kafka `Producer(linger.ms=5)` (librdkafka defaults "
            "otherwise). One record is sent and acknowledged first (metadata, connections), then timed: "
            "`send()`/`produce()` of every record and `flush()`.",
            "Broker CPU%: utime+stime from `/proc/<pid>/stat` of each broker process over the timed run "
            "(100% = one core; brokers 1 / 2 / 3). Clients, brokers and controller share this machine's "
            f"{os.cpu_count()} cores.",
            f"{runs(reps)} each; median (min–max).",
        ],
        columns=["Client", "Cluster", "Records", "Runs", "Records/s", "Value MB/s", "Broker CPU % (median)"],
        rows=prod_rows,
        targets=[
            ("confluent-kafka producer, RF=3 acks=all >= 100,000 msg/s", f"{ck_med:,.0f} msg/s", met(ck_med >= 100_000)),
            ("kafka-python producer: the broker never the bottleneck (broker CPU < 100% of a core)",
             f"max broker CPU {kp_max_cpu:.0f}%", met(kp_max_cpu < 100)),
        ],
    )
    ceiling = Section(
        name="wire",
        title="Wire: the broker's ceiling (raw Produce requests, 64 KB batches)",
        method=[
            f"One broker, a topic of 1 partition (RF=1). One v2 batch of {raw_batch[1]} records of {VALUE_BYTES}-byte "
            f"values ({raw_batch[0]:,} bytes, the most that fit in {RAW_BATCH_BYTES // 1024} KiB) built with "
            "`RecordBatch.build` and framed as Produce v3 requests (acks=1) before timing.",
            f"One TCP connection: a writer `sendall()`s the frames with at most {RAW_IN_FLIGHT} unanswered, a reader "
            "thread reads every answer and checks its error code. Records/s and value MB/s count the 100-byte "
            "values; batch MB/s counts the bytes of the batches (what the broker appends).",
            f"{runs(reps)}; median (min–max). Broker CPU% as above.",
        ],
        columns=["Writer", "Batch", "Records", "Runs", "Records/s", "Value MB/s", "Batch MB/s", "Broker CPU %"],
        rows=[raw_row],
        targets=[
            ("broker ceiling (raw Produce, 64 KB batches) >= 1,000,000 msg/s", f"{raw_rate:,.0f} msg/s",
             met(raw_rate >= 1_000_000)),
            ("broker ceiling (raw Produce, 64 KB batches) >= 100 MB/s", f"{raw_mb:,.0f} MB/s (batch bytes)",
             met(raw_mb >= 100)),
        ],
    )
    consumers = Section(
        name="wire",
        title="Wire: consumer throughput (draining preloaded records)",
        method=[
            f"One broker; {n['drain']:,} records of {VALUE_BYTES} bytes preloaded into a topic of {PARTITIONS} "
            "partitions (RF=1) by confluent-kafka. Each consumer is assigned every partition from the beginning "
            "(no group join) and timed from its creation's end until it has returned every record (connection and "
            "first fetch included): kafka-python `poll(max_records=10000)`, confluent-kafka "
            "`consume(num_messages=10000)`.",
            f"{runs(reps)} each; median (min–max).",
        ],
        columns=["Consumer", "Records", "Runs", "Records/s", "Value MB/s"],
        rows=drain_rows,
    )
    latencies = Section(
        name="wire",
        title="Wire: end-to-end latency, produce to consume",
        method=[
            f"One broker. A confluent-kafka producer (acks=1, linger.ms=0) sends {n['latency']:,} records of "
            f"{VALUE_BYTES} bytes to 1 partition at {n['rate']:,}/s, each carrying its send time "
            "(`time.perf_counter()`); a confluent-kafka consumer (fetch.wait.max.ms=100) in the same process, "
            "already positioned at the end, polls them; milliseconds from `produce()` to `poll()` returning it.",
            "One run; percentiles over its records.",
        ],
        columns=["Path", "Rate (records/s)", "Records", "p50 ms", "p99 ms", "max ms"],
        rows=[lat_row],
    )
    return [producers, ceiling, consumers, latencies]
