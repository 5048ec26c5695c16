"""The log cleaner: compaction of cleanup.policy=compact logs (storage/cleaner.py)."""

import os

import pytest

from minikafka.errors import IllegalArgumentError
from minikafka.records import Compression, Record, RecordBatch
from minikafka.storage import CleanerStats, Log, LogCleaner, LogConfig, LogManager
from minikafka.storage.cleaner import CLEANER_CHECKPOINT_FILE, read_cleaner_checkpoint
from minikafka.topic import TopicPartition

DAY = 24 * 3600 * 1000


class Clock:
    def __init__(self, now=0):
        self.now = now

    def __call__(self):
        return self.now


def compact_log(path, **config):
    return Log(path / "offsets-0", LogConfig.of({"cleanup.policy": "compact", **config}), clock=Clock(10_000))


def consume(log, offset=0):
    """(offset, key, value) of every record from ``offset`` to the end, read as a consumer
    does: fetch from a position, skip records below it, move past the last batch."""
    position, out = offset, []
    while position < log.log_end_offset:
        batches = list(log.read(position, max_bytes=300).batches())
        if not batches and all(last < position for _, last in batch_spans(log)):
            break  # a gap up to the log end (truncated into): nothing more, as for a consumer
        assert batches, f"nothing read at {position} (end {log.log_end_offset})"
        for b in batches:
            out += [(r.offset, r.key, r.value) for r in b.records() if r.offset >= position]
        position = batches[-1].next_offset
    return out


def put(log, *pairs, ts=1_000, **kw):
    """Append one batch of (key, value) pairs, all with timestamp ``ts``."""
    return log.append(RecordBatch.build([Record(k, v, ts) for k, v in pairs], **kw))


def three_segments(log):
    """Keys a, b, c rewritten over three old segments, then an active one."""
    put(log, (b"a", b"a0"), (b"b", b"b0"), (b"c", b"c0"))  # 0-2
    put(log, (b"a", b"a1"))  # 3
    log.roll()
    put(log, (b"b", b"b1"), (b"a", b"a2"))  # 4-5
    put(log, (None, b"no key"))  # 6
    log.roll()
    put(log, (b"c", b"c1"), (b"b", b"b2"))  # 7-8
    log.roll()
    put(log, (b"a", b"a3"))  # 9: the active segment


def test_keeps_latest_value_per_key_across_segments(tmp_path):
    with compact_log(tmp_path) as log:
        three_segments(log)
        before = consume(log)
        end, active = log.log_end_offset, log.active_segment
        active_bytes = active.log_path.read_bytes()
        stats = LogCleaner().clean(log, now_ms=2_000)

        assert isinstance(stats, CleanerStats)
        after = consume(log)
        # Old segments: the latest of each key plus the keyless record; the active
        # segment's a3 is not cleaned away and does not clean away a2 either (the map
        # only covers the dirty range, which ends where the active segment begins).
        assert after == [
            (5, b"a", b"a2"),
            (6, None, b"no key"),
            (7, b"c", b"c1"),
            (8, b"b", b"b2"),
            (9, b"a", b"a3"),
        ]
        assert stats.records_removed == len(before) - len(after) == 5
        assert stats.tombstones_removed == 0
        assert stats.bytes_after < stats.bytes_before
        assert stats.segments_cleaned == 2  # segment 7 had nothing to remove: left alone
        assert (stats.first_dirty_offset, stats.end_offset) == (0, 9)
        # The active segment is untouched, the log's ends unchanged.
        assert log.active_segment is active and active.log_path.read_bytes() == active_bytes
        assert log.log_end_offset == end and log.log_start_offset == 0
        assert [s.base_offset for s in log.segments] == [0, 4, 7, 9]
        assert log.size_in_bytes == stats.bytes_after + active.size
        # Every record is read from any offset in a gap, as from the one after it.
        for offset in range(0, 6):
            assert consume(log, offset)[0] == (5, b"a", b"a2")
        assert log.read(3).records()[0].offset == 5  # segment 0's first surviving record


def test_result_survives_reopen(tmp_path):
    log = compact_log(tmp_path)
    three_segments(log)
    LogCleaner().clean(log, now_ms=2_000)
    expected = consume(log)
    log.close()
    with compact_log(tmp_path) as log:
        assert log.last_recovery.clean
        assert consume(log) == expected
        assert log.log_end_offset == 10
        log.append([(b"d", b"d0")])
        assert consume(log)[-1] == (10, b"d", b"d0")


