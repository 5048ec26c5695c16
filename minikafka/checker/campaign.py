"""Fault campaigns: many seeded runs of a workload under random faults, each judged.

Theory of operation
-------------------
One *schedule* is one run, entirely determined by its seed (FoundationDB's simulation
and TigerBeetle's VOPR work this way):

1. a fresh ``Cluster(brokers, seed=seed)`` and a topic of 1 to 3 partitions;
2. a ``Workload``: a ``KafkaProducer`` sending unique values ("v-0", "v-1", ...) round
   robin over the partitions at a steady simulated rate, every send recorded in a
   ``History``, and a polling ``Reader`` recording what it sees. It writes for half a
   second before the faults begin, for ``duration_ms`` while they begin, and 2.5 s
   after (kills and restarts that faults set up for later still meet writes);
3. faults, drawn from the schedule's own RNG (``random.Random(f"faults/{seed}")``): kill
   a broker (and restart it later, or not until the end), kill a partition's leader just
   after cutting it off from its followers (so what it appends from then on dies with
   it), strand a follower (cut it off from its leader until it leaves the ISR, then kill
   every other replica: the setting of an unclean election), cut a broker off from the
   other brokers, the controller, or everyone, cut the controller off from every broker,
   slow a link, heal the network; with a quorum of ``controllers`` > 1 also kill the active
   controller (restarted later, or not until the end) and cut a controller off from the
   other voters; with ``disk_faults`` also fill a broker's disk (freed later) or make its
   fsyncs fail (the disk replaced and the broker restarted later);
4. the end: heal everything, repair every disk (``repair_disks``), restart every dead
   broker and controller, let the cluster
   settle (every replica back in the ISR and caught up), flush the producer, settle again,
   read every partition from its log start to its high watermark (the final read) and
   ``analyse``. The metadata quorum is judged too (``checker.raft``: at most one leader per
   epoch, no committed metadata record lost or changed, on every controller and every
   broker's copy): its violations are the report's ``raft`` count.

With ``workload="transactions"`` step 2 is Kafka's exactly-once loop instead
(``rpw_workload``: a read_committed consumer and a transactional producer turning input
values into output values, the input offsets committed in each transaction), the faults
gain kills of the producer mid-transaction (crashed, or a stalled zombie that a new
instance fences), of the transaction coordinator's broker and of the output's leaders,
and ``checker.transactions`` judges a final read_committed read (lost-committed, duplicate,
aborted-visible, not-atomic, input-not-once); the report's ``counts`` are the
transactions' outcomes. ``workload="at-least-once"`` runs the same loop without
transactions: the negative control, where the checker must find inputs counted twice.
Every report carries ``fault_counts`` (kind -> times it struck); a campaign adds them up.

Same seed, same schedule, same history, same report: ``run_schedule(seed=s, ...)`` with
the campaign's arguments replays schedule ``s`` exactly, and ``fault_campaign`` only
adds up its schedules' reports. Schedule seeds come from the campaign's seed
(``schedule_seeds``), so a campaign is reproducible too.

``rules={name: function}`` runs the brokers on a student's rules (``minikafka.rules``) instead of
Kafka's, and ``_run``'s ``epilogue`` runs more checks on the settled cluster: both are what the
course's tester (``minikafka.course.tester.judge``) adds to a schedule.

Simulated time is cheap but not free, so schedules are short (a few simulated seconds)
and the cluster's timeouts are scaled down to match (``CAMPAIGN_BROKER_CONFIG``: a dead
broker is noticed after 1.5 s, a lagging follower leaves the ISR after 1.5 s, logs are
flushed every 3 s); pass ``config=`` to run with other settings, e.g. Kafka's own
defaults and a longer ``duration_ms``.

What to expect (Kafka's semantics, which the checker holds the brokers to):

- ``acks=1``: a leader that dies before its followers copied a write loses it, even
  though the producer was told it was written: lost writes (and the new leader reuses
  their offsets: inconsistent offsets).
- ``acks='all'``, ``min_insync_replicas=2``, RF 3, no unclean election: nothing
  acknowledged is ever lost. Without idempotence a retried send can be written twice
  (its first attempt landed but the answer was lost): duplicates are Kafka's
  at-least-once, not a bug; with ``enable_idempotence=True`` the broker drops them.
- ``unclean_leader_election=True``: an out-of-sync replica may lead, and whatever it
  missed is gone: lost writes even with ``acks='all'``.
- ``disk_faults=True`` adds two faults: a broker's disk fills up (an append there fails with
  KAFKA_STORAGE_ERROR, writes nothing and takes its log dir offline: its heartbeat tells the
  controller, which moves its leaders to in-sync replicas; space returns later and it is
  restarted) and a broker's fsyncs fail (its log dir goes offline at its next flush, the
  same way, and it is restarted on a new disk later). Neither may lose an acknowledged write.
- A kill is a process crash: the OS keeps what the broker wrote. ``power_loss=True`` adds
  machine crashes that lose what was not yet flushed. Kafka relies on replication, not
  fsync: when the last in-sync replica standing is one that lost power, it leads with a
  shortened log and acknowledged writes are lost (KIP-966 is Kafka's answer to this).
"""

from __future__ import annotations

import gc
import logging
import os
import random
from contextlib import contextmanager
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from minikafka import platform
from minikafka import scratch as scratch_folder
from minikafka.checker.analysis import ANOMALIES, Anomaly, Report, _table, analyse
from minikafka.checker.history import History, Send
from minikafka.checker.reader import Reader, final_read, start_reader
from minikafka.clients.producer import KafkaProducer
from minikafka.cluster import Cluster
from minikafka.errors import IllegalArgumentError, KafkaError, KafkaTimeoutError
from minikafka.rules import RuleError

