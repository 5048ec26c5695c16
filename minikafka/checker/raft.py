"""A checker for the Raft quorum: one leader per epoch, committed records forever.

Theory of operation
-------------------
Like the producer checker, this one judges what the nodes *reported*, not how they work.
A run is reduced to a ``RaftHistory``: every leader change every node's listener was told
(node, incarnation, leader, epoch) and every committed record every listener got (node,
incarnation, offset, epoch, key, value), plus, at the end, each voter's whole log. Then
``check_raft`` looks for Raft's safety violations:

- ``two-leaders``: two nodes were told of different leaders for one epoch, or two hosts
  saw their clients lead one epoch (Election Safety);
- ``double-vote``: a voter voted for two candidates in one epoch, across restarts too (what
  its quorum-state file is for);
- ``delivery-order``: one listener (one client object) got offsets out of order, twice, with
  a gap, or not from the log start (each committed record once, in order, replayed after a
  restart);
- ``committed-changed``: two listeners got different records at one offset (State Machine
  Safety: what one node applied, no node applies differently);
- ``committed-lost``: after healing, a voter's log lacks a record some listener got, or
  holds another one at its offset (Leader Completeness, seen from the outside);
- ``assertion``: a client's own safety assertion fired (it would truncate committed records);
- ``no-convergence``: after every fault was healed the quorum did not settle (liveness,
  reported so that a stuck quorum cannot pass for a safe one).

``RaftHarness`` is a small simulated quorum for tests and notebooks: a ``RaftNode`` host per
node wrapping a ``KafkaRaftClient`` and a recording listener, in a ``World(seed)``, logs in
a directory of their own. ``run_raft_schedule(seed)`` is one seeded run under random faults
(crashes and restarts, partitions and heals, appends through whoever leads), then heals
everything and checks; ``raft_campaign(schedules)`` adds up many. Same seed, same run.

A checker must not trust what it checks: it reads only listener callbacks and, at the end,
the logs through the storage layer; it never looks at the clients' internal state to decide.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from minikafka import platform, scratch
from minikafka.node import StateMachine
from minikafka.raft.client import LEADER, CommittedRecord, KafkaRaftClient, NotLeaderError
from minikafka.rules import REFERENCE, Rules, RuleTrace
from minikafka.rules import validate as validate_rules
from minikafka.sim.world import World

TWO_LEADERS = "two-leaders"
DOUBLE_VOTE = "double-vote"
DELIVERY_ORDER = "delivery-order"
COMMITTED_CHANGED = "committed-changed"
COMMITTED_LOST = "committed-lost"
ASSERTION = "assertion"
NO_CONVERGENCE = "no-convergence"
VIOLATIONS = (TWO_LEADERS, DOUBLE_VOTE, DELIVERY_ORDER, COMMITTED_CHANGED, COMMITTED_LOST, ASSERTION, NO_CONVERGENCE)

# Kafka's quorum timeouts scaled down five-fold, so a schedule of a few simulated seconds
# sees several elections.
FAST_RAFT_CONFIG: dict[str, int] = {
    "controller.quorum.election.timeout.ms": 200,
    "controller.quorum.fetch.timeout.ms": 400,
    "controller.quorum.election.backoff.max.ms": 200,
    "controller.quorum.request.timeout.ms": 400,
    "controller.quorum.retry.backoff.ms": 20,
    "controller.quorum.fetch.max.wait.ms": 100,
}


# --- the history ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeaderChange:
    time: int
    node: int
    incarnation: int
    leader_id: int | None
    epoch: int


@dataclass(frozen=True)
class Commit:
    time: int
    node: int
    incarnation: int
    offset: int
    epoch: int
    key: bytes | None
    value: bytes | None

    @property
    def content(self) -> tuple:
        return (self.epoch, self.key, self.value)


@dataclass
class RaftHistory:
    leader_changes: list[LeaderChange] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)
    votes: list[tuple[int, int, int, int]] = field(default_factory=list)  # (time, node, epoch, candidate)
    # node -> every record in its log at the end: (offset, epoch, key, value)
    final_logs: dict[int, list[tuple[int, int, bytes | None, bytes | None]]] = field(default_factory=dict)
    log_start_offsets: dict[int, int] = field(default_factory=dict)  # where each listener's replay starts
    assertions: list[str] = field(default_factory=list)
    not_converged: list[str] = field(default_factory=list)
    faults: list[tuple[int, str]] = field(default_factory=list)  # (time, what the nemesis did)
    appended: int = 0  # records the schedule appended through its leaders

    def leader_change(self, time: int, node: int, incarnation: int, leader_id: int | None, epoch: int) -> None:
        self.leader_changes.append(LeaderChange(time, node, incarnation, leader_id, epoch))

    def commit(self, time: int, node: int, incarnation: int, record: CommittedRecord) -> None:
        self.commits.append(Commit(time, node, incarnation, record.offset, record.epoch, record.key, record.value))


@dataclass(frozen=True)
class Violation:
    kind: str
    detail: str


@dataclass
class RaftReport:
    violations: list[Violation] = field(default_factory=list)
    leaders: dict[int, int] = field(default_factory=dict)  # epoch -> its leader
    committed: int = 0  # the highest committed offset any listener saw, + 1
    elections: int = 0  # epochs that had a leader
    deliveries: int = 0
    schedules: int = 1
    failing_seeds: list[Any] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def count(self, kind: str) -> int:
        return sum(1 for v in self.violations if v.kind == kind)

    def merge(self, other: "RaftReport", seed: Any = None) -> None:
        self.violations.extend(other.violations)
        self.committed += other.committed
        self.elections += other.elections
        self.deliveries += other.deliveries
        self.schedules += other.schedules
        if other.violations:
            self.failing_seeds.append(seed)

    def table(self) -> str:
        lines = [f"{'violation':<20} count", f"{'-' * 20} -----"]
        lines += [f"{kind:<20} {self.count(kind):>5}" for kind in VIOLATIONS]
        lines.append(
            f"{self.schedules} schedule(s), {self.elections} epochs with a leader, "
            f"{self.committed} records committed, {self.deliveries} deliveries checked"
        )
        for v in self.violations[:5]:
            lines.append(f"  e.g. {v.kind}: {v.detail}")
        return "\n".join(lines)


def check_raft(history: RaftHistory) -> RaftReport:
    """Judge a history: see the module's docstring for what each violation means."""
    report = RaftReport()
    out = report.violations
    # Election Safety: the non-empty leaders reported for an epoch are one node.
    by_epoch: dict[int, set[int]] = {}
    for change in history.leader_changes:
        if change.leader_id is not None:
            by_epoch.setdefault(change.epoch, set()).add(change.leader_id)
    for epoch, leaders in sorted(by_epoch.items()):
        if len(leaders) > 1:
            out.append(Violation(TWO_LEADERS, f"epoch {epoch} had leaders {sorted(leaders)}"))
        report.leaders[epoch] = min(leaders)
    report.elections = len(report.leaders)
    voted: dict[tuple[int, int], int] = {}
    for time, node, epoch, candidate in history.votes:
        earlier = voted.setdefault((node, epoch), candidate)
        if earlier != candidate:
            out.append(Violation(DOUBLE_VOTE, f"node {node} voted for {earlier} and then {candidate} in epoch {epoch}"))
    # Each listener: from its log start, in order, once each, no gap.
    per_listener: dict[tuple[int, int], list[Commit]] = {}
    for c in history.commits:
        per_listener.setdefault((c.node, c.incarnation), []).append(c)
    for (node, inc), commits in sorted(per_listener.items()):
        expected = history.log_start_offsets.get(node, 0)
        for c in commits:
            if c.offset != expected:
                what = "again" if c.offset < expected else f"before offset {expected}"
                out.append(Violation(DELIVERY_ORDER, f"node {node} (incarnation {inc}) got offset {c.offset} {what}"))
                break
            expected += 1
    # State Machine Safety: one record per offset, whoever applied it.
    first: dict[int, Commit] = {}
    for c in history.commits:
        seen = first.setdefault(c.offset, c)
        if seen.content != c.content:
            out.append(Violation(
                COMMITTED_CHANGED,
                f"offset {c.offset}: node {seen.node} got {seen.content!r}, node {c.node} got {c.content!r}",
            ))
            first[c.offset] = c  # report each further disagreement against the latest
    report.deliveries = len(history.commits)
    report.committed = max(first) + 1 if first else 0
    # Leader Completeness, seen at the end: every voter's log has every committed record.
    for node, log in sorted(history.final_logs.items()):
        at = {offset: (epoch, key, value) for offset, epoch, key, value in log}
        for offset, c in sorted(first.items()):
            if at.get(offset) != c.content:
                got = "nothing" if offset not in at else repr(at[offset])
                out.append(Violation(COMMITTED_LOST, f"node {node}'s log has {got} at committed offset {offset}"))
                break
    out.extend(Violation(ASSERTION, a) for a in history.assertions)
    out.extend(Violation(NO_CONVERGENCE, n) for n in history.not_converged)
    return report


