"""The tester of notebook 03: a student's placement and election rules run the controller, faults judge them.

Theory of operation
-------------------
``judge(rules)`` with rules of notebook 03 (``assign_replicas``, ``elect_leader``) comes here
(``tester.judge`` dispatches by the rules' lecture). The student's functions run inside the
active controller of a simulated cluster, under guard (``minikafka.rules``), where the
controller would call Kafka's: every topic it creates is placed by the student's
``assign_replicas``, every leader it elects is the student's ``elect_leader``'s choice. Each
schedule (a seed: the controller's random draws, and which brokers the nemesis kills) runs two
scenarios, and fails on the first of these findings:

*Placement and failover* (4 brokers; ``trucks_gps``, 12 partitions with replication factor 3,
and 12 topics of one partition each, replication factor 2):

- ``placement-leaders``: within a topic the preferred leaders (first replicas) must go round the
  brokers (counts differing by at most one), and across the one-partition topics they must not
  all sit on one broker. Kafka's random ``start_index`` per topic makes that happen with
  probability 4 x 4^-12 (about 2.4e-7) per schedule; a rule that ignores it always does, and
  that broker then leads every small topic.
- ``placement-followers``: a broker's partitions must have their next replicas on *different*
  brokers. With 12 = n(n-1) partitions on n = 4 brokers, Kafka's growing shift puts the second
  replicas of a broker's three partitions on the three other brokers, always: when it dies, its
  load spreads. A rule that ignores the shift piles every follower of a broker onto the same
  one, which then takes over all of its partitions at once.
- ``unavailable``: the nemesis kills a broker; once the controller has fenced it, every
  partition the broker led and that still has a live in-sync replica must have a live leader.
- ``leader-order``: the new leaders must be the ones an operator predicts from Metadata before
  the kill (exercise 2): the first replica in assignment order that is in the ISR and alive.
  The nemesis then restarts the broker, waits until it is back in every ISR, and kills the
  broker that took over most of its partitions: the returning broker is their preferred leader
  (first replica), and Kafka's rule gives them back to it at this election. A rule that picks
  the last or a random in-sync replica makes failovers unpredictable, and leadership drifts
  away from the preferred leaders and never comes back (lecture 03, section 6).

*An out-of-sync replica is alive when the leader dies* (3 brokers; one partition, replication
factor 3, acks=all, min.insync.replicas=2, unclean election off): follower B (second replica) is
cut off from leader A until it leaves the ISR; acks=all writes go on with the ISR {A, C}; A is
cut off and killed. C has every acknowledged record, B does not.

- ``unavailable``: no live leader 10 s after the kill, though C was alive and in sync;
- the checker's anomalies (``lost-write``: an acknowledged record missing from the final read,
  and the others of ``minikafka.checker``): an election that takes B, alive but out of the ISR,
  loses every record acknowledged while B was cut off.

The same scenario runs a second time with ``unclean.leader.election.enable=true`` on the topic:
Kafka still elects C (an unclean election is the last resort, when no in-sync replica is alive),
so nothing may be lost there either; a rule that, once unclean is allowed, takes the first live
replica whether or not an in-sync one is alive, loses the same records.

And at any call: ``rule-error``, the rule raised, hung, or broke its contract (a partition with
the same broker twice or the wrong replication factor, a broker that does not exist, a leader
that is not a replica).

With Kafka's rules every schedule passes (tests/test_rules_03.py). The verdict shows the failing
schedule as a timeline: what the nemesis did, the calls of the rules whose answer differed from
Kafka's (the arguments, what they returned, what Kafka's rule returns), then the finding.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from minikafka.checker.campaign import (
    CAMPAIGN_BROKER_CONFIG,
    CAMPAIGN_PRODUCER_CONFIG,
    Workload,
    _quiet_clients,
    run_cluster,
    schedule_seeds,
)
from minikafka.course.tester import Finding, _finding
from minikafka.errors import IllegalArgumentError
from minikafka.rules import RuleError, calls_said

DEFAULT_SCHEDULES = 3
BROKERS = 4
BIG_TOPIC, BIG_PARTITIONS = "trucks_gps", 12  # n(n-1) on 4 brokers: every shift used once per broker
SMALL_TOPICS = 12
CONFIG = {**CAMPAIGN_BROKER_CONFIG, "min.insync.replicas": 2}
WAIT_MS = 10_000  # for the controller to fence a killed broker, or a restarted one to rejoin


@dataclass
class ClusterVerdict:
    """``ok`` and, if not, the first failing schedule's ``failure`` (a ``tester.Finding``)."""

    rules: tuple[str, ...]
    schedules: int
    seed: int
    passed: int = 0
    failure: Finding | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    def __str__(self) -> str:
        yours = ", ".join(self.rules)
        if self.ok:
            return (f"0 anomalies in {self.schedules} schedules (seed {self.seed}); your rules: {yours}\n"
                    f"(placement of 13 topics on 4 brokers: leaders and followers spread; brokers killed and "
                    f"restarted: availability, leader order, preferred leaders back; a leader killed while a "
                    f"live follower is out of sync, unclean election off and on: acks=all records checked)")
        f = self.failure
        return "\n".join([
            f"FAILED: schedule {self.passed + 1} of {self.schedules} (seed {f.seed}), the scenario "
            f"\"{f.scenario}\": {f.kind}",
            f"your rules: {yours}; {calls_said(f.rule_calls, f.differing, f.kind == 'rule-error')}",
            (f"{f.records} records sent" if f.kind != "rule-error" else "the run stopped at your rule's call")
            + "; timeline:",
            f.timeline(),
        ])

    __repr__ = __str__

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(str(self))


