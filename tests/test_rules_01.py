"""Notebook 01's rules as seams (``minikafka.rules``): the offset-index lookup, the segment roll
and retention run every log of a cluster, and the log judge (``minikafka.course.tester_log``)
catches the classic wrong rules by what a Kafka user would see: a consumer skipping records, a
segment file past segment.bytes or a segment never rolled, records deleted before retention
allowed or kept after it."""

from __future__ import annotations

import bisect
from collections import namedtuple

import pytest

from minikafka import Cluster, KafkaConsumer, KafkaProducer
from minikafka import rules as R
from minikafka.course import judge
from minikafka.rules import REFERENCE, RULES, RuleError
from minikafka.storage import Log, LogConfig
from minikafka.topic import TopicPartition

Segment = namedtuple("Segment", "base_offset size first_timestamp")
Batch = namedtuple("Batch", "size max_timestamp last_offset")
SegmentInfo = namedtuple("SegmentInfo", "base_offset size newest_timestamp")


# --- students' rules: correct ones, written differently from the reference, and classic wrong ones ----------


def lookup_ok(entries, offset, base_offset):
    i = bisect.bisect_right([e for e, _ in entries], offset)
    return entries[i - 1] if i else (base_offset, 0)


def lookup_first_at_or_above(entries, offset, base_offset):
    "bisect_left without the -1: the first entry whose offset is >= the target"
    i = bisect.bisect_left([e for e, _ in entries], offset)
    return entries[min(i, len(entries) - 1)] if entries else (base_offset, 0)


def lookup_last_entry(entries, offset, base_offset):
    "always the newest entry: right for a consumer at the end, wrong for anyone behind"
    return entries[-1] if entries else (base_offset, 0)


def lookup_first_above(entries, offset, base_offset):
    "bisect_right without the -1: the first entry whose offset is > the target"
    i = bisect.bisect_right([e for e, _ in entries], offset)
    return entries[i] if i < len(entries) else (entries[-1] if entries else (base_offset, 0))


def roll_ok(segment, batch, config):
    if not segment.size:
        return None
    for reason, due in (("segment.bytes", segment.size + batch.size > config.segment_bytes),
                        ("segment.ms", batch.max_timestamp - segment.first_timestamp > config.segment_ms),
                        ("offset overflow", batch.last_offset - segment.base_offset >= 2**31)):
        if due:
            return reason
    return None


def _roll(segment, batch, config, *, full, late):
    if segment.size == 0:
        return None
    if full(segment, batch, config):
        return "segment.bytes"
    if late(segment, batch, config):
        return "segment.ms"
    if batch.last_offset - segment.base_offset > 2**31 - 1:
        return "offset overflow"
    return None


def _full(s, b, c):
    return s.size + b.size > c.segment_bytes


def _late(s, b, c):
    return b.max_timestamp - s.first_timestamp > c.segment_ms


def roll_ignores_the_batch(segment, batch, config):
    "rolls only once the segment is already over segment.bytes"
    return _roll(segment, batch, config, full=lambda s, b, c: s.size > c.segment_bytes, late=_late)


def roll_on_the_batch_alone(segment, batch, config):
    "compares the batch's size alone with segment.bytes"
    return _roll(segment, batch, config, full=lambda s, b, c: b.size > c.segment_bytes, late=_late)


def roll_forgets_segment_ms(segment, batch, config):
    return _roll(segment, batch, config, full=_full, late=lambda s, b, c: False)


def roll_in_seconds(segment, batch, config):
    "segment.ms compared with a span in seconds"
    return _roll(segment, batch, config, full=_full,
                 late=lambda s, b, c: (b.max_timestamp - s.first_timestamp) / 1000 > c.segment_ms)


def _retention(segments, now_ms, retention_ms, retention_bytes, *, expired, keep_going, over, ms_off=True):
    deleted, kept = [], list(segments)
    if retention_ms >= 0 or not ms_off:
        while kept[:None if keep_going else -1] and kept[0].size and expired(now_ms, kept[0], retention_ms):
            deleted.append((kept.pop(0).base_offset, "retention.ms"))
    if retention_bytes >= 0:
        total = sum(s.size for s in kept)
        for s in kept[:-1]:
            if not over(total, s, retention_bytes):
                break
            total -= s.size
            deleted.append((s.base_offset, "retention.bytes"))
    return deleted


def _expired(now, s, ms):
    return now - s.newest_timestamp > ms


def _over(total, s, nbytes):
    return total - s.size >= nbytes


