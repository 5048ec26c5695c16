"""The deterministic simulated world: a virtual clock, an event queue and the nodes.

Theory of operation
-------------------
Everything that happens is an event in one priority queue ordered by (time, sequence
number): a message arriving, a timer firing, a scripted action. ``step()`` pops the next
event, moves the clock to its time, hands it to the node as one call (``handle`` or
``timer``) and schedules the effects the node returns. Nothing runs concurrently and no
real time passes: a simulated hour takes as long as its events take to process.

Same seed, same run: the only randomness is ``World.rng`` (network jitter and loss,
fault schedules), ties are broken by insertion order, and nodes never read a clock, so two
runs with one seed produce the same ``history``, event for event.

Crashes: ``crash(node_id)`` drops the node object (its memory), and every timer and
in-flight message addressed to that incarnation is discarded on arrival. A message sent to
a crashed node is answered by the runtime with ``Disconnected(node)`` after a round trip,
as a refused TCP connection would be; a partitioned node stays silent instead. A node whose
class sets ``sees_connection_resets = True`` (the consumer, which parks requests on brokers
for minutes: a JoinGroup waits out a whole rebalance) is also told ``Disconnected`` when a
process it has sent to crashes, as the kernel's reset of their connection would tell it;
``crash(..., reset_connections=False)`` (a power loss: no kernel left to send the reset)
does not. ``pause(node_id)`` is a SIGSTOP (a long GC pause): the process keeps its memory and
its connections, but runs nothing; what arrives for it (messages, its own timers) waits, in
order, and is handed to it on ``resume(node_id)``, late, as a resumed process finds its
sockets and overdue timers. The factory given
to ``add`` builds a fresh object for ``restart``; a broker's factory reopens its log
directory, so it recovers from disk. (What a crash does to files is the runtime owner's
business: ``Cluster.kill`` releases them, and cuts unflushed bytes on a power loss.)

Invariants: the clock never goes backwards; an event for a dead or older incarnation of a
node is never delivered to the new one.
"""

from __future__ import annotations

import heapq
import random
from typing import Any, Callable, Hashable

from minikafka.messages import Disconnected
from minikafka.node import CancelTimer, Halt, NodeId, Send, SetTimer, StateMachine
from minikafka.sim.network import Network

_MESSAGE, _TIMER, _CALL = 0, 1, 2


