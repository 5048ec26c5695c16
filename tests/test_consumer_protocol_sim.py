"""minikafka's own KafkaConsumer under both group protocols, in the simulation: a member dies,
and we look at who computed the new assignment and how long the survivors stopped fetching the
partitions they kept (classic: the stop-the-world rebalance; KIP-848's "consumer": not at all)."""

from __future__ import annotations

import pytest

from minikafka import Cluster, KafkaConsumer, KafkaProducer
from minikafka.errors import KafkaConfigurationError, KafkaError
from minikafka.topic import TopicPartition as TP

FAST = {"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
        "group.consumer.session.timeout.ms": 6000, "group.consumer.heartbeat.interval.ms": 500}
ROUND_MS = 100


@pytest.fixture
def cluster(tmp_path):
    with Cluster(3, seed=848, config=FAST, dir=tmp_path) as c:
        c.create_topic("t", 6, 3)
        yield c


def produce(cluster, n, start=0):
    p = KafkaProducer(bootstrap_servers=cluster)
    for i in range(start, start + n):
        p.send("t", key=f"k{i}".encode(), value=f"v{i}".encode())
    p.flush()
    p.close()


def members(cluster, protocol, n=3):
    return [KafkaConsumer("t", bootstrap_servers=cluster, group_id=f"g-{protocol}", group_protocol=protocol,
                          auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500)
            for _ in range(n)]


def poll_until(cluster, consumers, done, what, limit_ms=60_000, trace=None, got=None):
    """Poll every live consumer, ROUND_MS of simulated time each, until ``done()``; ``trace``
    gets (time, {node: assignment}) after each round; the records read go to ``got``."""
    start = cluster.world.now
    got = [] if got is None else got
    while not done():
        assert cluster.world.now - start < limit_ms, f"gave up waiting for {what}"
        for c in consumers:
            for tp, records in c.poll(timeout_ms=ROUND_MS).items():
                got.extend((tp.partition, r.offset, r.value) for r in records)
        if trace is not None:
            trace.append((cluster.world.now, {c.node_id: set(c.assignment()) for c in consumers}))
    return got


def owns_all(consumers):
    owned = [set(c.assignment()) for c in consumers]
    return sum(map(len, owned)) == 6 and set().union(*owned) == {TP("t", p) for p in range(6)}


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_dead_member_under_both_protocols(cluster, protocol):
    produce(cluster, 60)
    a, b, c = group = members(cluster, protocol)
    read: list = []
    poll_until(cluster, group, lambda: owns_all(group) and all(len(x.assignment()) == 2 for x in group),
               "the three members to own two partitions each", got=read)
    poll_until(cluster, group, lambda: len(read) >= 60, "the 60 records", got=read)
    assert sorted(v for _, _, v in read) == sorted(f"v{i}".encode() for i in range(60))
    for x in group:
        x.commit()
    before = {x.node_id: set(x.assignment()) for x in (b, c)}
    cluster.kill_consumer(a)
    killed_at = cluster.world.now
    trace: list = []
    survivors = [b, c]
    poll_until(cluster, survivors, lambda: owns_all(survivors), "the survivors to own all six", trace=trace)
    taken_over_ms = cluster.world.now - killed_at
    # How long did a survivor go without a partition it owned before the death?
    paused_ms = sum(ROUND_MS for _, owned in trace
                    if any(not before[node] <= owned[node] for node in before))

    # Who computed the assignment: the leader member (classic) or the broker (consumer).
    events = [text for x in survivors for _, text in x.coordinator.events]
    if protocol == "classic":
        assert any(text.startswith("assigned: ") for text in events)  # a client ran the assignor
        assert not any("the broker assigned" in text for text in events)
        assert paused_ms > 0  # the survivors gave up everything for the rebalance
    else:
        assert any(text.startswith("the broker assigned") for text in events)
        assert not any(text.startswith("assigned: ") for text in events)
        assert paused_ms == 0  # the survivors kept their partitions throughout
    # The dead member is noticed only when its session timeout (6000 ms) has passed since its
    # last heartbeat, which was at most one heartbeat interval (500 ms) before the kill.
    assert taken_over_ms >= 6000 - 500

    # The committed offsets: the new owners resume where the dead member had committed.
    after: list = []
    produce(cluster, 12, start=60)
    poll_until(cluster, survivors, lambda: len(after) >= 12, "the 12 new records", got=after)
    assert sorted(v for _, _, v in after) == sorted(f"v{i}".encode() for i in range(60, 72))


