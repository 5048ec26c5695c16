"""A full disk and a failing fsync: nothing acknowledged is ever lost, nothing torn is left.

The old segment append wrote with one ``writev`` and, on a short write, finished with
``os.write``; on a full disk the ``writev`` landed part of the batch and the ``write`` raised
ENOSPC, leaving bytes in the file that the segment's size did not count. Every later append
went after them, was acknowledged, and could not be read; recovery at the next start cut
them all. Here a failed append leaves the segment exactly as before it.
"""

from __future__ import annotations

import errno
import logging
import shutil

import pytest

from minikafka.checker.campaign import fault_campaign, run_schedule
from minikafka.clients.producer import KafkaProducer
from minikafka.cluster import Cluster
from minikafka.errors import KafkaStorageError
from minikafka.messages import (
    KAFKA_STORAGE_ERROR,
    LATEST_TIMESTAMP,
    NO_ERROR,
    ListOffsetsRequest,
    ProducePartition,
    ProduceRequest,
)
from minikafka.records import RecordBatch
from minikafka.storage import Log
from minikafka.storage.disk import Disk


def halts(c, broker_id: int) -> bool:
    """Whether ``broker_id`` halted because its metadata log could not take a record (Kafka's
    broker halts when its metadata log directory fails, KIP-858), within 5 s of simulated time."""
    return c.run_until(lambda: not c.world.alive(broker_id), 5_000) and (
        "the metadata log cannot be written" in c.world.halted.get(broker_id, ""))


def files(log: Log) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.dir.iterdir()) if p.suffix in (".log", ".index", ".timeindex")}


def batch(i: int, size: int = 300) -> bytes:
    return bytes(RecordBatch.build([(b"k%d" % i, bytes([i % 256]) * size)], timestamp=1000 + i))


class IndexWritesFail(Disk):
    """Data writes (writev) work; index entry writes (write) fail with ENOSPC."""

    def write(self, fd, data):
        raise OSError(errno.ENOSPC, "No space left on device (index, injected)")


def test_a_full_disk_leaves_the_segment_and_its_indexes_exactly_as_before_the_append(tmp_path):
    disk = Disk("test disk")
    log = Log(tmp_path / "t-0", {"index.interval.bytes": 500}, disk=disk)
    for i in range(20):
        log.append(batch(i))
    before, end = files(log), log.log_end_offset
    disk.full = True  # the next writev lands half of its first piece, then ENOSPC
    for i in range(3):
        with pytest.raises(KafkaStorageError, match="No space left on device.*cut back"):
            log.append(batch(100 + i))
        assert files(log) == before and log.log_end_offset == end
        assert log.active_segment.size == len(before["00000000000000000000.log"])
    disk.full = False  # space returns: appends work again, at the next offset
    assert log.append(batch(200)).first_offset == end
    log.crash()  # no flush: recovery must keep every appended batch
    reopened = Log(tmp_path / "t-0")
    assert reopened.last_recovery.clean and not reopened.last_recovery.truncated
    assert [r.value[:1] for r in reopened.read(0, 1 << 20).records()] == [bytes([i]) for i in list(range(20)) + [200]]


def test_an_index_write_that_fails_undoes_the_whole_append(tmp_path):
    log = Log(tmp_path / "t-0", {"index.interval.bytes": 100}, disk=IndexWritesFail())
    log.append(batch(0))  # no index entry yet: the first batch
    before = files(log)
    with pytest.raises(KafkaStorageError):
        log.append(batch(1))  # over the interval: its index entry cannot be written
    assert files(log) == before and log.log_end_offset == 1
    assert len(log.active_segment.offset_index) == 0


def test_appends_failing_are_logged_once_and_their_end_once(tmp_path, caplog):
    disk = Disk()
    log = Log(tmp_path / "t-0", disk=disk)
    log.append(batch(0))
    disk.full = True
    with caplog.at_level(logging.WARNING, logger="minikafka.storage"):
        for i in range(50):
            with pytest.raises(KafkaStorageError):
                log.append(batch(i))
        disk.full = False
        log.append(batch(1))
        log.append(batch(2))
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and "appends are failing" in messages[0] and "succeed again" in messages[1]
    assert not any(r.exc_info for r in caplog.records)  # no traceback


