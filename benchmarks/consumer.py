"""Consumer groups in the simulated cluster: how long a group takes to give a dead (or
departing) member's partitions to the survivors, against ``session.timeout.ms``; and how
fast a group of 3 consumers drains a topic, against a single consumer.

Rebalance times are *simulated* milliseconds (they are about the protocol: session timeouts,
heartbeats, JoinGroup/SyncGroup), read off ``cluster.now``. Consumption rates are given both
per simulated second and per wall-clock second (what running the simulation costs here).

Auto commit is off in every run: with ``enable_auto_commit=True`` a ``poll()`` that starts a
rejoin while an auto commit is due spins forever without letting simulated time pass (a bug
in ``KafkaConsumer.poll``, reported with a repro). The driver commits instead, with
``commit_async()`` every ``COMMIT_INTERVAL_MS`` while the member is stable, which is what
auto commit would do.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from minikafka import Cluster, KafkaConsumer, KafkaProducer, TopicPartition

from benchmarks.common import VALUE_BYTES, Section, fig, runs

TOPIC, GROUP = "bench", "bench-group"
PARTITIONS, BROKERS, REPLICATION = 6, 3, 3
MEMBERS = 3
CLUSTER_CONFIG = {"offsets.topic.num.partitions": 3}  # where the coordinator is does not matter here

SESSION_TIMEOUTS_MS = [6_000, 10_000, 30_000, 45_000]
SEND_EVERY_MS = 50  # steady production: one record to every partition this often
POLL_MS = 10  # each consumer's poll() timeout; the driver polls the live members in turn
COMMIT_INTERVAL_MS = 1_000  # the driver's commit_async() period (auto commit's job)
WARMUP_LIMIT_MS = 120_000

CONSUME_RECORDS = 100_000
CONSUME_POLL_MS = 1  # short, so that the members' user threads take turns often


# --- 1. rebalance after a member dies or leaves ----------------------------------------------------


@dataclass
class Rebalance:
    detected_ms: int  # the coordinator starts the rebalance (dead member removed / LeaveGroup)
    assigned_ms: int  # the last survivor has its new assignment (SyncGroup answered)
    resumed_ms: int  # a survivor's poll() has returned a record of every lost partition
    wall_s: float


class GroupDriver:
    """A producer writing steadily and a group of consumers polled in turn, in one cluster."""

    def __init__(self, seed: int, session_ms: int) -> None:
        self.cluster = Cluster(brokers=BROKERS, seed=seed, record_history=False, config=CLUSTER_CONFIG)
        self.cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=REPLICATION)
        self.producer = KafkaProducer(bootstrap_servers=self.cluster, acks="all", linger_ms=0)
        self.members = [
            KafkaConsumer(TOPIC, bootstrap_servers=self.cluster, group_id=GROUP, auto_offset_reset="earliest",
                          enable_auto_commit=False, session_timeout_ms=session_ms,
                          heartbeat_interval_ms=session_ms // 3)
            for _ in range(MEMBERS)
        ]
        self.value = b"x" * VALUE_BYTES
        self.last_send = -SEND_EVERY_MS
        self.last_commit = {c.node_id: 0 for c in self.members}

    @property
    def now(self) -> int:
        return self.cluster.now

    def tick(self, live: list[KafkaConsumer]) -> list[tuple[KafkaConsumer, set[TopicPartition]]]:
        """Produce if it is time, then one poll() per live member: [(member, partitions returned)]."""
        if self.now - self.last_send >= SEND_EVERY_MS:
            self.last_send = self.now
            for p in range(PARTITIONS):
                self.producer.send(TOPIC, value=self.value, partition=p)
        out = []
        for c in live:
            out.append((c, set(c.poll(timeout_ms=POLL_MS))))
            co = c._node.coordinator
            if co.state == "STABLE" and not co.need_rejoin and self.now - self.last_commit[c.node_id] >= COMMIT_INTERVAL_MS:
                self.last_commit[c.node_id] = self.now
                c.commit_async()
        return out

    def warm_up(self) -> None:
        """Until every member has its share and has consumed from each of its partitions."""
        seen = {c.node_id: set() for c in self.members}
        start = self.now
        while True:
            for c, tps in self.tick(self.members):
                seen[c.node_id] |= tps
            if all(len(c.assignment()) == PARTITIONS // MEMBERS and seen[c.node_id] >= c.assignment()
                   for c in self.members):
                return
            if self.now - start > WARMUP_LIMIT_MS:
                raise RuntimeError(f"the group did not settle in {WARMUP_LIMIT_MS} ms")

    def group(self, member: KafkaConsumer):
        """The coordinator's view of the group (as the given member knows the coordinator)."""
        broker = member._node.coordinator.coordinator
        if broker is None or not self.cluster.alive(broker):
            return None
        return self.cluster.broker(broker).group_coordinator.groups.get(GROUP)

    def close(self) -> None:
        self.cluster.close()


