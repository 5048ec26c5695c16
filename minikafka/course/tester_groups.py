"""The tester of notebook 06: a consumer group on a student's assignor, judged as its users see it.

Theory of operation
-------------------
``judge({"range_assign": fn})`` (or ``"reassign"``) dispatches here (``tester.JUDGES``). Each
schedule is one simulated cluster with a consumer group whose members call the student's rule
when they lead a rebalance (``Cluster(rules=...)``: in Kafka's classic protocol the coordinator
only collects the members; the leader, a consumer, runs the assignor). The group reads
``trucks_gps`` (10 partitions; for the range rule also ``eta``, 3 partitions, which only some
members read) while a producer keeps writing, and a nemesis drawn from the schedule's seed
changes the group: a consumer killed (and maybe restarted: a new member), a consumer added, a
consumer whose processing stalls past ``max_poll_interval_ms`` (thrown out, then back). Every
member polls every 100 ms and commits what it got at once (``commit()``): at-least-once, where
only records polled and never committed may be read again.

What a Kafka user would see, checked:

- *the assignments handed out*, at every rebalance the rule led (each call the leader made):
  ``two-owners`` (a partition given to two members: both read it, every record twice),
  ``unassigned`` (a partition given to nobody: its records wait until the next rebalance, for
  ever in a stable group), ``not-subscribed`` (a member given a topic it does not read),
  ``unbalanced`` (per topic among its readers, counts differing by more than one),
  ``order-dependent`` (the same group listed in another order, as after members rejoin in
  another order or another member leads, gets another assignment: Kafka sorts members by id),
  and for the sticky rule ``needless-moves`` (more partitions taken from members still in the
  group than balance requires);
- *the records*: ``never-consumed`` (a record still unread ``SETTLE_MS`` after the nemesis has
  stopped and every member polls again: the group never settled with every partition read) and
  ``consumed-twice`` (a record read again after its first read was committed: more than
  at-least-once allows).

After the random schedules comes one named scenario (``SCENARIO``): a newcomer whose member id
sorts first joins two members that split the partitions evenly, the case where a sticky rule that
hands the extra partition to the first member by id moves more than it must.

The first failing schedule is shrunk (fewer faults) and shown as a timeline: the nemesis, the
rule's calls that differed from Kafka's (``minikafka.rules``' trace), and what was found.
"""

from __future__ import annotations

import logging
import random
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from minikafka.errors import KafkaError
from minikafka.rules import RULES, RuleCall, RuleError, calls_said, out_of_time

DEFAULT_SCHEDULES = 8
GROUP = "judge"
TOPICS = {"trucks_gps": 10, "eta": 3}  # the course's truck topic has 10 partitions
CONSUMER = dict(session_timeout_ms=6_000, heartbeat_interval_ms=1_000, max_poll_interval_ms=6_000,
                enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=20)
STEP_MS = 100  # the members' poll loop
RUN_MS = 40_000  # the nemesis's time: up to 4 faults, one per 8 s slot
SETTLE_MS = 40_000  # then: every member back and polling, until all is read
TIMELINE_CALLS = 6


@dataclass
class GroupFinding:
    kind: str
    what: str
    seed: int
    rule: str
    shrunk: dict = field(default_factory=dict)
    faults: list[tuple[int, str]] = field(default_factory=list)
    calls: list[RuleCall] = field(default_factory=list)  # calls that differed from Kafka's
    differing: int = 0
    rule_calls: int = 0
    records: int = 0
    scenario: str | None = None  # the named scenario's, not a random schedule's

    def timeline(self) -> str:
        shown = self.calls[:TIMELINE_CALLS]
        events = [(t, f"t={t:>6} ms  nemesis: {text}") for t, text in self.faults]
        events += [(c.time_ms, c.line()) for c in shown]
        lines = [text for _, text in sorted(events, key=lambda e: e[0])]
        if self.differing > len(shown):
            lines.append(f"(and {self.differing - len(shown)} more calls answered differently from Kafka's rule)")
        lines.append(f"then: {self.kind}: {self.what}")
        return "\n".join(lines)


