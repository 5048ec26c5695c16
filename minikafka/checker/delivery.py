"""Delivery semantics, proven: what consumers *processed*, counted against what the topic holds.

Theory of operation
-------------------
The producer-side checker asks "is every acknowledged write in the log?". This one asks
the consumer's question: "was every record in the log *processed*, and how many times?".
Processing is the application's side effect (a row written, an e-mail sent); a consumer
crash can cut it off at any point, and where the consumer commits its position relative
to that side effect decides what a crash costs:

==================  ===================================================  ======================
strategy            the loop                                             a crash ...
==================  ===================================================  ======================
``at-most-once``    poll; ``commit()`` the batch's end; then process     loses the unprocessed
                    the records one by one                               rest of the batch
``at-least-once``   poll; process the batch; then ``commit()``           makes the next owner
                                                                         process again what
                                                                         was processed since
                                                                         the last commit
``auto-commit``     ``enable_auto_commit=True``; poll, hand the records  loses the hand-off
                    to a work queue (a worker thread's), process a few   queue, whose positions
                    per loop iteration                                   a later poll committed
``exactly-once``    results and next offsets written together to an      costs nothing
                    external store, one atomic update per record; on
                    assignment, ``seek`` to the store's offsets
==================  ===================================================  ======================

Auto commit alone is not at-most-once: Kafka's consumer (Java and kafka-python) commits,
at the start of ``poll()``, the positions of records returned by *earlier* polls. An
application that processes each batch before polling again (synchronous processing) has
therefore processed everything an auto commit covers: a crash costs re-processing, never
loss, i.e. at-least-once. Records are lost only when the application hands them off
(a queue, a thread) and polls again before they are processed; the ``auto-commit``
strategy makes that hand-off explicit.

Exactly-once here is Kafka's recipe for external systems (the "storing offsets outside
Kafka" section of the ``KafkaConsumer`` javadoc): the result and the offset it consumed
are one atomic write, so they can never disagree, and a new owner of a partition starts
where the store says, ignoring Kafka's committed offsets. (A real system would also fence
a zombie, a consumer that lost its partition without knowing it, with a conditional write;
the single-threaded runner here never makes one.)

Three rooms:

- the *consumer history* (``ConsumerHistory``): what each consumer processed (topic,
  partition, offset, value, consumer, time), what it committed and whether the commit
  was accepted, crashes and restarts;
- the *analysis* (``analyse_delivery(history, records)``): ``records`` is the topic's
  content (a checker ``History`` after ``final_read``, whose final read is used, or whose
  acknowledged sends are, or (topic, partition, offset, value) tuples); the report counts
  records *lost* (never processed by anyone) and *duplicated* (processed more than once,
  with how many times), and ``delivery_table`` puts reports side by side;
- the *runs*: ``run_delivery_scenario(strategy, seed=...)`` runs one seeded scenario on a
  simulated cluster (3 brokers, a topic with RF 3, a producer preloading half the records
  and sending the rest while the consumers run, 1 to 3 consumers in one group, crashes
  with ``cluster.kill_consumer`` at seeded points and restarts after seeded delays) until
  the consumers have caught up or a simulated deadline passes; ``delivery_campaign``
  adds up many seeds.

A seed decides a ``DeliveryPlan`` before anything runs (consumers, crash points, restart
delays, batch sizes), the same for every strategy: a table of the four strategies run
with one seed compares them under the same crashes. A crash point is "right after the
n-th processing" (every processing counts, repeats included), so a crash always lands
while a consumer is at work, where the strategies differ (right after the last record
of a batch, at-most-once loses nothing and at-least-once repeats the whole batch).
Consumers take turns (the order drawn from the seed), each turn one iteration of its
poll loop; ``poll`` runs the simulated world, so heartbeats, rebalances and fetches go
on between turns as they would between threads. Same seed, same run, same report.

Crashes are the only fault: no broker faults, and no consumer that stalls past
``max_poll_interval_ms`` and goes on working after the group gave its partitions away
(a zombie). A turn takes milliseconds, so the group never evicts a member between its
poll and its commit, and no commit is refused.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable

from minikafka.broker.group_coordinator import OFFSETS_TOPIC, partition_for
from minikafka.checker.analysis import natural_key
from minikafka.checker.campaign import Workload, _quiet_clients, run_cluster, schedule_seeds
from minikafka.checker.history import INVOKED, OK, History, _describe_error, value_of
from minikafka.checker.reader import final_read
from minikafka.clients.consumer import ConsumerRebalanceListener, KafkaConsumer
from minikafka.cluster import Cluster
from minikafka.errors import IllegalArgumentError, KafkaError
from minikafka.topic import TopicPartition

AT_MOST_ONCE, AT_LEAST_ONCE = "at-most-once", "at-least-once"
AUTO_COMMIT, EXACTLY_ONCE = "auto-commit", "exactly-once"
STRATEGIES = (AT_MOST_ONCE, AT_LEAST_ONCE, AUTO_COMMIT, EXACTLY_ONCE)
LOST, DUPLICATED = "lost", "duplicated"
# What each strategy promises: the counts that must be zero, crashes or not.
GUARANTEES: dict[str, tuple[str, ...]] = {
    AT_MOST_ONCE: (DUPLICATED,),
    AT_LEAST_ONCE: (LOST,),
    AUTO_COMMIT: (),  # with a hand-off, nothing
    EXACTLY_ONCE: (LOST, DUPLICATED),
}

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


# --- the analysis -------------------------------------------------------------------------------------------


def _ranges(offsets: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for o in offsets:
        if out and out[-1][1] == o - 1:
            out[-1] = (out[-1][0], o)
        else:
            out.append((o, o))
    return out


def _keys_text(keys: Iterable[RecordKey], limit: int = 8) -> str:
    """"work-0 offsets 3..7, 12; work-2 offset 9": compact, sorted, cut after ``limit`` runs."""
    by_tp: dict[tuple[str, int], list[int]] = {}
    for t, p, o in sorted(keys):
        by_tp.setdefault((t, p), []).append(o)
    parts, shown = [], 0
    for (t, p), offsets in by_tp.items():
        runs = [str(lo) if lo == hi else f"{lo}..{hi}" for lo, hi in _ranges(offsets)]
        if shown + len(runs) > limit:
            runs = runs[: max(0, limit - shown)] + ["..."]
        shown += len(runs)
        word = "offset" if len(offsets) == 1 else "offsets"
        parts.append(f"{t}-{p} {word} {', '.join(runs)}")
        if shown > limit:
            break
    return "; ".join(parts)


@dataclass
class DeliveryReport:
    """The verdict on one run: ``lost`` (records nobody processed, sorted (topic,
    partition, offset, value)), ``duplicates`` ({(topic, partition, offset): times
    processed}, only those processed more than once), ``kept`` (the strategy's guarantee
    held), ``table()``."""

    strategy: str | None
    records: int  # in the topic
    processed: int  # processings of those records, repeats included
    lost: list[tuple[str, int, int, Hashable]]
    duplicates: dict[RecordKey, int]
    unexpected: list[Processed] = field(default_factory=list)  # processed, yet not in the topic at that offset
    counts: dict[str, int] = field(default_factory=dict)
    unchecked: list[str] = field(default_factory=list)
    complete: bool = True  # False: the run hit its deadline before the consumers caught up
    seed: int | None = None
    plan: "DeliveryPlan | None" = None
    params: "ScenarioParams | None" = None
    timeline: list[tuple[int, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    history: ConsumerHistory | None = field(default=None, repr=False)
    store: "ExternalStore | None" = field(default=None, repr=False)  # exactly-once's
    cluster: Any = field(default=None, repr=False)  # kept open by run_delivery_scenario(record_history=True)

    @property
    def duplicated(self) -> int:
        """How many records were processed more than once."""
        return len(self.duplicates)

    @property
    def extra(self) -> int:
        """How many processings were repeats (a record processed 3 times counts 2)."""
        return sum(n - 1 for n in self.duplicates.values())

    @property
    def anomalies(self) -> dict[str, int]:
        return {LOST: len(self.lost), DUPLICATED: self.duplicated}

    @property
    def kept(self) -> bool | None:
        """The strategy's guarantee held (None: no strategy, or one that promises nothing).
        A run that could not see everything (unchecked partitions, deadline) keeps nothing."""
        promised = GUARANTEES.get(self.strategy or "", ())
        if not promised:
            return None
        seen_all = self.complete and not self.unchecked and not self.unexpected
        return seen_all and all(self.anomalies[kind] == 0 for kind in promised)

    def row(self) -> tuple[str, ...]:
        return (self.strategy or "-", str(self.records), str(self.processed), str(len(self.lost)),
                str(self.duplicated))

    def table(self, width: int = 110) -> str:
        lines = _table([self.row()])
        if self.lost:
            lines.append(f"lost: {_keys_text((t, p, o) for t, p, o, _ in self.lost)}")
        if self.duplicates:
            times = Counter(self.duplicates.values())
            how = ", ".join(f"{n} processed {k} times" for k, n in sorted(times.items()))
            lines.append(f"duplicated: {_keys_text(self.duplicates)} ({how})")
        for p in self.unexpected[:3]:
            lines.append(f"unexpected: {p.consumer} processed {p.value!r} as {p.topic}-{p.partition} "
                         f"offset {p.offset}, which the topic does not hold there")
        c = self.counts
        if c:
            lines.append(f"consumers: {c.get('consumers', 0)}; commits by the application: "
                         f"{c.get('commits ok', 0)} ok, {c.get('commits refused', 0)} refused; "
                         f"crashes: {c.get('crashes', 0)}, restarts: {c.get('restarts', 0)}")
        for name in self.unchecked:
            lines.append(f"unchecked: {name} (its final read did not complete)")
        lines.extend(self.notes)
        if self.plan is not None:
            lines.append(f"plan: {self.plan.describe()}")
            lines.append(f"crashes planned: {self.plan.crashes_text()}")
        if self.seed is not None:
            lines.append(f"seed: {self.seed}" + (f"; replay: {self.params.call(self.strategy, self.seed)}"
                                                  if self.params else ""))
        for at, what in self.timeline:
            lines.append(f"  {at:>7} ms  {what}")
        promised = GUARANTEES.get(self.strategy or "", ())
        if promised:
            what = " and ".join(f"no {'loss' if k == LOST else 'duplicates'}" for k in promised)
            lines.append(f"guarantee ({what}): " + ("kept" if self.kept else "BROKEN"))
        return "\n".join(line if len(line) <= width else line[: width - 3] + "..." for line in lines)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        seed = "" if self.seed is None else f" seed={self.seed}"
        return (f"<DeliveryReport {self.strategy}{seed}: {self.records} records, {self.processed} processed, "
                f"{len(self.lost)} lost, {self.duplicated} duplicated>")

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # IPython shows the table
        printer.text(self.table())


def analyse_delivery(history: ConsumerHistory, records: Any, *, strategy: str | None = None) -> DeliveryReport:
    """Judge what the consumers processed against the topic's ``records`` (see
    ``topic_records``): lost = in the topic, never processed; duplicated = processed more
    than once. A processing of something the topic does not hold at that offset is
    ``unexpected`` (it would mean a consumer made a record up, or read a wrong one)."""
    in_topic, unchecked = topic_records(records)
    times: Counter = Counter()
    unexpected = []
    for p in history.processings:
        if in_topic.get(p.key, _MISSING) == p.value:
            times[p.key] += 1
        else:
            unexpected.append(p)
    lost = sorted(((t, pt, o, v) for (t, pt, o), v in in_topic.items() if (t, pt, o) not in times),
                  key=lambda r: (r[0], r[1], r[2]))
    duplicates = {k: n for k, n in sorted(times.items()) if n > 1}
    unexpected.sort(key=lambda p: (p.topic, p.partition, p.offset, natural_key(p.value), p.consumer, p.time_ms))
    return DeliveryReport(
        strategy=strategy, records=len(in_topic), processed=sum(times.values()), lost=lost,
        duplicates=duplicates, unexpected=unexpected, counts=history.counts(), unchecked=unchecked,
        timeline=history.timeline(), history=history)


_MISSING = object()


# --- tables -------------------------------------------------------------------------------------------------

TABLE_HEADER = ("strategy", "records", "processed", "lost", "duplicated")


def _table(rows: list[tuple[str, ...]], header: tuple[str, ...] = TABLE_HEADER) -> list[str]:
    """The first column left-aligned, the numbers right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]).rstrip()
            for r in [header, *rows]]


