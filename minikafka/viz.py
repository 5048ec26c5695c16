"""Pictures of a cluster: brokers, their replicas, the controller and the network's faults.

Theory of operation
-------------------
Drawing happens in two steps, so a live dashboard can hold its lock only for the first:

1. ``snapshot(cluster, topic)`` reads the cluster once and returns plain, immutable data
   (``ClusterView``): which brokers are up, each replica's role, log end offset (LEO) and
   high watermark (HW), what the controller believes, which links are cut. It never runs
   the simulation and never changes it.
2. ``draw(view)`` turns that data into a ``graphviz.Digraph``. It reads nothing else, so
   the same view always gives the same DOT source, byte for byte: brokers, topics,
   partitions and faults are visited in sorted order, and no name depends on an object's
   id. A notebook can print ``cluster.diagram().source`` in a checked cell;
   ``render_svg`` gives the picture (whose layout may differ between graphviz versions).
   The digraph is a ``Diagram`` (``diagram_class``): in a notebook it shows itself scaled
   to the cell's width, never past its own size, so no picture runs off a projector.

A real cluster of processes (``minikafka.wire``) cannot be read from inside: its view
comes from ``metadata_view``, built from what any Kafka client can ask (Metadata,
ListOffsets) plus which processes run; ``draw`` is the same.

What the picture says
---------------------
- One box per broker (a graphviz cluster). A dead broker's box is grey with a red dashed
  border and says "dead"; its replicas say "down" (its memory is gone: no LEO, no HW).
  A broker that runs but does not serve (``BrokerView.status``: a paused process, one not
  yet back among the live brokers) has an orange dashed border and says why.
- Inside each box, one node per replica it hosts, in a grid of at most six rows
  (``_grid``), so ten partitions on three brokers fit one screen (749x429 px): "p0 L" on the leader (filled, bold),
  "p0 F" on a follower in the ISR, "p0 F  out of ISR" on a follower the ISR dropped
  (dashed, orange); the second line is "LEO 12  HW 10".
- Roles come from the controller, the cluster's single source of truth. A broker that
  still believes it leads a partition the controller gave to someone else (cut off from
  the controller, it has not heard yet) is a *stale leader*: red, dashed, "L? stale".
  That is the replica where acks=1 writes go to die.
- Arrows from each leader to its followers show replication: blue for ISR members, dashed
  orange for out-of-ISR ones.
- The controller sits on top with a line to each broker; the line is red, dashed and
  labelled "cut" when the network separates them. Cut links between brokers are red
  dashed lines too; any other fault (a cut or slow link to a client) is listed in a note.
- The caption gives the simulated time and the counts a Kafka operator watches:
  under-replicated partitions (ISR smaller than the replica set) and offline partitions
  (no leader).

Consumer groups (``cluster_diagram(cluster, topic, group="g")``, ``group_diagram``)
---------------------------------------------------------------------------------------
A consumer group is drawn as one more box, below the brokers, with a node per consumer of
the group: every ``KafkaConsumer`` in ``cluster.consumers`` (closed ones are gone) whose
``group_id`` is the group, in the order they were made. Where each consumer stands comes
from the consumer's own process, as in Kafka, where only a member knows its position: the
state of its coordinator (``STABLE``, or ``PREPARING``/``JOINING``/``SYNCING`` while a
rebalance runs), its generation, and its assignment (``subscriptions.assignment``) with
the position in each partition. An assignment that has arrived but that ``poll()`` has not
taken yet is drawn dashed: the consumer owns those partitions but reads nothing until the
application polls.

- An arrow goes from each consumer to the leader replica of each partition it owns (the
  broker it fetches from), labelled ``pos 7  lag 3``: the next offset it will read and how
  far that is below the leader's high watermark (HW - position: what the consumer has yet
  to read). Each consumer has a colour, its arrows too.
- A live consumer that owns nothing after a rebalance is *idle* (greyed out): a group has
  no use for more consumers than partitions.
- A crashed consumer (``cluster.kill_consumer``) is grey with a red dashed border and says
  "dead": its memory, so its positions, are gone. The coordinator still counts it as a
  member until ``session_timeout_ms`` passes without a heartbeat; until then the
  partitions the coordinator gave it are drawn with red dashed arrows, "held": nobody reads
  them. That cross-check is the only thing taken from the coordinator's side, along with
  the box's title: which broker coordinates the group (the leader of its
  ``__consumer_offsets`` partition), the group's state and generation there, the lag
  measured from the *committed* offsets (what ``kafka-consumer-groups --describe`` shows)
  and the partitions no live consumer owns.

``group_diagram(cluster, group)`` draws the group alone (``draw_group(group_snapshot(...))``,
the same two steps): its consumers on top, arrows down to one node per partition with its
leader and HW.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping, Sequence

from minikafka.messages import CONTROLLER_ID

if TYPE_CHECKING:  # graphviz is a course dependency, not a core one
    import graphviz

    from minikafka.cluster import Cluster

LEADER, FOLLOWER, OUT_OF_ISR, STALE_LEADER, NO_LEADER, DOWN = (
    "leader", "follower", "out-of-isr", "stale-leader", "no-leader", "down")

_FONT = "Helvetica"
_BLUE = "#3182bd"
_ORANGE = "#e6550d"
_RED = "#cb181d"
_GREY = "#969696"


# --- step 1: what the cluster looks like now --------------------------------------------------------


@dataclass(frozen=True)
class ReplicaView:
    topic: str
    partition: int
    role: str  # one of LEADER, FOLLOWER, OUT_OF_ISR, STALE_LEADER, NO_LEADER, DOWN
    log_end_offset: int | None  # None: the broker is dead or has not opened the replica yet
    high_watermark: int | None
    leader_epoch: int | None  # the epoch the broker itself believes in
    # The label's second line instead of "LEO n  HW m" ("" for none): a view drawn from
    # outside the brokers (``metadata_view``, from what a client learns over the protocol)
    # knows less than one read from inside them.
    detail: str | None = None


@dataclass(frozen=True)
class BrokerView:
    broker_id: int
    alive: bool
    replicas: tuple[ReplicaView, ...]
    status: str | None = None  # alive but not serving, said in its box: "paused", "not live yet"


@dataclass(frozen=True)
class PartitionView:
    topic: str
    partition: int
    leader: int  # -1: offline
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]

    @property
    def under_replicated(self) -> bool:
        return self.leader >= 0 and len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader < 0


@dataclass(frozen=True)
class ClusterView:
    now_ms: int
    topics: tuple[str, ...]
    brokers: tuple[BrokerView, ...]
    partitions: tuple[PartitionView, ...]
    controller_live_brokers: tuple[int, ...]  # who the controller believes is alive
    broker_cuts: tuple[tuple[int, int], ...]  # broker pairs that cannot talk
    controller_cuts: tuple[int, ...]  # brokers cut off from the controller
    other_faults: tuple[str, ...]  # faults involving clients, slow or lossy links
    group: "GroupView | None" = None  # a consumer group to draw with the brokers
    quorum: "tuple[VoterView, ...]" = ()  # the controller quorum, drawn when it has more than one voter

    @property
    def under_replicated(self) -> int:
        return sum(p.under_replicated for p in self.partitions)

    @property
    def offline(self) -> int:
        return sum(p.offline for p in self.partitions)


# Consumer states, as the consumer's own coordinator names them, and ours for a crashed one.
STABLE, DEAD = "STABLE", "DEAD"


@dataclass(frozen=True)
class OwnedPartition:
    topic: str
    partition: int
    position: int | None  # the next offset the consumer reads; None: not known yet
    high_watermark: int | None  # the leader's HW now (the consumer's last fetch's if offline)

    @property
    def lag(self) -> int | None:
        if self.position is None or self.high_watermark is None:
            return None
        return max(0, self.high_watermark - self.position)


@dataclass(frozen=True)
class ConsumerView:
    node_id: str  # the consumer's process in the world (unique)
    client_id: str  # what it calls itself (several consumers may share one)
    alive: bool
    state: str  # the consumer's coordinator state (STABLE, JOINING, ...), DEAD when crashed
    generation: int  # -1: none (not joined, or dead)
    leader: bool  # it computed the group's assignment in its generation
    owned: tuple[OwnedPartition, ...]  # by its own account, drawn topics only, sorted
    pending: bool  # ``owned`` arrived in SyncGroup, but poll() has not taken it yet
    other_owned: int  # partitions it owns of topics not drawn
    held: tuple[tuple[str, int], ...]  # dead, still a member: the coordinator's assignment of it

    @property
    def lag(self) -> int | None:
        """Total lag of its partitions whose position is known (None: none is)."""
        lags = [p.lag for p in self.owned if p.lag is not None]
        return sum(lags) if lags else None

    @property
    def idle(self) -> bool:
        return self.alive and self.state == STABLE and not self.owned and not self.other_owned


@dataclass(frozen=True)
class VoterView:
    """One controller of the metadata quorum, as its Raft client sees itself."""

    node_id: int
    alive: bool
    state: str  # Raft's: leader, follower, candidate, ... ("dead" when down)
    epoch: int
    log_end_offset: int
    high_watermark: int
    active: bool  # the active controller (leader, and its LeaderChange record committed)


def quorum_snapshot(cluster: "Cluster") -> tuple[VoterView, ...]:
    out = []
    for c in cluster.controller_ids:
        node = cluster.world.nodes.get(c) if cluster.world.alive(c) else None
        raft = getattr(node, "raft", None)
        if raft is None:
            out.append(VoterView(c, False, "dead", -1, -1, -1, False))
        else:
            out.append(VoterView(c, True, raft.state, raft.epoch, raft.log_end_offset, raft.high_watermark,
                                 node.active))
    return tuple(out)


@dataclass(frozen=True)
class GroupPartition:
    topic: str
    partition: int
    leader: int  # -1: offline
    high_watermark: int | None  # the leader's; None: offline, or it has not opened it yet


@dataclass(frozen=True)
class GroupView:
    group_id: str
    coordinator: int | None  # the broker coordinating it; None: no live leader for it
    state: str | None  # the group's state on the coordinator; None: it does not know the group
    generation: int | None
    consumers: tuple[ConsumerView, ...]
    unowned: tuple[tuple[str, int], ...]  # partitions of the drawn topics no live consumer owns
    committed_lag: int | None  # sum over drawn partitions of HW - committed offset
    partitions: tuple[GroupPartition, ...] = ()  # the drawn partitions

    def assignment(self) -> dict[str, list[int]]:
        """``{consumer node id: [partitions]}`` of the live consumers (one drawn topic)."""
        return {c.node_id: [p.partition for p in c.owned] for c in self.consumers if c.alive}


def snapshot(cluster: "Cluster", topic: str | None = None, *, group: str | None = None) -> ClusterView:
    """Read the cluster's state for ``topic`` (every topic when None), and that of consumer
    group ``group`` if given, into a ``ClusterView``."""
    topics = tuple(cluster.topics()) if topic is None else (topic,)
    states = [s for t in topics for s in cluster.partitions_of(t)]  # raises on an unknown topic
    brokers = []
    for b in sorted(cluster.broker_ids):
        alive = cluster.alive(b)
        replicas = []
        for s in states:
            if b in s.replicas:
                replicas.append(_replica_view(cluster, b, s, alive))
        brokers.append(BrokerView(b, alive, tuple(replicas)))
    broker_set = set(cluster.broker_ids)
    controllers = set(getattr(cluster, "controller_ids", [CONTROLLER_ID]))
    active = cluster.controller.node_id if any(cluster.alive(c) for c in controllers) else CONTROLLER_ID
    broker_cuts, controller_cuts, other = set(), set(), []
    network = cluster.world.network
    for pair in network.cut:
        a, b = sorted(pair, key=str)
        if a in broker_set and b in broker_set:
            broker_cuts.add((min(a, b), max(a, b)))
        elif active in pair and (pair - {active}) <= broker_set:
            controller_cuts.add(next(iter(pair - {active})))
        elif len(controllers) > 1 and pair & controllers and (pair - controllers) <= broker_set:
            continue  # a broker cut off from a controller that is not the active one: nothing to draw
        else:
            other.append(f"{_node_name(a)} <-/-> {_node_name(b)}: partitioned")
    for (src, dst), link in network.links.items():
        other.append(f"{_node_name(src)} -> {_node_name(dst)}: latency {link.latency_ms} ms, loss {link.loss:.0%}")
    return ClusterView(
        now_ms=cluster.now,
        topics=topics,
        brokers=tuple(brokers),
        partitions=tuple(PartitionView(s.topic, s.partition, s.leader, s.leader_epoch, tuple(s.isr), tuple(s.replicas))
                         for s in states),
        controller_live_brokers=tuple(cluster.controller.live_brokers),
        broker_cuts=tuple(sorted(broker_cuts)),
        controller_cuts=tuple(sorted(controller_cuts)),
        other_faults=tuple(sorted(other)),
        group=None if group is None else group_snapshot(cluster, group, topics, states),
        quorum=quorum_snapshot(cluster) if len(controllers) > 1 else (),
    )


def _replica_view(cluster: "Cluster", b: int, s, alive: bool) -> ReplicaView:
    if not alive:
        return ReplicaView(s.topic, s.partition, DOWN, None, None, None)
    rep = cluster.replica(b, s.topic, s.partition)
    leo = hw = epoch = None
    if rep is not None:
        leo, hw, epoch = rep.log_end_offset, rep.high_watermark, rep.leader_epoch
    if s.leader == b:
        role = LEADER
    elif rep is not None and rep.is_leader:
        role = STALE_LEADER  # the controller moved on; this broker has not heard
    elif s.leader < 0:
        role = NO_LEADER
    elif b in s.isr:
        role = FOLLOWER
    else:
        role = OUT_OF_ISR
    return ReplicaView(s.topic, s.partition, role, leo, hw, epoch)


def metadata_view(topic: str, partitions: Sequence[PartitionView], *, brokers: Sequence[int],
                  alive: Mapping[int, bool], live: Sequence[int], now_ms: int,
                  high_watermarks: Mapping[int, int | None] | None = None,
                  status: Mapping[int, str] | None = None) -> ClusterView:
    """A ``ClusterView`` of ``topic`` from what a client can learn over the protocol, for a
    cluster whose brokers it cannot look inside (``minikafka.wire``'s real processes):

    - ``partitions``: each partition's leader, leader epoch, ISR and replicas, as a Metadata
      response says them (that is, as the controller last told the broker that answered);
    - ``brokers``: every broker id; ``alive``: whether its *process* runs (only the one who
      launched it knows); ``live``: the brokers the Metadata response lists (those the
      controller counts as alive: a killed one stays until its session times out);
    - ``high_watermarks``: partition -> its leader's high watermark (ListOffsets "latest",
      what ``KafkaConsumer.end_offsets`` returns), None where no answer came;
    - ``status``: broker id -> a word for a process that runs but does not serve ("paused").

    Followers' log end offsets cannot be asked for (ListOffsets answers on leaders only), so
    a replica says its role and, on the leader, the HW. A dead process's replicas are
    "down" whatever the metadata still says; there are no stale leaders here (that would
    take each broker's own belief) and no network faults (the network is the kernel's).
    """
    high_watermarks = high_watermarks or {}
    status = status or {}
    views = []
    for b in sorted(brokers):
        up = bool(alive.get(b))
        replicas = []
        for p in partitions:
            if b not in p.replicas:
                continue
            if not up:
                replicas.append(ReplicaView(p.topic, p.partition, DOWN, None, None, None))
                continue
            if p.leader == b:
                hw = high_watermarks.get(p.partition)
                role, detail = LEADER, f"HW {'?' if hw is None else hw}"
            else:
                hw = None
                role = NO_LEADER if p.leader < 0 else FOLLOWER if b in p.isr else OUT_OF_ISR
                detail = ""
            replicas.append(ReplicaView(p.topic, p.partition, role, None, hw, None, detail=detail))
        views.append(BrokerView(b, up, tuple(replicas), status.get(b) if up else None))
    return ClusterView(
        now_ms=now_ms, topics=(topic,), brokers=tuple(views),
        partitions=tuple(sorted(partitions, key=lambda p: p.partition)),
        controller_live_brokers=tuple(sorted(live)), broker_cuts=(), controller_cuts=(), other_faults=())


def group_snapshot(cluster: "Cluster", group: str, topics: tuple[str, ...], states=None) -> GroupView:
    """Consumer group ``group`` as its consumers see themselves, for partitions of ``topics``;
    ``states``: the controller's ``PartitionState`` of those partitions, if already read."""
    from minikafka.assignors import Assignment

    if states is None:
        states = [s for t in topics for s in cluster.partitions_of(t)]
    drawn = {(s.topic, s.partition) for s in states}
    hws: dict[tuple[str, int], int] = {}
    for s in states:
        rep = cluster.replica(s.leader, s.topic, s.partition) if s.leader >= 0 else None
        if rep is not None:
            hws[(s.topic, s.partition)] = rep.high_watermark
    coordinator, on_broker = cluster.group_coordinator(group)

    consumers = []
    live_members: set[str] = set()
    members = [c for c in cluster.consumers if c.config.get("group_id") == group]
    for consumer in members:
        node = cluster.world.nodes.get(consumer.node_id)
        node_id, client_id = str(consumer.node_id), str(consumer.config.get("client_id"))
        if node is None:  # crashed: its memory is gone; the coordinator may still count it
            consumers.append(ConsumerView(node_id, client_id, False, DEAD, -1, False, (), False, 0, ()))
            continue
        co = node.coordinator
        pending = co.pending_assignment is not None
        if pending:  # arrived in SyncGroup; poll() has not taken it yet
            tps = {tp: node.subscriptions.assignment.get(tp) for tp in co.pending_assignment}
        else:
            tps = dict(node.subscriptions.assignment)
        owned = []
        for tp in sorted(tps):
            if (tp.topic, tp.partition) not in drawn:
                continue
            ps = tps[tp]
            hw = hws.get((tp.topic, tp.partition), None if ps is None else ps.highwater)
            owned.append(OwnedPartition(tp.topic, tp.partition, None if ps is None else ps.position, hw))
        if co.member_id:
            live_members.add(co.member_id)
        consumers.append(ConsumerView(
            node_id, client_id, True, co.state, co.generation,
            bool(co.member_id) and co.member_id == co.leader_id, tuple(owned), pending,
            len(tps) - len(owned), ()))

    state = generation = None
    committed_lag = None
    if on_broker is not None:
        state, generation = on_broker.state, on_broker.generation
        # A dead consumer still listed (no session timeout yet) holds what it was given.
        held_by_host: dict[str, list[tuple[str, int]]] = {}
        for member_id, m in on_broker.members.items():
            if member_id in live_members or not m.assignment:
                continue
            tps = [(tp.topic, tp.partition) for tp in Assignment.decode(m.assignment).partitions]
            held_by_host.setdefault(m.client_host, []).extend(tp for tp in tps if tp in drawn)
        consumers = [c if c.alive or c.node_id not in held_by_host
                     else replace(c, held=tuple(sorted(held_by_host.pop(c.node_id))))
                     for c in consumers]
        lags = [hws[tp] - on_broker.offsets[tp].offset for tp in sorted(drawn)
                if tp in hws and tp in on_broker.offsets and on_broker.offsets[tp].offset >= 0]
        committed_lag = sum(max(0, lag) for lag in lags) if lags else None
    owned_live = {(p.topic, p.partition) for c in consumers if c.alive for p in c.owned}
    partitions = tuple(GroupPartition(s.topic, s.partition, s.leader, hws.get((s.topic, s.partition)))
                       for s in states)
    return GroupView(group, coordinator, state, generation, tuple(consumers),
                     tuple(sorted(drawn - owned_live)), committed_lag, partitions)


