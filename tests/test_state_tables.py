"""States as tables: Raft's client (``minikafka.raft.states``) and a consumer group
(``minikafka.group_state``) move only where their table says, and a move the table does not
list fails on the lookup, naming the state and the event, before anything changed."""

from __future__ import annotations

import pytest

import minikafka.raft.client as raft_client
from minikafka import Cluster, KafkaConsumer, KafkaProducer
from minikafka.broker.group_coordinator import Group
from minikafka.checker.raft import RaftHarness
from minikafka.clients import admin
from minikafka.errors import IllegalStateError
from minikafka.group_state import GroupEvent, GroupState
from minikafka.group_state import TRANSITIONS as GROUP_TRANSITIONS
from minikafka.group_state import next_state as group_next_state
from minikafka.group_state import transition_table as group_table
from minikafka.raft.states import TRANSITIONS as RAFT_TRANSITIONS
from minikafka.raft.states import VOTER_STATES, RaftEvent, RaftState
from minikafka.raft.states import next_state as raft_next_state
from minikafka.raft.states import transition_table as raft_table
from minikafka.tools import consumer_groups

# --- Raft ----------------------------------------------------------------------------------------------


def test_a_raft_move_the_table_does_not_list_names_the_state_and_the_event():
    with pytest.raises(IllegalStateError, match="event 'votes won' is not allowed in state 'follower'"):
        raft_next_state(RaftState.FOLLOWER, RaftEvent.VOTES_WON)
    with pytest.raises(IllegalStateError, match="'election timeout' is not allowed in state 'observer'"):
        raft_next_state(RaftState.OBSERVER, RaftEvent.ELECTION_TIMEOUT)
    assert raft_next_state(RaftState.CANDIDATE, RaftEvent.VOTES_WON) == RaftState.LEADER


def test_the_raft_table_leads_only_voters_to_voter_states_and_leaves_observers_alone():
    assert RAFT_TRANSITIONS[RaftState.OBSERVER] == {}
    assert {to for row in RAFT_TRANSITIONS.values() for to in row.values()} <= set(VOTER_STATES)
    # Only a winning candidate leads; only a leader resigns.
    assert [s for s in RaftState if RAFT_TRANSITIONS[s].get(RaftEvent.VOTES_WON) == RaftState.LEADER] == \
        [RaftState.CANDIDATE]
    assert [s for s in RaftState if RaftEvent.RESIGN in RAFT_TRANSITIONS[s]] == [RaftState.LEADER]
    rows = raft_table()
    assert ("candidate", "votes won", "leader") in rows
    assert len(rows) == sum(len(r) for r in RAFT_TRANSITIONS.values())


def test_raft_states_print_as_their_plain_names():
    assert repr(RaftState.LEADER) == "'leader'" and f"{RaftState.LEADER}" == "leader"
    assert str({"state": RaftState.LEADER}) == "{'state': 'leader'}"


def test_a_raft_client_asked_for_a_move_its_state_forbids_raises_and_stays_put(tmp_path):
    h = RaftHarness(tmp_path, voters=3, seed=1)
    try:
        leader = h.wait_for_leader()
        assert h.settle()
        follower = next(n for n in h.voters if n != leader)
        client = h.client(follower)
        epoch = client.epoch
        with pytest.raises(IllegalStateError, match="event 'votes won' is not allowed in state 'follower'"):
            client._become_leader()
        assert (client.state, client.epoch, client.leader_id) == (RaftState.FOLLOWER, epoch, leader)
        with pytest.raises(IllegalStateError, match="'resign' is not allowed in state 'follower'"):
            client._resign("a test")
        assert client.state == RaftState.FOLLOWER
    finally:
        h.close()


def test_every_move_of_an_election_and_a_leader_crash_is_a_row_of_the_table(tmp_path, monkeypatch):
    seen: list[tuple[RaftState, RaftEvent, RaftState]] = []

    def recording(state, event):
        new = RAFT_TRANSITIONS[state][event]  # a KeyError here is a move outside the table
        seen.append((state, event, new))
        return new

    monkeypatch.setattr(raft_client, "next_state", recording)
    h = RaftHarness(tmp_path, voters=3, seed=1)
    try:
        leader = h.wait_for_leader()
        h.crash(leader)
        second = h.wait_for_leader()
        h.restart(leader)
        assert h.settle()
        assert second != leader and h.client(leader).state == RaftState.FOLLOWER
    finally:
        h.close()
    events = {e for _, e, _ in seen}
    assert {RaftEvent.START_NOTHING_KNOWN, RaftEvent.ELECTION_TIMEOUT, RaftEvent.PRE_VOTES_WON,
            RaftEvent.VOTES_WON, RaftEvent.START_LED} <= events
    assert (RaftState.CANDIDATE, RaftEvent.VOTES_WON, RaftState.LEADER) in seen


