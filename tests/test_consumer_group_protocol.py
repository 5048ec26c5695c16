"""KIP-848's consumer group protocol on the broker (ConsumerGroupHeartbeat), in the simulation:
the broker computes the assignment, a partition is revoked from its old owner before the new one
gets it, epochs fence stale members, a silent member is fenced after its session timeout."""

from __future__ import annotations

import pytest

from minikafka import Cluster
from minikafka.broker.consumer_group import ConsumerMember, reconcile
from minikafka.group_state import ConsumerGroupState, MemberState, consumer_group_state
from minikafka.messages import (
    FENCED_MEMBER_EPOCH,
    GROUP_ID_NOT_FOUND,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_REQUEST,
    NO_ERROR,
    STALE_MEMBER_EPOCH,
    UNKNOWN_MEMBER_ID,
    UNRELEASED_INSTANCE_ID,
    UNSUPPORTED_ASSIGNOR,
    INVALID_GROUP_ID,
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    JoinGroupRequest,
    ListGroupsRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
)
from sim_helpers import request

SESSION_MS = 6_000


# --- the rule, alone -------------------------------------------------------------------------------------

def member(assigned=(), epoch=1, state=MemberState.STABLE, revoking=()):
    return ConsumerMember("m", None, "c", "h", 60_000, ("t",), member_epoch=epoch, state=state,
                          assigned=frozenset(assigned), revoking=frozenset(revoking))


def test_reconcile_revokes_before_it_moves_on():
    m = reconcile(member({("t", 0), ("t", 1)}), frozenset({("t", 0)}), 2, frozenset(), None)
    assert (m.state, m.member_epoch, m.assigned, m.revoking) == (
        MemberState.UNREVOKED_PARTITIONS, 1, {("t", 0)}, {("t", 1)})
    assert reconcile(m, frozenset({("t", 0)}), 2, frozenset(), {("t", 0), ("t", 1)}) is m  # not yet given up
    done = reconcile(m, frozenset({("t", 0)}), 2, frozenset(), {("t", 0)})
    assert (done.state, done.member_epoch, done.previous_member_epoch, done.assigned) == (
        MemberState.STABLE, 2, 1, {("t", 0)})


def test_reconcile_withholds_partitions_another_member_still_owns():
    m = reconcile(member(), frozenset({("t", 0), ("t", 1)}), 2, frozenset({("t", 1)}), None)
    assert (m.state, m.member_epoch, m.assigned) == (MemberState.UNRELEASED_PARTITIONS, 2, {("t", 0)})
    m = reconcile(m, frozenset({("t", 0), ("t", 1)}), 2, frozenset(), frozenset({("t", 0)}))
    assert (m.state, m.member_epoch, m.previous_member_epoch, m.assigned) == (
        MemberState.STABLE, 2, 1, {("t", 0), ("t", 1)})


def test_group_state_is_a_view_of_the_epochs():
    stable = (3, MemberState.STABLE)
    assert consumer_group_state({}, 3, 3) == ConsumerGroupState.EMPTY
    assert consumer_group_state({"a": stable}, 4, 3) == ConsumerGroupState.ASSIGNING
    assert consumer_group_state({"a": stable, "b": (2, MemberState.STABLE)}, 3, 3) == ConsumerGroupState.RECONCILING
    assert consumer_group_state({"a": stable, "b": (3, MemberState.UNRELEASED_PARTITIONS)}, 3, 3) == \
        ConsumerGroupState.RECONCILING
    assert consumer_group_state({"a": stable}, 3, 3) == ConsumerGroupState.STABLE


# --- the broker -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    c = Cluster(brokers=1, seed=848, config={"group.consumer.session.timeout.ms": SESSION_MS,
                                              "group.consumer.heartbeat.interval.ms": 1_000})
    c.create_topic("t", partitions=4, replication_factor=1)
    # The first FindCoordinator makes __consumer_offsets; wait until the coordinator answers.
    assert c.run_until(lambda: request(c, 1, lambda k: FindCoordinatorRequest(k, "g")).error == NO_ERROR, 30_000)
    yield c
    c.close()


