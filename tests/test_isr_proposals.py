"""A leader's ISR proposals (AlterPartition) stay pending until their fate is known.

The ``ReplicaManager`` is driven here by hand, through a stand-in for its broker that keeps a
real ``NodeToControllerChannelManager`` and records what is sent and which timers are set: the
tests play the controller, answering each request when and how they choose (late, twice,
refused), and the metadata log (``apply_partition_state``). Kafka's rule being tested: a
proposal whose answer is late may still be committed, so the leader keeps counting it for the
high watermark and asks again until it hears; only a certain refusal or newer metadata ends it.
"""

from __future__ import annotations

import pytest

from minikafka.broker.config import BrokerConfig
from minikafka.broker.controller_channel import NodeToControllerChannelManager
from minikafka.broker.replica_manager import ReplicaManager
from minikafka.messages import (
    CONTROLLER_ID,
    FENCED_LEADER_EPOCH,
    INELIGIBLE_REPLICA,
    INVALID_UPDATE_VERSION,
    NO_ERROR,
    NOT_CONTROLLER,
    REQUEST_TIMED_OUT,
    AlterPartitionRequest,
    AlterPartitionResponse,
    FetchPartition,
    FetchRequest,
    PartitionState,
    ProducePartition,
    ProduceRequest,
)
from minikafka.records import RecordBatch
from minikafka.storage import LogManager

SOCKET_TIMEOUT_MS = 1_000


class StandInBroker:
    """What a ``ReplicaManager`` needs of its broker: sends and timers (recorded), the live
    brokers, and requests to the controller through a real controller channel."""

    def __init__(self) -> None:
        self.now = 0
        self.live_brokers = (1, 2, 3)
        self.sent: list[tuple[object, object]] = []
        self.timers: dict[object, int] = {}
        self.channel = NodeToControllerChannelManager(self, (CONTROLLER_ID,), lambda: CONTROLLER_ID)

    def send(self, dst, message) -> None:
        self.sent.append((dst, message))

    def set_timer(self, key, delay_ms: int) -> None:
        self.timers[key] = self.now + delay_ms

    def cancel_timer(self, key) -> None:
        self.timers.pop(key, None)

    def send_to_controller(self, make, on_response, *, retry_ms: int) -> int:
        return self.channel.send(make, on_response, timeout_ms=None, attempt_timeout_ms=retry_ms)

    def cancel_controller_request(self, correlation_id: int) -> None:
        self.channel.cancel(correlation_id)

    def advance(self, ms: int) -> None:
        """Move the clock, firing the controller channel's timers that fall due."""
        end = self.now + ms
        while True:
            due = sorted((at, repr(k), k) for k, at in self.timers.items()
                         if at <= end and isinstance(k, tuple) and str(k[0]).startswith("controller-"))
            if not due:
                break
            at, _, key = due[0]
            del self.timers[key]
            self.now = at
            self.channel.on_timer(key)
        self.now = end

    def alter_requests(self) -> list[AlterPartitionRequest]:
        return [m for dst, m in self.sent if isinstance(m, AlterPartitionRequest)]

    def answer(self, request: AlterPartitionRequest, error: int, state: PartitionState | None = None) -> bool:
        """The controller's answer to ``request`` arrives; whether the channel took it."""
        return self.channel.handle_response(CONTROLLER_ID, AlterPartitionResponse(request.correlation_id, error, state))


def state(*, leader=1, leader_epoch=1, isr=(1, 2), partition_epoch=1) -> PartitionState:
    return PartitionState("t", 0, leader, leader_epoch, isr, (1, 2, 3), partition_epoch)


@pytest.fixture
def leader(tmp_path):
    """Broker 1 leads t-0 (ISR 1, 2; replicas 1, 2, 3) with two records both in-sync replicas
    have; follower 3 has them too and fetches: the leader proposes it back into the ISR."""
    node = StandInBroker()
    rm = ReplicaManager(node, 1, LogManager(tmp_path, clock=lambda: node.now),
                        BrokerConfig({"replica.socket.timeout.ms": SOCKET_TIMEOUT_MS}))
    rm.apply_partition_state(state(), {})
    produce(rm, [b"a", b"b"])
    follower_fetch(rm, 2, 2)
    follower_fetch(rm, 3, 2)
    p = rm.partitions[("t", 0)]
    assert p.high_watermark == 2 and p.isr == (1, 2) and p.pending_isr == (1, 2, 3)
    assert len(node.alter_requests()) == 1
    return node, rm, p


def produce(rm, values) -> None:
    batch = bytes(RecordBatch.build(values))
    rm.append_records("client", ProduceRequest(len(values), 1, 5_000, (ProducePartition("t", 0, batch),)))


def follower_fetch(rm, replica: int, offset: int) -> None:
    rm.fetch_messages(replica, FetchRequest(offset, replica, 500, 1, (
        FetchPartition("t", 0, offset, last_fetched_epoch=1, current_leader_epoch=1),)))


def committed(isr=(1, 2, 3), partition_epoch=2) -> PartitionState:
    return state(isr=isr, partition_epoch=partition_epoch)


