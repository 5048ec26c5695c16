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

What the picture says
---------------------
- One box per broker (a graphviz cluster). A dead broker's box is grey with a red dashed
  border and says "dead"; its replicas say "down" (its memory is gone: no LEO, no HW).
- Inside each box, one node per replica it hosts: "p0 L" on the leader (filled, bold),
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
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

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


@dataclass(frozen=True)
class BrokerView:
    broker_id: int
    alive: bool
    replicas: tuple[ReplicaView, ...]


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

    @property
    def under_replicated(self) -> int:
        return sum(p.under_replicated for p in self.partitions)

    @property
    def offline(self) -> int:
        return sum(p.offline for p in self.partitions)


def snapshot(cluster: "Cluster", topic: str | None = None) -> ClusterView:
    """Read the cluster's state for ``topic`` (every topic when None) into a ``ClusterView``."""
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
    broker_cuts, controller_cuts, other = set(), set(), []
    network = cluster.world.network
    for pair in network.cut:
        a, b = sorted(pair, key=str)
        if a in broker_set and b in broker_set:
            broker_cuts.add((min(a, b), max(a, b)))
        elif CONTROLLER_ID in pair and (pair - {CONTROLLER_ID}) <= broker_set:
            controller_cuts.add(next(iter(pair - {CONTROLLER_ID})))
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
    import graphviz

    with_topic = len(view.topics) != 1
    dot = graphviz.Digraph("minikafka")
    dot.attr(compound="true", newrank="true", rankdir="TB", nodesep="0.3", ranksep="0.5",
             fontname=_FONT, fontsize="11", labelloc="b", label=_caption(view))
    dot.attr("node", shape="box", style="rounded", fontname=_FONT, fontsize="10")
    dot.attr("edge", fontname=_FONT, fontsize="9")

    live = ", ".join(map(str, view.controller_live_brokers)) or "none"
    dot.node("controller", f"controller\nlive brokers: {live}", shape="box",
             style="rounded,filled", fillcolor="#fff7bc", color="#d95f0e")

    anchors: dict[int, str] = {}  # one node per broker box, for edges that end at the box
    for broker in view.brokers:
        b = broker.broker_id
        with dot.subgraph(name=f"cluster_broker_{b}") as box:
            if broker.alive:
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
            # Stack a broker's replicas top to bottom, so boxes stand side by side.
            for upper, lower in zip(names, names[1:]):
                box.edge(upper, lower, style="invis")
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

    if view.other_faults:
        dot.node("faults", "network faults\n" + "\n".join(view.other_faults), shape="note",
                 color=_RED, fontcolor=_RED)
    return dot


def _alive(view: ClusterView, b: int) -> bool:
    return any(x.broker_id == b and x.alive for x in view.brokers)


def _caption(view: ClusterView) -> str:
    topics = ", ".join(view.topics) if view.topics else "(no topics)"
    return (f"topic{'s' if len(view.topics) != 1 else ''} {topics}   t = {view.now_ms / 1000:.3f} s   "
            f"under-replicated: {view.under_replicated}   offline: {view.offline}\n"
            "L leader   F follower (in ISR)   dashed orange: out of ISR   grey: dead broker")


def cluster_diagram(cluster: "Cluster", topic: str | None = None, *, replication: bool = True) -> "graphviz.Digraph":
    """``draw(snapshot(cluster, topic))``: what ``Cluster.diagram`` returns."""
    return draw(snapshot(cluster, topic), replication=replication)


_PROLOG = re.compile(r"\A.*?(?=<svg)", re.S)
_COMMENT = re.compile(r"<!--.*?-->\s*", re.S)


def render_svg(dot: "graphviz.Digraph") -> str:
    """The picture as an inline ``<svg>`` element (no XML prolog, no comments), ready for an
    HTML widget or page. Needs graphviz's ``dot`` program."""
    svg = dot.pipe(format="svg").decode("utf-8")
    # The prolog and the "Generated by graphviz version ..." comment would break inlining
    # in HTML and make saved outputs differ between machines.
    return _COMMENT.sub("", _PROLOG.sub("", svg))