def read_log(log: Any) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """A Raft log's every record, (offset, epoch, key, value), read through the storage layer."""
    records = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        batches = list(log.read(offset).batches())
        if not batches:
            break
        for b in batches:
            records += [(r.offset, b.partition_leader_epoch, r.key, r.value) for r in b.records()]
        offset = batches[-1].last_offset + 1
    return records


# --- a simulated quorum -------------------------------------------------------------------------------


class RecordingListener:
    """A ``RaftListener`` that keeps what it was told and reports it to a history."""

    def __init__(self, node: "RaftNode", history: RaftHistory | None) -> None:
        self.node = node
        self.history = history
        self.records: list[CommittedRecord] = []
        self.leader_changes: list[tuple[int | None, int]] = []
        self.delivered_at_change: list[int] = []  # how many records it had at each leader change

    def handle_commit(self, records: list[CommittedRecord]) -> None:
        self.records.extend(records)
        if self.history is not None:
            for r in records:
                self.history.commit(self.node.now, self.node.node_id, self.node.incarnation, r)

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        self.leader_changes.append((leader_id, epoch))
        self.delivered_at_change.append(len(self.records))
        if self.history is not None:
            self.history.leader_change(self.node.now, self.node.node_id, self.node.incarnation, leader_id, epoch)


