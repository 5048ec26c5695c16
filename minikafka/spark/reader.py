"""The "minikafka" source's readers: a batch reader and a micro-batch stream, as Spark's Kafka source.

Theory of operation
-------------------
Spark plans, Kafka stores, the source only translates. An *offset* of this source is what
Spark's Kafka source writes in its checkpoint, one number per topic-partition as JSON,
``{"trucks_gps": {"0": 120, "1": 98}}``: the next offset to read in each partition.

A streaming query (``KafkaMicroBatchStream``):

- ``initialOffset()`` resolves ``startingOffsets`` once, for a new query. A restarted query
  never calls it: Spark hands back the offsets in its checkpoint.
- ``latestOffset(start, limit)`` asks the brokers for every partition's end, then admits
  records: all of them, or at most ``limit.max_rows`` (``maxOffsetsPerTrigger``) shared
  between partitions in proportion to their backlog. Partitions that appear (added to the
  topic, or a new topic matching ``subscribePattern``) start at their earliest offset.
  Under ``Trigger.AvailableNow`` the ends found by ``prepareForTriggerAvailableNow`` are a
  ceiling, so the query drains what existed when it started, and stops.
- ``partitions(start, end)`` makes Spark tasks of the offset ranges ``[start, end)`` of the
  partitions with new records: one task per range, as Spark's source, the ranges cut by
  ``minPartitions`` and ``maxRecordsPerPartition`` (``offset_range_calculator``), so Spark
  spreads a batch's partitions over its executors. ``read`` fetches exactly those ranges
  (the task's own Fetch requests, no group: see ``data_consumer``; decoded by
  ``arrow_records`` straight into columns) and yields them as Arrow record batches. A task
  re-run by Spark reads the same ranges again: the same rows.

Invariants: offsets only move forward, and a planned range is read whole or the task fails:
rows are never skipped silently. A range that ends where a broker said its log ends is
checked against the records fetched: a record batch running past that end means the broker
answered ListOffsets wrongly, and the task fails naming the broker and the partition
(``data_consumer``), instead of the query reading short. Where records a query still needed are gone (deleted by
retention, a partition deleted, a log truncated below the checkpoint) the query fails with
a message saying which, unless ``failOnDataLoss=false``, which skips ahead as Spark does.
Offsets with no record (compaction, transaction markers) are simply not rows.

The source never commits offsets to Kafka: the checkpoint is the only record of progress,
so a consumer group's lag tools do not see a Spark query (as with Spark's own source).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Iterator

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from minikafka.spark.offset_range_calculator import KafkaOffsetRangeCalculator, OffsetRange
from minikafka.spark.offset_reader import KafkaOffsetReader, KafkaSourceError, TopicsVanished, connect_consumer
from minikafka.spark.options import EARLIEST, LATEST, KafkaSourceOptions, TopicPartition

logger = logging.getLogger("minikafka.spark.source")

ROWS_PER_ARROW_BATCH = 10_000
# While a task reads on kafka-python's connections (SSL, SASL, a proxy: see data_consumer), the
# GIL is handed between threads every 0.5 ms instead of Python's 5 ms: kafka-python receives
# the next Fetch response in its network thread while this one decodes the last. Measured:
# 130,000 records read 20-30% faster (benchmarks/RESULTS.md, issue 16).
# Our reading of why: at 5 ms the receiving thread waits that long for the GIL after each
# socket buffer-full, and the broker's send waits for it.
READ_SWITCH_INTERVAL_S = 0.0005

Offsets = dict[TopicPartition, int]


def to_spark_offsets(offsets: Offsets) -> dict:
    """``{(topic, p): n}`` as Spark's Kafka source writes it: ``{topic: {"p": n}}``."""
    out: dict[str, dict[str, int]] = {}
    for (topic, p), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(p)] = int(off)
    return out


def from_spark_offsets(offsets: dict) -> Offsets:
    return {(topic, int(p)): int(off) for topic, parts in offsets.items() for p, off in parts.items()}