def test_offsets_and_headers_are_preserved(tmp_path):
    with compact_log(tmp_path) as log:
        put(log, (b"k", b"v0"), (b"x", b"x0"), (b"k", b"v1"), (b"y", b"y0"), (b"k", b"v2"),
            ts=5_000, producer_id=42, producer_epoch=3, base_sequence=7, partition_leader_epoch=2)
        put(log, (b"x", b"x1"))
        log.roll()
        put(log, (b"z", b"z"))
        original = next(log.segments[0].iter_batches())[1]
        LogCleaner().clean(log, now_ms=6_000)
        batches = [b for _, b in log.segments[0].iter_batches()]
        cleaned = batches[0]
        assert [(r.offset, r.key, r.value) for r in cleaned.records()] == [(3, b"y", b"y0"), (4, b"k", b"v2")]
        for field in ("base_offset", "last_offset_delta", "producer_id", "producer_epoch", "base_sequence",
                      "partition_leader_epoch", "base_timestamp", "max_timestamp", "attributes"):
            assert getattr(cleaned, field) == getattr(original, field), field
        assert cleaned.records_count == 2 and cleaned.validate()
        assert all(r.timestamp == 5_000 for r in cleaned.records())
        assert batches[1].base_offset == 5  # x1: a whole batch kept byte for byte


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_compact(tmp_path, codec):
    with compact_log(tmp_path) as log:
        for i in range(4):
            put(log, *[(b"key-%d" % j, b"value-%d-%d" % (i, j) * 20) for j in range(5)], compression=codec)
        log.roll()
        put(log, (b"key-0", b"new"), compression=codec)
        stats = LogCleaner().clean(log, now_ms=2_000)
        assert stats.records_removed == 15
        batches = [b for _, b in log.segments[0].iter_batches()]
        assert len(batches) == 1 and batches[0].compression == Compression[codec.upper()]
        assert batches[0].base_offset == 15 and batches[0].last_offset == 19
        assert [(o, k) for o, k, _ in consume(log)] == [(15 + j, b"key-%d" % j) for j in range(5)] + [(20, b"key-0")]


def test_tombstones_kept_until_delete_retention_then_removed(tmp_path):
    with compact_log(tmp_path) as log:
        put(log, (b"a", b"a0"), (b"b", b"b0"), ts=1_000)
        put(log, (b"a", None), ts=2_000)  # offset 2: delete a
        log.roll()
        put(log, (b"c", b"c0"), ts=3_000)
        cleaner = LogCleaner()

        stats = cleaner.clean(log, now_ms=2_000 + 999, delete_retention_ms=1_000)
        assert stats.records_removed == 1 and stats.tombstones_removed == 0  # a0 only
        assert consume(log) == [(1, b"b", b"b0"), (2, b"a", None), (3, b"c", b"c0")]

        # Later, with new data to clean, the tombstone is past delete.retention.ms: gone,
        # and its now-empty batch with it.
        log.roll()
        put(log, (b"d", b"d0"), ts=4_000)
        stats = cleaner.clean(log, now_ms=2_000 + 1_000, delete_retention_ms=1_000)
        assert stats.tombstones_removed == 1 and stats.records_removed == 1 and stats.batches_removed == 1
        assert consume(log) == [(1, b"b", b"b0"), (3, b"c", b"c0"), (4, b"d", b"d0")]
        assert log.log_end_offset == 5


def test_superseded_tombstone_is_removed(tmp_path):
    with compact_log(tmp_path) as log:
        put(log, (b"a", b"a0"), (b"a", None), (b"a", b"a1"), ts=1_000)
        log.roll()
        put(log, (b"z", b"z"))
        stats = LogCleaner().clean(log, now_ms=1_000, delete_retention_ms=DAY)
        assert (stats.records_removed, stats.tombstones_removed) == (2, 1)
        assert consume(log) == [(2, b"a", b"a1"), (3, b"z", b"z")]


def test_delete_retention_defaults_to_the_log_config(tmp_path):
    with compact_log(tmp_path, **{"delete.retention.ms": 10}) as log:
        put(log, (b"a", None), ts=1_000)
        log.roll()
        put(log, (b"z", b"z"))
        stats = LogCleaner().clean(log, now_ms=1_010)
        assert stats.tombstones_removed == 1
        assert consume(log) == [(1, b"z", b"z")]
        assert [s.base_offset for s in log.segments] == [0, 1]  # the first segment stays, empty
        assert log.segments[0].size == 0


def test_emptied_segment_after_the_first_is_deleted(tmp_path):
    with compact_log(tmp_path) as log:
        put(log, (b"a", b"a0"))
        log.roll()
        put(log, (b"b", b"b0"))
        log.roll()
        put(log, (b"b", b"b1"))
        log.roll()
        put(log, (b"z", b"z"))
        stats = LogCleaner().clean(log, now_ms=1_000)
        assert stats.segments_deleted == 1
        assert [s.base_offset for s in log.segments] == [0, 2, 3]
        assert consume(log) == [(0, b"a", b"a0"), (2, b"b", b"b1"), (3, b"z", b"z")]
        assert consume(log, 1) == [(2, b"b", b"b1"), (3, b"z", b"z")]


