"""Chaos: SIGKILLs of real broker processes under load, every run judged by the checker.

**Safe configuration**, ``runs`` times (``MINIKAFKA_BENCH_CHAOS_RUNS``, default 20; 1 with
``--quick``): a fresh topic (3 partitions, RF 3, ``min.insync.replicas`` 2, no unclean
election) on one 3-broker cluster of real processes (``launch``), kafka-python's producer
with ``acks='all'`` and ``enable_idempotence=True`` sending numbered values as fast as it is
allowed, and ``kills`` times per run (2; 1 with ``--quick``): SIGKILL a partition's leader
or a random broker (drawn from the run's seed), let the cluster run without it for 0.5-3 s,
restart it, wait for every partition's ISR to be whole again. Then every partition is read
back from log start to high watermark and ``minikafka.checker.analyse`` judges the history:
*lost* = acknowledged values missing from the log (``lost-write``), *duplicated* = values
stored twice (``duplicate``), *reordered* = acknowledged values of one partition whose
offsets are out of send order (counted here: pairs of consecutive acknowledged sends whose
offsets decrease).

**Negative control** (``controls`` runs, 3; 1 with ``--quick``): ``acks=1`` without
idempotence, ``unclean.leader.election.enable=true``, 1 partition RF 3: one follower is
paused (SIGSTOP) until it leaves the ISR, writes go on to the leader and the other follower,
then both are SIGKILLed and the paused one resumed: the only live replica is the stale one,
the controller elects it (unclean), and what it missed is gone. The run must show losses.
The paused broker is fenced once its session times out, and a fenced broker is not in
Metadata (as in Kafka); if the producer refreshed its metadata after that, it knows only the
two dead brokers, and kafka-python 3.0.12 never goes back to its bootstrap servers (it has no
re-bootstrap, KIP-899): it would wait forever. The run then replaces the producer, as an
application would restart it (its pending sends stay indeterminate), and says so in its notes.

Timeouts are scaled down as in the wire tests (a dead broker noticed after 3 s, a lagging
follower out of the ISR after 2 s). Figures are counts, not speeds.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaTimeoutError
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from minikafka.checker import DUPLICATE, LOST_WRITE, History, analyse
from minikafka.wire.admin_probe import roundtrip
from minikafka.wire.process import launch

from benchmarks.common import Section

CHAOS_CONFIG = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "replica.lag.time.max.ms": 2000,
    "group.initial.rebalance.delay.ms": 0,
}
SEED = 13


def now_ms() -> int:
    return int(time.monotonic() * 1000)


def wait_until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def partitions(cluster, topic: str) -> dict[int, tuple[int, list[int]]] | None:
    """{partition: (leader, isr)} from any live broker's Metadata, or None if none answers."""
    for b in cluster.broker_ids:
        if not cluster.alive(b):
            continue
        try:
            r = roundtrip(cluster.host, cluster.ports[b], MetadataRequest(
                version=4, topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                allow_auto_topic_creation=False), MetadataResponse, 4, timeout_s=2.0)
        except OSError:
            continue
        if r.topics and r.topics[0].error_code == 0:
            return {p.partition_index: (p.leader_id, sorted(p.isr_nodes)) for p in r.topics[0].partitions}
    return None


def whole(cluster, topic: str, n: int) -> bool:
    parts = partitions(cluster, topic)
    return bool(parts) and len(parts) == n and all(
        leader >= 0 and isr == sorted(cluster.broker_ids) for leader, isr in parts.values())


