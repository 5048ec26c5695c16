"""The log on disk: segments, indexes, roll, retention, truncation and recovery."""

import os
import random
import struct

import pytest

from minikafka.errors import (
    CorruptRecordError,
    IllegalArgumentError,
    KafkaStorageError,
    InvalidTopicError,
    MessageSizeTooLargeError,
    OffsetOutOfRangeError,
)
from minikafka.records import MemoryRecords, Record, RecordBatch
from minikafka.storage import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    Log,
    LogConfig,
    LogManager,
    OffsetIndex,
    TimeIndex,
)
from minikafka.topic import TopicPartition, validate_topic_name

DAY = 24 * 3600 * 1000


class Clock:
    def __init__(self, now=0):
        self.now = now

    def __call__(self):
        return self.now


def batch(n=1, start_ts=1_000, size=100, compression=None, key=b"truck-1"):
    return RecordBatch.build(
        [Record(key, b"x" * size, start_ts + i) for i in range(n)], compression=compression
    )


def values(log, offset=None):
    """Every (offset, value) from ``offset`` to the end, reading as a consumer does."""
    position = log.log_start_offset if offset is None else offset
    out = []
    while position < log.log_end_offset:
        recs = [r for r in log.read(position).records() if r.offset >= position]
        out += [(r.offset, r.value) for r in recs]
        position = recs[-1].offset + 1
    return out


def fill(log, batches=50, per_batch=3, size=200, ts0=1_000):
    for i in range(batches):
        log.append(
            [Record(b"k", b"%06d" % (i * per_batch + j) + b"." * size, ts0 + 1000 * i) for j in range(per_batch)]
        )


# --- layout -----------------------------------------------------------------------------------


def test_segment_files_are_named_by_base_offset_as_in_kafka(tmp_path):
    log = Log(tmp_path / "trucks_gps-0", {"segment.bytes": 4000})
    fill(log, batches=30)
    names = sorted(os.listdir(log.dir))
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 2 and bases[0] == 0
    for base in bases:
        for suffix in (".log", ".index", ".timeindex"):
            assert f"{base:020d}{suffix}" in names
    assert "recovery-point-offset-checkpoint" in names
    assert bases == sorted(bases)
    for seg, nxt in zip(log.segments, log.segments[1:]):
        assert seg.next_offset == nxt.base_offset  # no gaps, no overlap
        assert seg.size <= 4000


def test_sparse_index_gets_one_entry_per_interval_and_matches_the_file(tmp_path):
    log = Log(tmp_path / "t-0", {"index.interval.bytes": 1000})
    fill(log, batches=40, size=100)
    seg = log.active_segment
    entries = seg.offset_index.entries()
    assert 0 < len(entries) <= seg.size // 1000 + 1
    raw = seg.offset_index.path.read_bytes()  # unbuffered: every entry is in the file at once
    assert [(seg.base_offset + r, p) for r, p in struct.iter_unpack(">ii", raw)] == entries
    # each entry points at the start of a batch whose last offset is the entry's offset
    for offset, position in entries:
        b = RecordBatch(seg.read_bytes(position, seg.size - position)[: 12 + struct.unpack(">i", seg.read_bytes(position + 8, 4))[0]])
        assert b.last_offset == offset
    assert [ts for ts, _ in seg.time_index.entries()] == sorted({ts for ts, _ in seg.time_index.entries()})


def test_index_lookups(tmp_path):
    idx = OffsetIndex(tmp_path / "00000000000000000100.index", 100)
    for off, pos in [(103, 500), (110, 1200), (120, 2500)]:
        idx.append(off, pos)
    assert idx.lookup(99) == (100, 0)
    assert idx.lookup(103) == (103, 500)
    assert idx.lookup(119) == (110, 1200)
    assert idx.lookup(10_000) == (120, 2500)
    with pytest.raises(Exception, match="does not follow"):
        idx.append(115, 3000)
    tidx = TimeIndex(tmp_path / "00000000000000000100.timeindex", 100)
    tidx.maybe_append(5000, 104)
    tidx.maybe_append(5000, 105)  # time did not move: no entry
    tidx.maybe_append(9000, 120)
    assert tidx.entries() == [(5000, 104), (9000, 120)]
    assert tidx.lookup(4999) == (-1, 100) and tidx.lookup(7000) == (5000, 104)