class RaftNode(StateMachine):
    """The smallest host a ``KafkaRaftClient`` can have: it routes everything to it."""

    def __init__(
        self, node_id: int, voters: Sequence[int], log_dir: Path | str, *, config: Mapping[str, Any] | None = None,
        seed: Any = 0, incarnation: int = 0, history: RaftHistory | None = None, rules: Rules = REFERENCE,
    ) -> None:
        super().__init__(node_id)
        self.incarnation = incarnation
        self._claimed = -1  # the last epoch it reported leading
        self._vote: tuple[int, int | None] = (-1, None)  # the last vote it reported
        self.listener = RecordingListener(self, history)
        self.client = KafkaRaftClient(
            self, node_id, voters, log_dir, config=config, seed=f"{seed}/{incarnation}", listener=self.listener,
            rules=rules,
        )

    def on_start(self) -> None:
        self.client.start()
        self._report_leadership()

    def on_message(self, src: Any, message: Any) -> None:
        self.client.handle(src, message)
        self._report_leadership()

    def on_timer(self, key: Any) -> None:
        self.client.on_timer(key)
        self._report_leadership()

    def _report_leadership(self) -> None:
        # The listener hears of its own leadership only once it has replayed the log; a
        # leader that never gets that far (it never commits) still leads, and a second
        # leader in its epoch would be a violation all the same: the host reports every
        # epoch in which its client says it leads.
        client = self.client
        history = self.listener.history
        vote = (client.epoch, client.election.voted_id)
        if vote != self._vote and vote[1] is not None and history is not None:
            history.votes.append((self.now, self.node_id, *vote))
        self._vote = vote
        if client.is_leader and client.epoch != self._claimed:
            self._claimed = client.epoch
            if self.listener.history is not None:
                self.listener.history.leader_change(self.now, self.node_id, self.incarnation, self.node_id, client.epoch)