def _strategy_order(item: Any) -> tuple:
    strategy = item.strategy or ""
    rank = STRATEGIES.index(strategy) if strategy in STRATEGIES else len(STRATEGIES)
    return rank, strategy, item.row()


def delivery_table(items: Iterable[Any]) -> str:
    """Reports (``DeliveryReport``) and campaigns (``DeliveryCampaign``) side by side::

        strategy       records  processed  lost  duplicated
        at-most-once       200        187    13           0
        ...

    Rows in ``STRATEGIES`` order (then by name and numbers), so the same runs give the
    same table."""
    items = sorted(items, key=_strategy_order)
    return "\n".join(_table([item.row() for item in items]))


# --- the plan a seed decides --------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeliveryPlan:
    """Everything a seed decides before the run starts (the same for every strategy)."""

    seed: int
    consumers: int
    crash_points: tuple[int, ...]  # crash whoever has just made the n-th processing
    restart_delays_ms: tuple[int, ...]  # one per crash: how long the process stays dead
    max_poll_records: int
    handoff: int  # auto-commit: records the worker takes off the queue per loop iteration

    def describe(self) -> str:
        return (f"{self.consumers} consumer(s), max_poll_records={self.max_poll_records}, "
                f"auto-commit hand-off {self.handoff} per iteration")

    def crashes_text(self) -> str:
        if not self.crash_points:
            return "none"
        return (f"after processings #{', #'.join(map(str, self.crash_points))}; restarts "
                f"{', '.join(map(str, self.restart_delays_ms))} ms later")


