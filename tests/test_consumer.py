"""KafkaConsumer and the group coordinator, in the simulated cluster: groups, rebalances,
offsets and their storage in __consumer_offsets."""

from __future__ import annotations

import pytest

from minikafka import Cluster, ConsumerRebalanceListener, KafkaConsumer, KafkaProducer, OffsetAndMetadata
from minikafka.broker.group_coordinator import OFFSETS_TOPIC, java_string_hash, partition_for
from minikafka.broker.group_metadata import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_key,
    describe_record,
)
from minikafka.errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaConfigurationError,
    NoOffsetForPartitionError,
)
from minikafka.records import MemoryRecords
from minikafka.topic import TopicPartition as TP

FAST = {"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0}
GROUP_CONF = dict(session_timeout_ms=6000, heartbeat_interval_ms=2000)


@pytest.fixture
def cluster(tmp_path):
    with Cluster(3, seed=11, config=FAST, dir=tmp_path) as c:
        c.create_topic("t", 4, 3)
        yield c


def produce(cluster, n, topic="t", start=0):
    p = KafkaProducer(bootstrap_servers=cluster)
    for i in range(start, start + n):
        p.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
    p.flush()
    p.close()


def consumer(cluster, *topics, **kw):
    conf = {"bootstrap_servers": cluster, "auto_offset_reset": "earliest", **GROUP_CONF, **kw}
    return KafkaConsumer(*topics, **conf)


def drain(consumers, rounds=20, timeout_ms=200):
    """Poll every live consumer in turn; returns {node_id: [(partition, offset, value)]}."""
    got = {c.node_id: [] for c in consumers}
    for _ in range(rounds):
        for c in consumers:
            if c.alive:
                for tp, records in c.poll(timeout_ms=timeout_ms).items():
                    got[c.node_id].extend((tp.partition, r.offset, r.value) for r in records)
    return got


def settle(consumers, partitions=4, limit_ms=60_000):
    """Poll until the group is stable and owns every partition (a later joiner makes the
    first members rebalance: they learn it from a heartbeat)."""
    cluster = consumers[0]._cluster
    start = cluster.now
    while cluster.now < start + limit_ms:
        for c in consumers:
            c.poll(timeout_ms=100)
        co = [c._node.coordinator for c in consumers]
        if all(x.state == "STABLE" and not x.need_rejoin for x in co) and \
                sum(len(c.assignment()) for c in consumers) == partitions:
            return
    raise AssertionError("the group did not settle")


# --- the coordinator's bookkeeping ----------------------------------------------------------------------


def test_group_partition_is_javas_string_hash():
    # Values from Java: "hello".hashCode() == 99162322, "".hashCode() == 0,
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE (which Kafka's Utils.abs maps to 0).
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert java_string_hash("é-ü") == ((ord("é") * 31 + ord("-")) * 31 + ord("ü"))


def test_offsets_topic_records_round_trip():
    key = OffsetKey("g", "t", 3)
    assert decode_key(key.encode()) == key
    assert decode_key(GroupKey("g").encode()) == GroupKey("g")
    value = OffsetValue(42, 7, "meta", 1234)
    assert OffsetValue.decode(value.encode()) == value
    group = GroupValue("consumer", 5, "range", "m-1", 99, (
        MemberValue("m-1", "c1", "/h", 300000, 10000, b"sub", b"asg"),))
    assert GroupValue.decode(group.encode()) == group
    assert describe_record(key.encode(), value.encode()) == (
        "[g,t,3]::OffsetAndMetadata(offset=42, leaderEpoch=7, metadata='meta', commitTimestamp=1234)")
    assert describe_record(key.encode(), None) == "[g,t,3]::NULL"
    # Kafka's layout: version 1, then the strings with int16 lengths, then the int32 partition.
    assert key.encode() == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x03"



def test_consumer_group_records_round_trip_in_kafkas_layout():
    from minikafka.broker.group_metadata import (
        ConsumerGroupCurrentMemberAssignmentValue as Current,
        ConsumerGroupKey,
        ConsumerGroupMemberMetadataValue as MemberMeta,
        ConsumerGroupMetadataValue as Meta,
        ConsumerGroupPartitionMetadataValue as Partitions,
        ConsumerGroupTargetAssignmentMemberValue as Target,
        key_version,
    )
    tid = "AAECAwQFBgcICQoLDA0ODw"  # the UUID 00010203-0405-0607-0809-0a0b0c0d0e0f, Kafka's text form
    for value in (Meta(5), Partitions(5, ((tid, "t", 6),)), MemberMeta("i-1", "c1", "/h", ("t",), 300000, "uniform"),
                  Target(((tid, (0, 2)),)), Current(5, 4, 1, ((tid, (0, 1, 2)),), ((tid, (1,)),))):
        assert type(value).decode(value.encode()) == value
    key = ConsumerGroupKey(8, "g", "m")
    assert ConsumerGroupKey.decode(key.encode()) == key and key_version(key.encode()) == 8
    # Keys are non-flexible (int16 lengths); values flexible: compact arrays, uuids, empty tag sections.
    assert key.encode() == b"\x00\x08\x00\x01g\x00\x01m"
    assert Meta(5).encode() == b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x00"
    assert Target(((tid, (0, 2)),)).encode() == (b"\x00\x00" + b"\x02" + bytes(range(16)) + b"\x03"
                                                 + b"\x00\x00\x00\x00\x00\x00\x00\x02" + b"\x00" + b"\x00")
    with pytest.raises(ValueError, match="needs member id"):
        ConsumerGroupKey(5, "g")
    assert describe_record(ConsumerGroupKey(3, "g").encode(), Meta(5).encode()) == "[g]::ConsumerGroupMetadataValue(epoch=5)"
    assert describe_record(key.encode(), None) == "[g,m]::ConsumerGroupCurrentMemberAssignment::NULL"


# --- groups ---------------------------------------------------------------------------------------------------


def test_two_consumers_split_the_partitions_and_read_everything_once(tmp_path):
    # Kafka's group.initial.rebalance.delay.ms (3 s): two consumers starting together join
    # one generation, instead of the first taking everything and giving half back.
    cluster = Cluster(3, seed=11, config={"offsets.topic.num.partitions": 3}, dir=tmp_path)
    cluster.create_topic("t", 4, 3)
    produce(cluster, 40)
    a, b = consumer(cluster, "t", group_id="g"), consumer(cluster, "t", group_id="g")
    got = drain([a, b])
    assert sorted(a.assignment()) == [TP("t", 0), TP("t", 1)]  # range: contiguous halves
    assert sorted(b.assignment()) == [TP("t", 2), TP("t", 3)]
    everything = got[a.node_id] + got[b.node_id]
    assert len(everything) == 40 and len(set(everything)) == 40
    assert {p for p, _, _ in got[a.node_id]} == {0, 1}
    # The coordinator's view agrees: one group, Stable, two members, generation 1.
    coordinator = cluster.broker(a._node.coordinator.coordinator).group_coordinator
    group = coordinator.groups["g"]
    assert (group.state, group.generation, len(group.members), group.protocol) == ("Stable", 1, 2, "range")


def test_a_consumer_shows_its_group_state_machine_through_a_public_property(cluster):
    # What the lectures read (notebooks 06 and 07): the member's view of its group, the same
    # facts the coordinator's broker holds.
    produce(cluster, 8)
    a, b = consumer(cluster, "t", group_id="g"), consumer(cluster, "t", group_id="g")
    settle([a, b])
    group = cluster.broker(a.coordinator.coordinator).group_coordinator.groups["g"]
    assert {a.coordinator.member_id, b.coordinator.member_id} == set(group.members)
    assert a.coordinator.generation == b.coordinator.generation == group.generation
    assert any("generation" in text for _, text in a.coordinator.events)
    loner = consumer(cluster)
    loner.assign([TP("t", 0)])
    assert loner.coordinator is None  # no group_id: no group state
    cluster.kill_consumer(a)
    with pytest.raises(IllegalStateError, match="crashed"):
        a.coordinator


def test_two_groups_each_read_every_record(cluster):
    produce(cluster, 20)
    g1, g2 = consumer(cluster, "t", group_id="billing"), consumer(cluster, "t", group_id="maps")
    got = drain([g1, g2])
    assert len(got[g1.node_id]) == 20 and len(got[g2.node_id]) == 20


def test_more_consumers_than_partitions_leaves_some_idle(cluster):
    cluster.create_topic("six", 6, 1)
    group = [consumer(cluster, "six", group_id="g") for _ in range(8)]
    cluster.run_until(lambda: False, 0)
    for _ in range(10):
        for c in group:
            c.poll(timeout_ms=100)
    sizes = sorted(len(c.assignment()) for c in group)
    assert sizes == [0, 0, 1, 1, 1, 1, 1, 1]
    owned = [tp for c in group for tp in c.assignment()]
    assert len(owned) == len(set(owned)) == 6


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "sticky"])
def test_every_assignor_gives_each_partition_to_one_member(cluster, strategy):
    group = [consumer(cluster, "t", group_id="g", partition_assignment_strategy=(strategy,)) for _ in range(3)]
    drain(group, rounds=8)
    owned = sorted(tp for c in group for tp in c.assignment())
    assert owned == [TP("t", p) for p in range(4)]
    assert group[0]._node.coordinator.protocol == strategy