def test_checkpoint_moves_and_second_clean_with_no_new_data_does_nothing(tmp_path):
    with compact_log(tmp_path) as log:
        three_segments(log)
        cleaner = LogCleaner()
        cleaner.clean(log, now_ms=2_000)
        assert read_cleaner_checkpoint(log) == 9
        assert (log.dir / CLEANER_CHECKPOINT_FILE).exists()
        files = {p.name: p.stat().st_mtime_ns for p in log.dir.iterdir()}
        snapshot = consume(log)

        stats = cleaner.clean(log, now_ms=2_000)
        assert stats.first_dirty_offset == 9 and stats.records_removed == 0 and stats.segments_cleaned == 0
        assert stats.bytes_before == stats.bytes_after
        assert consume(log) == snapshot
        assert {p.name: p.stat().st_mtime_ns for p in log.dir.iterdir()} == files

        # New data: the next pass cleans from the checkpoint and sees the active a3.
        log.roll()
        put(log, (b"z", b"z"))
        stats = cleaner.clean(log, now_ms=2_000)
        assert stats.first_dirty_offset == 9 and stats.end_offset == 10
        assert (5, b"a", b"a2") not in consume(log)
        assert read_cleaner_checkpoint(log) == 10


def test_active_segment_alone_is_never_cleaned(tmp_path):
    with compact_log(tmp_path) as log:
        put(log, (b"a", b"a0"), (b"a", b"a1"))
        stats = LogCleaner().clean(log, now_ms=1_000)
        assert stats.records_removed == 0 and stats.segments_cleaned == 0
        assert consume(log) == [(0, b"a", b"a0"), (1, b"a", b"a1")]


class Crash(Exception):
    pass


def crash_mid_clean(tmp_path, monkeypatch, stop_after):
    """Clean, but die as a killed process would: after the ``.cleaned`` file of segment 0
    is written (``"cleaned"``) or after it was renamed to ``.swap`` (``"swap"``)."""
    log = compact_log(tmp_path)
    three_segments(log)
    log.flush()
    real_replace = os.replace

    def replace(src, dst):
        if stop_after == "cleaned" and str(src).endswith(".cleaned"):
            raise Crash
        real_replace(src, dst)
        if stop_after == "swap" and str(dst).endswith(".swap"):
            raise Crash

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(Crash):
        LogCleaner().clean(log, now_ms=2_000)
    monkeypatch.setattr(os, "replace", real_replace)
    log.crash()


def reference(tmp_path):
    """What three_segments reads as, before and after a full clean (in another directory)."""
    with compact_log(tmp_path / "ref") as ref:
        three_segments(ref)
        before = consume(ref)
        LogCleaner().clean(ref, now_ms=2_000)
        return before, consume(ref)


def test_crash_with_leftover_cleaned_file_keeps_the_old_segment(tmp_path, monkeypatch):
    before, after = reference(tmp_path)
    crash_mid_clean(tmp_path, monkeypatch, "cleaned")
    assert list((tmp_path / "offsets-0").glob("*.log.cleaned"))
    with compact_log(tmp_path) as log:
        assert log.last_recovery.cleaned_discarded == [0]
        assert not list(log.dir.glob("*.cleaned")) and not list(log.dir.glob("*.swap"))
        assert consume(log) == before  # nothing lost, nothing cleaned
        assert read_cleaner_checkpoint(log) == 0
        LogCleaner().clean(log, now_ms=2_000)  # the next pass does the work
        assert consume(log) == after


def test_crash_with_leftover_swap_file_completes_the_swap(tmp_path, monkeypatch):
    before, after = reference(tmp_path)
    crash_mid_clean(tmp_path, monkeypatch, "swap")
    assert list((tmp_path / "offsets-0").glob("*.log.swap"))
    with compact_log(tmp_path) as log:
        assert log.last_recovery.swaps_completed == [0]
        assert not list(log.dir.glob("*.swap")) and not list(log.dir.glob("*.cleaned"))
        assert log.log_end_offset == 10
        # Segment 0 (all superseded) was swapped in, empty; segments 4 and 7 were not
        # reached: every latest value is still there.
        assert log.segments[0].size == 0
        assert consume(log) == [r for r in before if r[0] >= 4]
        assert read_cleaner_checkpoint(log) == 0
        LogCleaner().clean(log, now_ms=2_000)
        assert consume(log) == after


def test_indexes_rebuilt_after_clean(tmp_path):
    with compact_log(tmp_path, **{"index.interval.bytes": 0}) as log:
        for i in range(30):
            put(log, (b"k%d" % (i % 3), b"v%d" % i))
        log.roll()
        put(log, (b"z", b"z"))
        LogCleaner().clean(log, now_ms=2_000)
        segment = log.segments[0]
        positions = [p for p, _ in segment.iter_batches()]
        assert [p for _, p in segment.offset_index.entries()] == positions[1:]
        assert [o for o, _, _ in consume(log)] == [27, 28, 29, 30]
        assert log.read(10).records()[0].offset == 27


