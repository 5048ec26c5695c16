"""KafkaOffsetRangeCalculator: which offset ranges a batch reads, one Spark task each, as Spark's Kafka source.

Theory of operation
-------------------
A batch (a micro-batch, or a whole ``spark.read``) is a set of offset ranges ``[from, until)``,
one per topic-partition with new records. Spark's Kafka source makes one Spark task per
range: a task reads one partition, and ten partitions are ten tasks that Spark spreads over
its executors. Two options cut ranges smaller (Spark's ``KafkaOffsetRangeCalculator``):

- ``maxRecordsPerPartition``: a range longer than it is cut into ``ceil(size / max)`` equal
  pieces (the last takes the rounding), so no task reads more than that many offsets.
- ``minPartitions``: when there are fewer ranges than it, the large ones are cut so that the
  batch has about that many tasks. A range's share of the tasks is its share of the offsets
  (``round(size / total * minPartitions)``, at least 1); the ranges whose share rounds to one
  stay whole and are left out of the sums, so the other ranges divide the rest of the tasks
  between them. "About": rounding gives a few more or fewer.

Both given: first ``maxRecordsPerPartition``, then ``minPartitions`` on what that made (Spark
4's order). Empty ranges are dropped. The same ranges always give the same tasks, in the
same order, so a task re-run by Spark reads the same offsets.

A range also carries ``end_is_log_end``: whether its ``until`` is what a broker answered for
the log's end (ListOffsets "latest"), not an end the planner chose (a limit, a split). Only
such an end can be checked against the log when the range is read (``data_consumer``): a
log end never falls inside a record batch. And ``holes_allowed``: whether the topic is
compacted (``cleanup.policy`` has ``compact``), the only kind of log whose offsets may skip;
in any other a hole between the records fetched is records missing, and the read fails.
This module does no I/O.
"""

from __future__ import annotations


class OffsetRange:
    """The records of one topic-partition in ``[from_offset, until_offset)``."""

    __slots__ = ("topic", "partition", "from_offset", "until_offset", "end_is_log_end", "holes_allowed")

    def __init__(self, topic: str, partition: int, from_offset: int, until_offset: int,
                 end_is_log_end: bool = False, holes_allowed: bool = False) -> None:
        self.topic = topic
        self.partition = partition
        self.from_offset = from_offset
        self.until_offset = until_offset
        self.end_is_log_end = end_is_log_end
        self.holes_allowed = holes_allowed

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset

    def __getstate__(self) -> tuple:
        return (self.topic, self.partition, self.from_offset, self.until_offset, self.end_is_log_end,
                self.holes_allowed)

    def __setstate__(self, state: tuple) -> None:
        (self.topic, self.partition, self.from_offset, self.until_offset, self.end_is_log_end,
         self.holes_allowed) = state

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OffsetRange) and self.__getstate__() == other.__getstate__()

    def __repr__(self) -> str:
        return f"{self.topic}-{self.partition}[{self.from_offset}, {self.until_offset})"


def _cut(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``r`` in ``parts`` pieces of (nearly) equal size, in offset order; the last keeps r's end."""
    out = []
    remaining, start = r.size, r.from_offset
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        end = min(start + this, r.until_offset)
        last = part == parts - 1
        out.append(OffsetRange(r.topic, r.partition, start, end, r.end_is_log_end and last and end == r.until_offset,
                               r.holes_allowed))
        start = end
    return [p for p in out if p.size > 0]


def _part_count(size: int, total: int, min_parts: int) -> int:
    # Scala's math.round: half rounds up (Python's round() would round half to even).
    return max(int(size / total * min_parts + 0.5), 1)


class KafkaOffsetRangeCalculator:
    """The ranges of a batch, cut as ``minPartitions`` and ``maxRecordsPerPartition`` say."""

    def __init__(self, min_partitions: int | None = None, max_records_per_partition: int | None = None) -> None:
        for name, value in (("minPartitions", min_partitions), ("maxRecordsPerPartition", max_records_per_partition)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ValueError(f"{name} must be a positive whole number, not {value!r}")
        self.min_partitions = min_partitions
        self.max_records_per_partition = max_records_per_partition

    def get_ranges(self, ranges: list[OffsetRange]) -> list[OffsetRange]:
        ranges = [r for r in sorted(ranges, key=lambda r: (r.topic, r.partition)) if r.size > 0]
        if self.max_records_per_partition is not None:
            m = self.max_records_per_partition
            ranges = [p for r in ranges for p in _cut(r, -(-r.size // m))]
        if self.min_partitions is None or len(ranges) >= self.min_partitions:
            return ranges
        total = sum(r.size for r in ranges)
        whole = [_part_count(r.size, total, self.min_partitions) == 1 for r in ranges]
        split_total = total - sum(r.size for r, w in zip(ranges, whole) if w)
        split_parts = max(self.min_partitions - sum(whole), 1)
        return [p for r, w in zip(ranges, whole)
                for p in ([r] if w else _cut(r, _part_count(r.size, split_total, split_parts)))]