def test_a_dead_consumer_is_noticed_after_the_session_timeout(cluster):
    produce(cluster, 40)
    a, b = consumer(cluster, "t", group_id="g"), consumer(cluster, "t", group_id="g")
    settle([a, b])
    drain([a, b], rounds=3)
    a.commit()
    b.commit()
    killed_at = cluster.now
    cluster.kill_consumer(a)
    # Before the session timeout the group still counts a as a member: b keeps its half.
    while cluster.now < killed_at + 5000:
        b.poll(timeout_ms=200)
    assert sorted(b.assignment()) == [TP("t", 2), TP("t", 3)]
    produce(cluster, 8, start=40)
    got = drain([b], rounds=40)
    assert sorted(b.assignment()) == [TP("t", p) for p in range(4)]
    took_over = [e for e in b._node.coordinator.events if "got t-0, t-1, t-2, t-3" in e[1]]
    assert took_over and took_over[0][0] - killed_at >= 6000  # not before session.timeout.ms
    # b resumed a's partitions from a's commits: only the 8 new records, nothing twice.
    assert sorted(v for _, _, v in got[b.node_id]) == sorted(f"v{i}".encode() for i in range(40, 48))


def test_a_restarted_consumer_rejoins_and_resumes_from_committed_offsets(cluster):
    produce(cluster, 20)
    a = consumer(cluster, "t", group_id="g", enable_auto_commit=False)
    got = drain([a], rounds=5)
    assert len(got[a.node_id]) == 20
    a.commit({TP("t", 0): OffsetAndMetadata(2, "", -1)})  # pretend we only finished two of t-0
    cluster.kill_consumer(a)
    with pytest.raises(IllegalStateError, match="crashed"):
        a.poll()
    cluster.advance(7000)
    cluster.restart_consumer(a)
    got = drain([a], rounds=10)
    t0 = sorted(o for p, o, _ in got[a.node_id] if p == 0)
    assert t0 and t0[0] == 2  # from the committed offset, not from the beginning
    assert {p for p, _, _ in got[a.node_id]} == {0, 1, 2, 3}  # the rest: nothing committed -> earliest


