"""The tester of notebook 08: a student's Raft rules run the controller quorum, a fault campaign judges it.

Theory of operation
-------------------
``judge(rules)`` with rules of notebook 08 (``grant_vote``, ``metadata_truncation_offset``)
comes here (``tester.judge`` dispatches by the rules' lecture). It is MIT 6.5840's Raft tester
made of this package's parts: a quorum of real ``KafkaRaftClient`` voters (3 or 5, and an
observer, as a broker is) in the simulated world, every node calling the student's functions
where it would call Kafka's rules, under ``checker.raft.run_raft_schedule``'s nemesis: crashes
(the leader's too, mid-append), restarts, partitions, an isolated leader, lossy links, heals.
Records are appended through whoever leads. Then everything heals, every node restarts, and the
quorum must settle: one leader, every log whole, committed and delivered.

``checker.raft.check_raft`` then judges what the nodes *reported*, and a schedule fails on the
first of:

- ``two-leaders``: two leaders in one epoch (Election Safety), and ``double-vote``: a voter that
  voted for two candidates in one epoch;
- ``committed-lost`` / ``committed-changed``: a metadata record some node applied is missing from
  a voter's final log, or another one stands at its offset; ``assertion``: a node was about to
  cut a record it had already applied (the client asserts it never does);
- ``no-convergence``: after the faults healed, the quorum never elected a leader, or never
  brought every log level with it;
- ``rule-error``: at the call, the rule raised, hung or returned something no node can act on
  (``minikafka.rules``).

After the random schedules come named *scenarios*, cases random faults rarely line up
(``SCENARIOS``): a cut-off leader that returns with a longer log of an older epoch (where a
vote rule comparing log ends alone elects it over committed records), and a deposed leader
that returns with records of an epoch the new leader never had, its older epoch shorter than
the leader's (where a cut at the leader's end alone keeps records that do not match, forever).

With Kafka's rules every schedule passes (tests/test_raft.py runs 200). The first failing
schedule is *shrunk* (fewer faults, three voters, no observer, a shorter run: each kept if the
same seed still fails) and shown as a timeline: what the nemesis did, and each call of the rules
whose answer differed from Kafka's (which voter, the arguments, what it returned, what Kafka's
rule returns), then the violation.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping

from minikafka.checker.campaign import schedule_seeds
from minikafka.checker.raft import (
    FAST_RAFT_CONFIG,
    RaftHarness,
    RaftHistory,
    RaftReport,
    _scratch_dir,
    check_raft,
    run_raft_schedule,
)
from minikafka.course.tester import Finding, Verdict
from minikafka.rules import RuleError, RuleTrace, out_of_time

LECTURE = "08"
DEFAULT_SCHEDULES = 80  # ~0.12 s each on this machine: the whole judge stays well under 20 s
# The order in which one schedule's violations are reported: safety first, liveness last.
ORDER = ("two-leaders", "double-vote", "committed-changed", "committed-lost", "assertion", "delivery-order",
         "no-convergence")


def _finding(seed: int, report: RaftReport | None, history: RaftHistory | None, trace: RuleTrace | None,
             error: RuleError | None = None) -> Finding | None:
    if error is not None:
        trace = getattr(error, "trace", trace)
        return Finding("rule-error", str(error).splitlines()[0].split(": ", 1)[1], seed,
                       calls=list(trace.differing) + [error.call] if trace else [error.call],
                       differing=(trace.differing_count if trace else 0) + 1,
                       rule_calls=dict(trace.calls) if trace else {})
    if report.ok:
        return None
    first = min(report.violations, key=lambda v: ORDER.index(v.kind) if v.kind in ORDER else len(ORDER))
    what = first.detail
    if first.kind == "no-convergence":
        what = f"after every fault healed, the quorum did not settle in 30 s: {what}"
    return Finding(first.kind, what, seed, faults=list(history.faults), calls=list(trace.differing),
                   differing=trace.differing_count, rule_calls=dict(trace.calls), records=history.appended)


def run_judged(rules: Mapping[str, Callable], seed: int, **shrink: Any) -> Finding | None:
    """One schedule of the quorum's campaign on ``rules``: its ``Finding``, or None if it passed.
    ``shrink``: arguments of ``run_raft_schedule`` that make it smaller (faults, voters,
    observers, duration_ms)."""
    seen: dict[str, Any] = {}

    def epilogue(harness, history):
        seen["trace"], seen["history"] = harness.rule_trace, history

    try:
        report = run_raft_schedule(seed, rules=dict(rules), epilogue=epilogue, **shrink)
    except RuleError as error:
        finding = _finding(seed, None, None, None, error)
    else:
        finding = _finding(seed, report, seen["history"], seen["trace"])
    if finding is not None:
        finding.shrunk = dict(shrink)
    return finding


def shrink(rules: Mapping[str, Callable], finding: Finding, budget: int = 12) -> Finding:
    """Make a failing schedule smaller, one argument at a time, keeping each smaller value
    under which the same seed still fails (any failure: a smaller one may fail differently)."""
    if finding.kind == "rule-error":
        faults = 0  # a contract broken at the call: try it with no faults at all first
    else:
        faults = sum(1 for _, text in finding.faults if not text.startswith(("restart ", "heal")) or
                     "down and up" in text)
    voters = random.Random(f"raft-faults/{finding.seed}").choice((3, 3, 5))
    best, kept = finding, {}
    steps = [("faults", list(range(faults))), ("voters", [3] if voters > 3 else []), ("observers", [0]),
             ("duration_ms", [1_000, 2_000])]
    for name, values in steps:
        for value in values:
            if budget <= 0 or out_of_time():
                return best
            budget -= 1
            found = run_judged(rules, finding.seed, **{**kept, name: value})
            if found is not None:
                kept[name] = value
                best = found
                break
    return best


# --- a scenario: what random schedules rarely do ------------------------------------------------------


def stale_leader_returns_with_a_longer_log(rules: Mapping[str, Callable], seed: int = 0) -> Finding | None:
    """A leader A of three voters is cut off and keeps appending: its log grows long in its old
    epoch, none of it committed. B and C elect a leader in a newer epoch and commit a few
    records; that leader dies and the network heals. A's log is longer, C's is newer. Kafka's
    rule compares the last epoch first: C is more up to date, A votes for it, and nothing
    committed is lost; a rule that compares log ends alone elects A, which overwrites C's
    committed records."""
    history = RaftHistory()
    root = Path(_scratch_dir())
    h = RaftHarness(root, voters=3, observers=0, seed=seed, config=FAST_RAFT_CONFIG, history=history,
                    rules=dict(rules), latency_ms=2)

    def note(text: str) -> None:
        history.faults.append((h.world.now, text))

    try:
        try:
            a = h.wait_for_leader()
            for i in range(3):
                h.append(b"v-%d" % i)
            history.appended = 3
            h.settle()
            b, c = [n for n in h.voters if n != a]
            h.partition([a], [b, c])
            for i in range(3, 13):
                h.append(b"v-%d" % i, node=a)  # never committed: A is alone
            history.appended = 13
            note(f"cut {a} (the leader) off; it appends 10 records alone")
            h.run_until(lambda: h.leader() in (b, c), 10_000)
            new = h.leader()
            if new is not None:
                for i in range(13, 16):
                    h.append(b"v-%d" % i, node=new)
                history.appended = 16
                client = h.client(new)
                h.run_until(lambda: client.high_watermark == client.log_end_offset, 5_000)
                note(f"{new} leads epoch {client.epoch} and commits 3 records with {b if new == c else c}")
                epoch = client.epoch
                h.crash(new)
                h.heal()
                note(f"crash {new}; heal the network")

                def elected() -> bool:
                    leader = h.leader()
                    return leader is not None and h.client(leader).epoch > epoch
                if h.run_until(elected, 10_000):
                    note(f"{h.leader()} leads epoch {h.client(h.leader()).epoch}")
                h.restart(new)
            note("heal everything, restart every node")
            if not h.settle(30_000):
                history.not_converged.append(f"seed {seed}: {h.describe()}")
            history.final_logs = h.final_logs()
        except AssertionError as e:
            history.assertions.append(f"seed {seed}: {e}")
        report = check_raft(history)
        finding = _finding(seed, report, history, h.rule_trace)
    finally:
        h.close()
        shutil.rmtree(root, ignore_errors=True)
    if finding is not None:
        finding.scenario = stale_leader_returns_with_a_longer_log.title
    return finding


stale_leader_returns_with_a_longer_log.title = "a cut-off leader returns with a longer log of an older epoch"


def deposed_leader_returns_behind_in_an_older_epoch(rules: Mapping[str, Callable], seed: int = 0) -> Finding | None:
    """Leader A of epoch 1 is cut off and appends 4 records alone. B and C (3 records each) elect
    X of them in epoch 2; X is cut off at once and appends 6 records alone (its followers never
    fetch them). A and the other one heal: A's log is longer in the same last epoch, so A leads
    epoch 3. Then X returns: its last epoch (2) is one A never had, and the leader answers
    "diverging at (1, where epoch 1 ends in A's log)". X's own epoch 1 ends sooner, so Kafka's rule
    cuts there, the lower of the two ends; a cut at the leader's end alone keeps records of epoch 2
    that A does not have, and the same answer comes back forever: X never catches up."""
    history = RaftHistory()
    root = Path(_scratch_dir())
    h = RaftHarness(root, voters=3, observers=0, seed=seed, config=FAST_RAFT_CONFIG, history=history,
                    rules=dict(rules), latency_ms=2)

    def note(text: str) -> None:
        history.faults.append((h.world.now, text))

    try:
        try:
            a = h.wait_for_leader()
            h.append(b"v-0", b"v-1")
            h.settle()
            b, c = [n for n in h.voters if n != a]
            h.partition([a], [b, c])
            h.append(b"v-2", b"v-3", b"v-4", b"v-5", node=a)
            note(f"cut {a} (the leader of epoch 1) off; it appends 4 records alone")
            if h.run_until(lambda: h.leader() in (b, c), 10_000):
                x = h.leader()
                y = b if x == c else c
                h.isolate(x)
                h.append(*[b"x-%d" % i for i in range(6)], node=x)
                history.appended = 12
                note(f"{x} leads epoch {h.client(x).epoch}; cut it off at once; it appends 6 records alone")
                h.heal()
                h.isolate(x)
                note(f"heal {a} <-> {y}")
                epoch = h.client(x).epoch

                def elected() -> bool:
                    leader = h.leader()
                    return leader is not None and h.client(leader).epoch > epoch
                if h.run_until(elected, 10_000):
                    h.append(b"v-6")
                    note(f"{h.leader()} leads epoch {h.client(h.leader()).epoch}")
            note("heal everything")
            h.heal()
            if not h.settle(30_000):
                history.not_converged.append(f"seed {seed}: {h.describe()}")
            history.final_logs = h.final_logs()
        except AssertionError as e:
            history.assertions.append(f"seed {seed}: {e}")
        report = check_raft(history)
        finding = _finding(seed, report, history, h.rule_trace)
    finally:
        h.close()
        shutil.rmtree(root, ignore_errors=True)
    if finding is not None:
        finding.scenario = deposed_leader_returns_behind_in_an_older_epoch.title
    return finding


deposed_leader_returns_behind_in_an_older_epoch.title = (
    "a deposed leader returns with records of an epoch the new leader never had")
SCENARIOS = (stale_leader_returns_with_a_longer_log, deposed_leader_returns_behind_in_an_older_epoch)


class RaftVerdict(Verdict):
    """A verdict on the quorum's rules (the timeline as ``Verdict``'s; the settings are Raft's)."""

    def __str__(self) -> str:
        if self.ok:
            yours = ", ".join(self.rules) or "none (Kafka's rules)"
            return (f"0 violations in {self.schedules} schedules (seed {self.seed}) and {len(SCENARIOS)} scenarios; "
                    f"your rules: {yours}\n"
                    f"(3 or 5 voters and an observer; crashes, restarts, partitions, lossy links; then heal: "
                    f"one leader per epoch, no committed record lost or changed, a leader elected again)")
        return super().__str__()

    __repr__ = __str__


def judge(rules: Mapping[str, Callable], schedules: int | None = None, seed: int = 0, *,
          shrinking: bool = True) -> Verdict:
    """Run the quorum's fault campaign (see the module docstring) on voters that call ``rules``
    (validated by ``tester.judge``); stop at the first failing schedule and shrink it."""
    schedules = DEFAULT_SCHEDULES if schedules is None else schedules
    verdict = RaftVerdict(tuple(sorted(rules)), schedules, seed)
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
            finding = _finding(seed, None, None, None, error)
            finding.scenario = scenario.title
        if finding is not None:
            verdict.failure = finding
            return verdict
    return verdict


__all__ = ["DEFAULT_SCHEDULES", "RaftVerdict", "judge", "run_judged", "shrink"]
