"""The truck-GPS fleet: the course's running example, as a deterministic stream of reports.

Theory of operation
-------------------
A fleet of trucks, ``truck-001`` ... ``truck-NNN``, drives around a depot near Frankfurt am
Main. Every truck sends a position report every ``interval_ms`` (20 s by default)::

    {"truck_id": "truck-007", "timestamp_ms": 1704096013000, "lat": 50.08761,
     "lon": 8.70412, "speed_kmh": 63.4, "heading_deg": 212.9}

In Kafka these go to the topic ``trucks_gps`` (10 partitions) with key = truck id, so one
truck's reports stay in one partition, in order. ``encode_report`` turns a report into
that (key, value) pair of bytes.

Sending them is ``minikafka.feed``'s job (I/O, a clock, threads): ``produce_trucks`` (a bulk
load), ``TruckFeed`` (a live feed in a background thread) and ``FeedResult``, which can be
imported from here too; they are loaded on first use, so importing this module stays free of
I/O and of any Kafka client.

Each truck is a seeded random walk along a heading:

- It starts somewhere within ``START_RADIUS_KM`` of the depot, with a random heading and a
  cruising speed of its own (50-90 km/h).
- Between two reports it drives straight on at the speed it last reported, for
  ``interval_ms`` (a flat-earth step: fine over a few hundred metres).
- Then its heading turns by a small random angle, its speed drifts back towards its
  cruising speed with some noise, clamped to 0-110 km/h, and now and then it stops for a
  few reports (a traffic light, a delivery). A truck more than ``RANGE_KM`` from the depot
  turns back towards it, so the fleet stays in the region however long it runs.

Time: truck k reports at ``start_ms + phase_k + n * interval_ms``. The phase is fixed per
truck (whole seconds below ``interval_ms``), so trucks do not report in lockstep.
``truck_positions`` merges the fleet into one stream in time order (ties by truck id):
what a producer on the fleet's gateway would send.

Invariants:

- Deterministic: a truck's path depends only on the seed and its id, not on the size of
  the fleet (truck-003 drives the same way in a fleet of 3 or of 300). Randomness comes
  from ``random.Random`` seeded with a string (stable across runs and Python versions);
  reported values are rounded (lat/lon to 5 decimals, about 1 m; speed and heading to 0.1).
- Per truck: exactly one report every ``interval_ms``; speed within 0-110 km/h; heading in
  [0, 360), 0 = north, clockwise.
- No I/O and no clock: time comes from ``start_ms``. Arguments are checked when
  ``truck_positions`` is called, not when the first report is drawn.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any, Iterator

__all__ = [
    "TOPIC",
    "PARTITIONS",
    "TRUCKS",
    "INTERVAL_MS",
    "START_MS",
    "truck_ids",
    "truck_positions",
    "encode_report",
    "decode_report",
    "TRUCK_POSITION_SCHEMA",
]

TOPIC = "trucks_gps"
PARTITIONS = 10
TRUCKS = 10  # the fleet of the course's examples
INTERVAL_MS = 20_000
START_MS = 1_704_096_000_000  # 2024-01-01 08:00:00 UTC: a fixed start, never the clock

DEPOT = (50.1109, 8.6821)  # lat, lon: Frankfurt am Main
START_RADIUS_KM = 30.0
RANGE_KM = 120.0
MAX_SPEED_KMH = 110.0
KM_PER_DEGREE = 111.32  # of latitude; of longitude it is this times cos(lat)

_TURN_SIGMA_DEG = 8.0
_SPEED_SIGMA_KMH = 5.0
_SPEED_PULL = 0.2  # fraction of the gap to the cruising speed closed per report
_STOP_PROBABILITY = 0.02
_STOP_REPORTS = (1, 9)  # a stop lasts this many reports, inclusive


def _check_int(name: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}: {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, not {value}")
    return value


def truck_ids(trucks: int = TRUCKS) -> list[str]:
    """The ids of a fleet of ``trucks`` trucks.

    >>> truck_ids(3)
    ['truck-001', 'truck-002', 'truck-003']
    """
    _check_int("trucks", trucks, 1)
    return [f"truck-{i:03d}" for i in range(1, trucks + 1)]


class _Truck:
    """One truck's random walk; ``step()`` returns its next report."""

    def __init__(self, truck_id: str, seed: int, interval_ms: int) -> None:
        self.id = truck_id
        self.rng = random.Random(f"minikafka.datasets:{seed}:{truck_id}")
        rng = self.rng
        self.phase_ms = int(rng.random() * interval_ms) // 1000 * 1000
        distance = START_RADIUS_KM * math.sqrt(rng.random())  # uniform over the disc
        bearing = rng.uniform(0.0, 360.0)
        self.lat, self.lon = _move(*DEPOT, bearing, distance)
        self.heading = rng.uniform(0.0, 360.0)
        self.cruise = rng.uniform(50.0, 90.0)
        self.speed = self.cruise
        self.stopped_for = 0

    def report(self, timestamp_ms: int) -> dict[str, Any]:
        return {
            "truck_id": self.id,
            "timestamp_ms": timestamp_ms,
            "lat": round(self.lat, 5),
            "lon": round(self.lon, 5),
            "speed_kmh": round(self.speed, 1),
            "heading_deg": round(self.heading, 1) % 360.0,
        }

    def advance(self, interval_ms: int) -> None:
        """Drive for one interval, then pick the next heading and speed."""
        km = self.speed * interval_ms / 3_600_000
        self.lat, self.lon = _move(self.lat, self.lon, self.heading, km)
        rng = self.rng
        if _distance_km(self.lat, self.lon, *DEPOT) > RANGE_KM:
            self.heading = _bearing(self.lat, self.lon, *DEPOT)  # head home
        self.heading = (self.heading + rng.gauss(0.0, _TURN_SIGMA_DEG)) % 360.0
        if self.stopped_for > 0:
            self.stopped_for -= 1
            self.speed = 0.0 if self.stopped_for else rng.uniform(10.0, 30.0)
        elif rng.random() < _STOP_PROBABILITY:
            self.stopped_for = rng.randint(*_STOP_REPORTS)
            self.speed = 0.0
        else:
            drift = _SPEED_PULL * (self.cruise - self.speed) + rng.gauss(0.0, _SPEED_SIGMA_KMH)
            self.speed = min(max(self.speed + drift, 0.0), MAX_SPEED_KMH)


