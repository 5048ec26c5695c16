"""The leader epoch cache (KIP-101): which leader epoch wrote which offsets.

First the ``LeaderEpochFileCache`` alone (assign, end_offset_for, truncation both ways, the
checkpoint file), then inside a ``Log``: epochs are recorded as batches are appended (by a
leader stamping its epoch, or by a follower keeping the leader's), cut with the log, moved
up by retention, and found again after a reopen, a crash and a power loss.
"""

from __future__ import annotations

import os

import pytest

from minikafka.errors import CorruptRecordError
from minikafka.records import Record, RecordBatch
from minikafka.storage import Log, LogConfig
from minikafka.storage.leader_epoch import CHECKPOINT_FILE, UNDEFINED, LeaderEpochFileCache


class Clock:
    def __init__(self, now=0):
        self.now = now

    def __call__(self):
        return self.now


def batch(n=1, ts=1_000, epoch=-1, base_offset=0):
    return RecordBatch.build(
        [Record(b"k", b"v%d" % i, ts + i) for i in range(n)],
        base_offset=base_offset, partition_leader_epoch=epoch,
    )


def epochs_of_batches(log):
    """(base offset, partitionLeaderEpoch) of every batch in the log, as stored."""
    return [(b.base_offset, b.partition_leader_epoch) for s in log.segments for _, b in s.iter_batches()]


# --- the cache alone ---------------------------------------------------------------------------------


def test_empty_cache(tmp_path):
    cache = LeaderEpochFileCache(tmp_path)
    assert cache.entries() == []
    assert cache.latest_epoch == -1
    assert cache.end_offset_for(0, 10) == UNDEFINED
    assert not (tmp_path / CHECKPOINT_FILE).exists()  # nothing written until there is something


def test_assign_keeps_epochs_and_starts_increasing(tmp_path):
    cache = LeaderEpochFileCache(tmp_path)
    cache.assign(0, 0)
    cache.assign(0, 5)  # the same epoch again: its start does not move
    cache.assign(2, 5)
    cache.assign(1, 7)  # an older epoch than the latest: ignored
    cache.assign(-1, 9)  # no epoch: ignored
    cache.assign(4, 9)
    assert cache.entries() == [(0, 0), (2, 5), (4, 9)]
    assert cache.latest_epoch == 4


def test_assign_a_newer_epoch_at_or_before_older_starts_supersedes_them(tmp_path):
    cache = LeaderEpochFileCache(tmp_path)
    for epoch, start in [(0, 0), (1, 10), (2, 20)]:
        cache.assign(epoch, start)
    cache.assign(3, 20)  # elected again before writing anything: (2, 20) held no record
    assert cache.entries() == [(0, 0), (1, 10), (3, 20)]
    cache.assign(5, 12)  # starts before epochs 1 and 3 ended: they are gone from this log
    assert cache.entries() == [(0, 0), (1, 10), (5, 12)]
    cache.assign(6, 10)
    assert cache.entries() == [(0, 0), (6, 10)]


@pytest.mark.parametrize(
    "epoch, expected",
    [
        (0, (0, 10)),  # epoch 0 ended where epoch 2 began
        (1, (0, 10)),  # unknown epoch 1: the largest known below it is 0
        (2, (2, 25)),
        (3, (2, 25)),
        (4, (4, 40)),  # the latest epoch ends at the log end
        (9, (4, 40)),
        (-1, UNDEFINED),
    ],
)
def test_end_offset_for(tmp_path, epoch, expected):
    cache = LeaderEpochFileCache(tmp_path)
    for e, start in [(0, 0), (2, 10), (4, 25)]:
        cache.assign(e, start)
    assert cache.end_offset_for(epoch, 40) == expected


def test_end_offset_for_an_epoch_older_than_every_entry_is_undefined(tmp_path):
    cache = LeaderEpochFileCache(tmp_path)
    cache.assign(3, 100)
    assert cache.end_offset_for(2, 120) == UNDEFINED
    assert cache.end_offset_for(3, 120) == (3, 120)


def test_truncate_from_end(tmp_path):
    cache = LeaderEpochFileCache(tmp_path)
    for e, start in [(0, 0), (1, 10), (3, 20), (4, 30)]:
        cache.assign(e, start)
    cache.truncate_from_end(40)  # past every start: nothing to do
    assert cache.entries() == [(0, 0), (1, 10), (3, 20), (4, 30)]
    cache.truncate_from_end(20)  # epoch 3 started at 20: it goes, and 4 with it
    assert cache.entries() == [(0, 0), (1, 10)]
    cache.truncate_from_end(11)  # inside epoch 1: it stays
    assert cache.entries() == [(0, 0), (1, 10)]
    cache.truncate_from_end(0)
    assert cache.entries() == []
    assert LeaderEpochFileCache(tmp_path).entries() == []  # and the file says so