def draw_plan(seed: int, *, records: int, consumers: int | None = None, crashes: int | None = None,
              max_poll_records: int | None = None, handoff: int | None = None,
              restart_delay_ms: tuple[int, int] = (0, 10_000)) -> DeliveryPlan:
    """The plan for ``seed``. Every draw is made whether or not an argument overrides it,
    so fixing one (``consumers=2``) leaves the others as the seed had them."""
    rng = random.Random(f"delivery/{seed}")
    drawn_consumers = rng.randint(1, 3)
    drawn_crashes = rng.randint(1, 3)
    drawn_mpr = rng.randint(5, 40)
    drawn_handoff = rng.randint(2, 6)
    delays = [rng.randint(*restart_delay_ms) for _ in range(3)]
    n_crashes = drawn_crashes if crashes is None else crashes
    # The points come last: how many there are must not move the other draws.
    points = sorted(rng.sample(range(1, records), min(n_crashes, records - 1))) if records > 1 else []
    while len(delays) < len(points):
        delays.append(rng.randint(*restart_delay_ms))
    return DeliveryPlan(
        seed=seed,
        consumers=drawn_consumers if consumers is None else consumers,
        crash_points=tuple(points),
        restart_delays_ms=tuple(delays[: len(points)]),
        max_poll_records=drawn_mpr if max_poll_records is None else max_poll_records,
        handoff=drawn_handoff if handoff is None else handoff,
    )