def retention_ok(segments, now_ms, retention_ms, retention_bytes):
    return _retention(segments, now_ms, retention_ms, retention_bytes, expired=_expired, keep_going=True, over=_over)


def retention_at_exactly_retention_ms(segments, now_ms, retention_ms, retention_bytes):
    ">= where Kafka has >: a segment whose newest record is exactly retention.ms old goes"
    return _retention(segments, now_ms, retention_ms, retention_bytes, keep_going=True, over=_over,
                      expired=lambda now, s, ms: now - s.newest_timestamp >= ms)


def retention_bytes_while_over(segments, now_ms, retention_ms, retention_bytes):
    "deletes while the log is over retention.bytes, so it ends below it"
    return _retention(segments, now_ms, retention_ms, retention_bytes, expired=_expired, keep_going=True,
                      over=lambda total, s, nbytes: total > nbytes)


def retention_ms_minus_one_is_a_limit(segments, now_ms, retention_ms, retention_bytes):
    "forgets that retention.ms = -1 means forever"
    return _retention(segments, now_ms, retention_ms, retention_bytes, expired=_expired, keep_going=False,
                      over=_over, ms_off=False)


def retention_never(segments, now_ms, retention_ms, retention_bytes):
    return []


WRONG = [
    ("index_lookup", lookup_first_at_or_above, "gap"),
    ("index_lookup", lookup_last_entry, "gap"),
    ("index_lookup", lookup_first_above, "gap"),
    ("roll_reason", roll_ignores_the_batch, "segment-never-rolled"),
    ("roll_reason", roll_on_the_batch_alone, "segment-never-rolled"),
    ("roll_reason", roll_forgets_segment_ms, "segment-never-rolled"),
    ("roll_reason", roll_in_seconds, "segment-never-rolled"),
    ("segments_to_delete", retention_at_exactly_retention_ms, "deleted-early"),
    ("segments_to_delete", retention_bytes_while_over, "deleted-early"),
    ("segments_to_delete", retention_ms_minus_one_is_a_limit, "deleted-early"),
    ("segments_to_delete", retention_never, "kept-past-retention"),
]


# --- the seam ---------------------------------------------------------------------------------------


def test_the_rules_of_01_have_the_exercises_signatures():
    assert RULES["index_lookup"].signature == "index_lookup(entries, offset, base_offset)"
    assert RULES["roll_reason"].signature == "roll_reason(segment, batch, config)"
    assert RULES["segments_to_delete"].signature == "segments_to_delete(segments, now_ms, retention_ms, retention_bytes)"
    assert {r.lecture for r in RULES.values() if r.name in ("index_lookup", "roll_reason", "segments_to_delete")} == {"01"}


def test_a_log_calls_the_reference_functions_themselves(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=300, index_interval_bytes=50), clock=lambda: 0)
    for i in range(20):
        log.append([b"value-%d" % i])
    assert log.rules is REFERENCE and log.segments[-1].offset_index.rules is REFERENCE
    assert REFERENCE.index_lookup is R.index_lookup and REFERENCE.roll_reason is R.roll_reason
    assert REFERENCE.segments_to_delete is R.segments_to_delete
    assert len(log.segments) > 2


def test_the_reference_rules_on_the_exercises_cases():
    assert R.index_lookup([(31, 542), (39, 1082)], 30, 20) == (20, 0)
    assert R.index_lookup([(31, 542), (39, 1082)], 31, 20) == (31, 542)
    assert R.index_lookup([(31, 542), (39, 1082)], 45, 20) == (39, 1082)
    assert R.index_lookup([], 5, 42) == (42, 0)
    config = LogConfig(segment_bytes=1000, segment_ms=60_000)
    assert R.roll_reason(Segment(0, 0, -1), Batch(5000, 0, 3), config) is None
    assert R.roll_reason(Segment(0, 700, 0), Batch(300, 0, 10), config) is None
    assert R.roll_reason(Segment(0, 701, 0), Batch(300, 0, 10), config) == "segment.bytes"
    assert R.roll_reason(Segment(0, 100, 0), Batch(100, 60_001, 10), config) == "segment.ms"
    assert R.roll_reason(Segment(5, 100, 0), Batch(100, 0, 5 + 2**31), config) == "offset overflow"
    S = [SegmentInfo(0, 100, 1_000), SegmentInfo(10, 200, 5_000), SegmentInfo(20, 300, 9_000), SegmentInfo(30, 0, -1)]
    assert R.segments_to_delete(S, 9_000, 4_000, -1) == [(0, "retention.ms")]
    assert R.segments_to_delete(S, 9_000, -1, 250) == [(0, "retention.bytes"), (10, "retention.bytes")]
    assert R.segments_to_delete(S, 9_000, 3_999, 0) == [(0, "retention.ms"), (10, "retention.ms"), (20, "retention.bytes")]
    assert R.segments_to_delete(S, 0, -1, -1) == []