class RaftHarness:
    """``voters`` voters (ids 1..n) and ``observers`` observers (ids 101..) in a ``World``."""

    def __init__(
        self, root: Path | str, *, voters: int = 3, observers: int = 0, seed: int = 0,
        config: Mapping[str, Any] | None = None, history: RaftHistory | None = None, latency_ms: int = 1,
        jitter_ms: int = 0, rules: Mapping[str, Callable] | None = None,
    ) -> None:
        self.root = Path(root)
        # A student's rules ({name: function}, minikafka.rules) in every node, under guard; the
        # calls that differ from Kafka's go in ``rule_trace``. None: Kafka's.
        self.rules = validate_rules(rules)
        self.rule_trace = RuleTrace()
        self.seed = seed
        self.config = dict(config or {})
        self.history = history if history is not None else RaftHistory()
        self.world = World(seed, latency_ms=latency_ms, jitter_ms=jitter_ms, record_history=False)
        self.voters = tuple(range(1, voters + 1))
        self.observers = tuple(range(101, 101 + observers))
        self.incarnations: dict[int, int] = {}
        for node in self.voters + self.observers:
            self.incarnations[node] = 0
            self.world.add(node, self._factory(node))

    def _factory(self, node: int):
        def make() -> RaftNode:
            self.incarnations[node] += 1
            name = f"{'voter' if node in self.voters else 'observer'} {node}"
            rules = REFERENCE if not self.rules else Rules(
                self.rules, node=name, clock=lambda: self.world.now, trace=self.rule_trace)
            return RaftNode(
                node, self.voters, self.root / f"node-{node}", config=self.config, seed=self.seed,
                incarnation=self.incarnations[node], history=self.history, rules=rules,
            )
        return make

    # --- looking
    @property
    def nodes(self) -> tuple[int, ...]:
        return self.voters + self.observers

    def alive(self, node: int) -> bool:
        """Is ``node`` up, running a Raft client (a test may put another host in its place)?"""
        return isinstance(self.world.nodes.get(node), RaftNode)

    def node(self, node: int) -> RaftNode:
        return self.world.nodes[node]  # type: ignore[return-value]

    def client(self, node: int) -> KafkaRaftClient:
        return self.node(node).client

    def records(self, node: int) -> list[CommittedRecord]:
        """What ``node``'s current listener got."""
        return self.node(node).listener.records

    def values(self, node: int, *, with_leader_changes: bool = False) -> list[bytes | None]:
        return [r.value for r in self.records(node) if with_leader_changes or r.key != b"LeaderChange"]

    def leader(self) -> int | None:
        """The live leader of the highest epoch, if any."""
        best = None
        for n in self.voters:
            if self.alive(n) and self.client(n).state == LEADER:
                if best is None or self.client(n).epoch > self.client(best).epoch:
                    best = n
        return best

    # --- doing
    def run(self, ms: int) -> None:
        self.world.advance(ms)

    def run_until(self, done, timeout_ms: int = 10_000) -> bool:
        return self.world.run_until(done, timeout_ms)

    def wait_for_leader(self, timeout_ms: int = 10_000) -> int:
        if not self.run_until(lambda: self.leader() is not None, timeout_ms):
            raise AssertionError(f"no leader elected in {timeout_ms} ms: {self.describe()}")
        return self.leader()  # type: ignore[return-value]

    def append(self, *values: bytes, node: int | None = None, key: bytes | None = None) -> int:
        """Append ``values`` as one batch on ``node`` (default: the leader); its last offset."""
        target = self.leader() if node is None else node
        if target is None:
            raise NotLeaderError("no leader")
        return self.world.call_node(target, lambda n: n.client.append([(key, v) for v in values]))

    def settled(self) -> bool:
        """A leader, and every live node has its whole log, committed and delivered."""
        leader = self.leader()
        if leader is None:
            return False
        lc = self.client(leader)
        end = lc.log_end_offset
        if lc.high_watermark != end:
            return False
        return all(
            self.client(n).log_end_offset == end and self.client(n).high_watermark == end
            and self.client(n).delivered_offset == end
            for n in self.nodes if self.alive(n)
        )

    def settle(self, timeout_ms: int = 20_000) -> bool:
        return self.run_until(self.settled, timeout_ms)

    def crash(self, node: int) -> None:
        if self.alive(node):
            self.client(node).close()
        self.world.crash(node)

    def restart(self, node: int) -> RaftNode:
        self.crash(node)
        return self.world.restart(node)  # type: ignore[return-value]

    def partition(self, a: Iterable[int], b: Iterable[int]) -> None:
        self.world.network.partition(a, b)

    def isolate(self, node: int) -> None:
        self.world.network.isolate(node, self.nodes)

    def heal(self) -> None:
        self.world.network.heal()

    def final_logs(self) -> dict[int, list[tuple[int, int, bytes | None, bytes | None]]]:
        """Each live voter's whole log (offset, epoch, key, value), read through the storage layer."""
        return {n: read_log(self.client(n).log) for n in self.voters if self.alive(n)}

    def describe(self) -> str:
        return "; ".join(repr(self.client(n)) if self.alive(n) else f"{n}: down" for n in self.nodes)

    def close(self) -> None:
        for n in self.nodes:
            if self.alive(n):
                self.client(n).close()