def test_a_failed_fsync_takes_the_log_offline_and_the_recovery_point_stays(tmp_path):
    disk = Disk()
    log = Log(tmp_path / "t-0", disk=disk)
    log.append(batch(0))
    log.flush()
    log.append(batch(1))
    disk.fsync_fails = True
    with pytest.raises(KafkaStorageError, match="fsync failed"):
        log.flush()
    assert log.recovery_point == 1 and log.offline
    disk.fsync_fails = False  # a later fsync would "succeed": the log must not believe it
    with pytest.raises(KafkaStorageError, match="offline"):
        log.append(batch(2))
    log.crash()
    reopened = Log(tmp_path / "t-0")  # the restart: recovery re-checks from offset 1
    assert reopened.last_recovery.recovery_point == 1 and reopened.log_end_offset == 2


# --- the simulated cluster -------------------------------------------------------------------------------


def produce(c, dst, data, acks=-1):
    corr = c.world.call_node(c.admin_id, lambda node: node.request(
        dst, lambda k: ProduceRequest(k, acks, 3_000, (ProducePartition("t", 0, data),))))
    admin = c.world.nodes[c.admin_id]
    assert c.world.run_until(lambda: corr in admin.responses, 5_000)
    return admin.responses.pop(corr).partitions[0]


def test_a_leader_on_a_full_disk_answers_kafka_storage_error_and_acknowledges_nothing(tmp_path):
    c = Cluster(3, seed=3, dir=tmp_path / "c", config={"min.insync.replicas": 2})
    try:
        c.create_topic("t", 1, 3)
        leader = c.partition_state("t", 0).leader
        assert produce(c, leader, batch(0)).error == NO_ERROR
        log = c.replica(leader, "t", 0).log
        size = log.size_in_bytes
        c.fill_disk(leader)
        part = produce(c, leader, batch(1), 1)
        assert (part.error, part.base_offset) == (KAFKA_STORAGE_ERROR, -1)
        assert "No space left on device" in part.error_message
        # acks=all is refused too; and, still the leader in its own view (the controller has
        # not moved it yet), the broker answers a leader's request for the offline replica
        # KAFKA_STORAGE_ERROR, never its high watermark: a client must not read an end that
        # no longer moves. (Both asked at once: the broker halts soon after, see below.)
        assert c.broker(leader).replica_manager.partitions[("t", 0)].is_leader
        admin = c.world.nodes[c.admin_id]
        produced = c.world.call_node(c.admin_id, lambda node: node.request(
            leader, lambda k: ProduceRequest(k, -1, 3_000, (ProducePartition("t", 0, batch(1)),))))
        listed = c.world.call_node(c.admin_id, lambda node: node.request(
            leader, lambda k: ListOffsetsRequest(k, (("t", 0, LATEST_TIMESTAMP),))))
        assert c.world.run_until(lambda: produced in admin.responses and listed in admin.responses, 5_000)
        part = admin.responses.pop(produced).partitions[0]
        assert (part.error, part.base_offset) == (KAFKA_STORAGE_ERROR, -1)
        assert admin.responses.pop(listed).partitions[0][2] == KAFKA_STORAGE_ERROR
        assert (log.size_in_bytes, log.log_end_offset) == (size, 1)
        # The controller moves the leadership away; the broker's metadata log, in the same
        # full directory, cannot take that record, and the broker halts (KIP-858) rather
        # than answer from a view that no longer moves.
        assert c.run_until(lambda: not c.world.alive(leader), 5_000)
        assert "the metadata log cannot be written" in c.world.halted[leader]
        assert c.partition_state("t", 0).leader not in (leader, -1)
        c.fill_disk(leader, False)
        c.restart(leader)
        assert c.run_until(lambda: leader in c.partition_state("t", 0).isr, 10_000)
        assert c.replica(leader, "t", 0).log_end_offset == 1  # nothing of the refused batches
    finally:
        c.close()