# --- append and read -------------------------------------------------------------------------


def test_append_assigns_offsets_and_read_returns_whole_batches(tmp_path):
    log = Log(tmp_path / "t-0")
    a = log.append(batch(3))
    b = log.append(batch(2))
    assert (a.first_offset, a.last_offset, b.first_offset, b.last_offset) == (0, 2, 3, 4)
    assert log.log_end_offset == 5
    got = log.read(4)
    assert [bt.base_offset for bt in got.batches()] == [3]  # the batch holding offset 4, whole
    assert [r.offset for r in got.records()] == [3, 4]
    assert len(log.read(5)) == 0  # at the end: nothing yet, not an error


def test_stored_bytes_are_served_back_as_appended_but_for_the_patched_header(tmp_path):
    log = Log(tmp_path / "t-0")
    log.append(batch(1))
    original = bytes(batch(10, compression="zstd"))
    log.append(original, leader_epoch=4)
    served = bytes(next(iter(log.read(1).batches())))
    assert served[21:] == original[21:] and served[16:21] == original[16:21]
    assert struct.unpack(">qii", served[:16]) == (1, len(original) - 12, 4)
    RecordBatch(served).validate()


def test_read_respects_max_bytes_but_returns_at_least_one_batch(tmp_path):
    log = Log(tmp_path / "t-0")
    for _ in range(10):
        log.append(batch(1, size=1000))
    one = len(bytes(log.read(0, 1)))
    assert one == len(bytes(batch(1, size=1000)))  # bigger than max_bytes, still whole
    three = log.read(0, 3 * one + one // 2)
    assert len(list(three.batches())) == 3
    assert len(log.read(0, one, min_one_message=False)) == one
    assert len(log.read(0, one - 1, min_one_message=False)) == 0


def test_read_stops_at_max_offset_the_high_watermark(tmp_path):
    log = Log(tmp_path / "t-0", {"segment.bytes": 3000})
    for _ in range(12):
        log.append(batch(2, size=400))
    assert len(log.segments) > 2
    hw = 9  # inside the batch [8, 9]
    got = [r.offset for r in log.read(0, 1 << 20, max_offset=hw).records()]
    assert got == list(range(len(got)))  # one segment per read, as Kafka
    assert [r.offset for r in log.read(6, max_offset=hw).records()] == [6, 7]
    assert len(log.read(8, max_offset=hw)) == 0  # the batch holding the HW is not served
    assert len(log.read(8, max_offset=8)) == 0


def test_reading_across_segments(tmp_path):
    log = Log(tmp_path / "t-0", {"segment.bytes": 2500})
    fill(log, batches=40, per_batch=2, size=100)
    offsets = []
    pos = 0
    while pos < log.log_end_offset:
        recs = [r for r in log.read(pos, 700).records() if r.offset >= pos]
        offsets += [r.offset for r in recs]
        pos = recs[-1].offset + 1
    assert offsets == list(range(80))


def test_out_of_range_reads(tmp_path):
    log = Log(tmp_path / "t-0", {"segment.bytes": 2000, "retention.bytes": 0}, clock=Clock(0))
    fill(log, batches=20)
    log.delete_old_segments()
    start, end = log.log_start_offset, log.log_end_offset
    assert start > 0
    with pytest.raises(OffsetOutOfRangeError, match=rf"offset {start - 1} is out of range for t-0: the log holds \[{start}, {end}\)"):
        log.read(start - 1)
    with pytest.raises(OffsetOutOfRangeError, match=rf"offset {end + 1} is out of range"):
        log.read(end + 1)


def test_bad_appends_are_refused_and_nothing_is_written(tmp_path):
    log = Log(tmp_path / "t-0", {"max.message.bytes": 2000})
    log.append(batch(1))
    size = log.size_in_bytes
    corrupt = bytearray(bytes(batch(2)))
    corrupt[-3] ^= 1
    good_then_bad = bytes(batch(1)) + bytes(corrupt)
    with pytest.raises(CorruptRecordError, match=r"appended records at byte \d+: CRC mismatch"):
        log.append(good_then_bad)
    with pytest.raises(CorruptRecordError, match="truncated batch"):
        log.append(bytes(batch(2))[:-10])
    with pytest.raises(MessageSizeTooLargeError, match="larger than max.message.bytes \\(2000\\)"):
        log.append(batch(1, size=5000))
    with pytest.raises(IllegalArgumentError, match="empty"):
        log.append(b"")
    assert log.size_in_bytes == size and log.log_end_offset == 1


def test_follower_append_keeps_the_leaders_offsets(tmp_path):
    leader = Log(tmp_path / "leader-0")
    follower = Log(tmp_path / "follower-0")
    for n in (2, 3, 1):
        leader.append(batch(n), leader_epoch=1)
    fetched = leader.read(0)
    info = follower.append(fetched, assign_offsets=False)
    assert (info.first_offset, info.last_offset) == (0, 5)
    assert bytes(follower.read(0)) == bytes(fetched)
    with pytest.raises(IllegalArgumentError, match="below the log end offset"):
        follower.append(leader.read(3), assign_offsets=False)


# --- roll ----------------------------------------------------------------------------------------


def test_roll_on_segment_bytes(tmp_path):
    log = Log(tmp_path / "t-0", {"segment.bytes": 1000})
    sizes = []
    for _ in range(10):
        log.append(batch(1, size=300))
        sizes.append(len(log.segments))
    one = len(bytes(batch(1, size=300)))
    per_segment = 1000 // one
    assert len(log.segments) == -(-10 // per_segment)
    assert all(s.size <= 1000 for s in log.segments)


def test_roll_on_segment_ms_uses_record_time(tmp_path):
    log = Log(tmp_path / "t-0", {"segment.ms": 60_000})
    log.append(batch(1, start_ts=0))
    log.append(batch(1, start_ts=59_000))
    assert len(log.segments) == 1
    log.append(batch(1, start_ts=60_001))
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_on_segment_ms_without_timestamps_uses_the_clock(tmp_path):
    clock = Clock(1_000)
    log = Log(tmp_path / "t-0", {"segment.ms": 10_000}, clock=clock)
    log.append([b"no timestamp"])
    clock.now += 10_001
    log.append([b"still none"])
    assert len(log.segments) == 2


# --- retention -----------------------------------------------------------------------------------


def test_retention_ms_defaults_to_seven_days_and_deletes_whole_old_segments(tmp_path):
    assert LogConfig().retention_ms == 7 * DAY
    clock = Clock(0)
    log = Log(tmp_path / "t-0", {"segment.bytes": 1500}, clock=clock)
    for day in range(10):
        log.append(batch(3, start_ts=day * DAY, size=150))
    clock.now = 10 * DAY
    deleted = log.delete_old_segments()
    assert deleted and all("retention.ms" in why for _, why in deleted)
    for seg in log.segments:
        assert seg.largest_timestamp >= clock.now - 7 * DAY
    assert log.log_start_offset == log.segments[0].base_offset > 0
    assert values(log)[0][0] == log.log_start_offset
    assert not any((log.dir / f"{base:020d}.log").exists() for base, _ in deleted)


def test_file_records_send_what_was_read_after_retention_deletes_their_segment(tmp_path):
    # A broker on the wire answers a large Fetch with FileRecords, sent later by sendfile:
    # retention may delete the segment meanwhile. The descriptor lives until both let go.
    clock = Clock(0)
    log = Log(tmp_path / "t-0", {"segment.bytes": 1500}, clock=clock)
    for day in range(10):
        log.append(batch(3, start_ts=day * DAY, size=150))
    first = log.segments[0]
    expected = bytes(log.read(0, 1 << 20))
    records = log.read_file_records(0, 1 << 20)
    assert len(records) == len(expected) and records.position == 0 and bytes(records) == expected
    assert records.read(61, 10) == expected[61:71]
    clock.now = 10 * DAY
    assert log.delete_old_segments() and log.log_start_offset > 0 and not first.log_path.exists()
    fd = records.fileno()
    assert bytes(records) == expected  # what was read, though the file is gone
    del records
    with pytest.raises(OSError):  # closed once the last user let go
        os.fstat(fd)
    assert log.read_file_records(log.log_end_offset, 1 << 20) is None


def test_file_records_cut_from_their_file_before_being_sent_refuse_to_be_read(tmp_path):
    log = Log(tmp_path / "t-0", {}, clock=Clock(0))
    for _ in range(5):
        log.append(batch(3, size=150))
    tail = log.read_file_records(9, 1 << 20)  # the last two batches
    assert bytes(tail) == bytes(log.read(9, 1 << 20))
    log.truncate_to(9)  # a follower cutting its uncommitted tail
    with pytest.raises(KafkaStorageError, match="cut below them"):
        bytes(tail)


def test_retention_rolls_and_deletes_an_expired_active_segment(tmp_path):
    clock = Clock(0)
    log = Log(tmp_path / "t-0", {"retention.ms": 1000}, clock=clock)
    log.append(batch(5, start_ts=0))
    clock.now = 5000
    assert [b for b, _ in log.delete_old_segments()] == [0]
    assert log.log_start_offset == log.log_end_offset == 5
    assert log.append(batch(1, start_ts=5000)).first_offset == 5


def test_retention_bytes(tmp_path):
    log = Log(tmp_path / "t-0", {"segment.bytes": 1000, "retention.bytes": 2500}, clock=Clock(0))
    for _ in range(20):
        log.append(batch(1, size=300))
    log.delete_old_segments()
    assert log.size_in_bytes - log.active_segment.size <= 2500
    assert log.size_in_bytes > 2500 - 1000  # never more than needed


def test_retention_never_deletes_past_the_high_watermark(tmp_path):
    clock = Clock(0)
    log = Log(tmp_path / "t-0", {"segment.bytes": 500, "retention.ms": 10}, clock=clock)
    for _ in range(6):
        log.append(batch(1, start_ts=0, size=300))
    clock.now = 1000
    log.delete_old_segments(high_watermark=3)
    assert log.log_start_offset == 3


# --- time index ------------------------------------------------------------------------------------


def test_offset_for_timestamp(tmp_path):
    log = Log(tmp_path / "t-0", {"segment.bytes": 3000, "index.interval.bytes": 300})
    fill(log, batches=40, per_batch=2, size=100, ts0=10_000)  # batch i at 10_000 + 1000 i
    assert log.offset_for_timestamp(10_000) == (10_000, 0)
    assert log.offset_for_timestamp(25_000) == (25_000, 30)
    assert log.offset_for_timestamp(25_001) == (26_000, 32)
    assert log.offset_for_timestamp(0) == (10_000, 0)
    assert log.offset_for_timestamp(10**12) is None
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (-1, 0)
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == (-1, 80)


# --- truncation --------------------------------------------------------------------------------------


def test_truncate_to_inside_and_across_segments(tmp_path):
    log = Log(tmp_path / "t-0", {"segment.bytes": 2000, "index.interval.bytes": 200})
    fill(log, batches=30, per_batch=2, size=100)
    n_segments = len(log.segments)
    assert log.truncate_to(40)
    assert log.log_end_offset == 40
    assert len(log.segments) < n_segments
    assert [o for o, _ in values(log)] == list(range(40))
    assert log.truncate_to(33)  # mid batch [32, 33]: the whole batch goes
    assert log.log_end_offset == 32
    assert not log.truncate_to(100)
    assert log.append(batch(1)).first_offset == 32
    reopened = Log(tmp_path / "t-0", {"segment.bytes": 2000, "index.interval.bytes": 200})
    assert reopened.log_end_offset == 33 and reopened.last_recovery.clean


def test_truncate_fully(tmp_path):
    log = Log(tmp_path / "t-0", {"segment.bytes": 2000})
    fill(log, batches=10)
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (0, 0, 1)
    log.truncate_fully_and_start_at(500)
    assert log.append(batch(1)).first_offset == 500
    assert log.active_segment.log_path.name == "00000000000000000500.log"


# --- flush, recovery point, recovery ---------------------------------------------------------------------


def cfg():
    return {"segment.bytes": 3000, "index.interval.bytes": 500}


def test_clean_reopen_scans_nothing(tmp_path):
    log = Log(tmp_path / "t-0", cfg())
    fill(log, batches=30)
    before = values(log)
    log.close()
    again = Log(tmp_path / "t-0", cfg())
    assert again.last_recovery.segments_scanned == [] and again.last_recovery.bytes_scanned == 0
    assert values(again) == before
    assert again.recovery_point == again.log_end_offset == log.log_end_offset


def test_torn_tail_is_cut_and_reported_and_flushed_data_survives(tmp_path):
    log = Log(tmp_path / "t-0", cfg())
    fill(log, batches=30)
    log.flush()
    flushed = values(log)
    rp = log.recovery_point
    for i in range(3):
        log.append(batch(2, size=120))
    path = log.active_segment.log_path
    os.truncate(path, path.stat().st_size - 40)  # the last batch is torn
    # no close(): a crash
    again = Log(tmp_path / "t-0", cfg())
    rep = again.last_recovery
    assert rep.recovery_point == rp
    assert len(rep.truncated) == 1 and "torn write" in rep.truncated[0][2]
    assert again.log_end_offset == rp + 4  # two whole batches after the recovery point
    assert values(again)[: len(flushed)] == flushed
    assert again.recovery_point == again.log_end_offset


def test_recovery_scans_only_from_the_recovery_point(tmp_path):
    log = Log(tmp_path / "t-0", {"segment.bytes": 1 << 20, "index.interval.bytes": 1000})
    fill(log, batches=400, size=200)
    log.flush()
    log.append(batch(1))
    again = Log(tmp_path / "t-0", {"segment.bytes": 1 << 20, "index.interval.bytes": 1000})
    assert again.last_recovery.bytes_scanned < 3000  # not the ~250 KB segment
    assert again.log_end_offset == log.log_end_offset


def test_corrupt_byte_after_the_recovery_point_cuts_there_and_drops_later_segments(tmp_path):
    log = Log(tmp_path / "t-0", cfg())
    fill(log, batches=10)
    log.flush()
    rp = log.recovery_point
    fill(log, batches=30)
    seg = next(s for s in log.segments if s.base_offset >= rp)
    later = [s.base_offset for s in log.segments if s.base_offset > seg.base_offset]
    assert later
    position = [p for p, _ in seg.iter_batches()][2]
    with open(seg.log_path, "r+b") as f:
        f.seek(position + 70)  # inside the records, which the CRC covers
        b = f.read(1)
        f.seek(position + 70)
        f.write(bytes([b[0] ^ 0xFF]))
    again = Log(tmp_path / "t-0", cfg())
    rep = again.last_recovery
    assert rep.truncated[0][0] == seg.base_offset
    assert f"at byte {position}: CRC mismatch" in rep.truncated[0][2]
    assert rep.segments_deleted == later
    assert again.log_end_offset >= rp
    for base in later:
        assert not (again.dir / f"{base:020d}.log").exists()
    again.read(rp).validate()


def test_missing_or_garbage_indexes_are_rebuilt_without_losing_data(tmp_path):
    log = Log(tmp_path / "t-0", cfg())
    fill(log, batches=40)
    before = values(log)
    entries = {s.base_offset: s.offset_index.entries() for s in log.segments}
    log.close()
    segs = sorted(p for p in log.dir.glob("*.index"))
    segs[0].unlink()
    segs[1].write_bytes(b"\x00" * 13)  # not a multiple of 8
    (log.dir / segs[2].name.replace(".index", ".timeindex")).write_bytes(struct.pack(">qi", 50, 0) * 2)
    again = Log(tmp_path / "t-0", cfg())
    assert set(again.last_recovery.indexes_rebuilt) >= {
        int(segs[0].stem), int(segs[1].stem), int(segs[2].stem)
    }
    assert {s.base_offset: s.offset_index.entries() for s in again.segments} == entries
    assert values(again) == before


def test_damage_below_the_recovery_point_is_reported_not_cut(tmp_path):
    log = Log(tmp_path / "t-0", cfg())
    fill(log, batches=40)
    log.close()
    first = log.segments[0].log_path
    size = first.stat().st_size
    os.truncate(first, size - 10)
    again = Log(tmp_path / "t-0", cfg())
    assert again.last_recovery.problems and not again.last_recovery.truncated
    assert first.stat().st_size == size - 10  # left as found, for a human to look at
    assert len(again.segments) == len(log.segments)


@pytest.mark.parametrize("seed", range(5))
def test_random_operations_survive_crashes(tmp_path, seed):
    """A seeded soak: appends, flushes, truncations, rolls and crashes against a model."""
    rng = random.Random(seed)
    torn = 0
    conf = {"segment.bytes": 2500, "index.interval.bytes": 300}
    log = Log(tmp_path / "t-0", conf)
    model: list[bytes] = []
    durable = 0
    for step in range(300):
        op = rng.random()
        if op < 0.6:
            vals = [b"%d-%d" % (step, j) * rng.randint(1, 30) for j in range(rng.randint(1, 5))]
            info = log.append([Record(None, v, step) for v in vals], leader_epoch=rng.randint(0, 3))
            assert info.first_offset == len(model)
            model += vals
        elif op < 0.7:
            log.flush()
            durable = len(model)
        elif op < 0.78 and model:
            cut = rng.randint(0, len(model))
            log.truncate_to(cut)
            model = model[: log.log_end_offset]
            durable = min(durable, len(model))
        elif op < 0.85:
            log.roll()
        else:  # crash: the process lets go of its files (as the OS does for it), maybe with a torn tail
            log.crash()
            seg = log.active_segment
            unflushed = seg.size - seg.flushed_size  # a crash can only take these
            if unflushed and rng.random() < 0.5:
                os.truncate(seg.log_path, seg.size - rng.randint(1, unflushed))
            log = Log(tmp_path / "t-0", conf)
            torn += bool(log.last_recovery.truncated)
            assert log.log_end_offset >= durable
            model = model[: log.log_end_offset]
            durable = len(model)
        assert log.log_end_offset == len(model)
        assert [v for _, v in values(log)] == model, f"step {step}"
    assert torn  # the soak really did recover from torn tails


# --- config and names ------------------------------------------------------------------------------------


def test_log_config_takes_kafka_names_and_refuses_nonsense():
    c = LogConfig.of({"segment.bytes": "2048", "retention.ms": -1}, index_interval_bytes=100)
    assert (c.segment_bytes, c.retention_ms, c.index_interval_bytes) == (2048, -1, 100)
    with pytest.raises(IllegalArgumentError, match="unknown log config 'segment.size'"):
        LogConfig.of({"segment.size": 1})
    with pytest.raises(IllegalArgumentError, match="segment.bytes must be >= 14, not 1"):
        LogConfig.of({"segment.bytes": 1})
    with pytest.raises(IllegalArgumentError, match="must be an integer"):
        LogConfig.of({"retention.ms": "a week"})


@pytest.mark.parametrize(
    "name, why",
    [
        ("", "can't be empty"),
        (".", "cannot be '.'"),
        ("..", "cannot be '..'"),
        ("../etc", "contains '/'"),
        ("a/b", "contains '/'"),
        ("trucks gps", "contains ' '"),
        ("camión", "contains 'ó'"),
        ("x" * 250, "can't be longer than 249"),
    ],
)
def test_illegal_topic_names(name, why):
    with pytest.raises(InvalidTopicError, match=why):
        validate_topic_name(name)


def test_legal_topic_names_and_the_log_manager_layout(tmp_path):
    assert validate_topic_name("x" * 249)
    mgr = LogManager(tmp_path)
    for p in range(3):
        mgr.get_or_create_log("trucks_gps", p).append(batch(1))
    assert sorted(os.listdir(tmp_path)) == ["trucks_gps-0", "trucks_gps-1", "trucks_gps-2"]
    with pytest.raises(InvalidTopicError):
        mgr.get_or_create_log("../../escape", 0)
    with pytest.raises(ValueError, match="partition must be an int >= 0"):
        mgr.get_or_create_log("ok", -1)
    assert not any(p.name.startswith("escape") for p in tmp_path.parent.iterdir())
    mgr.close()
    again = LogManager(tmp_path)
    assert again.load_existing() == [TopicPartition("trucks_gps", p) for p in range(3)]
    assert again.get_log("trucks_gps", 2).log_end_offset == 1


def test_memory_records_from_a_fetch_round_trip(tmp_path):
    log = Log(tmp_path / "t-0")
    log.append(MemoryRecords.build([b"a", b"b"], timestamp=5))
    assert [(r.offset, r.value, r.timestamp) for r in log.read(0).records()] == [(0, b"a", 5), (1, b"b", 5)]


def test_damage_in_a_flushed_batch_of_the_segment_holding_the_recovery_point_is_not_cut(tmp_path):
    conf = {"index.interval.bytes": 200}
    log = Log(tmp_path / "t-0", conf)
    for _ in range(10):
        log.append(batch(5))
    log.flush()
    assert log.recovery_point == 50
    log.append(batch(5))  # unflushed, after the recovery point
    seg = log.active_segment
    position = next(p for p, b in seg.iter_batches() if b.base_offset == 45)
    # no close(): a crash, so the recovery point stays at 50
    with open(seg.log_path, "r+b") as f:
        f.seek(position + 70)
        b = f.read(1)
        f.seek(position + 70)
        f.write(bytes([b[0] ^ 0xFF]))
    again = Log(tmp_path / "t-0", conf)
    assert again.last_recovery.recovery_point == 50
    assert again.last_recovery.segments_scanned == [0]
    assert not again.last_recovery.truncated
    assert again.log_end_offset == 55


def test_gzip_batches_are_byte_reproducible():
    recs = [Record(b"k", b"v" * 100, 5)] * 3
    assert bytes(RecordBatch.build(recs, compression="gzip")) == bytes(RecordBatch.build(recs, compression="gzip"))


def test_flushing_an_idle_log_writes_nothing(tmp_path, monkeypatch):
    # A broker flushes every log on a timer: a log with nothing new must cost no fsync.
    log = Log(tmp_path / "t-0")
    log.append(RecordBatch.build([b"a", b"b"]))
    log.flush()
    writes = []
    monkeypatch.setattr(log.checkpoints, "write", lambda *a: writes.append(a))
    log.flush()
    assert writes == []
    log.append(RecordBatch.build([b"c"]))
    log.flush()
    assert [value for _, value in writes] == [3]


def test_a_new_log_costs_no_fsync_and_its_first_flush_moves_the_checkpoint(tmp_path, monkeypatch):
    """Creating a log writes nothing that needs forcing to disk (a 2,000-partition CreateTopics
    made each broker fsync five files per partition and stall every client for seconds)."""
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    log = Log(tmp_path / "t-0", {})
    assert synced == [] and log.recovery_point == 0 and log.log_start_offset == 0
    assert (log.dir / "recovery-point-offset-checkpoint").read_text() == "0\n1\nt 0 0\n"
    fill(log, batches=3)
    end = log.log_end_offset
    log.flush()
    assert synced and (log.dir / "recovery-point-offset-checkpoint").read_text() == f"0\n1\nt 0 {end}\n"
    log.close()
    reopened = Log(tmp_path / "t-0", {})
    assert reopened.recovery_point == end and reopened.log_end_offset == end


def test_reads_after_a_truncation_never_see_the_bytes_of_the_append_it_removed(tmp_path):
    """The active segment serves the reads that follow an append from that append's bytes;
    a truncation and a new append of the same size at the same place must not bring the
    old bytes back, and a segment rolled past reads its file."""
    log = Log(tmp_path / "t-0", {"segment.bytes": 10_000})
    log.append(batch(3))
    end = log.log_end_offset
    log.append([Record(b"k", b"old" * 50, 2_000)])
    assert log.read(end).records()[0].value == b"old" * 50
    log.truncate_to(end)
    assert log.read_bytes(0) == bytes(log.read(0)) and log.log_end_offset == end
    log.append([Record(b"k", b"new" * 50, 2_000)])
    assert log.read(end).records()[0].value == b"new" * 50
    segment = log.active_segment
    assert log.read_bytes(end) == segment.log_path.read_bytes()[segment.translate_offset(end)[0]:]
    log.roll()
    log.append([Record(b"k", b"next", 2_000)])
    assert log.read(end).records()[0].value == b"new" * 50
    assert log.read(end + 1).records()[0].value == b"next"