def _move(lat: float, lon: float, heading_deg: float, km: float) -> tuple[float, float]:
    h = math.radians(heading_deg)
    lat2 = lat + km * math.cos(h) / KM_PER_DEGREE
    lon2 = lon + km * math.sin(h) / (KM_PER_DEGREE * math.cos(math.radians(lat)))
    return lat2, lon2


def _distance_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    dy = (lat2 - lat1) * KM_PER_DEGREE
    dx = (lon2 - lon1) * KM_PER_DEGREE * math.cos(math.radians((lat1 + lat2) / 2))
    return math.hypot(dx, dy)


def _bearing(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    dy = lat2 - lat1
    dx = (lon2 - lon1) * math.cos(math.radians((lat1 + lat2) / 2))
    return math.degrees(math.atan2(dx, dy)) % 360.0


def truck_positions(
    trucks: int = TRUCKS,
    *,
    seed: int = 0,
    start_ms: int = START_MS,
    interval_ms: int = INTERVAL_MS,
    count: int | None = None,
) -> Iterator[dict[str, Any]]:
    """Position reports of a fleet of ``trucks`` trucks, in time order.

    Each report is a dict with ``truck_id``, ``timestamp_ms``, ``lat``, ``lon``,
    ``speed_kmh`` and ``heading_deg``. Endless unless ``count`` (reports in all, over
    the whole fleet) is given.

    >>> [(r["truck_id"], r["timestamp_ms"] - START_MS) for r in truck_positions(2, count=4)]
    [('truck-001', 12000), ('truck-002', 18000), ('truck-001', 32000), ('truck-002', 38000)]
    """
    ids = truck_ids(trucks)
    _check_int("seed", seed, -(2**63))
    _check_int("start_ms", start_ms, 0)
    _check_int("interval_ms", interval_ms, 1)
    if count is not None:
        _check_int("count", count, 0)
    fleet = sorted((_Truck(i, seed, interval_ms) for i in ids), key=lambda t: (t.phase_ms, t.id))
    return _reports(fleet, start_ms, interval_ms, count)


def _reports(fleet: list[_Truck], start_ms: int, interval_ms: int, count: int | None) -> Iterator[dict[str, Any]]:
    emitted = 0
    round_start = start_ms
    while True:
        for truck in fleet:  # phases < interval_ms, so each round is later than the last
            if count is not None and emitted >= count:
                return
            yield truck.report(round_start + truck.phase_ms)
            truck.advance(interval_ms)
            emitted += 1
        round_start += interval_ms


def encode_report(report: dict[str, Any]) -> tuple[bytes, bytes]:
    """The (key, value) a producer sends: the truck id, and the report as JSON (sorted keys).

    >>> encode_report({"truck_id": "truck-001", "timestamp_ms": 0, "lat": 50.1, "lon": 8.7,
    ...                "speed_kmh": 0.0, "heading_deg": 90.0})  # doctest: +NORMALIZE_WHITESPACE
    (b'truck-001', b'{"heading_deg":90.0,"lat":50.1,"lon":8.7,"speed_kmh":0.0,"timestamp_ms":0,"truck_id":"truck-001"}')
    """
    truck_id = report.get("truck_id") if isinstance(report, dict) else None
    if not isinstance(truck_id, str):
        raise TypeError(f"a report is a dict with a str 'truck_id', not {report!r}")
    value = json.dumps(report, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return truck_id.encode("utf-8"), value.encode("utf-8")


def decode_report(value: bytes) -> dict[str, Any]:
    """The report back from its JSON value bytes (what a consumer does)."""
    return json.loads(value)


# A report's Avro schema (lecture 05): the same six fields, in the order Avro writes them.
TRUCK_POSITION_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "TruckPosition",
    "namespace": "minikafka.trucks",
    "doc": "One GPS report of one truck (minikafka.datasets).",
    "fields": [
        {"name": "truck_id", "type": "string"},
        {"name": "timestamp_ms", "type": "long", "doc": "milliseconds since the epoch, UTC"},
        {"name": "lat", "type": "double"},
        {"name": "lon", "type": "double"},
        {"name": "speed_kmh", "type": "double"},
        {"name": "heading_deg", "type": "double", "doc": "0 = north, clockwise"},
    ],
}


def __getattr__(name: str) -> Any:
    # The Kafka-facing half (minikafka.feed) imported on first use only: this module stays
    # pure, and cheap to import where no Kafka client is installed.
    if name in ("produce_trucks", "TruckFeed", "FeedResult"):
        from minikafka import feed

        return getattr(feed, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