class Load(threading.Thread):
    """A kafka-python producer sending "r<run>-<n>" round robin, every send recorded."""

    def __init__(self, cluster, topic: str, history: History, n_partitions: int, **config) -> None:
        super().__init__(daemon=True)
        self.config = dict(linger_ms=5, request_timeout_ms=5_000, delivery_timeout_ms=60_000, **config)
        self.producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, **self.config)
        self.topic, self.history, self.n = topic, history, n_partitions
        self.retired: list[KafkaProducer] = []  # producers replaced (see replace_producer)
        self.stopping = threading.Event()
        self.sent = 0

    def knows_a_live_broker(self, cluster) -> bool:
        """Whether the producer's metadata (kafka-python's own, private) names a running broker:
        if not, it can never reach the cluster again (no re-bootstrap in kafka-python 3.0.12)."""
        known = {b.node_id for b in self.producer._metadata.brokers()}
        return any(b in known and cluster.alive(b) for b in cluster.broker_ids)

    def replace_producer(self, cluster) -> None:
        """A new producer for the sends to come. The old one is kept until ``stop``: once the
        brokers it knows are restarted it delivers what it holds, and its sends are judged with
        the rest (closing it now would need kafka-python's close(timeout=0), which raises
        instead of abandoning what is pending).

        The new producer bootstraps from the running brokers only: kafka-python picks a
        bootstrap server at random and backs off exponentially (up to 30 s) after each refused
        connection, so with two dead servers of three its bootstrap could time out (it did,
        one CI run in three) before it ever tried the live one."""
        self.retired.append(self.producer)
        live = ",".join(f"{cluster.host}:{cluster.ports[b]}" for b in cluster.broker_ids if cluster.alive(b))
        self.producer = KafkaProducer(bootstrap_servers=live, **self.config)

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.history.send(self.producer, self.topic, f"{self.topic}-{self.sent}".encode(),
                                  partition=self.sent % self.n)
            except Exception:
                time.sleep(0.05)  # refused by the client (buffer full, no metadata): recorded
            self.sent += 1
            time.sleep(0.002)

    def acked_after(self, ms: int) -> int:
        return sum(1 for op in list(self.history.sends) if op.status == "ok" and op.invoke_ms > ms)

    def stop(self) -> str | None:
        """Stop sending and wait for the outcomes; sends still unanswered after 90 s stay
        indeterminate in the history (as Jepsen counts them). Returns a note if any did."""
        self.stopping.set()
        self.join(timeout=30)
        note = None
        deadline = time.monotonic() + 90
        for producer in [*self.retired, self.producer]:
            try:
                producer.flush(timeout=max(0.0, deadline - time.monotonic()))
                producer.close(timeout=10)
            except KafkaTimeoutError:  # left running (a daemon thread): its sends stay pending
                pending = sum(1 for op in list(self.history.sends) if op.status == "invoke")
                note = f"(the producer's flush timed out after 90 s: {pending} sends left indeterminate)"
        return note