# --- what is wrong with a placement ---------------------------------------------------------------------


def placement_problem(placements: Mapping[str, list[tuple[int, ...]]], brokers: list[int]) -> tuple[str, str] | None:
    """(kind, what) wrong with the controller's placements {topic: [replicas per partition]}
    (see the module docstring), or None."""
    for topic, placed in sorted(placements.items()):
        leads = Counter(replicas[0] for replicas in placed)
        counts = [leads.get(b, 0) for b in brokers]
        if max(counts) - min(counts) > 1:
            return "placement-leaders", (
                f"{topic}'s {len(placed)} partitions have their preferred leaders on brokers "
                f"{dict(zip(brokers, counts))}: Kafka's round robin gives each broker the same number, "
                f"give or take one")
    small = [placed[0][0] for topic, placed in sorted(placements.items()) if len(placed) == 1]
    if len(small) > 1 and len(set(small)) == 1:
        return "placement-leaders", (
            f"all {len(small)} one-partition topics have their preferred leader on broker {small[0]}: Kafka starts "
            f"each topic at a random broker (start_index), so small topics spread over the cluster")
    big = placements.get(BIG_TOPIC, [])
    if len(big) == len(brokers) * (len(brokers) - 1) and all(len(r) > 1 for r in big):
        for b in brokers:
            nexts = sorted(r[1] for r in big if r[0] == b)
            if len(set(nexts)) != len(nexts):
                return "placement-followers", (
                    f"in {BIG_TOPIC}, the partitions whose preferred leader is broker {b} have their next replicas "
                    f"on {nexts}: when {b} dies, {Counter(nexts).most_common(1)[0][0]} takes over several of them "
                    f"at once. Kafka's shift grows every {len(brokers)} partitions, so they go to "
                    f"{len(brokers) - 1} different brokers")
    return None


def expected_leader(replicas, isr, live) -> int:
    """Kafka's choice, as an operator predicts it from Metadata (exercise 2): -1 for none."""
    return next((r for r in replicas if r in isr and r in live), -1)


# --- the scenarios --------------------------------------------------------------------------------------


def _states(cluster) -> dict[tuple[str, int], Any]:
    return {(t, s.partition): s for t in cluster.topics() for s in cluster.partitions_of(t)}