# --- the scenario's parameters ------------------------------------------------------------------------------

TOPIC, GROUP = "work", "workers"
# Small and quick: a __consumer_offsets of 3 partitions, and no initial rebalance delay
# (consumers join as they come instead of waiting 3 s for each other).
DELIVERY_BROKER_CONFIG: dict[str, Any] = {
    "offsets.topic.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
}


@dataclass(frozen=True)
class ScenarioParams:
    """A scenario's arguments but its strategy and seed (checked by name before anything
    runs); ``call(strategy, seed)`` writes the call that replays it."""

    records: int = 200
    partitions: int = 3
    consumers: int | None = None  # None: drawn, 1 to 3
    crashes: int | None = None  # None: drawn, 1 to 3
    preload: int | None = None  # None: half the records, the rest sent while consuming
    send_per_round: int = 5
    max_poll_records: int | None = None  # None: drawn, 5 to 40
    handoff: int | None = None  # None: drawn, 2 to 6
    process_ms: int = 1  # simulated time one record's processing takes
    poll_timeout_ms: int = 100
    auto_commit_interval_ms: int = 50  # Kafka's 5 s, scaled down to a run of seconds
    session_timeout_ms: int = 6_000  # the shortest the brokers accept (group.min.session.timeout.ms)
    heartbeat_interval_ms: int = 2_000
    max_poll_interval_ms: int = 20_000  # also the rebalance timeout: a crash mid-join costs this
    restart_delay_ms: tuple[int, int] = (0, 10_000)
    deadline_ms: int = 180_000

    def __post_init__(self) -> None:
        def check(name: str, minimum: int, optional: bool = False) -> None:
            value = getattr(self, name)
            if optional and value is None:
                return
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise IllegalArgumentError(f"{name} must be an int >= {minimum}, not {value!r}")

        check("records", 1)
        check("partitions", 1)
        check("consumers", 1, optional=True)
        check("crashes", 0, optional=True)
        check("preload", 0, optional=True)
        check("send_per_round", 1)
        check("max_poll_records", 1, optional=True)
        check("handoff", 1, optional=True)
        for name in ("process_ms", "poll_timeout_ms"):
            check(name, 0)
        for name in ("auto_commit_interval_ms", "session_timeout_ms", "heartbeat_interval_ms",
                     "max_poll_interval_ms", "deadline_ms"):
            check(name, 1)
        if self.preload is not None and self.preload > self.records:
            raise IllegalArgumentError(f"preload={self.preload} is more than records={self.records}")
        lo_hi = self.restart_delay_ms
        if not (isinstance(lo_hi, tuple) and len(lo_hi) == 2 and all(isinstance(x, int) for x in lo_hi)
                and 0 <= lo_hi[0] <= lo_hi[1]):
            raise IllegalArgumentError(f"restart_delay_ms must be a (low, high) pair of ints, not {lo_hi!r}")

    def call(self, strategy: str | None, seed: int) -> str:
        defaults = ScenarioParams()
        args = [repr(strategy), f"seed={seed}"]
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if value != getattr(defaults, name):
                args.append(f"{name}={value!r}")
        return f"run_delivery_scenario({', '.join(args)})"


