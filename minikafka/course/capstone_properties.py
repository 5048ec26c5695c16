"""Hidden properties of the capstone's Spark exercises (lecture 10), drawn per grading run.

Theory of operation
-------------------
Lecture 10 asks for five functions of a streaming pipeline over the truck fleet: ``parse_reports``
and ``windowed_speeds`` (exercise 1), ``write_alerts`` (2), ``sliding_speeds`` (3) and
``write_positions`` (4). None is a rule of the nodes, so each has an entry here, found as
``wire_properties.EXERCISES`` are (by the name of a function the solution defines, and its
lecture). Each entry draws a *fleet* per call from the grading run's seed: a few trucks of
``minikafka.datasets.truck_positions`` with a drawn seed, start and size, then edited towards all
the cases the exercises state:

- reports exactly on a window's start and one millisecond before it (tumbling and sliding
  windows), a truck with a single report;
- for ``write_alerts`` a drawn speed limit, with reports exactly at it (strictly above is the
  rule) and a batch id, the batch written twice (the replay writes nothing);
- for ``write_positions`` the reports shuffled (the newest is the largest ``timestamp_ms``, not
  the last record), into a fresh compacted topic.

The kernel turns the fleet into the source's rows with the notebook's own ``kafka_rows`` (a batch
DataFrame: a watermark changes nothing on one), calls the student's function and prints plain
rows: ``(window start ms, truck, reports, average)``, what the sink's topic holds, the table read
back. The grader judges them in its own process against the package's references in
``minikafka.spark.capstone`` (``windowed_reference``, ``sliding_reference``,
``speeding_reference``, ``positions_reference``), which read the reports, not Spark. Those
references are also what the call must not run (``forbidden``): the kernel holds them for the
visible checks, so a function that computes the answer in Python with them and hands it to
``createDataFrame`` is caught by the watch.

A Spark call costs about a second, so each function has ``CALLS`` (1) drawn call per grading, not
the rules' 20, on a fleet that holds every case at once: boundaries, records out of time order, a
lone truck (and a limit equal to a report's speed). Two calls on two fleets, each with some of the
cases, added 14% to a capstone's grading; on the one fleet each wrong pipeline of the tests
(``tests/test_grading_properties10.py``) fails in every grading.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

from minikafka.course.wire_properties import ExerciseProperty, module_specs
from minikafka.datasets import truck_positions

CALLS = 1
MINUTE = 60_000
_REFERENCES = "minikafka.spark.capstone"


def _fleet(rng: random.Random) -> list[dict]:
    """A drawn fleet, edited towards every case the exercises state: reports on window boundaries
    (a window's start, one millisecond before the next), a lone truck's single report, records out
    of time order."""
    start = 1_700_000_000_000 + rng.randrange(0, 10**9) // MINUTE * MINUTE + rng.choice([0, rng.randrange(MINUTE)])
    reports = [dict(r) for r in truck_positions(rng.randrange(2, 6), seed=rng.randrange(10**6), start_ms=start,
                                                interval_ms=rng.choice([5_000, 20_000, 45_000]),
                                                count=rng.randrange(40, 120))]
    for r in rng.sample(reports, min(6, len(reports))):  # on a window's start, and 1 ms before the next
        edge = r["timestamp_ms"] // MINUTE * MINUTE
        r["timestamp_ms"] = edge if rng.random() < 0.5 else edge + MINUTE - 1
    reports.append(dict(rng.choice(reports), truck_id="truck-999", timestamp_ms=start + rng.randrange(10 * MINUTE)))
    rng.shuffle(reports)
    return reports


# --- the draws: plain data only (the kernel rebuilds them from their repr) --------------------------

def _one_fleet(rng: random.Random, i: int) -> tuple:
    return (_fleet(rng),)


def _alerts_case(rng: random.Random, i: int) -> tuple:
    reports = _fleet(rng)
    limit = rng.choice(sorted({r["speed_kmh"] for r in reports}))  # exactly a report's speed: strictly above is the rule
    return reports, limit, rng.randrange(0, 1000), f"property_alerts_{rng.randrange(16**8):08x}"


def _positions_case(rng: random.Random, i: int) -> tuple:
    reports = _fleet(rng)
    seen: dict[tuple[str, int], int] = {}
    for r in reports:  # one newest report per truck: no two of a truck at the same millisecond
        key = (r["truck_id"], r["timestamp_ms"])
        seen[key] = seen.get(key, 0) + 1
        r["timestamp_ms"] += seen[key] - 1
    return reports, f"property_positions_{rng.randrange(16**8):08x}"


# --- what the kernel runs: the student's function on the drawn case, its answer as plain rows -------

KERNEL = {
    "parse_reports": """
_mk_r = sorted((r.truck_id, r.timestamp_ms, r.speed_kmh,
                None if r.event_time is None else round(r.event_time.timestamp() * 1000))
               for r in parse_reports(kafka_rows(_mk_args[0]))
               .select("truck_id", "timestamp_ms", "speed_kmh", "event_time").collect())
""",
    "windowed_speeds": """
_mk_r = sorted((round(r.window.start.timestamp() * 1000), round(r.window.end.timestamp() * 1000),
                r.truck_id, r.reports, r.avg_speed_kmh) for r in windowed_speeds(kafka_rows(_mk_args[0])).collect())
""",
    "sliding_speeds": """
_mk_r = sorted((round(r.window.start.timestamp() * 1000), round(r.window.end.timestamp() * 1000),
                r.truck_id, r.reports, r.top_speed_kmh) for r in sliding_speeds(kafka_rows(_mk_args[0])).collect())
""",
    # The drawn limit in the notebook's SPEED_LIMIT_KMH (the exercise says to use the name), the
    # same batch written twice to a fresh topic, what the topic holds.
    "write_alerts": """
_mk_reports, _mk_limit, _mk_batch, _mk_topic = _mk_args
_mk_saved, SPEED_LIMIT_KMH = SPEED_LIMIT_KMH, _mk_limit
try:
    with KafkaBatchSink(BOOTSTRAP, _mk_topic) as _mk_sink:
        _mk_r = (write_alerts(kafka_rows(_mk_reports), _mk_batch, _mk_sink),
                 write_alerts(kafka_rows(_mk_reports), _mk_batch, _mk_sink),
                 [(key, value) for _, key, value in _mk_sink.read()])
finally:
    SPEED_LIMIT_KMH = _mk_saved
""",
    # One batch into a fresh compacted topic, read back as a table.
    "write_positions": """
_mk_reports, _mk_topic = _mk_args
compacted_topic(_mk_topic)
_mk_producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all")
try:
    _mk_r = (write_positions(kafka_rows(_mk_reports), _mk_producer, _mk_topic), read_table(_mk_topic))
finally:
    _mk_producer.close()
""",
}


# --- the judges: why an answer breaks the exercise's rule, in words, never the input --------------

def _windows(rows: Any, reference: dict, size_ms: int, what: str) -> str | None:
    if not isinstance(rows, tuple) or not all(isinstance(r, tuple) and len(r) == 5 for r in rows):
        return f"its DataFrame's rows are not (window, truck_id, reports, {what})"
    if any(end - start != size_ms for start, end, *_ in rows):
        return f"a window is not {size_ms // MINUTE} minute{'s' * (size_ms != MINUTE)} long"
    mine = {(start, truck): (n, value) for start, _, truck, n, value in rows}
    if len(mine) != len(rows):
        return "a truck's window comes out more than once"
    if mine.keys() != reference.keys():
        return ("its windows are not the reference's: a report belongs to the window whose start is at or "
                "before its event time and whose end is after it, per truck")
    for key, (n, value) in reference.items():
        if mine[key][0] != n:
            return "a window's count of reports differs from the reference's"
        theirs = mine[key][1]
        if not isinstance(theirs, (int, float)) or not math.isclose(theirs, value, rel_tol=1e-9, abs_tol=1e-6):
            return f"a window's {what} differs from the reference's"
    return None


def _windowed_judge(case: tuple, rows: Any) -> str | None:
    from minikafka.spark.capstone import windowed_reference

    return _windows(rows, windowed_reference(case[0]), MINUTE, "avg_speed_kmh")


def _sliding_judge(case: tuple, rows: Any) -> str | None:
    from minikafka.spark.capstone import sliding_reference

    return _windows(rows, sliding_reference(case[0]), 5 * MINUTE, "top_speed_kmh")


def _parse_judge(case: tuple, rows: Any) -> str | None:
    want = sorted((r["truck_id"], r["timestamp_ms"], float(r["speed_kmh"]), r["timestamp_ms"]) for r in case[0])
    if not isinstance(rows, tuple) or len(rows) != len(want):
        return "it does not give one row per record"
    if any(not isinstance(r, tuple) or len(r) != 4 or r[3] is None for r in rows):
        return "a row has no event_time (timestamp_ms as a timestamp)"
    if [tuple(r) for r in rows] != want:
        return "its truck_id, timestamp_ms, speed_kmh or event_time differ from the records' JSON"
    return None


def _alerts_judge(case: tuple, answer: Any) -> str | None:
    from minikafka.spark.capstone import speeding_reference

    reports, limit, _, _ = case
    want = speeding_reference(reports, limit)
    if not (isinstance(answer, tuple) and len(answer) == 3):
        return "it did not return the sink's count"
    first, second, written = answer
    if first != len(want):
        return ("its first write of a batch did not return how many records the sink wrote: one per report "
                "strictly above SPEED_LIMIT_KMH")
    if second != 0:
        return "the same batch id written again wrote records: a replayed batch must write nothing"
    found = []
    for key, value in written:
        try:
            alert = json.loads(value)
        except (TypeError, ValueError):
            return "a record's value is not a JSON object (bytes)"
        if not isinstance(alert, dict) or set(alert) != {"truck_id", "timestamp_ms", "speed_kmh"}:
            return "a record's value does not have exactly the keys truck_id, timestamp_ms and speed_kmh"
        if key != str(alert["truck_id"]).encode():
            return "a record's key is not its truck id (bytes)"
        found.append((alert["truck_id"], alert["timestamp_ms"], alert["speed_kmh"]))
    if sorted(found) != want:
        return ("the topic does not hold exactly the reports strictly above SPEED_LIMIT_KMH, each once "
                "(the limit is drawn: use the name, not the number)")
    return None


def _positions_judge(case: tuple, answer: Any) -> str | None:
    from minikafka.spark.capstone import positions_reference

    want = positions_reference(case[0])
    if not (isinstance(answer, tuple) and len(answer) == 2):
        return "it did not return how many records it sent"
    count, table = answer
    if count != len(want):
        return "it did not send one record per truck of the batch, and return how many"
    if not isinstance(table, dict) or table != want:
        return ("the table read back is not each truck's newest report (the largest timestamp_ms, not the "
                "last record) as {timestamp_ms, lat, lon}, keyed by the truck id")
    return None


def forbidden() -> tuple[str, ...]:
    """The package's references of the capstone: every ``*_reference`` of ``minikafka.spark.capstone``,
    found from its source."""
    return tuple(s for s in module_specs(_REFERENCES) if s.endswith("_reference"))


def _entry(statement: str, draw, judge, name: str) -> ExerciseProperty:
    return ExerciseProperty("10", statement, draw, judge, (), calls=CALLS, kernel=KERNEL[name], forbid=forbidden)


EXERCISES: dict[str, ExerciseProperty] = {
    "parse_reports": _entry(
        "it gives each record's truck_id, timestamp_ms and speed_kmh from its JSON value, and event_time as "
        "timestamp_ms made a timestamp, one row per record", _one_fleet, _parse_judge, "parse_reports"),
    "windowed_speeds": _entry(
        "it gives each truck's reports and average speed per one-minute window of event time, every report in "
        "the window that holds its timestamp (windows start on whole minutes)", _one_fleet, _windowed_judge,
        "windowed_speeds"),
    "write_alerts": _entry(
        "it writes one record per report strictly above SPEED_LIMIT_KMH, keyed by truck id, its value the JSON "
        "of truck_id, timestamp_ms and speed_kmh, in one sink.write per batch, and a replayed batch writes "
        "nothing", _alerts_case, _alerts_judge, "write_alerts"),
    "sliding_speeds": _entry(
        "it gives each truck's reports and top speed per five-minute window sliding every minute, a report in "
        "each of the five windows that hold it", _one_fleet, _sliding_judge, "sliding_speeds"),
    "write_positions": _entry(
        "it sends one record per truck of the batch, for its newest report (the largest timestamp_ms), keyed "
        "by truck id with the JSON of timestamp_ms, lat and lon, and returns how many it sent",
        _positions_case, _positions_judge, "write_positions"),
}