def test_max_poll_interval_evicts_a_consumer_that_stops_polling(cluster):
    produce(cluster, 20)
    slow = consumer(cluster, "t", group_id="g", max_poll_interval_ms=10000, enable_auto_commit=False)
    fast = consumer(cluster, "t", group_id="g", max_poll_interval_ms=10000)
    settle([slow, fast])
    assert len(slow.assignment()) == 2
    # slow is "processing" for 20 s: its heartbeats go on, but it does not call poll().
    start = cluster.now
    while cluster.now < start + 20000:
        fast.poll(timeout_ms=500)
    assert sorted(fast.assignment()) == [TP("t", p) for p in range(4)]
    assert any("max_poll_interval_ms" in text for _, text in slow._node.coordinator.events)
    # Its commit for the old generation is refused: the partitions are someone else's now.
    with pytest.raises(CommitFailedError):
        slow.commit()
    settle([slow, fast])  # polling again: it rejoins
    assert len(slow.assignment()) == 2 and len(fast.assignment()) == 2


def test_rebalance_listener_sees_revocations_and_assignments(cluster):
    calls = []

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            calls.append(("revoked", sorted(p.partition for p in revoked)))

        def on_partitions_assigned(self, assigned):
            calls.append(("assigned", sorted(p.partition for p in assigned)))

    a = consumer(cluster, group_id="g")
    a.subscribe(["t"], listener=Listener())
    drain([a], rounds=3)
    b = consumer(cluster, "t", group_id="g")
    drain([a, b], rounds=10)
    assert calls == [("assigned", [0, 1, 2, 3]), ("revoked", [0, 1, 2, 3]), ("assigned", [0, 1])]