def _check_strategy(strategy: Any) -> str:
    if strategy not in STRATEGIES:
        raise IllegalArgumentError(f"unknown strategy {strategy!r}; strategies are {', '.join(STRATEGIES)}")
    return strategy


def _params(kwargs: dict[str, Any]) -> ScenarioParams:
    unknown = sorted(set(kwargs) - set(ScenarioParams.__dataclass_fields__))
    if unknown:
        raise IllegalArgumentError(
            f"unknown argument(s) {unknown}; known: {', '.join(ScenarioParams.__dataclass_fields__)}")
    if isinstance(kwargs.get("restart_delay_ms"), list):
        kwargs = {**kwargs, "restart_delay_ms": tuple(kwargs["restart_delay_ms"])}
    return ScenarioParams(**kwargs)


# --- the external store (exactly-once) ----------------------------------------------------------------------


class ExternalStore:
    """A database standing outside Kafka (a dict; it survives consumer crashes). ``write``
    puts a record's result and the partition's next offset in one update: both or
    neither, which is the whole trick."""

    def __init__(self) -> None:
        self.data: dict[tuple, Any] = {}

    def write(self, record: Any, result: Any) -> None:
        t, p, o = record.topic, record.partition, record.offset
        self.data.update({("result", t, p, o): result, ("offset", t, p): o + 1})

    def offset(self, tp: TopicPartition) -> int | None:
        """The next offset to process in ``tp``, or None if nothing of it was stored."""
        return self.data.get(("offset", tp.topic, tp.partition))

    def offsets(self) -> dict[TopicPartition, int]:
        return {TopicPartition(k[1], k[2]): v for k, v in sorted(self.data.items()) if k[0] == "offset"}

    def results(self) -> dict[RecordKey, Any]:
        return {k[1:]: v for k, v in sorted(self.data.items()) if k[0] == "result"}


class SeekToStoredOffsets(ConsumerRebalanceListener):
    """On assignment, start each partition where the store says (its beginning if the
    store has nothing of it), whatever Kafka's committed offsets are."""

    def __init__(self, consumer: KafkaConsumer, store: ExternalStore) -> None:
        self.consumer = consumer
        self.store = store

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        for tp in assigned:
            offset = self.store.offset(tp)
            if offset is None:
                self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, offset)


# --- the applications: one poll loop per strategy -----------------------------------------------------------


class _App:
    """One consumer's application thread. ``turn()`` is one iteration of its poll loop;
    a crash (``_Run.process`` returning True) ends the turn, the thread dying with the
    process. ``backlog`` is what it polled and has not processed."""

    enable_auto_commit = False

    def __init__(self, run: "_Run") -> None:
        self.run = run
        p = run.params
        self.consumer = KafkaConsumer(
            bootstrap_servers=run.cluster, group_id=GROUP, auto_offset_reset="earliest",
            enable_auto_commit=self.enable_auto_commit, auto_commit_interval_ms=p.auto_commit_interval_ms,
            session_timeout_ms=p.session_timeout_ms, heartbeat_interval_ms=p.heartbeat_interval_ms,
            max_poll_interval_ms=p.max_poll_interval_ms, max_poll_records=run.plan.max_poll_records,
            fetch_max_wait_ms=p.poll_timeout_ms)
        self.name = str(self.consumer.node_id)
        self.backlog: deque = deque()
        self.subscribe()

    def subscribe(self) -> None:
        self.consumer.subscribe([TOPIC])

    @property
    def alive(self) -> bool:
        return self.consumer.alive

    def crashed(self) -> None:
        self.backlog.clear()  # the application's memory dies with the process

    def poll(self, timeout_ms: int | None = None) -> list:
        timeout = self.run.params.poll_timeout_ms if timeout_ms is None else timeout_ms
        batch = self.consumer.poll(timeout_ms=timeout)
        return [r for _, records in sorted(batch.items()) for r in records]

    def commit(self, records: list) -> bool:
        """Commit the ends of ``records``' partitions; False if refused."""
        offsets = {}
        for r in records:
            offsets[TopicPartition(r.topic, r.partition)] = r.offset + 1
        try:
            self.consumer.commit(offsets)
        except KafkaError as e:  # the group moved on (CommitFailedError) or no answer in time
            self.run.history.commit(self.name, offsets, error=e)
            return False
        self.run.history.commit(self.name, offsets)
        return True

    def process_backlog(self, limit: int | None = None) -> None:
        n = 0
        while self.backlog and (limit is None or n < limit):
            record = self.backlog.popleft()
            n += 1
            if self.run.process(self, record):
                return

    def turn(self) -> None:
        raise NotImplementedError


