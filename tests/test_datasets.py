"""The truck-GPS fleet: deterministic, one report per truck every interval, in time order,
plausible values, and clear errors for bad arguments."""

from __future__ import annotations

import doctest
import hashlib
import json
import math
from collections import defaultdict

import pytest

from minikafka import datasets
from minikafka.datasets import (
    INTERVAL_MS,
    MAX_SPEED_KMH,
    START_MS,
    decode_report,
    encode_report,
    truck_ids,
    truck_positions,
)

FIELDS = ["truck_id", "timestamp_ms", "lat", "lon", "speed_kmh", "heading_deg"]


def by_truck(reports):
    tracks = defaultdict(list)
    for r in reports:
        tracks[r["truck_id"]].append(r)
    return tracks


def distance_km(a, b):
    # Haversine: independent of the module's own flat-earth step.
    lat1, lon1, lat2, lon2 = map(math.radians, (a["lat"], a["lon"], b["lat"], b["lon"]))
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return 2 * 6371.0 * math.asin(math.sqrt(h))


def test_doctests():
    assert doctest.testmod(datasets).failed == 0


def test_same_seed_same_stream():
    a = list(truck_positions(10, seed=7, count=500))
    b = list(truck_positions(10, seed=7, count=500))
    assert a == b
    assert a != list(truck_positions(10, seed=8, count=500))


def test_stream_is_pinned():
    # The committed notebook outputs are made from this stream: a change here changes them.
    first = next(truck_positions())
    assert first == {
        "truck_id": "truck-007", "timestamp_ms": 1704096000000, "lat": 50.22168,
        "lon": 8.98668, "speed_kmh": 55.5, "heading_deg": 298.9,
    }
    digest = hashlib.sha256(b"".join(encode_report(r)[1] for r in truck_positions(count=1000)))
    assert digest.hexdigest()[:16] == PINNED_DIGEST


PINNED_DIGEST = "71f20df1e6e33486"  # sha256 prefix of the first 1000 values for seed 0


def test_a_trucks_path_does_not_depend_on_the_fleet_size():
    small = by_truck(truck_positions(3, seed=1, count=3 * 50))
    large = by_truck(truck_positions(30, seed=1, count=30 * 50))
    for truck in truck_ids(3):
        assert small[truck] == large[truck]


def test_report_fields_and_ids():
    reports = list(truck_positions(12, count=12))
    assert sorted(r["truck_id"] for r in reports) == truck_ids(12)
    assert truck_ids(12)[:2] == ["truck-001", "truck-002"] and truck_ids(12)[-1] == "truck-012"
    for r in reports:
        assert list(r) == FIELDS
        assert isinstance(r["timestamp_ms"], int)


def test_one_report_per_truck_every_interval():
    for interval in (INTERVAL_MS, 1_000, 7):
        tracks = by_truck(truck_positions(10, seed=3, start_ms=1_000_000, interval_ms=interval, count=10 * 40))
        assert len(tracks) == 10
        for reports in tracks.values():
            times = [r["timestamp_ms"] for r in reports]
            assert len(times) == 40
            assert 1_000_000 <= times[0] < 1_000_000 + interval
            assert all(b - a == interval for a, b in zip(times, times[1:]))


def test_trucks_do_not_report_in_lockstep():
    first = [r["timestamp_ms"] for r in truck_positions(10, count=10)]
    assert len(set(first)) > 1
    assert all((t - START_MS) % 1000 == 0 for t in first)  # whole-second phases


def test_time_order():
    times = [r["timestamp_ms"] for r in truck_positions(25, seed=5, count=2000)]
    assert times == sorted(times)


def test_count():
    assert len(list(truck_positions(4, count=0))) == 0
    assert len(list(truck_positions(4, count=9))) == 9
    endless = truck_positions(2)
    assert len([next(endless) for _ in range(1000)]) == 1000


def test_values_are_plausible():
    reports = list(truck_positions(10, seed=11, count=10 * 2000))  # 11 hours per truck
    speeds = [r["speed_kmh"] for r in reports]
    assert min(speeds) == 0.0 and max(speeds) <= MAX_SPEED_KMH
    assert 40 < sum(speeds) / len(speeds) < 90
    assert all(0.0 <= r["heading_deg"] < 360.0 for r in reports)
    assert all(48.0 < r["lat"] < 52.2 and 6.0 < r["lon"] < 11.5 for r in reports)  # near the depot
    for reports_of_truck in by_truck(reports).values():
        for a, b in zip(reports_of_truck, reports_of_truck[1:]):
            # It drives at the speed it reported, for one interval: distance = speed * time.
            expected = a["speed_kmh"] * INTERVAL_MS / 3_600_000
            assert abs(distance_km(a, b) - expected) < 0.005 + 0.01 * expected


def test_encode_and_decode():
    report = next(truck_positions(seed=2))
    key, value = encode_report(report)
    assert key == report["truck_id"].encode()
    assert decode_report(value) == report
    assert value == json.dumps(report, sort_keys=True, separators=(",", ":")).encode()
    assert value.startswith(b'{"heading_deg":')


def test_encode_rejects_what_is_not_a_report():
    with pytest.raises(TypeError, match="truck_id"):
        encode_report({"lat": 1.0})
    with pytest.raises(TypeError, match="truck_id"):
        encode_report("truck-001")


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"trucks": 0}, ValueError, "trucks must be >= 1, not 0"),
        ({"trucks": -3}, ValueError, "trucks must be >= 1"),
        ({"trucks": 2.5}, TypeError, "trucks must be an int, not float"),
        ({"trucks": True}, TypeError, "trucks must be an int, not bool"),
        ({"seed": "42"}, TypeError, "seed must be an int, not str"),
        ({"seed": None}, TypeError, "seed must be an int"),
        ({"start_ms": -1}, ValueError, "start_ms must be >= 0, not -1"),
        ({"start_ms": 1.7e12}, TypeError, "start_ms must be an int"),
        ({"interval_ms": 0}, ValueError, "interval_ms must be >= 1, not 0"),
        ({"count": -1}, ValueError, "count must be >= 0, not -1"),
        ({"count": 10.0}, TypeError, "count must be an int"),
    ],
)
def test_bad_arguments_fail_at_call_time(kwargs, error, message):
    with pytest.raises(error, match=message):
        truck_positions(**kwargs)  # no next(): the check is not deferred to the first report


def test_seed_and_the_rest_are_keyword_only():
    with pytest.raises(TypeError):
        truck_positions(10, 42)