def test_an_unanswered_proposal_stays_pending_and_is_sent_again_with_the_same_id(leader):
    node, rm, p = leader
    node.advance(3 * SOCKET_TIMEOUT_MS + 1)  # the controller is slow: three attempts go unanswered
    first, *again = node.alter_requests()
    assert len(again) == 3 and all(r == first for r in again)  # the same request, the same id
    assert p.pending_isr == (1, 2, 3)
    produce(rm, [b"c"])
    follower_fetch(rm, 2, 3)
    assert p.high_watermark == 2  # follower 3 still counts: it has 2 records, not 3
    assert node.answer(first, NO_ERROR, committed())  # the first attempt, committed, answered late
    assert p.isr == (1, 2, 3) and p.pending_isr is None and p.partition_epoch == 2
    assert not rm.alter_in_flight and node.channel.pending_count() == 0
    node.advance(10 * SOCKET_TIMEOUT_MS)
    assert len(node.alter_requests()) == 4  # answered: never sent again
    # The answer to a later attempt (refused: the partition epoch moved) is dropped.
    assert not node.answer(first, INVALID_UPDATE_VERSION, committed())
    assert p.isr == (1, 2, 3) and p.pending_isr is None


def test_a_refusal_by_partition_epoch_keeps_it_pending_until_the_metadata_log_says(leader):
    node, rm, p = leader
    (request,) = node.alter_requests()
    # An earlier attempt may have been committed: the controller's epoch is past ours.
    assert node.answer(request, INVALID_UPDATE_VERSION, committed())
    assert p.pending_isr == (1, 2, 3) and p.isr == (1, 2)
    node.advance(5 * SOCKET_TIMEOUT_MS)
    assert len(node.alter_requests()) == 1  # no point asking again: the metadata log will tell
    produce(rm, [b"c"])
    follower_fetch(rm, 2, 3)
    assert p.high_watermark == 2
    rm.apply_partition_state(committed(), {})  # the PartitionChangeRecord arrives
    assert p.isr == (1, 2, 3) and p.pending_isr is None and p.high_watermark == 2
    follower_fetch(rm, 3, 3)
    assert p.high_watermark == 3


def test_a_refusal_that_says_it_was_not_applied_returns_to_the_committed_isr(leader):
    node, rm, p = leader
    produce(rm, [b"c"])
    follower_fetch(rm, 2, 3)
    assert p.high_watermark == 2
    (request,) = node.alter_requests()
    node.live_brokers = (1, 2)  # the controller fenced 3 meanwhile
    assert node.answer(request, INELIGIBLE_REPLICA, state())
    assert p.pending_isr is None and p.isr == (1, 2)
    assert p.high_watermark == 3  # over the committed ISR again
    assert not rm.alter_in_flight and node.channel.pending_count() == 0


@pytest.mark.parametrize("error", [REQUEST_TIMED_OUT, NOT_CONTROLLER])
def test_a_controller_that_could_not_decide_yet_is_asked_again(leader, error):
    node, rm, p = leader
    (request,) = node.alter_requests()
    assert node.answer(request, error)
    node.advance(100)  # NOT_CONTROLLER: the channel's backoff, then the active controller
    assert len(node.alter_requests()) == 2 and p.pending_isr == (1, 2, 3)
    assert node.alter_requests()[-1].new_isr == (1, 2, 3)


def test_a_late_answer_does_not_touch_the_next_proposal(leader):
    node, rm, p = leader
    (first,) = node.alter_requests()
    rm.apply_partition_state(committed(), {})  # the metadata log brings the commit first
    assert p.pending_isr is None and node.channel.pending_count() == 0  # its request cancelled
    node.now = 60_000  # followers 2 and 3 fell silent: the leader proposes to shrink
    rm.maybe_shrink_isrs()
    assert p.pending_isr == (1,)
    second = node.alter_requests()[-1]
    assert second.partition_epoch == 2 and second.new_isr == (1,)
    assert not node.answer(first, NO_ERROR, committed())  # the old request's answer: dropped
    assert p.pending_isr == (1,) and rm.alter_in_flight[("t", 0)].new_isr == (1,)
    assert node.answer(second, NO_ERROR, committed(isr=(1,), partition_epoch=3))
    assert p.isr == (1,) and p.pending_isr is None


def test_a_new_leadership_drops_the_proposal_and_its_request(leader):
    node, rm, p = leader
    (request,) = node.alter_requests()
    rm.apply_partition_state(state(leader=2, leader_epoch=2, partition_epoch=2), {})
    assert not p.is_leader and p.pending_isr is None
    assert not rm.alter_in_flight and node.channel.pending_count() == 0
    node.advance(5 * SOCKET_TIMEOUT_MS)
    assert len(node.alter_requests()) == 1  # never sent again
    assert not node.answer(request, FENCED_LEADER_EPOCH, state(leader=2, leader_epoch=2, partition_epoch=2))
    rm.apply_partition_state(state(leader_epoch=3, partition_epoch=3), {})  # leader again, afresh
    assert p.is_leader and p.pending_isr is None and p.isr == (1, 2)


def test_a_request_that_may_never_time_out_must_be_sent_again_on_its_own():
    node = StandInBroker()
    with pytest.raises(ValueError, match="without timeout_ms needs attempt_timeout_ms"):
        node.channel.send(lambda corr: corr, lambda response: None, timeout_ms=None)