@dataclass
class GroupVerdict:
    rules: tuple[str, ...]
    schedules: int
    seed: int
    passed: int = 0
    failure: GroupFinding | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    def __str__(self) -> str:
        yours = ", ".join(self.rules)
        if self.ok:
            return (f"0 anomalies in {self.schedules} schedules (seed {self.seed}) and 1 scenario; your rules: {yours}\n"
                    f"(a consumer group on your assignor: consumers killed, restarted, added, stalled; "
                    f"every assignment, every record and the group's recovery checked)")
        f = self.failure
        if f.scenario is not None:
            where = f"FAILED: the scenario \"{f.scenario}\" (after {self.passed} schedules passed): {f.kind}"
        else:
            shrunk = ", ".join(f"{k}={v}" for k, v in f.shrunk.items() if k == "faults") or "not shrunk"
            where = f"FAILED: schedule {self.passed + 1} of {self.schedules} (seed {f.seed}; shrunk: {shrunk}): {f.kind}"
        return "\n".join([
            where,
            f"your rules: {yours}; {calls_said({f.rule: f.rule_calls}, f.differing, f.kind == 'rule-error')}",
            f"{f.records} records written; timeline{'' if f.scenario else ' of the shrunk schedule'}:",
            f.timeline(),
        ])

    __repr__ = __str__

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(str(self))


# --- what is wrong with one assignment -----------------------------------------------------------------


def _owners(result: Mapping) -> dict[Any, list]:
    owners: dict[Any, list] = {}
    for member in sorted(result):
        for item in result[member]:
            owners.setdefault(tuple(item) if isinstance(item, list) else item, []).append(member)
    return owners


def _short(member: str) -> str:
    return member if len(member) <= 14 else member[:14] + "…"


def range_problem(fn: Callable, args: tuple, result: Mapping) -> tuple[str, str] | None:
    counts, subs = args
    owners = _owners(result)
    for (t, p), ms in sorted(owners.items()):
        if len(ms) > 1:
            return "two-owners", (f"{t}-{p} went to {len(ms)} members at once ({', '.join(map(_short, ms))}): "
                                  f"each reads it from the last commit, every record of it read twice")
        if t not in subs[ms[0]]:
            return "not-subscribed", f"{_short(ms[0])} was given {t}-{p} but reads only {sorted(subs[ms[0]])}"
    for t, n in sorted(counts.items()):
        readers = sorted(m for m in subs if t in subs[m])
        if not readers:
            continue
        missing = [p for p in range(n) if (t, p) not in owners]
        if missing:
            return "unassigned", (f"{t}-{missing[0]} went to nobody ({len(missing)} of {t}'s {n} partitions): "
                                  f"no member reads its records until the next rebalance")
        load = {m: sum(1 for (tt, _), ms in owners.items() if tt == t and m in ms) for m in readers}
        if max(load.values()) - min(load.values()) > 1:
            hi, lo = max(load, key=load.get), min(load, key=load.get)
            return "unbalanced", (f"of {t}'s {n} partitions, {_short(hi)} reads {load[hi]} and {_short(lo)} "
                                  f"{load[lo]}: Kafka's range gives each reader n // m or one more")
    other = fn(dict(counts), {m: list(subs[m]) for m in reversed(list(subs))})
    if _canon(other) != _canon(result):
        return "order-dependent", ("the same members listed in the reverse order got another assignment: "
                                   "which member reads what depends on who joined first, not on the member ids "
                                   "(a rebalance where nothing changed moves partitions)")
    return None


def minimal_moves(n: int, previous: Mapping, members: list) -> int:
    """The fewest partitions that must leave members still in the group to balance it."""
    if not members:
        return 0
    quota, extra = divmod(n, len(members))
    kept = sorted((len({p for p in previous.get(m, ()) if 0 <= p < n}) for m in members), reverse=True)
    return sum(max(0, k - quota - (1 if i < extra else 0)) for i, k in enumerate(kept))