def test_pattern_subscription_picks_up_a_new_topic(cluster):
    a = consumer(cluster, group_id="g", metadata_max_age_ms=1000)
    a.subscribe(pattern="^trucks.*")
    drain([a], rounds=3)
    assert a.assignment() == set()
    cluster.create_topic("trucks_gps", 2, 1)
    drain([a], rounds=15)
    assert sorted(a.assignment()) == [TP("trucks_gps", 0), TP("trucks_gps", 1)]
    assert a.subscription() == {"trucks_gps"}


# --- offsets -----------------------------------------------------------------------------------------------------


def test_commit_sync_async_and_committed(cluster):
    produce(cluster, 12)
    a = consumer(cluster, "t", group_id="g", enable_auto_commit=False)
    drain([a], rounds=5)
    positions = {tp: a.position(tp) for tp in a.assignment()}
    assert sum(positions.values()) == 12
    assert all(a.committed(tp) is None for tp in positions)
    a.commit()
    assert {tp: a.committed(tp) for tp in positions} == positions
    results = []
    future = a.commit_async({TP("t", 0): 0}, callback=lambda offsets, error: results.append((offsets, error)))
    a.poll(timeout_ms=100)
    assert future.succeeded() and results == [({TP("t", 0): OffsetAndMetadata(0, "", -1)}, None)]
    assert a.committed(TP("t", 0)) == 0
    assert a.committed(TP("t", 0), metadata=True) == OffsetAndMetadata(0, "", -1)


def test_auto_commit_commits_what_earlier_polls_returned(cluster):
    produce(cluster, 10)
    auto = consumer(cluster, "t", group_id="auto", auto_commit_interval_ms=1000)
    manual = consumer(cluster, "t", group_id="manual", enable_auto_commit=False)
    start = cluster.now
    while cluster.now < start + 4000:
        auto.poll(timeout_ms=200)
        manual.poll(timeout_ms=200)
    assert sum(auto.committed(tp) or 0 for tp in sorted(auto.assignment())) == 10
    assert all(manual.committed(tp) is None for tp in manual.assignment())


def test_auto_offset_reset(cluster):
    produce(cluster, 8)
    late = consumer(cluster, "t", group_id="late", auto_offset_reset="latest")
    assert drain([late], rounds=5)[late.node_id] == []
    produce(cluster, 4, start=8)
    assert sorted(v for _, _, v in drain([late], rounds=5)[late.node_id]) == [b"v10", b"v11", b"v8", b"v9"]
    strict = consumer(cluster, "t", group_id="strict", auto_offset_reset="none")
    with pytest.raises(NoOffsetForPartitionError, match="auto_offset_reset='none'"):
        drain([strict], rounds=5)


def test_assign_seek_and_no_group(cluster):
    produce(cluster, 20)
    c = consumer(cluster)
    assert c.config["enable_auto_commit"] is False  # no group: nowhere to commit
    c.assign([TP("t", 1)])
    end = c.end_offsets([TP("t", 1)])[TP("t", 1)]
    c.seek(TP("t", 1), end - 2)
    got = drain([c], rounds=3)[c.node_id]
    assert [o for _, o, _ in got] == [end - 2, end - 1]
    c.seek_to_beginning()
    assert c.position(TP("t", 1)) == 0
    c.seek_to_end(TP("t", 1))
    assert c.position(TP("t", 1)) == end
    with pytest.raises(KafkaConfigurationError, match="group_id"):
        c.commit()
    manual = KafkaConsumer(bootstrap_servers=cluster, group_id="x")
    manual.assign([TP("t", 0)])
    with pytest.raises(IllegalStateError, match="mutually exclusive"):
        manual.subscribe(["t"])


def test_max_poll_records_and_iteration(cluster):
    produce(cluster, 30)
    c = consumer(cluster, "t", group_id="g", max_poll_records=7, consumer_timeout_ms=2000)
    sizes = []
    for _ in range(10):
        records = c.poll(timeout_ms=300)
        if records:
            sizes.append(sum(len(rs) for rs in records.values()))
    assert max(sizes) <= 7 and sum(sizes) == 30
    produce(cluster, 5, start=30)
    values = [r.value for r in c]  # stops after consumer_timeout_ms of simulated silence
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(30, 35))