def _node_name(node) -> str:
    return "controller" if node == CONTROLLER_ID else str(node)


# --- step 2: the picture ----------------------------------------------------------------------------------


def _rid(b: int, topic: str, partition: int) -> str:
    # No ':' in node names: graphviz reads "a:b" in an edge as node a, port b.
    return f"b{b}/{topic}/{partition}"


def _replica_label(r: ReplicaView, with_topic: bool) -> str:
    name = f"{r.topic} p{r.partition}" if with_topic else f"p{r.partition}"
    mark = {
        LEADER: " L", FOLLOWER: " F", OUT_OF_ISR: " F  out of ISR", STALE_LEADER: " L?  stale",
        NO_LEADER: "  no leader", DOWN: "",
    }[r.role]
    if r.role == DOWN:
        return f"{name}\ndown"
    if r.detail is not None:
        return f"{name}{mark}" + (f"\n{r.detail}" if r.detail else "")
    if r.log_end_offset is None:
        return f"{name}{mark}\n(not opened yet)"
    return f"{name}{mark}\nLEO {r.log_end_offset}  HW {r.high_watermark}"


_REPLICA_STYLE = {
    LEADER: dict(style="filled,bold", fillcolor="#c6dbef", color=_BLUE, penwidth="2"),
    FOLLOWER: dict(style="filled", fillcolor="white", color=_BLUE),
    OUT_OF_ISR: dict(style="filled,dashed", fillcolor="#fff5eb", color=_ORANGE, fontcolor=_ORANGE),
    STALE_LEADER: dict(style="filled,dashed,bold", fillcolor="#fee0d2", color=_RED, fontcolor=_RED),
    NO_LEADER: dict(style="filled,dashed", fillcolor="white", color=_RED, fontcolor=_RED),
    DOWN: dict(style="dashed", color=_GREY, fontcolor=_GREY),
}


