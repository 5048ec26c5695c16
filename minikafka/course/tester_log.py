"""The tester of notebooks 01 and 02: a student's log and partitioner rules run a cluster.

Theory of operation
-------------------
``tester.judge`` sends a student's rules here when they are rules of lecture 01 (the log:
``index_lookup``, ``roll_reason``, ``segments_to_delete``) or 02 (``murmur2``,
``partition_for_key``). Each judge runs short simulated schedules on a 3-broker cluster whose
brokers (01) or producers (02) call the student's functions, and reports the first thing a
Kafka user would see go wrong, as that user would see it:

01, the log (``judge_log``). A topic with small segments (a few KB, an index entry every few
hundred bytes) takes a steady stream of truck positions, acks=all, idempotent, with one broker
killed and restarted on the way; half the schedules have ``retention.ms`` (with
``segment.ms``), the other half ``retention.bytes``, retention checked every 200 ms.

- *reads*: a reader seeks to offsets all over the log and polls. The first record it gets must
  be the one at the offset it asked for, with the value acknowledged there ("gap": records
  skipped, "wrong-record"); a read starting mid-segment goes through the index lookup, and so
  does a follower fetching after its restart, so at the end every replica must hold every
  record of the leader's log ("replica-gap": a future leader without them).
- *segments*: no segment file may grow past ``segment.bytes`` unless it holds one batch
  ("segment-too-big"); a segment Kafka's rule rolls (bytes, time, offsets) and the student's
  keeps appending to is "segment-never-rolled": with ``retention.ms`` its records outlive
  retention, since retention deletes whole segments and never the active one.
- *retention*: every retention check runs the student's ``segments_to_delete``; a segment
  deleted that Kafka keeps is "deleted-early" (a reader from the beginning misses records
  retention still promised), one Kafka deletes and the student keeps is "kept-past-retention".

02, the partitioner (``judge_partitioner``). Two producers write the same keys (truck ids,
random bytes, UTF-8 text, the empty key) to topics of 1 to 12 partitions, in turn: one made on
the cluster (the student's ``partition_for_key``/``murmur2``), the other with kafka-python's
own ``DefaultPartitioner`` (its ``murmur2``). Kafka promises one key, one partition, so that a
consumer reads each key's records in the order they were written; a key whose records land in
two partitions is "key-split", shown with the order a consumer of the topic actually read them.

Schedules are short already (one fault, a few seconds of simulated time): the first failing
one is reported whole, not shrunk.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from minikafka.checker.campaign import _quiet_clients, schedule_seeds
from minikafka.cluster import Cluster
from minikafka.clients.consumer import KafkaConsumer
from minikafka.clients.producer import KafkaProducer
from minikafka.errors import KafkaError
from minikafka.rules import RuleCall, RuleError, calls_said, node_name
from minikafka.topic import TopicPartition

TOPIC = "trucks_gps"
LOG_SCHEDULES = 6
PARTITIONER_SCHEDULES = 4
CHECK_MS = 200  # log.retention.check.interval.ms
TRUCKS = [f"truck-{i:03d}" for i in range(1, 41)]


@dataclass
class LogFinding:
    kind: str
    what: str
    seed: int
    setting: str
    calls: list[RuleCall] = field(default_factory=list)
    rule_calls: dict[str, int] = field(default_factory=dict)
    differing: int = 0
    events: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class LogVerdict:
    """``ok`` and, if not, the first failing schedule (``failure``)."""

    lecture: str
    rules: tuple[str, ...]
    schedules: int
    seed: int
    passed: int = 0
    failure: LogFinding | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    def __str__(self) -> str:
        yours = ", ".join(self.rules) or "none (Kafka's rules)"
        setting = ("small segments, retention.ms or retention.bytes, a broker killed and restarted, reads from "
                   "everywhere in the log" if self.lecture == "01" else
                   "two producers on the same keys, one on your rule, one on kafka-python's DefaultPartitioner")
        if self.ok:
            return (f"0 anomalies in {self.schedules} schedules (seed {self.seed}); your rules: {yours}\n"
                    f"({setting})")
        f = self.failure
        lines = [f"FAILED: schedule {self.passed + 1} of {self.schedules} (seed {f.seed}; {f.setting}): {f.kind}",
                 f"your rules: {yours}; {calls_said(f.rule_calls, f.differing, f.kind == 'rule-error')}"]
        events = sorted(f.events + [(c.time_ms, _line(c)) for c in f.calls[:4]], key=lambda e: e[0])
        if events:
            lines.append("timeline:")
            lines += [text if text.startswith("t=") else f"t={t:>6} ms  {text}" for t, text in events]
        lines.append(f"then: {f.kind}: {f.what}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(str(self))


def _line(call: RuleCall) -> str:
    """A call for the timeline; a roll's LogConfig shown by the two settings the rule reads."""
    config = call.args.get("config")
    if config is None:
        return call.line()
    args = {**call.args, "config": _Settings(config.segment_bytes, config.segment_ms)}
    return RuleCall(call.time_ms, call.node, call.rule, args, call.returned, call.reference, call.raised).line()