def test_value_deserializer(cluster):
    produce(cluster, 3)
    c = consumer(cluster, "t", group_id="g", value_deserializer=lambda b: b.decode().upper())
    values = [v for _, _, v in drain([c], rounds=5)[c.node_id]]
    assert sorted(values) == ["V0", "V1", "V2"]


def test_bad_configuration_is_refused_by_name(cluster):
    with pytest.raises(KafkaConfigurationError, match="group.id"):
        KafkaConsumer(bootstrap_servers=cluster, **{"group.id": "g"})
    with pytest.raises(KafkaConfigurationError, match="auto_offset_reset"):
        KafkaConsumer(bootstrap_servers=cluster, auto_offset_reset="beginning")
    with pytest.raises(KafkaConfigurationError, match="heartbeat_interval_ms"):
        KafkaConsumer(bootstrap_servers=cluster, session_timeout_ms=6000, heartbeat_interval_ms=6000)
    with pytest.raises(KafkaConfigurationError, match="bad bootstrap_servers entry ':9092'"):
        KafkaConsumer(bootstrap_servers=":9092")  # a real address is host:port (tests/test_client_tcp.py)
    with pytest.raises(KafkaConfigurationError, match="known"):
        KafkaConsumer(bootstrap_servers=cluster, partition_assignment_strategy=("fair",))
    with pytest.raises(KafkaConfigurationError, match="needs a group_id"):
        KafkaConsumer("t", bootstrap_servers=cluster)


# --- where the offsets live ---------------------------------------------------------------------------------


def offsets_records(cluster, group):
    """Every record of the group's partition of __consumer_offsets, on its leader."""
    p = partition_for(group, 3)
    leader = cluster.partition_state(OFFSETS_TOPIC, p).leader
    log = cluster.replica(leader, OFFSETS_TOPIC, p).log
    lines, offset = [], log.log_start_offset
    while offset < log.log_end_offset:  # a read returns batches of one segment at most
        batches = list(MemoryRecords(bytes(log.read(offset, 1024 * 1024))).batches())
        if not batches:
            break
        for batch in batches:
            lines.extend(describe_record(r.key, r.value) for r in batch.records() if r.offset >= offset)
        offset = batches[-1].last_offset + 1
    return lines


def test_commits_live_in_consumer_offsets_and_survive_the_coordinator(cluster):
    produce(cluster, 20)
    a = consumer(cluster, "t", group_id="g", enable_auto_commit=False)
    drain([a], rounds=5)
    a.commit()
    lines = offsets_records(cluster, "g")
    assert any(line.startswith("[g]::GroupMetadata(protocolType=consumer, generation=1") for line in lines)
    committed = {tp: a.committed(tp) for tp in sorted(a.assignment())}
    for tp, offset in committed.items():
        assert any(line.startswith(f"[g,t,{tp.partition}]::OffsetAndMetadata(offset={offset},") for line in lines)
    # The coordinator dies: the next leader of that partition replays it.
    old = a.coordinator_id  # the public read of a._node.coordinator.coordinator
    assert old == a._node.coordinator.coordinator == cluster.partition_state(OFFSETS_TOPIC, partition_for("g", 3)).leader
    cluster.kill(old)
    drain([a], rounds=100)  # the controller notices after broker.session.timeout.ms
    new = a.coordinator_id
    assert new is not None and new != old
    assert a.group_events == a._node.coordinator.events and any("generation 1" in e for _, e in a.group_events)
    assert {tp: a.committed(tp) for tp in committed} == committed
    # Same member, same generation: the new coordinator knew the group, no rebalance needed.
    group = cluster.broker(new).group_coordinator.groups["g"]
    assert group.generation == 1 and a._node.coordinator.member_id in group.members


def test_consumer_offsets_is_compacted(tmp_path):
    config = {**FAST, "offsets.topic.segment.bytes": 2048, "log.cleaner.backoff.ms": 1000}
    with Cluster(1, seed=3, config=config, dir=tmp_path) as c:
        c.create_topic("t", 1, 1)
        produce(c, 1)
        a = consumer(c, "t", group_id="g", enable_auto_commit=False)
        drain([a], rounds=3)
        for i in range(200):
            a.commit({TP("t", 0): i})
        c.advance(3000)
        lines = offsets_records(c, "g")
        commits = [line for line in lines if line.startswith("[g,t,0]")]
        assert len(commits) < 50  # 200 commits written, the cleaner kept far fewer
        assert commits[-1].startswith("[g,t,0]::OffsetAndMetadata(offset=199,")
        log = c.replica(1, OFFSETS_TOPIC, partition_for("g", 3)).log
        assert len(log.segments) > 1 and (log.dir / "cleaner-offset-checkpoint").exists()
        assert a.committed(TP("t", 0)) == 199