def test_a_follower_on_a_full_disk_leaves_the_isr_and_catches_up_after_a_restart(tmp_path):
    # replica.lag.time.max.ms is long: the follower leaves the ISR because its log directory
    # went offline (its heartbeat says so), not because it fell behind.
    c = Cluster(3, seed=4, dir=tmp_path / "c", config={"replica.lag.time.max.ms": 60_000})
    try:
        c.create_topic("t", 1, 3)
        leader = c.partition_state("t", 0).leader
        follower = next(b for b in c.broker_ids if b != leader)
        c.fill_disk(follower)
        p = KafkaProducer(bootstrap_servers=c, acks=1)
        futures = [p.send("t", value=b"v%d" % i) for i in range(20)]
        p.flush(timeout=10)
        assert all(f.get().offset == i for i, f in enumerate(futures))
        assert c.run_until(lambda: follower not in c.partition_state("t", 0).isr, 5_000)
        assert c.replica(follower, "t", 0).log_end_offset == 0
        assert c.partition_state("t", 0).leader == leader
        c.fill_disk(follower, False)
        c.kill(follower)
        c.restart(follower)
        assert c.run_until(lambda: follower in c.partition_state("t", 0).isr, 10_000)
        assert c.replica(follower, "t", 0).log_end_offset == 20
    finally:
        c.close()


def test_a_broker_whose_fsync_failed_loses_its_partitions_and_halts(tmp_path):
    c = Cluster(3, seed=5, dir=tmp_path / "c", config={"log.flush.interval.ms": 500, "min.insync.replicas": 2})
    try:
        c.create_topic("t", 1, 3)
        leader = c.partition_state("t", 0).leader
        p = KafkaProducer(bootstrap_servers=c, acks="all", enable_idempotence=True)
        first = [p.send("t", value=b"a%d" % i) for i in range(10)]
        p.flush(timeout=10)
        c.fail_fsync(leader)
        assert c.run_until(lambda: c.broker(leader).log_manager.offline is not None, 5_000)
        assert c.run_until(lambda: c.partition_state("t", 0).leader not in (-1, leader), 20_000)
        second = [p.send("t", value=b"b%d" % i) for i in range(10)]
        p.flush(timeout=20)
        offsets = [f.get().offset for f in first + second]
        assert offsets == list(range(20))
        assert halts(c, leader)  # its metadata log is on the same failing disk
        c.fail_fsync(leader, False)  # a new disk, and a restart: it recovers and catches up
        c.restart(leader)
        assert c.run_until(lambda: c.replica(leader, "t", 0) is not None
                           and c.replica(leader, "t", 0).log_end_offset == 20, 20_000)
    finally:
        c.close()


@pytest.mark.campaign
def test_a_campaign_with_disk_faults_finds_no_anomaly_with_acks_all():
    report = fault_campaign(20, seed=13, acks="all", enable_idempotence=True, disk_faults=True, faults=3)
    assert report.ok, report.table()
    assert report.counts["ok"] > 0


def test_disk_faults_are_drawn_from_the_seed_and_replay_exactly():
    def run():
        r = run_schedule(seed=21, acks="all", enable_idempotence=True, disk_faults=True, faults=4)
        assert r.ok, r.table()
        return r.faults, r.counts
    a, b = run(), run()
    assert a == b
    assert (618, "disk full on 3") in a[0] and (1306, "space freed on 3") in a[0]


def test_a_log_on_a_failing_disk_still_closes_and_reopens_whole(tmp_path):
    disk = Disk()
    log = Log(tmp_path / "t-0", disk=disk)
    log.append(batch(0))
    disk.fsync_fails = True
    log.close()  # no exception: the files are released, the recovery point stays at 0
    reopened = Log(tmp_path / "t-0")
    assert reopened.last_recovery.recovery_point == 0 and reopened.log_end_offset == 1


class EpochFileRefused(Disk):
    """Everything works but writing the leader-epoch file, while ``refuse`` is set."""

    refuse = False

    def replace_file(self, path, data, *, durable=True):
        if self.refuse and path.name == "leader-epoch-checkpoint":
            raise OSError(errno.ENOSPC, "No space left on device (leader-epoch file, injected)")
        super().replace_file(path, data, durable=durable)