def draw(view: ClusterView, *, replication: bool = True) -> "graphviz.Digraph":
    """The ``graphviz.Digraph`` of a ``ClusterView`` (deterministic DOT source)."""
    with_topic = len(view.topics) != 1
    dot = diagram_class()("minikafka")
    # Tight spacing and nodes no taller than their two lines: the picture must fit a screen.
    dot.attr(compound="true", newrank="true", rankdir="TB", nodesep="0.15", ranksep="0.25",
             fontname=_FONT, fontsize="11", labelloc="b", label=_caption(view))
    dot.attr("node", shape="box", style="rounded", fontname=_FONT, fontsize="10", height="0.3",
             margin="0.08,0.03")
    dot.attr("edge", fontname=_FONT, fontsize="9")

    live = ", ".join(map(str, view.controller_live_brokers)) or "none"
    if view.quorum:
        _draw_quorum(dot, view.quorum, live)
    else:
        dot.node("controller", f"controller\nlive brokers: {live}", shape="box",
                 style="rounded,filled", fillcolor="#fff7bc", color="#d95f0e")

    anchors: dict[int, str] = {}  # one node per broker box, for edges that end at the box
    for broker in view.brokers:
        b = broker.broker_id
        with dot.subgraph(name=f"cluster_broker_{b}") as box:
            if broker.alive and broker.status:
                box.attr(label=f"broker {b}  {broker.status}", style="rounded,dashed", color=_ORANGE,
                         fontcolor=_ORANGE, bgcolor="#fff5eb", penwidth="2")
            elif broker.alive:
                box.attr(label=f"broker {b}", style="rounded", color="black", fontcolor="black",
                         bgcolor="#f7f7f7")
            else:
                box.attr(label=f"broker {b}  dead", style="filled,dashed", color=_RED, fontcolor=_RED,
                         fillcolor="#d9d9d9", penwidth="2")
            names = []
            for r in broker.replicas:
                name = _rid(b, r.topic, r.partition)
                box.node(name, _replica_label(r, with_topic), **_REPLICA_STYLE[r.role])
                names.append(name)
            if not names:  # an empty cluster is not drawn; keep the box
                name = f"b{b}/empty"
                box.node(name, "no replicas", shape="plaintext", fontcolor=_GREY)
                names.append(name)
            _grid(box, names)
            anchors[b] = names[0]

    for b, anchor in anchors.items():
        if b in view.controller_cuts:
            dot.edge("controller", anchor, lhead=f"cluster_broker_{b}", label="cut", color=_RED,
                     fontcolor=_RED, style="dashed", penwidth="2", dir="none")
        else:
            dot.edge("controller", anchor, lhead=f"cluster_broker_{b}", color=_GREY, style="dotted",
                     dir="none")

    for a, b in view.broker_cuts:
        dot.edge(anchors[a], anchors[b], ltail=f"cluster_broker_{a}", lhead=f"cluster_broker_{b}",
                 label="cut", color=_RED, fontcolor=_RED, style="dashed", penwidth="2", dir="none",
                 constraint="false")

    if replication:
        for p in view.partitions:
            if p.leader < 0 or p.leader not in anchors:
                continue
            for f in p.replicas:
                if f == p.leader or not _alive(view, f):
                    continue
                src, dst = _rid(p.leader, p.topic, p.partition), _rid(f, p.topic, p.partition)
                if f in p.isr:
                    dot.edge(src, dst, color=_BLUE, constraint="false", arrowsize="0.6")
                else:
                    dot.edge(src, dst, color=_ORANGE, style="dashed", constraint="false", arrowsize="0.6")

    if view.group is not None:
        # A consumer's arrow ends at the replica it fetches from: the partition's leader (or,
        # offline, its first replica, so the arrow still says who owns it).
        targets = {(p.topic, p.partition): _rid(p.leader if p.leader >= 0 else p.replicas[0], p.topic, p.partition)
                   for p in view.partitions}
        _draw_group(dot, view.group, targets, with_topic, below=[_last_replica(b) for b in view.brokers])

    if view.other_faults:
        dot.node("faults", "network faults\n" + "\n".join(view.other_faults), shape="note",
                 color=_RED, fontcolor=_RED)
    return dot