def admit(begin: Offsets, latest: Offsets, max_rows: int | None) -> Offsets:
    """The end of the next micro-batch: everything up to ``latest``, or at most ``max_rows``.

    The budget is shared in proportion to each partition's backlog (as Spark's Kafka source
    does); the rounding remainder goes to the largest fractions, ties in partition order, so
    the total is never above ``max_rows`` and the same backlog always gives the same batch.
    """
    backlog = {tp: max(0, latest.get(tp, off) - off) for tp, off in begin.items()}
    total = sum(backlog.values())
    if max_rows is None or total <= max_rows:
        return {tp: begin[tp] + n for tp, n in backlog.items()}
    shares = {tp: max_rows * n / total for tp, n in backlog.items()}
    take = {tp: int(s) for tp, s in shares.items()}
    left = max_rows - sum(take.values())
    for tp in sorted(shares, key=lambda tp: (-(shares[tp] - take[tp]), tp))[:left]:
        take[tp] += 1
    return {tp: begin[tp] + take[tp] for tp in begin}


class KafkaInputPartition(InputPartition):
    """One Spark task: one offset range (a list, so that a task made before may hold more)."""

    def __init__(self, ranges: list[OffsetRange]) -> None:
        super().__init__(tuple((r.topic, r.partition, r.from_offset, r.until_offset) for r in ranges))
        self.ranges = list(ranges)


def plan_tasks(ranges: list[OffsetRange], options: KafkaSourceOptions | None = None) -> list[KafkaInputPartition]:
    """Spark tasks for a batch: one per offset range, the ranges cut as Spark's Kafka source
    cuts them (``minPartitions``, ``maxRecordsPerPartition``: ``offset_range_calculator``).

    Largest range first (ties in topic, partition, offset order): Spark starts a stage's tasks
    in their order as cores come free, so the long reads start early and the short ones fill
    in at the end. In partition order, 10 partitions of 70,000-130,000 records on 2 cores
    could leave one core idle while the other read a large last partition.
    """
    calculator = KafkaOffsetRangeCalculator(
        options.min_partitions if options else None, options.max_records_per_partition if options else None)
    cut = sorted(calculator.get_ranges(ranges), key=lambda r: (-r.size, r.topic, r.partition, r.from_offset))
    return [KafkaInputPartition([r]) for r in cut]


def _arrow_schema(include_headers: bool):
    import pyarrow as pa

    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))))
    return pa.schema(fields)


# Consumers kept by each Python worker between tasks, as Spark's Kafka connector pools its
# consumers: a new one costs a bootstrap (ApiVersions, Metadata, connections to the leaders),
# which at one task per partition per micro-batch would be most of a small batch's time. A
# task uses only its connections and metadata (``data_consumer`` sends the Fetch requests);
# a worker runs one task at a time; a consumer is taken out of the pool while a task uses it
# and put back only if the task ended cleanly.
_POOL: dict[tuple, list] = {}


def _take_consumer(options: KafkaSourceOptions):
    key = (options.bootstrap_servers, tuple(sorted(options.consumer_config.items())))
    free = _POOL.setdefault(key, [])
    if free:
        return key, free.pop()
    overrides = {"auto_offset_reset": "none"}
    if "retry_backoff_ms" not in options.consumer_config:
        overrides["retry_backoff_ms"] = 20  # the pause before retrying a fetch after a leader change
    return key, connect_consumer(options, **overrides)


def close_pooled_consumers() -> None:
    """Close every consumer the pool keeps, and its Fetch connections: what a worker that stops
    should do. A consumer merely dropped from the pool is not closed: kafka-python keeps it
    connected, and if its cluster goes away it keeps knocking on the old addresses (a test's
    next cluster, started on the same ports, once received its Metadata requests and
    auto-created the old topic)."""
    pooled = [consumer for free in _POOL.values() for consumer in free]
    _POOL.clear()
    for consumer in pooled:
        _close_consumer(consumer)


def _close_consumer(consumer) -> None:
    """A consumer closed for good: the Fetch connections ``data_consumer`` opened, then its own."""
    from minikafka.spark.data_consumer import close_connections

    close_connections(consumer)
    consumer.close()


