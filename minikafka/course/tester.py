"""The tester: a student's rules run the cluster, a fault campaign judges it.

Theory of operation
-------------------
``judge(rules, schedules=N, seed=S)`` is this course's ``go test`` (MIT 6.5840) or Maelstrom
run: it runs the fault campaign (``checker.campaign``: kills, leaders cut off then killed,
stranded followers, partitions, slow links, controller faults) with acks=all,
min.insync.replicas=2, RF 3 and an idempotent producer, on clusters whose brokers call the
student's functions where they would call Kafka's rules (``minikafka.rules``). Under those
settings Kafka promises that nothing acknowledged is lost, duplicated or reordered, so any
anomaly is the rules' fault: with Kafka's own rules every schedule passes.

Each schedule is judged on four things:

1. *the rule's contract*, at every call: an exception, a hang or a value no broker could act on
   stops the run with a ``RuleError`` (``minikafka.rules``);
2. *the history* (``checker.analysis``): lost-write, duplicate, inconsistent-offsets,
   nonmonotonic-poll, poll-skip, and the metadata quorum's own checks;
3. *liveness after the faults*: once the network heals and every broker is back, every replica
   must rejoin the ISR with the leader's log ("stuck" otherwise), as Kafka's do;
4. *a calm phase* after that: a healthy cluster on a 25 ms network under a steady stream of
   acks=all writes. Kafka's caught-up rule keeps every follower in the ISR there and every write is
   acknowledged; a rule that drops healthy followers ("isr-shrank-while-healthy") or never
   lets the high watermark move ("unacknowledged-while-healthy") is caught here.

After the random schedules come named *scenarios*, the cases random faults rarely line up
(``SCENARIOS``): two of KIP-497's, a follower rejoining the ISR while the controller is slow
(where a high watermark over the committed ISR alone loses acknowledged records) and a follower
dropped while the controller is unreachable (where one over the proposed ISR alone does); and a
new leader that dies before its followers fetch from it (where one that skips followers not
heard from yet does).

The first failing schedule is then *shrunk*: the same seed is run again with fewer faults, one
partition, a shorter run and fewer records, keeping each change under which it still fails.
The verdict shows the shrunk schedule as a timeline: the faults, and each call of the rules
whose answer differed from Kafka's (which node, what arguments, what it returned, what Kafka's
rule returns), then what the checker found. ``verdict.replay()`` (``replay.py``) rebuilds that
schedule, faults at the same simulated milliseconds, on a live ``Dashboard``.

Rules of other lectures go to their own judges (``JUDGES``, by each rule's lecture): the log's
and the partitioner's (01, 02) to ``tester_log``, the controller's placement and election (03)
to ``tester_cluster``, the producer's (05) to ``tester_producer``, the assignors (06) to
``tester_groups``, the application loops of 07 to ``tester_delivery``, the quorum's (08) to
``tester_raft``.

Hangs: a simulated cluster cannot preempt a pure function, so the guard runs every call of a
student's rule under a wall-time budget (a Unix interval timer, see ``minikafka.deadline``); where
the platform has none, a rule that never returns hangs the run. A rule slow on every call but
never past that budget would make a judge of 04 (about 90,000 calls) run for hours: each
lecture's judge gives the student's rules ``ALLOWANCE_S`` of wall time in all
(``rules.allowance``) and stops with a ``RuleError`` naming each rule's calls and seconds when
they have spent it (checked between calls where there is no timer).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from minikafka.checker.analysis import Report
from minikafka.checker.campaign import (
    CAMPAIGN_BROKER_CONFIG,
    CAMPAIGN_PRODUCER_CONFIG,
    TOPIC,
    Workload,
    _params,
    _quiet_clients,
    _run,
    run_cluster,
    schedule_seeds,
)
from minikafka.clients.producer import KafkaProducer
from minikafka.errors import IllegalArgumentError
from minikafka.rules import RULES, RuleCall, RuleError, RuleTrace, allowance, calls_said, out_of_time

DEFAULT_SCHEDULES = 30
# Kafka's promise for these settings: nothing acknowledged is lost, written twice or reordered.
SETTINGS = dict(acks="all", min_insync_replicas=2, replication_factor=3, enable_idempotence=True)
# The calm phase: 3 s of a steady stream (4 records every 10 ms) over 25 ms links, longer than
# replica.lag.time.max.ms plus the leader's ISR check: a follower is never exactly at the
# leader's end when its fetch arrives, yet it keeps up, and Kafka keeps it in sync.
CALM_MS, CALM_BURST, CALM_EVERY_MS, CALM_LATENCY_MS = 3_000, 4, 10, 25
TIMELINE_CALLS = 8  # differing rule calls shown in a timeline
# The wall time a lecture's rules may take in all during one judge (``rules.allowance``): with
# Kafka's rules a whole default judge takes under 20 s, and the rules' own share of it under 1 s.
ALLOWANCE_S = 30.0


@dataclass
class Finding:
    """What failed in one schedule: ``kind`` (an anomaly of the checker, "stuck",
    "isr-shrank-while-healthy", "unacknowledged-while-healthy" or "rule-error") and what
    shows it."""

    kind: str
    what: str
    seed: int
    shrunk: dict = field(default_factory=dict)  # the schedule's arguments changed by shrinking
    faults: list[tuple[int, str]] = field(default_factory=list)
    calls: list[RuleCall] = field(default_factory=list)  # rule calls that differed from Kafka's
    differing: int = 0
    rule_calls: dict[str, int] = field(default_factory=dict)
    records: int = 0  # sends in the schedule
    scenario: str | None = None  # a named scenario's, not a random schedule's

    def shown_calls(self) -> list[RuleCall]:
        """The calls a timeline shows: the first two that differed from Kafka's, and the last
        ones before the first fault (what the brokers did just before it struck), or the last."""
        if len(self.calls) <= TIMELINE_CALLS:
            return list(self.calls)
        first_fault = self.faults[0][0] if self.faults else None
        before = [c for c in self.calls[2:] if first_fault is None or c.time_ms <= first_fault]
        last = (before or self.calls[2:])[-(TIMELINE_CALLS - 2):]
        if self.kind == "rule-error" and self.calls[-1] not in last:
            last = last[1:] + [self.calls[-1]]
        return self.calls[:2] + last

    def timeline(self) -> str:
        events = [(t, f"nemesis: {text}") for t, text in self.faults]
        events += [(c.time_ms, c.line()) for c in self.shown_calls()]
        lines = [f"t={t:>6} ms  {text}" if not text.startswith("t=") else text for t, text in sorted(
            events, key=lambda e: e[0])]
        hidden = self.differing - len(self.shown_calls())
        if hidden > 0:
            lines.append(f"(and {hidden} more calls answered differently from Kafka's rule)")
        lines.append(f"then: {self.kind}: {self.what}")
        return "\n".join(lines)


@dataclass
class Verdict:
    """``ok`` and, if not, the first failing schedule (``failure``), shrunk."""

    rules: tuple[str, ...]
    schedules: int
    seed: int
    passed: int = 0
    failure: Finding | None = None
    given: Mapping[str, Callable] = field(default_factory=dict, repr=False)  # the rules judged

    @property
    def ok(self) -> bool:
        return self.failure is None

    def replay(self):
        """The failing schedule rebuilt on the rules judged, on a live ``Dashboard``
        (``minikafka.course.replay.Replay``): show it, press play, watch the faults strike."""
        from minikafka.course.replay import Replay

        return Replay(self)

    def __str__(self) -> str:
        yours = ", ".join(self.rules) or "none (Kafka's rules)"
        scenarios = f"{len(SCENARIOS)} scenario{'s' if len(SCENARIOS) != 1 else ''}"
        if self.ok:
            return (f"0 anomalies in {self.schedules} schedules (seed {self.seed}) and {scenarios}; "
                    f"your rules: {yours}\n"
                    f"(acks=all, min.insync.replicas=2, RF 3; kills, partitions, elections; then a calm phase)")
        f = self.failure
        if f.scenario is not None:
            where = f"FAILED: the scenario \"{f.scenario}\" (after {self.passed} schedules passed): {f.kind}"
        else:
            shrunk = ", ".join(f"{k}={v}" for k, v in f.shrunk.items()) or "not shrunk"
            where = (f"FAILED: schedule {self.passed + 1} of {self.schedules} (seed {f.seed}; shrunk: {shrunk}): "
                     f"{f.kind}")
        return "\n".join([
            where,
            f"your rules: {yours}; {calls_said(f.rule_calls, f.differing, f.kind == 'rule-error')}",
            (f"{f.records} records sent" if f.kind != "rule-error" else "the run stopped at your rule's call")
            + f"; timeline{'' if f.scenario else ' of the shrunk schedule'}:",
            f.timeline(),
        ])

    __repr__ = __str__

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(str(self))


# --- one judged schedule --------------------------------------------------------------------------------


def _calm(cluster, report: Report) -> None:
    """The calm phase (see the module docstring); what it finds goes in ``report.calm``."""
    report.calm = None
    if any(note.startswith("note: the cluster had not settled") for note in report.notes):
        return  # "stuck" already
    brokers = cluster.broker_ids
    for a in brokers:
        for b in brokers:
            if a != b:
                cluster.slow(a, b, CALM_LATENCY_MS)
    producer = KafkaProducer(bootstrap_servers=cluster, **{**CAMPAIGN_PRODUCER_CONFIG, "acks": "all",
                                                            "enable_idempotence": True,
                                                            "request_timeout_ms": 2_000,
                                                            "delivery_timeout_ms": 8_000})
    futures, shrunk = [], None
    start = cluster.now
    end = start + CALM_MS
    n = 0
    while cluster.now < end and shrunk is None:
        for _ in range(CALM_BURST):
            futures.append(producer.send(TOPIC, value=b"calm-%d" % n, partition=n % len(cluster.partitions_of(TOPIC))))
            n += 1
        cluster.advance(CALM_EVERY_MS)
        for state in cluster.partitions_of(TOPIC):
            if set(state.isr) != set(state.replicas):
                shrunk = (cluster.now, state)
                break
    if shrunk is not None:
        at, state = shrunk
        report.calm = ("isr-shrank-while-healthy", at,
                       f"{TOPIC}-{state.partition}'s ISR shrank to {list(state.isr)} at t={at} ms, "
                       f"{at - start} ms into the calm phase: every broker alive, every follower fetching")
        return
    cluster.run_until(lambda: all(f.is_done for f in futures), 10_000)
    failed = [i for i, f in enumerate(futures) if not f.succeeded()]
    if failed:
        report.calm = ("unacknowledged-while-healthy", cluster.now,
                       f"{len(failed)} of {len(futures)} acks=all writes of the calm phase were not acknowledged "
                       f"(e.g. calm-{failed[0]}) though every broker was alive and in sync")


def _finding(seed: int, report: Report | None, error: RuleError | None, trace: RuleTrace | None) -> Finding | None:
    if error is not None:
        trace = getattr(error, "trace", trace)
        return Finding("rule-error", str(error).splitlines()[0].split(": ", 1)[1], seed,
                       faults=list(getattr(error, "faults", [])),  # what struck before (campaign._run)
                       calls=list(trace.differing) + [error.call] if trace else [error.call],
                       differing=(trace.differing_count if trace else 0) + 1,
                       rule_calls=dict(trace.calls) if trace else {})
    kind = what = None
    for name, count in report.anomalies.items():
        if count:
            kind, what = name, str(report.cases[name][0])
            break
    if kind is None and report.raft is not None and report.raft.violations:
        kind, what = "metadata-quorum", str(report.raft.violations[0])
    if kind is None and report.unchecked:
        kind, what = "stuck", f"the final read of {', '.join(report.unchecked)} did not complete"
    if kind is None:
        for note in report.notes:
            if note.startswith("note: the cluster had not settled"):
                kind, what = "stuck", ("after healing, a replica never got back into the ISR with the leader's "
                                       "log (30 s)")
                break
    calm = getattr(report, "calm", None)
    if kind is None and calm is not None:
        kind, what = calm[0], calm[2]
    if kind is None:
        return None
    return Finding(kind, what, seed, faults=list(report.faults), calls=list(trace.differing),
                   differing=trace.differing_count, rule_calls=dict(trace.calls),
                   records=report.counts.get("ok", 0) + report.counts.get("info", 0) + report.counts.get("fail", 0))


def run_judged(rules: Mapping[str, Callable], seed: int, **shrink: Any) -> Finding | None:
    """One schedule of the judge's campaign on ``rules``: its ``Finding``, or None if it passed.
    ``shrink``: arguments of ``run_schedule`` that make it smaller (faults, partitions,
    duration_ms, interval_ms)."""
    params = _params(rules=rules, **SETTINGS, **shrink)
    traces: list[RuleTrace] = []

    def epilogue(cluster, report):
        _calm(cluster, report)
        traces.append(cluster.rule_trace)

    try:
        report = _run(seed, params, epilogue=epilogue)
    except RuleError as error:
        finding = _finding(seed, None, error, None)
    else:
        finding = _finding(seed, report, None, traces[0] if traces else RuleTrace())
    if finding is not None:
        finding.shrunk = dict(shrink)
    return finding


# --- a scenario: what random schedules rarely do ------------------------------------------------------


def rejoin_while_the_controller_is_slow(rules: Mapping[str, Callable], seed: int = 0) -> Finding | None:
    """KIP-497's case, made to happen. A follower F (the next leader in replica order) is cut
    off until it leaves the ISR; then the network heals but F's links to the leader stay slow
    (150 ms) and the leader's requests to the controller take 3 s. F catches up, the leader
    proposes it back into the ISR, and while that proposal is pending, acks=all writes stream
    in. The moment the controller commits F into the ISR, the leader is cut off and killed, and
    F becomes leader. Kafka's rule counted F (pending) all along, so F has every acknowledged
    record; a high watermark that ignores the pending ISR acknowledged records F never had."""
    config = {**CAMPAIGN_BROKER_CONFIG, "broker.session.timeout.ms": 6_000, "min.insync.replicas": 2}
    notes: list[tuple[int, str]] = []
    with run_cluster(3, seed=seed, config=config, record_history=False, rules=dict(rules)) as cluster, \
            _quiet_clients():
        def note(text: str) -> None:
            notes.append((cluster.now, text))

        cluster.create_topic(TOPIC, 1, 3)
        leader, f, x = cluster.partition_state(TOPIC, 0).replicas
        workload = Workload(cluster, TOPIC, **{**CAMPAIGN_PRODUCER_CONFIG, "acks": "all", "enable_idempotence": True})

        def write_until(done: Callable[[], bool], timeout_ms: int, every_ms: int = 10) -> None:
            end = cluster.now + timeout_ms
            while cluster.now < end and not done():
                workload.send()
                cluster.advance(every_ms)

        write_until(lambda: False, 300)
        cluster.partition([f], [leader])
        note(f"cut {f} off from {leader} (leader of {TOPIC}-0)")
        write_until(lambda: f not in cluster.partition_state(TOPIC, 0).isr, 10_000)
        cluster.heal()
        cluster.slow(leader, "controller", 3_000)
        cluster.slow(leader, f, 150)
        cluster.slow(f, leader, 150)
        note(f"heal; {leader} <-> {f} slow (150 ms), {leader} -> controller slow (3 s)")
        replica = cluster.replica(leader, TOPIC, 0)
        cluster.run_until(lambda: replica.pending_isr is not None and f in replica.pending_isr, 10_000)
        note(f"{leader} proposes {f} back into the ISR: pending {list(replica.pending_isr or ())}")
        write_until(lambda: f in cluster.partition_state(TOPIC, 0).isr, 10_000)
        note(f"the controller commits ISR {list(cluster.partition_state(TOPIC, 0).isr)}")
        cluster.partition([leader], [b for b in cluster.broker_ids if b != leader] + ["controller"])
        cluster.kill(leader)
        note(f"cut {leader} off and kill it")
        write_until(lambda: cluster.partition_state(TOPIC, 0).leader not in (-1, leader), 15_000)
        note(f"{cluster.partition_state(TOPIC, 0).leader} leads")
        write_until(lambda: False, 500)
        report = workload.finish()
        report.faults = notes
        finding = _finding(seed, report, None, cluster.rule_trace)
    if finding is not None:
        finding.scenario = rejoin_while_the_controller_is_slow.title
    return finding


rejoin_while_the_controller_is_slow.title = "a follower rejoins the ISR while the controller is slow (KIP-497)"


def drop_while_the_controller_is_unreachable(rules: Mapping[str, Callable], seed: int = 0) -> Finding | None:
    """KIP-497's other half. A follower F (the next leader in replica order) is cut off from the
    leader, and a moment later the leader is cut off from the controller: its proposal to drop
    F never arrives, so F stays in the committed ISR. Writes stream in until the controller
    fences the silent leader and F becomes leader. Kafka's rule counted F (committed) all along,
    so nothing past F's log end was acknowledged; a high watermark over the proposed ISR alone
    acknowledged records F never had."""
    config = {**CAMPAIGN_BROKER_CONFIG, "broker.session.timeout.ms": 6_000, "replica.socket.timeout.ms": 10_000,
              "min.insync.replicas": 2}
    notes: list[tuple[int, str]] = []
    with run_cluster(3, seed=seed, config=config, record_history=False, rules=dict(rules)) as cluster, \
            _quiet_clients():
        def note(text: str) -> None:
            notes.append((cluster.now, text))

        cluster.create_topic(TOPIC, 1, 3)
        leader, f, x = cluster.partition_state(TOPIC, 0).replicas
        workload = Workload(cluster, TOPIC, **{**CAMPAIGN_PRODUCER_CONFIG, "acks": "all", "enable_idempotence": True})

        def write_until(done: Callable[[], bool], timeout_ms: int, every_ms: int = 10) -> None:
            end = cluster.now + timeout_ms
            while cluster.now < end and not done():
                workload.send()
                cluster.advance(every_ms)

        write_until(lambda: False, 300)
        cluster.partition([f], [leader])
        note(f"cut {f} off from {leader} (leader of {TOPIC}-0)")
        write_until(lambda: False, 1_000)
        cluster.partition([leader], ["controller"])
        note(f"cut {leader} off from the controller")
        write_until(lambda: cluster.partition_state(TOPIC, 0).leader not in (-1, leader), 15_000)
        note(f"{cluster.partition_state(TOPIC, 0).leader} leads")
        cluster.kill(leader)
        note(f"kill {leader}")
        write_until(lambda: False, 500)
        report = workload.finish()
        report.faults = notes
        finding = _finding(seed, report, None, cluster.rule_trace)
    if finding is not None:
        finding.scenario = drop_while_the_controller_is_unreachable.title
    return finding


drop_while_the_controller_is_unreachable.title = ("a follower is dropped while the controller is unreachable "
                                                  "(KIP-497)")


def new_leader_dies_at_once(rules: Mapping[str, Callable], seed: int = 0) -> Finding | None:
    """A new leader dies before its followers have fetched from it. Leader A's link to follower
    C is slow, so C lags B; A is cut off and killed, B (next in replica order) leads, C's
    fetches to B take 500 ms, and as soon as a reader has read from B past C's log end, B is
    cut off and killed too: C leads, without those records. Kafka's rule keeps a new leader's
    high watermark where it was until its followers' fetches say how far they are, so no reader
    saw them and no write past C's log end was acknowledged; a rule that skips followers it
    has not heard from yet (LEO -1) acknowledges writes, and shows records, that die with B."""
    config = {**CAMPAIGN_BROKER_CONFIG, "min.insync.replicas": 2}
    notes: list[tuple[int, str]] = []
    with run_cluster(3, seed=seed, config=config, record_history=False, rules=dict(rules)) as cluster, \
            _quiet_clients():
        def note(text: str) -> None:
            notes.append((cluster.now, text))

        cluster.create_topic(TOPIC, 1, 3)
        a, b, c = cluster.partition_state(TOPIC, 0).replicas
        workload = Workload(cluster, TOPIC, **{**CAMPAIGN_PRODUCER_CONFIG, "acks": "all", "enable_idempotence": True})

        def write_until(done: Callable[[], bool], timeout_ms: int, every_ms: int = 10) -> None:
            end = cluster.now + timeout_ms
            while cluster.now < end and not done():
                workload.send()
                cluster.advance(every_ms)

        write_until(lambda: False, 300)
        cluster.slow(a, c, 300)
        note(f"{a} (leader of {TOPIC}-0) -> {c} slow (300 ms)")
        write_until(lambda: False, 1_000)
        cluster.partition([a], [b, c, "controller"])
        cluster.kill(a)
        note(f"cut {a} off and kill it; {c} -> {b} slow (500 ms)")
        cluster.slow(c, b, 500)
        c_end = cluster.replica(c, TOPIC, 0).log_end_offset
        polls = workload.history.polls

        def read_past_c() -> bool:
            return cluster.partition_state(TOPIC, 0).leader == b and any(
                p.records and p.records[-1][0] >= c_end for p in polls[-5:])
        write_until(read_past_c, 10_000)
        if cluster.partition_state(TOPIC, 0).leader == b:
            cluster.partition([b], [a, c, "controller"])
            cluster.kill(b)
            note(f"{b} leads; a reader read past {c}'s log end ({c_end}); cut {b} off and kill it")
        write_until(lambda: cluster.partition_state(TOPIC, 0).leader not in (-1, a, b), 15_000)
        note(f"{cluster.partition_state(TOPIC, 0).leader} leads")
        write_until(lambda: False, 500)
        report = workload.finish()
        report.faults = notes
        finding = _finding(seed, report, None, cluster.rule_trace)
    if finding is not None:
        finding.scenario = new_leader_dies_at_once.title
    return finding


new_leader_dies_at_once.title = "a new leader dies before its followers fetch from it"
SCENARIOS = (rejoin_while_the_controller_is_slow, drop_while_the_controller_is_unreachable, new_leader_dies_at_once)


def _drawn(seed: int) -> tuple[int, int]:
    """(partitions, faults) a schedule draws when not told (``campaign._run``'s first draws)."""
    rng = random.Random(f"faults/{seed}")
    return rng.randint(1, 3), rng.randint(1, 4)


def shrink(rules: Mapping[str, Callable], finding: Finding, budget: int = 12) -> Finding:
    """Make a failing schedule smaller, one argument at a time, keeping each smaller value under
    which the same seed still fails (any failure: a smaller one may fail differently)."""
    partitions, faults = _drawn(finding.seed)
    best, kept = finding, {}
    steps = [("faults", list(range(faults))), ("partitions", [1] if partitions > 1 else []),
             ("duration_ms", [750, 1_500]), ("interval_ms", [40, 20])]
    for name, values in steps:
        for value in values:
            if budget <= 0 or out_of_time():
                return best
            budget -= 1
            found = run_judged(dict(rules), finding.seed, **{**kept, name: value})
            if found is not None:
                kept[name] = value
                best = found
                break
    return best


# Other lectures' judges, by the lecture of the rules given: "module:function", imported when
# first used, each called as function(rules, seed=seed) or function(rules, schedules, seed=seed)
# and returning a verdict with ``ok``. Lecture 04's campaign is this module's own.
JUDGES: dict[str, str] = {
    "01": "minikafka.course.tester_log:judge_log",
    "02": "minikafka.course.tester_log:judge_partitioner",
    "03": "minikafka.course.tester_cluster:judge",
    "04": "minikafka.course.tester:judge_replication",
    "05": "minikafka.course.tester_producer:judge",
    "06": "minikafka.course.tester_groups:judge",
    "07": "minikafka.course.tester_delivery:judge",
    "08": "minikafka.course.tester_raft:judge",
}


def judge(rules: Mapping[str, Callable], schedules: int | None = None, seed: int = 0, *,
          shrinking: bool = True) -> Verdict:
    """Run the judge's fault campaign (see the module docstring) on a cluster whose brokers
    call ``rules`` ({rule name: function}); stop at the first failing schedule and shrink it.
    ``schedules``: None for each campaign's default (``DEFAULT_SCHEDULES`` here). Rules of
    each lecture go to that lecture's judge (``JUDGES``), in lecture order; the verdict is the
    first that fails, else the last."""
    import importlib
    import inspect

    from minikafka.rules import validate

    rules = validate(rules)
    if not rules:
        raise IllegalArgumentError("no rules to judge: give {rule name: your function}, e.g. my_rules('exercises/') "
                                   "once it lists a rule as yours (with none, every rule is Kafka's)")
    if schedules is not None and (not isinstance(schedules, int) or isinstance(schedules, bool) or schedules < 1):
        raise IllegalArgumentError(f"schedules must be an int >= 1, not {schedules!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise IllegalArgumentError(f"seed must be an int, not {seed!r}")
    passed = []
    for lecture in sorted({RULES[name].lecture for name in rules}):
        module, function = JUDGES[lecture].split(":")
        campaign = getattr(importlib.import_module(module), function)
        mine = {name: fn for name, fn in rules.items() if RULES[name].lecture == lecture}
        options = {"shrinking": shrinking} if "shrinking" in inspect.signature(campaign).parameters else {}
        with allowance(ALLOWANCE_S):
            verdict = campaign(mine, *(() if schedules is None else (schedules,)), seed=seed, **options)
        if not verdict.ok:
            return verdict
        passed.append(verdict)
    return passed[0] if len(passed) == 1 else Verdicts(tuple(passed))


@dataclass
class Verdicts:
    """What ``judge`` answers when the rules of several lectures all passed: each lecture's
    verdict, in lecture order (a failure is answered by its own lecture's verdict alone)."""

    each: tuple

    ok = True
    failure = None

    @property
    def rules(self) -> tuple[str, ...]:
        return tuple(name for verdict in self.each for name in verdict.rules)

    def __str__(self) -> str:
        return "\n".join(str(verdict) for verdict in self.each)

    __repr__ = __str__

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(str(self))


def judge_replication(rules: Mapping[str, Callable], schedules: int = DEFAULT_SCHEDULES, seed: int = 0, *,
                      shrinking: bool = True) -> Verdict:
    """Notebook 04's campaign (see the module docstring): ``schedules`` random fault schedules on
    brokers calling ``rules``, then the ``SCENARIOS``; stop at the first failure and shrink it."""
    verdict = Verdict(tuple(sorted(rules)), schedules, seed, given=dict(rules))
    for s in schedule_seeds(seed, schedules):
        finding = run_judged(rules, s)
        if finding is not None:
            verdict.failure = shrink(rules, finding) if shrinking else finding
            return verdict
        verdict.passed += 1
    for scenario in SCENARIOS:
        try:
            finding = scenario(rules, seed)
        except RuleError as error:
            finding = _finding(seed, None, error, None)
            finding.scenario = scenario.title
        if finding is not None:
            verdict.failure = finding
            return verdict
    return verdict


__all__ = ["judge", "judge_replication", "Verdict", "Verdicts", "Finding", "run_judged", "shrink", "RULES"]