def test_group_protocol_is_checked():
    with pytest.raises(KafkaConfigurationError, match="group_protocol must be 'classic' or 'consumer'"):
        KafkaConsumer(bootstrap_servers="localhost:9092", group_id="g", group_protocol="eager")
    with pytest.raises(KafkaConfigurationError, match="group_remote_assignor is for group_protocol='consumer'"):
        KafkaConsumer(bootstrap_servers="localhost:9092", group_id="g", group_remote_assignor="range")


@pytest.mark.parametrize("static", [True, False], ids=["static", "dynamic"])
def test_a_restarted_static_member_gets_its_partitions_back_with_no_rebalance(cluster, static):
    # Classic protocol, JoinGroup v5's group.instance.id (KIP-345).
    a, b = group = [KafkaConsumer("t", bootstrap_servers=cluster, group_id=f"g-static-{static}",
                                  auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500,
                                  group_instance_id=f"reader-{name}" if static else None)
                    for name in ("a", "b")]
    poll_until(cluster, group, lambda: owns_all(group) and len(a.assignment()) == 3, "three partitions each")
    mine, theirs, generation = set(a.assignment()), set(b.assignment()), b.coordinator.generation
    cluster.kill_consumer(a)
    trace: list = []
    killed_at = cluster.world.now
    poll_until(cluster, [b], lambda: cluster.world.now >= killed_at + 1000, "a second of b's polls", trace=trace)
    cluster.restart_consumer(a)
    poll_until(cluster, group, lambda: owns_all(group) and a.assignment(), "a to own partitions again", trace=trace)
    coordinator = cluster.broker(b.coordinator.coordinator).group_coordinator.groups[f"g-static-{static}"]
    if static:
        assert set(a.assignment()) == mine  # its own partitions, at once
        assert b.coordinator.generation == coordinator.generation == generation  # nobody rebalanced
        assert all(owned[b.node_id] == theirs for _, owned in trace)  # b never stopped
    else:
        # A dynamic member comes back as a stranger: a new generation, everyone rebalances.
        assert b.coordinator.generation == coordinator.generation > generation
        assert any(owned[b.node_id] != theirs for _, owned in trace)


def test_group_instance_id_is_checked():
    with pytest.raises(KafkaConfigurationError, match="group_instance_id must be a non-empty str"):
        KafkaConsumer(bootstrap_servers="localhost:9092", group_id="g", group_instance_id="")


def test_over_tcp_the_own_client_says_it_cannot_speak_the_new_protocol_yet():
    with pytest.raises(KafkaConfigurationError, match="simulation only.*confluent-kafka"):
        KafkaConsumer(bootstrap_servers="localhost:9092", group_id="g", group_protocol="consumer")


def test_a_static_member_that_closes_keeps_its_partitions_for_its_next_instance(cluster):
    # KIP-848: close() of a static member sends MemberEpoch -2 ("I will be back"); a new consumer
    # with the same group_instance_id takes its place and partitions, and nobody else moves. Before
    # the fix, the closing member joined again by itself in the background (a new member id that
    # took its own place), so the next instance was refused with UNRELEASED_INSTANCE_ID.
    def named(name):
        return KafkaConsumer("t", bootstrap_servers=cluster, group_id="g-close", group_protocol="consumer",
                             auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500,
                             group_instance_id=name)
    a, b = named("reader-a"), named("reader-b")
    poll_until(cluster, [a, b], lambda: owns_all([a, b]) and len(a.assignment()) == 3, "three partitions each")
    mine, theirs = set(a.assignment()), set(b.assignment())
    a.close()
    closed_at, trace = cluster.world.now, []
    poll_until(cluster, [b], lambda: cluster.world.now >= closed_at + 1000, "a second of b's polls", trace=trace)
    again = named("reader-a")
    poll_until(cluster, [again, b], lambda: set(again.assignment()) == mine, "the new instance to own a's partitions",
               trace=trace)
    assert all(owned[b.node_id] == theirs for _, owned in trace)  # b never stopped, never got a's partitions
    assert not any("fenced" in text for _, text in again.coordinator.events)