def read_range(options: KafkaSourceOptions, part: OffsetRange) -> Iterator[Any]:
    """Fetch exactly the offsets ``[from_offset, until_offset)`` of one partition, as Arrow batches.

    The records go from Fetch responses to Arrow columns without a Python object per record
    (``data_consumer`` fetches, ``arrow_records`` decodes); a pooled kafka-python consumer
    provides the metadata, the leaders and the ``kafka.*`` settings.
    """
    import pyarrow as pa

    from minikafka.spark.data_consumer import fetch_range

    if part.until_offset <= part.from_offset:
        return
    schema = _arrow_schema(options.include_headers)
    topic = pa.scalar(part.topic, pa.string())
    partition = pa.scalar(part.partition, pa.int32())
    key, consumer = _take_consumer(options)
    clean = False
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(min(switch_interval, READ_SWITCH_INTERVAL_S))
    try:
        for rows in fetch_range(consumer, options, part.topic, part.partition, part.from_offset, part.until_offset,
                                part.end_is_log_end, part.holes_allowed):
            n = len(rows)
            columns = [
                rows.keys,
                rows.values,
                pa.repeat(topic, n),
                pa.repeat(partition, n),
                pa.array(rows.offsets, pa.int64()),
                pa.array(rows.timestamps * 1000, schema.field("timestamp").type),
                pa.array(rows.timestamp_types, pa.int32()),
            ]
            if options.include_headers:
                columns.append(pa.array([[{"key": k, "value": v} for k, v in h] for h in rows.headers],
                                        schema.field("headers").type))
            batch = pa.RecordBatch.from_arrays(columns, schema=schema)
            for at in range(0, n, ROWS_PER_ARROW_BATCH):
                yield batch.slice(at, ROWS_PER_ARROW_BATCH)
        clean = True
    except GeneratorExit:  # Spark stopped reading early (a LIMIT): the consumer is still sound
        clean = True
        raise
    finally:
        sys.setswitchinterval(switch_interval)
        if clean:
            _POOL[key].append(consumer)
        else:
            _close_consumer(consumer)


def read_ranges(options: KafkaSourceOptions, task: KafkaInputPartition) -> Iterator[Any]:
    for part in task.ranges:
        yield from read_range(options, part)


class KafkaBatchReader(DataSourceReader):
    """``spark.read.format("minikafka")``: the records between startingOffsets and endingOffsets."""

    def __init__(self, options: KafkaSourceOptions) -> None:
        self.options = options
        self.offsets = KafkaOffsetReader(options)

    def partitions(self) -> list[KafkaInputPartition]:
        opts = self.options
        try:
            tps = self.offsets.partitions(require_topics=True)
            start = _resolve(self.offsets, tps, opts.starting, "startingOffsets", opts.strategy)
            end = _resolve(self.offsets, tps, opts.ending, "endingOffsets", opts.strategy)
            for tp in tps:
                if start[tp] > end[tp]:
                    raise KafkaSourceError(
                        f"startingOffsets {start[tp]} of {tp[0]}-{tp[1]} is after its endingOffsets {end[tp]}.")
            compacted = self.offsets.compacted(t for t, _ in tps)
        finally:
            self.offsets.close()
        ending = opts.ending
        log_ends = {tp for tp in tps if ending == LATEST or (isinstance(ending, dict) and ending[tp] == LATEST)}
        return plan_tasks([OffsetRange(t, p, start[(t, p)], end[(t, p)], (t, p) in log_ends, t in compacted)
                           for t, p in tps], opts)

    def read(self, partition: KafkaInputPartition) -> Iterator[Any]:
        return read_ranges(self.options, partition)


def _resolve(reader: KafkaOffsetReader, tps: list[TopicPartition], spec: int | Offsets,
             name: str, strategy: str) -> Offsets:
    """Offsets for ``tps`` from 'earliest' / 'latest' / a JSON of offsets (-2 and -1 resolved)."""
    if spec == EARLIEST:
        return reader.earliest(tps)
    if spec == LATEST:
        return reader.latest(tps)
    if set(spec) != set(tps):
        raise KafkaSourceError(
            f"If {name} contains specific offsets, it must name every partition the query reads "
            "(use -2 for earliest, -1 for latest). Named: "
            + ", ".join(f"{t}-{p}" for t, p in sorted(spec)) + "; subscribed: "
            + ", ".join(f"{t}-{p}" for t, p in tps) + ".")
    earliest = reader.earliest(tp for tp in tps if spec[tp] == EARLIEST)
    latest = reader.latest(tp for tp in tps if spec[tp] == LATEST)
    return {tp: earliest.get(tp, latest.get(tp, spec[tp])) for tp in tps}