def test_checkpoints_a_full_disk_refuses_keep_their_old_files_and_are_written_at_the_next_flush(tmp_path):
    # The checkpoints were written straight to the OS: the simulated disk could not fill up
    # under them, and a real full disk failed a truncation or a DeleteRecords half done.
    from minikafka.storage.log import LOG_START_FILE, RECOVERY_POINT_FILE

    disk = Disk()
    log = Log(tmp_path / "t-0", {"segment.bytes": 1000}, disk=disk)
    for i in range(12):
        log.append(batch(i))
    log.flush()
    start_file = (log.dir / LOG_START_FILE).read_bytes()
    disk.full = True
    assert log.maybe_increment_log_start_offset(5)  # segments below offset 5 deleted
    assert log.truncate_to(10) and (log.log_start_offset, log.log_end_offset) == (5, 10)
    # The log start went up: its old file stays (safe: records served a little longer). The
    # recovery point went down (12 to 10): its old file would trust what is written at 10
    # and 11 next without a check, so it is gone (a missing one reads as 0).
    assert (log.dir / LOG_START_FILE).read_bytes() == start_file
    assert not (log.dir / RECOVERY_POINT_FILE).exists()
    assert not list(log.dir.glob("*.tmp"))  # nothing half written left behind
    disk.full = False  # a moment's space: offset 10 is appended, not flushed
    log.append(batch(99))
    disk.full = True
    crashed_now = tmp_path / "crashed-now"  # what a crash at this moment would leave
    shutil.copytree(log.dir, crashed_now / "t-0")
    early = Log(crashed_now / "t-0", {"segment.bytes": 1000})
    assert early.last_recovery.recovery_point == 0 and early.log_end_offset == 11  # all re-checked
    early.close()
    with pytest.raises(KafkaStorageError, match="writing a checkpoint failed"):
        log.flush()
    assert log.offline is None and log.recovery_point == 10  # a full disk is not a failed fsync
    disk.full = False
    log.flush()
    log.crash()  # no clean close: what the files say is what the next start finds
    reopened = Log(tmp_path / "t-0", {"segment.bytes": 1000})
    assert (reopened.log_start_offset, reopened.log_end_offset) == (5, 11)
    assert reopened.last_recovery.recovery_point == 11


def test_an_epoch_the_leader_epoch_file_missed_is_flushed_before_the_recovery_point_passes_it(tmp_path):
    from minikafka.storage.leader_epoch import LeaderEpochFileCache

    disk = EpochFileRefused()
    log = Log(tmp_path / "t-0", disk=disk)
    log.append(batch(0), leader_epoch=1)
    log.flush()
    disk.refuse = True
    log.append(batch(1), leader_epoch=2)  # the batch is written, the epoch file is not
    assert log.leader_epoch_cache.entries() == [(1, 0), (2, 1)] and log.leader_epoch_cache.unwritten
    assert LeaderEpochFileCache(log.dir).entries() == [(1, 0)]
    with pytest.raises(KafkaStorageError, match="writing a checkpoint failed"):
        log.flush()
    assert log.recovery_point == 1  # not past the batch whose epoch the file lacks
    log.crash()
    reopened = Log(tmp_path / "t-0")  # recovery reads epoch 2 from the batch itself
    assert reopened.leader_epoch_cache.entries() == [(1, 0), (2, 1)]
    assert LeaderEpochFileCache(reopened.dir).entries() == [(1, 0), (2, 1)]  # and wrote it
    disk.refuse = False