# Kafka's timeouts, scaled down about ten-fold: a schedule lasts seconds, not minutes.
CAMPAIGN_BROKER_CONFIG: dict[str, Any] = {
    "broker.heartbeat.interval.ms": 300,
    "broker.session.timeout.ms": 1_500,
    "replica.lag.time.max.ms": 1_500,
    "replica.fetch.wait.max.ms": 200,
    "replica.fetch.backoff.ms": 100,
    "replica.socket.timeout.ms": 1_000,
    "log.flush.interval.ms": 3_000,
}
CAMPAIGN_PRODUCER_CONFIG: dict[str, Any] = {
    "request_timeout_ms": 1_000,
    "delivery_timeout_ms": 6_000,
    "retry_backoff_ms": 100,
    "linger_ms": 0,
    "max_block_ms": 2_000,
}

QUIET_MS, TAIL_MS = 500, 2_500  # before the first fault; after the last one starts
_ACKS = {0: 0, 1: 1, -1: -1, "all": -1, "0": 0, "1": 1, "-1": -1}
TOPIC = "checked"
WORKLOADS = ("produce", "transactions", "at-least-once")
# Read-process-write: the coordinators' topics small (50 partitions each would dominate a
# schedule's time) and a dead producer's transaction aborted within the schedule.
RPW_BROKER_CONFIG: dict[str, Any] = {
    "transaction.state.log.num.partitions": 3,
    "offsets.topic.num.partitions": 3,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1_000,
    "group.initial.rebalance.delay.ms": 0,
}


def _acks(acks: Any) -> int:
    if isinstance(acks, bool) or acks not in _ACKS:
        raise IllegalArgumentError(f"acks must be 0, 1 or 'all' (-1), not {acks!r}")
    return _ACKS[acks]


# --- the cluster settling -------------------------------------------------------------------------


def settled(cluster: Cluster, topic: str) -> bool:
    """Every partition has a leader, every replica is alive, in the ISR and has the
    leader's log, and the high watermark is at its end. The harness may look inside the
    brokers to know when to stop waiting; the checker never does."""
    if cluster._active_controller() is None:
        return False
    for state in cluster.partitions_of(topic):
        if state.leader < 0 or set(state.isr) != set(state.replicas):
            return False
        leader = cluster.replica(state.leader, topic, state.partition)
        if leader is None or not leader.is_leader or leader.high_watermark != leader.log_end_offset:
            return False
        for r in state.replicas:
            replica = cluster.replica(r, topic, state.partition)
            if replica is None or replica.log_end_offset != leader.log_end_offset:
                return False
    return True


def settle(cluster: Cluster, topic: str, timeout_ms: int = 30_000) -> bool:
    """Run the cluster until ``settled`` (True) or ``timeout_ms`` passed (False)."""
    return cluster.run_until(lambda: settled(cluster, topic), timeout_ms)


def restart_dead(cluster: Cluster) -> list[int]:
    dead = [n for n in cluster.controller_ids + cluster.broker_ids if not cluster.alive(n)]
    for n in dead:
        cluster.restart(n)
    return dead


def repair_disks(cluster: Cluster) -> list[int]:
    """The end of a schedule with disk faults: free every full disk, replace every failing
    one, and restart each broker whose log dir went offline (it cannot rejoin otherwise)."""
    repaired = []
    for b in cluster.broker_ids:
        disk = cluster.disks[b]
        offline = cluster.alive(b) and cluster.broker(b).log_manager.offline is not None
        if disk.full or disk.fsync_fails or offline:
            cluster.fill_disk(b, False)
            cluster.fail_fsync(b, False)
            if offline:
                cluster.kill(b)
                cluster.restart(b)
            repaired.append(b)
    return repaired


def quorum_settled(cluster: Cluster) -> bool:
    """An active controller, and every controller's and broker's copy of the metadata log
    as long as the leader's, all of it committed and applied."""
    active = cluster._active_controller()
    if active is None:
        return False
    end = active.raft.log_end_offset
    if active.raft.high_watermark != end:
        return False
    nodes = [cluster.world.nodes[n] for n in cluster.controller_ids + cluster.broker_ids if cluster.alive(n)]
    return all(n.raft.log_end_offset == end and n.raft.high_watermark == end and n.image.offset == end - 1
               for n in nodes)


def judge_quorum(cluster: Cluster, timeout_ms: int = 30_000):
    """Settle the metadata quorum and check its history (``checker.raft``)."""
    from minikafka.checker.raft import check_raft, read_log

    history = cluster.raft_history
    if not cluster.run_until(lambda: quorum_settled(cluster), timeout_ms):
        history.not_converged.append(f"the metadata quorum did not settle within {timeout_ms} ms")
    history.final_logs = {n: read_log(cluster.world.nodes[n].raft.log)
                          for n in cluster.controller_ids if cluster.alive(n)}
    return check_raft(history)


# --- the workload -----------------------------------------------------------------------------------