class _Settings:
    def __init__(self, segment_bytes: int, segment_ms: int) -> None:
        self.text = f"LogConfig(segment_bytes={segment_bytes}, segment_ms={segment_ms}, ...)"

    def __repr__(self) -> str:
        return self.text


def _rule_error_finding(error: RuleError, seed: int, setting: str) -> LogFinding:
    trace = getattr(error, "trace", None)
    return LogFinding("rule-error", str(error).splitlines()[0].split(": ", 1)[1], seed, setting,
                      calls=[error.call], rule_calls=dict(trace.calls) if trace else {},
                      differing=(trace.differing_count if trace else 0) + 1)


# --- 01: the log ---------------------------------------------------------------------------------------


def _log_setting(seed: int, by_time: bool) -> tuple[str, dict]:
    rng = random.Random(f"log-setting/{seed}")
    segment_bytes = rng.choice([1_500, 2_500, 4_000])
    config = {"segment.bytes": segment_bytes, "index.interval.bytes": rng.choice([200, 400]),
              "min.insync.replicas": 2}
    if by_time:
        config.update({"retention.ms": 3_000, "segment.ms": 1_000, "retention.bytes": -1,
                       "segment.bytes": 1_000_000})
        return "retention.ms=3000, segment.ms=1000", config
    config.update({"retention.ms": -1, "retention.bytes": 3 * segment_bytes})
    return f"retention.bytes={3 * segment_bytes}, segment.bytes={segment_bytes}", config


def _segment_lines(call: RuleCall) -> str:
    return ", ".join(f"{s.base_offset} ({s.size} B, newest at t={s.newest_timestamp})" for s in call.args["segments"])


def _rule_findings(trace, config: dict) -> tuple[str, str, RuleCall] | None:
    """The first call of roll_reason or segments_to_delete whose answer a user would see."""
    for call in trace.differing:
        if call.rule == "roll_reason" and call.returned is None and call.reference is not None:
            seg, batch = call.args["segment"], call.args["batch"]
            if call.reference == "segment.bytes":
                seen = (f"the segment at offset {seg.base_offset} ({seg.size} bytes) took a {batch.size}-byte batch: "
                        f"its file grows past segment.bytes={call.args['config'].segment_bytes}, where Kafka starts a "
                        f"new segment")
            elif call.reference == "segment.ms":
                seen = (f"the segment at offset {seg.base_offset}, first batch at t={seg.first_timestamp}, took a "
                        f"batch at t={batch.max_timestamp}, more than segment.ms={call.args['config'].segment_ms} "
                        f"later: retention deletes whole segments, never the active one, so its old records outlive "
                        f"retention.ms")
            else:
                seen = f"the segment at offset {seg.base_offset} took offsets its 4-byte index cannot hold"
            return "segment-never-rolled", f"on {node_name(call.node)}, {seen}", call
        if call.rule == "segments_to_delete":
            mine = [b for b, _ in call.returned]
            kafka = [b for b, _ in call.reference]
            if mine == kafka:
                continue  # the same segments, other reasons: nothing a reader sees
            segs = {s.base_offset: s for s in call.args["segments"]}
            bases = [s.base_offset for s in call.args["segments"]]
            now, ms, nbytes = call.args["now_ms"], call.args["retention_ms"], call.args["retention_bytes"]
            if len(mine) > len(kafka):
                extra = mine[len(kafka)]
                s = segs[extra]
                end = bases[bases.index(extra) + 1] - 1 if bases.index(extra) + 1 < len(bases) else "its end"
                age = now - s.newest_timestamp
                why = (f"its newest record is {age} ms old, not more than retention.ms={ms}" if ms >= 0 else
                       "retention.ms is -1 (keep forever)")
                left = sum(x.size for x in call.args["segments"][bases.index(extra) + 1:])
                if nbytes >= 0:
                    why += f"; without it the log holds {left} bytes, below retention.bytes={nbytes}"
                return ("deleted-early",
                        f"at t={now} ms {node_name(call.node)} deleted the segment of offsets {extra}..{end} ({why}): "
                        f"a consumer reading from the beginning misses records Kafka still keeps", call)
            kept = kafka[len(mine)]
            s = segs[kept]
            return ("kept-past-retention",
                    f"at t={now} ms {node_name(call.node)} kept the segment at offset {kept} (newest record "
                    f"{now - s.newest_timestamp} ms old, retention.ms={ms}, retention.bytes={nbytes}): Kafka deletes "
                    f"it now, yet a consumer reading from the beginning still gets its records", call)
    return None


