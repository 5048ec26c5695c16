"""Running the scenario: one run of a strategy on a seed (``run_delivery_scenario``) and many runs
(``delivery_campaign``), each a fresh simulated cluster.

The theory of operation of the whole is ``minikafka.checker.delivery``'s."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from minikafka.broker.group_coordinator import OFFSETS_TOPIC, partition_for
from minikafka.checker.campaign import Workload, _quiet_clients, run_cluster, schedule_seeds
from minikafka.checker.delivery.apps import _APPS, ExternalStore, _App
from minikafka.checker.delivery.history import ConsumerHistory
from minikafka.checker.delivery.plan import (DELIVERY_BROKER_CONFIG, GROUP, TOPIC, ScenarioParams, _check_strategy,
                                            _params, draw_plan)
from minikafka.checker.delivery.report import (EXACTLY_ONCE, GUARANTEES, DeliveryReport, _table,
                                              analyse_delivery)
from minikafka.checker.history import INVOKED, OK, value_of
from minikafka.checker.reader import final_read
from minikafka.cluster import Cluster
from minikafka.errors import IllegalArgumentError, KafkaError

# --- one run ------------------------------------------------------------------------------------------------


class _Run:
    def __init__(self, strategy: str, seed: int, params: ScenarioParams, cluster: Cluster) -> None:
        self.strategy = strategy
        self.seed = seed
        self.params = params
        self.cluster = cluster
        self.plan = draw_plan(seed, records=params.records, consumers=params.consumers, crashes=params.crashes,
                              max_poll_records=params.max_poll_records, handoff=params.handoff,
                              restart_delay_ms=params.restart_delay_ms)
        # The order of turns is drawn as the run goes (it depends on who is alive), from
        # its own RNG so the plan stays the same for every strategy.
        self.turns = random.Random(f"delivery-turns/{seed}")
        self.history = ConsumerHistory(clock=lambda: cluster.now)
        self.store = ExternalStore()
        self.processings = 0
        self.next_crash = 0
        self.restarts: list[tuple[int, int, _App]] = []  # (at, crash number, app)
        self.apps: list[_App] = []
        self.workload: Workload | None = None
        self.notes: list[str] = []
        self.deadline_passed = False

    # --- what the applications call -----------------------------------------------------------------

    def process(self, app: _App, record: Any) -> bool:
        """Process one record (its side effect, after ``process_ms``); True if the plan
        crashes ``app`` right after it."""
        if self.params.process_ms:
            self.cluster.advance(self.params.process_ms)
        if self.strategy == EXACTLY_ONCE:
            self.store.write(record, f"done({value_of(record.value)})")
        self.history.processed(app.name, record)
        self.processings += 1
        points = self.plan.crash_points
        if self.next_crash < len(points) and self.processings >= points[self.next_crash]:
            self.crash(app, record)
            return True
        return False

    def crash(self, app: _App, record: Any) -> None:
        n = self.next_crash
        self.next_crash += 1
        unprocessed = len(app.backlog)
        self.cluster.kill_consumer(app.consumer)
        self.history.crash(app.name, after=(record.topic, record.partition, record.offset),
                           unprocessed=unprocessed)
        app.crashed()
        self.restarts.append((self.cluster.now + self.plan.restart_delays_ms[n], n, app))

    # --- the loop -----------------------------------------------------------------------------------------

    def run(self) -> None:
        p, cluster = self.params, self.cluster
        cluster.create_topic(TOPIC, p.partitions, 3)
        self.workload = Workload(cluster, TOPIC, poll=False, acks="all", linger_ms=0)
        preload = p.records // 2 if p.preload is None else p.preload
        for _ in range(preload):
            self.workload.send()
        self.workload.producer.flush()
        self.apps = [_APPS[self.strategy](self) for _ in range(self.plan.consumers)]
        deadline = cluster.now + p.deadline_ms
        while True:
            self._restart_due()
            for _ in range(min(p.send_per_round, p.records - self._sent())):
                self.workload.send()
            order = [a for a in self.apps if a.alive]
            self.turns.shuffle(order)
            for app in order:  # only an app's own turn can crash it: the others stay alive
                try:
                    app.turn()
                except KafkaError as e:
                    self.notes.append(f"note: {app.name} at {cluster.now} ms: {type(e).__name__}: {e}")
            if not any(a.alive for a in self.apps):
                # Everyone is dead: let time pass until the first restart.
                wake = min(at for at, _, _ in self.restarts)
                cluster.advance(max(1, min(wake, deadline) - cluster.now))
            if self._caught_up():
                break
            if cluster.now >= deadline:
                self.deadline_passed = True
                self.notes.append(f"note: the deadline ({p.deadline_ms} ms) passed before the consumers "
                                  "caught up: records still unprocessed count as lost")
                break

    def _sent(self) -> int:
        return len(self.workload.history.sends)

    def _restart_due(self) -> None:
        for entry in sorted(self.restarts, key=lambda e: (e[0], e[1])):
            at, _, app = entry
            if at <= self.cluster.now:
                self.restarts.remove(entry)
                self.cluster.restart_consumer(app.consumer)
                self.history.restart(app.name)

    def _caught_up(self) -> bool:
        """Every record sent and acknowledged, every restart done, nothing queued, and the
        progress that survives a crash (committed offsets; the store's, for exactly-once)
        at the end of every partition. The harness may look inside the brokers to know when
        to stop; the analysis never does."""
        if self._sent() < self.params.records or self.restarts or any(a.backlog for a in self.apps):
            return False
        sends = self.workload.history.sends
        if any(op.status == INVOKED for op in sends):
            return False
        ends: dict[int, int] = {}
        for op in sends:
            if op.status == OK:
                ends[op.partition] = max(ends.get(op.partition, 0), op.offset + 1)
        progress = self._durable_progress()
        return all(progress.get(p, 0) >= end for p, end in ends.items())

    def _durable_progress(self) -> dict[int, int]:
        if self.strategy == EXACTLY_ONCE:
            return {tp.partition: o for tp, o in self.store.offsets().items() if tp.topic == TOPIC}
        cluster = self.cluster
        n = cluster.config["offsets.topic.num.partitions"]
        try:
            leader = cluster.partition_state(OFFSETS_TOPIC, partition_for(GROUP, n)).leader
        except IllegalArgumentError:  # __consumer_offsets is made on the first FindCoordinator
            return {}
        if leader < 0 or not cluster.alive(leader):
            return {}
        group = cluster.broker(leader).group_coordinator.groups.get(GROUP)
        if group is None:
            return {}
        return {p: v.offset for (t, p), v in group.offsets.items() if t == TOPIC}

    def finish(self) -> DeliveryReport:
        cluster, workload = self.cluster, self.workload
        workload.producer.flush()
        if not final_read(cluster, TOPIC, workload.history):
            self.notes.append("note: the final read did not complete")
        report = analyse_delivery(self.history, workload.history, strategy=self.strategy)
        report.complete = not self.deadline_passed
        report.seed, report.plan, report.params = self.seed, self.plan, self.params
        if self.strategy == EXACTLY_ONCE:
            report.store = self.store
        report.notes.extend(self.notes)
        return report


def run_delivery_scenario(strategy: str, *, seed: int, record_history: bool = False,
                          **kwargs: Any) -> DeliveryReport:
    """Run ``strategy`` (one of ``STRATEGIES``) under the crashes seed ``seed`` plans (see
    the module docstring) and judge what the consumers processed.

    Keyword arguments (``ScenarioParams``): ``records=200``, ``partitions=3``,
    ``consumers`` (None: drawn, 1 to 3), ``crashes`` (None: drawn, 1 to 3), ``preload``
    (None: half), ``send_per_round=5``, ``max_poll_records`` (None: drawn, 5 to 40),
    ``handoff`` (auto-commit's worker: records per iteration; None: drawn, 2 to 6),
    ``process_ms=1``, ``poll_timeout_ms=100``, ``auto_commit_interval_ms=50``,
    ``session_timeout_ms=6000``, ``heartbeat_interval_ms=2000``,
    ``max_poll_interval_ms=20000``, ``restart_delay_ms=(0, 10000)``, ``deadline_ms=180000``
    (simulated). With ``record_history=True`` the cluster keeps its event trace and stays
    open as ``report.cluster`` (close it when done)."""
    _check_strategy(strategy)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise IllegalArgumentError(f"seed must be an int, not {seed!r}")
    return _run(strategy, seed, _params(kwargs), record_history)


def _run(strategy: str, seed: int, params: ScenarioParams, record_history: bool = False) -> DeliveryReport:
    with run_cluster(3, seed=seed, config=DELIVERY_BROKER_CONFIG, record_history=record_history) as cluster, \
            _quiet_clients():
        run = _Run(strategy, seed, params, cluster)
        run.run()
        report = run.finish()
        if record_history:
            report.cluster = cluster
        return report


# --- many runs ----------------------------------------------------------------------------------------------


@dataclass
class DeliveryCampaign:
    """The sum of a strategy's runs: totals (``records``, ``processed``, ``lost``,
    ``duplicated``, ``extra``), the seeds that lost or duplicated something (replay each
    with ``replay(seed)``), every run's report in ``reports`` (by seed), ``table()``."""

    strategy: str
    seed: int
    schedules: int
    params: ScenarioParams
    records: int = 0
    processed: int = 0
    lost: int = 0
    duplicated: int = 0
    extra: int = 0
    crashes: int = 0
    cutting_crashes: int = 0  # crashes with polled records not yet processed
    seeds_with_loss: list[int] = field(default_factory=list)
    seeds_with_duplicates: list[int] = field(default_factory=list)
    incomplete_seeds: list[int] = field(default_factory=list)
    reports: dict[int, DeliveryReport] = field(default_factory=dict, repr=False)

    def add(self, report: DeliveryReport) -> None:
        self.records += report.records
        self.processed += report.processed
        self.lost += len(report.lost)
        self.duplicated += report.duplicated
        self.extra += report.extra
        self.crashes += report.counts.get("crashes", 0)
        if report.history is not None:
            self.cutting_crashes += sum(1 for c in report.history.crashes if c.unprocessed)
        if report.lost:
            self.seeds_with_loss.append(report.seed)
        if report.duplicates:
            self.seeds_with_duplicates.append(report.seed)
        if not report.complete or report.unchecked or report.unexpected:
            self.incomplete_seeds.append(report.seed)
        self.reports[report.seed] = report

    @property
    def kept(self) -> bool | None:
        """The guarantee held in every run (None: the strategy promises nothing)."""
        promised = GUARANTEES.get(self.strategy, ())
        if not promised:
            return None
        return all(r.kept for r in self.reports.values())

    def replay(self, seed: int) -> str:
        return self.params.call(self.strategy, seed)

    def row(self) -> tuple[str, ...]:
        return (f"{self.strategy} ({self.schedules} runs)", str(self.records), str(self.processed),
                str(self.lost), str(self.duplicated))

    def table(self) -> str:
        lines = _table([self.row()])
        lines.append(f"{self.schedules} runs (campaign seed {self.seed}), {self.crashes} crashes, "
                     f"{self.cutting_crashes} of them with polled records not yet processed")
        lines.append(f"runs that lost records: {len(self.seeds_with_loss)}; that duplicated some: "
                     f"{len(self.seeds_with_duplicates)} ({self.extra} extra processings)")
        for name, seeds in (("lost", self.seeds_with_loss), ("duplicated", self.seeds_with_duplicates),
                            ("incomplete", self.incomplete_seeds)):
            if seeds:
                more = f", ... ({len(seeds)} in all)" if len(seeds) > 8 else ""
                lines.append(f"seeds that {name}: {', '.join(map(str, seeds[:8]))}{more}")
        if self.seeds_with_loss or self.seeds_with_duplicates:
            first = (self.seeds_with_loss or self.seeds_with_duplicates)[0]
            lines.append(f"replay: {self.replay(first)}")
        promised = GUARANTEES.get(self.strategy, ())
        if promised:
            lines.append("guarantee: " + ("kept in every run" if self.kept else
                                          "BROKEN (or not checked) in some run: see the seeds above"))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return (f"<DeliveryCampaign {self.strategy} x{self.schedules}: {self.lost} lost, "
                f"{self.duplicated} duplicated>")

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(self.table())


def delivery_campaign(strategy: str, schedules: int = 100, seed: int = 0, *, progress: bool = False,
                      **kwargs: Any) -> DeliveryCampaign:
    """Run ``strategy`` under ``schedules`` seeded crash schedules (seeds drawn from
    ``seed`` with ``schedule_seeds``, so every strategy meets the same ones) and add up
    the reports. Keyword arguments: those of ``run_delivery_scenario``."""
    _check_strategy(strategy)
    if not isinstance(schedules, int) or isinstance(schedules, bool) or schedules < 1:
        raise IllegalArgumentError(f"schedules must be an int >= 1, not {schedules!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise IllegalArgumentError(f"seed must be an int, not {seed!r}")
    params = _params(kwargs)
    campaign = DeliveryCampaign(strategy, seed, schedules, params)
    seeds = schedule_seeds(seed, schedules)
    if progress:
        from tqdm.auto import tqdm
        seeds = tqdm(seeds, desc=strategy, unit="run")
    for s in seeds:
        campaign.add(_run(strategy, s, params))
    return campaign