def test_bad_input_is_refused(tmp_path):
    with compact_log(tmp_path) as log:
        with pytest.raises(IllegalArgumentError, match="delete.retention.ms must be an integer >= 0"):
            LogCleaner().clean(log, now_ms=0, delete_retention_ms=-1)
        with pytest.raises(IllegalArgumentError, match="delete.retention.ms"):
            LogCleaner().clean(log, now_ms=0, delete_retention_ms="1 day")
    with Log(tmp_path / "plain-0", clock=Clock()) as log:
        with pytest.raises(IllegalArgumentError, match="cleanup.policy=compact"):
            LogCleaner().clean(log, now_ms=0)
    with pytest.raises(IllegalArgumentError, match="cleanup.policy must be one of"):
        LogConfig.of({"cleanup.policy": "shred"})
    with pytest.raises(IllegalArgumentError, match="delete.retention.ms must be >= 0"):
        LogConfig.of({"delete.retention.ms": -5})
    assert LogConfig.of({"cleanup.policy": "delete, compact"}).cleanup_policy == "compact,delete"


def test_build_with_record_offsets():
    recs = [Record(b"a", b"1", 10, offset=103), Record(b"b", b"2", 12, offset=107)]
    b = RecordBatch.build(recs, base_offset=100, use_record_offsets=True, last_offset_delta=9)
    assert (b.base_offset, b.last_offset, b.records_count) == (100, 109, 2)
    assert [(r.offset, r.timestamp) for r in b.records()] == [(103, 10), (107, 12)]
    with pytest.raises(ValueError):
        RecordBatch.build(recs, base_offset=100, use_record_offsets=True, last_offset_delta=5)
    with pytest.raises(ValueError):
        RecordBatch.build([Record(b"a", b"1")], use_record_offsets=True)


# --- gaps: reads and truncation after compaction ---------------------------------------------


def gappy_log(path):
    """A log that ``segment.bytes`` rolled every three batches, compacted into gaps of every
    kind. Before cleaning (offsets: keys):

        segment 0:  [0 u0, 1 a] [2 b, 3 c] [4 a, 5 b]
        segment 6:  [6 c] [7 a, 8 b] [9 c, 10 b]
        segment 11: [11 a] [12 u1, 13 c] [14 a, 15 b]
        segment 16: [16 z]   (active)

    After: [0 u0] (its batch still ends at 1) then a gap 1..11 that runs to the end of
    segment 0 and over segment 6 (left empty, deleted), [12 u1, 13 c] [14 a, 15 b] and the
    active [16 z]."""
    log = compact_log(path, **{"segment.bytes": 250})
    for pairs in [
        [(b"u0", b"x"), (b"a", b"1")], [(b"b", b"1"), (b"c", b"1")], [(b"a", b"2"), (b"b", b"2")],
        [(b"c", b"2")], [(b"a", b"3"), (b"b", b"3")], [(b"c", b"3"), (b"b", b"y")],
        [(b"a", b"4")], [(b"u1", b"4"), (b"c", b"4")], [(b"a", b"5"), (b"b", b"5")],
        [(b"z", b"z")],
    ]:
        put(log, *pairs)
    assert [s.base_offset for s in log.segments] == [0, 6, 11, 16]  # rolled by segment.bytes
    stats = LogCleaner().clean(log, now_ms=2_000)
    assert stats.segments_deleted == 1
    assert batch_spans(log) == [(0, 1), (12, 13), (14, 15), (16, 16)]
    assert [s.base_offset for s in log.segments] == [0, 11, 16]
    assert consume(log) == GAPPY_RECORDS
    return log


GAPPY_RECORDS = [
    (0, b"u0", b"x"), (12, b"u1", b"4"), (13, b"c", b"4"), (14, b"a", b"5"), (15, b"b", b"5"), (16, b"z", b"z"),
]


def batch_spans(log):
    return [(b.base_offset, b.last_offset) for s in log.segments for _, b in s.iter_batches()]


def expected_read(spans, offset, limit):
    """The first batch whose last offset is >= ``offset``, if it ends below ``limit``."""
    first = next((s for s in spans if s[1] >= offset), None)
    return [first] if first and first[1] < limit else []


def test_read_from_a_gap_moves_on_to_the_next_batch_in_a_later_segment(tmp_path):
    log = gappy_log(tmp_path)
    spans = batch_spans(log)
    for reopened in (False, True):
        for offset in range(log.log_end_offset):
            for limit in (None, 1, 2, 6, 11, 13, 14, 16):
                got = log.read(offset, max_bytes=80, max_offset=limit).batches()
                want = expected_read(spans, offset, log.log_end_offset if limit is None else limit)
                assert [(b.base_offset, b.last_offset) for b in got] == want, (offset, limit, reopened)
            assert consume(log, offset) == [r for r in GAPPY_RECORDS if r[0] >= offset]
        log.close()
        log = compact_log(tmp_path)
    log.close()