class _AtMostOnce(_App):
    def turn(self) -> None:
        records = self.poll()
        if not records:
            return
        # Commit first: from now on a crash loses whatever of the batch is unprocessed. If
        # the commit is refused, nothing is processed: processing could make a record twice
        # (after a CommitFailedError the member rejoins and the partition's owner starts
        # again from the committed offset). At most once allows the other outcome: after a
        # mere timeout we keep the partition, positioned past the batch, and skip it.
        if not self.commit(records):
            return
        self.backlog.extend(records)
        self.process_backlog()


class _AtLeastOnce(_App):
    def turn(self) -> None:
        records = self.poll()
        if not records:
            return
        self.backlog.extend(records)
        self.process_backlog()
        if self.alive:
            # If refused (the group rebalanced while we worked), the partition's next owner
            # processes the batch again: duplicates, never loss.
            self.commit(records)


class _AutoCommit(_App):
    enable_auto_commit = True

    def turn(self) -> None:
        # The main thread polls (an auto commit may go out in there, covering every record
        # polled so far, queued ones included) and hands the records to the worker's queue;
        # the worker gets through ``handoff`` of them per iteration. With work queued, the
        # poll does not wait: the main thread only keeps the queue fed.
        records = self.poll(0 if self.backlog else None)
        self.backlog.extend(records)
        self.process_backlog(self.run.plan.handoff)


class _ExactlyOnce(_App):
    def subscribe(self) -> None:
        self.consumer.subscribe([TOPIC], listener=SeekToStoredOffsets(self.consumer, self.run.store))

    def turn(self) -> None:
        records = self.poll()
        self.backlog.extend(records)
        self.process_backlog()  # each record: one atomic write of result and offset; no commit


_APPS = {AT_MOST_ONCE: _AtMostOnce, AT_LEAST_ONCE: _AtLeastOnce, AUTO_COMMIT: _AutoCommit,
         EXACTLY_ONCE: _ExactlyOnce}


# --- one run ------------------------------------------------------------------------------------------------


