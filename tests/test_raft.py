"""The Raft quorum (KIP-595 with KIP-996 pre-vote): ``minikafka.raft`` and its checker.

Each test runs a small quorum in the simulated world (``RaftHarness``: a host per node
wrapping a ``KafkaRaftClient`` and a recording listener, logs under ``tmp_path``) and pins
one promise: one leader, commits reach every listener in order, a crashed leader is
replaced in a higher epoch without losing what committed, divergent uncommitted records
are truncated, votes survive restarts, a minority makes no progress and its leader
resigns, a quorum of one commits at once, restarts replay the log. Then the checker: a
seeded fault campaign finds nothing, and fabricated bad histories are caught.
"""

from __future__ import annotations

import json

import pytest

from minikafka.checker.raft import (
    ASSERTION,
    COMMITTED_CHANGED,
    COMMITTED_LOST,
    DELIVERY_ORDER,
    DOUBLE_VOTE,
    FAST_RAFT_CONFIG,
    TWO_LEADERS,
    Commit,
    LeaderChange,
    RaftHarness,
    RaftHistory,
    check_raft,
    raft_campaign,
    run_raft_schedule,
)
from minikafka.errors import KafkaError
from minikafka.messages import FENCED_LEADER_EPOCH, NO_ERROR, NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH
from minikafka.node import StateMachine
from minikafka.raft import (
    FOLLOWER,
    LEADER,
    LEADER_CHANGE_KEY,
    OBSERVER,
    QUORUM_STATE_FILE,
    RAFT_MESSAGES,
    RESIGNED,
    VOTED,
    KafkaRaftClient,
    NotLeaderError,
    RaftFetchRequest,
    RaftFetchResponse,
    VoteRequest,
    VoteResponse,
)


@pytest.fixture
def quorum(tmp_path):
    made = []

    def make(voters=3, observers=0, seed=0, config=None):
        h = RaftHarness(tmp_path / f"q{len(made)}", voters=voters, observers=observers, seed=seed, config=config)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def leaders(h):
    return [n for n in h.voters if h.alive(n) and h.client(n).state == LEADER]


def user_values(records):
    return [r.value for r in records if r.key != LEADER_CHANGE_KEY]


# --- elections and replication ----------------------------------------------------------------------


def test_one_leader_is_elected_and_appends_reach_every_listener_in_order(quorum):
    h = quorum(voters=3, observers=2, seed=1)
    leader = h.wait_for_leader()
    assert leaders(h) == [leader]
    epoch = h.client(leader).epoch
    assert epoch == 1
    for i in range(5):
        h.append(f"v-{i}".encode(), f"w-{i}".encode())
    assert h.settle()
    expected = [f"{c}-{i}".encode() for i in range(5) for c in "vw"]
    for n in h.nodes:
        records = h.records(n)
        assert [r.offset for r in records] == list(range(len(records)))  # in order, once each
        assert user_values(records) == expected
        first = records[0]
        assert first.key == LEADER_CHANGE_KEY and first.epoch == epoch
        assert json.loads(first.value) == {"leaderId": leader, "leaderEpoch": epoch, "voters": [1, 2, 3]}
        assert h.client(n).leader_id == leader
        assert (leader, epoch) in h.node(n).listener.leader_changes
        assert h.client(n).read_committed() == records  # what a notebook reads back
        assert h.client(n).read_committed(3) == records[3:]
    assert h.client(101).state == h.client(102).state == OBSERVER
    assert sorted(h.client(n).state for n in h.voters) == [FOLLOWER, FOLLOWER, LEADER]


def test_observers_never_count_for_the_high_watermark(quorum):
    h = quorum(voters=3, observers=2, seed=15)
    leader = h.wait_for_leader()
    assert h.settle()
    hw = h.client(leader).high_watermark
    for n in h.voters:
        if n != leader:
            h.crash(n)
    h.append(b"only-observers-have-it")
    assert h.run_until(lambda: all(h.client(o).log_end_offset == h.client(leader).log_end_offset for o in h.observers), 1_000)
    assert h.client(leader).high_watermark == hw  # two observers are not a majority of voters
    assert all(h.client(o).high_watermark == hw for o in h.observers)