class Workload:
    """A producer writing unique values and a reader polling them, both recorded.

    >>> w = Workload(cluster, "events", acks=1)      # doctest: +SKIP
    >>> w.run(duration_ms=2_000, interval_ms=10)     # doctest: +SKIP
    >>> print(w.finish().table())                    # doctest: +SKIP
    """

    def __init__(self, cluster: Cluster, topic: str, *, poll: bool = True, reader_config: Mapping | None = None,
                 **producer_config: Any) -> None:
        self.cluster = cluster
        self.topic = topic
        self.history = History(clock=lambda: cluster.now)
        self.producer = KafkaProducer(bootstrap_servers=cluster, **producer_config)
        self.reader: Reader | None = (
            start_reader(cluster, topic, self.history, **(reader_config or {})) if poll else None)
        self.partitions = len(cluster.partitions_of(topic))
        self._next_value = 0
        self.notes: list[str] = []

    def send(self, partition: int | None = None) -> Send:
        """Send the next value ("v-<n>"), to ``partition`` or round robin."""
        n = self._next_value
        self._next_value += 1
        if partition is None:
            partition = n % self.partitions
        try:
            self.history.send(self.producer, self.topic, f"v-{n}".encode(), partition=partition)
        except KafkaError:
            pass  # refused by the client (e.g. no metadata within max_block_ms): recorded as failed
        return self.history.sends[-1]

    def run(self, duration_ms: int, interval_ms: int = 10) -> None:
        """Send one value every ``interval_ms`` for ``duration_ms`` of simulated time
        (faults scheduled with ``cluster.world.call_at`` happen in between)."""
        if interval_ms < 1:
            raise IllegalArgumentError(f"interval_ms must be >= 1, not {interval_ms!r}")
        end = self.cluster.now + duration_ms
        while self.cluster.now < end:
            self.send()  # may block (run the world) while the producer waits for metadata
            if self.cluster.now < end:
                self.cluster.advance(min(interval_ms, end - self.cluster.now))

    def finish(self, *, settle_ms: int = 30_000, final_read_timeout_ms: int = 30_000) -> Report:
        """Heal, restart every dead broker, settle, flush, settle, final read, analyse."""
        cluster = self.cluster
        cluster.heal()
        restart_dead(cluster)
        if not settle(cluster, self.topic, settle_ms):
            self.notes.append(f"note: the cluster had not settled {settle_ms} ms after healing")
        try:
            self.producer.flush(timeout=self.producer.config["delivery_timeout_ms"] / 1000 + 5)
        except KafkaTimeoutError:
            self.notes.append("note: the producer's flush timed out; its pending sends count as indeterminate")
        # acks=1 acknowledgements can run ahead of replication: wait for the HW to cover them.
        settle(cluster, self.topic, settle_ms)
        if self.reader is not None:
            self.reader.stop()
        if not final_read(cluster, self.topic, self.history, timeout_ms=final_read_timeout_ms):
            self.notes.append("note: the final read did not complete")
        report = analyse(self.history)
        report.notes.extend(self.notes)
        return report


# --- one schedule ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduleParams:
    """A schedule's arguments, all but its seed (checked here, so a bad one is refused by
    name before anything runs); ``call(seed)`` writes the call that replays it."""

    brokers: int = 3
    partitions: int | None = None  # None: drawn, 1 to 3
    replication_factor: int = 3
    acks: Any = "all"
    min_insync_replicas: int = 2
    unclean_leader_election: bool = False
    enable_idempotence: bool = False
    power_loss: bool = False
    disk_faults: bool = False  # adds a disk filling up (freed later) and a disk whose fsyncs fail
    duration_ms: int = 3_000
    interval_ms: int = 10
    faults: int | None = None  # None: drawn, 1 to 4
    controllers: int = 1  # voters of the metadata quorum; > 1 adds controller faults
    config: tuple = ()  # broker config overrides, as sorted pairs (hashable, printable)
    producer_config: tuple = ()
    workload: str = "produce"  # or "transactions" / "at-least-once": read-process-write (rpw_workload)
    inputs: int = 120  # read-process-write: the input values, written before the faults
    rules: tuple = ()  # (rule name, function) pairs: a student's rules run the brokers (minikafka.rules)

    def __post_init__(self) -> None:
        def positive(name: str, value: Any, minimum: int = 1) -> None:
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise IllegalArgumentError(f"{name} must be an int >= {minimum}, not {value!r}")

        positive("brokers", self.brokers)
        positive("controllers", self.controllers)
        positive("replication_factor", self.replication_factor)
        if self.replication_factor > self.brokers:
            raise IllegalArgumentError(
                f"replication_factor={self.replication_factor} is more than the {self.brokers} brokers")
        positive("min_insync_replicas", self.min_insync_replicas)
        if self.min_insync_replicas > self.replication_factor:
            raise IllegalArgumentError(
                f"min_insync_replicas={self.min_insync_replicas} is more than replication_factor="
                f"{self.replication_factor}: every acks='all' send would fail")
        acks = _acks(self.acks)
        if self.partitions is not None:
            positive("partitions", self.partitions)
        positive("duration_ms", self.duration_ms)
        positive("interval_ms", self.interval_ms)
        if self.faults is not None:
            positive("faults", self.faults, 0)
        for name in ("unclean_leader_election", "enable_idempotence", "power_loss", "disk_faults"):
            if not isinstance(getattr(self, name), bool):
                raise IllegalArgumentError(f"{name} must be True or False, not {getattr(self, name)!r}")
        if self.workload not in WORKLOADS:
            raise IllegalArgumentError(f"workload must be one of {WORKLOADS}, not {self.workload!r}")
        positive("inputs", self.inputs)
        if self.enable_idempotence and acks != -1:
            raise IllegalArgumentError(
                f"enable_idempotence=True needs acks='all', not acks={self.acks!r} (as Kafka's producer)")

    def call(self, seed: int) -> str:
        """The ``run_schedule(...)`` call that replays schedule ``seed``."""
        defaults = ScheduleParams()
        args = [f"seed={seed}"]
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name == "rules" and value:  # the functions by name: the caller has them
                named = ", ".join(f"{rule!r}: {getattr(fn, '__name__', rule)}" for rule, fn in value)
                args.append(f"rules={{{named}}}")
            elif value != getattr(defaults, name):
                args.append(f"{name}={dict(value) if name.endswith('config') else value!r}")
        return f"run_schedule({', '.join(args)})"


