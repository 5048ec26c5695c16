"""KRaft in the simulated world: the controller quorum, the metadata log, brokers that follow it.

What is proved here (seeded, simulated time): metadata lives in the replicated log and
nowhere else (a controller restart, the active controller's death, a whole cluster
restarted on the same directory lose nothing); fencing a broker takes it out of every ISR
and elects new leaders in the same committed batch; a broker deletes a partition only for
a committed topic removal; a minority of controllers down changes nothing, a majority down
stops metadata changes (with a clear error) but not the data plane.
"""

from __future__ import annotations

import pytest

from minikafka import KafkaProducer
from minikafka.broker.broker import Broker
from minikafka.broker.config import BrokerConfig
from minikafka.cluster import Cluster
from minikafka.errors import KafkaTimeoutError
from minikafka.messages import (
    CONTROLLER_ID, NO_ERROR, TOPIC_ALREADY_EXISTS, BrokerHeartbeatRequest, BrokerHeartbeatResponse,
    CreateTopicsRequest, DeleteTopicsRequest, TopicConfig,
)
from minikafka.metadata import records as mr
from minikafka.metadata.image import MetadataImage
from minikafka.node import Send
from minikafka.records import MemoryRecords

FAST = {"replica.lag.time.max.ms": 10_000, "request.timeout.ms": 10_000}


