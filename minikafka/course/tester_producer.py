"""The tester of notebook 05: a student's idempotence check and "ready" rule run a cluster.

Theory of operation
-------------------
``tester.judge`` sends a student's rules here when they are rules of lecture 05:
``check_batch`` (the broker's idempotence check, ``ProducerStateManager``) and ``batch_ready``
(the producer's ``RecordAccumulator.ready`` for one batch). Each part reports the first thing a
Kafka user would see go wrong, as that user would see it.

The idempotence check (``check_batch``). Kafka promises an idempotent producer (acks=all,
retries, at most 5 requests in flight) that every record it sends is written once, in the order
it was sent, whatever the network does. Three parts:

- *the fault campaign* of notebook 04 (``tester.run_judged``: kills, partitions, leaders cut off,
  then the calm phase) with an idempotent producer; its retries after lost answers are where a
  check that appends every repeat writes a record twice ("duplicate");
- *a request lost, the next one arrives* (``lost_request``): the producer's request for record
  ``b`` is dropped, its request for ``c`` (the next sequence) reaches the leader first. Kafka's
  check refuses ``c`` (a gap: "out of order") until the retry of ``b`` arrives; one that accepts
  a gap writes ``c`` before ``b`` ("reordered") or loses ``b``;
- *a producer restarted* (``restarted_producer``): a transactional producer writes and closes;
  its next incarnation (same ``transactional_id``: the same producer id, the epoch bumped) writes
  again from sequence 0. Kafka's check starts a new epoch at 0; one that ignores the epoch calls
  the new batch a duplicate of the old one and answers it with the old record's offset: an
  acknowledged record that is not in the log ("lost-write"), or refuses it ("unacknowledged").

The "ready" rule (``batch_ready``). ``READY_SCHEDULES`` seeded workloads, each run twice on a
one-broker cluster: once with Kafka's rule, once with the student's, the same records sent at
the same simulated milliseconds (random gaps and sizes, a random ``linger_ms`` and
``batch_size``), then the traffic stops. The requests the producer sent (when each left, how
many records it held) are compared:

- a batch that leaves later than Kafka's rule sends it, or never, is "late" (records wait past
  their linger: latency; a rule that waits for a full batch never sends the last one);
- more requests than Kafka's are "tiny-batches" (a rule that ignores linger sends every record
  alone: the throughput batching was for);
- then ``flush()`` with ``linger_ms`` of 30 s must return as fast as with Kafka's rule (which
  sends at once when the producer flushes); a rule that ignores flushing makes it wait for the
  linger: "flush-waited".

Every call of a student's rule is guarded (``minikafka.rules``): an exception, a hang or a
value of the wrong kind stops the run with the rule, the node, the arguments, the time, what it
returned and what Kafka's rule returns ("rule-error").

Schedules are short (one scenario, a few simulated seconds): the first failing one is reported
whole; the campaign's own schedules are shrunk as ``tester`` shrinks them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from minikafka.checker.campaign import _quiet_clients, schedule_seeds
from minikafka.cluster import Cluster
from minikafka.clients.producer import KafkaProducer
from minikafka.clients.record_accumulator import record_size_in_bytes
from minikafka.errors import KafkaError
from minikafka.rules import RuleCall, RuleError, calls_said, node_name

IDEMPOTENCE_SCHEDULES = 6  # of tester's fault campaign
READY_SCHEDULES = 6
TOPIC = "events"
FLUSH_LINGER_MS = 30_000
_VALUE_OF_SIZE: dict[int, bytes] = {}


def _value(size: int) -> bytes:
    """A value whose record takes ``size`` bytes inside a batch."""
    if not _VALUE_OF_SIZE:
        for n in range(1, 800):
            _VALUE_OF_SIZE.setdefault(record_size_in_bytes(0, 0, None, b"x" * n, []), b"x" * n)
    return _VALUE_OF_SIZE[size]


@dataclass
class ProducerFinding:
    """What failed: ``kind``, ``what`` shows it, in which part (``where``), with the rule
    calls that differed from Kafka's."""

    kind: str
    what: str
    where: str
    calls: list[RuleCall] = field(default_factory=list)
    differing: int = 0
    rule_calls: dict[str, int] = field(default_factory=dict)


