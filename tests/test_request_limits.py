"""Issue 13, part 5, in the simulated world: what one request may cost the cluster.

- ``max.request.partition.size.limit``: a CreateTopics or CreatePartitions that would add
  more partitions than that is refused whole, with Kafka's POLICY_VIOLATION ("Excessively
  large number of partitions per request."), before any partition is placed;
- ``fetch.max.bytes``: a Fetch answer holds at most that many bytes whatever ``max_bytes``
  and ``partition_max_bytes`` ask (one batch at least, so a larger batch still flows).

The same limits against real processes are in ``test_wire_security.py``.
"""

from __future__ import annotations

import pytest

from minikafka.cluster import Cluster
from minikafka.controller import EXCESSIVE_PARTITIONS
from minikafka.messages import (
    NO_ERROR,
    POLICY_VIOLATION,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    FetchPartition,
    FetchRequest,
    ProducePartition,
    ProduceRequest,
    TopicConfig,
)
from minikafka.records import MemoryRecords, RecordBatch
from sim_helpers import request

FAST = {"replica.lag.time.max.ms": 10_000, "request.timeout.ms": 10_000}
HUGE = 2**31 - 1


@pytest.fixture
def make_cluster(tmp_path):
    made = []

    def make(brokers=1, *, config=None):
        c = Cluster(brokers, seed=1, config={**FAST, **(config or {})}, dir=tmp_path / f"cluster-{len(made)}")
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def create(c, *topics: TopicConfig):
    answer = request(c, 1, lambda k: CreateTopicsRequest(k, topics))
    return {name: (error, message) for name, error, message in answer.results}


def test_create_topics_over_the_partition_limit_is_refused_whole_and_creates_nothing(make_cluster):
    c = make_cluster(config={"max.request.partition.size.limit": 10})
    answer = create(c, TopicConfig("small", 2, 1), TopicConfig("big", 9, 1))
    assert answer == {"small": (POLICY_VIOLATION, EXCESSIVE_PARTITIONS), "big": (POLICY_VIOLATION, EXCESSIVE_PARTITIONS)}
    assert create(c, TopicConfig("after", 1, 1)) == {"after": (NO_ERROR, None)}
    assert c.run_until(lambda: "after" in c.broker(1).topics, 10_000)
    assert "small" not in c.broker(1).topics and "big" not in c.broker(1).topics
    assert not any(p.name.startswith(("small-", "big-")) for p in (c.dir / "broker-1").iterdir())


def test_create_topics_at_the_limit_is_served(make_cluster):
    c = make_cluster(config={"max.request.partition.size.limit": 10})
    assert create(c, TopicConfig("a", 4, 1), TopicConfig("b", 6, 1)) == {"a": (NO_ERROR, None), "b": (NO_ERROR, None)}


def test_the_default_limit_is_kafkas_2000(make_cluster):
    c = make_cluster()
    assert create(c, TopicConfig("million", 1_000_000, 1)) == {"million": (POLICY_VIOLATION, EXCESSIVE_PARTITIONS)}


def test_create_partitions_counts_only_the_new_partitions_against_the_limit(make_cluster):
    c = make_cluster(config={"max.request.partition.size.limit": 10})
    assert create(c, TopicConfig("grow", 8, 1)) == {"grow": (NO_ERROR, None)}
    refused = request(c, 1, lambda k: CreatePartitionsRequest(k, (("grow", 19),)))
    assert refused.results == (("grow", POLICY_VIOLATION, EXCESSIVE_PARTITIONS),)
    served = request(c, 1, lambda k: CreatePartitionsRequest(k, (("grow", 18),)))  # 10 new
    assert served.results[0][1] == NO_ERROR
    assert c.run_until(lambda: c.broker(1).topics["grow"].num_partitions == 18, 10_000)


