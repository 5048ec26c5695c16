"""The controller: the one node that decides leaders and ISRs (ZooKeeper-era, single node).

Theory of operation
-------------------
Brokers heartbeat the controller every ``broker.heartbeat.interval.ms``. A broker silent
for ``broker.session.timeout.ms`` is dead; one that heartbeats with a new incarnation
restarted (and is first treated as dead, so it cannot lead on stale state). Every decision
is a new ``PartitionState`` pushed to the live brokers with ``UpdateMetadata``:

- Create topic: replicas placed as Kafka's ``assignReplicasToBrokers`` does (rack unaware):
  partition p's first replica on broker ``(p + start) % n``, the others shifted by a second
  offset that grows every n partitions; start and shift are drawn from a seeded RNG. The
  first replica is the preferred leader; the ISR is all replicas.
- Broker dies: for each partition it led, the next replica (in assignment order) that is
  alive and in the ISR leads; with none, the partition goes offline (leader -1) unless
  ``unclean.leader.election.enable`` lets any live replica lead, at the cost of losing
  what it had not replicated. A dead follower leaves the ISR. A leader change bumps the
  leader epoch; every change bumps the partition epoch.
- Broker comes back: offline partitions it is in the ISR of get it as leader.
- AlterPartition: a leader asks for an ISR change; granted only if it names the current
  leader epoch and partition epoch (so a deposed leader cannot shrink or grow the ISR) and
  every new member is alive.

The controller keeps its state in memory and is never crashed in the simulations of this
chapter: in ZooKeeper-era Kafka that state lived in ZooKeeper. Notebook 08 replaces it with
a Raft quorum. No I/O, no clock: ``now`` comes with every input.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any, Hashable

from minikafka.broker.config import TOPIC_KEYS, BrokerConfig, validate
from minikafka.errors import IllegalArgumentError, InvalidTopicError
from minikafka.messages import (
    CONTROLLER_ID,
    FENCED_LEADER_EPOCH,
    INVALID_CONFIG,
    INVALID_PARTITIONS,
    INVALID_REPLICATION_FACTOR,
    INVALID_TOPIC_EXCEPTION,
    INVALID_UPDATE_VERSION,
    NO_ERROR,
    NOT_LEADER_OR_FOLLOWER,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_OR_PARTITION,
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    PartitionState,
    TopicConfig,
    UpdateMetadata,
)
from minikafka.node import NodeId, StateMachine
from minikafka.topic import validate_topic_name

INELIGIBLE_REPLICA = 107
PRODUCER_ID_BLOCK = 1000


@dataclass
class BrokerRegistration:
    incarnation: int
    last_heartbeat_ms: int
    alive: bool = True
    host: str = ""  # where clients reach it (real-process clusters; empty in the simulation)
    port: int = 0


def assign_replicas(n_partitions: int, replication_factor: int, brokers: list[int],
                    start_index: int, next_replica_shift: int) -> list[tuple[int, ...]]:
    """Kafka's rack-unaware replica placement (``AdminUtils.assignReplicasToBrokers``)."""
    n = len(brokers)
    out = []
    for p in range(n_partitions):
        if p > 0 and p % n == 0:
            next_replica_shift += 1
        first = (p + start_index) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            shift = 1 + (next_replica_shift + j) % (n - 1)
            replicas.append(brokers[(first + shift) % n])
        out.append(tuple(replicas))
    return out


