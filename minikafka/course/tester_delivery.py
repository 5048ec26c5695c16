"""The tester of notebook 07: a student's consumer loop runs the application of a simulated
cluster, crashes strike it, and the guarantee it promises is judged.

Theory of operation
-------------------
Lecture 07's exercises are application code, not broker rules: one iteration of a consumer's
loop, a rebalance callback, a sink's write, a read-process-write step. So this tester does what
Maelstrom does with a student's node: it runs them as the application of a simulated cluster
(``Cluster(rules=...)``: each consumer calls them through its ``client_rules``, under the guard
of ``minikafka.rules``, where Kafka's recipes in ``minikafka.recipes`` run otherwise), kills the
application's process on a crash schedule drawn from the seed, restarts it, and judges the
history by the guarantee the exercise promises. A crash is the judge's ``Crash``, raised inside
``process``, the sink's transaction or ``transform``: a ``BaseException``, so it passes through
the guard and through a student's ``except Exception`` as a dying process would.

=====================  ======================  ===================================================
rules                  campaign                judged (a finding's kind)
=====================  ======================  ===================================================
no_record_lost         ``orders``, 1 consumer  ``lost`` (a record never processed);
                       of ``billing``, 3        ``processed-again`` (more records processed twice
                       crashes before or        than the interrupted iterations had processed: a
                       after an effect          crash may only repeat the iteration it cut short)
no_record_twice        same                    ``processed-twice``; ``lost`` beyond what the
                                               interrupted iterations' polls returned
on_assigned,           ``trucks_gps`` counted  ``lost``, ``counted-twice`` (a truck's count in the
count_reports          by 2 consumers into a    database against the topic); a student's rule
                       database that survives   given alone runs beside Kafka's other one
                       them; crashes before or
                       after a transaction
transactional_step     ``in`` -> ``out`` by a  the transaction checker's (``analyse_transactions``,
                       transactional job;       read_committed): ``lost``, ``counted-twice``,
                       crashes inside           ``aborted-visible``, ``not-atomic``;
                       ``transform`` and after  ``offsets-behind`` (the group's offsets short of
                       a commit                 ``in``'s end when the job stops)
decode_key             3 groups commit on 3    ``offsets-lost``: a group's committed offsets, as
                       brokers; the            the new coordinator answers them, are not those
                       coordinator is killed    committed (its replay of ``__consumer_offsets``
                       once or twice            reads every key with ``decode_key``)
=====================  ======================  ===================================================

Every campaign also fails a rule that raises (anything but ``Crash``) or hangs: ``rule-error``,
with the guard's message (the rule, the consumer, the simulated time, the arguments).

The schedules are those of the exercise notebook (three crashes each), drawn from the judge's
seed; a failing schedule is shrunk by removing crashes while it still fails, and shown as a
timeline: the crashes and restarts, then what was found, with the records concerned.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from minikafka.rules import RuleError, out_of_time

DEFAULT_SCHEDULES = 6
FAST = {"offsets.topic.num.partitions": 1, "group.initial.rebalance.delay.ms": 0}
TXN = {**FAST, "transaction.state.log.num.partitions": 1}
TRUCKS = [f"truck-{i:03d}" for i in range(1, 7)]
TIMELINE_EVENTS = 12


class Crash(BaseException):
    """The application's process dies here (the judge's crash schedule). A BaseException: it
    passes through the rules' guard and through ``except Exception`` in a student's loop."""


@dataclass
class DeliveryFinding:
    kind: str
    what: str
    seed: int
    campaign: str
    schedule: dict
    events: list[tuple[int, str]] = field(default_factory=list)
    calls: int = 0  # calls of the student's rules
    shrunk: bool = False  # ``schedule`` is the drawn one with crashes removed

    def timeline(self) -> str:
        shown = self.events[:TIMELINE_EVENTS]
        lines = [f"t={t:>6} ms  {text}" for t, text in shown]
        if len(self.events) > len(shown):
            lines.append(f"(and {len(self.events) - len(shown)} more events)")
        lines.append(f"then: {self.kind}: {self.what}")
        return "\n".join(lines)


@dataclass
class DeliveryVerdict:
    rules: tuple[str, ...]
    schedules: int
    seed: int
    passed: int = 0
    failure: DeliveryFinding | None = None
    campaigns: list[str] = field(default_factory=list)  # those run

    @property
    def ok(self) -> bool:
        return self.failure is None

    def __str__(self) -> str:
        yours = ", ".join(self.rules)
        if self.ok:
            return (f"0 anomalies in {self.schedules} schedules (seed {self.seed}); your rules: {yours}\n"
                    + "\n".join(f"({CAMPAIGN_TEXT[c]})" for c in self.campaigns))
        f = self.failure
        return "\n".join([
            f"FAILED: {f.campaign}, schedule {self.passed + 1} of {self.schedules} (seed {f.seed}; "
            f"{'shrunk to ' if f.shrunk else ''}{f.schedule}): {f.kind}",
            f"your rules: {yours}; {f.calls} calls; timeline:",
            f.timeline(),
        ])

    __repr__ = __str__

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(str(self))


@contextmanager
def _quiet() -> Iterator[None]:
    log = logging.getLogger("minikafka")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _keys(keys: list, limit: int = 6) -> str:
    shown = ", ".join(f"{t}-{p}@{o}" for t, p, o in sorted(keys)[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


# --- exercise 1: where to commit -------------------------------------------------------------------------


def commit_schedule(seed: int, last_call: int) -> dict[int, str]:
    """{n: 'before' or 'after'}: three crashes, in the n-th call of process(), before or after
    its effect (the exercise notebook's crash_schedule)."""
    rng = random.Random(seed)
    return {n: rng.choice(["before", "after"]) for n in sorted(rng.sample(range(2, last_call), 3))}


def run_commit_loop(rules: Mapping[str, Callable], name: str, schedule: Mapping[int, str], seed: int
                    ) -> DeliveryFinding | None:
    """One consumer of ``billing`` consumes ``orders`` (60 records, 2 partitions) by calling
    the rule ``name`` (``no_record_lost`` or ``no_record_twice``) until nothing is left, its
    process killed and restarted at each ``Crash``; judged by that rule's guarantee."""
    from minikafka import Cluster, KafkaConsumer, KafkaProducer

    campaign = "at-least-once" if name == "no_record_lost" else "at-most-once"
    events: list[tuple[int, str]] = []
    with _quiet(), Cluster(brokers=1, seed=seed, config=FAST, rules=dict(rules)) as cluster:
        cluster.create_topic("orders", partitions=2, replication_factor=1)
        producer = KafkaProducer(bootstrap_servers=cluster)
        for i in range(60):
            producer.send("orders", key=f"customer-{i % 7}".encode(), value=f"order {i}".encode())
        producer.flush()
        consumer = KafkaConsumer("orders", bootstrap_servers=cluster, group_id="billing",
                                 enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=10,
                                 session_timeout_ms=6_000, heartbeat_interval_ms=2_000)
        step = getattr(cluster.client_rules(str(consumer.node_id)), name)
        effects: list[tuple[str, int, int]] = []
        calls, returned = [0], [0]
        real_poll = consumer.poll

        def poll(*args: Any, **kwargs: Any) -> dict:  # counts what each poll returns
            batch = real_poll(*args, **kwargs)
            returned[0] += sum(len(records) for records in batch.values())
            return batch
        consumer.poll = poll

        def process(record: Any) -> None:
            calls[0] += 1
            where = schedule.get(calls[0])
            key = (record.topic, record.partition, record.offset)
            if where == "before":
                events.append((cluster.now, f"{consumer.node_id} crashes before processing {_keys([key])}"))
                raise Crash()
            effects.append(key)
            if where == "after":
                events.append((cluster.now, f"{consumer.node_id} crashes after processing {_keys([key])}"))
                raise Crash()

        repeatable = skippable = idle = steps = 0
        for _ in range(200):
            calls_before, effects_before, returned_before = calls[0], len(effects), returned[0]
            steps += 1
            try:
                step(consumer, process)
            except Crash:
                done_here = len(effects) - effects_before
                repeatable += done_here
                skippable += returned[0] - returned_before - done_here
                cluster.kill_consumer(consumer)
                cluster.advance(7_000)  # past session_timeout_ms: the group drops it
                cluster.restart_consumer(consumer)
                events.append((cluster.now, f"{consumer.node_id} restarts: a new member, from the committed offsets"))
            idle = idle + 1 if calls[0] == calls_before else 0
            if idle >= 5:
                break
        topic = {("orders", p, o) for p in range(2) for o in range(cluster.replica(1, "orders", p).high_watermark)}
    counts = Counter(effects)
    lost = sorted(topic - set(counts))
    twice = sorted(k for k, n in counts.items() if n > 1)
    extra = sum(n - 1 for n in counts.values())
    kind = what = None
    if name == "no_record_lost":
        if lost:
            kind, what = "lost", f"{len(lost)} of {len(topic)} records never processed: {_keys(lost)}"
        elif extra > repeatable:
            kind, what = "processed-again", (
                f"{extra} processings repeated, but the crashes interrupted iterations that had processed only "
                f"{repeatable}: records processed again though their iteration completed: {_keys(twice)}")
    else:
        if extra:
            kind, what = "processed-twice", f"{extra} records processed twice: {_keys(twice)}"
        elif len(lost) > skippable:
            kind, what = "lost", (f"{len(lost)} records never processed, but the interrupted iterations' polls had "
                                  f"returned only {skippable} unprocessed: {_keys(lost)}")
    if kind is None:
        return None
    return DeliveryFinding(kind, what, seed, campaign, dict(schedule), events, calls=steps)


# --- exercise 2: an exactly-once sink ------------------------------------------------------------------


class Database:
    """The sink: rows, atomic transactions, and the crash schedule (before or after the n-th
    transaction). It is not Kafka, and survives the consumers' crashes."""

    def __init__(self, crashes: Mapping[int, str] | None = None, on_crash: Callable[[str], None] | None = None
                 ) -> None:
        self.rows: dict = {}
        self.transactions = 0
        self._crashes = dict(crashes or {})
        self._on_crash = on_crash

    def get(self, key: Any, default: Any = None) -> Any:
        return self.rows.get(key, default)

    def transaction(self, writes: Mapping) -> None:
        """Write every row of ``writes``, atomically (the crash schedule may strike before or after)."""
        self.transactions += 1
        where = self._crashes.get(self.transactions)
        if where == "before":
            self._on_crash(f"crashes before transaction {self.transactions}")
            raise Crash()
        self.rows.update(dict(writes))
        if where == "after":
            self._on_crash(f"crashes after transaction {self.transactions}")
            raise Crash()


def sink_schedule(seed: int) -> dict[int, str]:
    """Three crashes: two among the first 12 transactions, one later; each before or after."""
    rng = random.Random(seed)
    points = rng.sample(range(1, 13), 2) + [rng.randrange(13, 70)]
    return {n: rng.choice(["before", "after"]) for n in sorted(points)}


def run_sink(rules: Mapping[str, Callable], schedule: Mapping[int, str], seed: int, records: int = 90
             ) -> DeliveryFinding | None:
    """Two consumers of ``counter`` count ``trucks_gps`` into a ``Database`` with
    ``on_assigned`` (their rebalance listener) and ``count_reports`` (each poll's records);
    a crashed consumer restarts 10 s later. Judged: each truck's count equals its reports."""
    from minikafka import Cluster, ConsumerRebalanceListener, KafkaConsumer, KafkaProducer

    events: list[tuple[int, str]] = []
    calls = [0]
    with _quiet(), Cluster(brokers=1, seed=seed, config=FAST, rules=dict(rules)) as cluster:
        cluster.create_topic("trucks_gps", partitions=3, replication_factor=1)
        producer = KafkaProducer(bootstrap_servers=cluster)
        rng, truth = random.Random(seed), Counter()
        for i in range(records):
            truck = rng.choice(TRUCKS)
            producer.send("trucks_gps", key=truck.encode(), value=f"position {i}".encode())
            truth[truck] += 1
        producer.flush()
        current: list[Any] = [None]
        db = Database(schedule, lambda text: events.append((cluster.now, f"{current[0].node_id} {text}")))

        class Listener(ConsumerRebalanceListener):
            def on_partitions_assigned(self, assigned: list) -> None:
                calls[0] += 1
                self.rules.on_assigned(self.consumer, list(assigned), db)

        group, rules_of = [], {}
        for _ in range(2):
            listener = Listener()
            listener.consumer = KafkaConsumer(bootstrap_servers=cluster, group_id="counter",
                                              enable_auto_commit=False, auto_offset_reset="earliest",
                                              max_poll_records=10, key_deserializer=bytes.decode,
                                              session_timeout_ms=6_000, heartbeat_interval_ms=2_000)
            listener.rules = rules_of[listener.consumer] = cluster.client_rules(str(listener.consumer.node_id))
            listener.consumer.subscribe(["trucks_gps"], listener=listener)
            group.append(listener.consumer)
        restart_at: dict = {}
        idle = 0
        for _ in range(400):
            before = db.transactions
            for consumer in [c for c, at in restart_at.items() if cluster.now >= at]:
                cluster.restart_consumer(consumer)
                events.append((cluster.now, f"{consumer.node_id} restarts: a new member"))
                del restart_at[consumer]
            live = [c for c in group if c not in restart_at]
            if not live:
                cluster.advance(500)
            for consumer in live:
                current[0] = consumer
                try:
                    batch = consumer.poll(timeout_ms=500)
                    calls[0] += 1
                    rules_of[consumer].count_reports(consumer, [r for _, rs in sorted(batch.items()) for r in rs], db)
                except Crash:
                    cluster.kill_consumer(consumer)
                    restart_at[consumer] = cluster.now + 10_000
            idle = idle + 1 if db.transactions == before and not restart_at else 0
            if idle >= 10:
                break
    counted = Counter({key[1]: n for key, n in db.rows.items()
                       if isinstance(key, tuple) and len(key) == 2 and key[0] == "count"})
    lost = {t: truth[t] - counted[t] for t in truth if counted[t] < truth[t]}
    twice = {t: counted[t] - truth[t] for t in counted if counted[t] > truth.get(t, 0)}
    if not lost and not twice:
        return None
    kind = "counted-twice" if twice else "lost"
    parts = [f"{t}: {counted[t]} counted, {truth[t]} in the topic" for t in sorted(set(lost) | set(twice))]
    what = (f"{sum(twice.values())} reports counted twice, {sum(lost.values())} never counted "
            f"({'; '.join(parts[:4])}{'...' if len(parts) > 4 else ''})")
    return DeliveryFinding(kind, what, seed, "exactly-once sink", dict(schedule), events, calls=calls[0])


# --- exercise 4: read, process, write in one transaction -----------------------------------------------


class _JobProducer:
    """The job's transactional producer as the step sees it: the crash schedule may strike
    right after a commit."""

    def __init__(self, producer: Any, after_commit: Callable[[], None]) -> None:
        self._producer, self._after_commit = producer, after_commit

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    def commit_transaction(self) -> None:
        self._producer.commit_transaction()
        self._after_commit()


def job_schedule(seed: int) -> dict[str, list[int]]:
    """Two crashes inside transform (among its first 30 calls), one right after a commit (among the first 6)."""
    rng = random.Random(seed)
    return {"in transform": sorted(rng.sample(range(2, 30), 2)), "after commit": [rng.randrange(1, 7)]}


def run_job(rules: Mapping[str, Callable], schedule: Mapping[str, list], seed: int, n: int = 40
            ) -> DeliveryFinding | None:
    """A job upper-cases ``in`` into ``out`` with ``transactional_step`` (a consumer of
    ``upper``, read_committed, and a producer with ``transactional_id="upper-1"``); at each
    ``Crash`` a new instance replaces it (``init_transactions()`` fences the old one). Judged by
    ``analyse_transactions`` on a read_committed read of ``out``."""
    from minikafka import Cluster, KafkaConsumer, KafkaProducer, TopicPartition
    from minikafka.checker.transactions import TransactionHistory, analyse_transactions

    events: list[tuple[int, str]] = []
    with _quiet(), Cluster(brokers=1, seed=seed, config=TXN, rules=dict(rules)) as cluster:
        for topic in ("in", "out"):
            cluster.create_topic(topic, partitions=2, replication_factor=1)
        inputs = [f"order {i}".encode() for i in range(n)]
        seeder = KafkaProducer(bootstrap_servers=cluster)
        for i, value in enumerate(inputs):
            seeder.send("in", value, partition=i % 2)
        seeder.close()
        history, calls, commits, steps = TransactionHistory(), [0], [0], [0]

        def after_commit() -> None:
            commits[0] += 1
            if commits[0] in schedule["after commit"]:
                events.append((cluster.now, f"the job crashes right after commit_transaction() {commits[0]}"))
                raise Crash()

        def start() -> tuple[Any, Any, Any]:
            consumer = KafkaConsumer("in", bootstrap_servers=cluster, group_id="upper", enable_auto_commit=False,
                                     auto_offset_reset="earliest", isolation_level="read_committed",
                                     max_poll_records=5, session_timeout_ms=6_000, heartbeat_interval_ms=2_000)
            producer = KafkaProducer(bootstrap_servers=cluster, transactional_id="upper-1")
            producer.init_transactions()
            step = cluster.client_rules(str(consumer.node_id)).transactional_step
            return consumer, _JobProducer(producer, after_commit), step

        last_progress = cluster.now
        consumer, producer, step = start()
        done = False
        for _ in range(200):
            txn, commits_before = history.begin(), commits[0]

            def transform(record: Any) -> bytes:
                calls[0] += 1
                if calls[0] in schedule["in transform"]:
                    events.append((cluster.now, f"the job crashes in transform of in-{record.partition}@"
                                                f"{record.offset}, its transaction open"))
                    raise Crash()
                out = record.value.upper() + f" @{txn.number}".encode()  # unique per attempt
                history.sent(txn, out, record.value)
                return out
            try:
                steps[0] += 1
                step(consumer, producer, transform)
                history.end(txn, "committed" if commits[0] > commits_before else "open")
            except Crash:
                history.end(txn, "committed" if commits[0] > commits_before else "aborted")
                cluster.kill_consumer(consumer)
                consumer, producer, step = start()
                events.append((cluster.now, "a new instance starts: init_transactions() fences the old one"))
            done = all(consumer.committed(TopicPartition("in", p)) == n // 2 for p in range(2))
            if txn.values:
                last_progress = cluster.now
            if done or cluster.now - last_progress > 20_000:  # nothing for 20 s: the step is stuck
                break
        reader = KafkaConsumer(bootstrap_servers=cluster, isolation_level="read_committed",
                               auto_offset_reset="earliest", consumer_timeout_ms=2_000)
        reader.assign([TopicPartition("out", p) for p in range(2)])
        report = analyse_transactions(history, [r.value for r in reader], inputs=inputs)
        offsets = {p: consumer.committed(TopicPartition("in", p)) for p in range(2)}
    per_input = dict(report.examples["input-not-once"])
    lost = sorted(v.decode() for v, k in per_input.items() if k == 0)
    twice = sorted(v.decode() for v, k in per_input.items() if k > 1)
    kind = what = None
    if report.anomalies["aborted-visible"]:
        kind, what = "aborted-visible", (f"{report.anomalies['aborted-visible']} records of aborted transactions "
                                         f"read with read_committed")
    elif twice:
        kind, what = "counted-twice", f"{len(twice)} orders in out more than once: {', '.join(twice[:5])}"
    elif lost:
        kind, what = "lost", f"{len(lost)} orders never in out: {', '.join(lost[:5])}"
    elif report.anomalies["not-atomic"]:
        kind, what = "not-atomic", f"{report.anomalies['not-atomic']} transactions read in part"
    elif not done:
        kind, what = "offsets-behind", (f"the group's committed offsets of in are {offsets}, not "
                                        f"{ {p: n // 2 for p in range(2)} } when the job stopped")
    elif not report.ok:
        name = next(a for a, c in report.anomalies.items() if c)
        kind, what = name, f"{report.anomalies[name]} ({name}, analyse_transactions)"
    if kind is None:
        return None
    return DeliveryFinding(kind, what, seed, "read-process-write", {k: list(v) for k, v in schedule.items()},
                           events, calls=steps[0])


# --- exercise 3: __consumer_offsets, read by a new coordinator ----------------------------------------

GROUP_NAMES = ["dispatch", "flotte-éco", "routing", "maps-ü", "billing"]


def offsets_schedule(seed: int) -> dict[str, Any]:
    """Three groups (one or more with a non-ASCII name) and how far each reads before it
    commits; then the coordinator is killed, ``kills`` times in a row (a new one each time)."""
    rng = random.Random(seed)
    groups = sorted(rng.sample(GROUP_NAMES, 3))
    return {"groups": groups, "reads": [rng.randint(1, 4) for _ in groups], "kills": rng.randint(1, 2)}


def run_offsets_failover(rules: Mapping[str, Callable], schedule: Mapping[str, Any], seed: int
                         ) -> DeliveryFinding | None:
    """Groups commit offsets (with metadata) of ``trucks_gps`` (3 partitions, RF 3) on a
    3-broker cluster; the coordinator (the leader of ``__consumer_offsets``) is killed, and
    another broker loads the groups by replaying ``__consumer_offsets`` through ``decode_key``.
    Judged: every group's committed offsets, fetched from the new coordinator, are the ones
    committed (``offsets-lost`` otherwise)."""
    from minikafka import Cluster, KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
    from minikafka.broker.group_coordinator import OFFSETS_TOPIC

    events: list[tuple[int, str]] = []
    config = {**FAST, "offsets.topic.replication.factor": 3}
    with _quiet(), Cluster(brokers=3, seed=seed, config=config, rules=dict(rules)) as cluster:
        cluster.create_topic("trucks_gps", partitions=3, replication_factor=3)
        producer = KafkaProducer(bootstrap_servers=cluster)
        for i in range(60):
            producer.send("trucks_gps", key=f"truck-{i % 6}".encode(), value=b"report")
        producer.flush()
        expected: dict[str, dict[int, int]] = {}
        for group, reads in zip(schedule["groups"], schedule["reads"]):
            consumer = KafkaConsumer("trucks_gps", bootstrap_servers=cluster, group_id=group,
                                     auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=7)
            for _ in range(reads):
                consumer.poll(timeout_ms=1_000)
                consumer.commit({tp: OffsetAndMetadata(consumer.position(tp), f"read by {group}", -1)
                                 for tp in consumer.assignment()})
            expected[group] = {tp.partition: consumer.committed(tp) for tp in consumer.assignment()}
            consumer.close()
            events.append((cluster.now, f"group {group} commits {expected[group]}"))
        killed: list[int] = []
        for _ in range(schedule["kills"]):
            leader = cluster.partition_state(OFFSETS_TOPIC, 0).leader
            cluster.kill(leader)
            killed.append(leader)
            events.append((cluster.now, f"kill broker {leader}, the groups' coordinator: another loads "
                                        f"{OFFSETS_TOPIC} with decode_key"))
            cluster.run_until(lambda: cluster.partition_state(OFFSETS_TOPIC, 0).leader not in (-1, *killed), 30_000)
            if len(killed) < schedule["kills"]:
                cluster.restart(leader)
                killed.remove(leader)
                cluster.run_until(lambda: leader in cluster.partition_state(OFFSETS_TOPIC, 0).isr, 30_000)
                events.append((cluster.now, f"broker {leader} back in the ISR of {OFFSETS_TOPIC}"))
        wrong = []
        for group, offsets in expected.items():
            reader = KafkaConsumer(bootstrap_servers=cluster, group_id=group, enable_auto_commit=False)
            got = {p: reader.committed(TopicPartition("trucks_gps", p)) for p in offsets}
            reader.close()
            if got != offsets:
                wrong.append(f"{group}: committed {offsets}, the new coordinator has {got}")
        calls = cluster.rule_trace.calls.get("decode_key", 0)
    if not wrong:
        return None
    return DeliveryFinding("offsets-lost", "; ".join(wrong), seed, "a new coordinator", dict(schedule), events,
                           calls=calls)


# --- the judge ---------------------------------------------------------------------------------------


def _shrink_schedule(schedule: Mapping) -> Iterator[dict]:
    """The schedule with one crash fewer, each way."""
    if "kills" in schedule:  # a new coordinator's: one kill fewer
        if schedule["kills"] > 1:
            yield {**schedule, "kills": schedule["kills"] - 1}
        return
    for key in sorted(schedule):
        value = schedule[key]
        if isinstance(value, list):
            for i in range(len(value)):
                yield {**schedule, key: value[:i] + value[i + 1:]}
        else:
            yield {k: v for k, v in schedule.items() if k != key}


def _judged(run: Callable, rules: Mapping, schedule: Mapping, seed: int, campaign: str) -> DeliveryFinding | None:
    try:
        return run(rules, schedule, seed)
    except RuleError as error:
        return DeliveryFinding("rule-error", str(error), seed, campaign,
                               {k: (list(v) if isinstance(v, list) else v) for k, v in schedule.items()})


CAMPAIGNS: dict[str, tuple[tuple[str, ...], Callable, Callable[[int], dict]]] = {
    "at-least-once": (("no_record_lost",),
                      lambda rules, schedule, seed: run_commit_loop(rules, "no_record_lost", schedule, seed),
                      lambda s: commit_schedule(s, 58)),
    "at-most-once": (("no_record_twice",),
                     lambda rules, schedule, seed: run_commit_loop(rules, "no_record_twice", schedule, seed),
                     lambda s: commit_schedule(s, 30)),
    "exactly-once sink": (("on_assigned", "count_reports"), run_sink, sink_schedule),
    "read-process-write": (("transactional_step",), run_job, job_schedule),
    "a new coordinator": (("decode_key",), run_offsets_failover, offsets_schedule),
}


CAMPAIGN_TEXT = {
    "at-least-once": "at-least-once: your loop consumes orders, its process killed and restarted 3 times per "
                     "schedule; nothing may be lost, only what a crash interrupted repeated",
    "at-most-once": "at-most-once: your loop consumes orders, its process killed and restarted 3 times per "
                    "schedule; nothing may be processed twice, only what a crash interrupted lost",
    "exactly-once sink": "exactly-once sink: two consumers count trucks_gps into a database, killed 3 times per "
                         "schedule, taking over each other's partitions; every truck's count must be exact",
    "read-process-write": "read-process-write: your step upper-cases in into out, its process killed 3 times per "
                          "schedule; a read_committed reader must find every order exactly once",
    "a new coordinator": "a new coordinator: groups commit, the coordinator is killed, another broker loads "
                         "__consumer_offsets with your decode_key; every group's offsets must be there",
}


def judge(rules: Mapping[str, Callable], schedules: int = DEFAULT_SCHEDULES, seed: int = 0, *,
          shrinking: bool = True) -> DeliveryVerdict:
    """Judge notebook 07's rules: each exercise given (by any of its rules) on its own campaign
    of ``schedules`` crash schedules drawn from ``seed``; stop at the first failing one and
    shrink its crashes."""
    from minikafka.checker.campaign import schedule_seeds

    verdict = DeliveryVerdict(tuple(sorted(rules)), schedules, seed)
    for campaign, (names, run, draw) in CAMPAIGNS.items():
        mine = {name: rules[name] for name in names if name in rules}
        if not mine:
            continue
        verdict.campaigns.append(campaign)
        verdict.passed = 0
        for s in schedule_seeds(seed, schedules):
            s %= 1 << 16
            schedule = draw(s)
            finding = _judged(run, mine, schedule, s, campaign)
            if finding is not None:
                verdict.failure = _shrunk(run, mine, schedule, s, campaign, finding) if shrinking else finding
                return verdict
            verdict.passed += 1
    return verdict


def _shrunk(run: Callable, rules: Mapping, schedule: dict, seed: int, campaign: str,
            finding: DeliveryFinding) -> DeliveryFinding:
    """Remove crashes one at a time while the schedule still fails the same way (the same kind:
    fewer crashes may show another failure, and the verdict names the first one found)."""
    best, current = finding, schedule
    progress = True
    while progress:
        progress = False
        for fewer in _shrink_schedule(current):
            if out_of_time():
                return best
            found = _judged(run, rules, fewer, seed, campaign)
            if found is not None and found.kind == finding.kind:
                found.shrunk = True
                best, current, progress = found, fewer, True
                break
    return best


__all__ = ["judge", "DeliveryVerdict", "DeliveryFinding", "Crash", "Database", "CAMPAIGNS", "run_commit_loop",
           "run_sink", "run_job"]