def _params(**kwargs: Any) -> ScheduleParams:
    rules = kwargs.get("rules")
    if rules is not None and not isinstance(rules, tuple):
        from minikafka.rules import validate

        kwargs["rules"] = tuple(sorted(validate(rules).items()))
    elif rules is None:
        kwargs["rules"] = ()
    for name in ("config", "producer_config"):
        value = kwargs.get(name)
        if value is not None and not isinstance(value, tuple):
            if not isinstance(value, Mapping):
                raise IllegalArgumentError(f"{name} must be a dict of settings, not {value!r}")
            kwargs[name] = tuple(sorted(value.items()))
        elif value is None:
            kwargs[name] = ()
    unknown = sorted(set(kwargs) - set(ScheduleParams.__dataclass_fields__))
    if unknown:
        known = ", ".join(ScheduleParams.__dataclass_fields__)
        raise IllegalArgumentError(f"unknown argument(s) {unknown}; known: {known}")
    return ScheduleParams(**kwargs)


class _Nemesis:
    """Draws a schedule's faults and applies them at their times (Jepsen's nemesis)."""

    def __init__(self, cluster: Cluster, topic: str, params: ScheduleParams, rng: random.Random,
                 clients: list, workload: Any = None) -> None:
        self.cluster = cluster
        self.workload = workload  # read-process-write: asked to crash its producer mid-transaction
        self.applied: Counter = Counter()  # fault kind -> times it struck
        self.topic = topic
        self.params = params
        self.rng = rng
        self.clients = clients
        self.log: list[tuple[int, str]] = []
        self.stopped = False

    def stop(self) -> None:
        """The end of the schedule: restarts and kills still to come are called off."""
        self.stopped = True

    def _at(self, at: int, action: Callable[[], None]) -> None:
        self.cluster.world.call_at(at, lambda: None if self.stopped else action())

    def _note(self, text: str) -> None:
        self.log.append((self.cluster.now, text))

    def _count(self, kind: str) -> None:
        self.applied[kind] += 1

    def plan(self, start: int, duration_ms: int, count: int) -> None:
        kinds = ["kill", "kill-leader", "strand", "isolate", "isolate-controller", "slow"]
        if self.params.power_loss:
            kinds.append("power-loss")
        if self.params.disk_faults:
            kinds += ["disk-full", "fsync-fail"]
        if self.params.controllers > 1:
            kinds += ["kill-controller", "split-quorum"]
        if self.workload is not None:
            # Twice each: these are what transactions must survive (KIP-98's failure cases).
            kinds += ["kill-producer", "kill-coordinator", "kill-leader"] * 2
        for _ in range(count):
            at = start + self.rng.randrange(duration_ms)
            kind = self.rng.choice(kinds)
            # Each fault's own draws are made now, so the plan does not depend on what
            # the run does (only targets like "the leader of p" are resolved at the time).
            draws = [self.rng.random() for _ in range(4)]
            self._at(at, lambda kind=kind, draws=draws: self._strike(kind, draws))

    # Counted where the kill happens (a delayed kill may be called off); the workload counts
    # the producer crashes it carries out.
    _COUNTED_APART = ("kill", "power-loss", "kill-leader", "kill-coordinator", "kill-producer")

    def _strike(self, kind: str, draws: list[float]) -> None:
        before = len(self.log)
        self.apply(kind, draws)
        if kind not in self._COUNTED_APART and len(self.log) > before:
            self._count(kind)

    def _live(self) -> list[int]:
        return [b for b in self.cluster.broker_ids if self.cluster.alive(b)]

    def _pick(self, items: list, u: float):
        return items[min(int(u * len(items)), len(items) - 1)]

    def _restart_later(self, node: int, u: float, at_least_ms: int = 200) -> None:
        if u < 0.2:
            return  # stays dead until the end of the schedule
        delay = at_least_ms + int(u * 2_500)

        def restart() -> None:
            if not self.cluster.alive(node):
                self.cluster.restart(node)
                self._note(f"restart {node}")
        self._at(self.cluster.now + delay, restart)

    def _heal_later(self, u: float) -> None:
        def heal() -> None:
            self.cluster.heal()
            self._note("heal")
        self._at(self.cluster.now + 200 + int(u * 2_000), heal)

    def apply(self, kind: str, draws: list[float]) -> None:
        cluster = self.cluster
        live = self._live()
        if kind in ("kill", "power-loss"):
            if not live:
                return
            broker = self._pick(live, draws[0])
            cluster.kill(broker, power_loss=kind == "power-loss")
            self._count(kind)
            self._note(f"{'power loss on' if kind == 'power-loss' else 'kill'} {broker}")
            self._restart_later(broker, draws[1])
        elif kind == "kill-leader":
            states = [s for s in cluster.partitions_of(self.topic) if s.leader >= 0 and cluster.alive(s.leader)]
            if not states:
                return
            state = self._pick(states, draws[0])
            leader = state.leader
            others = [b for b in cluster.broker_ids if b != leader]
            # Cut it off from its followers first: whatever it appends from now on is on
            # its disk alone when it dies (in-flight messages would still arrive).
            cluster.partition([leader], others)
            delay = 20 + int(draws[2] * 300)
            self._note(f"cut {leader} (leader of {self.topic}-{state.partition}) off from brokers "
                       f"{others}; kill it in {delay} ms")

            def kill() -> None:
                if cluster.alive(leader):
                    cluster.kill(leader)
                    self._count("kill-leader")
                    self._note(f"kill {leader}")
                    self._restart_later(leader, draws[1])
            self._at(cluster.now + delay, kill)
        elif kind == "isolate":
            broker = self._pick(cluster.broker_ids, draws[0])
            others = [b for b in cluster.broker_ids if b != broker]
            sides = [
                ("the other brokers", others),
                ("the controller", ["controller"]),
                ("the other brokers and the controller", others + ["controller"]),
                ("everyone", others + ["controller"] + self.clients),
            ]
            name, side = self._pick(sides, draws[1])
            cluster.partition([broker], side)
            self._note(f"cut {broker} off from {name}")
            self._heal_later(draws[2])
        elif kind == "strand":
            # The setting for an unclean election: one follower falls out of the ISR, then
            # every other replica dies, so the only live replica is the stale one.
            states = [s for s in cluster.partitions_of(self.topic) if s.leader >= 0 and len(s.replicas) > 1]
            if not states:
                return
            state = self._pick(states, draws[0])
            stale = self._pick([r for r in state.replicas if r != state.leader], draws[1])
            cluster.partition([stale], [state.leader])
            # Out of the ISR takes replica.lag.time.max.ms, plus up to half of it until the
            # leader's next ISR check, plus the controller's round trip.
            lag = cluster.config["replica.lag.time.max.ms"]
            delay = lag + lag // 2 + 200 + int(draws[2] * 600)
            victims = [r for r in state.replicas if r != stale]
            self._note(f"cut {stale} off from {state.leader} (leader of {self.topic}-{state.partition}); "
                       f"kill {', '.join(map(str, victims))} in {delay} ms")

            def kill_the_rest() -> None:
                for victim in victims:
                    if cluster.alive(victim):
                        cluster.kill(victim)
                        self._note(f"kill {victim}")
                        # Dead long enough for the controller to notice and elect: back
                        # sooner, a victim would be handled as a mere restart.
                        self._restart_later(victim, draws[3], cluster.config["broker.session.timeout.ms"] + 500)
            self._at(cluster.now + delay, kill_the_rest)
        elif kind == "kill-producer":
            self.workload.crash_producer()
            self._note("crash the producer in its next transaction (before its commit)")
        elif kind == "kill-coordinator":
            from minikafka.broker.transaction_state_manager import TRANSACTION_STATE_TOPIC
            from minikafka.checker.rpw_workload import TRANSACTIONAL_ID

            live = self._live()
            if not live or TRANSACTION_STATE_TOPIC not in cluster.topics():
                return  # (its topic is made by the first InitProducerId)
            state_partition = cluster.broker(live[0]).transaction_coordinator.state.partition_for(TRANSACTIONAL_ID)
            victim = cluster.partition_state(TRANSACTION_STATE_TOPIC, state_partition).leader
            if victim < 0 or not cluster.alive(victim):
                return
            cluster.kill(victim)
            self._count(kind)
            self._note(f"kill {victim} (the transaction coordinator of {TRANSACTIONAL_ID!r})")
            self._restart_later(victim, draws[1])
        elif kind == "isolate-controller":
            # Brokers keep serving as last told, while the controller sees them all die.
            cluster.partition(["controller"], cluster.broker_ids)
            self._note("cut the controller off from every broker")
            self._heal_later(draws[0])
        elif kind == "kill-controller":
            active = cluster._active_controller()
            victim = active.node_id if active is not None and draws[0] < 0.7 else self._pick(
                [c for c in cluster.controller_ids if cluster.alive(c)] or [None], draws[0])
            if victim is None:
                return
            cluster.kill(victim)
            self._note(f"kill controller {victim}{' (the active one)' if active and victim == active.node_id else ''}")
            self._restart_later(victim, draws[1])
        elif kind == "split-quorum":
            # One voter (the active controller, mostly) cut off from the others: the majority
            # side elects, the lone one must stop leading (check-quorum) without losing anything.
            active = cluster._active_controller()
            lone = active.node_id if active is not None and draws[0] < 0.6 else self._pick(cluster.controller_ids, draws[0])
            others = [c for c in cluster.controller_ids if c != lone]
            cluster.world.network.partition([lone], others)
            self._note(f"cut controller {lone} off from controllers {others}")
            self._heal_later(draws[2])
        elif kind == "disk-full":
            # Its next append fails (KAFKA_STORAGE_ERROR, nothing written) and takes its log
            # dir offline; once space returns, an operator restarts it and it rejoins.
            broker = self._pick(cluster.broker_ids, draws[0])
            cluster.fill_disk(broker)
            self._note(f"disk full on {broker}")

            def free() -> None:
                cluster.fill_disk(broker, False)
                self._note(f"space freed on {broker}")
                if cluster.alive(broker) and cluster.broker(broker).log_manager.offline is not None:
                    cluster.kill(broker)
                    cluster.restart(broker)
                    self._note(f"restart {broker} (its log dir went offline)")
            self._at(cluster.now + 200 + int(draws[1] * 2_000), free)
        elif kind == "fsync-fail":
            # Its next flush takes its log dir offline (it refuses appends and its heartbeat
            # says so); later the disk is replaced and the broker restarted, as an operator would.
            broker = self._pick(cluster.broker_ids, draws[0])
            cluster.fail_fsync(broker)
            self._note(f"fsyncs fail on {broker}")

            def replace_disk() -> None:
                cluster.fail_fsync(broker, False)
                if cluster.alive(broker):
                    cluster.kill(broker)
                cluster.restart(broker)
                self._note(f"disk of {broker} replaced; restart {broker}")
            self._at(cluster.now + 500 + int(draws[1] * 2_500), replace_disk)
        elif kind == "slow":
            nodes = list(cluster.broker_ids) + ["controller"]
            src = self._pick(nodes, draws[0])
            dst = self._pick([n for n in nodes if n != src], draws[1])
            latency = 50 + int(draws[2] * 950)
            cluster.slow(src, dst, latency)
            cluster.slow(dst, src, latency)
            self._note(f"slow {src} <-> {dst} to {latency} ms")
            self._heal_later(draws[3])


