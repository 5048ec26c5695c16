"""Replaying a failing schedule of the judge on a live dashboard.

Theory of operation
-------------------
A schedule of notebook 04's campaign (``tester.judge_replication``) is a seed and a few
arguments: the seed draws the topic's partitions, the number of faults and when each strikes
(``checker.campaign``'s nemesis plans them on the cluster's clock before any record is written).
Everything in the simulated world is deterministic, so the same seed, the same arguments and the
same rules build the same cluster with the same faults at the same simulated milliseconds.

``Replay(verdict)`` builds that cluster on the student's rules and puts a ``Dashboard`` on it
instead of the campaign's loop: the dashboard's producer (the schedule's own, with its settings)
writes at the campaign's pace, the faults strike as the dashboard moves the clock past them, and
the dashboard's loss counter checks every acknowledged record against the brokers' logs as it
runs. The lecturer presses play (or calls ``run()`` headless) and watches the faults of the
failing schedule arrive, the rule answer, and acknowledged records disappear.

The dashboard's writes are not the campaign's writes (it sends its own counter values at its
own ticks), so what it loses can differ from the finding's first lost record; the faults and
their times are the schedule's (``faults`` lists them as the nemesis applies them).
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Callable, Mapping

from minikafka.checker.campaign import (QUIET_MS, TAIL_MS, TOPIC, _draw, _params, _quiet_clients, run_cluster,
                                        stage)
from minikafka.errors import IllegalArgumentError

TICK_MS = 100  # simulated ms a headless run() advances per dashboard tick


class Replay:
    """A failing schedule of ``verdict`` (from ``judge``), rebuilt on ``rules`` and shown by a
    ``Dashboard`` (``dashboard``). Close it when done (or use ``with``)."""

    def __init__(self, verdict: Any, rules: Mapping[str, Callable] | None = None) -> None:
        from minikafka.course.tester import SETTINGS
        from minikafka.widgets import Dashboard

        finding = getattr(verdict, "failure", None)
        if finding is None:
            raise IllegalArgumentError("nothing to replay: the verdict has no failing schedule (it passed)")
        if finding.scenario is not None:
            raise IllegalArgumentError(f"the failure is the scenario \"{finding.scenario}\", not a random schedule: "
                                       f"its timeline above is the whole story (scenarios are replayed by the judge)")
        if rules is None:
            rules = getattr(verdict, "given", None) or {}
        self.finding = finding
        self.params = _params(rules=rules, **SETTINGS, **finding.shrunk)
        rng, partitions, n_faults, config, producer_config = _draw(finding.seed, self.params)
        self._stack = ExitStack()
        try:
            self.cluster = self._stack.enter_context(
                run_cluster(self.params.brokers, seed=finding.seed, config=config, record_history=False,
                            controllers=self.params.controllers, rules=dict(self.params.rules)))
            self._stack.enter_context(_quiet_clients(self.params.disk_faults))
            self.workload, self._nemesis = stage(self.cluster, self.params, rng, partitions, n_faults,
                                                 producer_config)
            self.end_ms = self.cluster.now + QUIET_MS + self.params.duration_ms + TAIL_MS
            self.dashboard = Dashboard(self.cluster, TOPIC, producer=self.workload.producer,
                                       rate_per_s=max(1, 1000 // self.params.interval_ms),
                                       acks=self.params.acks)
        except BaseException:
            self._stack.close()
            raise

    @property
    def faults(self) -> list[tuple[int, str]]:
        """The faults the nemesis has applied so far: (simulated ms, what)."""
        return list(self._nemesis.log)

    @property
    def lost(self) -> int:
        """Acknowledged records the dashboard found missing from the brokers' logs so far."""
        return self.dashboard.losses.lost

    def run(self) -> "Replay":
        """Advance the dashboard headless to the end of the schedule (its last fault's tail)."""
        while self.cluster.now < self.end_ms:
            self.dashboard.tick(TICK_MS / self.dashboard.speed.value)
        return self

    def close(self) -> None:
        self.dashboard.close()
        self._stack.close()

    def __enter__(self) -> "Replay":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _repr_mimebundle_(self, **kwargs: Any):
        return self.dashboard._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        return (f"Replay(seed={self.finding.seed}, shrunk={self.finding.shrunk}, t={self.cluster.now} ms of "
                f"{self.end_ms}, faults so far={len(self.faults)}, lost={self.lost})")