def test_a_member_that_left_after_max_poll_interval_joins_again_at_its_next_poll(cluster):
    produce(cluster, 12)
    slow = KafkaConsumer("t", bootstrap_servers=cluster, group_id="g-slow", group_protocol="consumer",
                         auto_offset_reset="earliest", max_poll_interval_ms=3000, heartbeat_interval_ms=500)
    poll_until(cluster, [slow], lambda: len(slow.assignment()) == 6, "slow to own all six")
    stalled_at = cluster.world.now
    cluster.advance(10_000)  # the user thread does not poll: the heartbeat thread leaves, and stays out
    events = [text for t, text in slow.coordinator.events if t > stalled_at]
    assert any(text.startswith("poll() not called for more than") for text in events)
    assert not any(text.startswith("joined") for text in events)
    poll_until(cluster, [slow], lambda: any(text.startswith("joined") for t, text in slow.coordinator.events
                                            if t > stalled_at), "slow to join again after polling")
    assert len(slow.assignment()) == 6


def test_a_crashed_static_member_restarted_within_its_session_is_refused_under_the_new_protocol(cluster):
    # Kafka's throwIfInstanceIdIsUnreleased: only a member that left with -2 may be replaced; a
    # crashed one still holds its group_instance_id until its session times out (lecture 06, section 8).
    a, b = [KafkaConsumer("t", bootstrap_servers=cluster, group_id="g-crash", group_protocol="consumer",
                          auto_offset_reset="earliest", group_instance_id=name) for name in ("reader-a", "reader-b")]
    poll_until(cluster, [a, b], lambda: owns_all([a, b]) and len(a.assignment()) == 3, "three partitions each")
    cluster.kill_consumer(a)
    cluster.advance(1000)
    cluster.restart_consumer(a)
    with pytest.raises(KafkaError, match="UNRELEASED_INSTANCE_ID.*instance id 'reader-a' is in use"):
        poll_until(cluster, [a], lambda: False, "the refusal", limit_ms=5000)


def test_a_consumer_group_survives_its_coordinators_death(cluster):
    # KIP-848's group lives in __consumer_offsets (records with key versions 3-8): the partition's
    # next leader replays them and knows both members at their epochs, so their next heartbeats are
    # answered as if nothing happened: no fencing, no rejoin, no new group epoch, no partition moved.
    produce(cluster, 30)
    a, b = group = members(cluster, "consumer", n=2)
    poll_until(cluster, group, lambda: owns_all(group) and len(a.assignment()) == 3, "three partitions each")

    def coordinator():
        return a.coordinator.coordinator

    def described(broker):
        g = cluster.broker(broker).group_coordinator.groups["g-consumer"].consumer
        return g.group_epoch, g.assignment_epoch, {m.member_id: (m.member_epoch, frozenset(m.assigned))
                                                   for m in g.members.values()}

    # Stable: both members at the target's epoch, and that target's records written.
    poll_until(cluster, group, lambda: cluster.broker(coordinator()).group_coordinator.groups["g-consumer"].state
               == "Stable", "the group to be Stable")
    old = coordinator()
    before = described(old)
    owned = {x.node_id: set(x.assignment()) for x in group}
    partition = cluster.broker(old).group_coordinator.partition_for("g-consumer")
    cluster.kill(old)
    killed_at, trace = cluster.world.now, []

    def moved():
        leader = cluster.partition_state("__consumer_offsets", partition).leader
        return leader not in (-1, old) and coordinator() == leader
    poll_until(cluster, group, moved, "the members to find the new coordinator", trace=trace)
    new = coordinator()
    # Well past the session timeout (6 s): a member the new coordinator did not know would be
    # told UNKNOWN_MEMBER_ID at its first heartbeat, and one it did not hear from would be fenced.
    poll_until(cluster, group, lambda: cluster.world.now >= killed_at + 20_000, "20 s of polls", trace=trace)
    assert new != old
    assert described(new) == before  # the same group epoch, assignment epoch, members, epochs, partitions
    assert all(owned_now == owned for _, owned_now in trace)  # nobody lost or gained a partition
    events = [text for x in group for t, text in x.coordinator.events if t >= killed_at]
    assert not any(text.startswith(("fenced", "joined", "member epoch")) for text in events), events


# --- static membership checked as Kafka's ClassicGroup.validateMember does ----------------------------


def ask(coordinator, handler: str, request):
    """Hand ``request`` to the group coordinator's ``handler`` and return what it answers."""
    answers: list = []
    coordinator._send = lambda dst, message: answers.append(message)  # (an instance attribute, removed below)
    try:
        getattr(coordinator, handler)("probe", request)
    finally:
        del coordinator._send
    return answers