def sticky_problem(fn: Callable, args: tuple, result: Mapping) -> tuple[str, str] | None:
    n, previous, members = args
    owners = _owners(result)
    for p, ms in sorted(owners.items()):
        if len(ms) > 1:
            return "two-owners", (f"trucks_gps-{p} went to {len(ms)} members at once ({', '.join(map(_short, ms))}): "
                                  f"each reads it from the last commit, every record of it read twice")
    missing = [p for p in range(n) if p not in owners]
    if missing:
        return "unassigned", (f"trucks_gps-{missing[0]} went to nobody ({len(missing)} of {n} partitions): "
                              f"no member reads its records until the next rebalance")
    load = {m: len(result.get(m, ())) for m in members}
    if max(load.values()) - min(load.values()) > 1:
        hi, lo = max(load, key=load.get), min(load, key=load.get)
        return "unbalanced", f"{_short(hi)} reads {load[hi]} partitions and {_short(lo)} {load[lo]}"
    moved = [(p, m, owners[p][0]) for m in members for p in previous.get(m, ()) if p in owners and owners[p][0] != m]
    need = minimal_moves(n, previous, members)
    if len(moved) > need:
        p, src, dst = moved[0]
        return "needless-moves", (f"{len(moved)} partitions moved away from members still in the group "
                                  f"(e.g. trucks_gps-{p}: {_short(src)} -> {_short(dst)}) where balance needed "
                                  f"{need}: each move stops a reader and restarts it elsewhere from the last commit")
    other = fn(n, {m: list(previous[m]) for m in reversed(list(previous))}, list(reversed(members)))
    if _canon(other) != _canon(result):
        return "order-dependent", ("the same members listed in the reverse order got another assignment: "
                                   "which member reads what depends on who joined first")
    return None


def _canon(result: Any) -> Any:
    try:
        return {m: sorted(tuple(x) if isinstance(x, list) else x for x in v) for m, v in result.items()}
    except Exception:  # nonsense: never equal to a real answer
        return object()


PROBLEMS = {"range_assign": range_problem, "reassign": sticky_problem}


# --- one schedule --------------------------------------------------------------------------------------


@contextmanager
def _quiet() -> Iterator[None]:
    lg = logging.getLogger("minikafka")
    level = lg.level
    lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        lg.setLevel(level)


class _Recorder:
    """The student's function, with every call it answers kept for the checks."""

    def __init__(self, fn: Callable, name: str, clock: Callable[[], int]) -> None:
        self.fn, self.name, self.clock = fn, name, clock
        self.problem: tuple[int, str, str] | None = None
        self.calls = 0
        self.__signature__ = __import__("inspect").signature(RULES[name].reference)

    def __call__(self, *args: Any) -> Any:
        result = self.fn(*args)
        self.calls += 1
        if self.problem is None and RULES[self.name].check(dict(zip(RULES[self.name].parameters, args)),
                                                            result) is None:
            found = PROBLEMS[self.name](self.fn, args, result)
            if found is not None:
                self.problem = (self.clock(), *found)
        return result


# The named scenario, after the random schedules: what they rarely line up. Two members share the
# 10 partitions 5 and 5; a third joins whose client id, "eta-10", sorts *first* as a string
# ("eta-10" < "eta-2"); then one of the first two dies. Balance lets the two old members keep 4
# and 3 (3 moves); a sticky rule that hands the one extra partition to the first member by id,
# not to a member that owns the most, moves 4.
SCENARIO = dict(names=["eta-2", "eta-3"], script=[(8_000, "add eta-10"), (16_000, "kill eta-3")])
SCENARIO_TITLE = "a newcomer whose id sorts first (eta-10 joins eta-2 and eta-3), then eta-3 dies"