def test_a_students_rules_in_a_log_give_the_same_log_as_kafkas(tmp_path):
    rules = R.Rules({"index_lookup": lookup_ok, "roll_reason": roll_ok, "segments_to_delete": retention_ok}, node=1,
                    clock=lambda: 0)
    layouts = []
    for name, r in (("kafka", REFERENCE), ("yours", rules)):
        log = Log(tmp_path / name, LogConfig(segment_bytes=400, index_interval_bytes=60, retention_bytes=900),
                  clock=lambda: 0, rules=r)
        for i in range(40):
            log.append([b"v%d" % i] * (1 + i % 3))
        deleted = log.delete_old_segments(now_ms=0)
        layouts.append(([(s.base_offset, s.size) for s in log.segments], deleted,
                        [bytes(log.read(o, 100))[:20] for o in range(log.log_start_offset, log.log_end_offset)]))
    assert layouts[0] == layouts[1]
    assert rules.trace.calls["index_lookup"] > 10 and rules.trace.calls["roll_reason"] == 40
    assert rules.trace.differing_count == 0


def test_an_index_lookup_pointing_inside_a_batch_stops_the_cluster_with_one_message():
    def mid_batch(entries, offset, base_offset):
        return (offset, 3)
    with pytest.raises(RuleError) as caught:
        with Cluster(brokers=1, seed=2, rules={"index_lookup": mid_batch}) as cluster:
            cluster.create_topic("t", 1, 1, config={"segment.bytes": 500})
            producer = KafkaProducer(bootstrap_servers=cluster)
            for i in range(5):
                producer.send("t", value=b"v%d" % i).get(timeout=10)
            consumer = KafkaConsumer(bootstrap_servers=cluster, auto_offset_reset="earliest")
            consumer.assign([TopicPartition("t", 0)])
            consumer.poll(timeout_ms=2_000)
    message = str(caught.value)
    assert message.startswith("your rule index_lookup broke on broker 1 at t=")
    assert "neither an entry of the index nor (base_offset, 0)" in message
    assert "called with: index_lookup(entries=" in message and "Kafka's rule returns: (0, 0)" in message


def test_retention_that_deletes_a_hole_is_refused_at_the_call():
    problem = RULES["segments_to_delete"].check(
        {"segments": [SegmentInfo(0, 10, 1), SegmentInfo(5, 10, 2), SegmentInfo(9, 10, 3)]}, [(5, "retention.ms")])
    assert "deleted segment 5 where the oldest remaining segment is 0" in problem
    problem = RULES["roll_reason"].check({"segment": Segment(0, 10, 0), "batch": Batch(10, 0, 2**31)}, None)
    assert "does not fit the index's 4 bytes" in problem


# --- the judge ---------------------------------------------------------------------------------------


@pytest.mark.campaign
def test_correct_students_rules_pass_the_log_judge():
    verdict = judge({"index_lookup": lookup_ok, "roll_reason": roll_ok, "segments_to_delete": retention_ok})
    assert verdict.ok, str(verdict)
    assert str(verdict).startswith("0 anomalies in 6 schedules (seed 0)")


@pytest.mark.parametrize("rule,fn,kind", WRONG, ids=[fn.__name__ for _, fn, _ in WRONG])
def test_each_classic_wrong_rule_is_caught_by_what_a_user_sees(rule, fn, kind):
    verdict = judge({rule: fn})
    assert not verdict.ok
    assert verdict.failure.kind == kind, str(verdict)
    text = str(verdict)
    assert text.startswith("FAILED: schedule ") and f"then: {kind}: " in text


@pytest.mark.campaign
def test_a_lookup_that_starts_earlier_than_kafkas_is_slower_not_wrong_and_passes():
    "bisect_left with the -1: an earlier entry, so reads scan further and find the same batch"
    def lookup_one_entry_early(entries, offset, base_offset):
        i = bisect.bisect_left([e for e, _ in entries], offset)
        return entries[i - 1] if i else (base_offset, 0)
    verdict = judge({"index_lookup": lookup_one_entry_early})
    assert verdict.ok, str(verdict)