def placement_and_failover(rules: Mapping[str, Callable], seed: int) -> Finding | None:
    """The first scenario (see the module docstring)."""
    notes: list[tuple[int, str]] = []
    with run_cluster(BROKERS, seed=seed, config=CONFIG, record_history=False, rules=dict(rules)) as cluster:
        def found(kind: str, what: str) -> Finding:
            trace = cluster.rule_trace
            return Finding(kind, what, seed, faults=list(notes), calls=list(trace.differing),
                           differing=trace.differing_count, rule_calls=dict(trace.calls),
                           scenario=placement_and_failover.title)

        try:
            brokers = list(cluster.broker_ids)
            cluster.create_topic(BIG_TOPIC, partitions=BIG_PARTITIONS, replication_factor=3)
            for i in range(SMALL_TOPICS):
                cluster.create_topic(f"t{i:02}", partitions=1, replication_factor=2)
            notes.append((cluster.now, f"create {BIG_TOPIC} ({BIG_PARTITIONS} partitions, RF 3) and "
                                       f"{SMALL_TOPICS} topics of 1 partition (RF 2)"))
            problem = placement_problem({t: [s.replicas for s in cluster.partitions_of(t)] for t in cluster.topics()},
                                        brokers)
            if problem is not None:
                return found(*problem)
            rng = random.Random(f"cluster/{seed}")
            victim = rng.choice(brokers)
            returned = None
            for round_ in range(2):
                if not cluster.run_until(lambda: all(set(s.isr) == set(s.replicas) for s in _states(cluster).values()),
                                         WAIT_MS):
                    return found("stuck", "the cluster never had every replica in sync before the kill "
                                          f"({WAIT_MS // 1000} s)")
                before = _states(cluster)
                live = set(cluster.controller.live_brokers) - {victim}
                cluster.kill(victim)
                owed = sum(s.leader == victim and s.replicas[0] == returned for s in before.values())
                notes.append((cluster.now, f"kill broker {victim}" + (
                    f" (it leads {owed} partition(s) whose preferred leader, broker {returned}, is back in sync)"
                    if returned is not None else "")))
                if not cluster.run_until(lambda: victim not in cluster.controller.live_brokers, WAIT_MS):
                    return found("stuck", f"the controller never fenced the dead broker {victim}")
                notes.append((cluster.now, f"the controller fences broker {victim} and elects"))
                after = _states(cluster)
                for key, old in sorted(before.items()):
                    if old.leader != victim:
                        continue
                    want = expected_leader(old.replicas, old.isr, live)
                    got = after[key].leader
                    name = f"{key[0]}-{key[1]}"
                    if want != -1 and got not in live:
                        return found("unavailable", (
                            f"{name} has no live leader (leader {got}) after broker {victim} died, though "
                            f"{sorted(r for r in old.isr if r in live)} were alive and in its ISR "
                            f"(replicas {old.replicas}): nobody can write to it or read from it"))
                    if got != want:
                        why = (f"its preferred leader {want} (first replica) was back, alive and in sync: Kafka gives "
                               f"it its partition back at this election, so leadership returns to balance"
                               if want == old.replicas[0] else
                               "Kafka elects the first replica in assignment order that is alive and in sync, "
                               "so an operator can predict every failover from Metadata")
                        return found("leader-order", (
                            f"{name} (replicas {old.replicas}, ISR {old.isr}) elected {got} when broker {victim} died, "
                            f"not {want}: {why}"))
                if round_ == 0:
                    cluster.restart(victim)
                    notes.append((cluster.now, f"restart broker {victim}"))
                    returned = victim
                    if not cluster.run_until(lambda: all(returned in s.isr for s in _states(cluster).values()
                                                         if returned in s.replicas), WAIT_MS):
                        return found("stuck", f"broker {returned} never got back into the ISR of all its partitions "
                                              f"({WAIT_MS // 1000} s)")
                    notes.append((cluster.now, f"broker {returned} is back in every ISR"))
                    leads = Counter(s.leader for s in _states(cluster).values()
                                    if s.replicas[0] == returned and s.leader != returned)
                    victim = leads.most_common(1)[0][0] if leads else rng.choice(
                        [b for b in brokers if b != returned])
        except RuleError as error:
            finding = _finding(seed, None, error, None)
            finding.faults, finding.scenario = list(notes), placement_and_failover.title
            return finding
    return None


placement_and_failover.title = "placement of 13 topics, then a broker killed, restarted, and its successor killed"