def test_a_parked_fetch_is_answered_as_soon_as_the_leader_appends(quorum):
    h = quorum(voters=3, observers=1, seed=16)
    h.wait_for_leader()
    assert h.settle()
    h.run(250)  # every fetcher is now parked in the middle of its 500 ms long poll
    t0 = h.world.now
    h.append(b"now")
    assert h.settle()
    assert h.world.now - t0 <= 10  # a few network hops, not a long poll
    assert user_values(h.records(101)) == [b"now"]


def test_a_new_leader_commits_older_records_only_with_one_of_its_own_epoch(quorum):
    # Raft's commit rule (the "figure 8" case): records of earlier epochs that a majority holds
    # are not committed by counting replicas; the leader's own LeaderChange must get there too.
    h = quorum(voters=3, seed=17)
    h.wait_for_leader()
    h.append(b"a", b"b")
    assert h.settle()
    h.crash(h.leader())
    leader = h.wait_for_leader()
    c = h.client(leader)
    start = c.epoch_start_offset
    assert start == 3
    followers = [n for n in h.voters if n != leader]
    c.high_watermark = 0  # as if nothing before the epoch were known to be committed
    for f in followers:
        c._replicas[f].log_end_offset = start  # everything before the LeaderChange, not it
    assert not c._maybe_advance_high_watermark() and c.high_watermark == 0
    c._replicas[followers[0]].log_end_offset = start + 1
    assert c._maybe_advance_high_watermark() and c.high_watermark == start + 1


def test_the_leader_tells_its_listener_it_leads_only_after_replaying_what_came_before(quorum):
    h = quorum(voters=3, seed=2)
    first = h.wait_for_leader()
    h.append(b"a")
    assert h.settle()
    h.crash(first)
    second = h.wait_for_leader()
    listener = h.node(second).listener
    assert h.settle()
    # (second, epoch) came once every record before its epoch had been delivered
    epoch = h.client(second).epoch
    at = listener.leader_changes.index((second, epoch))
    assert listener.delivered_at_change[at] >= h.client(second).epoch_start_offset > 0
    assert listener.leader_changes[:at] and all(leader is None for leader, e in listener.leader_changes[:at] if e == epoch)


def test_append_refuses_on_a_non_leader_and_never_calls_the_listener_inside(quorum):
    h = quorum(voters=1, seed=3)
    h.wait_for_leader()
    assert h.settle()
    before = len(h.records(1))
    offset = h.append(b"x")
    assert len(h.records(1)) == before  # committed at once, but delivered by a later event
    h.run(1)
    assert h.records(1)[-1].offset == offset
    h2 = quorum(voters=3, seed=3)
    leader = h2.wait_for_leader()
    follower = next(n for n in h2.voters if n != leader)
    with pytest.raises(NotLeaderError) as e:
        h2.append(b"nope", node=follower)
    assert isinstance(e.value, KafkaError) and e.value.errno == NOT_LEADER_OR_FOLLOWER


def test_a_crashed_leader_is_replaced_in_a_higher_epoch_and_nothing_committed_is_lost(quorum):
    h = quorum(voters=3, observers=1, seed=4)
    old = h.wait_for_leader()
    old_epoch = h.client(old).epoch
    h.append(b"a", b"b")
    assert h.settle()
    h.crash(old)
    new = h.wait_for_leader()
    assert new != old and h.client(new).epoch > old_epoch
    h.append(b"c")
    assert h.settle()
    for n in h.nodes:
        if h.alive(n):
            assert user_values(h.records(n)) == [b"a", b"b", b"c"]
    assert h.restart(old).client.state == RESIGNED  # it led its old epoch: never again
    assert h.settle()
    assert user_values(h.records(old)) == [b"a", b"b", b"c"]  # replayed from its log, then caught up
    assert h.client(old).state == FOLLOWER and h.client(old).leader_id == new


def test_a_follower_with_divergent_uncommitted_records_truncates_to_the_new_leaders_log(quorum):
    h = quorum(voters=3, seed=5)
    old = h.wait_for_leader()
    h.append(b"committed")
    assert h.settle()
    others = [n for n in h.voters if n != old]
    h.partition([old], others)
    for i in range(3):  # appended in the old epoch, never committed: no majority can fetch them
        h.append(f"doomed-{i}".encode(), node=old)
    assert h.client(old).log_end_offset > h.client(others[0]).log_end_offset
    new = h.wait_for_leader()
    while new == old:  # the old one still thinks it leads until check-quorum
        h.run(100)
        new = h.leader()
    h.append(b"after", node=new)
    h.run(3_000)
    assert h.client(old).state != LEADER  # check-quorum: it resigned on its own
    h.heal()
    assert h.settle()
    logs = h.final_logs()
    assert logs[old] == logs[new]  # the doomed batches are gone from the old leader's log
    for n in h.voters:
        assert user_values(h.records(n)) == [b"committed", b"after"]