def test_a_broker_whose_metadata_log_cannot_be_written_halts_and_catches_up_after_a_restart(tmp_path):
    # First the broker's copy of the metadata log did not write through its Disk (a full disk
    # could not stop it); then an append that failed waited for space, while the broker
    # answered Metadata from a view that no longer moved (clients it named as leader read a
    # stale end). Now it halts, as Kafka's broker does when its metadata log directory fails.
    from minikafka.messages import CreateTopicsRequest, TopicConfig

    c = Cluster(3, seed=6, dir=tmp_path / "c")
    try:
        c.create_topic("t", 1, 3)
        full = 3
        end = c.broker(full).raft.log.log_end_offset
        c.fill_disk(full)
        admin = c.world.nodes[c.admin_id]
        corr = c.world.call_node(c.admin_id, lambda node: node.request(
            1, lambda k: CreateTopicsRequest(k, (TopicConfig("u", 1, 1),))))
        assert c.world.run_until(lambda: corr in admin.responses, 5_000)
        assert admin.responses.pop(corr).results[0][1] == NO_ERROR
        assert halts(c, full)
        others = [c.broker(b) for b in (1, 2)]
        assert c.run_until(lambda: all(("u", 0) in b.partition_states for b in others), 5_000)
        c.fill_disk(full, False)
        c.restart(full)  # its metadata log is whole (nothing half written) and catches up
        assert c.run_until(lambda: ("u", 0) in c.broker(full).partition_states, 5_000)
        assert c.broker(full).raft.log.log_end_offset > end
    finally:
        c.close()


# --- out of file descriptors -------------------------------------------------------------------------------


def produce_to(c, dst, topic, partition, data):
    corr = c.world.call_node(c.admin_id, lambda node: node.request(
        dst, lambda k: ProduceRequest(k, 1, 3_000, (ProducePartition(topic, partition, data),))))
    admin = c.world.nodes[c.admin_id]
    assert c.world.run_until(lambda: corr in admin.responses, 5_000)
    return admin.responses.pop(corr).partitions[0]


def test_a_broker_short_of_file_descriptors_takes_new_partitions_offline_and_goes_on(tmp_path, caplog):
    """Found by a user: 4 x 2,000 partitions at `ulimit -n` 20,000 ran a broker out of files;
    it failed applying a partition's metadata record, then failed it again and again (no new
    topic got a leader, no delete went through, thousands of tracebacks a minute, the same
    after a restart). Now it stops short of the limit, keeps a reserve, and goes on."""
    from minikafka.messages import DeleteTopicsRequest
    from minikafka.storage import log_manager as lm

    c = Cluster(1, seed=7, dir=tmp_path / "c")
    try:
        broker = c.broker(1)
        manager = broker.log_manager
        manager.fd_reserve = 64
        manager.fd_limit = lm.descriptors_in_use() + 64 + 20 * lm.FDS_PER_LOG  # room for about 20 logs
        manager.recheck_descriptors()
        with caplog.at_level(logging.ERROR):
            c.create_topic("many", 40, 1)
        offline = sorted(p for t, p in broker.replica_manager.offline_partitions if t == "many")
        opened = sorted(p for t, p in broker.replica_manager.partitions if t == "many")
        assert 10 <= len(opened) <= 22 and sorted(opened + offline) == list(range(40))
        assert lm.descriptors_in_use() <= manager.fd_limit - 60  # the reserve is kept
        assert sum("no more partitions can be opened" in r.message for r in caplog.records) == 1
        assert sum("partition(s) offline here" in r.message for r in caplog.records) == 1  # one line, not one a partition
        part = produce_to(c, 1, "many", offline[0], batch(0))
        assert part.error == KAFKA_STORAGE_ERROR and "ulimit -n" in part.error_message
        assert produce_to(c, 1, "many", opened[0], batch(1)).error == NO_ERROR
        c.create_topic("waiting", 1, 1)  # metadata goes on: a topic made now is offline here, for now
        assert produce_to(c, 1, "waiting", 0, batch(2)).error == KAFKA_STORAGE_ERROR
        # Deleting a topic gives its files back, and what could not be opened is opened ...
        admin = c.world.nodes[c.admin_id]
        corr = c.world.call_node(c.admin_id, lambda node: node.request(1, lambda k: DeleteTopicsRequest(k, ("many",))))
        assert c.world.run_until(lambda: corr in admin.responses, 10_000)
        assert c.world.run_until(lambda: not any(t == "many" for t, _ in broker.replica_manager.partitions)
                                 and not broker.replica_manager.offline_partitions, 10_000)
        assert produce_to(c, 1, "waiting", 0, batch(3)).error == NO_ERROR
        # ... and a new topic gets a leader and takes records.
        c.create_topic("after", 3, 1)
        assert all(produce_to(c, 1, "after", p, batch(p)).error == NO_ERROR for p in range(3))
    finally:
        c.close()


