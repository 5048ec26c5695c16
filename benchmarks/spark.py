"""The "minikafka" Spark source (``minikafka.spark``) against a real multi-process cluster:
records per second of an AvailableNow drain of truck reports, against Spark's own file
sources reading the same records from a local JSON-lines file in the same run, and
end-to-end latency from produce() to foreachBatch at a 1-second processing-time trigger.

Spark (local[2]), its Python workers, the brokers and the controller all share this
machine's cores, so the figures include everyone's CPU cost; broker CPU% is read from
/proc/<pid>/stat as in the wire benchmark. Not run (a one-row table saying why) when
pyspark or Java 17+ is missing.
"""

from __future__ import annotations

import shutil
import threading
import time
import zlib
from pathlib import Path

from minikafka import datasets

from benchmarks.common import MB, Section, fig, med, met, runs

TOPIC = "trucks_gps"
PARTITIONS = 10
TRUCKS = 100  # murmur2 of 10 truck ids leaves 3 of the 10 partitions empty; 100 fill all 10
SEED = 0
JSON_SCHEMA = "heading_deg double, lat double, lon double, speed_kmh double, timestamp_ms long, truck_id string"
TRIGGER = "1 second"


def sizes(quick: bool) -> dict[str, float]:
    if quick:
        return {"records": 50_000, "latency_s": 8.0, "skip_s": 2.0, "rate": 200.0}
    return {"records": 1_000_000, "latency_s": 30.0, "skip_s": 5.0, "rate": 200.0}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def not_run(reason: str) -> list[Section]:
    return [Section(name="spark", title="Spark: the minikafka source (not run)",
                    method=[f"Not run: {reason}"], columns=["Benchmark", "Status"],
                    rows=[["spark", f"not run: {reason}"]])]


# --- the data ---------------------------------------------------------------------------------------------


def write_jsonl(path: Path, count: int) -> tuple[int, int]:
    """The same reports produce_trucks sends (same fleet, seed, start), one JSON value per
    line; returns (total value bytes, sum of the values' CRC-32s) to check what Spark reads."""
    total = crcs = 0
    with open(path, "wb", buffering=1 << 20) as f:
        for report in datasets.truck_positions(TRUCKS, seed=SEED, count=count):
            _, value = datasets.encode_report(report)
            f.write(value + b"\n")
            total += len(value)
            crcs += zlib.crc32(value)
    return total, crcs


# --- one AvailableNow drain ---------------------------------------------------------------------------------