@dataclass
class ProducerVerdict:
    rules: tuple[str, ...]
    schedules: int
    seed: int
    passed: int = 0
    failure: Any = None  # a ProducerFinding, or the campaign's tester.Finding

    @property
    def ok(self) -> bool:
        return self.failure is None

    def __str__(self) -> str:
        yours = ", ".join(self.rules) or "none (Kafka's rules)"
        if self.ok:
            return (f"0 anomalies in {self.schedules} schedules (seed {self.seed}); your rules: {yours}\n"
                    f"(check_batch: the fault campaign, a lost request, a restarted producer; "
                    f"batch_ready: batches and latency against Kafka's rule, flush())")
        f = self.failure
        if not isinstance(f, ProducerFinding):  # the campaign's own finding, with its timeline
            from minikafka.course.tester import Verdict
            v = Verdict(self.rules, self.schedules, self.seed, self.passed, f)
            return str(v)
        lines = [f"FAILED: {f.where} (after {self.passed} schedules passed): {f.kind}",
                 f"your rules: {yours}; {calls_said(f.rule_calls, f.differing, f.kind == 'rule-error')}"]
        if f.calls:
            lines.append("first calls answered differently from Kafka's rule:")
            lines += [c.line() for c in f.calls[:4]]
        lines.append(f"then: {f.kind}: {f.what}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(str(self))


def _rule_error(error: RuleError, where: str) -> ProducerFinding:
    trace = getattr(error, "trace", None)
    return ProducerFinding("rule-error", str(error), where,
                           calls=(list(trace.differing) if trace else []) + [error.call],
                           differing=(trace.differing_count if trace else 0) + 1,
                           rule_calls=dict(trace.calls) if trace else {})


def _finding(kind: str, what: str, where: str, cluster: Cluster) -> ProducerFinding:
    trace = cluster.rule_trace
    return ProducerFinding(kind, what, where, calls=list(trace.differing), differing=trace.differing_count,
                           rule_calls=dict(trace.calls))


def _log_values(cluster: Cluster, broker: int) -> list[tuple[int, bytes]]:
    """(offset, value) of every data record in the partition's log on ``broker``."""
    out = []
    for batch in cluster.replica(broker, TOPIC, 0).log.read(0, 1 << 30).batches():
        if batch.is_control_batch:
            continue
        for record in batch:
            out.append((record.offset, record.value))
    return out


# --- check_batch: two scenarios beside the fault campaign --------------------------------------------


def _acknowledged(futures: list[tuple[bytes, Any]], cluster: Cluster, where: str) -> ProducerFinding | None:
    """Every acknowledged record must be in the log at its offset, once; every record must be
    acknowledged (an idempotent producer retries until it is)."""
    log = _log_values(cluster, cluster.partition_state(TOPIC, 0).leader)
    at = dict(log)
    for value, future in futures:
        if not future.is_done or not future.succeeded():
            error = future.exception if future.is_done else "still waiting"
            return _finding("unacknowledged", f"{value.decode()} was never acknowledged ({error}) though the "
                            "network healed and the broker was up: the idempotence check refused it", where, cluster)
        offset = future.value.offset
        if at.get(offset) != value:
            return _finding("lost-write", f"{value.decode()} was acknowledged at offset {offset}, where the log "
                            f"holds {at.get(offset)!r}: the record is not in the log", where, cluster)
    written = [v for _, v in log]
    for value, _ in futures:
        if written.count(value) > 1:
            return _finding("duplicate", f"{value.decode()} is in the log {written.count(value)} times", where, cluster)
    sent = [v for v, _ in futures]
    order = [v for v in written if v in sent]
    if order != sent:
        return _finding("reordered", f"the producer sent {', '.join(v.decode() for v in sent)}; the log holds "
                        f"{', '.join(v.decode() for v in order)}: one idempotent producer's records must keep "
                        "their order", where, cluster)
    return None


def lost_request(rules: Mapping[str, Callable], seed: int = 0) -> ProducerFinding | None:
    """The request for ``b`` is lost; the one for ``c``, the next sequence, arrives first."""
    where = "the scenario \"a request lost, the next one arrives\""
    try:
        with Cluster(brokers=1, seed=seed, rules=dict(rules), record_history=False) as c, _quiet_clients():
            c.create_topic(TOPIC, partitions=1, replication_factor=1)
            p = KafkaProducer(bootstrap_servers=c, acks="all", enable_idempotence=True, linger_ms=0,
                              request_timeout_ms=1_000, retry_backoff_ms=50, delivery_timeout_ms=20_000)
            futures = [(b"a", p.send(TOPIC, value=b"a", partition=0))]
            c.run_until(lambda: futures[0][1].is_done, 5_000)
            c.lossy(p.node_id, 1, 1.0)  # every request of the producer to the broker is lost ...
            futures.append((b"b", p.send(TOPIC, value=b"b", partition=0)))
            c.advance(5)
            c.lossy(p.node_id, 1, 0.0)  # ... until b's is gone
            futures.append((b"c", p.send(TOPIC, value=b"c", partition=0)))
            c.run_until(lambda: all(f.is_done for _, f in futures), 20_000)
            return _acknowledged(futures, c, where)
    except RuleError as error:
        return _rule_error(error, where)


def restarted_producer(rules: Mapping[str, Callable], seed: int = 0) -> ProducerFinding | None:
    """A transactional producer writes and closes; its next incarnation writes again."""
    where = "the scenario \"a producer restarted\""
    try:
        with Cluster(brokers=3, seed=seed, rules=dict(rules), record_history=False) as c, _quiet_clients():
            c.create_topic(TOPIC, partitions=1, replication_factor=3, config={"min.insync.replicas": 2})
            futures = []
            for life in (1, 2):
                p = KafkaProducer(bootstrap_servers=c, transactional_id="orders", acks="all", linger_ms=0)
                p.init_transactions()
                p.begin_transaction()
                value = b"order-%d" % life
                futures.append((value, p.send(TOPIC, value=value, partition=0)))
                try:
                    p.commit_transaction()
                except KafkaError:
                    pass  # the record's future says what happened
                p.close()
            return _acknowledged(futures, c, where)
    except RuleError as error:
        return _rule_error(error, where)


# --- batch_ready: the producer's requests against Kafka's rule -----------------------------------------


def _arrivals(rng: random.Random) -> tuple[list[tuple[int, int]], int, int]:
    ms, arrivals = 0, []
    for _ in range(rng.randint(8, 30)):
        ms += rng.choice([1, 1, 2, 3, 5, 8, 13])
        arrivals.append((ms, rng.choice([40, 60, 100, 150, 300])))
    return arrivals, rng.choice([2, 5, 10, 20]), rng.choice([300, 600, 1_000, 16_384])


def _requests(rules: Mapping[str, Callable], seed: int, arrivals, linger_ms: int, batch_size: int):
    """(cluster's rule trace, [(ms a request left, its records)], ms flush() took or None if it did
    not return within 5 s)."""
    with Cluster(brokers=1, seed=seed, rules=dict(rules)) as c, _quiet_clients():
        c.create_topic(TOPIC, partitions=1, replication_factor=1)
        p = KafkaProducer(bootstrap_servers=c, acks=1, linger_ms=linger_ms, batch_size=batch_size)
        p.partitions_for(TOPIC)
        start, since = c.now, len(c.world.history)
        for ms, size in arrivals:
            c.advance(start + ms - c.now)
            p.send(TOPIC, value=_value(size), partition=0)
        c.advance(linger_ms + 100)
        left = [event[0] - 1 - start for event in c.world.history[since:]
                if event[1] == "recv" and event[4] == "ProduceRequest"]
        counts = [batch.records_count for batch in c.replica(1, TOPIC, 0).log.read(0, 1 << 30).batches()]
        f = KafkaProducer(bootstrap_servers=c, acks=1, linger_ms=FLUSH_LINGER_MS, batch_size=16_384,
                          delivery_timeout_ms=FLUSH_LINGER_MS + 60_000)
        f.partitions_for(TOPIC)
        for i in range(3):
            f.send(TOPIC, value=b"flush-%d" % i, partition=0)
        t0 = c.now
        try:
            f.flush(timeout=5)
            flushed = c.now - t0
        except KafkaError:
            flushed = None
        return c, list(zip(left, counts)) + [(None, n) for n in counts[len(left):]], flushed


def run_ready_schedule(rules: Mapping[str, Callable], seed: int) -> ProducerFinding | None:
    rng = random.Random(f"ready/{seed}")
    arrivals, linger_ms, batch_size = _arrivals(rng)
    where = (f"schedule seed {seed}: {len(arrivals)} records over {arrivals[-1][0]} ms, linger_ms={linger_ms}, "
             f"batch_size={batch_size}")
    _, kafka, kafka_flush = _requests({}, seed, arrivals, linger_ms, batch_size)
    try:
        c, yours, your_flush = _requests(rules, seed, arrivals, linger_ms, batch_size)
    except RuleError as error:
        return _rule_error(error, where)
    sent = sum(n for _, n in yours)
    if sent < len(arrivals):
        return _finding("late", f"{len(arrivals) - sent} of {len(arrivals)} records were still in the producer "
                        f"{linger_ms + 100} ms after the last send (Kafka's rule sent them all within linger_ms): "
                        "records wait forever when traffic stops", where, c)
    for i, ((t, n), (kt, kn)) in enumerate(zip(yours, kafka)):
        if (t, n) != (kt, kn):
            if t is not None and kt is not None and t < kt or len(yours) > len(kafka):
                return _finding("tiny-batches", f"your producer sent {len(yours)} requests for {len(arrivals)} records "
                                f"(request {i + 1}: {n} records at {t} ms); Kafka's rule sends {len(kafka)} (request "
                                f"{i + 1}: {kn} records at {kt} ms): batching is lost", where, c)
            return _finding("late", f"request {i + 1} left at {t} ms with {n} records; Kafka's rule sends it at {kt} ms "
                            f"with {kn}: records waited longer than linger_ms or a full batch allows", where, c)
    if len(yours) != len(kafka):
        return _finding("tiny-batches", f"your producer sent {len(yours)} requests for {len(arrivals)} records; "
                        f"Kafka's rule sends {len(kafka)}", where, c)
    if your_flush is None or (kafka_flush is not None and your_flush > kafka_flush + 100):
        took = "did not return within 5 s" if your_flush is None else f"took {your_flush} ms"
        return _finding("flush-waited", f"flush() with linger_ms={FLUSH_LINGER_MS} {took}; with Kafka's rule it "
                        f"takes {kafka_flush} ms (a flushing producer sends at once, whatever linger_ms says)",
                        where, c)
    return None


# --- the judge -------------------------------------------------------------------------------------------

SCENARIOS: tuple[Callable, ...] = (lost_request, restarted_producer)


def judge(rules: Mapping[str, Callable], schedules: int | None = None, seed: int = 0, *,
          shrinking: bool = True) -> ProducerVerdict:
    """Judge lecture 05's rules (see the module docstring): ``check_batch`` by the fault campaign
    (``schedules``, default ``IDEMPOTENCE_SCHEDULES``) and two scenarios, ``batch_ready`` by
    ``schedules`` (default ``READY_SCHEDULES``) workloads against Kafka's rule."""
    from minikafka.course import tester

    rules = dict(rules)
    verdict = ProducerVerdict(tuple(sorted(rules)), 0, seed)
    if "check_batch" in rules:
        mine = {"check_batch": rules["check_batch"]}
        n = IDEMPOTENCE_SCHEDULES if schedules is None else schedules
        verdict.schedules += n + len(SCENARIOS)
        for s in schedule_seeds(seed, n):
            try:
                finding = tester.run_judged(mine, s)
            except RuleError as error:  # a rule error outside the campaign's own catch
                finding = _rule_error(error, f"campaign schedule seed {s}")
            if finding is not None:
                verdict.failure = tester.shrink(mine, finding) if shrinking and not isinstance(
                    finding, ProducerFinding) else finding
                return verdict
            verdict.passed += 1
        for scenario in SCENARIOS:
            finding = scenario(mine, seed)
            if finding is not None:
                verdict.failure = finding
                return verdict
            verdict.passed += 1
    if "batch_ready" in rules:
        mine = {"batch_ready": rules["batch_ready"]}
        n = READY_SCHEDULES if schedules is None else schedules
        verdict.schedules += n
        for s in schedule_seeds(seed, n):
            finding = run_ready_schedule(mine, s)
            if finding is not None:
                verdict.failure = finding
                return verdict
            verdict.passed += 1
    return verdict


__all__ = ["judge", "ProducerVerdict", "ProducerFinding", "lost_request", "restarted_producer",
           "run_ready_schedule", "node_name"]