def test_read_that_does_not_fit_is_empty_not_a_later_segment(tmp_path):
    # Without min_one_message, a first batch over max_bytes is an empty answer (as Kafka):
    # the read must not skip it and serve a smaller batch from a later segment instead.
    with gappy_log(tmp_path) as log:
        size_12 = len(log.read(12, max_bytes=1))
        assert len(log.read(12, max_bytes=size_12, min_one_message=False)) == size_12
        for offset in (2, 11, 12):  # in the gap, and on the batch itself
            assert len(log.read(offset, max_bytes=size_12 - 1, min_one_message=False)) == 0
        assert log.read(2, max_bytes=size_12 - 1).records()[0].offset == 12  # min_one_message


def expected_end_after_truncation(spans, offset):
    """Where truncate_to(offset) must leave the log end: a batch straddling ``offset`` goes
    whole (end = its base); in a gap, the end is ``offset`` itself."""
    first = next((s for s in spans if s[1] >= offset), None)
    return min(first[0], offset) if first else offset


@pytest.mark.parametrize("offset", range(1, 17))
def test_truncate_to_an_offset_in_a_gap(tmp_path, offset):
    log = gappy_log(tmp_path)
    spans = batch_spans(log)
    end = expected_end_after_truncation(spans, offset)
    assert log.truncate_to(offset)
    assert log.log_end_offset == end
    assert end == offset or offset in (1, 13, 15)  # the straddled batches [0, 1], [12, 13], [14, 15]
    kept = [r for r in GAPPY_RECORDS if r[0] < end]
    assert consume(log) == kept
    assert all(s.base_offset < max(end, 1) for s in log.segments)
    assert read_cleaner_checkpoint(log) <= end  # what comes next is dirty for the cleaner
    # The next append takes the end offset, and reads find it from anywhere before it.
    put(log, (b"n", b"new"))
    assert consume(log) == kept + [(end, b"n", b"new")]
    assert consume(log, max(0, end - 3)) == [r for r in kept if r[0] >= end - 3] + [(end, b"n", b"new")]
    log.close()
    with compact_log(tmp_path) as log:
        assert log.last_recovery.clean and log.log_end_offset == end + 1
        assert consume(log) == kept + [(end, b"n", b"new")]


def test_truncate_into_a_gap_then_reopen_before_appending(tmp_path):
    log = gappy_log(tmp_path)
    log.truncate_to(5)
    assert log.log_end_offset == 5 and consume(log) == [(0, b"u0", b"x")]
    log.close()
    # As in Kafka, the end in a gap is not persisted: reopened, the log ends after its last
    # batch, [0, 1]. Just as correct (offsets 2..4 hold nothing); the next append gets 2.
    with compact_log(tmp_path) as log:
        assert log.last_recovery.clean
        assert log.log_end_offset == 2 and log.recovery_point == 2
        put(log, (b"n", b"new"))
        assert consume(log) == [(0, b"u0", b"x"), (2, b"n", b"new")]


def test_clean_after_truncation_into_cleaned_range_sees_new_records(tmp_path):
    with gappy_log(tmp_path) as log:
        assert read_cleaner_checkpoint(log) == 16
        log.truncate_to(5)
        assert read_cleaner_checkpoint(log) == 5
        put(log, (b"u0", b"replaced"))  # 5: supersedes offset 0
        log.roll()
        put(log, (b"z", b"z"))
        stats = LogCleaner().clean(log, now_ms=2_000)
        assert (stats.first_dirty_offset, stats.end_offset) == (5, 6)
        assert consume(log) == [(5, b"u0", b"replaced"), (6, b"z", b"z")]


def test_truncate_to_an_emptied_first_segment(tmp_path):
    with compact_log(tmp_path, **{"delete.retention.ms": 10}) as log:
        put(log, (b"a", None), ts=1_000)  # 0: a tombstone, removed: segment 0 stays, empty
        log.roll()
        put(log, (b"b", b"b0"), (b"c", b"c0"))  # 1-2
        log.roll()
        put(log, (b"z", b"z"))  # 3
        LogCleaner().clean(log, now_ms=5_000)
        assert [(s.base_offset, s.size) for s in log.segments][0] == (0, 0)
        assert log.truncate_to(1)
        assert (log.log_end_offset, log.log_start_offset, len(log.segments)) == (1, 0, 1)
        assert consume(log) == []
        put(log, (b"n", b"new"))
        assert consume(log) == [(1, b"n", b"new")]


# --- retention of compacted logs --------------------------------------------------------------


def old_segments(log, count=3):
    for i in range(count):
        put(log, (b"k%d" % i, b"v"), ts=1_000)
        log.roll()
    put(log, (b"z", b"z"), ts=1_000)