def drain(spark, df, checkpoint: Path, aggregates: list[str]) -> dict:
    """Run ``df`` to its end with Trigger.AvailableNow and a foreachBatch sink that computes
    ``aggregates`` over every micro-batch (so every row is read, and little else is done).
    Wall seconds from start() to awaitTermination() returning, input rows from the query's
    progress, and the aggregates summed over batches."""
    results: list = []

    def each(batch, batch_id: int) -> None:
        results.append(tuple(batch.selectExpr(*aggregates).collect()[0]))

    shutil.rmtree(checkpoint, ignore_errors=True)
    t = time.perf_counter()
    query = (df.writeStream.foreachBatch(each).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    wall = time.perf_counter() - t
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")
    progress = query.recentProgress
    shutil.rmtree(checkpoint, ignore_errors=True)
    return {
        "seconds": wall,
        "rows": sum(p.numInputRows for p in progress),
        "batches": sum(1 for p in progress if p.numInputRows),
        "sums": [sum(int(r[i] or 0) for r in results) for i in range(len(aggregates))],
    }


def batch_count(spark, servers: str) -> dict:
    """``spark.read.format("minikafka")`` of the whole topic: count and value bytes."""
    t = time.perf_counter()
    row = (spark.read.format("minikafka").option("kafka.bootstrap.servers", servers)
           .option("subscribe", TOPIC).load()
           .selectExpr("count(*)", "sum(length(value))", "sum(crc32(value))").collect()[0])
    return {"seconds": time.perf_counter() - t, "rows": int(row[0]), "sums": [int(row[0]), int(row[1]), int(row[2])]}


def plain_reads(servers: str, partition: int, until: int, reps: int) -> dict:
    """``minikafka.spark.reader.read_range`` called in this process, no Spark: what one task
    costs. Seconds for a 1-record range (the consumer pooled by the first read: assign, seek,
    fetch), and (seconds, value bytes) for the whole of one partition."""
    import pyarrow.compute as pc

    from minikafka.spark.options import KafkaSourceOptions
    from minikafka.spark.reader import OffsetRange, read_range

    opts = KafkaSourceOptions.parse({"kafka.bootstrap.servers": servers, "subscribe": TOPIC}, batch=True)

    def read(n: int) -> tuple[float, int, int]:
        t = time.perf_counter()
        rows = nbytes = 0
        for batch in read_range(opts, OffsetRange(TOPIC, partition, 0, n)):
            rows += batch.num_rows
            nbytes += pc.sum(pc.binary_length(batch.column(1))).as_py() or 0
        return time.perf_counter() - t, rows, nbytes

    read(1)  # imports, first connection
    fixed = [read(1)[0] for _ in range(5)]
    whole = [read(until) for _ in range(reps)]
    if any(rows != until for _, rows, _ in whole):
        raise RuntimeError(f"read_range of partition {partition} did not return {until:,} rows")
    return {"fixed": fixed, "seconds": [w for w, _, _ in whole], "bytes": whole[0][2]}


# --- latency ------------------------------------------------------------------------------------------------


class Pacer:
    """A kafka-python producer in a thread: truck reports at ``rate`` per second, evenly spaced
    (report n due at start + n / rate, no drift), each stamped with the wall clock when sent
    (record timestamp = the report's timestamp_ms = int(time.time() * 1000))."""

    def __init__(self, servers: str, topic: str, rate: float) -> None:
        from kafka import KafkaProducer

        self.producer = KafkaProducer(bootstrap_servers=servers, acks="all", linger_ms=0)
        self.topic, self.rate = topic, rate
        self.sent = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Pacer":
        self.started_ms = time.time() * 1000
        self._thread.start()
        return self

    def _run(self) -> None:
        start = time.monotonic()
        for report in datasets.truck_positions(TRUCKS, seed=SEED + 1):
            delay = start + self.sent / self.rate - time.monotonic()
            if delay > 0 and self._stop.wait(delay):
                return
            if self._stop.is_set():
                return
            now_ms = int(time.time() * 1000)
            report["timestamp_ms"] = now_ms
            key, value = datasets.encode_report(report)
            self.producer.send(self.topic, key=key, value=value, timestamp_ms=now_ms).add_errback(self.errors.append)
            self.sent += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(30)
        self.producer.close()


def latency(spark, cluster, checkpoint: Path, n: dict) -> dict:
    """A streaming query at trigger 1 s, started before the producer; per record, ms from its
    timestamp (set at send) to the foreachBatch call, and to the rows being collected there."""
    from benchmarks.wire import create_topic

    servers = cluster.bootstrap_servers
    topic = "latency"
    create_topic(cluster, topic, PARTITIONS, 3)
    seen: list[tuple[float, float, list[int]]] = []  # (called ms, collected ms, record timestamps)

    def each(batch, batch_id: int) -> None:
        called = time.time() * 1000
        stamps = [r[0] for r in batch.selectExpr("unix_millis(timestamp)").collect()]
        seen.append((called, time.time() * 1000, stamps))

    query = (spark.readStream.format("minikafka").option("kafka.bootstrap.servers", servers)
             .option("subscribe", topic).option("startingOffsets", "latest").load()
             .writeStream.foreachBatch(each).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime=TRIGGER).start())
    try:
        deadline = time.monotonic() + 120
        while not query.recentProgress:  # the first (empty) batch has planned: the query is in place
            if query.exception() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the latency query never started: {query.exception()}")
            time.sleep(0.1)
        pacer = Pacer(servers, topic, n["rate"]).start()
        time.sleep(n["latency_s"])
        pacer.stop()
        deadline = time.monotonic() + 60
        while sum(len(s[2]) for s in seen) < pacer.sent:
            if query.exception() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"latency: {sum(len(s[2]) for s in seen)} of {pacer.sent} records came back "
                                   f"({query.exception()})")
            time.sleep(0.1)
        progress = query.recentProgress
    finally:
        query.stop()
    if pacer.errors:
        raise RuntimeError(f"latency: producer errors {pacer.errors[:3]}")
    cutoff = pacer.started_ms + n["skip_s"] * 1000
    to_call = [c - ts for c, _, stamps in seen for ts in stamps if ts >= cutoff]
    to_rows = [g - ts for _, g, stamps in seen for ts in stamps if ts >= cutoff]
    busy = [p for p in progress if p.numInputRows]
    return {
        "sent": pacer.sent, "skipped": pacer.sent - len(to_call), "to_call": to_call, "to_rows": to_rows,
        "batches": len(busy),
        "batch_ms": [p.durationMs.get("triggerExecution", 0) for p in busy],
        "rows_per_batch": [p.numInputRows for p in busy],
    }