def out_of_sync_follower_alive(rules: Mapping[str, Callable], seed: int, unclean: bool = False) -> Finding | None:
    """The second scenario (see the module docstring); ``unclean``: the topic allows unclean
    leader election."""
    topic = "checked"
    title = out_of_sync_follower_alive_unclean.title if unclean else out_of_sync_follower_alive.title
    notes: list[tuple[int, str]] = []
    with run_cluster(3, seed=seed, config=CONFIG, record_history=False, rules=dict(rules)) as cluster, \
            _quiet_clients():
        def note(text: str) -> None:
            notes.append((cluster.now, text))

        try:
            cluster.create_topic(topic, 1, 3, config={"unclean.leader.election.enable": True} if unclean else None)
            a, b, c = cluster.partition_state(topic, 0).replicas
            workload = Workload(cluster, topic, **{**CAMPAIGN_PRODUCER_CONFIG, "acks": "all",
                                                   "enable_idempotence": True})

            def write_until(done: Callable[[], bool], timeout_ms: int, every_ms: int = 10) -> bool:
                end = cluster.now + timeout_ms
                while cluster.now < end and not done():
                    workload.send()
                    cluster.advance(every_ms)
                return done()

            write_until(lambda: False, 300)
            cluster.partition([b], [a])
            note(f"cut {b} off from {a} (leader of {topic}-0; replicas {(a, b, c)})")
            write_until(lambda: b not in cluster.partition_state(topic, 0).isr, WAIT_MS)
            note(f"{b} leaves the ISR {list(cluster.partition_state(topic, 0).isr)}; acks=all writes go on")
            write_until(lambda: False, 500)
            cluster.partition([a], [b, c, "controller"])
            cluster.kill(a)
            note(f"cut {a} off and kill it: {c} is in sync, {b} alive but not")
            if not write_until(lambda: cluster.partition_state(topic, 0).leader not in (-1, a), WAIT_MS):
                state = cluster.partition_state(topic, 0)
                trace = cluster.rule_trace
                return Finding("unavailable", (
                    f"{topic}-0 had no live leader (leader {state.leader}) {WAIT_MS // 1000} s after broker {a} died, "
                    f"though {c} was alive and in its ISR"), seed, faults=notes, calls=list(trace.differing),
                    differing=trace.differing_count, rule_calls=dict(trace.calls), scenario=title)
            note(f"{cluster.partition_state(topic, 0).leader} leads")
            write_until(lambda: False, 500)
            report = workload.finish()
            report.faults = notes
            report.calm = None
            finding = _finding(seed, report, None, cluster.rule_trace)
        except RuleError as error:
            finding = _finding(seed, None, error, None)
            finding.faults = list(notes)
    if finding is not None:
        finding.scenario = title
    return finding


def out_of_sync_follower_alive_unclean(rules: Mapping[str, Callable], seed: int) -> Finding | None:
    """The second scenario again, the topic allowing unclean leader election."""
    return out_of_sync_follower_alive(rules, seed, unclean=True)


out_of_sync_follower_alive.title = "an out-of-sync follower is alive when the leader dies (acks=all)"
out_of_sync_follower_alive_unclean.title = ("an out-of-sync follower is alive when the leader dies (acks=all, "
                                            "unclean.leader.election.enable=true)")
SCENARIOS = (placement_and_failover, out_of_sync_follower_alive, out_of_sync_follower_alive_unclean)


def judge(rules: Mapping[str, Callable], schedules: int = DEFAULT_SCHEDULES, seed: int = 0) -> ClusterVerdict:
    """Run notebook 03's campaign (see the module docstring) on a controller calling ``rules``;
    stop at the first failing schedule."""
    if not isinstance(schedules, int) or isinstance(schedules, bool) or schedules < 1:
        raise IllegalArgumentError(f"schedules must be an int >= 1, not {schedules!r}")
    verdict = ClusterVerdict(tuple(sorted(rules)), schedules, seed)
    for s in schedule_seeds(seed, schedules):
        for scenario in SCENARIOS:
            finding = scenario(rules, s)
            if finding is not None:
                verdict.failure = finding
                return verdict
        verdict.passed += 1
    return verdict


__all__ = ["judge", "ClusterVerdict", "placement_problem", "expected_leader", "SCENARIOS"]