class KafkaMicroBatchStream(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("minikafka")`` (see the module docstring)."""

    def __init__(self, options: KafkaSourceOptions) -> None:
        self.options = options
        self.offsets = KafkaOffsetReader(options)
        self.target: Offsets | None = None  # Trigger.AvailableNow: the ends when the query started
        # The log ends the brokers gave at the last trigger: a range ending at one is checked
        # against the log when read (data_consumer), since a log end is never inside a batch.
        self.log_ends: Offsets = {}

    def initialOffset(self) -> dict:
        opts = self.options
        # A pattern may match nothing yet: the query then waits for matching topics.
        tps = self.offsets.partitions(require_topics=opts.strategy != "subscribepattern")
        return to_spark_offsets(_resolve(self.offsets, tps, opts.starting, "startingOffsets", opts.strategy))

    def getDefaultReadLimit(self):
        n = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.offsets.partitions(require_topics=self.options.strategy != "subscribepattern")
        self.target = self.offsets.latest(tps)

    def latestOffset(self, start: dict, limit) -> dict:
        vanished: set[str] = set()
        while True:
            try:
                return self._latest_offset(start, limit, vanished)
            except TopicsVanished as e:  # deleted while we looked: as if gone from the start
                if e.topics <= vanished:
                    raise
                vanished |= e.topics

    def _latest_offset(self, start: dict, limit, vanished: set[str]) -> dict:
        begin = from_spark_offsets(start)
        tps = [tp for tp in self.offsets.partitions(require_topics=False) if tp[0] not in vanished]
        gone = sorted(set(begin) - set(tps))
        if gone:
            self._data_loss(f"partition{'s' if len(gone) > 1 else ''} "
                            + ", ".join(f"{t}-{p}" for t, p in gone)
                            + " disappeared (topic deleted?) before the query read everything in them")
            for tp in gone:
                del begin[tp]
        new = [tp for tp in tps if tp not in begin and (self.target is None or tp in self.target)]
        begin.update(self.offsets.earliest(new))
        latest = self.offsets.latest(begin)
        self.log_ends = dict(latest)
        if self.target is not None:
            latest = {tp: min(off, self.target.get(tp, begin[tp])) for tp, off in latest.items()}
        for tp, off in sorted(begin.items()):
            if latest[tp] < off and tp not in new:
                self._data_loss(f"{tp[0]}-{tp[1]}'s log now ends at {latest[tp]}, before offset {off} "
                                "the query already read up to (truncated by an unclean leader election?)")
        earliest = self.offsets.earliest(begin)
        lost = {tp: earliest[tp] for tp, off in begin.items() if earliest[tp] > off}
        if lost:
            self._data_loss("records were deleted (retention) before the query read them: "
                            + ", ".join(f"{t}-{p} offsets {begin[(t, p)]}..{e - 1}" for (t, p), e in sorted(lost.items())))
            begin.update({tp: min(e, latest[tp]) if latest[tp] >= begin[tp] else begin[tp] for tp, e in lost.items()})
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return to_spark_offsets(admit(begin, latest, max_rows))

    def _data_loss(self, what: str) -> None:
        """Spark's rule: fail the query (failOnDataLoss=true), or log a warning and go on."""
        if self.options.fail_on_data_loss:
            raise KafkaSourceError(
                f"Data loss: {what}. The query stops (failOnDataLoss=true, the default); set the "
                "option failOnDataLoss=false to skip what is gone and go on.")
        logger.warning("Data loss: %s. Skipped, because failOnDataLoss=false.", what)

    def partitions(self, start: dict, end: dict) -> list[KafkaInputPartition]:
        begin = from_spark_offsets(start)
        until = from_spark_offsets(end)
        new = [tp for tp in until if tp not in begin]
        begin.update(self.offsets.earliest(new))
        compacted = self.offsets.compacted(t for t, _ in until)
        return plan_tasks([OffsetRange(t, p, begin[(t, p)], off, self.log_ends.get((t, p)) == off, t in compacted)
                           for (t, p), off in sorted(until.items())], self.options)

    def read(self, partition: KafkaInputPartition) -> Iterator[Any]:
        return read_ranges(self.options, partition)

    def commit(self, end: dict) -> None:
        pass  # Spark's checkpoint is the record of progress; nothing is committed to Kafka

    def stop(self) -> None:
        self.offsets.close()