class _Run:
    def __init__(self, strategy: str, seed: int, params: ScenarioParams, cluster: Cluster) -> None:
        self.strategy = strategy
        self.seed = seed
        self.params = params
        self.cluster = cluster
        self.plan = draw_plan(seed, records=params.records, consumers=params.consumers, crashes=params.crashes,
                              max_poll_records=params.max_poll_records, handoff=params.handoff,
                              restart_delay_ms=params.restart_delay_ms)
        # The order of turns is drawn as the run goes (it depends on who is alive), from
        # its own RNG so the plan stays the same for every strategy.
        self.turns = random.Random(f"delivery-turns/{seed}")
        self.history = ConsumerHistory(clock=lambda: cluster.now)
        self.store = ExternalStore()
        self.processings = 0
        self.next_crash = 0
        self.restarts: list[tuple[int, int, _App]] = []  # (at, crash number, app)
        self.apps: list[_App] = []
        self.workload: Workload | None = None
        self.notes: list[str] = []
        self.deadline_passed = False

    # --- what the applications call -----------------------------------------------------------------

    def process(self, app: _App, record: Any) -> bool:
        """Process one record (its side effect, after ``process_ms``); True if the plan
        crashes ``app`` right after it."""
        if self.params.process_ms:
            self.cluster.advance(self.params.process_ms)
        if self.strategy == EXACTLY_ONCE:
            self.store.write(record, f"done({value_of(record.value)})")
        self.history.processed(app.name, record)
        self.processings += 1
        points = self.plan.crash_points
        if self.next_crash < len(points) and self.processings >= points[self.next_crash]:
            self.crash(app, record)
            return True
        return False

    def crash(self, app: _App, record: Any) -> None:
        n = self.next_crash
        self.next_crash += 1
        unprocessed = len(app.backlog)
        self.cluster.kill_consumer(app.consumer)
        self.history.crash(app.name, after=(record.topic, record.partition, record.offset),
                           unprocessed=unprocessed)
        app.crashed()
        self.restarts.append((self.cluster.now + self.plan.restart_delays_ms[n], n, app))

    # --- the loop -----------------------------------------------------------------------------------------

    def run(self) -> None:
        p, cluster = self.params, self.cluster
        cluster.create_topic(TOPIC, p.partitions, 3)
        self.workload = Workload(cluster, TOPIC, poll=False, acks="all", linger_ms=0)
        preload = p.records // 2 if p.preload is None else p.preload
        for _ in range(preload):
            self.workload.send()
        self.workload.producer.flush()
        self.apps = [_APPS[self.strategy](self) for _ in range(self.plan.consumers)]
        deadline = cluster.now + p.deadline_ms
        while True:
            self._restart_due()
            for _ in range(min(p.send_per_round, p.records - self._sent())):
                self.workload.send()
            order = [a for a in self.apps if a.alive]
            self.turns.shuffle(order)
            for app in order:  # only an app's own turn can crash it: the others stay alive
                try:
                    app.turn()
                except KafkaError as e:
                    self.notes.append(f"note: {app.name} at {cluster.now} ms: {type(e).__name__}: {e}")
            if not any(a.alive for a in self.apps):
                # Everyone is dead: let time pass until the first restart.
                wake = min(at for at, _, _ in self.restarts)
                cluster.advance(max(1, min(wake, deadline) - cluster.now))
            if self._caught_up():
                break
            if cluster.now >= deadline:
                self.deadline_passed = True
                self.notes.append(f"note: the deadline ({p.deadline_ms} ms) passed before the consumers "
                                  "caught up: records still unprocessed count as lost")
                break

    def _sent(self) -> int:
        return len(self.workload.history.sends)

    def _restart_due(self) -> None:
        for entry in sorted(self.restarts, key=lambda e: (e[0], e[1])):
            at, _, app = entry
            if at <= self.cluster.now:
                self.restarts.remove(entry)
                self.cluster.restart_consumer(app.consumer)
                self.history.restart(app.name)

    def _caught_up(self) -> bool:
        """Every record sent and acknowledged, every restart done, nothing queued, and the
        progress that survives a crash (committed offsets; the store's, for exactly-once)
        at the end of every partition. The harness may look inside the brokers to know when
        to stop; the analysis never does."""
        if self._sent() < self.params.records or self.restarts or any(a.backlog for a in self.apps):
            return False
        sends = self.workload.history.sends
        if any(op.status == INVOKED for op in sends):
            return False
        ends: dict[int, int] = {}
        for op in sends:
            if op.status == OK:
                ends[op.partition] = max(ends.get(op.partition, 0), op.offset + 1)
        progress = self._durable_progress()
        return all(progress.get(p, 0) >= end for p, end in ends.items())

    def _durable_progress(self) -> dict[int, int]:
        if self.strategy == EXACTLY_ONCE:
            return {tp.partition: o for tp, o in self.store.offsets().items() if tp.topic == TOPIC}
        cluster = self.cluster
        n = cluster.config["offsets.topic.num.partitions"]
        try:
            leader = cluster.partition_state(OFFSETS_TOPIC, partition_for(GROUP, n)).leader
        except IllegalArgumentError:  # __consumer_offsets is made on the first FindCoordinator
            return {}
        if leader < 0 or not cluster.alive(leader):
            return {}
        group = cluster.broker(leader).group_coordinator.groups.get(GROUP)
        if group is None:
            return {}
        return {p: v.offset for (t, p), v in group.offsets.items() if t == TOPIC}

    def finish(self) -> DeliveryReport:
        cluster, workload = self.cluster, self.workload
        workload.producer.flush()
        if not final_read(cluster, TOPIC, workload.history):
            self.notes.append("note: the final read did not complete")
        report = analyse_delivery(self.history, workload.history, strategy=self.strategy)
        report.complete = not self.deadline_passed
        report.seed, report.plan, report.params = self.seed, self.plan, self.params
        if self.strategy == EXACTLY_ONCE:
            report.store = self.store
        report.notes.extend(self.notes)
        return report


def run_delivery_scenario(strategy: str, *, seed: int, record_history: bool = False,
                          **kwargs: Any) -> DeliveryReport:
    """Run ``strategy`` (one of ``STRATEGIES``) under the crashes seed ``seed`` plans (see
    the module docstring) and judge what the consumers processed.

    Keyword arguments (``ScenarioParams``): ``records=200``, ``partitions=3``,
    ``consumers`` (None: drawn, 1 to 3), ``crashes`` (None: drawn, 1 to 3), ``preload``
    (None: half), ``send_per_round=5``, ``max_poll_records`` (None: drawn, 5 to 40),
    ``handoff`` (auto-commit's worker: records per iteration; None: drawn, 2 to 6),
    ``process_ms=1``, ``poll_timeout_ms=100``, ``auto_commit_interval_ms=50``,
    ``session_timeout_ms=6000``, ``heartbeat_interval_ms=2000``,
    ``max_poll_interval_ms=20000``, ``restart_delay_ms=(0, 10000)``, ``deadline_ms=180000``
    (simulated). With ``record_history=True`` the cluster keeps its event trace and stays
    open as ``report.cluster`` (close it when done)."""
    _check_strategy(strategy)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise IllegalArgumentError(f"seed must be an int, not {seed!r}")
    return _run(strategy, seed, _params(kwargs), record_history)


def _run(strategy: str, seed: int, params: ScenarioParams, record_history: bool = False) -> DeliveryReport:
    with run_cluster(3, seed=seed, config=DELIVERY_BROKER_CONFIG, record_history=record_history) as cluster, \
            _quiet_clients():
        run = _Run(strategy, seed, params, cluster)
        run.run()
        report = run.finish()
        if record_history:
            report.cluster = cluster
        return report