def test_a_fetch_asking_for_2_gib_gets_at_most_fetch_max_bytes(make_cluster):
    c = make_cluster(config={"fetch.max.bytes": 4096})
    c.create_topic("t", 1, 1)
    value = b"x" * 1000
    for _ in range(20):  # 20 batches of ~1 KB: ~20 KB in the log
        answer = request(c, 1, lambda k: ProduceRequest(k, 1, 5_000, (ProducePartition(
            "t", 0, bytes(RecordBatch.build([value]))),)))
        assert answer.partitions[0].error == NO_ERROR
    greedy = request(c, 1, lambda k: FetchRequest(k, -1, 0, 1, (FetchPartition("t", 0, 0, partition_max_bytes=HUGE),),
                                                  max_bytes=HUGE))
    records = greedy.partitions[0].records
    assert 0 < len(records) <= 4096
    assert 1 <= len(list(MemoryRecords(records).batches())) < 20  # whole batches, not the log


def test_one_batch_larger_than_fetch_max_bytes_still_flows(make_cluster):
    c = make_cluster(config={"fetch.max.bytes": 100})
    c.create_topic("t", 1, 1)
    big = bytes(RecordBatch.build([b"y" * 500]))
    assert request(c, 1, lambda k: ProduceRequest(k, 1, 5_000, (ProducePartition("t", 0, big),))).partitions[0].error == 0
    answer = request(c, 1, lambda k: FetchRequest(k, -1, 0, 1, (FetchPartition("t", 0, 0),), max_bytes=HUGE))
    (stored,) = MemoryRecords(answer.partitions[0].records).batches()  # whole, though over the cap
    assert [r.value for r in stored.records()] == [b"y" * 500]


def metadata(c, names, auto=True):
    from minikafka.messages import MetadataRequest

    return request(c, 1, lambda k: MetadataRequest(k, tuple(names), allow_auto_topic_creation=auto))


def test_a_metadata_request_naming_a_topic_many_times_answers_it_once(make_cluster):
    c = make_cluster()
    answer = metadata(c, ["same"] * 1000, auto=False)
    assert [t.name for t in answer.topics] == ["same"]


def test_one_metadata_request_auto_creates_its_topics_in_one_batch_under_the_partition_limit(make_cluster):
    c = make_cluster(config={"max.request.partition.size.limit": 10})
    many = [f"auto-{i}" for i in range(11)]  # 11 topics of num.partitions=1: over the limit, none created
    metadata(c, many)
    assert create(c, TopicConfig("after", 1, 1)) == {"after": (NO_ERROR, None)}
    assert c.run_until(lambda: "after" in c.broker(1).topics, 10_000)
    assert not set(many) & set(c.broker(1).topics)
    few = [f"few-{i}" for i in range(10)]  # at the limit: all of them, from one request
    metadata(c, few)
    assert c.run_until(lambda: set(few) <= set(c.broker(1).topics), 10_000)


# --- a topic far larger than one step: its replicas are opened a share at a time -------------

def _broker(tmp_path):
    from minikafka.broker.broker import Broker
    from minikafka.broker.config import BrokerConfig

    broker = Broker(1, tmp_path, BrokerConfig({}), controllers=(3000,))
    broker.start(0)
    return broker


def _commit(broker, *records):
    """Records the metadata log committed, applied as the broker's Raft listener would."""
    offset = broker.image.offset
    for i, record in enumerate(records, 1):
        broker.image.apply(record, offset + i, 0)
    broker._publish(broker.image.take_delta())
    return broker._take()


def _new_topic(name, topic_id, partitions):
    from minikafka.metadata import records as mr

    return [mr.TopicRecord(name, topic_id),
            *(mr.PartitionRecord(p, topic_id, (1,), (1,), 1) for p in range(partitions))]


def _open_timer(effects):
    from minikafka.node import SetTimer

    return [e for e in effects if type(e) is SetTimer and e.key == "open-replicas"]