@contextmanager
def _quiet_clients(disk_faults: bool = False) -> Iterator[None]:
    """Clients log warnings on every fault (resetting producer ids, timeouts, failed
    commits): across a campaign of thousands of faults that is noise, and the report says
    what matters. (Every client module's logger is a child of "minikafka.clients".) With
    disk faults, so are the storage layer's "appends are failing" lines, a broker's
    metadata log saying its appends fail and work again, and a broker saying its log
    directory went offline."""
    names = ["minikafka.clients", "minikafka.clients.sender", "minikafka.clients.producer",
             "minikafka.clients.future"] + (["minikafka.storage", "minikafka.storage.cleaner", "minikafka.raft",
                                             "minikafka.broker.log_dir"] if disk_faults else [])
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL if lg.name.startswith(("minikafka.storage", "minikafka.raft", "minikafka.broker"))
                    else logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def run_schedule(seed: int, *, record_history: bool = False, **kwargs: Any) -> Report:
    """Run one schedule (see the module docstring) and judge it. Keyword arguments: those
    of ``fault_campaign``; the report carries ``seed`` and ``faults`` (what was done when).
    With ``record_history=True`` the cluster keeps its event trace (``report.cluster`` is
    then left open for inspection; close it when done)."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise IllegalArgumentError(f"seed must be an int, not {seed!r}")
    return _run(seed, _params(**kwargs), record_history)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector off for one schedule, then one young-generation pass.

    A schedule allocates some hundred thousand short-lived objects, and the collector,
    triggered every 700 allocations, kept walking them: about 7% of a campaign's time,
    for garbage that is all still there when the schedule ends (its cluster is one
    big cycle). Everything a schedule allocates stays in the youngest generation while the
    collector is off, so one pass over that generation afterwards frees it, and memory
    stays that of one schedule. Nothing a schedule computes depends on when objects are
    freed, so reports do not change."""
    if not gc.isenabled():  # the caller manages the collector itself
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect(0)


