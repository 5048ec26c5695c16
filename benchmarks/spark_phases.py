"""Issue 16: where the seconds of an AvailableNow drain through the minikafka source go, phase by phase.

    PYTHONPATH=. .venv/bin/python -m benchmarks.spark_phases [RECORDS] [ROUNDS]

A ``launch(brokers=3)`` cluster and ``produce_trucks`` as in ``benchmarks/spark.py`` (1,000,000
records, 10 partitions by default), the same values in a JSON-lines file. Each round drains the
topic once through ``format("minikafka_phases")`` (the minikafka source, subclassed here so that
every call Spark makes on it, in whichever process, appends a time-stamped line to a file; the
source itself is unchanged), once through Spark's text source, and reads it once with
``spark.read``. Printed per streaming run: seconds from ``start()`` to

- the Python process Spark starts for the query's stream reader (a new one per query), which
  first imports pyspark's worker module, then this module (unpickling the data source);
- the stream reader made (``streamReader``: option checks, which import kafka-python);
- the micro-batch planned (``partitions`` returned: the offset lookups and Spark's offset log);
- the first task's ``read`` started and the last one ended (each task's seconds and its own CPU);
- ``foreachBatch`` returned, and the query ended.

Not part of ``make bench``: run it by hand, before and after a change. The machine's load is
printed with each round; compare figures within a run.
"""

from __future__ import annotations

import os
import sys
import time

from minikafka.spark.reader import KafkaBatchReader, KafkaMicroBatchStream
from minikafka.spark.source import MinikafkaDataSource

TRACE_ENV = "MINIKAFKA_PHASES_TRACE"


def note(what: str) -> None:
    path = os.environ.get(TRACE_ENV)
    if path:
        with open(path, "a") as f:
            f.write(f"{time.time():.4f} {os.getpid()} {what}\n")