@pytest.fixture
def make_cluster(tmp_path):
    made = []

    def make(brokers=3, *, controllers=1, seed=1, config=FAST, dir=None, **kw):
        c = Cluster(brokers, controllers=controllers, seed=seed, config=config,
                    dir=dir or tmp_path / f"cluster-{len(made)}", **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def values_in(c, broker, topic, partition=0):
    """Every value in a broker's replica, log start to log end."""
    log = c.replica(broker, topic, partition).log
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        batches = list(MemoryRecords(bytes(log.read(offset, 1 << 20))).batches())
        for b in batches:
            out += [r.value for r in b.records() if r.offset >= offset]
            offset = b.last_offset + 1
    return out


def produce(c, topic, values, **config):
    producer = KafkaProducer(bootstrap_servers=c, acks="all", **config)
    for v in values:
        producer.send(topic, v, partition=0)
    producer.flush(timeout=60)
    producer.close()


def metadata_log(c, node_id):
    """The committed metadata records as a controller's Raft client reads them back."""
    node = c.controller_node(node_id)
    return [(r.offset, r.timestamp, mr.decode(r.key, r.value)) for r in node.raft.read_committed()]


def create(c, name, partitions=1, rf=1, timeout_ms=30_000):
    """CreateTopics through a broker; the (error, message) it answered, or None if no answer."""
    admin = c.world.nodes[c.admin_id]
    topic = TopicConfig(name, partitions, rf)
    corr = c.world.call_node(c.admin_id, lambda n: n.request(c._any_live_broker(),
                                                            lambda k: CreateTopicsRequest(k, (topic,))))
    if not c.run_until(lambda: corr in admin.responses, timeout_ms):
        return None
    _, error, message = admin.responses.pop(corr).results[0]
    return error, message


def test_the_metadata_log_holds_every_decision_as_kraft_records(make_cluster):
    c = make_cluster(3)
    c.create_topic("t", partitions=2, replication_factor=3)
    kinds = [type(rec).__name__ for _, _, rec in metadata_log(c, CONTROLLER_ID)]
    assert kinds[0] == "LeaderChangeRecord"
    assert kinds.count("RegisterBrokerRecord") == 3 and kinds.count("UnfenceBrokerRecord") == 3
    assert kinds[-3:] == ["TopicRecord", "PartitionRecord", "PartitionRecord"]
    # A broker's copy of the log folds into the same image as the controller's.
    for b in c.broker_ids:
        assert c.broker(b).image.partitions == c.controller.image.partitions
        assert c.broker(b).metadata_offset == c.controller.image.offset


def test_replaying_the_log_rebuilds_the_same_image(make_cluster):
    c = make_cluster(3)
    c.create_topic("t", partitions=3, replication_factor=3)
    c.kill(2)
    c.advance(15_000)
    image = MetadataImage()
    for offset, ts, rec in metadata_log(c, CONTROLLER_ID):
        image.apply(rec, offset, ts)
    assert image.partitions == c.controller.image.partitions
    assert image.live_brokers == (1, 3) and image.topic_ids == c.controller.image.topic_ids


def test_a_restarted_controller_keeps_every_topic_and_the_brokers_keep_their_data(make_cluster):
    """The bug this replaced: a fresh controller's full metadata update made every broker
    delete the logs it did not list."""
    c = make_cluster(3)
    c.create_topic("t", partitions=1, replication_factor=3)
    produce(c, "t", [b"%d" % i for i in range(50)])
    before = c.controller.image.partitions.copy()
    c.kill(CONTROLLER_ID)
    c.advance(5_000)  # brokers keep serving from their image while no controller answers
    assert all(values_in(c, b, "t") == [b"%d" % i for i in range(50)] for b in c.broker_ids)
    c.restart(CONTROLLER_ID)
    assert c.run_until(lambda: c._active_controller() is not None, 10_000)
    assert c.controller.image.partitions == before
    c.advance(20_000)  # long enough for any wrong deletion to have happened
    assert c.topics() == ["t"]
    assert all(values_in(c, b, "t") == [b"%d" % i for i in range(50)] for b in c.broker_ids)
    produce(c, "t", [b"after"])
    assert all(values_in(c, b, "t")[-1] == b"after" for b in c.broker_ids)


def test_a_whole_cluster_restarted_on_the_same_directory_comes_back(make_cluster, tmp_path):
    d = tmp_path / "same"
    c = make_cluster(3, controllers=3, dir=d, seed=3)
    c.create_topic("t", partitions=1, replication_factor=3)
    c.create_topic("u", partitions=4, replication_factor=2)
    produce(c, "t", [b"v%d" % i for i in range(30)])
    c.close()
    again = make_cluster(3, controllers=3, dir=d, seed=3)
    assert again.topics() == ["t", "u"]
    assert len(again.partitions_of("u")) == 4
    leader = again.partition_state("t", 0).leader
    assert values_in(again, leader, "t") == [b"v%d" % i for i in range(30)]


def test_fencing_a_broker_leaves_every_isr_and_elects_in_one_committed_batch(make_cluster):
    c = make_cluster(3)
    c.create_topic("t", partitions=6, replication_factor=3)
    victim = c.partition_state("t", 0).leader
    c.kill(victim)
    assert c.run_until(lambda: not c.controller.is_alive(victim), 20_000)
    log = metadata_log(c, CONTROLLER_ID)
    fence = next(i for i, (_, _, rec) in enumerate(log) if isinstance(rec, mr.FenceBrokerRecord))
    changes = [entry for entry in log[fence + 1:] if isinstance(entry[2], mr.PartitionChangeRecord)]
    assert len(changes) == 6  # every partition had the victim in its ISR (RF 3 on 3 brokers)
    # One append: consecutive offsets, one timestamp, the fence first.
    offsets = [log[fence][0]] + [o for o, _, _ in changes]
    assert offsets == list(range(offsets[0], offsets[0] + 7))
    assert {log[fence][1]} == {ts for _, ts, _ in changes}
    for s in c.partitions_of("t"):
        assert victim not in s.isr and s.leader != victim and s.leader >= 0


def test_a_broker_deletes_a_partition_only_for_a_committed_topic_removal(make_cluster):
    c = make_cluster(3)
    c.create_topic("keep", partitions=1, replication_factor=3)
    c.create_topic("gone", partitions=1, replication_factor=3)
    produce(c, "keep", [b"k"])
    produce(c, "gone", [b"old"])
    c.kill(3)
    admin = c.world.nodes[c.admin_id]
    corr = c.world.call_node(c.admin_id, lambda n: n.request(1, lambda k: DeleteTopicsRequest(k, ("gone",))))
    assert c.run_until(lambda: corr in admin.responses, 10_000)
    assert admin.responses.pop(corr).results == (("gone", NO_ERROR, None),)
    c.create_topic("gone", partitions=1, replication_factor=2)  # the same name, a new topic id
    c.restart(3)
    c.advance(15_000)
    assert values_in(c, 3, "keep") == [b"k"]
    assert (c.dir / "broker-3" / "keep-0").is_dir()
    new_replicas = c.partition_state("gone", 0).replicas
    if 3 in new_replicas:
        assert values_in(c, 3, "gone") == values_in(c, new_replicas[0], "gone")
    else:
        assert not (c.dir / "broker-3" / "gone-0").exists()


def test_killing_the_active_controller_elects_another_and_nothing_is_lost(make_cluster):
    c = make_cluster(3, controllers=3)
    c.create_topic("t", partitions=3, replication_factor=3)
    first = c.controller.node_id
    epoch = c.controller.raft.epoch
    c.kill(first)
    assert c.run_until(lambda: c._active_controller() is not None, 10_000)
    assert c.controller.node_id != first and c.controller.raft.epoch > epoch
    assert c.topics() == ["t"]
    assert create(c, "u", 2, 3) == (NO_ERROR, None)
    assert sorted(c.topics()) == ["t", "u"]
    c.restart(first)
    assert c.run_until(lambda: c.controller_node(first).image.topic_ids.keys() == {"t", "u"}, 10_000)


def test_a_minority_down_changes_nothing_a_majority_down_stops_metadata_changes_only(make_cluster):
    c = make_cluster(3, controllers=3)
    c.create_topic("t", partitions=1, replication_factor=3)
    producer = KafkaProducer(bootstrap_servers=c, acks="all")  # idempotent: its producer id comes now
    producer.send("t", b"before", partition=0).get(timeout=30)
    active = c.controller.node_id
    others = [n for n in c.controller_ids if n != active]
    c.kill(others[0])  # a minority
    assert create(c, "minority", 1, 3) == (NO_ERROR, None)
    c.kill(others[1])  # now a majority is down: the active one cannot commit
    answer = create(c, "majority", 1, 3)
    assert answer is not None and answer[0] != NO_ERROR
    assert "majority" in answer[1] and "quorum" in answer[1]
    producer.send("t", b"still", partition=0).get(timeout=30)  # the data plane goes on
    produce(c, "t", [b"also"], enable_idempotence=False)  # a new producer too, without a producer id
    assert all(values_in(c, b, "t") == [b"before", b"still", b"also"] for b in c.broker_ids)
    c.restart(others[0])
    assert c.run_until(lambda: c._active_controller() is not None, 20_000)
    # As in Kafka, a timed-out change may still be committed once a majority is back (its
    # records were in the old leader's log): the outcome of that request was unknown.
    assert create(c, "majority", 1, 3)[0] in (NO_ERROR, TOPIC_ALREADY_EXISTS)
    assert create(c, "later", 1, 3) == (NO_ERROR, None)
    assert c.topics() == ["later", "majority", "minority", "t"]


def test_the_quorum_shows_in_the_diagram_with_three_voters(make_cluster):
    c = make_cluster(3, controllers=3)
    c.create_topic("t", partitions=1, replication_factor=3)
    source = c.diagram("t").source
    assert "controller quorum" in source and f"active controller: {c.controller.node_id}" in source
    for n in c.controller_ids:
        assert f'"voter/{n}"' in source
    c.kill(c.controller.node_id)
    assert "dead" in c.diagram("t").source


def test_same_seed_same_quorum_history(make_cluster):
    def run(seed):
        c = make_cluster(3, controllers=3, seed=seed)
        c.create_topic("t", partitions=2, replication_factor=3)
        c.kill(c.controller.node_id)
        c.run_until(lambda: c._active_controller() is not None, 10_000)
        c.kill(2)
        c.advance(12_000)
        return [(o, type(r).__name__) for o, _, r in metadata_log(c, c.controller.node_id)], c.world.history

    assert run(5) == run(5)


def test_a_cluster_without_a_controller_majority_says_so(tmp_path):
    with pytest.raises(Exception):
        Cluster(3, controllers=0, dir=tmp_path / "x")


@pytest.mark.campaign
def test_the_fault_campaign_kills_and_splits_controllers_and_loses_nothing():
    """The producer checker stays at zero with controller faults in the schedules, and the
    Raft checker judges the metadata quorum of every schedule: one leader per epoch, no
    committed metadata record lost or changed on any controller or broker."""
    from minikafka.checker.campaign import fault_campaign, run_schedule

    report = fault_campaign(24, seed=11, controllers=3, enable_idempotence=True, faults=3)
    assert report.ok, report.table()
    assert all(n == 0 for n in report.anomalies.values()) and report.raft_violations == 0
    assert report.raft_elections >= 24  # every schedule elects at least once
    faults = [text for seed in range(6) for _, text in run_schedule(
        seed, controllers=3, enable_idempotence=True, faults=4).faults]
    assert any(f.startswith("kill controller") for f in faults), faults
    assert any(f.startswith("cut controller") for f in faults), faults


# --- internal topics are the brokers' own (issue 13's first slice) -------------------------------------------


def test_clients_cannot_create_or_write_internal_topics_and_a_bad_offsets_record_is_skipped(make_cluster):
    from minikafka import KafkaConsumer
    from minikafka.broker.group_coordinator import OFFSETS_TOPIC, partition_for
    from minikafka.messages import INVALID_REQUEST, INVALID_TOPIC_EXCEPTION, ProducePartition, ProduceRequest
    from minikafka.records import MemoryRecords

    c = make_cluster(3, config={**FAST, "offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0})
    for name in ("__consumer_offsets", "__cluster_metadata", "__transaction_state"):
        error, message = create(c, name, 1, 1)
        assert (error, message) == (INVALID_REQUEST, f"Creation of internal topic {name} is prohibited.")
    c.create_topic("t", 1, 3)
    produce(c, "t", [b"a", b"b"])
    consumer = KafkaConsumer("t", bootstrap_servers=c, group_id="g", auto_offset_reset="earliest",
                             enable_auto_commit=False)
    assert sum(len(v) for v in consumer.poll(timeout_ms=10_000).values()) == 2
    consumer.commit()
    # A client's Produce into the group's partition of __consumer_offsets, with a key no
    # coordinator can read: refused with Kafka's INVALID_TOPIC_EXCEPTION, and nothing appended.
    p = partition_for("g", 3)
    leader = c.partition_state(OFFSETS_TOPIC, p).leader
    before = c.replica(leader, OFFSETS_TOPIC, p).log_end_offset
    admin = c.world.nodes[c.admin_id]
    bad = bytes(MemoryRecords.build([(b"\x00\x63garbage", b"nonsense")]))
    corr = c.world.call_node(c.admin_id, lambda n: n.request(leader, lambda k: ProduceRequest(
        k, -1, 5_000, (ProducePartition(OFFSETS_TOPIC, p, bad),))))
    assert c.run_until(lambda: corr in admin.responses, 10_000)
    (answer,) = admin.responses.pop(corr).partitions
    assert answer.error == INVALID_TOPIC_EXCEPTION and "internal topic" in answer.error_message
    assert c.replica(leader, OFFSETS_TOPIC, p).log_end_offset == before
    # Had such a record got in (an older broker, a disk edit), the coordinator skips it: append
    # one through the broker's own path, move the coordinator, and the group is still there.
    c.world.call_node(leader, lambda b: b.replica_manager.partitions[(OFFSETS_TOPIC, p)].append_as_leader(bad, -1))
    c.kill(leader)
    assert c.run_until(lambda: c.partition_state(OFFSETS_TOPIC, p).leader not in (-1, leader), 30_000)
    assert consumer.committed(__import__("minikafka").TopicPartition("t", 0)) == 2
    consumer.close()


def _heartbeats(effects):
    return [e.message for e in effects if isinstance(e, Send) and isinstance(e.message, BrokerHeartbeatRequest)]


def test_a_fenced_broker_asks_again_when_a_commit_came_while_its_heartbeat_was_out(tmp_path):
    # The race launch(brokers=1, controllers=1) lost in 4 of 6 runs: the broker caught up while
    # its heartbeat was out, the answer (sent before) said fenced, and it waited 2 s to ask again.
    broker = Broker(1, tmp_path, BrokerConfig({}), controllers=(3000,))
    [first] = _heartbeats(broker.start(0))
    assert _heartbeats(broker.handle(5, 3000, BrokerHeartbeatResponse(first.correlation_id, 0, True))) == []
    [second] = _heartbeats(broker.timer(10, "heartbeat"))
    broker.handle_commit([])           # caught up further while the heartbeat is out
    assert _heartbeats(broker._take()) == []
    again = _heartbeats(broker.handle(20, 3000, BrokerHeartbeatResponse(second.correlation_id, 0, True)))
    assert len(again) == 1             # at once, not a heartbeat interval later
    assert _heartbeats(broker.handle(30, 3000, BrokerHeartbeatResponse(again[0].correlation_id, 0, False))) == []
    assert not broker.fenced


def test_a_clients_request_with_the_correlation_id_of_a_pending_controller_request_is_answered():
    # The broker's requests to the controller (heartbeats, forwarded CreateTopics) are
    # matched to their answers by correlation id. A client picks its own ids (kafka-python
    # counts from 1, and a long-lived consumer passes a million): a request of its that
    # carries the id of a heartbeat still waiting for the (dead) controller is a request
    # to answer, not the heartbeat's answer.
    from minikafka.cluster import AdminNode
    from minikafka.messages import MetadataRequest, MetadataResponse

    cluster = Cluster(brokers=1, seed=3, record_history=False)
    try:
        cluster.create_topic("t", 1, 1)
        broker = cluster.broker(1)
        cluster.kill(cluster.controller_ids[0])
        assert cluster.run_until(lambda: broker.controller_channel.pending_count() > 0, 5_000)
        corr = next(iter(broker.controller_channel._pending))
        client = cluster.add_client("admin", AdminNode)
        node = cluster.world.nodes[client]
        cluster.world.call_node(client, lambda n: n.send(1, MetadataRequest(corr, ("t",))))
        assert cluster.run_until(lambda: corr in node.responses, 1_000)
        answer = node.responses[corr]
        assert isinstance(answer, MetadataResponse) and [t.name for t in answer.topics] == ["t"]
        assert corr in broker.controller_channel._pending  # the heartbeat still waits for its answer
    finally:
        cluster.close()
