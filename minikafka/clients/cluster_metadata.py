"""What a client knows about the cluster: ``ClusterMetadata``.

Theory of operation
-------------------
Kafka's clients keep their picture of the cluster apart from the code that sends
requests (Java's ``Metadata``/``Cluster``, kafka-python's ``ClusterMetadata``): the
producer's ``Sender`` and the consumer's ``ConsumerNetworkClient`` each hold one, ask it
which broker leads a partition, and hand it every ``MetadataResponse`` they get.

It keeps the topics the client wants (only those are asked for), the last answer's
brokers, controller and partitions, and whether a refresh is due (``need_update``: a
wanted topic is still unknown, or the client saw an error that says its view is stale).
A partition whose leader is -1 has no leader *now* (an election is under way): work for
it waits. A lagging broker may answer with an older view: a partition's leader epoch
never goes back.

Never: send, read a clock (``update`` is given the time of the answer) or do I/O.
"""

from __future__ import annotations

from minikafka.messages import NO_ERROR, MetadataResponse, PartitionMetadata
from minikafka.node import NodeId
from minikafka.topic import TopicPartition


class ClusterMetadata:
    """A client's view of brokers, topics and leaders (kafka-python's ``ClusterMetadata``).

    Only the topics the client has used are asked for. A partition whose leader is -1 has
    no leader *now* (an election is under way): batches for it wait.
    """

    def __init__(self, bootstrap_nodes: list[NodeId]) -> None:
        self.bootstrap_nodes = list(bootstrap_nodes)
        self.brokers: tuple[NodeId, ...] = ()
        self.controller_id: NodeId | None = None
        self._topics: dict[str, None] = {}  # wanted topics, in the order first used
        self._partitions: dict[str, dict[int, PartitionMetadata]] = {}
        self._topic_errors: dict[str, int] = {}
        self._by_broker: dict[NodeId, list[TopicPartition]] | None = None
        self.need_update = False
        self.last_refresh_ms: int | None = None
        self.last_attempt_ms: int | None = None
        self.updates = 0

    # -- what to ask for
    def topics(self) -> list[str]:
        return list(self._topics)

    def add_topic(self, topic: str) -> None:
        if topic not in self._topics:
            self._topics[topic] = None
            if topic not in self._partitions:
                self.need_update = True

    def remove_topic(self, topic: str) -> None:
        self._topics.pop(topic, None)

    def request_update(self) -> None:
        self.need_update = True

    # -- answers
    def update(self, response: MetadataResponse, now: int) -> None:
        self.brokers = tuple(response.brokers)
        self.controller_id = response.controller_id
        for topic in response.topics:
            if topic.error == NO_ERROR:
                old = self._partitions.get(topic.name, {})
                new = {}
                for pm in topic.partitions:
                    prev = old.get(pm.partition)
                    # A lagging broker may answer with an older view: never go back in epochs.
                    new[pm.partition] = prev if prev is not None and prev.leader_epoch > pm.leader_epoch else pm
                self._partitions[topic.name] = new
                self._topic_errors.pop(topic.name, None)
            else:
                # Keep partitions we already know: a broker that lags behind the controller
                # may not know the topic yet. The next refresh (or a produce error) corrects us.
                self._topic_errors[topic.name] = topic.error
        self._by_broker = None
        self.last_refresh_ms = now
        self.updates += 1
        # A topic we want but the cluster does not know: keep asking (it may be being created).
        self.need_update = any(t not in self._partitions for t in self._topics)

    def leader_for_partition(self, tp: TopicPartition) -> NodeId | None:
        pm = self._partitions.get(tp.topic, {}).get(tp.partition)
        if pm is None or pm.leader < 0:
            return None
        return pm.leader

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        parts = self._partitions.get(topic)
        return None if parts is None else set(parts)

    def available_partitions_for_topic(self, topic: str) -> set[int] | None:
        parts = self._partitions.get(topic)
        return None if parts is None else {p for p, pm in parts.items() if pm.leader >= 0}

    def topic_error(self, topic: str) -> int | None:
        return self._topic_errors.get(topic)

    def partitions_for_broker(self, node: NodeId) -> list[TopicPartition]:
        if self._by_broker is None:
            by: dict[NodeId, list[TopicPartition]] = {}
            for topic in sorted(self._partitions):
                for p, pm in sorted(self._partitions[topic].items()):
                    if pm.leader >= 0:
                        by.setdefault(pm.leader, []).append(TopicPartition(topic, p))
            self._by_broker = by
        return self._by_broker.get(node, [])


__all__ = ["ClusterMetadata"]