def test_a_fetch_from_a_partition_gone_offline_is_answered_at_once_not_parked(tmp_path):
    """A partition can go offline on a broker that still hosts it (``mark_offline``: its
    metadata could not be applied). A fetch that finds nothing to read waits up to
    ``max_wait_ms``, but one naming such a partition gets KAFKA_STORAGE_ERROR at once:
    the check that parks a fetch must see every error ``_read`` would answer."""
    from minikafka.messages import FetchPartition, FetchRequest

    c = Cluster(1, seed=3, dir=tmp_path / "c")
    try:
        c.create_topic("t", 1, 1)
        assert produce_to(c, 1, "t", 0, batch(0)).error == NO_ERROR
        rm = c.broker(1).replica_manager
        end = rm.partitions[("t", 0)].log_end_offset
        rm.mark_offline(("t", 0), "injected: a metadata record could not be applied")
        sent_at = c.now
        corr = c.world.call_node(c.admin_id, lambda node: node.request(
            1, lambda k: FetchRequest(k, -1, 60_000, 1, (FetchPartition("t", 0, end),))))
        admin = c.world.nodes[c.admin_id]
        assert c.world.run_until(lambda: corr in admin.responses, 120_000)
        assert admin.responses[corr].partitions[0].error == KAFKA_STORAGE_ERROR
        assert c.now - sent_at < 60_000  # answered, not expired: simulated time, one round trip
    finally:
        c.close()


# --- a log directory that fails goes offline, as Kafka's does (issue 37) ---------------------------------


def test_a_leader_whose_disk_fills_up_hands_its_partition_to_an_in_sync_replica_and_rejoins_after_a_restart(tmp_path):
    """The leader's disk fills up: its log directory goes offline, its heartbeat says so, and
    the controller elects an in-sync replica and takes it out of the ISR. The record saying
    so cannot be written to the broker's own metadata log (the same full disk): it halts. A
    producer with acks=all goes on against the new leader; nothing acknowledged is lost;
    restarted with space back, the broker catches up and rejoins."""
    c = Cluster(3, seed=5, dir=tmp_path / "c", config={"min.insync.replicas": 2})
    try:
        c.create_topic("t", 1, 3)
        before = c.partition_state("t", 0)
        leader = before.leader
        assert len(before.isr) == 3
        p = KafkaProducer(bootstrap_servers=c, acks="all", enable_idempotence=True)
        first = [p.send("t", value=b"a%d" % i) for i in range(10)]
        p.flush(timeout=10)
        c.fill_disk(leader)
        second = [p.send("t", value=b"b%d" % i) for i in range(10)]
        p.flush(timeout=20)
        assert [f.get().offset for f in first + second] == list(range(20))
        after = c.partition_state("t", 0)
        assert after.leader in before.isr and after.leader != leader
        assert leader not in after.isr and len(after.isr) == 2
        assert halts(c, leader)
        new_log = c.replica(after.leader, "t", 0).log
        values = [r.value for b in new_log.read(0, 1 << 20).batches() for r in b.records()]
        assert values == [b"a%d" % i for i in range(10)] + [b"b%d" % i for i in range(10)]
        c.fill_disk(leader, False)
        c.restart(leader)
        assert c.run_until(lambda: leader in c.partition_state("t", 0).isr, 20_000)
        assert c.replica(leader, "t", 0).log_end_offset == 20
        assert not c.image.brokers[leader].offline_log_dirs
        third = [p.send("t", value=b"c%d" % i) for i in range(5)]
        p.flush(timeout=10)
        assert [f.get().offset for f in third] == list(range(20, 25))
    finally:
        c.close()