def test_votes_are_persisted_before_the_answer_and_survive_a_restart(quorum, tmp_path):
    h = quorum(voters=3, seed=6)
    # Only node 1 runs a client: nodes 2 and 3 are recorders we speak for.
    for n in (2, 3):
        h.crash(n)
        h.world.add(n, lambda n=n: Recorder(n))
    box = h.world.nodes[2]
    h.world.deliver(2, 1, VoteRequest(1, 5, 2, -1, 0))
    h.run(10)
    assert box.got[-1][1] == VoteResponse(1, NO_ERROR, -1, 5, True)
    state = json.loads((tmp_path / "q0" / "node-1" / KafkaRaftClient.METADATA_DIR / QUORUM_STATE_FILE).read_text())
    assert (state["leaderEpoch"], state["votedId"], state["leaderId"]) == (5, 2, -1)
    assert {"clusterId", "appliedOffset", "currentVoters", "data_version"} <= set(state)
    h.restart(1)
    assert h.client(1).state == VOTED and h.client(1).epoch == 5
    h.world.deliver(3, 1, VoteRequest(2, 5, 3, -1, 0))  # another candidate, same epoch: no
    h.world.deliver(2, 1, VoteRequest(3, 5, 2, -1, 0))  # the same one again: yes
    h.run(10)
    assert h.world.nodes[3].got[-1][1].vote_granted is False
    assert box.got[-1][1].vote_granted is True
    h.world.deliver(3, 1, VoteRequest(4, 4, 3, 9, 99))  # an older epoch: no, whatever its log
    h.world.deliver(3, 1, VoteRequest(5, 6, 3, -1, 0, pre_vote=True))  # a pre-vote changes nothing
    h.run(10)
    assert [m.vote_granted for _, m in h.world.nodes[3].got[-2:]] == [False, True]
    assert h.client(1).epoch == 5 and h.client(1).election.voted_id == 2


def test_a_vote_needs_a_log_at_least_as_up_to_date(quorum):
    h = quorum(voters=3, seed=7)
    leader = h.wait_for_leader()
    h.append(b"a")
    assert h.settle()
    voter = next(n for n in h.voters if n != leader)
    h.crash(leader)
    end, epoch = h.client(voter).log_end_offset, h.client(voter).last_fetched_epoch
    for n in h.voters:
        if n not in (voter,) and h.alive(n):
            h.crash(n)
    for n in (2, 3, 1):
        if n != voter and not h.alive(n):
            h.world.add(n, lambda n=n: Recorder(n))
    other = next(n for n in h.voters if n != voter)
    e = h.client(voter).epoch
    h.world.deliver(other, voter, VoteRequest(1, e + 1, other, epoch, end - 1))  # shorter log
    h.world.deliver(other, voter, VoteRequest(2, e + 2, other, epoch, end))  # as long: yes
    h.run(5)
    got = [m for _, m in h.world.nodes[other].got if isinstance(m, VoteResponse)]
    assert [m.vote_granted for m in got] == [False, True]
    assert h.client(voter).epoch == e + 2  # the higher epochs were taken up even when refused


def test_fetches_are_fenced_by_epoch_and_non_leaders_name_the_leader(quorum):
    h = quorum(voters=3, seed=8)
    leader = h.wait_for_leader()
    assert h.settle()
    epoch = h.client(leader).epoch
    follower = next(n for n in h.voters if n != leader)
    h.world.add(200, lambda: Recorder(200))
    box = h.world.nodes[200]
    h.world.deliver(200, leader, RaftFetchRequest(1, 200, epoch - 1, 0, -1, 0))
    h.world.deliver(200, leader, RaftFetchRequest(2, 200, epoch + 1, 0, -1, 0))
    h.world.deliver(200, follower, RaftFetchRequest(3, 200, epoch, 0, -1, 0))
    h.world.deliver(200, leader, RaftFetchRequest(4, 200, epoch, 5, epoch + 7, 0))  # a history it never had
    h.run(5)
    answers = {m.correlation_id: m for _, m in box.got if isinstance(m, RaftFetchResponse)}
    assert (answers[1].error, answers[1].leader_id, answers[1].leader_epoch) == (FENCED_LEADER_EPOCH, leader, epoch)
    assert answers[2].error == UNKNOWN_LEADER_EPOCH
    assert (answers[3].error, answers[3].leader_id) == (NOT_LEADER_OR_FOLLOWER, leader)
    assert answers[4].diverging_epoch == (epoch, h.client(leader).log_end_offset)
    assert h.client(leader).replica_states()["observers"] == []  # nobody fetched validly