@_collector_paused()
def _run(seed: int, params: ScheduleParams, record_history: bool = False,
         epilogue: Callable[[Cluster, Report], None] | None = None) -> Report:
    rng, partitions, n_faults, config, producer_config = _draw(seed, params)
    if params.workload != "produce":
        return _run_rpw(seed, params, rng, partitions, n_faults, {**RPW_BROKER_CONFIG, **config},
                        producer_config, record_history)
    with run_cluster(params.brokers, seed=seed, config=config, record_history=record_history,
                     controllers=params.controllers, rules=dict(params.rules)) as cluster, \
            _quiet_clients(params.disk_faults):
        workload, nemesis = stage(cluster, params, rng, partitions, n_faults, producer_config)
        with _faults_told(nemesis):
            workload.run(QUIET_MS + params.duration_ms + TAIL_MS, params.interval_ms)
            nemesis.stop()
            repair_disks(cluster)
            report = workload.finish()
            report.raft = judge_quorum(cluster)
            report.seed = seed
            report.faults = nemesis.log
            report.fault_counts = Counter(nemesis.applied)
            report.params = params
            if epilogue is not None:  # the judge's own checks, on the settled cluster
                epilogue(cluster, report)
        if record_history:
            report.cluster = cluster
        return report


@contextmanager
def _faults_told(nemesis) -> Iterator[None]:
    """A student's rule that stops the cluster (``RuleError``) carries the faults that struck
    before it (``error.faults``): the judge's timeline shows them."""
    try:
        yield
    except RuleError as error:
        error.faults = list(nemesis.log)
        raise


def _draw(seed: int, params: ScheduleParams) -> tuple[random.Random, int, int, dict, dict]:
    """A produce schedule's first draws (its partitions and number of faults, from the seed) and
    its settings: (rng, partitions, faults, broker config, producer config)."""
    rng = random.Random(f"faults/{seed}")
    partitions = params.partitions or rng.randint(1, 3)
    n_faults = params.faults if params.faults is not None else rng.randint(1, 4)
    config = {**CAMPAIGN_BROKER_CONFIG, **dict(params.config),
              "min.insync.replicas": params.min_insync_replicas,
              "unclean.leader.election.enable": params.unclean_leader_election}
    producer_config = {**CAMPAIGN_PRODUCER_CONFIG, **dict(params.producer_config),
                       "acks": params.acks, "enable_idempotence": params.enable_idempotence}
    return rng, partitions, n_faults, config, producer_config


def stage(cluster: Cluster, params: ScheduleParams, rng: random.Random, partitions: int, n_faults: int,
          producer_config: Mapping[str, Any]) -> tuple["Workload", "_Nemesis"]:
    """Set a produce schedule up on ``cluster``: the topic, the workload's clients, and the
    nemesis's faults planned at their times (they strike as the cluster's clock passes them,
    whoever advances it: the campaign's loop, or a dashboard replaying the schedule)."""
    cluster.create_topic(TOPIC, partitions, params.replication_factor)
    workload = Workload(cluster, TOPIC, **producer_config)
    clients = [workload.producer.node_id] + ([workload.reader.node_id] if workload.reader else [])
    nemesis = _Nemesis(cluster, TOPIC, params, rng, clients)
    # Half a second of quiet first, so every schedule starts from a working cluster;
    # a tail after the last fault starts, so delayed kills and restarts still happen
    # (and writes meet them).
    nemesis.plan(cluster.now + QUIET_MS, params.duration_ms, n_faults)
    return workload, nemesis


