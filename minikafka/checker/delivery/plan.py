"""What a seed decides before anything runs: the ``DeliveryPlan`` (consumers, crash points,
restart delays, batch sizes), the same for every strategy, and the scenario's parameters.

The theory of operation of the whole is ``minikafka.checker.delivery``'s."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from minikafka.checker.delivery.report import STRATEGIES
from minikafka.errors import IllegalArgumentError

# --- the plan a seed decides --------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeliveryPlan:
    """Everything a seed decides before the run starts (the same for every strategy)."""

    seed: int
    consumers: int
    crash_points: tuple[int, ...]  # crash whoever has just made the n-th processing
    restart_delays_ms: tuple[int, ...]  # one per crash: how long the process stays dead
    max_poll_records: int
    handoff: int  # auto-commit: records the worker takes off the queue per loop iteration

    def describe(self) -> str:
        return (f"{self.consumers} consumer(s), max_poll_records={self.max_poll_records}, "
                f"auto-commit hand-off {self.handoff} per iteration")

    def crashes_text(self) -> str:
        if not self.crash_points:
            return "none"
        return (f"after processings #{', #'.join(map(str, self.crash_points))}; restarts "
                f"{', '.join(map(str, self.restart_delays_ms))} ms later")


def draw_plan(seed: int, *, records: int, consumers: int | None = None, crashes: int | None = None,
              max_poll_records: int | None = None, handoff: int | None = None,
              restart_delay_ms: tuple[int, int] = (0, 10_000)) -> DeliveryPlan:
    """The plan for ``seed``. Every draw is made whether or not an argument overrides it,
    so fixing one (``consumers=2``) leaves the others as the seed had them."""
    rng = random.Random(f"delivery/{seed}")
    drawn_consumers = rng.randint(1, 3)
    drawn_crashes = rng.randint(1, 3)
    drawn_mpr = rng.randint(5, 40)
    drawn_handoff = rng.randint(2, 6)
    delays = [rng.randint(*restart_delay_ms) for _ in range(3)]
    n_crashes = drawn_crashes if crashes is None else crashes
    # The points come last: how many there are must not move the other draws.
    points = sorted(rng.sample(range(1, records), min(n_crashes, records - 1))) if records > 1 else []
    while len(delays) < len(points):
        delays.append(rng.randint(*restart_delay_ms))
    return DeliveryPlan(
        seed=seed,
        consumers=drawn_consumers if consumers is None else consumers,
        crash_points=tuple(points),
        restart_delays_ms=tuple(delays[: len(points)]),
        max_poll_records=drawn_mpr if max_poll_records is None else max_poll_records,
        handoff=drawn_handoff if handoff is None else handoff,
    )


# --- the scenario's parameters ------------------------------------------------------------------------------

TOPIC, GROUP = "work", "workers"
# Small and quick: a __consumer_offsets of 3 partitions, and no initial rebalance delay
# (consumers join as they come instead of waiting 3 s for each other).
DELIVERY_BROKER_CONFIG: dict[str, Any] = {
    "offsets.topic.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
}


@dataclass(frozen=True)
class ScenarioParams:
    """A scenario's arguments but its strategy and seed (checked by name before anything
    runs); ``call(strategy, seed)`` writes the call that replays it."""

    records: int = 200
    partitions: int = 3
    consumers: int | None = None  # None: drawn, 1 to 3
    crashes: int | None = None  # None: drawn, 1 to 3
    preload: int | None = None  # None: half the records, the rest sent while consuming
    send_per_round: int = 5
    max_poll_records: int | None = None  # None: drawn, 5 to 40
    handoff: int | None = None  # None: drawn, 2 to 6
    process_ms: int = 1  # simulated time one record's processing takes
    poll_timeout_ms: int = 100
    auto_commit_interval_ms: int = 50  # Kafka's 5 s, scaled down to a run of seconds
    session_timeout_ms: int = 6_000  # the shortest the brokers accept (group.min.session.timeout.ms)
    heartbeat_interval_ms: int = 2_000
    max_poll_interval_ms: int = 20_000  # also the rebalance timeout: a crash mid-join costs this
    restart_delay_ms: tuple[int, int] = (0, 10_000)
    deadline_ms: int = 180_000

    def __post_init__(self) -> None:
        def check(name: str, minimum: int, optional: bool = False) -> None:
            value = getattr(self, name)
            if optional and value is None:
                return
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise IllegalArgumentError(f"{name} must be an int >= {minimum}, not {value!r}")

        check("records", 1)
        check("partitions", 1)
        check("consumers", 1, optional=True)
        check("crashes", 0, optional=True)
        check("preload", 0, optional=True)
        check("send_per_round", 1)
        check("max_poll_records", 1, optional=True)
        check("handoff", 1, optional=True)
        for name in ("process_ms", "poll_timeout_ms"):
            check(name, 0)
        for name in ("auto_commit_interval_ms", "session_timeout_ms", "heartbeat_interval_ms",
                     "max_poll_interval_ms", "deadline_ms"):
            check(name, 1)
        if self.preload is not None and self.preload > self.records:
            raise IllegalArgumentError(f"preload={self.preload} is more than records={self.records}")
        lo_hi = self.restart_delay_ms
        if not (isinstance(lo_hi, tuple) and len(lo_hi) == 2 and all(isinstance(x, int) for x in lo_hi)
                and 0 <= lo_hi[0] <= lo_hi[1]):
            raise IllegalArgumentError(f"restart_delay_ms must be a (low, high) pair of ints, not {lo_hi!r}")

    def call(self, strategy: str | None, seed: int) -> str:
        defaults = ScenarioParams()
        args = [repr(strategy), f"seed={seed}"]
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if value != getattr(defaults, name):
                args.append(f"{name}={value!r}")
        return f"run_delivery_scenario({', '.join(args)})"


def _check_strategy(strategy: Any) -> str:
    if strategy not in STRATEGIES:
        raise IllegalArgumentError(f"unknown strategy {strategy!r}; strategies are {', '.join(STRATEGIES)}")
    return strategy


def _params(kwargs: dict[str, Any]) -> ScenarioParams:
    unknown = sorted(set(kwargs) - set(ScenarioParams.__dataclass_fields__))
    if unknown:
        raise IllegalArgumentError(
            f"unknown argument(s) {unknown}; known: {', '.join(ScenarioParams.__dataclass_fields__)}")
    if isinstance(kwargs.get("restart_delay_ms"), list):
        kwargs = {**kwargs, "restart_delay_ms": tuple(kwargs["restart_delay_ms"])}
    return ScenarioParams(**kwargs)