# --- fault campaigns ---------------------------------------------------------------------------------------


def _scratch_dir() -> str:
    # In RAM when we can: a schedule fsyncs on every append and every vote. Marked as this
    # process's (minikafka.scratch): the next one removes it if this process dies first; one that
    # its caller removes with shutil.rmtree (tester_raft) gives its lock back at the next one.
    return str(scratch.make("minikafka-raft-", platform.ram_dir()))


def run_raft_schedule(
    seed: int, *, voters: int | None = None, observers: int = 1, duration_ms: int = 3_000, step_ms: int = 50,
    config: Mapping[str, Any] | None = None, root: Path | str | None = None, latency_ms: int = 2, jitter_ms: int = 8,
    rules: Mapping[str, Callable] | None = None, epilogue: Callable[["RaftHarness", RaftHistory], None] | None = None,
    faults: int | None = None,
) -> RaftReport:
    """One seeded run (3 or 5 voters unless ``voters`` says): appends through the leader every
    step, random faults now and then (crash, restart, crash-and-restart at once, partition,
    isolate the leader, a lossy link one way, heal), then heal and restart everything, settle, and check.

    ``faults``: strike at most that many faults (restarts of dead nodes and heals do not count;
    the judge's shrinker lowers it). ``rules``: the nodes' rules ({name: function}; a
    ``RuleError`` propagates). ``epilogue(harness, history)`` runs after the check, before the
    harness closes (the judge reads the rules' trace there). ``history.faults`` lists what the
    nemesis did."""
    rng = random.Random(f"raft-faults/{seed}")
    if voters is None:
        voters = rng.choice((3, 3, 5))
    own_root = root is None
    root = Path(_scratch_dir() if own_root else root)
    history = RaftHistory()
    harness = RaftHarness(
        root, voters=voters, observers=observers, seed=seed, history=history, latency_ms=latency_ms,
        jitter_ms=jitter_ms, config=FAST_RAFT_CONFIG if config is None else config,  # {}: Kafka's defaults
        rules=rules,
    )
    try:
        n = 0
        struck = [0, 0]  # faults struck; is the network broken (for the fault log)

        def fault(text: str) -> bool:
            """Note a fault, if the schedule may still strike one (``faults``: how many)."""
            if faults is not None and struck[0] >= faults:
                return False
            struck[0] += 1
            history.faults.append((harness.world.now, text))
            return True

        try:
            for _ in range(duration_ms // step_ms):
                harness.run(step_ms)
                leader = harness.leader()
                if leader is not None and rng.random() < 0.7:
                    n += 1
                    history.appended = n
                    harness.append(f"v-{n}".encode(), node=leader)
                roll = rng.random()
                nodes = harness.nodes
                if roll < 0.04:
                    x = rng.choice(nodes)
                    if fault(f"crash {x}"):
                        harness.crash(x)
                elif roll < 0.06 and leader is not None:
                    if fault(f"crash {leader} (the leader, mid-append)"):
                        harness.crash(leader)
                elif roll < 0.07:
                    x = rng.choice(nodes)
                    if fault(f"restart {x} (down and up at once)"):
                        harness.restart(x)  # only the disk remembers
                elif roll < 0.12:
                    dead = [x for x in nodes if not harness.alive(x)]
                    if dead:
                        x = rng.choice(dead)
                        history.faults.append((harness.world.now, f"restart {x}"))
                        harness.restart(x)
                elif roll < 0.16:
                    side = rng.sample(nodes, rng.randint(1, len(nodes) - 1))
                    other = [x for x in nodes if x not in side]
                    if fault(f"partition {sorted(side)} | {other}"):
                        struck[1] = 1
                        harness.partition(side, other)
                elif roll < 0.18 and leader is not None:
                    if fault(f"isolate {leader} (the leader)"):
                        struck[1] = 1
                        harness.isolate(leader)  # an old leader in a minority of one
                elif roll < 0.24:
                    if struck[1]:
                        history.faults.append((harness.world.now, "heal the network"))
                    struck[1] = 0
                    harness.heal()
                elif roll < 0.27:
                    a, b = rng.sample(nodes, 2)  # a lossy link: requests time out, answers go missing
                    loss = rng.choice((0.3, 1.0))
                    if fault(f"link {a} -> {b} loses {loss:.0%}"):
                        struck[1] = 1
                        harness.world.network.set_link(a, b, loss=loss)
            harness.heal()
            for x in harness.nodes:
                if not harness.alive(x):
                    harness.restart(x)
            history.faults.append((harness.world.now, "heal everything, restart every node"))
            if not harness.settle(30_000):
                history.not_converged.append(f"seed {seed}: {harness.describe()}")
            history.final_logs = harness.final_logs()
        except AssertionError as e:
            history.assertions.append(f"seed {seed}: {e}")
        report = check_raft(history)
        if epilogue is not None:
            epilogue(harness, history)
        return report
    finally:
        harness.close()
        if own_root:
            scratch.remove(root)


def raft_campaign(schedules: int = 200, *, seed: int = 0, **kwargs: Any) -> RaftReport:
    """``schedules`` seeded runs of ``run_raft_schedule``, added up; each failing seed is
    listed in ``failing_seeds`` and replays alone with ``run_raft_schedule(seed)``."""
    total = RaftReport(schedules=0)
    for i in range(schedules):
        s = seed * 1_000_003 + i
        total.merge(run_raft_schedule(s, **kwargs), seed=s)
    return total


__all__ = [
    "ASSERTION", "COMMITTED_CHANGED", "COMMITTED_LOST", "DELIVERY_ORDER", "DOUBLE_VOTE", "FAST_RAFT_CONFIG", "NO_CONVERGENCE",
    "TWO_LEADERS", "VIOLATIONS", "Commit", "LeaderChange", "RaftHarness", "RaftHistory", "RaftNode",
    "RaftReport", "RecordingListener", "Violation", "check_raft", "raft_campaign", "run_raft_schedule",
]