def _process_started() -> float:
    """This process's start, wall clock (from /proc: Linux only)."""
    with open(f"/proc/{os.getpid()}/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


if os.environ.get(TRACE_ENV):
    note(f"imported started={_process_started():.4f}")


def _timed(name: str, call, *args):
    t = time.perf_counter()
    try:
        return call(*args)
    finally:
        note(f"{name} {time.perf_counter() - t:.4f}")


def _traced_read(rows) -> object:
    t, cpu, n = time.perf_counter(), time.process_time(), 0
    note("read-start")
    for batch in rows:
        n += batch.num_rows
        yield batch
    note(f"read-end {time.perf_counter() - t:.4f} cpu={time.process_time() - cpu:.4f} rows={n}")


class TracedStream(KafkaMicroBatchStream):
    def initialOffset(self):
        return _timed("initialOffset", super().initialOffset)

    def prepareForTriggerAvailableNow(self):
        return _timed("prepareForTriggerAvailableNow", super().prepareForTriggerAvailableNow)

    def latestOffset(self, start, limit):
        return _timed("latestOffset", super().latestOffset, start, limit)

    def partitions(self, start, end):
        return _timed("partitions", super().partitions, start, end)

    def read(self, partition):
        return _traced_read(super().read(partition))


class TracedBatch(KafkaBatchReader):
    def partitions(self):
        return _timed("batch-partitions", super().partitions)

    def read(self, partition):
        return _traced_read(super().read(partition))


class TracedSource(MinikafkaDataSource):
    @classmethod
    def name(cls) -> str:
        return "minikafka_phases"

    def reader(self, schema):
        return TracedBatch(super().reader(schema).options)

    def streamReader(self, schema):
        t = time.perf_counter()
        base = super().streamReader(schema)
        note(f"streamReader-made {time.perf_counter() - t:.4f}")
        return TracedStream(base.options)


def phases(lines: list[tuple[float, int, str]], t0: float, fb_out: float, end: float) -> str:
    """One streaming run's phases as seconds after ``t0``."""
    def first(prefix: str) -> tuple[float, int, str] | None:
        return next((ln for ln in lines if ln[2].startswith(prefix)), None)

    made = first("streamReader-made")
    runner = made[1] if made else None
    imported = next((ln for ln in lines if ln[1] == runner and ln[2].startswith("imported")), None)
    planned = next((ln for ln in lines if ln[1] == runner and ln[2].startswith("partitions")), None)
    starts = [ln[0] for ln in lines if ln[2] == "read-start"]
    ends = [ln for ln in lines if ln[2].startswith("read-end")]
    calls = sum(float(ln[2].split()[1]) for ln in lines if ln[1] == runner
                and ln[2].split()[0] in ("initialOffset", "prepareForTriggerAvailableNow", "latestOffset", "partitions"))
    out = []
    if imported:
        started = float(imported[2].split("=")[1])
        out.append(f"process {started - t0:.2f}, module imported {imported[0] - t0:.2f}")
    if made:
        out.append(f"reader made {made[0] - t0:.2f}")
    if planned:
        out.append(f"planned {planned[0] - t0:.2f} (source calls {calls * 1000:.0f} ms)")
    if starts and ends:
        tasks = ", ".join(f"{float(e[2].split()[1]):.2f} s/cpu {float(e[2].split('cpu=')[1].split()[0]):.2f}"
                          for e in ends)
        out.append(f"reads {min(starts) - t0:.2f}-{max(e[0] for e in ends) - t0:.2f} ({tasks})")
    out.append(f"foreachBatch returned {fb_out - t0:.2f}, end {end - t0:.2f}")
    return "; ".join(out)


def main(argv: list[str]) -> int:
    import shutil
    import tempfile
    from pathlib import Path

    from minikafka import spark as mkspark
    from minikafka.feed import produce_trucks
    from minikafka.wire.process import launch

    from benchmarks.spark import PARTITIONS, SEED, TOPIC, TRUCKS, write_jsonl
    # By its module's name, not __main__'s: Spark's Python processes import it to unpickle it.
    from benchmarks.spark_phases import TracedSource

    count = int(argv[0]) if argv else 1_000_000
    rounds = int(argv[1]) if len(argv) > 1 else 3
    base = Path(tempfile.mkdtemp(prefix="spark-phases-"))
    trace = base / "trace.txt"
    os.environ[TRACE_ENV] = str(trace)  # before the session: Spark's Python processes inherit it
    raw = ["count(*)", "sum(length(value))", "sum(crc32(value))"]
    try:
        (base / "cluster").mkdir()
        (base / "jsonl").mkdir()
        with launch(brokers=3, dir=base / "cluster", config={"min.insync.replicas": 2, "retention.ms": -1}) as cluster:
            servers = cluster.bootstrap_servers
            produce_trucks(servers, count=count, trucks=TRUCKS, seed=SEED, topic=TOPIC, partitions=PARTITIONS,
                           replication_factor=3, progress=False)
            write_jsonl(base / "jsonl" / "trucks.jsonl", count)
            spark = mkspark.session("spark-phases")
            spark.dataSource.register(TracedSource)
            try:
                def drain(df) -> tuple[float, float, float]:
                    marks: dict[str, float] = {}

                    def each(batch, batch_id: int) -> None:
                        rows = batch.selectExpr(*raw).collect()[0]
                        if rows[0]:
                            marks["fb_out"] = time.time()

                    shutil.rmtree(base / "cp", ignore_errors=True)
                    t0 = time.time()
                    query = (df.writeStream.foreachBatch(each).option("checkpointLocation", str(base / "cp"))
                             .trigger(availableNow=True).start())
                    query.awaitTermination()
                    end = time.time()
                    rows = sum(p.numInputRows for p in query.recentProgress)
                    if rows != count:
                        raise RuntimeError(f"read {rows:,} rows, not {count:,}")
                    return t0, marks.get("fb_out", end), end

                def source():
                    return (spark.readStream.format("minikafka_phases").option("kafka.bootstrap.servers", servers)
                            .option("subscribe", TOPIC).option("startingOffsets", "earliest").load())

                def text():
                    return spark.readStream.format("text").load(str(base / "jsonl"))

                def batch() -> float:
                    t = time.perf_counter()
                    n = (spark.read.format("minikafka_phases").option("kafka.bootstrap.servers", servers)
                         .option("subscribe", TOPIC).load().selectExpr(*raw).collect()[0][0])
                    if n != count:
                        raise RuntimeError(f"batch read {n:,} rows, not {count:,}")
                    return time.perf_counter() - t

                drain(source())  # warm-up: Python workers, JVM code paths
                drain(text())
                batch()
                for r in range(rounds):
                    trace.write_text("")
                    t0, fb_out, end = drain(source())
                    lines = [(float(a), int(b), c) for a, b, c in
                             (ln.split(" ", 2) for ln in trace.read_text().splitlines())]
                    ts0, _, ts_end = drain(text())
                    b = batch()
                    print(f"round {r}: source {end - t0:.2f} s, text {ts_end - ts0:.2f} s (ratio "
                          f"{(ts_end - ts0) / (end - t0):.2f}), batch spark.read {b:.2f} s; load "
                          f"{os.getloadavg()[0]:.1f}", flush=True)
                    print("  source: " + phases(lines, t0, fb_out, end), flush=True)
            finally:
                spark.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