def test_a_minority_makes_no_progress_and_its_leader_resigns_while_the_majority_goes_on(quorum):
    h = quorum(voters=5, observers=1, seed=9)
    old = h.wait_for_leader()
    h.append(b"before")
    assert h.settle()
    minority = [old, next(n for n in h.voters if n != old)]
    majority = [n for n in h.nodes if n not in minority]
    h.partition(minority, majority)
    hw = h.client(old).high_watermark
    h.append(b"stuck", node=old)
    h.run(200)
    assert h.client(old).high_watermark == hw  # one follower is not a majority of five
    assert h.run_until(lambda: h.client(old).state != LEADER, 4_000)  # check-quorum, 1.5 x 2 s
    assert h.client(old).state in (RESIGNED, "prospective", "candidate", "unattached")
    with pytest.raises(NotLeaderError):
        h.append(b"refused", node=old)
    new = h.wait_for_leader()
    assert new in majority and h.client(new).epoch > h.client(old).epoch
    h.append(b"majority", node=new)
    assert h.run_until(lambda: user_values(h.records(101))[-1:] == [b"majority"], 5_000)
    h.run(5_000)  # the minority keeps trying, and fails: pre-votes never bump the epoch
    assert all(h.client(n).leader_id in (None, new) for n in minority)
    epoch = h.client(new).epoch
    h.heal()
    assert h.settle()
    assert h.leader() == new and h.client(new).epoch == epoch  # the rejoining minority disrupted nothing
    for n in h.nodes:
        assert user_values(h.records(n)) == [b"before", b"majority"]


def test_a_rejoining_voter_that_was_cut_off_does_not_depose_a_healthy_leader(quorum):
    h = quorum(voters=3, seed=10)
    leader = h.wait_for_leader()
    epoch = h.client(leader).epoch
    cut = next(n for n in h.voters if n != leader)
    h.isolate(cut)
    h.run(10_000)  # several of its election timeouts: with pre-vote its epoch stays
    assert h.client(cut).epoch == epoch
    h.append(b"x")
    h.heal()
    assert h.settle()
    assert h.leader() == leader and h.client(leader).epoch == epoch


def test_resign_hands_over_to_a_successor_quickly(quorum):
    h = quorum(voters=3, seed=11)
    old = h.wait_for_leader()
    h.append(b"a")
    assert h.settle()
    t0 = h.world.now
    h.world.call_node(old, lambda n: n.client.resign())
    assert h.client(old).state == RESIGNED
    new = h.wait_for_leader()
    assert new != old and h.world.now - t0 < 200  # the first successor campaigns at once
    assert h.settle()
    assert h.client(old).state == FOLLOWER and h.client(old).leader_id == new


def test_a_quorum_of_one_commits_at_once_and_replays_its_log_after_a_restart(quorum):
    h = quorum(voters=1, observers=1, seed=12)
    h.wait_for_leader()
    assert h.world.now < 50  # nobody to ask: it leads at once
    offsets = [h.append(f"v-{i}".encode()) for i in range(3)]
    assert h.client(1).high_watermark == offsets[-1] + 1  # committed on append
    assert h.settle()
    t0 = h.world.now
    h.restart(1)
    h.wait_for_leader()
    assert h.world.now == t0  # at once again,
    assert h.client(1).epoch == 2  # but in a new epoch: it led epoch 1 and must not lead it twice
    assert h.settle()
    assert user_values(h.records(1)) == [b"v-0", b"v-1", b"v-2"]  # the new incarnation replayed all
    assert user_values(h.records(101)) == [b"v-0", b"v-1", b"v-2"]