def run_group_schedule(rules: Mapping[str, Callable], seed: int, *, faults: int | None = None,
                       names: list[str] | None = None, script: list[tuple[int, str]] | None = None,
                       ) -> GroupFinding | None:
    """One schedule (see the module docstring): its finding, or None. ``names`` and ``script``
    (``[(time, "add NAME" | "kill NAME")]``) replace the drawn group and nemesis (a scenario)."""
    from minikafka import Cluster, KafkaConsumer, KafkaProducer

    (name, fn), = rules.items()
    rng = random.Random(f"groups/{seed}")
    strategy = "range" if name == "range_assign" else "sticky"
    topics = dict(TOPICS) if strategy == "range" else {"trucks_gps": TOPICS["trucks_gps"]}
    drawn = rng.randint(2, 4)
    n_faults = drawn if faults is None else min(faults, drawn)
    clock = [lambda: -1]
    recorder = _Recorder(fn, name, lambda: clock[0]())
    notes: list[tuple[int, str]] = []
    with _quiet(), Cluster(brokers=1, seed=seed, config={"offsets.topic.num.partitions": 1,
                                                           "group.initial.rebalance.delay.ms": 0},
                           rules={name: recorder}) as c:
        clock[0] = lambda: c.now
        for t, n in topics.items():
            c.create_topic(t, partitions=n, replication_factor=1)
        producer = KafkaProducer(bootstrap_servers=c, acks=1)
        written = 0

        def write(k: int) -> None:
            nonlocal written
            for _ in range(k):
                t = "eta" if strategy == "range" and written % 3 == 2 else "trucks_gps"
                producer.send(t, value=b"%d" % written, partition=rng.randrange(topics[t]))
                written += 1

        members: list = []
        stalled: dict[Any, int] = {}  # consumer -> when it polls again
        reads: dict[tuple, list] = {}  # (topic, partition, offset) -> [(time, member, committed)]

        def new_member(name: str | None = None, every_topic: bool = False) -> None:
            subs = (sorted(topics) if every_topic or strategy == "sticky" or len(members) % 2 == 0
                    else ["trucks_gps"])
            # Client ids eta-1, eta-2, ...: from eta-10 on, a newcomer's member id sorts first.
            members.append(KafkaConsumer(*subs, bootstrap_servers=c, group_id=GROUP,
                                         client_id=name or f"eta-{len(members) + 1}",
                                         partition_assignment_strategy=(strategy,), **CONSUMER))

        def step() -> None:
            for m in members:
                if not m.alive or stalled.get(m, 0) > c.now:
                    continue
                try:
                    got = m.poll(timeout_ms=0)
                except KafkaError:
                    continue
                batch = [(r.topic, r.partition, r.offset) for rs in got.values() for r in rs]
                ok = True
                if batch:
                    try:
                        m.commit()
                    except KafkaError:
                        ok = False
                for key in batch:
                    reads.setdefault(key, []).append((c.now, m.config["client_id"], ok))
            c.advance(STEP_MS)

        for client_id in names or [None] * 3:
            new_member(client_id)
        write(60)
        if script is None:
            # One fault per 8 s slot, so most rebalances complete before the next fault strikes.
            schedule = [4_000 + 8_000 * k + rng.randrange(3_000) for k in range(n_faults)]
            kinds = [rng.choice(("kill", "kill-restart", "add", "stall")) for _ in schedule]
        else:
            schedule, kinds = [t for t, _ in script], [k for _, k in script]
        restarts: list[tuple[int, Any]] = []
        next_write = c.now
        while c.now < RUN_MS and recorder.problem is None:
            if c.now >= next_write:  # the steady producer: 3 records every 500 ms
                write(3)
                next_write += 500
            while schedule and schedule[0] <= c.now:
                schedule.pop(0)
                kind = kinds.pop(0)
                live = [m for m in members if m.alive]
                if kind.startswith("add "):
                    new_member(kind[4:])
                    notes.append((c.now, f"consumer {kind[4:]} joins"))
                    continue
                if kind.startswith("kill "):
                    victim = next(m for m in live if m.config["client_id"] == kind[5:])
                    c.kill_consumer(victim)
                    notes.append((c.now, f"kill consumer {kind[5:]}"))
                    continue
                if kind == "add" or len(live) < 2:
                    new_member()
                    notes.append((c.now, f"consumer {members[-1].config['client_id']} joins"))
                    continue
                victim = live[rng.randrange(len(live))]
                if kind == "stall":
                    stalled[victim] = c.now + CONSUMER["max_poll_interval_ms"] + 3_000
                    notes.append((c.now, f"consumer {victim.config['client_id']} stalls for "
                                         f"{CONSUMER['max_poll_interval_ms'] + 3_000} ms (past max.poll.interval.ms)"))
                else:
                    c.kill_consumer(victim)
                    notes.append((c.now, f"kill consumer {victim.config['client_id']}"))
                    if kind == "kill-restart":
                        restarts.append((c.now + rng.randrange(1_000, 8_000), victim))
            for at, victim in list(restarts):
                if at <= c.now:
                    restarts.remove((at, victim))
                    c.restart_consumer(victim)
                    notes.append((c.now, f"restart consumer {victim.config['client_id']} (a new member)"))
            step()
        producer.flush()
        ends = {(t, p): c.replica(1, t, p).high_watermark for t, n in topics.items() for p in range(n)}
        settle_end = c.now + SETTLE_MS
        stalled.clear()
        # Kafka gives a topic's partitions only to members that read it: if the nemesis killed every
        # reader of a topic (eta-1 and eta-3 both dead), nobody owes its records, and the group is
        # right to leave them. A newcomer that reads every topic joins, so the settle still judges
        # whether the rule hands every partition out.
        orphaned = sorted(set(topics) - {t for m in members if m.alive for t in m.subscription() or ()})
        if orphaned:
            new_member(every_topic=True)
            notes.append((c.now, f"consumer {members[-1].config['client_id']} joins "
                                 f"(no live member read {', '.join(orphaned)})"))

        def all_read() -> bool:
            return all((t, p, o) in reads for (t, p), end in ends.items() for o in range(end))
        while c.now < settle_end and recorder.problem is None and not all_read():
            step()
        trace = c.rule_trace
        finding = None
        if recorder.problem is not None:
            at, kind, what = recorder.problem
            finding = GroupFinding(kind, f"at t={at} ms, {what}", seed, name)
        else:
            twice = _read_twice(reads)
            unread = sorted(k for (t, p), end in ends.items() for k in [(t, p, o) for o in range(end)]
                            if k not in reads)
            if twice:
                (t, p, o), first, again = twice
                finding = GroupFinding("consumed-twice", (
                    f"{t}-{p} offset {o} was read by consumer {first[1]} at t={first[0]} ms and committed, then read "
                    f"again by consumer {again[1]} at t={again[0]} ms"), seed, name)
            elif unread:
                t, p, o = unread[0]
                finding = GroupFinding("never-consumed", (
                    f"{len(unread)} records never read, {SETTLE_MS} ms after the last fault (e.g. {t}-{p} offset {o}): "
                    f"the group settled without anyone reading {t}-{p}"), seed, name)
        if finding is not None:
            finding.faults = notes
            finding.calls = list(trace.differing)
            finding.differing = trace.differing_count
            finding.rule_calls = trace.calls.get(name, 0)
            finding.records = written
        return finding


