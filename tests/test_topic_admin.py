"""Changing a running cluster as Kafka users do, in the simulated world (seeded, simulated
time): topics auto-created by a Metadata request that allows it.

The same operations over TCP, with kafka-python and confluent-kafka, are in
``test_wire_admin.py``.
"""

from __future__ import annotations

import pytest

from minikafka.cluster import Cluster
from minikafka.messages import (
    INVALID_TOPIC_EXCEPTION,
    LEADER_NOT_AVAILABLE,
    NO_ERROR,
    UNKNOWN_TOPIC_OR_PARTITION,
    MetadataRequest,
)

FAST = {"replica.lag.time.max.ms": 10_000, "request.timeout.ms": 10_000}


@pytest.fixture
def make_cluster(tmp_path):
    made = []

    def make(brokers=3, *, seed=1, config=FAST, **kw):
        c = Cluster(brokers, seed=seed, config=config, dir=tmp_path / f"cluster-{len(made)}", **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def request(c, dst, make, timeout_ms=10_000):
    """Send ``make(correlation_id)`` from the admin node to ``dst``; the answer or None."""
    admin = c.world.nodes[c.admin_id]
    corr = c.world.call_node(c.admin_id, lambda node: node.request(dst, make))
    c.run_until(lambda: corr in admin.responses, timeout_ms)
    return admin.responses.pop(corr, None)


def errors(answer):
    return {t.name: t.error for t in answer.topics}


# --- auto-creation ------------------------------------------------------------------------------------------


def test_a_metadata_request_that_allows_it_creates_an_unknown_topic_with_the_broker_defaults(make_cluster):
    c = make_cluster(3, config={**FAST, "num.partitions": 2, "default.replication.factor": 3})
    assert c.run_until(lambda: len(c.broker(1).live_brokers) == 3, 10_000)
    first = request(c, 1, lambda k: MetadataRequest(k, ("orders",), allow_auto_topic_creation=True))
    assert errors(first) == {"orders": LEADER_NOT_AVAILABLE}  # what Kafka answers while it creates
    assert c.run_until(lambda: "orders" in c.broker(1).topics, 10_000)
    later = request(c, 1, lambda k: MetadataRequest(k, ("orders",), allow_auto_topic_creation=True))
    assert errors(later) == {"orders": NO_ERROR}
    assert [len(p.replicas) for p in later.topics[0].partitions] == [3, 3]


def test_the_replication_factor_is_capped_at_the_live_brokers(make_cluster):
    c = make_cluster(1, config={**FAST, "default.replication.factor": 3})
    assert c.run_until(lambda: c.broker(1).live_brokers == (1,), 10_000)
    request(c, 1, lambda k: MetadataRequest(k, ("t",), allow_auto_topic_creation=True))
    assert c.run_until(lambda: "t" in c.broker(1).topics, 10_000)
    assert c.broker(1).topics["t"].replication_factor == 1


def test_no_auto_creation_unless_the_client_allows_it_and_the_broker_is_configured_to(make_cluster):
    c = make_cluster(1)
    assert errors(request(c, 1, lambda k: MetadataRequest(k, ("a",)))) == {"a": UNKNOWN_TOPIC_OR_PARTITION}
    off = make_cluster(1, config={**FAST, "auto.create.topics.enable": False})
    answer = request(off, 1, lambda k: MetadataRequest(k, ("b",), allow_auto_topic_creation=True))
    assert errors(answer) == {"b": UNKNOWN_TOPIC_OR_PARTITION}
    c.advance(2_000)
    off.advance(2_000)
    assert "a" not in c.broker(1).topics and "b" not in off.broker(1).topics


def test_an_illegal_name_is_invalid_never_created(make_cluster):
    c = make_cluster(1)
    names = ("bad/name", "..", "__cluster_metadata")
    answer = request(c, 1, lambda k: MetadataRequest(k, names, allow_auto_topic_creation=True))
    assert errors(answer) == {"bad/name": INVALID_TOPIC_EXCEPTION, "..": INVALID_TOPIC_EXCEPTION,
                              "__cluster_metadata": UNKNOWN_TOPIC_OR_PARTITION}
    c.advance(2_000)
    assert not set(names) & set(c.broker(1).topics)