def test_a_failed_append_takes_the_whole_log_directory_offline_and_says_so_once(tmp_path):
    from minikafka.storage.log_manager import LogManager

    disk = Disk("d")
    manager = LogManager(tmp_path / "broker-1", disk=disk)
    heard = []
    manager.failure_channel.listener = lambda log_dir, reason: heard.append((log_dir, reason))
    a, b = manager.get_or_create_log("a", 0), manager.get_or_create_log("b", 0)
    a.append(batch(0))
    disk.full = True
    with pytest.raises(KafkaStorageError, match="No space left on device"):
        a.append(batch(1))
    assert manager.offline is not None and a.offline and b.offline  # every log, not only the one that failed
    assert heard == [("broker-1", manager.offline)] and "No space left on device" in heard[0][1]
    disk.full = False  # space returns: the directory stays offline (until the broker restarts)
    for log in (a, b, manager.get_or_create_log("c", 0)):
        with pytest.raises(KafkaStorageError, match="offline"):
            log.append(batch(2))
    assert manager.failure_channel.offline_log_dirs == ("broker-1",) and len(heard) == 1
    assert manager.flush_all() is None  # an offline directory is not flushed again
    manager.close()
    again = LogManager(tmp_path / "broker-1", disk=disk)  # a restart: online, every record appended is there
    assert again.offline is None and again.load_existing() and again.get_log("a", 0).log_end_offset == 1
    again.close()


def test_the_metadata_image_keeps_a_brokers_offline_log_dirs_until_it_registers_again():
    from minikafka.metadata import records as mr
    from minikafka.metadata.image import MetadataImage

    image = MetadataImage()
    for offset, record in enumerate([mr.RegisterBrokerRecord(1, 7), mr.UnfenceBrokerRecord(1, 7),
                                     mr.BrokerRegistrationChangeRecord(1, 6, ("broker-1",))]):
        image.apply(mr.decode(*mr.encode(record)), offset)
    assert image.skipped == 1 and image.can_replicate(1)  # a change for an older incarnation is ignored
    image.apply(mr.decode(*mr.encode(mr.BrokerRegistrationChangeRecord(1, 7, ("broker-1",)))), 3)
    assert image.brokers[1].offline_log_dirs == ("broker-1",)
    assert image.is_alive(1) and not image.can_replicate(1)  # registered, unfenced, but may lead nothing
    image.apply(mr.RegisterBrokerRecord(1, 8), 4)
    image.apply(mr.UnfenceBrokerRecord(1, 8), 5)
    assert image.can_replicate(1) and image.brokers[1].offline_log_dirs == ()


def test_a_broker_whose_log_dir_is_offline_is_not_elected_even_by_an_unclean_election(tmp_path):
    """It is alive and unfenced, but its replicas are offline: when the in-sync replicas die,
    an unclean election may pick any live replica, never this one (the partition stays
    offline instead); restarted with its disk back, it may lead again. (Its data directory
    alone fails here, as with a metadata log on another disk, Kafka's ``metadata.log.dir``:
    a full disk would halt it at the next metadata record.)"""
    c = Cluster(3, seed=8, dir=tmp_path / "c", config={"unclean.leader.election.enable": True,
                                                          "broker.session.timeout.ms": 2_000})
    try:
        c.create_topic("t", 1, 3)
        leader = c.partition_state("t", 0).leader
        full, other = [b for b in c.broker_ids if b != leader]
        c.broker(full).log_manager.log_dir_failed("injected: the data directory's disk failed")
        p = KafkaProducer(bootstrap_servers=c, acks=1)
        p.send("t", value=b"x")
        p.flush(timeout=10)
        assert c.run_until(lambda: full not in c.partition_state("t", 0).isr, 5_000)
        c.kill(leader)
        c.kill(other)
        assert c.run_until(lambda: c.partition_state("t", 0).leader == -1, 10_000)
        c.advance(3_000)
        assert c.partition_state("t", 0).leader == -1 and c.image.is_alive(full)
        c.kill(full)
        c.restart(full)
        assert c.run_until(lambda: c.partition_state("t", 0).leader == full, 10_000)  # unclean, now that it can
    finally:
        c.close()