def test_a_restarted_follower_and_observer_replay_their_committed_records(quorum):
    h = quorum(voters=3, observers=1, seed=13)
    leader = h.wait_for_leader()
    for i in range(4):
        h.append(f"v-{i}".encode())
    assert h.settle()
    follower = next(n for n in h.voters if n != leader)
    for n in (follower, 101):
        h.crash(n)
    h.append(b"while-down")
    for n in (follower, 101):
        h.restart(n)
        assert h.records(n) == []
    assert h.settle()
    for n in (follower, 101):
        assert user_values(h.records(n)) == [b"v-0", b"v-1", b"v-2", b"v-3", b"while-down"]
        assert [r.offset for r in h.records(n)] == list(range(len(h.records(n))))


def test_an_observer_finds_each_new_leader_by_asking_the_voters(quorum):
    h = quorum(voters=3, observers=1, seed=14)
    first = h.wait_for_leader()
    assert h.settle() and h.client(101).leader_id == first
    h.crash(first)
    second = h.wait_for_leader()
    h.append(b"a")
    assert h.run_until(lambda: h.client(101).leader_id == second and user_values(h.records(101)) == [b"a"], 5_000)
    states = h.client(second).replica_states()
    assert [o[0] for o in states["observers"]] == [101]
    assert {v[0] for v in states["voters"]} == {1, 2, 3}
    assert h.client(101).state == OBSERVER and h.client(101).epoch == h.client(second).epoch


def test_the_messages_fit_the_wire_codecs_private_frames():
    from minikafka.wire.codec import _check_schema

    for cls in RAFT_MESSAGES:
        _check_schema(cls, cls.__name__)


# --- the checker and the campaign ---------------------------------------------------------------------------


@pytest.mark.campaign
def test_a_seeded_fault_campaign_finds_no_violation():
    report = raft_campaign(200, seed=0, duration_ms=2_000)
    assert report.ok, report.table()
    assert report.schedules == 200
    assert report.elections > 400 and report.committed > 2_000  # it did exercise the quorum


def test_five_voter_schedules_with_the_default_timeouts_are_clean_too():
    for seed in range(3):
        report = run_raft_schedule(seed, voters=5, observers=2, duration_ms=8_000, step_ms=100, config={})
        assert report.ok, report.table()


def test_a_schedule_replays_exactly_from_its_seed():
    a, b = run_raft_schedule(17), run_raft_schedule(17)
    assert (a.committed, a.deliveries, a.elections) == (b.committed, b.deliveries, b.elections)


def test_the_checker_catches_two_leaders_in_one_epoch():
    history = RaftHistory(leader_changes=[
        LeaderChange(0, 1, 1, 1, 3), LeaderChange(1, 2, 1, 1, 3), LeaderChange(2, 3, 1, 3, 3),
        LeaderChange(3, 3, 1, None, 4),
    ])
    report = check_raft(history)
    assert [v.kind for v in report.violations] == [TWO_LEADERS]
    assert "epoch 3" in report.violations[0].detail


def test_the_checker_catches_a_voter_that_votes_twice_in_an_epoch():
    report = check_raft(RaftHistory(votes=[(0, 1, 4, 2), (5, 1, 4, 2), (9, 1, 4, 3), (10, 1, 5, 3)]))
    assert [v.kind for v in report.violations] == [DOUBLE_VOTE]


def test_the_checker_catches_a_changed_a_lost_and_a_misordered_committed_record():
    ok = [Commit(0, 1, 1, i, 1, None, f"v-{i}".encode()) for i in range(3)]
    changed = [Commit(0, 2, 1, 0, 1, None, b"v-0"), Commit(0, 2, 1, 1, 2, None, b"other")]
    history = RaftHistory(commits=ok + changed)
    assert [v.kind for v in check_raft(history).violations] == [COMMITTED_CHANGED]
    history = RaftHistory(commits=ok, final_logs={3: [(0, 1, None, b"v-0"), (1, 1, None, b"v-1")]})
    assert [v.kind for v in check_raft(history).violations] == [COMMITTED_LOST]
    twice = ok + [Commit(0, 1, 1, 2, 1, None, b"v-2")]
    assert [v.kind for v in check_raft(RaftHistory(commits=twice)).violations] == [DELIVERY_ORDER]
    assert check_raft(RaftHistory(commits=ok, final_logs={3: [(i, 1, None, f"v-{i}".encode()) for i in range(3)]})).ok