def static_pair(cluster, group):
    a, b = [KafkaConsumer("t", bootstrap_servers=cluster, group_id=group, auto_offset_reset="earliest",
                          session_timeout_ms=6000, heartbeat_interval_ms=500, group_instance_id=f"reader-{name}")
            for name in ("a", "b")]
    poll_until(cluster, [a, b], lambda: owns_all([a, b]) and len(a.assignment()) == 3, "three partitions each")
    return a, b


def test_a_request_naming_an_instance_id_must_come_from_its_current_member(cluster):
    from minikafka import messages as m

    a, b = static_pair(cluster, "g-fence")
    gc = cluster.broker(a.coordinator.coordinator).group_coordinator
    gen, a_id, b_id = a.coordinator.generation, a.coordinator.member_id, b.coordinator.member_id
    group = gc.groups["g-fence"]
    assert {mid: x.group_instance_id for mid, x in group.members.items()} == {a_id: "reader-a", b_id: "reader-b"}

    def heartbeat(member_id, instance_id):
        [answer] = ask(gc, "heartbeat", m.HeartbeatRequest(1, "g-fence", gen, member_id, instance_id))
        return answer.error

    assert heartbeat(a_id, "reader-a") == m.NO_ERROR
    assert heartbeat(a_id, None) == m.NO_ERROR  # no instance id: the member id alone is checked
    assert heartbeat(a_id, "reader-b") == m.FENCED_INSTANCE_ID  # reader-b is b's
    assert heartbeat("zombie", "reader-a") == m.FENCED_INSTANCE_ID  # an old process of reader-a
    assert heartbeat(a_id, "reader-x") == m.UNKNOWN_MEMBER_ID  # no such instance
    [sync] = ask(gc, "sync_group", m.SyncGroupRequest(1, "g-fence", gen, "zombie", (), "reader-a"))
    assert sync.error == m.FENCED_INSTANCE_ID
    [commit] = ask(gc, "commit_offsets", m.OffsetCommitRequest(
        1, "g-fence", gen, "zombie", (m.OffsetCommitPartition("t", 0, 1), m.OffsetCommitPartition("t", 1, 1)),
        "reader-a"))
    assert [e for _, _, e in commit.partitions] == [m.FENCED_INSTANCE_ID] * 2
    [join] = ask(gc, "join_group", m.JoinGroupRequest(1, "g-fence", 6000, 300000, "zombie", "consumer",
                                                      group.members[a_id].protocols, group_instance_id="reader-a"))
    assert join.error == m.FENCED_INSTANCE_ID
    [leave] = ask(gc, "leave_group", m.LeaveGroupRequest(1, "g-fence", "zombie", "reader-a"))
    assert leave.error == m.FENCED_INSTANCE_ID
    assert gc.groups["g-fence"].generation == gen and len(group.members) == 2  # none of that moved anything
    [described] = ask(gc, "describe_groups", m.DescribeGroupsRequest(1, ("g-fence",)))[0].groups
    assert sorted((x.member_id, x.group_instance_id) for x in described.members) == sorted(
        [(a_id, "reader-a"), (b_id, "reader-b")])
    # LeaveGroup v3 by instance id alone (an admin tool): b is removed and the group rebalances.
    [leave] = ask(gc, "leave_group", m.LeaveGroupRequest(1, "g-fence", "", "reader-b"))
    assert leave.error == m.NO_ERROR and b_id not in group.members
    poll_until(cluster, [a, b], lambda: owns_all([a, b]) and a.coordinator.generation > gen, "the rebalance")


def test_a_zombie_with_a_taken_instance_id_stops_with_fenced_instance_id(cluster):
    a, b = static_pair(cluster, "g-zombie")
    twin = KafkaConsumer("t", bootstrap_servers=cluster, group_id="g-zombie", auto_offset_reset="earliest",
                         session_timeout_ms=6000, heartbeat_interval_ms=500, group_instance_id="reader-a")
    poll_until(cluster, [twin, b], lambda: set(twin.assignment()) == set(a.assignment()), "the twin to take a's place")
    with pytest.raises(KafkaError, match="FENCED_INSTANCE_ID.*'reader-a' is used by a newer member"):
        poll_until(cluster, [a], lambda: False, "a to learn it was replaced", limit_ms=5000)