class World:
    def __init__(self, seed: int = 0, *, latency_ms: int = 1, jitter_ms: int = 0, record_history: bool = True) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0
        self.network = Network(self.rng, latency_ms=latency_ms, jitter_ms=jitter_ms)
        self.nodes: dict[NodeId, StateMachine] = {}
        self.factories: dict[NodeId, Callable[[], StateMachine]] = {}
        self.incarnation: dict[NodeId, int] = {}
        self._queue: list[tuple[int, int, int, Any]] = []
        self._seq = 0
        self._timer_gen: dict[tuple[NodeId, Hashable], int] = {}
        self.record_history = record_history
        # A node that halts (the ``Halt`` effect) dies as a crashed one does; its owner (the
        # ``Cluster``) releases its files first, as the OS does for a process that exits.
        self.on_halt: Callable[[NodeId, str], None] | None = None
        self.halted: dict[NodeId, str] = {}  # why each node last halted
        self.history: list[tuple] = []  # what happened, for replay checks and tracing
        self.events_processed = 0
        self._peers: dict[NodeId, set[NodeId]] = {}  # dst -> nodes that have sent to it
        self._paused: dict[NodeId, list[tuple[int, Any]]] = {}  # node -> its events held, in order

    # --- nodes ---------------------------------------------------------------------------

    def add(self, node_id: NodeId, factory: Callable[[], StateMachine], *, start: bool = True) -> StateMachine | None:
        self.factories[node_id] = factory
        self.incarnation.setdefault(node_id, 0)
        return self.restart(node_id) if start else None

    def alive(self, node_id: NodeId) -> bool:
        return node_id in self.nodes

    def paused(self, node_id: NodeId) -> bool:
        return node_id in self._paused

    def pause(self, node_id: NodeId) -> None:
        """Stop a live node where it stands (SIGSTOP): alive, silent, its events held."""
        if node_id not in self.nodes:
            raise ValueError(f"node {node_id} is not running: only a live process can be paused")
        if node_id not in self._paused:
            self._paused[node_id] = []
            self._log("pause", node_id)

    def resume(self, node_id: NodeId) -> None:
        """Let a paused node go on (SIGCONT): what waited for it arrives now, in order."""
        held = self._paused.pop(node_id, None)
        if held is None:
            return
        self._log("resume", node_id)
        for kind, payload in held:
            self._push(self.now, kind, payload)

    def crash(self, node_id: NodeId, *, reset_connections: bool = True) -> None:
        self._paused.pop(node_id, None)  # a paused process can be killed: what it held is void
        if self.nodes.pop(node_id, None) is None:
            return
        self.incarnation[node_id] += 1  # in-flight events for the old one are void
        self._log("crash", node_id)
        peers = self._peers.pop(node_id, set())
        if not reset_connections:
            return
        for peer in sorted(peers, key=str):
            node = self.nodes.get(peer)
            if node is not None and getattr(node, "sees_connection_resets", False):
                back = self.network.arrival(self.now, node_id, peer)
                if back is not None:
                    self._push(back, _MESSAGE, (node_id, peer, self.incarnation[peer], Disconnected(node_id)))

    def release(self, node_id: NodeId) -> None:
        """A client was closed. The simulation keeps its node (its state stays readable, and
        a closed producer's node still answers ``cluster.partition(...)``); the TCP client
        runtime closes its sockets here instead."""

    def restart(self, node_id: NodeId) -> StateMachine:
        if node_id in self.nodes:
            self.crash(node_id)
        self.incarnation[node_id] += 1
        node = self.factories[node_id]()
        self.nodes[node_id] = node
        self._log("start", node_id)
        self._apply(node_id, node.start(self.now))
        return node

    def call_node(self, node_id: NodeId, fn: Callable[[StateMachine], Any]) -> Any:
        """Run ``fn(node)`` now, from outside the event loop (e.g. a user calling
        ``producer.send``), and schedule the effects it produced."""
        node = self.nodes[node_id]
        node.now = self.now
        result = fn(node)
        self._apply(node_id, node._take())
        return result

    # --- scheduling ---------------------------------------------------------------------------

    def _push(self, at: int, kind: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at, self._seq, kind, payload))

    def call_at(self, at: int, fn: Callable[[], None]) -> None:
        """Run ``fn`` (a scripted action, e.g. a fault) at simulated time ``at``."""
        self._push(max(at, self.now), _CALL, fn)

    def deliver(self, src: NodeId, dst: NodeId, message: Any) -> None:
        """Send ``message`` from ``src`` as if ``src`` were a node (used by drivers)."""
        at = self.network.arrival(self.now, src, dst)
        if at is None:
            self._log("drop", src, dst, type(message).__name__)
            return
        if dst in self.factories and dst not in self.nodes and src in self.nodes:
            # A crashed process's port refuses the connection: the sender learns it after
            # one round trip instead of waiting out its request timeout.
            back = self.network.arrival(at, dst, src)
            if back is not None:
                self._push(back, _MESSAGE, (dst, src, self.incarnation[src], Disconnected(dst)))
            return
        self._seq += 1
        heapq.heappush(self._queue, (at, self._seq, _MESSAGE, (src, dst, self.incarnation.get(dst, 0), message)))
        peers = self._peers.get(dst)
        if peers is None:
            self._peers[dst] = {src}
        else:
            peers.add(src)

    def _apply(self, node_id: NodeId, effects: list) -> None:
        # Every event passes here (a campaign: millions): _push is written out in place.
        timer_gen = self._timer_gen
        for effect in effects:
            kind = type(effect)
            if kind is Send:
                self.deliver(node_id, effect.dst, effect.message)
            elif kind is SetTimer:
                key = (node_id, effect.key)
                gen = timer_gen.get(key, 0) + 1
                timer_gen[key] = gen
                self._seq += 1
                heapq.heappush(self._queue, (self.now + effect.delay_ms, self._seq, _TIMER,
                                             (node_id, self.incarnation[node_id], effect.key, gen)))
            elif kind is CancelTimer:
                key = (node_id, effect.key)
                self._timer_gen[key] = self._timer_gen.get(key, 0) + 1
            elif kind is Halt:
                self._halt(node_id, effect.reason)
                return  # nothing after a halt happens

    def _halt(self, node_id: NodeId, reason: str) -> None:
        if node_id not in self.nodes:
            return
        self._log("halt", node_id, reason)
        self.halted[node_id] = reason
        if self.on_halt is not None:
            self.on_halt(node_id, reason)
        self.crash(node_id)

    def step(self) -> bool:
        """Process one event; False when nothing is left to do."""
        if not self._queue:
            return False
        at, _, kind, payload = heapq.heappop(self._queue)
        self.now = at
        self.events_processed += 1
        if self._paused and kind != _CALL and (payload[1] if kind == _MESSAGE else payload[0]) in self._paused:
            self._paused[payload[1] if kind == _MESSAGE else payload[0]].append((kind, payload))
            return True
        if kind == _MESSAGE:
            src, dst, inc, message = payload
            node = self.nodes.get(dst)
            if node is None or self.incarnation[dst] != inc:
                # The destination's process died (or restarted) meanwhile: its kernel resets
                # the connection, so the sender hears of it.
                if src in self.nodes and dst in self.factories and not isinstance(message, Disconnected):
                    back = self.network.arrival(self.now, dst, src)
                    if back is not None:
                        self._push(back, _MESSAGE, (dst, src, self.incarnation[src], Disconnected(dst)))
                return True
            if self.record_history:
                self.history.append((at, "recv", src, dst, type(message).__name__))
            self._apply(dst, node.handle(at, src, message))
        elif kind == _TIMER:
            node_id, inc, key, gen = payload
            node = self.nodes.get(node_id)
            if node is None or self.incarnation[node_id] != inc or self._timer_gen.get((node_id, key)) != gen:
                return True
            self._apply(node_id, node.timer(at, key))
        else:
            payload()
        return True

    def run_until(self, done: Callable[[], bool], timeout_ms: int | None = None) -> bool:
        """Process events until ``done()``; False if ``timeout_ms`` of simulated time passed
        (or the queue ran dry) first. The clock ends at the deadline on a timeout."""
        deadline = None if timeout_ms is None else self.now + timeout_ms
        queue, step = self._queue, self.step
        while not done():
            if not queue or (deadline is not None and queue[0][0] > deadline):
                if deadline is not None:
                    self.now = max(self.now, deadline)
                return bool(done())
            step()
        return True

    def advance(self, ms: int) -> None:
        """Let ``ms`` of simulated time pass, processing everything due in it."""
        deadline = self.now + ms
        queue, step = self._queue, self.step
        while queue and queue[0][0] <= deadline:
            step()
        self.now = deadline

    def _log(self, *event: Any) -> None:
        if self.record_history:
            self.history.append((self.now, *event))