def test_compact_only_log_has_no_time_or_size_retention(tmp_path):
    config = {"retention.ms": 1, "retention.bytes": 0}
    with compact_log(tmp_path, **config) as log:
        old_segments(log)
        bases = [s.base_offset for s in log.segments]
        assert log.delete_old_segments(now_ms=10 * DAY) == []
        assert [s.base_offset for s in log.segments] == bases and log.log_start_offset == 0
        assert len(consume(log)) == 4
    with compact_log(tmp_path / "both", **{"cleanup.policy": "compact,delete", **config}) as log:
        old_segments(log)
        assert [b for b, _ in log.delete_old_segments(now_ms=10 * DAY)] == [0, 1, 2, 3]
        assert log.log_start_offset == 4


def test_empty_segment_left_by_the_cleaner_does_not_stop_retention(tmp_path):
    config = {"cleanup.policy": "compact,delete", "delete.retention.ms": 10, "retention.ms": 5_000}
    with compact_log(tmp_path, **config) as log:
        put(log, (b"a", None), ts=1_000)  # 0: its tombstone expires: segment 0 is left empty
        log.roll()
        put(log, (b"b", b"b0"), ts=3_000)  # 1
        log.roll()
        put(log, (b"c", b"c0"), ts=9_000)  # 2: active
        LogCleaner().clean(log, now_ms=1_100)
        assert [(s.base_offset, s.size > 0) for s in log.segments] == [(0, False), (1, True), (2, True)]
        # Segment 1 not expired: the empty segment stays too (the log start does not move).
        assert log.delete_old_segments(now_ms=3_000 + 5_000) == []
        assert log.log_start_offset == 0
        # Segment 1 expired: it goes, and the empty segment before it.
        deleted = log.delete_old_segments(now_ms=3_000 + 5_001)
        assert [b for b, _ in deleted] == [0, 1] and "empty" in deleted[0][1]
        assert log.log_start_offset == 2 and consume(log, 2) == [(2, b"c", b"c0")]


# --- min.compaction.lag.ms and the high watermark ---------------------------------------------


def aging_log(path, **config):
    """Key k rewritten in three old segments with records 1, 5 and 9 seconds old."""
    log = compact_log(path, **config)
    for i, ts in enumerate((1_000, 5_000, 9_000)):
        put(log, (b"k", b"v%d" % i), (b"u%d" % i, b"u"), ts=ts)  # 2i, 2i + 1
        log.roll()
    put(log, (b"z", b"z"), ts=9_500)  # 6: active
    return log


def test_min_compaction_lag_leaves_recent_segments_dirty(tmp_path):
    with aging_log(tmp_path, **{"min.compaction.lag.ms": 3_000}) as log:
        cleaner = LogCleaner()
        # At 10 s, segment 4 (9 s) is too recent: the dirty range ends at its base, so its
        # k does not supersede segment 2's yet, and it is not rewritten itself.
        assert cleaner.dirty_range(log, now_ms=10_000) == (0, 4)
        stats = cleaner.clean(log, now_ms=10_000)
        assert (stats.first_dirty_offset, stats.end_offset) == (0, 4)
        assert [o for o, _, _ in consume(log)] == [1, 2, 3, 4, 5, 6]
        assert read_cleaner_checkpoint(log) == 4
        assert cleaner.dirty_range(log, now_ms=10_000) == (4, 4)  # nothing cleanable yet
        # Old enough later on: the rest of the dirty range is cleaned.
        stats = cleaner.clean(log, now_ms=12_000)
        assert (stats.first_dirty_offset, stats.end_offset) == (4, 6)
        assert [o for o, _, _ in consume(log)] == [1, 3, 4, 5, 6]


def test_min_compaction_lag_zero_cleans_up_to_the_active_segment(tmp_path):
    with aging_log(tmp_path) as log:
        assert LogConfig().min_compaction_lag_ms == 0 and log.config.min_compaction_lag_ms == 0
        assert LogCleaner().dirty_range(log, now_ms=0) == (0, 6)  # even records "from the future"
    with pytest.raises(IllegalArgumentError, match="min.compaction.lag.ms must be >= 0, not -1"):
        LogConfig.of({"min.compaction.lag.ms": -1})


def test_high_watermark_ends_the_dirty_range(tmp_path):
    with compact_log(tmp_path, **{"delete.retention.ms": 0}) as log:
        put(log, (b"a", b"a0"), (b"b", b"b0"), (b"a", b"a1"))  # 0-2
        put(log, (b"b", b"b1"), (b"c", None), (b"a", b"a2"))  # 3-5: not committed yet
        log.roll()
        put(log, (b"z", b"z"))  # 6
        stats = LogCleaner().clean(log, now_ms=2_000, high_watermark=3)
        assert (stats.first_dirty_offset, stats.end_offset) == (0, 3)
        # Only a0 goes (superseded by a1, below the HW); b1, a2 and even the expired
        # tombstone at 4, above it, may still be truncated away: they change nothing yet.
        assert [o for o, _, _ in consume(log)] == [1, 2, 3, 4, 5, 6]
        assert read_cleaner_checkpoint(log) == 3
        stats = LogCleaner().clean(log, now_ms=2_000, high_watermark=6)
        assert [o for o, _, _ in consume(log)] == [3, 5, 6]
        with pytest.raises(IllegalArgumentError, match="high_watermark must be an integer"):
            LogCleaner().clean(log, high_watermark="6")