def test_truncate_from_start(tmp_path):
    cache = LeaderEpochFileCache(tmp_path)
    for e, start in [(0, 0), (1, 10), (3, 20), (4, 30)]:
        cache.assign(e, start)
    cache.truncate_from_start(0)
    assert cache.entries() == [(0, 0), (1, 10), (3, 20), (4, 30)]
    cache.truncate_from_start(5)  # inside epoch 0: its start moves up
    assert cache.entries() == [(0, 5), (1, 10), (3, 20), (4, 30)]
    cache.truncate_from_start(20)  # exactly where epoch 3 starts
    assert cache.entries() == [(3, 20), (4, 30)]
    cache.truncate_from_start(35)  # inside the latest epoch
    assert cache.entries() == [(4, 35)]
    assert LeaderEpochFileCache(tmp_path).entries() == [(4, 35)]
    assert cache.end_offset_for(4, 50) == (4, 50)


def test_clear(tmp_path):
    cache = LeaderEpochFileCache(tmp_path)
    cache.assign(1, 0)
    cache.clear()
    assert cache.entries() == [] and LeaderEpochFileCache(tmp_path).entries() == []


def test_recovery_replaces_entries_from_the_batches_it_read_and_writes_only_a_change(tmp_path):
    cache = LeaderEpochFileCache(tmp_path)
    for epoch, start in ((1, 0), (3, 2), (5, 8)):
        cache.assign(epoch, start)
    cache.flush()
    # The batches from offset 1 on say: epoch 1 to 2, epoch 4 from 2, epoch 6 from 9 (the
    # file held entries for a history that was cut since, its rewrite refused by the disk).
    cache.replace_from_batches([(1, 1), (4, 2), (6, 9)])
    assert cache.entries() == [(1, 0), (4, 2), (6, 9)] == LeaderEpochFileCache(tmp_path).entries()
    cache.flush()
    cache.replace_from_batches([(4, 5), (6, 9)])  # what the file already says
    assert cache.entries() == [(1, 0), (4, 2), (6, 9)] and not cache.behind  # nothing written


def test_checkpoint_file_format_and_reload(tmp_path):
    cache = LeaderEpochFileCache(tmp_path)
    cache.assign(0, 0)
    cache.assign(3, 17)
    # Kafka's LeaderEpochCheckpointFile: version, entry count, "epoch start_offset" lines
    assert (tmp_path / CHECKPOINT_FILE).read_text() == "0\n2\n0 0\n3 17\n"
    again = LeaderEpochFileCache(tmp_path)
    assert again.entries() == [(0, 0), (3, 17)] and again.latest_epoch == 3
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("content", ["", "0\n", "0\n2\n0 0\n", "0\n1\nzero 0\n", "garbage"])
def test_an_unreadable_checkpoint_gives_an_empty_cache(tmp_path, content):
    (tmp_path / CHECKPOINT_FILE).write_text(content)
    assert LeaderEpochFileCache(tmp_path).entries() == []


# --- inside a log ----------------------------------------------------------------------------------------


def test_a_leader_append_records_its_epoch_once_per_epoch(tmp_path):
    log = Log(tmp_path / "t-0", clock=Clock())
    log.append(batch(2), leader_epoch=0)
    log.append(batch(1), leader_epoch=0)
    log.append(batch(3), leader_epoch=2)
    log.append(batch(1), leader_epoch=5)
    assert log.leader_epoch_cache.entries() == [(0, 0), (2, 3), (5, 6)]
    # each batch carries the epoch it was appended in, and the CRC still holds
    assert epochs_of_batches(log) == [(0, 0), (2, 0), (3, 2), (6, 5)]
    assert all(b.is_valid() for b in log.read(0, 1 << 20).batches())


def test_an_append_without_an_epoch_records_none(tmp_path):
    log = Log(tmp_path / "t-0", clock=Clock())
    log.append(batch(2))
    assert log.leader_epoch_cache.entries() == []
    assert epochs_of_batches(log) == [(0, -1)]


def test_a_follower_append_keeps_the_leaders_epochs(tmp_path):
    leader = Log(tmp_path / "leader", clock=Clock())
    follower = Log(tmp_path / "follower", clock=Clock())
    leader.append(batch(2), leader_epoch=1)
    leader.append(batch(2), leader_epoch=1)
    leader.append(batch(1), leader_epoch=4)
    data = bytes(leader.read(0, 1 << 20))
    follower.append(data, assign_offsets=False)
    assert follower.leader_epoch_cache.entries() == leader.leader_epoch_cache.entries() == [(1, 0), (4, 4)]
    assert bytes(follower.read(0, 1 << 20)) == data


def test_epochs_are_cut_with_the_log(tmp_path):
    log = Log(tmp_path / "t-0", clock=Clock())
    for epoch, n in [(0, 3), (1, 2), (1, 2), (3, 2), (4, 1)]:
        log.append(batch(n), leader_epoch=epoch)
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 3), (3, 7), (4, 9)]
    assert log.truncate_to(8)  # inside epoch 3's batch [7, 8]: the whole batch goes
    assert log.log_end_offset == 7
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 3)]
    assert log.leader_epoch_cache.end_offset_for(3, log.log_end_offset) == (1, 7)
    log.truncate_to(0)
    assert log.log_end_offset == 0 and log.leader_epoch_cache.entries() == []