# --- many runs ----------------------------------------------------------------------------------------------


@dataclass
class DeliveryCampaign:
    """The sum of a strategy's runs: totals (``records``, ``processed``, ``lost``,
    ``duplicated``, ``extra``), the seeds that lost or duplicated something (replay each
    with ``replay(seed)``), every run's report in ``reports`` (by seed), ``table()``."""

    strategy: str
    seed: int
    schedules: int
    params: ScenarioParams
    records: int = 0
    processed: int = 0
    lost: int = 0
    duplicated: int = 0
    extra: int = 0
    crashes: int = 0
    cutting_crashes: int = 0  # crashes with polled records not yet processed
    seeds_with_loss: list[int] = field(default_factory=list)
    seeds_with_duplicates: list[int] = field(default_factory=list)
    incomplete_seeds: list[int] = field(default_factory=list)
    reports: dict[int, DeliveryReport] = field(default_factory=dict, repr=False)

    def add(self, report: DeliveryReport) -> None:
        self.records += report.records
        self.processed += report.processed
        self.lost += len(report.lost)
        self.duplicated += report.duplicated
        self.extra += report.extra
        self.crashes += report.counts.get("crashes", 0)
        if report.history is not None:
            self.cutting_crashes += sum(1 for c in report.history.crashes if c.unprocessed)
        if report.lost:
            self.seeds_with_loss.append(report.seed)
        if report.duplicates:
            self.seeds_with_duplicates.append(report.seed)
        if not report.complete or report.unchecked or report.unexpected:
            self.incomplete_seeds.append(report.seed)
        self.reports[report.seed] = report

    @property
    def kept(self) -> bool | None:
        """The guarantee held in every run (None: the strategy promises nothing)."""
        promised = GUARANTEES.get(self.strategy, ())
        if not promised:
            return None
        return all(r.kept for r in self.reports.values())

    def replay(self, seed: int) -> str:
        return self.params.call(self.strategy, seed)

    def row(self) -> tuple[str, ...]:
        return (f"{self.strategy} ({self.schedules} runs)", str(self.records), str(self.processed),
                str(self.lost), str(self.duplicated))

    def table(self) -> str:
        lines = _table([self.row()])
        lines.append(f"{self.schedules} runs (campaign seed {self.seed}), {self.crashes} crashes, "
                     f"{self.cutting_crashes} of them with polled records not yet processed")
        lines.append(f"runs that lost records: {len(self.seeds_with_loss)}; that duplicated some: "
                     f"{len(self.seeds_with_duplicates)} ({self.extra} extra processings)")
        for name, seeds in (("lost", self.seeds_with_loss), ("duplicated", self.seeds_with_duplicates),
                            ("incomplete", self.incomplete_seeds)):
            if seeds:
                more = f", ... ({len(seeds)} in all)" if len(seeds) > 8 else ""
                lines.append(f"seeds that {name}: {', '.join(map(str, seeds[:8]))}{more}")
        if self.seeds_with_loss or self.seeds_with_duplicates:
            first = (self.seeds_with_loss or self.seeds_with_duplicates)[0]
            lines.append(f"replay: {self.replay(first)}")
        promised = GUARANTEES.get(self.strategy, ())
        if promised:
            lines.append("guarantee: " + ("kept in every run" if self.kept else
                                          "BROKEN (or not checked) in some run: see the seeds above"))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return (f"<DeliveryCampaign {self.strategy} x{self.schedules}: {self.lost} lost, "
                f"{self.duplicated} duplicated>")

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(self.table())


def delivery_campaign(strategy: str, schedules: int = 100, seed: int = 0, *, progress: bool = False,
                      **kwargs: Any) -> DeliveryCampaign:
    """Run ``strategy`` under ``schedules`` seeded crash schedules (seeds drawn from
    ``seed`` with ``schedule_seeds``, so every strategy meets the same ones) and add up
    the reports. Keyword arguments: those of ``run_delivery_scenario``."""
    _check_strategy(strategy)
    if not isinstance(schedules, int) or isinstance(schedules, bool) or schedules < 1:
        raise IllegalArgumentError(f"schedules must be an int >= 1, not {schedules!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise IllegalArgumentError(f"seed must be an int, not {seed!r}")
    params = _params(kwargs)
    campaign = DeliveryCampaign(strategy, seed, schedules, params)
    seeds = schedule_seeds(seed, schedules)
    if progress:
        from tqdm.auto import tqdm
        seeds = tqdm(seeds, desc=strategy, unit="run")
    for s in seeds:
        campaign.add(_run(strategy, s, params))
    return campaign