# --- LogManager.clean_logs: the periodic pass ----------------------------------------------------


def manager_with_logs(tmp_path):
    manager = LogManager(tmp_path / "logs", clock=Clock(10_000))
    for topic, policy in (("offsets", "compact"), ("events", "delete"), ("both", "compact,delete")):
        log = manager.get_or_create_log(topic, 0, LogConfig.of({"cleanup.policy": policy, "retention.ms": -1}))
        three_segments(log)
    return manager


def snapshot(manager):
    return {tp: {p.name: p.stat().st_mtime_ns for p in log.dir.iterdir()} for tp, log in manager}


def test_clean_logs_cleans_only_compacted_logs_with_something_dirty(tmp_path):
    manager = manager_with_logs(tmp_path)
    events = manager.get_log("events", 0)
    before = consume(events)
    events_files = snapshot(manager)[TopicPartition("events", 0)]

    done = manager.clean_logs(2_000)
    assert sorted(done) == [TopicPartition("both", 0), TopicPartition("offsets", 0)]
    assert all(s.records_removed == 5 and s.end_offset == 9 for s in done.values())
    assert consume(events) == before and snapshot(manager)[TopicPartition("events", 0)] == events_files
    assert not (events.dir / CLEANER_CHECKPOINT_FILE).exists()

    # Nothing rolled since: nothing to do, nothing touched.
    files = snapshot(manager)
    assert manager.clean_logs(2_000) == {}
    assert snapshot(manager) == files

    # One log rolls: it alone is cleaned, from its checkpoint.
    offsets = manager.get_log("offsets", 0)
    offsets.roll()
    put(offsets, (b"a", b"a4"))
    done = manager.clean_logs()  # the manager's clock
    assert list(done) == [TopicPartition("offsets", 0)] and done[TopicPartition("offsets", 0)].first_dirty_offset == 9
    assert (5, b"a", b"a2") not in consume(offsets)
    manager.close()


def test_clean_logs_caps_each_log_at_its_high_watermark(tmp_path):
    manager = manager_with_logs(tmp_path)
    done = manager.clean_logs(2_000, high_watermarks={("offsets", 0): 4, TopicPartition("both", 0): 0})
    assert done[TopicPartition("offsets", 0)].end_offset == 4
    assert TopicPartition("both", 0) not in done  # nothing below its high watermark is dirty
    assert read_cleaner_checkpoint(manager.get_log("offsets", 0)) == 4
    manager.close()


def test_clean_logs_goes_on_after_an_error_in_one_log(tmp_path, monkeypatch, caplog):
    manager = manager_with_logs(tmp_path)
    real_clean = LogCleaner.clean

    def failing_clean(self, log, **kw):
        if log.name == "both-0":
            raise OSError("disk on fire")
        return real_clean(self, log, **kw)

    monkeypatch.setattr(LogCleaner, "clean", failing_clean)
    with caplog.at_level("ERROR", logger="minikafka.storage.cleaner"):
        done = manager.clean_logs(2_000)
    assert list(done) == [TopicPartition("offsets", 0)]
    assert "both-0" in caplog.text and "disk on fire" in caplog.text
    monkeypatch.setattr(LogCleaner, "clean", real_clean)
    # The failed log is still dirty: the next pass cleans it.
    assert list(manager.clean_logs(2_000)) == [TopicPartition("both", 0)]
    manager.close()


# --- transactions (KIP-98): aborted batches dropped, markers kept while their data is -----------------


def txn_put(log, pid, seq, *pairs, ts=1_000):
    return put(log, *pairs, ts=ts, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)


def marker(log, pid, committed, ts=1_000):
    from minikafka.broker.transaction_marker import TransactionMarker

    return log.append(RecordBatch(TransactionMarker(committed, 0).to_batch(pid, 0, ts)))


def data(log):
    """(offset, key, value) of every data record in the log, markers left out (as consumers do)."""
    return [(r.offset, r.key, r.value) for s in log.segments for _, b in s.iter_batches()
            if not b.is_control_batch for r in b.records()]


def control_offsets(log):
    return [b.base_offset for s in log.segments for _, b in s.iter_batches() if b.is_control_batch]