def _run_rpw(seed: int, params: ScheduleParams, rng: random.Random, partitions: int, n_faults: int,
             config: dict, producer_config: dict, record_history: bool):
    """One read-process-write schedule (``rpw_workload``): the same nemesis, aimed at the
    output topic, plus crashes of the producer and of the transaction coordinator."""
    from minikafka.checker.rpw_workload import INPUT, OUTPUT, ReadProcessWrite, lso_settled

    with run_cluster(params.brokers, seed=seed, config=config, record_history=record_history,
                     controllers=params.controllers) as cluster, _quiet_clients(params.disk_faults):
        clients: list = []
        workload = ReadProcessWrite(cluster, partitions=partitions, replication_factor=params.replication_factor,
                                    inputs=params.inputs, rng=random.Random(f"rpw/{seed}"),
                                    transactional=params.workload == "transactions",
                                    producer_config=producer_config, clients=clients)
        nemesis = _Nemesis(cluster, OUTPUT, params, rng, clients, workload)
        nemesis.plan(cluster.now + QUIET_MS, params.duration_ms, n_faults)
        # Paced so the inputs last the whole run: the faults meet transactions, not an idle loop.
        run_ms = QUIET_MS + params.duration_ms + TAIL_MS
        workload.run(run_ms, max(params.interval_ms, run_ms * workload.max_poll_records // params.inputs))
        nemesis.stop()
        repair_disks(cluster)
        cluster.heal()
        restart_dead(cluster)
        for topic in (INPUT, OUTPUT):
            if not settle(cluster, topic):
                workload.notes.append(f"note: {topic} had not settled 30 s after healing")
        if not workload.drain():
            workload.notes.append("note: the inputs were not all processed 60 s after healing")
        if not cluster.run_until(lambda: lso_settled(cluster, OUTPUT) and settled(cluster, OUTPUT), 30_000):
            workload.notes.append("note: a transaction was still open on the output 30 s after the drain")
        report = workload.judge(workload.final_read())
        report.raft = judge_quorum(cluster)
        report.seed = seed
        report.faults = nemesis.log
        report.fault_counts = Counter(nemesis.applied) + workload.faults
        report.params = params
        if record_history:
            report.cluster = cluster
        return report


@contextmanager
def run_cluster(brokers: int, *, seed: int, config: Mapping[str, Any], record_history: bool,
                controllers: int = 1, rules: Mapping[str, Callable] | None = None) -> Iterator[Cluster]:
    """A simulated cluster for one seeded run, closed when the run ends.

    Its logs live in RAM when we can: a campaign fsyncs thousands of times and a disk makes
    that its slowest part; nothing depends on where the files are, so results do not change.
    With ``record_history`` a run that succeeds leaves it open for inspection (it then owns a
    directory of its own, which ``close()`` removes); a run that fails always closes it.
    """
    scratch = None if record_history else _scratch_dir()
    from minikafka.checker.raft import RaftHistory

    cluster = Cluster(brokers, seed=seed, config=config, record_history=record_history, dir=scratch,
                      controllers=controllers, raft_history=RaftHistory(), rules=rules)
    keep = False
    try:
        yield cluster
        keep = record_history
    finally:
        if not keep:
            cluster.close()
            if scratch is not None:
                scratch_folder.remove(scratch)


def _scratch_dir() -> str:
    # Marked as this process's (minikafka.scratch): a judge killed mid-schedule leaks no RAM for
    # longer than the next schedule's start.
    return str(scratch_folder.make("minikafka-schedule-", platform.ram_dir()))


# --- a campaign -----------------------------------------------------------------------------------------


def schedule_seeds(seed: int, schedules: int) -> list[int]:
    """The seeds of a campaign's schedules, drawn from the campaign's seed."""
    rng = random.Random(f"campaign/{seed}")
    return [rng.randrange(1 << 32) for _ in range(schedules)]


@dataclass
class CampaignReport:
    """The sum of a campaign's schedules: ``anomalies`` (name -> total count, every name
    present), ``failing_seeds`` (replay each with ``run_schedule(seed, ...)``; ``replay(s)``
    writes the call), ``reports`` (the failing schedules' own reports), ``table()``."""

    seed: int
    schedules: int
    params: ScheduleParams
    anomalies: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ANOMALIES, 0))
    schedules_with: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ANOMALIES, 0))
    failing_seeds: list[int] = field(default_factory=list)
    unchecked_seeds: list[int] = field(default_factory=list)
    examples: dict[str, tuple[int, Anomaly]] = field(default_factory=dict)
    reports: dict[int, Report] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    raft_violations: int = 0  # the metadata quorum's, over every schedule (checker.raft)
    raft_elections: int = 0
    raft_examples: list = field(default_factory=list)
    faults: dict[str, int] = field(default_factory=dict)  # fault kind -> times it struck, all schedules

    def __post_init__(self) -> None:
        if self.params.workload != "produce":  # judged by checker.transactions
            from minikafka.checker.transactions import TXN_ANOMALIES

            self.anomalies = dict.fromkeys(TXN_ANOMALIES, 0)
            self.schedules_with = dict.fromkeys(TXN_ANOMALIES, 0)

    @property
    def ok(self) -> bool:
        return not self.failing_seeds and not self.unchecked_seeds

    def add(self, report: Report) -> None:
        raft = getattr(report, "raft", None)
        if raft is not None:
            self.raft_violations += len(raft.violations)
            self.raft_elections += raft.elections
            if raft.violations:
                self.raft_examples.append((report.seed, raft.violations[0]))
                if report.seed not in self.failing_seeds:
                    self.failing_seeds.append(report.seed)
                    self.reports[report.seed] = report
        for kind, n in getattr(report, "fault_counts", {}).items():
            self.faults[kind] = self.faults.get(kind, 0) + n
        for kind in self.anomalies:
            n = report.anomalies[kind]
            self.anomalies[kind] += n
            if n:
                self.schedules_with[kind] += 1
                self.examples.setdefault(kind, (report.seed, report.cases[kind][0]))
        for key, value in report.counts.items():
            self.counts[key] = self.counts.get(key, 0) + value
        if any(report.anomalies.values()) and report.seed not in self.failing_seeds:
            self.failing_seeds.append(report.seed)
            self.reports[report.seed] = report
        elif report.unchecked:
            self.unchecked_seeds.append(report.seed)
            self.reports[report.seed] = report

    def replay(self, seed: int) -> str:
        return self.params.call(seed)

    def table(self, width: int = 120) -> str:
        rows = []
        for kind in self.anomalies:
            example = "-"
            if kind in self.examples:
                seed, case = self.examples[kind]
                example = f"seed {seed}: {case}"
            rows.append((kind, str(self.anomalies[kind]), str(self.schedules_with[kind]), example))
        lines = _table(("anomaly", "count", "schedules", "example"), rows, width)
        c = self.counts
        if self.params.workload == "produce":
            lines.append(f"{self.schedules} schedules (campaign seed {self.seed}); sends: {c.get('ok', 0)} ok, "
                         f"{c.get('info', 0)} indeterminate, {c.get('fail', 0)} failed")
        else:
            lines.append(f"{self.schedules} schedules (campaign seed {self.seed}, {self.params.workload}); "
                         f"transactions: {c.get('committed', 0)} committed, {c.get('aborted', 0)} aborted, "
                         f"{c.get('unknown', 0)} unknown")
            # (Only here: the produce workload's table is printed in notebooks, unchanged.)
            lines.append("faults: " + ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())))
        if self.params.controllers > 1 or self.raft_violations:
            example = f" (e.g. seed {self.raft_examples[0][0]}: {self.raft_examples[0][1].kind})" \
                if self.raft_examples else ""
            lines.append(f"metadata quorum ({self.params.controllers} controllers): {self.raft_violations} "
                         f"violations in {self.raft_elections} epochs{example}")
        if self.failing_seeds:
            shown = ", ".join(map(str, self.failing_seeds[:8]))
            more = f", ... ({len(self.failing_seeds)} in all)" if len(self.failing_seeds) > 8 else ""
            lines.append(f"failing seeds: {shown}{more}")
            lines.append(f"replay: {self.replay(self.failing_seeds[0])}")
        if self.unchecked_seeds:
            lines.append(f"final read incomplete: seeds {', '.join(map(str, self.unchecked_seeds[:8]))}")
        lines.append("verdict: " + ("ok" if self.ok else "NOT ok"))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        found = ", ".join(f"{k}={v}" for k, v in self.anomalies.items() if v) or "no anomalies"
        return f"<CampaignReport {self.schedules} schedules, {'ok' if self.ok else 'NOT ok'}: {found}>"

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # IPython shows the table
        printer.text(self.table())