def test_static_members_survive_a_coordinator_failover_without_a_rebalance(cluster):
    # The instance ids are written to __consumer_offsets with the members: the next coordinator
    # knows who is static, so their heartbeats (which carry the instance id) are still accepted.
    a, b = static_pair(cluster, "g-failover")
    gen, old = a.coordinator.generation, a.coordinator.coordinator
    cluster.kill(old)
    poll_until(cluster, [a, b], lambda: a.coordinator.coordinator not in (None, old)
               and b.coordinator.coordinator not in (None, old), "both to find the new coordinator")
    new = cluster.broker(a.coordinator.coordinator).group_coordinator.groups["g-failover"]
    assert {x.group_instance_id for x in new.members.values()} == {"reader-a", "reader-b"}
    settle = cluster.world.now
    poll_until(cluster, [a, b], lambda: cluster.world.now >= settle + 3000, "a few heartbeats to the new coordinator")
    assert a.coordinator.generation == b.coordinator.generation == new.generation == gen
    assert owns_all([a, b])


# --- the rebalance listener: Kafka's contract under both protocols ---------------------------------------


class Calls:
    def __init__(self):
        self.calls = []

    def on_partitions_revoked(self, revoked):
        self.calls.append(("revoked", sorted(tp.partition for tp in revoked)))

    def on_partitions_assigned(self, assigned):
        self.calls.append(("assigned", sorted(tp.partition for tp in assigned)))


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_the_listener_hears_what_moved(cluster, protocol):
    # KIP-848 (ConsumerMembershipManager): revoked gets only what left, assigned only what is new,
    # and is called even when nothing is. Classic eager: everything is revoked before the rejoin,
    # so assigned gets the whole new assignment.
    listeners = {"a": Calls(), "b": Calls()}

    def member(name):
        c = KafkaConsumer(bootstrap_servers=cluster, group_id=f"g-listen-{protocol}", group_protocol=protocol,
                          auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500)
        c.subscribe(["t"], listener=listeners[name])
        return c

    a = member("a")
    poll_until(cluster, [a], lambda: len(a.assignment()) == 6, "a to own all six")
    assert listeners["a"].calls == [("assigned", [0, 1, 2, 3, 4, 5])]
    b = member("b")
    poll_until(cluster, [a, b], lambda: owns_all([a, b]) and len(b.assignment()) == 3, "three partitions each")
    kept = sorted(tp.partition for tp in a.assignment())
    moved = sorted(tp.partition for tp in b.assignment())
    assert listeners["b"].calls == [("assigned", moved)]
    if protocol == "consumer":
        assert listeners["a"].calls[1:] == [("revoked", moved), ("assigned", [])]
    else:
        assert listeners["a"].calls[1:] == [("revoked", [0, 1, 2, 3, 4, 5]), ("assigned", kept)]


def test_kip_848_a_heartbeat_from_a_replaced_static_member_is_fenced(cluster):
    # Kafka's throwIfInstanceIdIsFenced: once the next instance took reader-a's place, the old
    # member id's heartbeats (epoch > 0, instance id reader-a) are answered FENCED_INSTANCE_ID.
    from minikafka import messages as m

    def named(name):
        return KafkaConsumer("t", bootstrap_servers=cluster, group_id="g-zombie-848", group_protocol="consumer",
                             auto_offset_reset="earliest", group_instance_id=name)
    a, b = named("reader-a"), named("reader-b")
    poll_until(cluster, [a, b], lambda: owns_all([a, b]) and len(a.assignment()) == 3, "three partitions each")
    old_id, old_epoch, coordinator = a.coordinator.member_id, a.coordinator.member_epoch, a.coordinator.coordinator
    a.close()  # epoch -2: reader-a will be back
    again = named("reader-a")
    poll_until(cluster, [again, b], lambda: owns_all([again, b]) and again.assignment(), "the next instance")
    gc = cluster.broker(coordinator).group_coordinator

    def heartbeat(member_id, instance_id):
        [answer] = ask(gc, "consumer_group_heartbeat", m.ConsumerGroupHeartbeatRequest(
            1, "g-zombie-848", member_id, old_epoch, instance_id))
        return answer.error, answer.error_message

    error, why = heartbeat(old_id, "reader-a")
    assert error == m.FENCED_INSTANCE_ID and f"was fenced by member {again.coordinator.member_id!r}" in why
    assert heartbeat(old_id, "reader-x")[0] == m.UNKNOWN_MEMBER_ID
    assert heartbeat(old_id, None)[0] == m.UNKNOWN_MEMBER_ID  # (no instance id: the member id alone)