def transactional_log(tmp_path):
    """Producer 1 commits a=a1; producer 2 aborts a=a2, b=b0, then commits b=b1."""
    log = compact_log(tmp_path, **{"delete.retention.ms": 5_000})
    txn_put(log, 1, 0, (b"a", b"a1"))  # 0
    txn_put(log, 2, 0, (b"a", b"a2"), (b"b", b"b0"))  # 1-2: aborted
    marker(log, 1, committed=True)  # 3
    marker(log, 2, committed=False)  # 4
    txn_put(log, 2, 2, (b"b", b"b1"))  # 5
    marker(log, 2, committed=True)  # 6
    log.roll()
    put(log, (b"c", b"c0"))  # 7: the active segment
    return log


def test_the_cleaner_drops_aborted_batches_and_an_aborted_value_supersedes_nothing(tmp_path):
    log = transactional_log(tmp_path)
    stats = LogCleaner().clean(log, now_ms=2_000)
    assert stats.aborted_records_removed == 2 and stats.markers_removed == 0
    # a1 stays: the aborted a2 never happened. b0 goes as aborted data (b1 supersedes it anyway).
    assert [(o, k, v) for o, k, v in data(log)] == [(0, b"a", b"a1"), (5, b"b", b"b1"), (7, b"c", b"c0")]
    assert control_offsets(log) == [3, 4, 6]  # each marker's transaction still had a batch in this pass


def test_a_marker_goes_once_its_transactions_batches_are_gone_and_delete_retention_passed(tmp_path):
    log = transactional_log(tmp_path)
    LogCleaner().clean(log, now_ms=2_000)
    # Second pass, before delete.retention.ms: the abort marker has no data left, but stays.
    put(log, (b"c", b"c1"))
    log.roll()
    stats = LogCleaner().clean(log, now_ms=3_000)
    assert stats.markers_removed == 0 and control_offsets(log) == [3, 4, 6]
    put(log, (b"c", b"c2"))
    log.roll()
    stats = LogCleaner().clean(log, now_ms=1_000 + 5_000)
    # The abort marker goes; the commit markers stay: a1 and b1 are still in the log.
    assert stats.removed_markers == [(2, 4)] and control_offsets(log) == [3, 6]
    assert [v for _, _, v in data(log)] == [b"a1", b"b1", b"c2"]


def test_a_commit_marker_goes_when_compaction_removed_all_of_its_transaction(tmp_path):
    log = compact_log(tmp_path, **{"delete.retention.ms": 0})
    txn_put(log, 1, 0, (b"a", b"a1"))  # 0
    marker(log, 1, committed=True)  # 1
    put(log, (b"a", b"a2"))  # 2: supersedes a1
    log.roll()
    put(log, (b"z", b"z"))  # 3, active
    LogCleaner().clean(log, now_ms=2_000)
    assert control_offsets(log) == [1]  # a1 was still there when the pass began
    put(log, (b"z", b"z2"))
    log.roll()
    stats = LogCleaner().clean(log, now_ms=3_000)
    assert stats.removed_markers == [(1, 1)] and control_offsets(log) == []
    assert [v for _, _, v in data(log)] == [b"a2", b"z2"]


def test_the_cleaner_stops_at_an_open_transaction_and_judges_none_of_it(tmp_path):
    log = compact_log(tmp_path, **{"delete.retention.ms": 0})
    put(log, (b"k", b"k0"))  # 0
    txn_put(log, 7, 0, (b"k", b"k-open"))  # 1: open, its outcome unknown
    put(log, (b"k", b"k2"))  # 2
    put(log, (b"k", b"k3"))  # 3
    log.roll()
    put(log, (b"z", b"z"))  # 4
    stats = LogCleaner().clean(log, now_ms=2_000)
    assert stats.end_offset == 1 and stats.records_removed == 0  # k0 may yet be the latest committed k
    assert [v for _, _, v in data(log)] == [b"k0", b"k-open", b"k2", b"k3", b"z"]
    # Closed by an abort marker above the high watermark: still not final, still not cleaned.
    marker(log, 7, committed=False)  # 5
    log.roll()
    put(log, (b"z", b"z2"))  # 6
    assert LogCleaner().clean(log, now_ms=2_000, high_watermark=5).records_removed == 0
    # Below it: k0, k2 and the aborted k-open are superseded by k3 (the aborted batch, its
    # producer's last, would be kept for its sequence: its record goes by compaction).
    stats = LogCleaner().clean(log, now_ms=2_000, high_watermark=7)
    assert stats.records_removed == 3
    assert [v for _, _, v in data(log)] == [b"k3", b"z", b"z2"]  # z: in the active segment of that pass


def test_the_last_aborted_batch_of_a_producer_is_kept_for_its_sequence(tmp_path):
    log = compact_log(tmp_path, **{"delete.retention.ms": 0})
    txn_put(log, 3, 0, (b"a", b"x"))  # 0: aborted, but the producer's last batch
    marker(log, 3, committed=False)  # 1
    log.roll()
    put(log, (b"z", b"z"))  # 2
    stats = LogCleaner().clean(log, now_ms=2_000)
    assert stats.aborted_records_removed == 0 and control_offsets(log) == [1]
