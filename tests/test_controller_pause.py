"""Pausing the active controller (a SIGSTOP, a long GC pause) in the simulated world fences no broker.

``Cluster.pause`` holds everything addressed to the node until ``resume``, as a stopped process
leaves its sockets unread and its timers overdue. Paused past ``broker.session.timeout.ms``:

- with three controllers, the quorum elects another; the brokers follow the new leader with
  their heartbeats (a NOT_CONTROLLER heard from a voter before the first election must not
  keep them away from it), it gives each a fresh session, and none is fenced: every partition
  keeps its leader and its whole ISR, during the pause and after the deposed one resumes;
- with one controller, nobody else can lead: when it resumes, the brokers' silence it finds
  was its own, and it fences nobody for it.
"""

from __future__ import annotations

import pytest

from minikafka.broker.controller_channel import NodeToControllerChannelManager
from minikafka.cluster import Cluster
from minikafka.messages import NOT_CONTROLLER, BrokerHeartbeatResponse

SESSION_MS = 3000
FAST = {"broker.session.timeout.ms": SESSION_MS, "broker.heartbeat.interval.ms": 500}


@pytest.fixture
def make_cluster(tmp_path):
    made = []

    def make(controllers: int, seed: int) -> Cluster:
        c = Cluster(3, controllers=controllers, seed=seed, config=FAST, dir=tmp_path / f"c{len(made)}")
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def assert_whole(c: Cluster, when: str) -> None:
    """Every broker's committed metadata: every broker live, every partition led, ISR whole."""
    for b in c.broker_ids:
        image = c.broker(b).image
        assert image.live_brokers == tuple(c.broker_ids), f"{when} (t={c.now}): broker {b} sees {image.live_brokers}"
        for key, state in sorted(image.partitions.items()):
            assert state.leader >= 0, f"{when} (t={c.now}): {key} has no leader on broker {b}"
            assert sorted(state.isr) == c.broker_ids, f"{when} (t={c.now}): {key}'s ISR is {state.isr} on broker {b}"


def watch(c: Cluster, span_ms: int, when: str) -> None:
    for _ in range(span_ms // 100):
        c.advance(100)
        assert_whole(c, when)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_pausing_the_active_controller_past_the_session_timeout_fences_no_broker(make_cluster, seed):
    c = make_cluster(3, seed)
    c.create_topic("fleet", partitions=3, replication_factor=3, config={"min.insync.replicas": 2})
    assert_whole(c, "before the pause")
    paused = c.active_controller.node_id
    c.pause(paused)
    others = [x for x in c.controller_ids if x != paused]  # the paused one still thinks it leads
    assert c.run_until(lambda: any(c.controller_node(x).active for x in others), 10_000)
    c.create_topic("during-pause", partitions=1, replication_factor=3)  # three brokers available
    watch(c, 3 * SESSION_MS, "during the pause")
    c.resume(paused)
    watch(c, 3 * SESSION_MS, "after the resume")
    assert not c.controller_node(paused).active  # deposed while paused


def test_a_lone_controller_paused_past_the_session_timeout_fences_nobody_when_it_resumes(make_cluster):
    c = make_cluster(1, 1)
    c.create_topic("fleet", partitions=3, replication_factor=3)
    (controller,) = c.controller_ids
    c.pause(controller)
    c.advance(3 * SESSION_MS)
    c.resume(controller)
    watch(c, 3 * SESSION_MS, "after the resume")
    assert c.active_controller.node_id == controller


class _Node:
    def __init__(self) -> None:
        self.sent: list[tuple[int, object]] = []

    def send(self, dst, message) -> None:
        self.sent.append((dst, message))

    def set_timer(self, key, delay_ms) -> None:
        pass

    def cancel_timer(self, key) -> None:
        pass


def test_a_new_leader_gets_the_pending_heartbeat_though_it_refused_before_the_election():
    node, leader = _Node(), [None]
    channel = NodeToControllerChannelManager(node, (3000, 3001, 3002), lambda: leader[0])
    # Before the first election 3000 and 3001 answer NOT_CONTROLLER; 3002 is elected.
    for refusing in (3000, 3001):
        corr = channel.send(lambda corr: ("heartbeat", corr), lambda r: None, timeout_ms=500)
        channel.handle_response(node.sent[-1][0], BrokerHeartbeatResponse(corr, NOT_CONTROLLER, True))
    leader[0] = 3002
    channel.leader_changed(3002)
    answered: list = []
    corr = channel.send(lambda corr: ("heartbeat", corr), answered.append, timeout_ms=500)
    assert node.sent[-1] == (3002, ("heartbeat", corr))
    # 3002 is paused; the quorum elects 3001, which refused before: the heartbeat goes there now.
    leader[0] = 3001
    channel.leader_changed(3001)
    assert node.sent[-1] == (3001, ("heartbeat", corr))
    assert channel.target() == 3001
    channel.handle_response(3001, BrokerHeartbeatResponse(corr, 0, False))
    assert [r.correlation_id for r in answered] == [corr]