def _oversized_segments(cluster: Cluster, config: dict) -> str | None:
    limit = config["segment.bytes"]
    for b in cluster.broker_ids:
        if not cluster.alive(b):
            continue
        for state in cluster.partitions_of(TOPIC):
            replica = cluster.replica(b, TOPIC, state.partition)
            if replica is None:
                continue
            for seg in replica.log.segments:
                if seg.size > limit and sum(1 for _ in seg.iter_batches()) > 1:
                    return (f"broker {b}'s segment file {seg.file_name} of {TOPIC}-{state.partition} is {seg.size} "
                            f"bytes, over segment.bytes={limit}, though it holds several batches")
    return None


def run_log_schedule(rules: Mapping[str, Callable], seed: int, by_time: bool = True) -> LogFinding | None:
    """One schedule of the log judge (see the module docstring): retention by time (with
    segment.ms) if ``by_time``, else by size."""
    setting, config = _log_setting(seed, by_time)
    rng = random.Random(f"log/{seed}")
    events: list[tuple[int, str]] = []
    broker_config = {"log.retention.check.interval.ms": CHECK_MS, "replica.lag.time.max.ms": 10_000}
    try:
        with Cluster(3, seed=seed, config=broker_config, record_history=False, rules=dict(rules)) as cluster, \
                _quiet_clients(disk_faults=True):
            partitions = 2
            cluster.create_topic(TOPIC, partitions, 3, config=config)
            producer = KafkaProducer(bootstrap_servers=cluster, acks="all", enable_idempotence=True, linger_ms=5)
            reader = KafkaConsumer(bootstrap_servers=cluster, enable_auto_commit=False,
                                   auto_offset_reset="earliest", fetch_max_wait_ms=50)
            sent: list[tuple[Any, bytes]] = []
            acked: dict[tuple[int, int], bytes] = {}
            victim = rng.choice(cluster.broker_ids)
            kill_at, back_at = rng.randint(1_500, 3_000), rng.randint(4_000, 5_000)
            start, duration = cluster.now, 9_000
            n = 0

            def note_acks() -> None:
                for future, value in sent:
                    if future.is_done and future.succeeded():
                        md = future.value
                        acked[(md.partition, md.offset)] = value
                sent[:] = [(f, v) for f, v in sent if not f.is_done]

            def leader_replica(p: int):
                leader = cluster.partition_state(TOPIC, p).leader
                replica = cluster.replica(leader, TOPIC, p) if leader >= 0 and cluster.alive(leader) else None
                return replica if replica is not None and replica.is_leader else None

            def leader_log(p: int):
                replica = leader_replica(p)
                return None if replica is None else replica.log

            def read_check() -> LogFinding | None:
                p = rng.randrange(partitions)
                replica = leader_replica(p)
                if replica is None:
                    return None
                hw, low = replica.high_watermark, replica.log.log_start_offset
                if hw - low < 2:
                    return None
                o = rng.randrange((low + hw) // 2, hw)
                tp = TopicPartition(TOPIC, p)
                reader.assign([tp])
                reader.seek(tp, o)
                got = reader.poll(timeout_ms=500, max_records=3).get(tp, [])
                log = leader_log(p)
                if not got or log is None or log.log_start_offset > o:
                    return None  # nothing yet, or retention moved past it meanwhile
                first = got[0]
                if first.offset != o:
                    return LogFinding("gap", f"a consumer of {TOPIC}-{p} that seeks to offset {o} gets offset "
                                      f"{first.offset} first: records {o}..{first.offset - 1} are skipped", seed,
                                      setting)
                want = acked.get((p, o))
                if want is not None and first.value != want:
                    return LogFinding("wrong-record", f"a consumer of {TOPIC}-{p} reading offset {o} gets "
                                      f"{first.value!r}, but {want!r} was acknowledged at that offset", seed, setting)
                return None

            finding = None
            killed = False
            while cluster.now - start < duration and finding is None:
                for _ in range(rng.randint(1, 3)):
                    truck = rng.choice(TRUCKS)
                    value = f"{truck}/{n}/".encode() + b"x" * rng.randint(10, 120)
                    n += 1
                    try:
                        sent.append((producer.send(TOPIC, key=truck.encode(), value=value,
                                                   timestamp_ms=cluster.now // 100 * 100), value))
                    except KafkaError:
                        pass
                cluster.advance(rng.randint(20, 60))
                note_acks()
                t = cluster.now - start
                if not killed and t >= kill_at:
                    cluster.kill(victim)
                    events.append((cluster.now, f"nemesis: kill broker {victim}"))
                    killed = True
                elif killed and t >= back_at and not cluster.alive(victim):
                    cluster.restart(victim)
                    events.append((cluster.now, f"nemesis: restart broker {victim}"))
                if rng.random() < 0.3:
                    finding = read_check()
                if finding is None and rng.random() < 0.1:
                    what = _oversized_segments(cluster, config)
                    if what:
                        finding = LogFinding("segment-too-big", what, seed, setting)
                if finding is None:
                    found = _rule_findings(cluster.rule_trace, config)
                    if found:
                        finding = LogFinding(found[0], found[1], seed, setting, calls=[found[2]])
            if finding is None:
                if not cluster.alive(victim):
                    cluster.restart(victim)
                cluster.run_until(lambda: all(set(s.isr) == set(s.replicas) for s in cluster.partitions_of(TOPIC))
                                  and all(cluster.alive(b) for b in cluster.broker_ids), 20_000)
                producer.flush()
                note_acks()
                cluster.advance(1_000)
                finding = _replica_gaps(cluster, partitions, seed, setting)
            if finding is None:
                what = _oversized_segments(cluster, config)
                if what:
                    finding = LogFinding("segment-too-big", what, seed, setting)
            if finding is None:
                found = _rule_findings(cluster.rule_trace, config)
                if found:
                    finding = LogFinding(found[0], found[1], seed, setting, calls=[found[2]])
            if finding is not None:
                if not finding.calls:  # what the rules answered differently, the lookups first
                    differing = cluster.rule_trace.differing
                    finding.calls = ([c for c in differing if c.rule == "index_lookup"] or differing)[:3]
                finding.rule_calls = dict(cluster.rule_trace.calls)
                finding.differing = cluster.rule_trace.differing_count
                finding.events = events
            return finding
    except RuleError as error:
        finding = _rule_error_finding(error, seed, setting)
        finding.events = events
        return finding


def _offsets(log) -> list[tuple[int, int]]:
    """(base, last) of every batch of ``log`` from its start."""
    out = []
    for seg in log.segments:
        for _, batch in seg.iter_batches():
            if batch.last_offset >= log.log_start_offset:
                out.append((batch.base_offset, batch.last_offset))
    return out


def _replica_gaps(cluster: Cluster, partitions: int, seed: int, setting: str) -> LogFinding | None:
    for p in range(partitions):
        state = cluster.partition_state(TOPIC, p)
        if state.leader < 0:
            continue
        leader = cluster.replica(state.leader, TOPIC, p).log
        want = _offsets(leader)
        for b in state.replicas:
            if b == state.leader or not cluster.alive(b):
                continue
            replica = cluster.replica(b, TOPIC, p)
            if replica is None:
                continue
            log = replica.log
            have = {base for base, _ in _offsets(log)}
            start = max(log.log_start_offset, leader.log_start_offset)
            missing = [(base, last) for base, last in want if base >= start and base not in have
                       and last < log.log_end_offset]
            if missing:
                base, last = missing[0]
                return LogFinding("replica-gap", f"broker {b}'s replica of {TOPIC}-{p} (in the ISR) lacks offsets "
                                  f"{base}..{last} that its leader, broker {state.leader}, has: its fetches skipped "
                                  f"them, and if it leads, every consumer misses them", seed, setting)
    return None


def judge_log(rules: Mapping[str, Callable], schedules: int = LOG_SCHEDULES, seed: int = 0) -> LogVerdict:
    verdict = LogVerdict("01", tuple(sorted(rules)), schedules, seed)
    for i, s in enumerate(schedule_seeds(seed, schedules)):
        finding = run_log_schedule(rules, s, by_time=i % 2 == 0)
        if finding is not None:
            verdict.failure = finding
            return verdict
        verdict.passed += 1
    return verdict


# --- 02: the partitioner ----------------------------------------------------------------------------


class _Metadata:
    """What kafka-python's DefaultPartitioner asks of its ClusterMetadata, for one topic."""

    def __init__(self, topic: str, partitions: int) -> None:
        self.topic, self.n = topic, partitions

    def topics(self):
        return {self.topic}

    def partitions_for_topic(self, topic):
        return set(range(self.n))

    def available_partitions_for_topic(self, topic):
        return set(range(self.n))


def kafka_python_partitioner(topic: str, partitions: int) -> Callable:
    """A producer's ``partitioner`` (key bytes, all, available) -> partition, answered by
    kafka-python's own ``DefaultPartitioner`` (its murmur2, its toPositive)."""
    from kafka.partitioner.default import DefaultPartitioner

    kp = DefaultPartitioner()
    metadata = _Metadata(topic, partitions)
    return lambda key, all_partitions, available: kp.partition(topic, None, key, None, None, metadata)


def _keys(rng: random.Random) -> list[bytes]:
    keys = [t.encode() for t in rng.sample(TRUCKS, 12)] + [b"", "camión-7".encode(), "東京-3".encode(), b"\xff" * 7]
    keys += [rng.randbytes(rng.randint(1, 24)) for _ in range(12)]
    return keys


def run_partitioner_schedule(rules: Mapping[str, Callable], seed: int) -> LogFinding | None:
    rng = random.Random(f"partitioner/{seed}")
    partitions = rng.choice([3, 7, 10, 12])
    setting = f"{TOPIC} with {partitions} partitions"
    try:
        with Cluster(3, seed=seed, record_history=False, rules=dict(rules)) as cluster, _quiet_clients():
            cluster.create_topic(TOPIC, partitions, 1)
            yours = KafkaProducer(bootstrap_servers=cluster, acks="all", client_id="yours")
            kafkas = KafkaProducer(bootstrap_servers=cluster, acks="all", client_id="kafka-python",
                                   partitioner=kafka_python_partitioner(TOPIC, partitions))
            keys = _keys(rng)
            futures = []
            for round_ in range(4):
                for key in keys:
                    for name, producer in (("your rule", yours), ("kafka-python's DefaultPartitioner", kafkas)):
                        futures.append((key, round_, name, producer.send(TOPIC, key=key, value=b"%d" % len(futures))))
                    cluster.advance(2)
            yours.flush()
            kafkas.flush()
            reader = KafkaConsumer(bootstrap_servers=cluster, enable_auto_commit=False, auto_offset_reset="earliest")
            reader.assign([TopicPartition(TOPIC, p) for p in range(partitions)])
            order: list = []
            for _ in range(20):
                for recs in reader.poll(timeout_ms=200).values():
                    order += recs
                if len(order) >= len(futures):
                    break
            where: dict[bytes, dict[str, int]] = {}
            for key, round_, name, future in futures:
                if future.is_done and future.succeeded():
                    where.setdefault(key, {})[name] = future.value.partition
            for key, places in where.items():
                if len(set(places.values())) > 1:
                    mine, kafka = places["your rule"], places["kafka-python's DefaultPartitioner"]
                    seen = [int(r.value) for r in order if r.key == key]
                    written = sorted(seen)
                    inverted = next(((a, b) for a, b in zip(seen, seen[1:]) if a > b), None)
                    read = (f"a consumer of the topic read them in the order {seen[:8]} (written {written[:8]})"
                            + (f": record {inverted[1]} after record {inverted[0]}" if inverted else ""))
                    what = (f"key {key!r}: the producer on your rule put it in partition {mine}, kafka-python's "
                            f"DefaultPartitioner in partition {kafka} (of {partitions}); one key, two partitions, "
                            f"so its records lose their order: {read}")
                    finding = LogFinding("key-split", what, seed, setting,
                                         rule_calls=dict(cluster.rule_trace.calls),
                                         differing=cluster.rule_trace.differing_count,
                                         calls=[c for c in cluster.rule_trace.differing if c.args.get(
                                             "key", c.args.get("data")) == key][:2])
                    return finding
            return None
    except RuleError as error:
        return _rule_error_finding(error, seed, setting)


def judge_partitioner(rules: Mapping[str, Callable], schedules: int = PARTITIONER_SCHEDULES,
                      seed: int = 0) -> LogVerdict:
    verdict = LogVerdict("02", tuple(sorted(rules)), schedules, seed)
    for s in schedule_seeds(seed, schedules):
        finding = run_partitioner_schedule(rules, s)
        if finding is not None:
            verdict.failure = finding
            return verdict
        verdict.passed += 1
    return verdict


CAMPAIGNS = {"01": (judge_log, LOG_SCHEDULES), "02": (judge_partitioner, PARTITIONER_SCHEDULES)}

__all__ = ["judge_log", "judge_partitioner", "LogVerdict", "LogFinding", "kafka_python_partitioner", "CAMPAIGNS"]