def heartbeat(c, group, member_id="", epoch=0, owned=None, topics=None, instance_id=None, assignor=None,
              rebalance_timeout_ms=None):
    if epoch == 0:
        topics = ("t",) if topics is None else topics
        owned = () if owned is None else owned
        rebalance_timeout_ms = 30_000 if rebalance_timeout_ms is None else rebalance_timeout_ms
    return request(c, 1, lambda k: ConsumerGroupHeartbeatRequest(  # broker 1 coordinates all groups
        k, group, member_id, epoch, instance_id, -1 if rebalance_timeout_ms is None else rebalance_timeout_ms,
        topics, assignor, None if owned is None else tuple(sorted(owned)), client_id="test"))


def test_the_broker_assigns_and_moves_a_partition_only_once_its_owner_gave_it_up(cluster):
    c = cluster
    a = heartbeat(c, "g1")
    assert (a.error, a.member_epoch, a.assignment) == (NO_ERROR, 1, (("t", 0), ("t", 1), ("t", 2), ("t", 3)))
    b = heartbeat(c, "g1")  # group epoch 2: the target splits the partitions
    assert (b.error, b.member_epoch, b.assignment) == (NO_ERROR, 2, ())  # A still owns them: nothing yet
    a2 = heartbeat(c, "g1", a.member_id, 1, owned=a.assignment)
    assert a2.member_epoch == 1 and len(a2.assignment) == 2  # revoke two, at the old epoch
    kept = set(a2.assignment)
    b2 = heartbeat(c, "g1", b.member_id, 2, owned=())
    assert b2.assignment is None  # nothing changed for B: A has not confirmed
    a3 = heartbeat(c, "g1", a.member_id, 1, owned=kept)  # A confirms: it moves to epoch 2
    assert (a3.member_epoch, a3.assignment) == (2, None)
    b3 = heartbeat(c, "g1", b.member_id, 2, owned=())
    assert set(b3.assignment) == {("t", p) for p in range(4)} - kept
    described = request(c, 1, lambda k: DescribeGroupsRequest(k, ("g1",))).groups[0]
    assert (described.state, described.group_type, described.protocol_type, described.protocol) == (
        "Stable", "consumer", "consumer", "uniform")
    listed = request(c, 1, lambda k: ListGroupsRequest(k))
    assert ("consumer", ("g1", "consumer", "Stable")) in zip(listed.group_types, listed.groups)

    # B goes silent: it is fenced after the session timeout and A gets its partitions back.
    c.advance(SESSION_MS // 2)
    heartbeat(c, "g1", a.member_id, 2, owned=kept)
    c.advance(SESSION_MS // 2 + 1)
    a4 = heartbeat(c, "g1", a.member_id, 2, owned=kept)
    assert (a4.member_epoch, set(a4.assignment)) == (3, {("t", p) for p in range(4)})
    gone = heartbeat(c, "g1", b.member_id, 2, owned=())
    assert gone.error == UNKNOWN_MEMBER_ID


def test_epochs_fence_and_commits_carry_the_member_epoch(cluster):
    c = cluster
    a = heartbeat(c, "g2")
    stale = heartbeat(c, "g2", a.member_id, 7, owned=a.assignment)
    assert stale.error == FENCED_MEMBER_EPOCH  # and the member is gone: it must rejoin
    assert heartbeat(c, "g2", a.member_id, 1, owned=a.assignment).error == UNKNOWN_MEMBER_ID
    a = heartbeat(c, "g2")
    b = heartbeat(c, "g2")  # group epoch moves on; A keeps its epoch until it reconciles

    def commit(member_id, epoch):
        return request(c, 1, lambda k: OffsetCommitRequest(k, "g2", epoch, member_id, (
            OffsetCommitPartition("t", 0, 5),))).partitions[0][2]

    assert commit(a.member_id, a.member_epoch) == NO_ERROR
    assert commit(a.member_id, a.member_epoch + 5) == FENCED_MEMBER_EPOCH
    assert commit(b.member_id, b.member_epoch - 1) == STALE_MEMBER_EPOCH
    assert commit("nobody", 1) == UNKNOWN_MEMBER_ID
    assert commit("", -1) == UNKNOWN_MEMBER_ID  # a simple commit while the group has members


def test_bad_heartbeats_are_refused_with_a_reason(cluster):
    c = cluster
    r = heartbeat(c, "g3", topics=None, epoch=0, rebalance_timeout_ms=-1)
    assert r.error == INVALID_REQUEST and "RebalanceTimeoutMs" in r.error_message
    r = heartbeat(c, "g3", assignor="cooperative")
    assert r.error == UNSUPPORTED_ASSIGNOR and "uniform" in r.error_message
    r = heartbeat(c, "g3", "m", -3, owned=())
    assert r.error == INVALID_REQUEST and "MemberEpoch -3" in r.error_message


def test_a_group_keeps_its_type_while_it_has_members(cluster):
    c = cluster
    heartbeat(c, "g4")
    join = request(c, 1, lambda k: JoinGroupRequest(k, "g4", 10_000, 10_000, "", "consumer",
                                                     (("range", b""),), require_known_member_id=False))
    assert join.error == INCONSISTENT_GROUP_PROTOCOL
    join = request(c, 1, lambda k: JoinGroupRequest(k, "g5", 10_000, 10_000, "", "consumer",
                                                     (("range", b""),), require_known_member_id=False),
                   timeout_ms=20_000)
    assert join.error == NO_ERROR
    r = heartbeat(c, "g5")
    assert r.error == GROUP_ID_NOT_FOUND and "classic" in r.error_message


def test_a_static_member_that_leaves_with_minus_2_gets_its_partitions_back(cluster):
    c = cluster
    a = heartbeat(c, "g6", instance_id="truck-reader-1")
    b = heartbeat(c, "g6", instance_id="truck-reader-2")
    a = heartbeat(c, "g6", a.member_id, a.member_epoch, owned=a.assignment)  # told to revoke two
    a = heartbeat(c, "g6", a.member_id, a.member_epoch, owned=a.assignment)  # confirms: epoch 2
    b = heartbeat(c, "g6", b.member_id, b.member_epoch, owned=())
    mine = set(b.assignment)
    assert len(mine) == 2
    assert heartbeat(c, "g6", instance_id="truck-reader-2").error == UNRELEASED_INSTANCE_ID  # still in use
    left = heartbeat(c, "g6", b.member_id, -2, owned=None, instance_id="truck-reader-2")
    assert left.error == NO_ERROR
    back = heartbeat(c, "g6", instance_id="truck-reader-2")  # a new process, the same instance id
    assert back.error == NO_ERROR and set(back.assignment) == mine and back.member_id != b.member_id
    # ... and nobody else was disturbed: A's next heartbeat changes nothing.
    assert heartbeat(c, "g6", a.member_id, a.member_epoch, owned=a.assignment).assignment == a.assignment


def test_the_admin_client_lists_the_group_type(cluster):
    from minikafka.clients.admin import KafkaAdminClient
    c = cluster
    heartbeat(c, "g7")
    admin = KafkaAdminClient(bootstrap_servers=c)
    listed = {g["group_id"]: g for g in admin.list_groups()}
    assert (listed["g7"]["group_type"], listed["g7"]["protocol_type"]) == ("consumer", "consumer")
    assert listed["g5"]["group_type"] == "classic"
    assert [g["group_id"] for g in admin.list_groups(types_filter=["consumer"], states_filter=["reconciling"])] \
        == [g for g, info in sorted(listed.items()) if info["group_type"] == "consumer"
            and info["group_state"] == "Reconciling"]


def test_a_member_that_keeps_a_revoked_partition_past_its_rebalance_timeout_is_fenced(cluster):
    c = cluster
    a = heartbeat(c, "g8", rebalance_timeout_ms=2_000)
    heartbeat(c, "g8")  # a second member: A must give two partitions up
    told = heartbeat(c, "g8", a.member_id, 1, owned=a.assignment)
    assert len(told.assignment) == 2
    c.advance(1_000)
    assert heartbeat(c, "g8", a.member_id, 1, owned=a.assignment).error == NO_ERROR  # still holding on
    c.advance(1_001)
    assert heartbeat(c, "g8", a.member_id, 1, owned=a.assignment).error == UNKNOWN_MEMBER_ID


def describe(c, *groups, broker=1):
    return request(c, broker, lambda k: ConsumerGroupDescribeRequest(k, groups)).groups


def test_consumer_group_describe_shows_epochs_and_the_target_while_a_member_reconciles(cluster):
    c = cluster
    a = heartbeat(c, "d1")
    b = heartbeat(c, "d1")  # group epoch 2: the target gives B two of A's partitions
    [d] = describe(c, "d1")
    assert (d.error, d.state, d.group_epoch, d.assignment_epoch, d.assignor) == (NO_ERROR, "Reconciling", 2, 2,
                                                                                 "uniform")
    by_id = {m.member_id: m for m in d.members}
    da, db = by_id[a.member_id], by_id[b.member_id]
    assert (da.member_epoch, da.assignment, da.client_id, da.subscribed_topics) == (
        1, a.assignment, "test", ("t",))  # A still owns all four, at its old epoch
    assert len(da.target_assignment) == 2 and set(da.target_assignment) | set(db.target_assignment) == set(
        a.assignment)
    assert (db.member_epoch, db.assignment) == (2, ())  # B waits for A to give them up
    # A gives them up, B takes them: both at epoch 2, each owning its target.
    kept = heartbeat(c, "d1", a.member_id, 1, owned=a.assignment).assignment  # told to give two up
    heartbeat(c, "d1", a.member_id, 1, owned=kept)  # done: A moves to epoch 2
    heartbeat(c, "d1", b.member_id, 2, owned=())
    [d] = describe(c, "d1")
    assert d.state == "Stable"
    assert all(m.member_epoch == 2 and m.assignment == m.target_assignment for m in d.members)
    assert {m.member_id: m.assignment for m in d.members}[a.member_id] == kept


def test_consumer_group_describe_refuses_classic_unknown_and_empty_group_ids_as_kafka_does(cluster):
    c = cluster
    join = request(c, 1, lambda k: JoinGroupRequest(k, "d-classic", 10_000, 10_000, "", "consumer",
                                                     (("range", b""),), require_known_member_id=False),
                   timeout_ms=20_000)
    assert join.error == NO_ERROR
    classic, unknown, empty = describe(c, "d-classic", "d-nobody", "")
    assert (classic.error, classic.error_message) == (GROUP_ID_NOT_FOUND, "Group d-classic is not a consumer group.")
    assert (unknown.error, unknown.error_message) == (GROUP_ID_NOT_FOUND, "Group d-nobody not found.")
    assert empty.error == INVALID_GROUP_ID


def test_the_admin_client_and_the_tool_describe_a_consumer_group_with_kafka_4s_columns(cluster):
    from minikafka.clients.admin import KafkaAdminClient
    from minikafka.errors import GroupIdNotFoundError
    from minikafka.tools.consumer_groups import ConsumerGroupCommand
    from minikafka.topic import TopicPartition as TP
    c = cluster
    a = heartbeat(c, "d2")
    b = heartbeat(c, "d2")
    admin = KafkaAdminClient(bootstrap_servers=c)
    [d] = admin.consumer_group_describe(["d2"])
    assert (d.group_id, d.state, d.group_epoch, d.assignment_epoch, d.assignor, d.coordinator) == (
        "d2", "Reconciling", 2, 2, "uniform", 1)
    mine = {m.member_id: m for m in d.members}
    assert mine[a.member_id].assignment == tuple(TP(t, p) for t, p in a.assignment)
    assert (mine[b.member_id].member_epoch, len(mine[b.member_id].target_assignment)) == (2, 2)
    with pytest.raises(GroupIdNotFoundError, match="Group d-classic is not a consumer group"):
        admin.consumer_group_describe(["d-classic"])

    tool = ConsumerGroupCommand(admin)
    members = tool.describe_members("d2", verbose=True)
    lines = members.table().splitlines()
    assert lines[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
                                "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
    row_a = next(r for r in members.rows if r.consumer_id == a.member_id)
    assert (row_a.num_partitions, row_a.current_epoch, row_a.target_epoch) == (4, 1, 2)
    assert len(row_a.target_assignment) == 2
    text_a = next(line for line in lines if a.member_id in line).split()
    assert text_a[-4:] == ["1", "t(0,1,2,3)", "2", "t(" + ",".join(str(tp.partition) for tp in row_a.target_assignment) + ")"]
    state = tool.describe_state("d2", verbose=True)
    assert state.table().splitlines()[-2].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                                     "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert state.table().splitlines()[-1].split()[3:] == ["uniform", "Reconciling", "2", "2", "2"]
    # Without --verbose, and for a classic group, the tool's columns stay the classic ones.
    assert "CURRENT-EPOCH" not in tool.describe_members("d2").table()
    assert "ASSIGNMENT" in tool.describe_members("d-classic", verbose=True).table().splitlines()[-2]
    assert tool.describe_state("d-classic", verbose=True).table().splitlines()[-1].split()[-3:-1] == ["-", "-"]