def test_offsets_of_an_empty_group_expire_after_retention(tmp_path):
    config = {**FAST, "offsets.retention.minutes": 1, "offsets.retention.check.interval.ms": 10_000}
    with Cluster(1, seed=3, config=config, dir=tmp_path) as c:
        c.create_topic("t", 1, 1)
        produce(c, 3)
        a = consumer(c, "t", group_id="g")
        drain([a], rounds=3)
        a.close()  # commits, then leaves: the group is empty from now on
        probe = consumer(c, group_id="g")
        probe.assign([TP("t", 0)])
        assert probe.committed(TP("t", 0)) == 3
        c.advance(75_000)
        assert probe.committed(TP("t", 0)) is None
        assert any(line == "[g,t,0]::NULL" for line in offsets_records(c, "g"))


def test_same_seed_same_group_history(tmp_path):
    def run(d):
        with Cluster(3, seed=5, config=FAST, dir=d) as c:
            c.create_topic("t", 4, 3)
            produce(c, 10)
            group = [consumer(c, "t", group_id="g") for _ in range(3)]
            drain(group, rounds=5)
            c.kill_consumer(group[1])
            drain(group, rounds=30)
            return [(c.node_id, c._node.coordinator.events) for c in group if c.alive]
    assert run(tmp_path / "a") == run(tmp_path / "b")


def test_consumer_follows_a_new_leader_and_backs_off_from_the_dead_one(cluster):
    produce(cluster, 20)
    c = consumer(cluster, "t", group_id="g")
    first = drain([c], rounds=5)[c.node_id]
    assert len(first) == 20
    leader = cluster.partition_state("t", 0).leader
    cluster.kill(leader)
    produce(cluster, 20, start=20)
    fetches_before = c._node.fetcher.fetch_requests
    # The long poll parked on the dead broker is only given up after request_timeout_ms +
    # fetch_max_wait_ms (30.5 s), as when a machine dies without closing its connections.
    got = drain([c], rounds=200)[c.node_id]
    assert sorted(v for _, _, v in got) == sorted(f"v{i}".encode() for i in range(20, 40))
    # ~40 simulated seconds went by; without a back-off a dead leader is asked every 2 ms.
    assert c._node.fetcher.fetch_requests - fetches_before < 1_000


def test_coordinator_killed_during_a_rebalance_resets_the_parked_join(tmp_path):
    # A JoinGroup waits on the coordinator for the whole rebalance; when that broker's process
    # dies its connections are reset, so the member looks for the new coordinator at once
    # instead of after its JoinGroup timeout (max_poll_interval_ms + 5 s = 305 s).
    with Cluster(3, seed=7, config=FAST, dir=tmp_path) as c:
        c.create_topic("t", partitions=2, replication_factor=2)
        a = consumer(c, "t", group_id="g")
        drain([a], rounds=5, timeout_ms=50)
        b = consumer(c, "t", group_id="g")
        b.poll(timeout_ms=20)
        assert b._node.coordinator.state == "JOINING"
        coordinator = b._node.coordinator.coordinator
        killed_at = c.now
        c.kill(coordinator)
        settle([a, b], partitions=2)
        assert c.now - killed_at < 60_000
        assert b._node.coordinator.coordinator != coordinator
        assert any(f"marking coordinator {coordinator} dead" in text for _, text in b._node.coordinator.events)


def test_a_power_loss_resets_no_connection(tmp_path):
    with Cluster(3, seed=7, config=FAST, dir=tmp_path) as c:
        c.create_topic("t", partitions=2, replication_factor=2)
        a = consumer(c, "t", group_id="g")
        drain([a], rounds=5, timeout_ms=50)
        b = consumer(c, "t", group_id="g")
        b.poll(timeout_ms=20)
        coordinator = b._node.coordinator.coordinator
        c.kill(coordinator, power_loss=True)
        for _ in range(40):
            b.poll(timeout_ms=250)
        # Silence: 10 s later b still waits on the dead machine.
        assert b._node.coordinator.state == "JOINING" and b._node.coordinator.coordinator == coordinator


