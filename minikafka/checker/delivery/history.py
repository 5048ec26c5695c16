"""What a consumer did, in order: ``ConsumerHistory`` (processed records, commits, crashes,
restarts) and ``topic_records``, the records a topic holds, by their place.

The theory of operation of the whole is ``minikafka.checker.delivery``'s."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from minikafka.checker.history import OK, History, _describe_error, value_of
from minikafka.errors import IllegalArgumentError

RecordKey = tuple[str, int, int]  # (topic, partition, offset): a record's place, its identity


# --- the consumer history -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Processed:
    """One record processed (its side effect done) by one consumer."""

    consumer: str
    topic: str
    partition: int
    offset: int
    value: Hashable
    time_ms: int = 0

    @property
    def key(self) -> RecordKey:
        return self.topic, self.partition, self.offset


@dataclass(frozen=True)
class Commit:
    """One offset commit the application asked for: (topic, partition, next offset)
    triples, and the error if the coordinator refused it (or it never got an answer)."""

    consumer: str
    offsets: tuple[tuple[str, int, int], ...]
    time_ms: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Crash:
    """A consumer's process died. ``unprocessed``: records it had polled and not yet
    processed (they died with it); ``after``: the last record it processed, if any."""

    consumer: str
    time_ms: int = 0
    after: RecordKey | None = None
    unprocessed: int = 0


@dataclass(frozen=True)
class Restart:
    consumer: str
    time_ms: int = 0


@dataclass
class ConsumerHistory:
    """``ConsumerHistory(clock=lambda: cluster.now)``: the consumers' side of a run, in order."""

    events: list = field(default_factory=list)
    clock: Callable[[], int] | None = field(default=None, repr=False, compare=False)

    def _now(self, time_ms: int | None) -> int:
        if time_ms is not None:
            return time_ms
        return self.clock() if self.clock else 0

    def processed(self, consumer: str, record: Any, *, time_ms: int | None = None) -> Processed:
        """Record that ``consumer`` processed ``record`` (a ``ConsumerRecord``, or a
        (topic, partition, offset, value) tuple). Call it when the side effect happens."""
        topic, partition, offset, value = _fields(record)
        if not isinstance(offset, int) or offset < 0:
            raise IllegalArgumentError(f"a processed record needs an offset >= 0, not {offset!r}")
        event = Processed(str(consumer), topic, partition, offset, value_of(value), self._now(time_ms))
        self.events.append(event)
        return event

    def commit(self, consumer: str, offsets: dict, *, error: Any = None, time_ms: int | None = None) -> Commit:
        """Record a commit of ``offsets`` ({TopicPartition: next offset or OffsetAndMetadata})."""
        triples = tuple(sorted((tp[0], tp[1], getattr(om, "offset", om)) for tp, om in offsets.items()))
        text = None if error is None else _describe_error(error)
        event = Commit(str(consumer), triples, self._now(time_ms), text)
        self.events.append(event)
        return event

    def crash(self, consumer: str, *, after: RecordKey | None = None, unprocessed: int = 0,
              time_ms: int | None = None) -> Crash:
        event = Crash(str(consumer), self._now(time_ms), after, unprocessed)
        self.events.append(event)
        return event

    def restart(self, consumer: str, *, time_ms: int | None = None) -> Restart:
        event = Restart(str(consumer), self._now(time_ms))
        self.events.append(event)
        return event

    # --- views ---------------------------------------------------------------------------------------

    @property
    def processings(self) -> list[Processed]:
        return [e for e in self.events if isinstance(e, Processed)]

    @property
    def commits(self) -> list[Commit]:
        return [e for e in self.events if isinstance(e, Commit)]

    @property
    def crashes(self) -> list[Crash]:
        return [e for e in self.events if isinstance(e, Crash)]

    @property
    def restarts(self) -> list[Restart]:
        return [e for e in self.events if isinstance(e, Restart)]

    def counts(self) -> dict[str, int]:
        commits = self.commits
        return {
            "consumers": len({e.consumer for e in self.events}),
            "processed": len(self.processings),
            "commits ok": sum(1 for c in commits if c.ok),
            "commits refused": sum(1 for c in commits if not c.ok),
            "crashes": len(self.crashes),
            "restarts": len(self.restarts),
        }

    def timeline(self) -> list[tuple[int, str]]:
        """Crashes and restarts, in order: the faults of the run."""
        out = []
        for e in self.events:
            if isinstance(e, Crash):
                text = f"crash {e.consumer}"
                if e.after is not None:
                    text += f" after processing {e.after[0]}-{e.after[1]} offset {e.after[2]}"
                out.append((e.time_ms, f"{text}; {e.unprocessed} polled record(s) not processed"))
            elif isinstance(e, Restart):
                out.append((e.time_ms, f"restart {e.consumer}"))
        return out


# --- the records in the topic -------------------------------------------------------------------------------


def topic_records(source: Any) -> tuple[dict[RecordKey, Hashable], list[str]]:
    """The records a run is judged against, by (topic, partition, offset), and the
    partitions that could not be read completely (``unchecked``). ``source``: a checker
    ``History`` (its final read if it made one, else its acknowledged sends), or an
    iterable of (topic, partition, offset, value) tuples or of records with those
    attributes."""
    records: dict[RecordKey, Hashable] = {}
    unchecked: list[str] = []
    if isinstance(source, History):
        if source.final_reads:
            for poll in source.polls:
                if poll.final:
                    for offset, value in poll.records:
                        records[(poll.topic, poll.partition, offset)] = value
            unchecked = sorted(f"{t}-{p}" for (t, p), fr in source.final_reads.items() if not fr.complete)
        else:
            for op in source.sends:
                if op.status == OK and op.offset is not None and op.offset >= 0:
                    records[(op.topic, op.partition, op.offset)] = op.value
        return records, unchecked
    for r in source:
        topic, partition, offset, value = _fields(r)
        records[(topic, partition, offset)] = value_of(value)
    return records, unchecked


def _fields(record: Any) -> tuple[str, int, int, Any]:
    """(topic, partition, offset, value) of a record object (a ``ConsumerRecord`` is a
    13-field tuple: attributes first) or of a 4-tuple."""
    if all(hasattr(record, a) for a in ("topic", "partition", "offset", "value")):
        return record.topic, record.partition, record.offset, record.value
    topic, partition, offset, value = record
    return topic, partition, offset, value