def _read_twice(reads: dict) -> tuple | None:
    for key in sorted(reads):
        seen = reads[key]
        for i, first in enumerate(seen):
            if first[2]:
                for again in seen[i + 1:]:
                    if again[0] > first[0]:
                        return key, first, again
                break
    return None


def _judged(rules: Mapping[str, Callable], seed: int, **shrink: Any) -> GroupFinding | None:
    try:
        finding = run_group_schedule(rules, seed, **shrink)
    except RuleError as error:
        trace = getattr(error, "trace", None)
        finding = GroupFinding("rule-error", str(error).splitlines()[0].split(": ", 1)[1], seed, error.call.rule,
                               calls=(list(trace.differing) if trace else []) + [error.call],
                               differing=(trace.differing_count if trace else 0) + 1,
                               rule_calls=trace.calls.get(error.call.rule, 0) if trace else 1)
    if finding is not None:
        finding.shrunk = dict(shrink)
    return finding


def judge(rules: Mapping[str, Callable], schedules: int = DEFAULT_SCHEDULES, seed: int = 0, *,
          shrinking: bool = True) -> GroupVerdict:
    """Judge notebook 06's rules (``range_assign``, ``reassign``): each on its own group
    campaign of ``schedules`` schedules."""
    from minikafka.checker.campaign import schedule_seeds

    verdict = GroupVerdict(tuple(sorted(rules)), schedules, seed)
    for name in sorted(rules):
        verdict.passed = 0
        for s in schedule_seeds(seed, schedules):
            finding = _judged({name: rules[name]}, s)
            if finding is not None:
                if shrinking:
                    for k in range(0, 4):
                        if out_of_time():
                            break
                        smaller = _judged({name: rules[name]}, s, faults=k)
                        if smaller is not None:
                            finding = smaller
                            break
                verdict.failure = finding
                return verdict
            verdict.passed += 1
        finding = _judged({name: rules[name]}, seed, **SCENARIO)
        if finding is not None:
            finding.scenario = SCENARIO_TITLE
            verdict.failure = finding
            return verdict
    return verdict