class Controller(StateMachine):
    def __init__(self, config: BrokerConfig | None = None, *, seed: int = 0) -> None:
        super().__init__(CONTROLLER_ID)
        self.config = config or BrokerConfig()
        self.rng = random.Random(f"controller-{seed}")
        self.brokers: dict[int, BrokerRegistration] = {}
        self.topics: dict[str, TopicConfig] = {}
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        self.version = 0
        self.next_producer_id = 0
        self.elections: list[tuple[int, str, int, int, int, bool]] = []  # (time, topic, p, old, new, unclean)

    # --- views -----------------------------------------------------------------------------------

    @property
    def live_brokers(self) -> tuple[int, ...]:
        return tuple(sorted(b for b, reg in self.brokers.items() if reg.alive))

    def is_alive(self, broker_id: int) -> bool:
        reg = self.brokers.get(broker_id)
        return reg is not None and reg.alive

    def _unclean_allowed(self, topic: str) -> bool:
        return self.config.for_topic(dict(self.topics[topic].configs))["unclean.leader.election.enable"]

    # --- inputs -------------------------------------------------------------------------------------

    def on_start(self) -> None:
        self.set_timer("session-check", 500)

    def on_timer(self, key: Hashable) -> None:
        if key == "session-check":
            timeout = self.config["broker.session.timeout.ms"]
            expired = [b for b, reg in sorted(self.brokers.items())
                       if reg.alive and self.now - reg.last_heartbeat_ms > timeout]
            for broker_id in expired:  # all of them first, so none is elected by another's failure
                self.brokers[broker_id].alive = False
            changed = []
            for broker_id in expired:
                changed += self._broker_failed(broker_id)
            if expired:
                self._push(changed)
            self.set_timer("session-check", 500)

    def on_message(self, src: NodeId, message: Any) -> None:
        handler = self._HANDLERS.get(type(message))
        if handler is not None:
            handler(self, src, message)

    def _heartbeat(self, src: NodeId, req: BrokerHeartbeatRequest) -> None:
        reg = self.brokers.get(req.broker_id)
        if reg is None or reg.incarnation != req.incarnation or not reg.alive:
            changed = []
            if reg is not None and reg.alive:  # restarted before its session expired
                changed += self._broker_failed(req.broker_id)
            self.brokers[req.broker_id] = BrokerRegistration(req.incarnation, self.now, host=req.host, port=req.port)
            changed += self._broker_up(req.broker_id)
            self._push(changed)
            self._send_full(req.broker_id)
        else:
            reg.last_heartbeat_ms = self.now
            if req.metadata_version < self.version:
                self._send_full(req.broker_id)
        self.send(src, BrokerHeartbeatResponse(req.correlation_id, NO_ERROR))

    # --- decisions --------------------------------------------------------------------------------------

    def _set(self, state: PartitionState, **changes: Any) -> PartitionState:
        old = state
        if "leader" in changes and changes["leader"] != old.leader:
            changes["leader_epoch"] = old.leader_epoch + 1
        new = replace(old, partition_epoch=old.partition_epoch + 1, **changes)
        self.partitions[(new.topic, new.partition)] = new
        return new

    def _elect(self, state: PartitionState, exclude: int | None) -> PartitionState:
        def ok(r: int) -> bool:
            return r != exclude and self.is_alive(r)

        in_sync = [r for r in state.replicas if r in state.isr and ok(r)]
        if in_sync:
            leader, isr, unclean = in_sync[0], tuple(r for r in state.isr if ok(r)), False
        elif self._unclean_allowed(state.topic) and any(ok(r) for r in state.replicas):
            leader = next(r for r in state.replicas if ok(r))
            isr, unclean = (leader,), True
        else:
            leader, isr, unclean = -1, state.isr, False
        self.elections.append((self.now, state.topic, state.partition, state.leader, leader, unclean))
        return self._set(state, leader=leader, isr=isr)

    def _broker_failed(self, broker_id: int) -> list[PartitionState]:
        self.brokers[broker_id].alive = False
        changed = []
        for key, state in sorted(self.partitions.items()):
            if state.leader == broker_id:
                changed.append(self._elect(state, exclude=broker_id))
            elif broker_id in state.isr and len(state.isr) > 1 and state.leader >= 0:
                changed.append(self._set(state, isr=tuple(r for r in state.isr if r != broker_id)))
        return changed

    def _broker_up(self, broker_id: int) -> list[PartitionState]:
        changed = []
        for key, state in sorted(self.partitions.items()):
            if state.leader == -1 and broker_id in state.replicas:
                if broker_id in state.isr or self._unclean_allowed(state.topic):
                    changed.append(self._elect(state, exclude=None))
        return changed

    # --- telling the brokers ---------------------------------------------------------------------------------

    def _endpoints(self) -> tuple[tuple[int, str, int], ...]:
        return tuple((b, reg.host, reg.port) for b, reg in sorted(self.brokers.items()) if reg.alive and reg.host)

    def _push(self, changed: list[PartitionState], topics: tuple[TopicConfig, ...] = ()) -> None:
        self.version += 1
        update = UpdateMetadata(self.version, self.live_brokers, tuple(changed), topics,
                                endpoints=self._endpoints())
        for b in self.live_brokers:
            self.send(b, update)

    def _send_full(self, broker_id: int) -> None:
        self.send(broker_id, UpdateMetadata(
            self.version, self.live_brokers, tuple(s for _, s in sorted(self.partitions.items())),
            tuple(t for _, t in sorted(self.topics.items())), full=True, endpoints=self._endpoints(),
        ))

    # --- requests ------------------------------------------------------------------------------------------------

    def _create_topics(self, src: NodeId, req: CreateTopicsRequest) -> None:
        results, created, changed = [], [], []
        for topic in req.topics:
            error, message = self._check_new_topic(topic)
            if error == NO_ERROR:
                live = list(self.live_brokers)
                start = self.rng.randrange(len(live))
                shift = self.rng.randrange(len(live))
                placement = assign_replicas(topic.num_partitions, topic.replication_factor, live, start, shift)
                self.topics[topic.name] = topic
                created.append(topic)
                for p, replicas in enumerate(placement):
                    state = PartitionState(topic.name, p, replicas[0], 0, replicas, replicas, 0)
                    self.partitions[(topic.name, p)] = state
                    changed.append(state)
            results.append((topic.name, error, message))
        if created:
            self._push(changed, tuple(created))
        self.send(src, CreateTopicsResponse(req.correlation_id, tuple(results)))

    def _delete_topics(self, src: NodeId, req: DeleteTopicsRequest) -> None:
        results, deleted = [], []
        for name in req.topics:
            if name not in self.topics:
                results.append((name, UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist"))
            elif name.startswith("__"):
                results.append((name, INVALID_TOPIC_EXCEPTION, f"'{name}' is an internal topic and cannot be deleted"))
            else:
                n = self.topics.pop(name).num_partitions
                for p in range(n):
                    self.partitions.pop((name, p), None)
                deleted.append(name)
                results.append((name, NO_ERROR, None))
        if deleted:
            self.version += 1
            update = UpdateMetadata(self.version, self.live_brokers, (), (), endpoints=self._endpoints(),
                                    deleted_topics=tuple(deleted))
            for b in self.live_brokers:
                self.send(b, update)
        self.send(src, DeleteTopicsResponse(req.correlation_id, tuple(results)))

    def _check_new_topic(self, topic: TopicConfig) -> tuple[int, str | None]:
        try:
            validate_topic_name(topic.name)
        except InvalidTopicError as e:
            return INVALID_TOPIC_EXCEPTION, str(e)
        if topic.name in self.topics:
            return TOPIC_ALREADY_EXISTS, f"topic '{topic.name}' already exists"
        if topic.num_partitions < 1:
            return INVALID_PARTITIONS, f"number of partitions must be at least 1, not {topic.num_partitions}"
        live = len(self.live_brokers)
        if topic.replication_factor < 1 or topic.replication_factor > live:
            return INVALID_REPLICATION_FACTOR, (
                f"replication factor {topic.replication_factor} is not between 1 and the "
                f"{live} available brokers"
            )
        try:
            validate(dict(topic.configs), allowed=TOPIC_KEYS)
        except IllegalArgumentError as e:
            return INVALID_CONFIG, str(e)
        return NO_ERROR, None

    def _alter_partition(self, src: NodeId, req: AlterPartitionRequest) -> None:
        state = self.partitions.get((req.topic, req.partition))
        if state is None:
            error = UNKNOWN_TOPIC_OR_PARTITION
        elif state.leader != req.broker_id:
            error = NOT_LEADER_OR_FOLLOWER
        elif req.leader_epoch != state.leader_epoch:
            error = FENCED_LEADER_EPOCH
        elif req.partition_epoch != state.partition_epoch:
            error = INVALID_UPDATE_VERSION
        elif (
            req.broker_id not in req.new_isr
            or not set(req.new_isr) <= set(state.replicas)
            or not all(self.is_alive(r) for r in req.new_isr)
        ):
            error = INELIGIBLE_REPLICA
        else:
            state = self._set(state, isr=tuple(sorted(req.new_isr)))
            self._push([state])
            self.send(src, AlterPartitionResponse(req.correlation_id, NO_ERROR, state))
            return
        self.send(src, AlterPartitionResponse(req.correlation_id, error, state))

    def _allocate_producer_ids(self, src: NodeId, req: AllocateProducerIdsRequest) -> None:
        first = self.next_producer_id
        self.next_producer_id += PRODUCER_ID_BLOCK
        self.send(src, AllocateProducerIdsResponse(req.correlation_id, NO_ERROR, first, PRODUCER_ID_BLOCK))

    _HANDLERS = {
        BrokerHeartbeatRequest: _heartbeat,
        CreateTopicsRequest: _create_topics,
        DeleteTopicsRequest: _delete_topics,
        AlterPartitionRequest: _alter_partition,
        AllocateProducerIdsRequest: _allocate_producer_ids,
    }
