"""The capstone's hidden properties (lecture 10, issue 34 item 3), judged without Spark.

``minikafka/course/capstone_properties.py`` draws a fleet per call from the grading seed and
judges the rows the kernel prints against the package's references. Here the answers are made in
plain Python as a right pipeline and as the classic wrong ones would print them: every right
answer passes on every seed, each wrong one fails the property that states its rule, and no
message holds an input.
"""

from __future__ import annotations

import json

import pytest

from minikafka.course import capstone_properties as C
from minikafka.course import properties
from minikafka.spark.capstone import positions_reference, sliding_reference, speeding_reference, windowed_reference

SEEDS = range(1, 9)
NAMES = ("parse_reports", "windowed_speeds", "write_alerts", "sliding_speeds", "write_positions")


def windowed_rows(reports, window_ms=60_000, shift=0):
    """What windowed_speeds prints, computed as a pipeline would (``shift``: a wrong window start)."""
    shifted = [dict(r, timestamp_ms=r["timestamp_ms"] + shift) for r in reports]
    return tuple(sorted((start - shift, start - shift + window_ms, truck, n, avg)
                        for (start, truck), (n, avg) in windowed_reference(shifted, window_ms).items()))


def sliding_rows(reports, size_ms=300_000):
    return tuple(sorted((start, start + size_ms, truck, n, top)
                        for (start, truck), (n, top) in sliding_reference(reports, size_ms).items()))


def alerts_answer(reports, limit, *, strict=True, replay_writes=False, keys=("truck_id", "timestamp_ms", "speed_kmh")):
    hits = [r for r in reports if (r["speed_kmh"] > limit if strict else r["speed_kmh"] >= limit)]
    written = tuple((r["truck_id"].encode(), json.dumps({k: r[k] for k in keys}).encode()) for r in hits)
    return len(hits), len(hits) if replay_writes else 0, written * (2 if replay_writes else 1)


def positions_answer(reports, *, last_record=False):
    table = {}
    for r in reports:
        if last_record or r["truck_id"] not in table or r["timestamp_ms"] > table[r["truck_id"]]["timestamp_ms"]:
            table[r["truck_id"]] = {"timestamp_ms": r["timestamp_ms"], "lat": r["lat"], "lon": r["lon"]}
    return len(table), table


RIGHT = {
    "parse_reports": lambda case: tuple(sorted((r["truck_id"], r["timestamp_ms"], float(r["speed_kmh"]), r["timestamp_ms"])
                                               for r in case[0])),
    "windowed_speeds": lambda case: windowed_rows(case[0]),
    "sliding_speeds": lambda case: sliding_rows(case[0]),
    "write_alerts": lambda case: alerts_answer(case[0], case[1]),
    "write_positions": lambda case: positions_answer(case[0]),
}
WRONG = {  # (name, a wrong answer, words of the failure)
    "event_time in seconds": ("parse_reports", lambda case: tuple(
        sorted((r["truck_id"], r["timestamp_ms"], float(r["speed_kmh"]), r["timestamp_ms"] // 1000) for r in case[0])),
        "event_time"),
    "windows from the first report": ("windowed_speeds", lambda case: windowed_rows(case[0], shift=-1), "windows"),
    "two-minute windows": ("windowed_speeds", lambda case: windowed_rows(case[0], 120_000), "minute"),
    "ten-minute slides": ("sliding_speeds", lambda case: sliding_rows(case[0], 600_000), "minutes"),
    "at or above the limit": ("write_alerts", lambda case: alerts_answer(case[0], case[1], strict=False), "strictly above"),
    "a replay writes again": ("write_alerts", lambda case: alerts_answer(case[0], case[1], replay_writes=True), "replay"),
    "every field in the value": ("write_alerts", lambda case: alerts_answer(
        case[0], case[1], keys=("truck_id", "timestamp_ms", "speed_kmh", "lat")), "exactly the keys"),
    "the last record, not the newest": ("write_positions", lambda case: positions_answer(case[0], last_record=True),
                                        "newest"),
}


def test_every_capstone_function_has_a_property_of_lecture_10_and_few_calls():
    assert properties.rules_of("10", list(NAMES)) == list(NAMES)
    for name in NAMES:
        assert len(properties.draw(name, 1)) == C.CALLS
        # The kernel must not run the package's references (the notebook imports them for its checks).
        assert "minikafka.spark.capstone:windowed_reference" in properties.reference_specs(name)
        assert "minikafka.spark.capstone:sliding_reference" in properties.reference_specs(name)


@pytest.mark.parametrize("name", NAMES)
def test_right_answers_pass_on_every_seed(name):
    for seed in SEEDS:
        for case in properties.draw(name, seed):
            assert properties.judge(name, case, properties.plain(RIGHT[name](case))) is None, (seed, case)


@pytest.mark.parametrize("wrong", sorted(WRONG))
def test_a_wrong_pipeline_fails_its_property_on_some_draw_of_each_grading(wrong):
    name, answer, words = WRONG[wrong]
    for seed in SEEDS:
        said = [properties.judge(name, case, properties.plain(answer(case))) for case in properties.draw(name, seed)]
        failed = [s for s in said if s is not None]
        assert failed, (wrong, seed)  # caught in every grading, not only on some seeds
        assert any(words in s for s in failed), failed
        for message in failed:  # the rule in words, never an input
            assert "truck-" not in message and "property_" not in message, message


def test_the_draws_hold_the_cases_the_exercises_name():
    cases = [c for seed in SEEDS for c in properties.draw("write_alerts", seed)]
    # A limit equal to a report's speed (strictly above is the rule) in most gradings.
    assert sum(any(r["speed_kmh"] == c[1] for r in c[0]) for c in cases) >= len(cases) // 2
    fleets = [c[0] for seed in SEEDS for c in properties.draw("windowed_speeds", seed)]
    assert any(any(r["timestamp_ms"] % 60_000 == 0 for r in f) for f in fleets)
    assert any(any(r["timestamp_ms"] % 60_000 == 59_999 for r in f) for f in fleets)
    positions = [c[0] for seed in SEEDS for c in properties.draw("write_positions", seed)]
    # Shuffled: the last record of a truck is often not its newest.
    assert sum(positions_answer(f, last_record=True)[1] != positions_reference(f) for f in positions) >= len(positions) // 2
    assert all(speeding_reference(c[0], c[1]) is not None for c in cases)
    for fleet in fleets:  # each grading's one fleet holds every case: a lone truck, records out of time order
        assert [r["truck_id"] for r in fleet].count("truck-999") == 1
        times = [r["timestamp_ms"] for r in fleet]
        assert times != sorted(times)