def test_the_campaign_catches_voters_that_forget_their_votes(monkeypatch):
    from minikafka.raft import ElectionState

    real = KafkaRaftClient._handle_vote_request

    def forgetful(self, src, req):  # as if the vote had never reached the disk
        e = self.election
        if not req.pre_vote and req.candidate_epoch == e.epoch and e.leader_id is None and e.voted_id != self.node_id:
            self.election = ElectionState(e.epoch)
        real(self, src, req)

    monkeypatch.setattr(KafkaRaftClient, "_handle_vote_request", forgetful)
    report = raft_campaign(30, seed=0)
    assert report.count(TWO_LEADERS) > 0 and report.count(DOUBLE_VOTE) > 0, report.table()


def test_the_campaign_catches_a_quorum_that_votes_without_comparing_logs():
    def blind(voter, request):  # Kafka's vote rule without its last clause
        if request.epoch < voter.epoch:
            return False
        same = request.epoch == voter.epoch
        return not (same and voter.leader is not None) and (not same or voter.voted_for in (None, request.candidate))

    report = raft_campaign(20, seed=0, rules={"grant_vote": blind})
    assert not report.ok
    assert {v.kind for v in report.violations} & {COMMITTED_CHANGED, COMMITTED_LOST, ASSERTION}


# --- a toy host that records what it gets ----------------------------------------------------------------------


class Recorder(StateMachine):
    def __init__(self, node_id):
        super().__init__(node_id)
        self.got = []

    def on_message(self, src, message):
        self.got.append((src, message))


def test_fast_config_keys_are_kafkas():
    from minikafka.raft import DEFAULT_CONFIG

    assert set(FAST_RAFT_CONFIG) <= set(DEFAULT_CONFIG)
    assert DEFAULT_CONFIG["controller.quorum.election.timeout.ms"] == 1000
    assert DEFAULT_CONFIG["controller.quorum.fetch.timeout.ms"] == 2000


def test_controller_quorum_voters_parse_as_kafka_writes_them():
    from minikafka.raft import parse_quorum_voters

    assert parse_quorum_voters("1@localhost:9093, 2@10.0.0.2:9094,3@[::1]:9095") == {
        1: ("localhost", 9093), 2: ("10.0.0.2", 9094), 3: ("::1", 9095),
    }
    for bad in ("", "1@localhost", "x@h:1", "1@h:1,1@h:2"):
        with pytest.raises(KafkaError):
            parse_quorum_voters(bad)


def test_a_fetcher_whose_every_record_is_from_a_newer_epoch_than_the_leaders_cuts_its_whole_log(tmp_path):
    """A leader of epoch 5 wrote two records only to itself and died; the leader of epoch 6
    holds three records of epoch 2 there. A fetcher with only those epoch-5 records has no
    epoch at or below the diverging one: all it has goes, then it copies the leader's log."""
    from minikafka.raft import ElectionState, KafkaRaftClient, QuorumStateStore
    from minikafka.records import RecordBatch
    from minikafka.storage.log import Log

    class Host:
        def __init__(self):
            self.now, self.sent = 0, []

        def send(self, dst, message):
            self.sent.append((dst, message))

        def set_timer(self, key, delay_ms):
            pass

        def cancel_timer(self, key):
            pass

    def client(node, epochs, election):
        d = tmp_path / f"n{node}"
        log = Log(d / KafkaRaftClient.METADATA_DIR, clock=lambda: 0)
        for e in epochs:
            log.append(RecordBatch.build([(b"k", b"v")], timestamp=0, partition_leader_epoch=e), leader_epoch=e)
        log.flush()
        log.close()
        QuorumStateStore(d / KafkaRaftClient.METADATA_DIR, (1,)).write(election)
        host = Host()
        c = KafkaRaftClient(host, node, (1,), d)
        c.start()
        return c, host

    leader, lh = client(1, [2, 2, 2], ElectionState(5))  # a quorum of one: leads epoch 6 at once
    fetcher, fh = client(2, [5, 5], ElectionState())  # an observer
    lh.sent.clear()
    nodes = {1: (leader, lh), 2: (fetcher, fh)}
    for _ in range(20):
        mail = [(src, dst, m) for src, (_, h) in nodes.items() for dst, m in h.sent]
        for _, h in nodes.values():
            h.sent.clear()
        for src, dst, m in mail:
            nodes[dst][0].handle(src, m)
    assert leader.epoch == 6 and fetcher.log_end_offset == leader.log_end_offset == 4
    assert [e for _, e, _, _ in __import__("minikafka.checker.raft", fromlist=["read_log"]).read_log(fetcher.log)] \
        == [2, 2, 2, 6]