def test_a_broker_opens_a_large_topics_replicas_a_share_per_step_in_the_latest_state(tmp_path):
    # A 2,000-partition CreateTopics made each broker create 2,000 logs in the step that applied
    # it, and every other client of the broker waited those seconds for an answer.
    from minikafka.broker.broker import OPEN_AT_ONCE, OPEN_REPLICAS_PER_STEP as SHARE
    from minikafka.metadata import records as mr

    broker = _broker(tmp_path)
    rm = broker.replica_manager
    effects = _commit(broker, *_new_topic("wide", "id-wide", OPEN_AT_ONCE + 5))
    assert len(rm.partitions) == SHARE
    assert [e.delay_ms for e in _open_timer(effects)] == [0]
    # Not open yet: a change committed meanwhile is the state it opens in.
    _commit(broker, mr.PartitionChangeRecord(OPEN_AT_ONCE, "id-wide", isr=(1,)))
    steps = 0
    while _open_timer(effects):
        before = len(rm.partitions)
        effects = broker.timer(steps + 1, "open-replicas")
        assert 0 < len(rm.partitions) - before <= SHARE
        steps += 1
    assert steps == -(-(OPEN_AT_ONCE + 5 - SHARE) // SHARE) and len(rm.partitions) == OPEN_AT_ONCE + 5
    assert all(p.is_leader for p in rm.partitions.values())
    assert rm.partitions[("wide", OPEN_AT_ONCE)].partition_epoch == 1
    assert rm.partitions[("wide", 0)].partition_epoch == 0


def test_a_topic_of_up_to_open_at_once_partitions_is_opened_in_the_step_that_created_it(tmp_path):
    from minikafka.broker.broker import OPEN_AT_ONCE

    broker = _broker(tmp_path)
    assert _open_timer(_commit(broker, *_new_topic("t", "id-t", OPEN_AT_ONCE))) == []
    assert len(broker.replica_manager.partitions) == OPEN_AT_ONCE


def test_a_topic_deleted_before_its_replicas_were_all_open_leaves_no_log_behind(tmp_path):
    from minikafka.broker.broker import OPEN_AT_ONCE
    from minikafka.metadata import records as mr

    broker = _broker(tmp_path)
    effects = _commit(broker, *_new_topic("gone", "id-gone", 2 * OPEN_AT_ONCE))
    assert _open_timer(effects)
    _commit(broker, mr.RemoveTopicRecord("id-gone"))
    broker.timer(1, "open-replicas")  # the timer set before the removal still fires
    assert broker.replica_manager.partitions == {}
    assert not any(p.name.startswith("gone-") for p in tmp_path.iterdir())


def test_a_large_topic_is_whole_on_every_broker_and_its_followers_name_each_replica_about_once(make_cluster, monkeypatch):
    # Each share's new partitions ride on the follower's next fetch: a fresh fetch per share,
    # each naming every partition so far, named 9,600 replicas for this topic's 768.
    from minikafka.broker.broker import OPEN_AT_ONCE
    from minikafka.broker.replica_manager import ReplicaManager

    c = make_cluster(brokers=3)
    partitions = 6 * OPEN_AT_ONCE
    named = []
    send_fetch = ReplicaManager.send_fetch
    monkeypatch.setattr(ReplicaManager, "send_fetch",
                        lambda rm, fetcher: (named.append(len(fetcher.partitions)), send_fetch(rm, fetcher))[1])
    c.create_topic("wide", partitions=partitions, replication_factor=3)
    assert c.run_until(lambda: all(len(c.broker(b).replica_manager.partitions) == partitions for b in c.broker_ids),
                       10_000)
    assert 0 < sum(named) <= 2 * partitions  # two followers of each partition
    last = partitions - 1  # opened by the last share
    leader = c.broker(1).partition_states[("wide", last)].leader
    answer = request(c, leader, lambda k: ProduceRequest(k, -1, 10_000, (
        ProducePartition("wide", last, bytes(RecordBatch.build([b"v"]))),)))
    assert [p.error for p in answer.partitions] == [NO_ERROR]  # acks=all: both followers have it