def read_all(cluster, topic: str, n: int, history: History) -> None:
    """Every partition from log start to end (the high watermark): the final read."""
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False,
                             request_timeout_ms=10_000)
    try:
        tps = [TopicPartition(topic, p) for p in range(n)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        starts = {tp: consumer.position(tp) for tp in tps}
        ends = consumer.end_offsets(tps)
        got: dict[int, list] = {p: [] for p in range(n)}
        deadline = time.monotonic() + 120
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the final read of {topic} did not reach the end offsets {ends}")
            for tp, records in consumer.poll(timeout_ms=500).items():
                got[tp.partition] += [(r.offset, r.value) for r in records]
        for tp in tps:
            history.final_read(topic, tp.partition, got[tp.partition], log_start=starts[tp], high_watermark=ends[tp])
    finally:
        consumer.close()


def reordered(history: History) -> int:
    """Pairs of consecutive acknowledged sends to one partition whose offsets go backwards."""
    by_partition: dict[int, list[tuple[int, int]]] = {}
    for i, op in enumerate(history.sends):
        if op.status == "ok":
            by_partition.setdefault(op.partition, []).append((i, op.offset))
    return sum(1 for acks in by_partition.values() for (_, a), (_, b) in zip(acks, acks[1:]) if b < a)


@dataclass
class RunResult:
    label: str
    acked: int
    indeterminate: int
    lost: int
    duplicated: int
    reordered: int
    faults: str


def judge(label: str, history: History, faults: list[str]) -> RunResult:
    report = analyse(history)
    counts = history.counts()
    return RunResult(label, counts["ok"], counts["info"], report.anomalies[LOST_WRITE],
                     report.anomalies[DUPLICATE], reordered(history), "; ".join(faults))


def create(admin, topic: str, n: int, **configs) -> None:
    admin.create_topics([NewTopic(topic, n, 3, topic_configs={k: str(v) for k, v in configs.items()})])


def safe_run(cluster, admin, run: int, kills: int, rng: random.Random) -> RunResult:
    topic, n = f"safe-{run}", 3
    create(admin, topic, n, **{"min.insync.replicas": 2})
    wait_until(lambda: whole(cluster, topic, n), 60, f"{topic} fully replicated")
    history = History(clock=now_ms)
    load = Load(cluster, topic, history, n, acks="all", enable_idempotence=True)
    load.start()
    faults = []
    try:
        for _ in range(kills):
            mark = now_ms()
            _wait_or_note(lambda: load.acked_after(mark) >= 200, 90, "200 acks before the next kill", faults)
            parts = partitions(cluster, topic) or {}
            leaders = [leader for leader, _ in parts.values() if leader >= 0]
            victim = rng.choice(leaders) if leaders and rng.random() < 0.7 else rng.choice(cluster.broker_ids)
            cluster.kill(victim)
            down_s = 0.5 + 2.5 * rng.random()
            faults.append(f"kill {victim} ({'leader' if victim in leaders else 'broker'}) for {down_s:.1f} s")
            time.sleep(down_s)
            cluster.restart(victim)
            _wait_or_note(lambda: whole(cluster, topic, n), 120, f"{topic}'s ISR whole after restarting {victim}",
                          faults)
        mark = now_ms()
        _wait_or_note(lambda: load.acked_after(mark) >= 100, 90, "acks after the last restart", faults)
    finally:
        note = load.stop()
        restore(cluster)
    if note:
        faults.append(note)
    read_all(cluster, topic, n, history)
    return judge(f"safe {run + 1}", history, faults)


def _wait_or_note(predicate, timeout_s: float, what: str, faults: list[str]) -> bool:
    """Wait as ``wait_until``; on a timeout, say so in the run's notes and go on (the run is
    still read back and judged: a stuck step must not throw away every other run)."""
    try:
        wait_until(predicate, timeout_s, what)
        return True
    except TimeoutError:
        faults.append(f"(gave up after {timeout_s:.0f} s waiting for {what})")
        return False


def restore(cluster) -> None:
    """Every broker running and responsive again (after a run that stopped halfway)."""
    for b in cluster.broker_ids:
        if not cluster.alive(b):
            cluster.restart(b)
        else:
            cluster.resume(b)


def control_run(cluster, admin, run: int) -> RunResult:
    topic = f"unclean-{run}"
    create(admin, topic, 1, **{"min.insync.replicas": 1, "unclean.leader.election.enable": "true"})
    wait_until(lambda: whole(cluster, topic, 1), 60, f"{topic} fully replicated")
    history = History(clock=now_ms)
    load = Load(cluster, topic, history, 1, acks=1, enable_idempotence=False, retries=5)
    load.start()
    faults = []
    try:
        mark = now_ms()
        wait_until(lambda: load.acked_after(mark) >= 200, 60, "200 acks")
        leader = partitions(cluster, topic)[0][0]
        stale, other = [b for b in cluster.broker_ids if b != leader][:2]
        cluster.pause(stale)  # alive but silent: it falls out of the ISR, writes go on without it
        wait_until(lambda: stale not in (partitions(cluster, topic) or {0: (0, [stale])})[0][1], 30,
                   f"{stale} out of the ISR")
        mark = now_ms()
        wait_until(lambda: load.acked_after(mark) >= 300, 60, "300 acks the stale replica missed")
        cluster.kill(leader)
        cluster.kill(other)
        cluster.resume(stale)  # the only live replica, and not in sync: elected only if unclean
        faults.append(f"pause {stale} until out of the ISR; kill {leader} (leader) and {other}; resume {stale}")
        wait_until(lambda: (partitions(cluster, topic) or {0: (-1, [])})[0][0] == stale, 60,
                   f"{stale} elected (unclean)")
        if not load.knows_a_live_broker(cluster):
            faults.append("the producer knew only dead brokers (kafka-python has no re-bootstrap): replaced")
            load.replace_producer(cluster)
        mark = now_ms()
        _wait_or_note(lambda: load.acked_after(mark) >= 100, 120, "acks from the unclean leader", faults)
        cluster.restart(leader)
        cluster.restart(other)
        _wait_or_note(lambda: whole(cluster, topic, 1), 120, f"{topic}'s ISR whole again", faults)
    finally:
        note = load.stop()
        restore(cluster)
    if note:
        faults.append(note)
    read_all(cluster, topic, 1, history)
    return judge(f"control {run + 1}", history, faults)


def run(scratch: Path, quick: bool, repeats: int) -> Section:
    runs = 1 if quick else int(os.environ.get("MINIKAFKA_BENCH_CHAOS_RUNS", "20"))
    controls = 1 if quick else 3
    kills = 1 if quick else 2
    rng = random.Random(SEED)
    results: list[RunResult] = []
    with launch(brokers=3, config=CHAOS_CONFIG, dir=scratch / "chaos") as cluster:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        try:
            for r in range(runs):
                results.append(safe_run(cluster, admin, r, kills, rng))
                print(f"chaos: {results[-1]}", file=sys.stderr, flush=True)
            for r in range(controls):
                results.append(control_run(cluster, admin, r))
                print(f"chaos: {results[-1]}", file=sys.stderr, flush=True)
        finally:
            admin.close()
    return section(results, runs, controls, kills)


def section(results: list[RunResult], runs: int, controls: int, kills: int) -> Section:
    rows = []
    for kind in ("safe", "control"):
        mine = [r for r in results if r.label.startswith(kind)]
        rows += [[r.label, f"{r.acked:,}", f"{r.indeterminate:,}", f"{r.lost:,}", f"{r.duplicated:,}",
                  f"{r.reordered:,}", r.faults] for r in mine]
        if mine:
            rows.append([f"**{kind}: total of {len(mine)}**", f"{sum(r.acked for r in mine):,}",
                         f"{sum(r.indeterminate for r in mine):,}", f"{sum(r.lost for r in mine):,}",
                         f"{sum(r.duplicated for r in mine):,}", f"{sum(r.reordered for r in mine):,}", ""])
    safe = [r for r in results if r.label.startswith("safe")]
    control = [r for r in results if r.label.startswith("control")]
    lost = sum(r.lost for r in safe)
    dup = sum(r.duplicated for r in safe)
    targets = [
        ("chaos, acks=all + idempotence: 0 lost, 0 duplicated, 0 reordered",
         f"{lost} lost, {dup} duplicated, {sum(r.reordered for r in safe)} reordered",
         "met" if lost == dup == sum(r.reordered for r in safe) == 0 else "**not met**"),
        ("chaos negative control (acks=1, unclean election) shows losses",
         f"{sum(r.lost for r in control)} lost in {sum(1 for r in control if r.lost)} of {len(control)} runs",
         "met" if control and all(r.lost for r in control) else "**not met**"),
    ]
    return Section(
        name="chaos",
        title="Chaos: SIGKILLs under load, real processes, judged by the checker",
        method=[
            f"One cluster of real processes (`launch(brokers=3)`: 3 brokers, 3 controllers), config {CHAOS_CONFIG}.",
            f"**Safe**: {runs} runs, each a fresh topic (3 partitions, RF 3, min.insync.replicas 2), kafka-python "
            "3.0.12 producer `acks='all'`, `enable_idempotence=True`, `linger_ms=5`, numbered values as fast as "
            f"allowed; {kills} SIGKILL(s) per run of a partition leader (70%) or any broker (30%), drawn from seed "
            f"{SEED}, down 0.5-3 s, restarted, then every ISR whole again before the next.",
            f"**Control**: {controls} runs, 1 partition RF 3, `acks=1` without idempotence, "
            "`unclean.leader.election.enable=true`: a follower SIGSTOPped until out of the ISR, then the leader and "
            "the other follower SIGKILLed and the stale one resumed (elected uncleanly), then both restarted.",
            "Each run ends by reading every partition from log start to high watermark; `minikafka.checker.analyse` "
            "gives lost (`lost-write`: acknowledged, not in the log) and duplicated (`duplicate`); reordered = pairs "
            "of consecutive acknowledged sends to a partition whose offsets decrease. Indeterminate = sends whose "
            "outcome the producer never learned (timed out): neither acknowledged nor refused.",
        ],
        columns=["Run", "Acked", "Indeterminate", "Lost", "Duplicated", "Reordered", "Faults"],
        rows=rows,
        targets=targets,
    )