# --- run ----------------------------------------------------------------------------------------------------


def run(scratch: Path, quick: bool, repeats: int) -> list[Section]:
    try:
        import pyspark  # noqa: F401

        from minikafka import spark as mkspark
        from minikafka.spark.session import JavaNotFoundError, java_version

        java_version()
    except ImportError as exc:
        return not_run(f"pyspark is not installed ({exc}); `pip install -e '.[spark]'`")
    except JavaNotFoundError as exc:
        return not_run(str(exc))
    from minikafka.feed import produce_trucks
    from minikafka.wire.process import launch

    from benchmarks.wire import BrokerCpu

    n = sizes(quick)
    count = int(n["records"])
    reps = repeats
    base = Path(scratch) / "spark"
    files = base / "jsonl"
    files.mkdir(parents=True)
    (base / "cluster").mkdir()
    jsonl = files / "trucks.jsonl"

    # retention.ms -1: the reports are stamped from 2024-01-01 (datasets.START_MS), so the brokers'
    # first retention check (log.retention.check.interval.ms, 5 min after start) would delete
    # them all under Kafka's default 7 days, mid-run on a loaded machine.
    with launch(brokers=3, dir=base / "cluster", config={"min.insync.replicas": 2, "retention.ms": -1}) as cluster:
        servers = cluster.bootstrap_servers
        t = time.perf_counter()
        loaded = produce_trucks(servers, count=count, trucks=TRUCKS, seed=SEED, topic=TOPIC,
                                partitions=PARTITIONS, replication_factor=3, progress=False)
        load_s = time.perf_counter() - t
        if loaded.count != count:
            raise RuntimeError(f"loaded {loaded.count} of {count} records")
        value_bytes, value_crcs = write_jsonl(jsonl, count)
        file_bytes = jsonl.stat().st_size

        t = time.perf_counter()
        spark = mkspark.session("minikafka-bench")
        session_s = time.perf_counter() - t
        try:
            def source():
                return (spark.readStream.format("minikafka").option("kafka.bootstrap.servers", servers)
                        .option("subscribe", TOPIC).option("startingOffsets", "earliest").load())

            def text():
                return spark.readStream.format("text").load(str(files))

            def json_file():
                return spark.readStream.format("json").schema(JSON_SCHEMA).load(str(files))

            raw = ["count(*)", "sum(length(value))", "sum(crc32(value))"]
            parsed = ["count(*)", "sum(lat + lon + speed_kmh + heading_deg)", "sum(timestamp_ms)",
                      "sum(length(truck_id))"]
            kinds = {
                "source": (source, raw),
                "text": (text, raw),
                "json": (json_file, parsed),
            }
            out: dict[str, list[dict]] = {k: [] for k in (*kinds, "batch")}
            cpu: list[float] = []
            # One warm-up run of each, not counted: the first query starts Spark's Python
            # workers and compiles the JVM's code paths.
            for k, (make, aggs) in kinds.items():
                drain(spark, make(), base / f"cp-warm-{k}", aggs)
            batch_count(spark, servers)
            for r in range(reps):
                order = list(kinds) if r % 2 == 0 else list(reversed(kinds))
                for k in order:
                    make, aggs = kinds[k]
                    if k == "source":
                        with BrokerCpu(cluster) as c:
                            res = drain(spark, make(), base / f"cp-{k}-{r}", aggs)
                        cpu.append(sum(c.percent))
                    else:
                        res = drain(spark, make(), base / f"cp-{k}-{r}", aggs)
                    out[k].append(res)
                out["batch"].append(batch_count(spark, servers))
            for k, results in out.items():
                for res in results:
                    if res["rows"] != count:
                        raise RuntimeError(f"{k}: read {res['rows']:,} rows, not {count:,}")
                    if k != "json" and res["sums"][1:] != [value_bytes, value_crcs]:
                        raise RuntimeError(f"{k}: the values differ from those written "
                                           f"({res['sums'][1:]} against {[value_bytes, value_crcs]})")

            biggest = max(loaded.per_partition, key=loaded.per_partition.get)
            plain = plain_reads(servers, biggest, loaded.per_partition[biggest], reps)
            lat = latency(spark, cluster, base / "cp-latency", n)
        finally:
            spark.stop()

    def row(label: str, k: str, extra: str = "") -> list[str]:
        secs = [res["seconds"] for res in out[k]]
        return [label, f"{count:,}", runs(reps), fig(secs, "{:.2f}"), fig([count / s for s in secs]),
                fig([value_bytes / s / MB for s in secs], "{:.1f}"), extra]

    ratios = [s["seconds"] / m["seconds"] for s, m in zip(out["text"], out["source"])]
    ratios_json = [s["seconds"] / m["seconds"] for s, m in zip(out["json"], out["source"])]
    spread = sorted(loaded.per_partition.values())
    throughput = Section(
        name="spark",
        title="Spark: records per second through the minikafka source against a JSON-lines file",
        method=[
            f"A real cluster (`minikafka.wire.launch(brokers=3)`, one OS process per broker and a controller, "
            f"`min.insync.replicas` 2). `minikafka.feed.produce_trucks` loaded {count:,} truck reports "
            f"({TRUCKS} trucks, seed {SEED}; key = truck id, value = the report as JSON) into `{TOPIC}`, "
            f"{PARTITIONS} partitions, RF=3, acks=all ({load_s:.0f} s, not measured here; "
            f"{spread[0]:,}–{spread[-1]:,} records per partition). The same {count:,} values, one per line, "
            f"were written to a local JSON-lines file ({file_bytes / MB:.0f} MB) in the scratch directory; "
            "every run checks it read exactly these records (row count from the query's progress, and "
            "the sum of value lengths and of CRC-32s of the values, except for the json row).",
            f"One Spark session, `minikafka.spark.session()`: local[2], Python workers reused "
            f"(it took {session_s:.0f} s to start). Each streaming query: `trigger(availableNow=True)`, a fresh "
            "checkpoint directory, and `foreachBatch` computing `count(*)`, `sum(length(value))` and "
            "`sum(crc32(value))` of each micro-batch and collecting that one row: every row is read, "
            "little else is done. Seconds: from `start()` to `awaitTermination()` returning (query "
            "start-up, planning and the one micro-batch included).",
            f"**minikafka source**: `readStream.format(\"minikafka\")`, `subscribe` `{TOPIC}`, "
            "`startingOffsets` earliest, no `maxOffsetsPerTrigger` (one micro-batch; one task per partition, "
            f"as Spark's Kafka source, so {PARTITIONS} tasks here, each sending Fetch requests "
            "on plain-TCP connections of its own to the leaders (a pooled kafka-python consumer gives the "
            "leaders and the Fetch version) and decoding the record batches straight into "
            "Arrow columns, yielded 10,000 rows at a time). "
            "Broker CPU%: the three broker processes together over the run (100% = one core).",
            "**text file**: `readStream.format(\"text\")` over the file's directory (`maxFilesPerTrigger` "
            "unset): the raw lines, like the source's raw values. **json file**: "
            f"`readStream.format(\"json\").schema(\"{JSON_SCHEMA}\")`, every field parsed (the foreachBatch "
            "sums all six columns). **batch**: `spark.read.format(\"minikafka\")` of the whole topic, "
            "`count(*)` and the two sums `collect()`ed (no streaming machinery). **read_range**: "
            "`minikafka.spark.reader.read_range` (what one task of the source runs) called in this process "
            "for the largest partition, Arrow batches and all: one core's worth of the source, without Spark.",
            f"One warm-up run of each first, not counted (the first query starts Spark's Python workers); "
            f"then {runs(reps)} of each, alternating the order; median (min–max). Ratio = the file "
            "source's seconds / the minikafka source's seconds within one round (so 0.25 means the "
            "source runs at a quarter of the file's rate). MB/s counts the JSON value bytes "
            f"({value_bytes / MB:.0f} MB).",
        ],
        columns=["Query", "Records", "Runs", "Seconds", "Records/s", "Value MB/s", "Broker CPU % (sum of 3)"],
        targets=[("minikafka Spark source >= 0.5 of the text-file source's rate (AvailableNow, 1,000,000 records)",
                  f"{med(ratios):.2f} (median of {len(ratios)} rounds)", met(med(ratios) >= 0.5))],
        rows=[
            row("minikafka source, AvailableNow", "source", fig(cpu)),
            row("text file source, AvailableNow", "text"),
            row("json file source (schema), AvailableNow", "json"),
            row("minikafka, batch `spark.read`", "batch"),
            [f"`read_range` of partition {biggest} alone, plain Python (no Spark)",
             f"{loaded.per_partition[biggest]:,}", runs(reps), fig(plain["seconds"], "{:.2f}"),
             fig([loaded.per_partition[biggest] / w for w in plain["seconds"]]),
             fig([plain["bytes"] / w / MB for w in plain["seconds"]], "{:.1f}"), ""],
            ["**minikafka source / text file**", "", "", "", fig(ratios, "{:.2f}"), "", ""],
            ["minikafka source / text file, round by round", "", "", "",
             ", ".join(f"{x:.2f}" for x in ratios), "", ""],
            ["**minikafka source / json file**", "", "", "", fig(ratios_json, "{:.2f}"), "", ""],
        ],
    )

    def lat_row(label: str, values: list[float]) -> list[str]:
        return [label, f"{n['rate']:,.0f}", f"{len(values):,}", f"{pct(values, 0.5):,.0f}",
                f"{pct(values, 0.9):,.0f}", f"{pct(values, 0.99):,.0f}", f"{max(values):,.0f}"]

    latencies = Section(
        name="spark",
        title="Spark: end-to-end latency, produce to foreachBatch, at trigger 1 s",
        method=[
            f"The same cluster and session, a new topic of {PARTITIONS} partitions (RF=3). A query "
            "`readStream.format(\"minikafka\")` (`startingOffsets` latest) → `foreachBatch`, "
            f"`trigger(processingTime=\"{TRIGGER}\")`, is started first; once its first (empty) batch is "
            f"planned, a kafka-python producer thread in this process (acks=all, linger_ms=0) sends truck "
            f"reports at {n['rate']:.0f}/s, evenly spaced, for {n['latency_s']:.0f} s, each record's timestamp "
            "(CreateTime) = the wall clock at `send()` (`TruckFeed` at speedup 1 would send in bursts on whole "
            "seconds, in step with Spark's trigger, which also fires on whole seconds).",
            "In `foreachBatch` (the driver, this same process and clock): `time.time()` when it is called, "
            "then `collect()` of `unix_millis(timestamp)` for the batch's rows (the minikafka source reads the "
            "records only now, in the Python workers), then `time.time()` again. Latency per record = those "
            "times − its timestamp: *foreachBatch called* and *rows collected*.",
            f"Records sent in the first {n['skip_s']:.0f} s are left out (cold start: the first data batch "
            f"starts Python workers): {lat['skipped']:,} of {lat['sent']:,}. One run; percentiles over the "
            f"rest. {lat['batches']} batches had records: median {med(lat['rows_per_batch']):,.0f} records and "
            f"{med(lat['batch_ms']):,.0f} ms per batch (Spark's `triggerExecution`, max "
            f"{max(lat['batch_ms']):,.0f} ms).",
            "What the figures are made of: a record waits for the next trigger (on average half an "
            "interval, 500 ms, up to 1 s; a batch that overruns the interval delays the next one), then for "
            "the batch to be planned (the source's driver-side Python process asks the brokers for the "
            "partitions' ends) and run: a task per partition with new records, "
            "read in Python workers with kafka-python consumers they keep between tasks, two tasks at a time on "
            "local[2]. For scale: `read_range` of a 1-record range, called in this process without Spark (with "
            f"the consumer pooled by an earlier read: assign, seek, fetch), "
            f"took {med(plain['fixed']) * 1000:,.0f} ms (median of 5; {min(plain['fixed']) * 1000:,.0f}–"
            f"{max(plain['fixed']) * 1000:,.0f})."
            + (f" The batches took longer than the {TRIGGER} interval, so they ran back to back."
               if med(lat["batch_ms"]) > 1000 else ""),
        ],
        columns=["Measured at", "Rate (records/s)", "Records", "p50 ms", "p90 ms", "p99 ms", "max ms"],
        rows=[lat_row("foreachBatch called", lat["to_call"]),
              lat_row("rows collected in foreachBatch", lat["to_rows"])],
    )
    return [throughput, latencies]
