"""``Cluster``: a whole simulated Kafka cluster in one Python object.

Theory of operation
-------------------
A ``Cluster`` builds a ``World`` (virtual clock, network, crashes), a quorum of
``controllers`` controllers (node ids 3000, 3001, ...; one by default, three to watch Raft
at work) and ``brokers`` brokers, each node with its own log directory under ``dir`` (a
temporary directory by default): a controller's holds the metadata log
``__cluster_metadata``, and each broker keeps a copy of it next to its partitions.
Everything a notebook does goes through the world's event loop:
``create_topic`` sends a real CreateTopics request and runs the world until it is
answered; ``advance(ms=...)`` lets simulated time pass; ``kill``/``restart`` crash and
reboot brokers (a restarted broker recovers its logs from disk); ``partition``/``heal``
cut and mend network links; ``fill_disk``/``fail_fsync`` break a broker machine's disk
(``disks``: one ``storage.disk.Disk`` per broker, outliving its crashes, through which its
partitions' logs write; the metadata log copy is not on it). Clients (``KafkaProducer``, the checker's readers) are nodes
too, added with ``add_client``.

``Cluster(..., rules={"high_watermark": my_fn})`` runs every broker on a student's rule in
place of Kafka's (``minikafka.rules``): each broker calls it, under guard, where it would call
the reference (its partitions and their logs alike); the producers made on the cluster call its
``murmur2``/``partition_for_key`` (``client_rules``). A rule that raises, hangs or returns nonsense raises ``RuleError`` out of
``advance``/``run_until`` (and whatever runs the world for a client), after the cluster is
closed; ``rule_trace`` counts the calls and keeps those whose answer differed from Kafka's.

Same seed, same run: ``Cluster(brokers=3, seed=7)`` always places replicas, elects
leaders and loses messages in the same way, so every output in a notebook is reproducible.
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from minikafka.broker.broker import Broker
from minikafka.storage.disk import Disk
from minikafka.broker.config import BrokerConfig
from minikafka.controller import QuorumController
from minikafka.metadata.image import MetadataImage
from minikafka.errors import IllegalArgumentError, KafkaTimeoutError, for_code
from minikafka.messages import (
    ERROR_NAMES,
    NO_ERROR,
    CreateTopicsRequest,
    CreateTopicsResponse,
    Disconnected,
    PartitionState,
    TopicConfig,
    controller_ids,
)
from minikafka import scratch
from minikafka.node import NodeId, StateMachine
from minikafka.rules import REFERENCE, RuleError, Rules, RuleTrace, validate as validate_rules
from minikafka.sim import World

logger = logging.getLogger("minikafka.cluster")


class AdminNode(StateMachine):
    """A minimal admin client: sends one request at a time and keeps the answers."""

    def __init__(self, node_id: NodeId) -> None:
        super().__init__(node_id)
        self.responses: dict[int, Any] = {}
        self.disconnected: list[NodeId] = []
        self._correlation = itertools.count(1)

    def request(self, dst: NodeId, make: Callable[[int], Any]) -> int:
        corr = next(self._correlation)
        self.send(dst, make(corr))
        return corr

    def on_message(self, src: NodeId, message: Any) -> None:
        if isinstance(message, Disconnected):
            self.disconnected.append(message.node)  # the request to a dead broker is lost
            return
        self.responses[message.correlation_id] = message


class Cluster:
    """A simulated Kafka cluster: ``Cluster(brokers=3, seed=7)``."""

    def __init__(
        self,
        brokers: int = 3,
        *,
        seed: int = 0,
        config: Mapping[str, Any] | None = None,
        dir: str | Path | None = None,
        latency_ms: int = 1,
        record_history: bool = True,
        controllers: int = 1,
        raft_history: Any = None,
        rules: Mapping[str, Callable] | None = None,
    ) -> None:
        if not isinstance(brokers, int) or brokers < 1:
            raise IllegalArgumentError(f"a cluster needs at least 1 broker, not {brokers!r}")
        if not isinstance(controllers, int) or controllers < 1:
            raise IllegalArgumentError(f"a cluster needs at least 1 controller, not {controllers!r}")
        self.seed = seed
        self.rules = validate_rules(rules)  # {rule name: the student's function}; {}: Kafka's
        self.rule_trace = RuleTrace(on_error=lambda error: self.close())
        self.config = BrokerConfig(config)
        self._own_dir = dir is None
        # Its own folder is marked as this process's (minikafka.scratch): the next Cluster removes
        # it if this kernel dies without close(); a dir= given is never swept.
        self.dir = scratch.make("minikafka-") if dir is None else Path(dir)
        self.world = World(seed, latency_ms=latency_ms, record_history=record_history)
        self.world.on_halt = self._release_halted
        self.broker_ids = list(range(1, brokers + 1))
        self.controller_ids = list(controller_ids(controllers))
        self.raft_history = raft_history  # a checker's RaftHistory, if the quorum is to be judged
        self._last_image = MetadataImage()
        self._controller_incarnations = {c: 0 for c in self.controller_ids}
        self._incarnations = {b: 0 for b in self.broker_ids}
        # One disk per broker machine: it outlives the broker's crashes, as a real one does.
        self.disks = {b: Disk(f"broker-{b}'s disk") for b in self.broker_ids}
        self._client_counter = itertools.count(1)
        self._consumers: list = []  # every KafkaConsumer made on this cluster, for widgets and kill_consumer
        for c in self.controller_ids:
            self.world.add(c, self._controller_factory(c))
        for b in self.broker_ids:
            self.world.add(b, self._broker_factory(b))
        self.admin_id = self.add_client("admin", AdminNode)
        if not self.run_until(self._ready, 60_000):
            raise KafkaTimeoutError("the brokers did not register with the controller")

    def _next_incarnation(self, broker_id: int) -> int:
        """A new incarnation on every start, across ``Cluster`` objects on the same ``dir`` too
        (the controller must see a restarted broker as new): a counter kept next to its logs."""
        path = self.dir / f"broker-{broker_id}" / ".incarnation"
        try:
            last = int(path.read_text())
        except (OSError, ValueError):
            last = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(last + 1))
        return last + 1

    def _broker_factory(self, broker_id: int) -> Callable[[], Broker]:
        def make() -> Broker:
            self._incarnations[broker_id] = self._next_incarnation(broker_id)
            return Broker(broker_id, self.dir / f"broker-{broker_id}", self.config,
                          incarnation=self._incarnations[broker_id], controllers=tuple(self.controller_ids),
                          seed=self.seed, raft_history=self.raft_history, disk=self.disks[broker_id],
                          rules=self._rules_for(broker_id))
        return make

    def _rules_for(self, broker_id: int, name: str | None = None) -> Rules:
        if not self.rules:
            return REFERENCE
        return Rules(self.rules, node=broker_id if name is None else name, clock=lambda: self.world.now,
                     trace=self.rule_trace)

    def client_rules(self, client_id: str) -> Rules:
        """The rules a client made on this cluster calls (a producer's partitioner, a group
        leader's assignors): the cluster's ``rules=``, under guard, or Kafka's. ``client_id``
        labels its calls (the node: "consumer-7")."""
        if not self.rules:
            return REFERENCE
        return Rules(self.rules, node=client_id, clock=lambda: self.world.now, trace=self.rule_trace)

    def _ready(self, brokers: Iterable[int] | None = None) -> bool:
        """An active controller, and every broker (of ``brokers``) registered in its current
        incarnation, unfenced (so caught up with the metadata log)."""
        active = self._active_controller()
        if active is None:
            return False
        regs = active.image.brokers
        return all(b in regs and not regs[b].fenced and regs[b].incarnation == self._incarnations[b]
                   for b in (self.broker_ids if brokers is None else brokers))

    def _controller_factory(self, node_id: int) -> Callable[[], QuorumController]:
        def make() -> QuorumController:
            self._controller_incarnations[node_id] += 1
            return QuorumController(self.dir / f"controller-{node_id}", self.config, seed=self.seed,
                                    node_id=node_id, voters=tuple(self.controller_ids),
                                    incarnation=self._controller_incarnations[node_id],
                                    raft_history=self.raft_history,
                                    rules=self._rules_for(node_id, f"controller {node_id}"))
        return make

    # --- nodes ---------------------------------------------------------------------------------------

    @property
    def active_controller(self) -> QuorumController | None:
        """The active controller (the metadata quorum's leader), or None during an election or
        while a majority of the controllers is down (Kafka's ``ActiveControllerCount`` is 1 on
        it, 0 elsewhere; ``kafka-metadata-quorum describe --status`` names it ``LeaderId``)."""
        return self._active_controller()

    def _active_controller(self) -> QuorumController | None:
        for c in self.controller_ids:
            node = self.world.nodes.get(c)
            if node is not None and node.active:
                return node
        return None

    @property
    def controller(self) -> QuorumController:
        """The active controller (the quorum's leader) or, while there is none, the live
        controller that has applied the most of the metadata log."""
        active = self._active_controller()
        if active is not None:
            return active
        alive = [self.world.nodes[c] for c in self.controller_ids if self.world.alive(c)]
        if not alive:
            raise IllegalArgumentError(f"every controller ({self.controller_ids}) is dead")
        return max(alive, key=lambda n: (n.image.offset, -n.node_id))

    @property
    def image(self):
        """The cluster's metadata: the active controller's ``MetadataImage`` or, while there is
        none (an election, a majority down), the most advanced one any live node applied."""
        active = self._active_controller()
        if active is not None:
            self._last_image = active.image
            return active.image
        nodes = [self.world.nodes[n] for n in self.controller_ids + self.broker_ids if self.world.alive(n)]
        if nodes:
            self._last_image = max(nodes, key=lambda n: (n.image.offset, -n.node_id)).image
        return self._last_image  # every node dead (or the cluster closed): what was known last

    def controller_node(self, node_id: int) -> QuorumController:
        if node_id not in self.controller_ids:
            raise IllegalArgumentError(f"no controller {node_id}; controllers are {self.controller_ids}")
        if not self.world.alive(node_id):
            raise IllegalArgumentError(f"controller {node_id} is dead (restart it first)")
        return self.world.nodes[node_id]

    def broker(self, broker_id: int) -> Broker:
        if broker_id not in self.broker_ids:
            raise IllegalArgumentError(f"no broker {broker_id}; brokers are {self.broker_ids}")
        if not self.world.alive(broker_id):
            raise IllegalArgumentError(f"broker {broker_id} is dead (restart it first)")
        return self.world.nodes[broker_id]

    def alive(self, broker_id: int) -> bool:
        return self.world.alive(broker_id)

    def add_client(self, prefix: str, factory: Callable[[NodeId], StateMachine]) -> NodeId:
        node_id = f"{prefix}-{next(self._client_counter)}"
        self.world.add(node_id, lambda: factory(node_id))
        return node_id

    @property
    def now(self) -> int:
        return self.world.now

    # --- time ---------------------------------------------------------------------------------------------

    def advance(self, ms: int) -> "Cluster":
        """Let ``ms`` milliseconds of simulated time pass."""
        if ms < 0:
            raise IllegalArgumentError(f"time only moves forward: advance(ms={ms})")
        try:
            self.world.advance(ms)
        except RuleError as e:
            raise self._stopped(e) from e.__cause__  # (the student's line, where it raised)
        return self

    def run_until(self, done: Callable[[], bool], timeout_ms: int) -> bool:
        try:
            return self.world.run_until(done, timeout_ms)
        except RuleError as e:
            raise self._stopped(e) from e.__cause__  # (the student's line, where it raised)

    def _stopped(self, error: RuleError) -> RuleError:
        """A student's rule broke: the cluster is closed (the guard did it), and the error goes
        out without the simulator's frames (its message says all there is to say)."""
        self.close()
        return error.with_traceback(None)

    # --- consumers -----------------------------------------------------------------------------------------

    @property
    def consumers(self) -> list:
        """The ``KafkaConsumer`` objects created on this cluster (closed ones excluded)."""
        return [c for c in self._consumers if not c._closed]

    def kill_consumer(self, consumer) -> None:
        """Crash a consumer's process: its positions and everything not committed are gone; the
        group notices when ``session_timeout_ms`` passes without a heartbeat."""
        if not self.world.alive(consumer.node_id):
            raise IllegalArgumentError(f"consumer {consumer.node_id} is already dead")
        self.world.crash(consumer.node_id)

    def restart_consumer(self, consumer) -> None:
        """Start a crashed consumer's process again with the same configuration and
        subscription: it joins as a new member and resumes from the committed offsets."""
        if self.world.alive(consumer.node_id):
            raise IllegalArgumentError(f"consumer {consumer.node_id} is running; kill it first")
        if consumer._closed:
            raise IllegalArgumentError(f"consumer {consumer.node_id} was closed; create a new one")
        self.world.restart(consumer.node_id)
        consumer._iterator = None

    # --- faults ------------------------------------------------------------------------------------------

    def kill(self, node_id: int, *, power_loss: bool = False) -> None:
        """Crash a broker or a controller: its memory is gone. With ``power_loss`` the machine
        dies too, and whatever its logs had not flushed (fsync'd) is lost as well."""
        node = self.controller_node(node_id) if node_id in self.controller_ids else self.broker(node_id)
        node.close(lose_unflushed=power_loss) if node_id in self.broker_ids else node.close()
        self.world.crash(node_id, reset_connections=not power_loss)

    def _release_halted(self, node_id, reason: str) -> None:
        """A broker halted itself (``World`` calls this before the crash): its files are
        released as the OS releases an exited process's (nothing unflushed is lost)."""
        if node_id in self.broker_ids:
            logger.warning("broker %s halted: %s", node_id, reason)
            self.broker(node_id).close()

    def restart(self, node_id: int) -> None:
        """Start a dead broker or controller again: it recovers its logs and rejoins."""
        if node_id not in self.broker_ids and node_id not in self.controller_ids:
            raise IllegalArgumentError(f"no node {node_id}; brokers are {self.broker_ids}, "
                                       f"controllers {self.controller_ids}")
        if self.world.alive(node_id):
            raise IllegalArgumentError(f"node {node_id} is running; kill it first")
        self.world.restart(node_id)

    def pause(self, node_id: int) -> None:
        """Freeze a broker or a controller (SIGSTOP, a long GC pause): alive, with its memory and
        connections, but silent; what is sent to it waits until ``resume``."""
        if node_id not in self.broker_ids and node_id not in self.controller_ids:
            raise IllegalArgumentError(f"no node {node_id}; brokers are {self.broker_ids}, "
                                       f"controllers {self.controller_ids}")
        if not self.world.alive(node_id):
            raise IllegalArgumentError(f"node {node_id} is dead: only a running node can be paused")
        self.world.pause(node_id)

    def resume(self, node_id: int) -> None:
        """Let a paused node go on (SIGCONT): it handles, late, what waited for it."""
        self.world.resume(node_id)

    def fill_disk(self, broker_id: int, full: bool = True) -> None:
        """Make broker ``broker_id``'s disk full (``full=False``: space freed). Appends there
        then write part of their bytes and fail with ENOSPC, as on a real full disk: the
        broker must cut them back and answer KAFKA_STORAGE_ERROR, acknowledging nothing, and
        its log directory goes offline: the controller moves its leaders to in-sync replicas
        and takes it out of every ISR; it comes back when restarted (``kill``, ``restart``)
        with space freed."""
        self._disk(broker_id).full = full

    def fail_fsync(self, broker_id: int, failing: bool = True) -> None:
        """Make broker ``broker_id``'s fsyncs fail with EIO (``failing=False``: a new disk).
        Its next flush takes its log directory offline: it refuses appends, and its heartbeat
        tells the controller, which moves its leaders away, until it is restarted (``restart``
        after ``kill``) on a new disk."""
        self._disk(broker_id).fsync_fails = failing

    def _disk(self, broker_id: int) -> Disk:
        if broker_id not in self.disks:
            raise IllegalArgumentError(f"no broker {broker_id}; brokers are {self.broker_ids}")
        return self.disks[broker_id]

    def partition(self, side_a: Iterable[NodeId], side_b: Iterable[NodeId]) -> None:
        """Cut the network between two groups of nodes (brokers, "controller" or clients)."""
        self.world.network.partition(self._ids(side_a), self._ids(side_b))

    def heal(self) -> None:
        self.world.network.heal()

    def slow(self, src: NodeId, dst: NodeId, latency_ms: int) -> None:
        """Make the link from ``src`` to ``dst`` (one direction) take ``latency_ms``."""
        if latency_ms < 0:
            raise IllegalArgumentError(f"latency_ms must be >= 0, not {latency_ms}")
        self.world.network.set_link(self._id(src), self._id(dst), latency_ms=latency_ms)

    def lossy(self, src: NodeId, dst: NodeId, loss: float) -> None:
        """Make the link from ``src`` to ``dst`` (one direction) drop a fraction ``loss`` of
        its messages (1.0: all of them, e.g. every answer to one producer)."""
        if not 0.0 <= loss <= 1.0:
            raise IllegalArgumentError(f"loss must be between 0 and 1, not {loss}")
        self.world.network.set_link(self._id(src), self._id(dst), loss=loss)

    def _id(self, node: NodeId) -> NodeId:
        """"controller" is the active controller (the first voter while none is)."""
        if node == "controller":
            active = self._active_controller()
            return active.node_id if active is not None else self.controller_ids[0]
        return node

    def _ids(self, nodes: Iterable[NodeId]) -> list[NodeId]:
        """"controller" (or "controllers") stands for every controller of the quorum."""
        out: list[NodeId] = []
        for n in nodes:
            out += self.controller_ids if n in ("controller", "controllers") else [n]
        return out

    # --- admin -------------------------------------------------------------------------------------------

    def _any_live_broker(self) -> int:
        for b in self.broker_ids:
            if self.world.alive(b):
                return b
        raise KafkaTimeoutError("no broker is alive")

    def create_topic(
        self, name: str, partitions: int = 1, replication_factor: int = 1,
        config: Mapping[str, Any] | None = None, *, timeout_ms: int = 30_000,
    ) -> None:
        """Create a topic (through a broker, as ``kafka-topics --create`` does) and wait until
        every live broker knows its leaders."""
        configs = tuple(sorted((k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (config or {}).items()))
        topic = TopicConfig(name, partitions, replication_factor, configs)
        # A broker restarted a moment ago is back only once it has caught up with the metadata
        # log and been unfenced (a few round trips): wait for that, as `kafka-topics` would
        # retry, so that it counts among the brokers the replicas can go to.
        self.run_until(lambda: self._ready([b for b in self.broker_ids if self.world.alive(b)]), 10_000)
        admin = self.world.nodes[self.admin_id]
        corr = self.world.call_node(
            self.admin_id, lambda node: node.request(self._any_live_broker(), lambda c: CreateTopicsRequest(c, (topic,)))
        )
        if not self.run_until(lambda: corr in admin.responses, timeout_ms):
            raise KafkaTimeoutError(f"no answer to CreateTopics({name!r}) within {timeout_ms} ms")
        response: CreateTopicsResponse = admin.responses.pop(corr)
        _, error, message = response.results[0]
        if error != NO_ERROR:
            raise for_code(error)(message or ERROR_NAMES.get(error, str(error)))

        def known_everywhere() -> bool:
            return all(
                (name, p) in self.world.nodes[b].partition_states
                for b in self.broker_ids if self.world.alive(b) for p in range(partitions)
            )
        self.run_until(known_everywhere, timeout_ms)

    def topics(self) -> list[str]:
        return sorted(self.image.topic_ids)

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        try:
            return self.image.partitions[(topic, partition)]
        except KeyError:
            raise IllegalArgumentError(f"no partition {topic}-{partition}") from None

    def partitions_of(self, topic: str) -> list[PartitionState]:
        image = self.image
        if topic not in image.topic_ids:
            raise IllegalArgumentError(f"no topic {topic!r}; topics are {self.topics()}")
        return [image.partitions[(topic, p)] for p in range(image.partition_count(topic))]

    def replica(self, broker_id: int, topic: str, partition: int):
        """Broker ``broker_id``'s replica (a ``Partition``) of topic-partition, or None."""
        if not self.world.alive(broker_id):
            return None
        return self.world.nodes[broker_id].replica_manager.partitions.get((topic, partition))

    def describe(self, topic: str) -> str:
        """``kafka-topics --describe``, plus LEO and HW per replica: a deterministic table."""
        states = self.partitions_of(topic)  # refuses an unknown topic by name
        described = self.image.topic_config(topic)
        lines = [f"Topic: {topic}\tPartitionCount: {described.num_partitions}\t"
                 f"ReplicationFactor: {described.replication_factor}"]
        for s in states:
            offsets = []
            for r in s.replicas:
                rep = self.replica(r, topic, s.partition)
                offsets.append(f"{r}:dead" if rep is None else f"{r}:{rep.log_end_offset}/{rep.high_watermark}")
            leader = s.leader if s.leader >= 0 else "none"
            lines.append(
                f"\tPartition: {s.partition}\tLeader: {leader}\tEpoch: {s.leader_epoch}\t"
                f"Replicas: {','.join(map(str, s.replicas))}\tIsr: {','.join(map(str, s.isr))}\t"
                f"LEO/HW: {' '.join(offsets)}"
            )
        return "\n".join(lines)

    def diagram(self, topic: str | None = None, *, group: str | None = None):
        """A graphviz picture of the cluster: brokers alive or dead, each replica's role,
        ISR membership, LEO and HW, the controller and network faults (``minikafka.viz``);
        with ``group``, that consumer group's consumers and what each one reads."""
        from minikafka.viz import cluster_diagram

        return cluster_diagram(self, topic, group=group)

    # --- consumer-group administration (thin wrappers over minikafka.clients.admin and .tools) ------------

    def admin(self, **configs: Any):
        """kafka-python's ``KafkaAdminClient`` on this cluster. Without ``configs`` the same
        client every time (made on first use); with them (e.g. ``request_timeout_ms``) a new one."""
        from minikafka.clients.admin import KafkaAdminClient

        if configs:
            return KafkaAdminClient(bootstrap_servers=self, **configs)
        client = getattr(self, "_admin_client", None)
        if client is None or client._closed:
            client = self._admin_client = KafkaAdminClient(bootstrap_servers=self)
        return client

    def group_coordinator(self, group: str) -> tuple[int | None, Any]:
        """(the broker coordinating ``group``, its ``Group`` there): the leader of the group's
        ``__consumer_offsets`` partition, by the controller's metadata; (None, None) if there is
        none (no group has asked for a coordinator yet, or that leader is down), and a None
        group if that broker does not know the group (yet)."""
        from minikafka.broker.group_coordinator import OFFSETS_TOPIC, partition_for

        image = self.image
        if OFFSETS_TOPIC not in image.topic_ids:
            return None, None
        p = partition_for(group, image.partition_count(OFFSETS_TOPIC))
        state = image.partitions.get((OFFSETS_TOPIC, p))
        if state is None or state.leader < 0 or not self.alive(state.leader):
            return None, None
        gc = self.world.nodes[state.leader].group_coordinator
        return state.leader, (gc.groups.get(group) if p in gc.owned else None)

    @property
    def consumer_groups(self):
        """``kafka-consumer-groups`` on this cluster (a ``ConsumerGroupCommand`` over
        ``cluster.admin()``): ``cluster.consumer_groups.describe_group("dispatch")``."""
        from minikafka.tools.consumer_groups import ConsumerGroupCommand

        return ConsumerGroupCommand(self.admin())

    # --- end of consumer-group administration --------------------------------------------------------------

    # --- cleanup --------------------------------------------------------------------------------------------

    def close(self) -> None:
        if any(self.world.alive(n) for n in self.broker_ids + self.controller_ids):
            self._last_image = self.image  # what a closed cluster still says about itself
        for b in self.broker_ids + self.controller_ids:
            if self.world.alive(b):
                self.world.nodes[b].close()
                self.world.crash(b)
        if self._own_dir:
            scratch.remove(self.dir)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        alive = [b for b in self.broker_ids if self.world.alive(b)]
        return f"Cluster(brokers={self.broker_ids}, alive={alive}, topics={self.topics()}, now={self.now} ms)"