# --- consumer groups ------------------------------------------------------------------------------------


def test_a_group_move_the_table_does_not_list_names_the_group_the_state_and_the_event():
    with pytest.raises(IllegalStateError, match="group 'g': event 'assignment stored' is not allowed in state 'Empty'"):
        group_next_state(GroupState.EMPTY, GroupEvent.ASSIGNMENT_STORED, "g")
    group = Group("g", 0)
    group.transition(GroupEvent.CREATED, 5)
    with pytest.raises(IllegalStateError, match="'join phase over' is not allowed in state 'Empty'"):
        group.transition(GroupEvent.JOIN_PHASE_OVER, 9)
    assert (group.state, group.state_timestamp) == (GroupState.EMPTY, 5)
    group.transition(GroupEvent.REBALANCE, 10)
    group.transition(GroupEvent.JOIN_PHASE_OVER, 11)
    group.transition(GroupEvent.ASSIGNMENT_STORED, 12)
    assert (group.state, group.state_timestamp) == ("Stable", 12)


def test_the_group_table_is_kafkas_classic_one_plus_loading():
    previous = {s: {f for f, row in GROUP_TRANSITIONS.items() for e, t in row.items()
                    if t == s and f != s and e not in (GroupEvent.LOADED_EMPTY, GroupEvent.LOADED_WITH_MEMBERS,
                                                       GroupEvent.OFFSETS_LOADED, GroupEvent.TXN_OFFSETS_COMMITTED)}
                for s in GroupState}
    # Kafka's ClassicGroupState valid previous states, for the moves a running group makes.
    assert previous[GroupState.PREPARING_REBALANCE] == {GroupState.EMPTY, GroupState.STABLE,
                                                        GroupState.COMPLETING_REBALANCE}
    assert previous[GroupState.COMPLETING_REBALANCE] == {GroupState.PREPARING_REBALANCE}
    assert previous[GroupState.STABLE] == {GroupState.COMPLETING_REBALANCE}
    assert previous[GroupState.EMPTY] == {GroupState.PREPARING_REBALANCE}
    assert previous[GroupState.DEAD] == {GroupState.EMPTY}
    assert ("CompletingRebalance", "assignment stored", "Stable") in group_table()


def test_the_admin_client_and_the_tool_name_group_states_from_the_one_enum():
    assert admin.GROUP_STATES == tuple(GroupState)
    assert all(isinstance(s, GroupState) for s in consumer_groups.ACTIVE_STATES_OK)
    assert admin._state_name("preparing-rebalance") is GroupState.PREPARING_REBALANCE


def test_a_groups_life_in_a_cluster_moves_only_along_the_table(tmp_path, monkeypatch):
    import minikafka.broker.group_coordinator as gc

    seen: list[tuple[GroupState, GroupEvent]] = []

    def recording(state, event, group=""):
        seen.append((state, event))
        return GROUP_TRANSITIONS[state][event]

    monkeypatch.setattr(gc, "next_state", recording)
    config = {"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0}
    with Cluster(3, seed=11, config=config, dir=tmp_path) as cluster:
        cluster.create_topic("t", 2, 3)
        producer = KafkaProducer(bootstrap_servers=cluster)
        for i in range(10):
            producer.send("t", value=f"v{i}".encode())
        producer.flush()
        conf = dict(bootstrap_servers=cluster, group_id="g", auto_offset_reset="earliest",
                    session_timeout_ms=6000, heartbeat_interval_ms=2000)
        a = KafkaConsumer("t", **conf)
        for _ in range(20):
            a.poll(timeout_ms=100)
        b = KafkaConsumer("t", **conf)
        for _ in range(30):
            a.poll(timeout_ms=100)
            b.poll(timeout_ms=100)
        assert len(a.assignment()) == len(b.assignment()) == 1
        a.close()
        b.close()
    assert seen[:4] == [(GroupState.EMPTY, GroupEvent.CREATED), (GroupState.EMPTY, GroupEvent.REBALANCE),
                        (GroupState.PREPARING_REBALANCE, GroupEvent.JOIN_PHASE_OVER),
                        (GroupState.COMPLETING_REBALANCE, GroupEvent.ASSIGNMENT_STORED)]
    assert (GroupState.STABLE, GroupEvent.REBALANCE) in seen  # b joined a stable group
    assert seen[-1] == (GroupState.PREPARING_REBALANCE, GroupEvent.NO_MEMBER_LEFT)  # both left