def rebalance_run(session_ms: int, seed: int, clean: bool) -> Rebalance:
    wall = time.perf_counter()
    d = GroupDriver(seed, session_ms)
    try:
        d.warm_up()
        # Crash at a random point of the heartbeat cycle (seeded): the time to detection
        # depends on how long before the crash the member's last heartbeat was.
        rng = random.Random(seed)
        until = d.now + rng.randrange(session_ms // 3)
        while d.now < until:
            d.tick(d.members)
        victim = d.members[seed % MEMBERS]  # leader or follower, depending on the seed
        live = [c for c in d.members if c is not victim]
        lost = set(victim.assignment())
        generation = victim._node.coordinator.generation
        if clean:
            victim.commit()  # a graceful shutdown commits first (not timed) ...
            start = d.now
            victim.close()  # ... and sends LeaveGroup
        else:
            start = d.now
            d.cluster.kill_consumer(victim)
        detected = None
        resumed: dict[TopicPartition, int] = {}
        while len(resumed) < len(lost):
            for c, tps in d.tick(live):
                for tp in tps & lost:
                    resumed.setdefault(tp, d.now - start)
                group = d.group(c)
                if detected is None and group is not None and group.state == "PreparingRebalance" \
                        and group.state_timestamp >= start:
                    detected = group.state_timestamp - start
            if d.now - start > 10 * session_ms:
                raise RuntimeError(f"lost partitions {sorted(lost - set(resumed))} not consumed again "
                                   f"{10 * session_ms} ms after the member {'left' if clean else 'died'}")
        assigned = max(
            next(t for t, text in c._node.coordinator.events
                 if t >= start and text.startswith("generation ") and int(text.split()[1].rstrip(":")) > generation)
            for c in live
        ) - start
        return Rebalance(-1 if detected is None else detected, assigned, max(resumed.values()),
                         time.perf_counter() - wall)
    finally:
        d.close()


# --- 2. records per second drained by a group ---------------------------------------------------------


@dataclass
class Drain:
    join_ms: int  # first poll() to every member stable (group.initial.rebalance.delay.ms and all)
    sim_ms: int  # stable group to the last record returned
    wall_s: float  # the same, in wall-clock seconds
    preload_wall_s: float


def drain_run(records: int, members: int, seed: int) -> Drain:
    cluster = Cluster(brokers=BROKERS, seed=seed, record_history=False, config=CLUSTER_CONFIG)
    try:
        cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=REPLICATION)
        wall = time.perf_counter()
        producer = KafkaProducer(bootstrap_servers=cluster, acks="all", linger_ms=5)
        value = b"x" * VALUE_BYTES
        for i in range(records):
            producer.send(TOPIC, value=value, partition=i % PARTITIONS)
        producer.flush()
        producer.close()
        preload = time.perf_counter() - wall
        group = [KafkaConsumer(TOPIC, bootstrap_servers=cluster, group_id=GROUP, auto_offset_reset="earliest",
                               enable_auto_commit=False) for _ in range(members)]
        join_start = cluster.now
        for c in group:
            c.poll(timeout_ms=0)  # starts the join
        if not cluster.run_until(lambda: all(c._node.coordinator.state == "STABLE" for c in group), 60_000):
            raise RuntimeError("the group did not form in 60 s")
        start, wall = cluster.now, time.perf_counter()
        seen: set[tuple[int, int]] = set()
        while len(seen) < records:
            for c in group:
                for tp, rs in c.poll(timeout_ms=CONSUME_POLL_MS).items():
                    seen.update((tp.partition, r.offset) for r in rs)
            if cluster.now - start > 600_000:
                raise RuntimeError(f"only {len(seen):,} of {records:,} records consumed in 600 s")
        return Drain(start - join_start, cluster.now - start, time.perf_counter() - wall, preload)
    finally:
        cluster.close()


