"""Issue 37: one client's flood must not stall everyone. A well-behaved producer's ack latency
on a real broker process, with no flood and during each of three floods from another process.

    .venv/bin/python -m benchmarks flood            (part of `make bench`; --quick: small floods)
    .venv/bin/python -m benchmarks.flood [--quick]  (prints the table: run it from a `git archive`
                                                     tree of another commit, PYTHONPATH=that tree,
                                                     to measure it before a change)

Each phase launches its own cluster (``launch(brokers=1, controllers=1)``), then a producer
(kafka-python, acks=1, linger 0, no idempotence) sends one 100-byte record every 20 ms and waits
for each ack, while a flood process (this file's ``flood`` entry, plain sockets and asyncio)
does one of:

- **ApiVersions**: ``CONNECTIONS`` connections, each writing ``PIPELINED`` ApiVersions v0
  requests at once, reading the answers, and again;
- **JoinGroup**: ``JOIN_CONNECTIONS`` connections, each writing ``PIPELINED_JOINS`` JoinGroup v1
  requests of new members (empty member id) to one group at once, reading what comes back;
- **idle close**: ``IDLE`` connections opened before the window, idle, then all closed at once
  (the flood process exits: the kernel closes its descriptors together) one third into it.

The figures are the producer's ack latencies in the window (p50, p99, max). Everything shares
this machine's two cores, which inflates the flood figures of both commits alike.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks.common import REPO, Section, met

TOPIC = "flood-bench"
CLIENT_ID = b"flood"
SEND_EVERY_S = 0.02


def sizes(quick: bool) -> dict[str, float]:
    if quick:
        return {"window_s": 3.0, "connections": 50, "pipelined": 200, "join_connections": 20, "joins": 20,
                "idle": 1_000}
    return {"window_s": 10.0, "connections": 500, "pipelined": 500, "join_connections": 200, "joins": 50,
            "idle": 10_000}


# --- the flood (a process of its own) ------------------------------------------------------------------------


def _frame(api_key: int, version: int, corr: int, body: bytes = b"") -> bytes:
    header = struct.pack(">hhih", api_key, version, corr, len(CLIENT_ID)) + CLIENT_ID
    return struct.pack(">i", len(header) + len(body)) + header + body


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def api_versions_frame(corr: int) -> bytes:
    return _frame(18, 0, corr)


def join_group_frame(corr: int) -> bytes:
    """JoinGroup v1 of a new member (empty id) to group ``flood``, as a consumer of TOPIC."""
    subscription = struct.pack(">hi", 0, 1) + _string(TOPIC) + struct.pack(">i", -1)
    body = (_string("flood") + struct.pack(">ii", 10_000, 10_000) + _string("") + _string("consumer")
            + struct.pack(">i", 1) + _string("range") + struct.pack(">i", len(subscription)) + subscription)
    return _frame(11, 1, corr, body)


async def _drain_answers(reader: asyncio.StreamReader, n: int) -> None:
    for _ in range(n):
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        await reader.readexactly(size)


async def _pipelining(host: str, port: int, connections: int, pipelined: int, make) -> None:
    async def one() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        corr = 0
        while True:
            writer.write(b"".join(make(corr + i) for i in range(pipelined)))
            corr += pipelined
            await _drain_answers(reader, pipelined)

    tasks = []
    for _ in range(connections):
        tasks.append(asyncio.create_task(one()))
        await asyncio.sleep(0)
    print("ready", flush=True)
    await asyncio.gather(*tasks)


async def _idle(host: str, port: int, connections: int) -> None:
    opened = []
    for start in range(0, connections, 200):  # 200 at a time: the listener's backlog is 100
        opened += await asyncio.gather(*(asyncio.open_connection(host, port)
                                         for _ in range(min(200, connections - start))))
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    os._exit(0)  # every descriptor closed by the kernel at once


def flood_main(kind: str, host: str, port: int, n: int, pipelined: int) -> None:
    if kind == "apiversions":
        coro = _pipelining(host, port, n, pipelined, api_versions_frame)
    elif kind == "joingroup":
        coro = _pipelining(host, port, n, pipelined, join_group_frame)
    elif kind == "idle":
        coro = _idle(host, port, n)
    else:
        raise SystemExit(f"unknown flood {kind!r}: apiversions, joingroup or idle")
    try:
        asyncio.run(coro)
    except (ConnectionError, asyncio.IncompleteReadError):
        pass  # the broker went away at the end of the phase


# --- the measurement --------------------------------------------------------------------------------------------


class Producer:
    """One record every SEND_EVERY_S, each ack waited for; the latencies (s) of those sent in the window."""

    def __init__(self, servers: str) -> None:
        from kafka import KafkaProducer

        self.producer = KafkaProducer(bootstrap_servers=servers, acks=1, linger_ms=0, enable_idempotence=False,
                                      request_timeout_ms=60_000)
        self.producer.send(TOPIC, b"x" * 100).get(timeout=60)  # metadata and connection in place
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            self.producer.send(TOPIC, b"x" * 100).get(timeout=60)
            self.latencies.append(time.perf_counter() - t)
            self._stop.wait(max(0.0, SEND_EVERY_S - (time.perf_counter() - t)))

    def measure(self, window_s: float, during=None) -> list[float]:
        self._thread.start()
        if during is not None:
            time.sleep(window_s / 3)
            during()
            time.sleep(window_s * 2 / 3)
        else:
            time.sleep(window_s)
        self._stop.set()
        self._thread.join(timeout=120)
        self.producer.close()
        return self.latencies


def _start_flood(kind: str, host: str, port: int, n: int, pipelined: int) -> subprocess.Popen:
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.flood", "--flood", kind, "--host", host,
                             "--port", str(port), "--n", str(n), "--pipelined", str(pipelined)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=here)
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise RuntimeError(f"the {kind} flood did not start")
    return proc


def phase(kind: str | None, size: dict[str, float]) -> list[float]:
    from minikafka.wire.process import launch

    with launch(brokers=1, controllers=1, config={"num.partitions": 1}) as cluster:
        host, port = cluster.host, cluster.ports[1]
        producer = Producer(cluster.bootstrap_servers)
        flood = None
        try:
            if kind == "apiversions":
                flood = _start_flood(kind, host, port, size["connections"], size["pipelined"])
            elif kind == "joingroup":
                flood = _start_flood(kind, host, port, size["join_connections"], size["joins"])
            elif kind == "idle":
                flood = _start_flood(kind, host, port, size["idle"], 0)
                close_all = lambda: (flood.stdin.write("close\n"), flood.stdin.flush())  # noqa: E731
                return producer.measure(size["window_s"], during=close_all)
            return producer.measure(size["window_s"])
        finally:
            if flood is not None:
                flood.kill()
                flood.wait()


PHASES = [(None, "no flood"), ("apiversions", "{connections:,} connections pipelining ApiVersions ({pipelined} at once)"),
          ("joingroup", "{join_connections:,} connections pipelining JoinGroup ({joins} new members at once)"),
          ("idle", "{idle:,} idle connections closed at once")]


def measure(quick: bool) -> list[tuple[str, list[float]]]:
    size = sizes(quick)
    return [(label.format(**size), phase(kind, size)) for kind, label in PHASES]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def row(label: str, latencies: list[float]) -> list[str]:
    ms = [1000 * v for v in latencies]
    return [label, f"{len(ms):,}", f"{statistics.median(ms):,.1f} ms", f"{_quantile(ms, 0.99):,.1f} ms",
            f"{max(ms):,.1f} ms"]


def run(scratch: Path, quick: bool, repeats: int) -> Section:
    results = measure(quick)
    rows = [row(label, lat) for label, lat in results]
    worst_p99 = max(_quantile(lat, 0.99) for _, lat in results[1:])
    return Section(
        name="flood",
        title="Floods: a well-behaved producer's ack latency while another client floods the broker",
        method=[
            "Each phase on its own `launch(brokers=1, controllers=1)`; a kafka-python producer (acks=1, linger 0) "
            f"sends one 100-byte record every {SEND_EVERY_S * 1000:.0f} ms and waits for its ack, for "
            f"{sizes(quick)['window_s']:.0f} s, while a flood process (benchmarks/flood.py) pipelines ApiVersions or "
            "JoinGroup requests on many connections, or holds idle connections and closes them all at once a third "
            "into the window. All on this machine's 2 cores, flood included.",
        ],
        columns=["flood", "acks", "p50", "p99", "max"],
        rows=rows,
        targets=[("producer's p99 ack latency during each flood <= 1 s", f"{worst_p99 * 1000:,.0f} ms",
                  met(worst_p99 <= 1.0))],
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--flood", help="(internal) run one flood: apiversions, joingroup or idle")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int)
    parser.add_argument("--n", type=int)
    parser.add_argument("--pipelined", type=int, default=0)
    options = parser.parse_args(argv)
    if options.flood:
        flood_main(options.flood, options.host, options.port, options.n, options.pipelined)
        return
    for label, latencies in measure(options.quick):
        print(" | ".join(row(label, latencies)), flush=True)


if __name__ == "__main__":
    main()
