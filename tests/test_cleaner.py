"""The log cleaner: compaction of cleanup.policy=compact logs (storage/cleaner.py)."""

import os

import pytest

from minikafka.errors import IllegalArgumentError
from minikafka.records import Compression, Record, RecordBatch
from minikafka.storage import CleanerStats, Log, LogCleaner, LogConfig
from minikafka.storage.cleaner import CLEANER_CHECKPOINT_FILE, read_cleaner_checkpoint

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