def test_poll_does_not_spin_when_an_auto_commit_falls_due_during_a_rebalance(cluster):
    conf = dict(group_id="g", session_timeout_ms=10000, heartbeat_interval_ms=1000, auto_commit_interval_ms=1000)
    a = consumer(cluster, "t", **conf)
    while not a.assignment():
        a.poll(timeout_ms=100)
    b = consumer(cluster, "t", **conf)
    b.poll(timeout_ms=0)  # the group rebalances
    cluster.advance(3000)  # a must rejoin, and its auto commit is due: only the rejoin can happen
    start = cluster.now
    a.poll(timeout_ms=1000)  # used to loop for ever with simulated time frozen
    assert cluster.now >= start + 1000 or a.assignment()


def test_sticky_keeps_the_survivors_partitions_in_a_live_group(tmp_path):
    with Cluster(3, seed=6, config=FAST, dir=tmp_path) as c:
        c.create_topic("six", 6, 3)
        group = [consumer(c, "six", group_id="g", partition_assignment_strategy=("sticky",)) for _ in range(3)]
        settle(group, partitions=6)
        before = {k.node_id: set(k.assignment()) for k in group}
        c.kill_consumer(group[0])
        settle(group[1:], partitions=6)
        for k in group[1:]:  # each survivor kept what it had and took a share of the dead one's
            assert before[k.node_id] < set(k.assignment()) and len(k.assignment()) == 3


def test_commit_runs_finished_async_callbacks_and_a_simple_commit_into_an_active_group_says_why(cluster):
    produce(cluster, 4)
    member = consumer(cluster, "t", group_id="g", enable_auto_commit=False)
    drain([member], rounds=5)
    calls = []
    member.commit_async({TP("t", 0): 0}, callback=lambda offsets, error: calls.append(error))
    cluster.advance(50)
    member.commit({TP("t", 0): 0})
    assert calls == [None]
    outsider = consumer(cluster, group_id="g")
    outsider.assign([TP("t", 0)])
    with pytest.raises(CommitFailedError, match="has active members"):
        outsider.commit({TP("t", 0): 1})


def test_fetch_settings_shape_the_fetches(cluster):
    produce(cluster, 40)

    def fetches(c, ms):
        before, start = c._node.fetcher.fetch_requests, cluster.now
        got = 0
        while cluster.now < start + ms:
            got += sum(len(rs) for rs in c.poll(timeout_ms=100).values())
        return c._node.fetcher.fetch_requests - before, got

    # Long polls: an idle consumer asks each leader about once per fetch_max_wait_ms.
    idle = consumer(cluster, "t", group_id="idle", fetch_max_wait_ms=1000)
    drain([idle], rounds=10)
    requests, _ = fetches(idle, 10_000)
    leaders = len({cluster.partition_state("t", p).leader for p in range(4)})
    assert 8 * leaders <= requests <= 12 * leaders
    # max_partition_fetch_bytes: a fetch still returns one whole batch per partition, but no
    # more; with one record per batch it takes a fetch per record.
    p = KafkaProducer(bootstrap_servers=cluster)
    for i in range(12):
        p.send("t", value=b"x" * 100, partition=0).get(timeout=10)  # one batch each

    def fetches_until_all(c):
        got, deadline = 0, cluster.now + 60_000
        while got < 52 and cluster.now < deadline:
            got += sum(len(rs) for rs in c.poll(timeout_ms=100).values())
        return c._node.fetcher.fetch_requests, got

    small_requests, small_got = fetches_until_all(consumer(cluster, "t", group_id="small", max_partition_fetch_bytes=1))
    big_requests, big_got = fetches_until_all(consumer(cluster, "t", group_id="big"))
    assert small_got == big_got == 52
    assert small_requests >= big_requests + 10
    # fetch_min_bytes larger than anything there: the broker holds each fetch for fetch_max_wait_ms.
    patient = consumer(cluster, "t", group_id="patient", fetch_min_bytes=10**6, fetch_max_wait_ms=2000)
    drain([patient], rounds=30)
    requests, _ = fetches(patient, 10_000)
    assert requests <= 6 * leaders