# A broker's replicas stand in a grid of at most this many rows, so the brokers' boxes stand
# side by side and a picture of ten partitions is as wide as a cell and as tall as a screen
# (a 1280x720 projector at 150% zoom shows 853x480 CSS px). Six, not fewer: six replicas in
# one column keep the boxes narrow, so a picture with a group's arrows around it is shrunk
# less to fit the cell (lecture 06: 887x677 px, where two columns made it 1,252 px wide).
_MAX_ROWS = 6


def _grid(box, names: list[str]) -> None:
    """Lay ``names`` out in ``box`` row by row, left to right, at most ``_MAX_ROWS`` rows:
    invisible edges order each row (rank=same) and hang each node under the one above it."""
    cols = -(-len(names) // _MAX_ROWS)
    rows = [names[i:i + cols] for i in range(0, len(names), cols)]
    for row in rows:
        if len(row) > 1:
            with box.subgraph() as same:
                same.attr(rank="same")
                for name in row:
                    same.node(name)
            for left, right in zip(row, row[1:]):
                box.edge(left, right, style="invis")
    for upper, lower in zip(rows, rows[1:]):
        for i, name in enumerate(lower):
            box.edge(upper[i], name, style="invis")


def _draw_quorum(dot: "graphviz.Digraph", quorum: tuple[VoterView, ...], live: str) -> None:
    """The metadata quorum: one box per voter (Raft state, epoch, log end and HW of the
    metadata log), the active controller bold; the "controller" node the brokers hang from
    is the active one's."""
    active = next((v for v in quorum if v.active), None)
    with dot.subgraph(name="cluster_quorum") as box:
        box.attr(label="controller quorum (__cluster_metadata)", style="rounded,dashed", color="#d95f0e",
                 fontcolor="#d95f0e")
        box.node("controller", (f"active controller: {active.node_id}" if active else "no active controller")
                 + f"\nlive brokers: {live}", shape="box", style="rounded,filled", fillcolor="#fff7bc",
                 color="#d95f0e" if active else _RED, fontcolor="black" if active else _RED)
        for v in quorum:
            if not v.alive:
                box.node(f"voter/{v.node_id}", f"{v.node_id}\ndead", style="filled,dashed", color=_RED,
                         fontcolor=_RED, fillcolor="#d9d9d9")
                continue
            style = dict(style="filled,bold", fillcolor="#fee391", color="#d95f0e", penwidth="2") if v.active \
                else dict(style="filled", fillcolor="white", color="#d95f0e")
            box.node(f"voter/{v.node_id}", f"{v.node_id} {v.state}\nepoch {v.epoch}\n"
                     f"LEO {v.log_end_offset}  HW {v.high_watermark}", **style)
        with box.subgraph() as row:
            row.attr(rank="same")
            for v in quorum:
                row.node(f"voter/{v.node_id}")
        for v in quorum:
            box.edge(f"voter/{v.node_id}", "controller", style="invis")


def _last_replica(broker: BrokerView) -> str:
    if not broker.replicas:
        return f"b{broker.broker_id}/empty"
    r = broker.replicas[-1]
    return _rid(broker.broker_id, r.topic, r.partition)


# Colour-blind-safe (ColorBrewer Dark2), one per consumer in the order they were made.
CONSUMER_COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#1f78b4")
_REBALANCING = {"UNJOINED": "not joined", "PREPARING": "rebalancing", "JOINING": "rebalancing: JoinGroup",
                "SYNCING": "rebalancing: SyncGroup"}


def _gid(group: str) -> str:
    # A group id may hold anything, ':' too, which graphviz reads in an edge as "node:port".
    return group.replace("%", "%25").replace(":", "%3A")


def _cid(group: str, node_id: str) -> str:
    return f"group/{_gid(group)}/{node_id}"


def _consumer_label(c: ConsumerView) -> str:
    name = c.client_id if c.client_id == c.node_id else f"{c.client_id}\n({c.node_id})"
    if not c.alive:
        return f"{name}\ndead" + ("\nstill a member: no session timeout yet" if c.held else "")
    if c.state != STABLE:
        return f"{name}\n{_REBALANCING.get(c.state, c.state)}"
    head = f"{name}\ngen {c.generation}" + ("  leader" if c.leader else "")
    if c.idle:
        return f"{head}\nidle: no partition"
    if c.pending:
        return f"{head}\nassigned, poll() not called yet"
    lag = c.lag
    tail = f"\n+{c.other_owned} of other topics" if c.other_owned else ""
    return f"{head}\nlag {'?' if lag is None else lag}{tail}"


def _group_label(g: GroupView, with_topic: bool) -> str:
    coordinator = "none" if g.coordinator is None else f"broker {g.coordinator}"
    where = "" if g.state is None else f"   {g.state}, generation {g.generation}"
    lines = [f"group {g.group_id}   coordinator: {coordinator}{where}"]
    alive = sum(c.alive for c in g.consumers)
    counts = [f"{alive} consumer{'s' if alive != 1 else ''}"]
    if any(c.idle for c in g.consumers):
        counts.append(f"{sum(c.idle for c in g.consumers)} idle")
    if alive < len(g.consumers):
        counts.append(f"{len(g.consumers) - alive} dead")
    counts.append(f"committed lag {'?' if g.committed_lag is None else g.committed_lag}")
    lines.append("   ".join(counts))
    if g.unowned:
        names = [f"{t} p{p}" if with_topic else f"p{p}" for t, p in g.unowned]
        lines.append("not read by anyone: " + ", ".join(names))
    return "\n".join(lines)


def _draw_group(dot, g: GroupView, targets: dict[tuple[str, int], str], with_topic: bool,
                below: list[str] = (), constraint: bool = False) -> None:
    """The group's box, a node per consumer and an arrow per owned partition, into ``dot``.
    ``below``: nodes the consumers go under; ``constraint``: let the arrows rank the
    consumers above the partitions (else they leave the layout alone)."""
    box_name = f"cluster_group_{_gid(g.group_id)}"
    names = []
    with dot.subgraph(name=box_name) as box:
        # The title on the side the arrows do not leave from.
        box.attr(label=_group_label(g, with_topic), style="rounded", color="#636363", fontcolor="black",
                 bgcolor="#fcfbfd", labelloc="t" if constraint else "b")
        # One row of consumers (newrank lets rank=same work inside a cluster).
        box.attr(rank="same")
        for i, c in enumerate(g.consumers):
            colour = CONSUMER_COLOURS[i % len(CONSUMER_COLOURS)]
            if not c.alive:
                style = dict(style="filled,dashed", fillcolor="#d9d9d9", color=_RED, fontcolor=_GREY, penwidth="2")
            elif c.idle:
                style = dict(style="filled", fillcolor="#f0f0f0", color=_GREY, fontcolor=_GREY)
            elif c.state != STABLE:
                style = dict(style="filled,dashed", fillcolor="white", color="#636363", fontcolor="#636363")
            else:
                style = dict(style="filled,bold", fillcolor="white", color=colour, penwidth="2")
            name = _cid(g.group_id, c.node_id)
            box.node(name, _consumer_label(c), shape="box", **style)
            names.append(name)
        if not names:
            name = f"group/{_gid(g.group_id)}/none"
            box.node(name, "no consumers", shape="plaintext", fontcolor=_GREY)
            names.append(name)
    # Below the brokers: graphviz ranks an edge's head under its tail.
    for anchor in below:
        dot.edge(anchor, names[0], style="invis")
    for i, c in enumerate(g.consumers):
        colour = CONSUMER_COLOURS[i % len(CONSUMER_COLOURS)]
        src = _cid(g.group_id, c.node_id)
        for p in c.owned:
            target = targets.get((p.topic, p.partition))
            if target is None:
                continue
            label = "not polled yet" if p.position is None and c.pending else (
                f"pos {'?' if p.position is None else p.position}  lag {'?' if p.lag is None else p.lag}")
            dot.edge(src, target, label=label, color=colour, fontcolor=colour, constraint=str(constraint).lower(),
                     **({"style": "dashed"} if c.pending else {}))
        for t, p in c.held:
            target = targets.get((t, p))
            if target is not None:
                dot.edge(src, target, label="held", color=_RED, fontcolor=_RED, style="dashed",
                         constraint=str(constraint).lower())


def _alive(view: ClusterView, b: int) -> bool:
    return any(x.broker_id == b and x.alive for x in view.brokers)


def _caption(view: ClusterView) -> str:
    topics = ", ".join(view.topics) if view.topics else "(no topics)"
    return (f"topic{'s' if len(view.topics) != 1 else ''} {topics}   t = {view.now_ms / 1000:.3f} s   "
            f"under-replicated: {view.under_replicated}   offline: {view.offline}\n"
            "L leader   F follower (in ISR)   dashed orange: out of ISR   grey: dead broker")


def cluster_diagram(cluster: "Cluster", topic: str | None = None, *, replication: bool = True,
                    group: str | None = None) -> "graphviz.Digraph":
    """``draw(snapshot(cluster, topic, group=group))``: what ``Cluster.diagram`` returns."""
    return draw(snapshot(cluster, topic, group=group), replication=replication)


def group_diagram(cluster: "Cluster", group: str, topic: str | None = None) -> "graphviz.Digraph":
    """Just the group: a node per consumer, above a node per partition (its leader and HW),
    an arrow from each consumer to what it owns. ``topic`` None: the topics the group's live
    consumers subscribe to (every topic if none does). Deterministic DOT source."""
    if topic is not None:
        topics: tuple[str, ...] = (topic,)
    else:
        subscribed = set()
        for c in cluster.consumers:
            node = cluster.world.nodes.get(c.node_id)
            if c.config.get("group_id") == group and node is not None:
                subscribed |= set(node.subscriptions.subscription) | {tp.topic for tp in node.subscriptions.assignment}
        topics = tuple(sorted(subscribed & set(cluster.topics()))) or tuple(cluster.topics())
    return draw_group(group_snapshot(cluster, group, topics))


def draw_group(g: GroupView) -> "graphviz.Digraph":
    """The ``graphviz.Digraph`` of a ``GroupView`` alone (deterministic DOT source)."""
    topics = sorted({s.topic for s in g.partitions})
    with_topic = len(topics) != 1
    dot = diagram_class()("minikafka_group")
    dot.attr(newrank="true", rankdir="TB", nodesep="0.3", ranksep="0.8", fontname=_FONT, fontsize="11", labelloc="b",
             label=f"topic{'s' if with_topic else ''} {', '.join(topics)}")
    dot.attr("node", shape="box", style="rounded", fontname=_FONT, fontsize="10")
    dot.attr("edge", fontname=_FONT, fontsize="9")
    targets = {}
    with dot.subgraph(name="cluster_partitions") as box:
        box.attr(label="partitions", style="rounded", color="black", bgcolor="#f7f7f7", rank="same")
        for s in g.partitions:
            name = f"{s.topic}/{s.partition}"
            head = f"{s.topic} p{s.partition}" if with_topic else f"p{s.partition}"
            if s.leader < 0:
                box.node(name, f"{head}\nno leader", style="filled,dashed", fillcolor="white", color=_RED,
                         fontcolor=_RED)
            else:
                hw = "" if s.high_watermark is None else f"  HW {s.high_watermark}"
                box.node(name, f"{head}\nleader {s.leader}{hw}", **_REPLICA_STYLE[LEADER])
            targets[(s.topic, s.partition)] = name
    _draw_group(dot, g, targets, with_topic, constraint=True)  # consumers on top
    return dot


_DIAGRAM = None


def diagram_class() -> type:
    """``Diagram``: a ``graphviz.Digraph`` that a notebook shows scaled to its cell's width.

    Jupyter shows a graphviz SVG at its own size: JupyterLab puts it in an ``<img>`` that no
    CSS narrows, so a wide picture runs off a projector's screen. ``Diagram`` shows itself
    as HTML instead, the same SVG in an ``<img>`` with ``max-width:100%`` (JupyterLab gives
    every HTML image that rule too): it shrinks to the cell, keeping its proportions, and
    never grows past its own size. An ``<img>`` with a data URL, not inline ``<svg>``,
    because it survives the sanitizer JupyterLab applies to an untrusted notebook's HTML.
    Everything else (``.source``, ``pipe``, ``render``) is the ``Digraph``'s."""
    global _DIAGRAM
    if _DIAGRAM is None:
        import graphviz  # a course dependency, not a core one: imported when first drawn

        class Diagram(graphviz.Digraph):
            __doc__ = diagram_class.__doc__

            def _repr_mimebundle_(self, include=None, exclude=None, **_):
                if (include and "text/html" not in include) or (exclude and "text/html" in exclude):
                    return super()._repr_mimebundle_(include=include, exclude=exclude)
                return {"text/html": fit_html(render_svg(self))}

        Diagram.__module__, Diagram.__qualname__ = __name__, "Diagram"  # its repr: <minikafka.viz.Diagram ...>
        _DIAGRAM = Diagram
    return _DIAGRAM


def fit(dot: "graphviz.Digraph") -> "graphviz.Digraph":
    """Any ``graphviz.Digraph`` (a notebook's own picture) as a ``Diagram``: the same
    source, shown scaled to the cell's width."""
    return diagram_class()(name=dot.name, comment=dot.comment, filename=dot.filename, directory=dot.directory,
                           format=dot.format, engine=dot.engine, encoding=dot.encoding,
                           graph_attr=dict(dot.graph_attr), node_attr=dict(dot.node_attr),
                           edge_attr=dict(dot.edge_attr), body=list(dot.body), strict=dot.strict)


def fit_html(svg: str, alt: str = "diagram") -> str:
    """An ``<img>`` of ``svg`` (a data URL) that shrinks to its cell's width, never grows."""
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return (f'<img src="data:image/svg+xml;base64,{data}" alt="{html.escape(alt)}" '
            'style="max-width:100%;height:auto">')


_PROLOG = re.compile(r"\A.*?(?=<svg)", re.S)
_COMMENT = re.compile(r"<!--.*?-->\s*", re.S)


def render_svg(dot: "graphviz.Digraph") -> str:
    """The picture as an inline ``<svg>`` element (no XML prolog, no comments), ready for an
    HTML widget or page. Needs graphviz's ``dot`` program."""
    svg = dot.pipe(format="svg").decode("utf-8")
    # The prolog and the "Generated by graphviz version ..." comment would break inlining
    # in HTML and make saved outputs differ between machines.
    return _COMMENT.sub("", _PROLOG.sub("", svg))