# --- the report -------------------------------------------------------------------------------------------


def run(scratch: Path, quick: bool, repeats: int) -> list[Section]:
    sessions = SESSION_TIMEOUTS_MS[:1] if quick else SESSION_TIMEOUTS_MS
    seeds = list(range(repeats))
    records = 2_000 if quick else CONSUME_RECORDS
    bar = tqdm(total=2 * len(sessions) * len(seeds) + 2 * repeats, desc="consumer", unit="run", leave=False)

    rows = []
    for clean in (False, True):
        for session in sessions:
            results = []
            for seed in seeds:
                results.append(rebalance_run(session, seed, clean))
                bar.update()
            resumed = [r.resumed_ms for r in results]
            detected = [r.detected_ms for r in results if r.detected_ms >= 0]
            rows.append([
                "clean shutdown (`close()`: LeaveGroup)" if clean else "crash (`cluster.kill_consumer`)",
                f"{session:,} / {session // 3:,}", runs(len(results)),
                fig(detected) if detected else "not seen", fig([r.assigned_ms for r in results]), fig(resumed),
                fig([r / session for r in resumed], "{:.2f}"), fig([r.wall_s for r in results], "{:.1f}"),
            ])
    rebalance = Section(
        name="consumer",
        title="Consumer groups: time to reassign a departed member's partitions (simulated)",
        method=[
            f"A simulated {BROKERS}-broker `Cluster` (topic `{TOPIC}`: {PARTITIONS} partitions, RF={REPLICATION}; "
            f"`offsets.topic.num.partitions` {CLUSTER_CONFIG['offsets.topic.num.partitions']}); a `KafkaProducer` "
            f"(acks=all) sends one {VALUE_BYTES}-byte record to every partition each {SEND_EVERY_MS} simulated ms; "
            f"a group of {MEMBERS} `KafkaConsumer`s (range assignor, so {PARTITIONS // MEMBERS} partitions each; "
            "`heartbeat_interval_ms` = `session_timeout_ms` // 3) polled in turn by one driver, "
            f"`poll(timeout_ms={POLL_MS})` each, with `commit_async()` every {COMMIT_INTERVAL_MS:,} ms per member "
            "(auto commit is off: with it, a `poll()` that starts a rejoin while an auto commit is due spins "
            "forever, a bug in `KafkaConsumer.poll`).",
            "Once every member has its 2 partitions and has consumed from both, the driver runs on for a "
            "seeded random time within one heartbeat interval, then one member (which one depends on the "
            "seed: sometimes the group leader) **crashes** (`cluster.kill_consumer`) or **shuts down "
            "cleanly** (`commit()`, untimed, then `close()`, which sends LeaveGroup). Time 0 is that moment.",
            "Columns, in simulated ms after time 0: **detected**: the coordinator starts the rebalance "
            "(`PreparingRebalance`: session expired, or LeaveGroup); **assigned**: the last survivor has its "
            "new assignment (SyncGroup answered); **consumed again**: a survivor's `poll()` has returned a "
            "record from every one of the departed member's partitions (the figure asked for; its resolution "
            f"is one round of polls, at most {POLL_MS * (MEMBERS - 1)} ms).",
            "Why a crash costs one session timeout or a little more: the coordinator expires the member "
            "`session_timeout_ms` after the last Heartbeat *or OffsetCommit* it had from it (as Kafka does; "
            f"here the member committed at most {COMMIT_INTERVAL_MS:,} ms before the crash, so detection comes "
            "just under one session timeout); then the rebalance waits until every survivor has rejoined, and a "
            "survivor learns of it only from its next heartbeat's REBALANCE_IN_PROGRESS, up to one heartbeat "
            "interval (1/3 of the session timeout) later; SyncGroup, OffsetFetch and the first fetch add a few "
            "round trips. So expect about 1 to 4/3 x `session_timeout_ms`. A clean shutdown skips the expiry: "
            "only the survivors' heartbeat lag remains (at most about 1/3).",
            f"Seeds {seeds[0]}–{seeds[-1]}, one run each: median (min–max). Wall: seconds per run, "
            "cluster start and warm-up included.",
        ],
        columns=["Departure", "session.timeout.ms / heartbeat.interval.ms", "Runs", "Detected (ms)",
                 "Assigned (ms)", "Consumed again (ms)", "Consumed again / session.timeout.ms", "Wall s/run"],
        rows=rows,
    )

    drains: dict[int, list[Drain]] = {1: [], MEMBERS: []}
    for r in range(repeats):  # alternate which goes first
        for members in ((1, MEMBERS) if r % 2 == 0 else (MEMBERS, 1)):
            drains[members].append(drain_run(records, members, seed=r))
            bar.update()
    bar.close()
    drain_rows = []
    for members, ds in drains.items():
        drain_rows.append([
            f"{members} consumer{'s' if members > 1 else ''}", f"{records:,}", fig([d.join_ms for d in ds]),
            fig([d.sim_ms for d in ds]), fig([records / (d.sim_ms / 1000) for d in ds]),
            fig([d.wall_s for d in ds], "{:.2f}"), fig([records / d.wall_s for d in ds]),
            fig([d.preload_wall_s for d in ds], "{:.2f}"),
        ])
    sim_ratio = [records / a.sim_ms / (records / b.sim_ms) for a, b in zip(drains[MEMBERS], drains[1])]
    wall_ratio = [b.wall_s / a.wall_s for a, b in zip(drains[MEMBERS], drains[1])]
    drain_rows.append([
        f"**{MEMBERS} / 1**", "", "", "", fig(sim_ratio, "{:.2f}"), "", fig(wall_ratio, "{:.2f}"), "",
    ])
    drain = Section(
        name="consumer",
        title=f"Consumer groups: records per second drained by {MEMBERS} consumers and by 1",
        method=[
            f"{records:,} records of {VALUE_BYTES} bytes preloaded round-robin into the {PARTITIONS} partitions "
            f"(RF={REPLICATION}, {BROKERS} brokers) by a `KafkaProducer` (acks=all, linger_ms=5, `flush()`); then "
            f"a group of {MEMBERS} `KafkaConsumer`s, or of 1 (`auto_offset_reset='earliest'`, auto commit off, "
            "other settings default: `max_poll_records` 500, `max_partition_fetch_bytes` 1 MiB), subscribes. "
            "**Join**: simulated ms from the first `poll()` until every member is stable "
            "(`group.initial.rebalance.delay.ms`, 3 s, once more if a member joined during the delay, as in Kafka); "
            "not counted in the rates.",
            f"**Drain**: from the stable group until every record has been returned once by some `poll()`, "
            f"the driver calling `poll(timeout_ms={CONSUME_POLL_MS})` on each member in turn. Simulated: "
            "`cluster.now`; wall: `time.perf_counter()` over the same loop (this machine running the brokers' "
            "fetch handling, the consumers' decoding and the driver). Preload wall: the producer, for scale.",
            "The simulator models latency (1 ms per network hop) but neither bandwidth nor CPU time, and "
            "`poll()` returning buffered records costs no simulated time: the simulated drain time is a few "
            "round trips (OffsetFetch, ListOffsets, a few fetches of up to 1 MiB per partition) whatever the "
            "volume, so records per *simulated* second mostly measure the size of a fetch, and 3 consumers "
            "cannot be 3x faster than 1 (their user threads take turns in one Python thread; a member's "
            "first fetch waits for its turn to take its assignment).",
            f"{runs(repeats)} each (seeds 0–{repeats - 1}), alternating which group size goes first; "
            f"ratio = 1-consumer time / {MEMBERS}-consumer time within each seed. Median (min–max).",
        ],
        columns=["Group", "Records", "Join (sim ms)", "Drain (sim ms)", "Records / simulated s",
                 "Drain (wall s)", "Records / wall s", "Preload (wall s)"],
        rows=drain_rows,
    )
    return [rebalance, drain]