def fault_campaign(schedules: int = 100, seed: int = 0, *, acks: Any = "all", min_insync_replicas: int = 2,
                   unclean_leader_election: bool = False, replication_factor: int = 3, brokers: int = 3,
                   enable_idempotence: bool = False, power_loss: bool = False, disk_faults: bool = False,
                   partitions: int | None = None,
                   duration_ms: int = 3_000, interval_ms: int = 10, faults: int | None = None,
                   config: Mapping[str, Any] | None = None, producer_config: Mapping[str, Any] | None = None,
                   progress: bool = False, controllers: int = 1, workload: str = "produce",
                   inputs: int = 120, jobs: int = 1) -> CampaignReport:
    """Run ``schedules`` random fault schedules (see the module docstring) and add up
    their reports. ``progress=True`` shows a progress bar (tqdm). ``workload="transactions"``
    runs read-process-write with transactions instead of a plain producer (``rpw_workload``;
    ``inputs`` values each), ``"at-least-once"`` the same loop without them (a negative control).

    ``jobs`` > 1 runs schedules in that many worker processes (``jobs=0``: one per core).
    Schedules share nothing and are added up in seed order, so the report is the same for
    any ``jobs``: only the wall time changes."""
    if not isinstance(schedules, int) or isinstance(schedules, bool) or schedules < 1:
        raise IllegalArgumentError(f"schedules must be an int >= 1, not {schedules!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise IllegalArgumentError(f"seed must be an int, not {seed!r}")
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 0:
        raise IllegalArgumentError(f"jobs must be an int >= 0 (0: one per core), not {jobs!r}")
    params = _params(
        brokers=brokers, partitions=partitions, replication_factor=replication_factor, acks=acks,
        min_insync_replicas=min_insync_replicas, unclean_leader_election=unclean_leader_election,
        enable_idempotence=enable_idempotence, power_loss=power_loss, disk_faults=disk_faults, duration_ms=duration_ms,
        interval_ms=interval_ms, faults=faults, config=config, producer_config=producer_config,
        controllers=controllers, workload=workload, inputs=inputs)
    campaign = CampaignReport(seed, schedules, params)
    seeds = schedule_seeds(seed, schedules)
    jobs = min(jobs or os.cpu_count() or 1, schedules)
    with _schedule_runner(jobs) as run_all:
        reports = run_all(seeds, params)
        if progress:
            from tqdm.auto import tqdm
            reports = tqdm(reports, desc="schedules", unit="schedule", total=schedules)
        for report in reports:
            campaign.add(report)
    return campaign


@contextmanager
def _schedule_runner(jobs: int) -> Iterator[Callable[[list[int], ScheduleParams], Iterator[Report]]]:
    """Yields ``run_all(seeds, params)``: the schedules' reports, in seed order.

    With several jobs the schedules run in forked worker processes (a fork starts in
    milliseconds with every module already imported; each schedule builds its own cluster
    from its seed, so nothing a worker inherits can change a report).
    """
    if jobs == 1:
        yield lambda seeds, params: (_run(s, params) for s in seeds)
        return
    import multiprocessing
    from functools import partial

    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        yield lambda seeds, params: pool.imap(partial(_run, params=params), seeds, chunksize=1)