def test_truncate_fully_and_start_at_forgets_every_epoch(tmp_path):
    log = Log(tmp_path / "t-0", clock=Clock())
    log.append(batch(3), leader_epoch=2)
    log.truncate_fully_and_start_at(50)
    assert log.leader_epoch_cache.entries() == []
    log.append(batch(1), leader_epoch=3)
    assert log.leader_epoch_cache.entries() == [(3, 50)]


def test_retention_moves_the_first_epoch_up(tmp_path):
    clock = Clock(0)
    one = len(batch(1, ts=0))
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=one * 2, retention_ms=1_000), clock=clock)
    for i, epoch in enumerate([0, 0, 0, 1, 1, 1]):
        log.append(batch(1, ts=i * 100), leader_epoch=epoch)
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 3)]
    assert len(log.segments) == 3
    clock.now = 1_000 + 250  # the segment [0, 1] is older than retention.ms
    deleted = log.delete_old_segments()
    assert [base for base, _ in deleted] == [0]
    assert log.log_start_offset == 2
    assert log.leader_epoch_cache.entries() == [(0, 2), (1, 3)]
    clock.now = 1_000 + 450
    log.delete_old_segments()
    assert log.log_start_offset == 4
    assert log.leader_epoch_cache.entries() == [(1, 4)]


def test_epochs_survive_a_clean_reopen(tmp_path):
    log = Log(tmp_path / "t-0", clock=Clock())
    log.append(batch(2), leader_epoch=0)
    log.append(batch(2), leader_epoch=3)
    log.close()
    again = Log(tmp_path / "t-0", clock=Clock())
    assert again.leader_epoch_cache.entries() == [(0, 0), (3, 2)]
    assert again.leader_epoch_cache.latest_epoch == 3
    again.append(batch(1), leader_epoch=3)  # the same epoch goes on: no new entry
    again.append(batch(1), leader_epoch=4)
    assert again.leader_epoch_cache.entries() == [(0, 0), (3, 2), (4, 5)]


def test_epochs_survive_a_crash_and_follow_a_power_loss_cut(tmp_path):
    log = Log(tmp_path / "t-0", clock=Clock())
    log.append(batch(2), leader_epoch=0)
    log.flush()  # offsets [0, 2) are durable
    log.append(batch(2), leader_epoch=1)
    log.append(batch(2), leader_epoch=2)
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 2), (2, 4)]
    log.crash()  # the process dies; the OS still has the bytes
    crashed = Log(tmp_path / "t-0", clock=Clock())
    assert crashed.log_end_offset == 6
    assert crashed.leader_epoch_cache.entries() == [(0, 0), (1, 2), (2, 4)]
    crashed.flush()
    crashed.append(batch(1), leader_epoch=3)
    crashed.crash(lose_unflushed=True)  # the machine dies: the unflushed batch is gone
    cut = Log(tmp_path / "t-0", clock=Clock())
    assert cut.log_end_offset == 6
    # the checkpoint said (3, 6), but nothing of epoch 3 survived: the entry goes too
    assert cut.leader_epoch_cache.entries() == [(0, 0), (1, 2), (2, 4)]


def test_power_loss_that_cuts_several_epochs(tmp_path):
    log = Log(tmp_path / "t-0", clock=Clock())
    log.append(batch(2), leader_epoch=0)
    log.flush()
    log.append(batch(2), leader_epoch=1)
    log.append(batch(2), leader_epoch=2)
    log.crash(lose_unflushed=True)
    cut = Log(tmp_path / "t-0", clock=Clock())
    assert cut.log_end_offset == 2
    assert cut.leader_epoch_cache.entries() == [(0, 0)]
    assert cut.leader_epoch_cache.end_offset_for(2, cut.log_end_offset) == (0, 2)


def test_recovery_of_a_torn_tail_cuts_its_epoch(tmp_path):
    log = Log(tmp_path / "t-0", clock=Clock())
    log.append(batch(2), leader_epoch=0)
    log.flush()
    log.append(batch(3), leader_epoch=7)
    path = log.active_segment.log_path
    log.crash()
    os.truncate(path, os.path.getsize(path) - 5)  # a torn write in the last batch
    again = Log(tmp_path / "t-0", clock=Clock())
    assert again.log_end_offset == 2
    assert again.leader_epoch_cache.entries() == [(0, 0)]


def test_a_refused_append_leaves_no_epoch_behind(tmp_path):
    """An append that fails writes nothing, so it must not leave an epoch entry either:
    otherwise the log's latest epoch names records it does not have."""
    log = Log(tmp_path / "t-0", clock=Clock())
    log.append(batch(1), leader_epoch=0)
    good = bytes(batch(1))
    bad = bytearray(bytes(batch(1)))
    bad[-1] ^= 0xFF  # breaks the CRC of the second batch
    with pytest.raises(CorruptRecordError):
        log.append(good + bytes(bad), leader_epoch=4)
    assert log.log_end_offset == 1
    assert log.leader_epoch_cache.entries() == [(0, 0)]
    assert log.leader_epoch_cache.latest_epoch == 0
