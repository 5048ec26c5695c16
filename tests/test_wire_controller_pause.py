"""Pausing the active controller (SIGSTOP, a long GC pause) with real processes: no broker is fenced.

A fresh cluster (3 brokers, 3 controllers); the active controller, found by asking the quorum
(DescribeQuorum), is paused for longer than ``broker.session.timeout.ms``. The quorum elects
another; the brokers must move their heartbeats to it (as Kafka's ``BrokerLifecycleManager``
follows the quorum's leader), and it gives each of them a fresh session, so none is fenced. On
every broker's own Metadata, throughout the pause and after the paused controller comes back
(SIGCONT, deposed: it must not fence anyone either), every broker is listed, every partition
has a leader and its whole ISR, and a CreateTopics with replication factor 3 succeeds while the
old controller is still paused.

The waits are for states (a new leader named by DescribeQuorum, the topic on every broker, every
voter caught up); what the test watches across a session timeout is sampled, each sample an
assertion on the state, never on a time.
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("kafka")

from kafka import KafkaAdminClient  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402

from minikafka.tools.metadata_quorum import describe_quorum  # noqa: E402
from minikafka.wire.process import launch  # noqa: E402

from wire_helpers import RawConnection, known_everywhere, metadata_request, tolerant, wait_until  # noqa: E402

SESSION_MS = 3000
FAST = {"broker.session.timeout.ms": SESSION_MS, "broker.heartbeat.interval.ms": 500,
        "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3, "request.timeout.ms": 8000}
TOPIC, PARTITIONS = "fleet", 3


def active_controller(cluster) -> int | None:
    q = tolerant(lambda: describe_quorum(cluster.bootstrap_servers))
    return None if q is None or q.leader_id < 0 else q.leader_id


def metadata_views(cluster, topic: str) -> dict[int, tuple[set[int], dict[int, tuple[int, set[int]]]]]:
    """Each broker's own Metadata: {broker: (brokers listed, {partition: (leader, isr)})}; a
    broker that does not answer (busy) is left out of this sample."""
    views = {}
    for b in cluster.broker_ids:
        try:
            with RawConnection((cluster.host, cluster.ports[b]), timeout_s=5) as conn:
                answer = conn.request(metadata_request(topic), 8)
        except OSError:
            continue
        described = [t for t in answer.topics if t.name == topic]
        parts = {p.partition_index: (p.leader_id, set(p.isr_nodes)) for p in described[0].partitions} if described else {}
        views[b] = ({x.node_id for x in answer.brokers}, parts)
    return views


def assert_whole(cluster, topics: list[str], when: str) -> None:
    """Every broker lists every broker, and every partition of ``topics`` has a leader and its
    whole ISR (all 3 replicas), on every broker that answers."""
    for topic in topics:
        for b, (listed, parts) in metadata_views(cluster, topic).items():
            assert listed == set(cluster.broker_ids), f"{when}: broker {b} lists brokers {sorted(listed)}"
            for p, (leader, isr) in sorted(parts.items()):
                assert leader >= 0, f"{when}: {topic}-{p} has no leader on broker {b}"
                assert isr == set(cluster.broker_ids), f"{when}: {topic}-{p}'s ISR is {sorted(isr)} on broker {b}"


def watch(cluster, topics: list[str], span_s: float, when: str) -> int:
    """Sample every broker's Metadata across ``span_s`` (a few session timeouts); the count."""
    samples, end = 0, time.monotonic() + span_s
    while time.monotonic() < end:
        assert_whole(cluster, topics, when)
        samples += 1
        time.sleep(0.1)
    return samples


def voters_caught_up(cluster) -> bool:
    q = tolerant(lambda: describe_quorum(cluster.bootstrap_servers))
    return (q is not None and q.leader_id >= 0
            and sorted(r.replica_id for r in q.current_voters if r.log_end_offset == q.high_watermark)
            == cluster.controller_ids)


def whole(cluster, topic: str) -> bool:
    try:
        assert_whole(cluster, [topic], "")
    except AssertionError:
        return False
    return known_everywhere(cluster, topic, PARTITIONS)


def test_pausing_the_active_controller_past_the_session_timeout_fences_no_broker():
    """Set up so that on main's code the failure is certain, not a race of the start: broker 1
    comes back believing in a deposed controller (its persisted quorum state), which answers
    its first heartbeat NOT_CONTROLLER; then that controller is made the one the quorum
    elects when the active one is paused (the third voter's log is kept behind, so it cannot win)."""
    with launch(brokers=3, controllers=3, config=FAST) as c:
        admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers)
        try:
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, topic_configs={"min.insync.replicas": "2"})])
            wait_until(lambda: known_everywhere(c, TOPIC, PARTITIONS), 30, "the topic on every broker")
            first = wait_until(lambda: active_controller(c), 30, "an active controller")
            c.kill(1)  # broker 1 sleeps through a change of controller
            c.kill(first)
            second = wait_until(lambda: active_controller(c) not in (None, first) and active_controller(c),
                                30, "a new active controller")
            c.restart(first)
            wait_until(lambda: voters_caught_up(c) or None, 30, "every voter caught up")
            c.restart(1)  # its first heartbeat goes to `first`, which refuses it
            wait_until(lambda: whole(c, TOPIC) or None, 30, "every broker back in every ISR")
            (third,) = set(c.controller_ids) - {first, second}
            c.pause(third)
            # Two changes committed by `second` and `first`: the first may still reach `third`
            # (the answer to the fetch it had parked), the second cannot: `third` lags.
            for name in ("behind", "behind-more"):
                admin.create_topics([NewTopic(name, 1, 3)])
                wait_until(lambda: known_everywhere(c, name, 1), 30, f"{name} on every broker")
            assert_whole(c, [TOPIC, "behind-more"], "before the pause")
            c.pause(second)
            c.resume(third)
            try:
                elected = wait_until(lambda: active_controller(c) not in (None, second) and active_controller(c),
                                     30, "a new active controller")
                assert elected == first  # the longest log wins
                # Metadata changes work during the pause, with all three brokers available.
                topic = admin.create_topics([NewTopic("during-pause", 1, 3)], raise_errors=False)["topics"][0]
                assert (topic["error_code"], topic.get("error_message")) == (0, None)
                wait_until(lambda: known_everywhere(c, "during-pause", 1), 30, "the new topic on every broker")
                # Past two session timeouts under the new controller: nobody fenced, nothing shrank.
                assert watch(c, [TOPIC, "during-pause"], 2.5 * SESSION_MS / 1000, "during the pause") > 0
            finally:
                c.resume(second)
            # The old controller, deposed while paused, catches up as a follower.
            wait_until(lambda: voters_caught_up(c) or None, 30, "every voter caught up")
            assert watch(c, [TOPIC, "during-pause"], 2.5 * SESSION_MS / 1000, "after the resume") > 0
        finally:
            admin.close()
