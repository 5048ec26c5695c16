"""The TCP runtime: one sans-I/O node (a broker or the controller) behind real sockets.

Theory of operation
-------------------
The simulated world (``minikafka.sim``) and this runtime drive the *same* state machines;
only what surrounds them differs. A ``NodeRuntime`` owns one node in this process and an
asyncio event loop, and does for it what the world does in a simulation:

- **Inputs.** Every frame read from a socket is decoded (``minikafka.wire.codec``) into the
  dataclass the node understands and handed to ``node.handle(now, src, message)``; a timer
  the node set fires through ``loop.call_later`` into ``node.timer(now, key)``. ``now`` is
  the wall clock in epoch milliseconds, as record timestamps are.
- **Effects.** ``Send(dst, message)`` goes where ``dst`` says: a client connection (the
  answer to one of its requests), another broker (a follower's Fetch, as real Kafka Fetch
  frames) or the controller (private frames for the controller's own messages).
- **Listeners.** As Kafka's ``listeners``, one per purpose. A broker has a *client*
  listener (``port``) and an *inter-broker* listener (``inter_node_port``, registered with
  the controller: followers fetch there); a controller has only the *controller* listener
  (``listener=INTER_NODE_LISTENER``): clients never talk to controllers. The state
  machines do not know about listeners; the runtime decides what a connection may deliver:
  a client listener closes the connection, before anything reaches the node and with the
  reason logged (peer address, api key), on a private frame (api key >= 10000: heartbeats,
  registrations, the Raft quorum's messages) and on a Fetch with ``replica_id >= 0`` (only
  brokers fetch as replicas: a client posing as one could move a high watermark). An
  inter-node listener first runs the cluster-secret handshake (``minikafka.wire.auth``: an
  HMAC challenge); a connection that fails it is closed having delivered nothing. Every
  outgoing connection goes to a peer's inter-node listener and answers that challenge first.
- **Who is who.** A client connection is named after its peer, ``"/127.0.0.1:54321"``, as
  Kafka names a member's host; other nodes by their ids (brokers 1, 2, ...;
  ``CONTROLLER_ID`` for the controller). A private frame names its sender in its header:
  trusted only because it came through an inter-node listener.
  A name is never reused while the node may still answer a request of a closed connection
  that had it (the kernel recycles ports): the newcomer becomes ``"/127.0.0.1:54321#2"``, so
  a late answer is dropped instead of reaching a stranger.
- **Order.** Kafka answers the requests of one connection in the order they came, but a
  broker completes them out of order (a long-poll Fetch waits, a Metadata does not): each
  connection keeps its requests in arrival order and writes an answer only once every
  earlier one is written. A request that gets no answer (Produce with acks=0) holds no place.
  A client that does not read its answers is not read from either (back-pressure, as Kafka
  mutes such a channel): answers wait in its socket buffer, not in our memory. Nor is one
  that has too much waiting here: ``queued.max.requests`` unanswered requests, or
  ``queued.max.request.bytes`` of request frames and answers queued behind a slower one
  (both per connection here; Kafka bounds its shared request queue with them). A client
  connection has at most one request unanswered (below), so ``queued.max.requests`` binds
  only the cluster's own nodes' connections.
- **One request at a time, in turns.** Kafka's network layer reads one request from a client
  connection and mutes the channel until that request's answer is sent (``Selector.mute``):
  a client that pipelines (kafka-python sends up to five) cannot make the broker work for it
  alone. So here: after a request that expects an answer, a client connection is read again
  only once every answer it is owed has been handed to its socket; what it sent meanwhile
  waits in the socket buffers. And each connection yields to the loop after every request,
  so ready connections are served round-robin, one request each per turn: 500 connections
  pipelining ApiVersions used to be served a socket buffer (about 1,600 requests) at a time
  each, and a well-behaved producer waited seconds behind them (benchmarks/RESULTS.md).
  Inter-node connections are not muted: the cluster's own nodes send private frames
  (heartbeats, the quorum's messages) that must never wait behind a follower's long-poll Fetch.
- **Connection quotas** (Kafka's ``ConnectionQuotas``). ``max.connections.per.ip`` (with
  ``max.connections.per.ip.overrides``, ``host:count,...``): a new connection from an address
  that already has that many is closed right after accept, logged, as Kafka's acceptor does.
  ``max.connections`` (all listeners of this node): at the limit a new client connection
  waits, unread and undelivered, until another closes (Kafka's acceptor stops accepting and
  new connections wait in the kernel's backlog; asyncio has no way to pause a listener, so
  here they wait accepted, each holding a descriptor). The inter-broker listener is
  protected, as in Kafka: a broker's connection is always admitted, and if that puts the node
  over the limit the least recently used client connection is closed.
- **Closing.** Connections that end are torn down by one closer, ``CLOSES_PER_TURN`` a loop
  turn, not all in the turn they ended in. What asyncio does itself is not spread: it reads
  the end of every hung-up socket in one turn, and wakes every connection's task in the next,
  so 10,000 idle clients hanging up at once still hold the others once, for about half a
  second on this machine (0.8 s before the closer; benchmarks/RESULTS.md).
- **Memory for requests being read** (Kafka's memory pool, KIP-72). A frame of more than
  ``POOLED_FRAME_BYTES`` is read only once its whole size is set aside from one pool for all
  connections: ``queued.max.request.bytes`` if set, else ``READ_POOL_FRAMES`` largest
  requests (Kafka's default bounds nothing: 40 connections each sending 90 MB of a 100 MB
  frame held 4.3 GB). A connection whose frame does not fit waits, unread (its bytes stay in
  the kernel's socket buffers and its sender blocks), until a frame being read is done.
  Smaller frames, every ordinary request, never wait for the pool, so clients that hold it
  with frames they never finish stall only other large requests.
- **Large answers.** A Fetch answer is a list of buffers (``codec.encode_response_parts``):
  its large record sets are never copied into the frame, and the broker leaves them in
  their segment files (``FileRecords``), for ``os.sendfile`` to copy from the page cache to
  the socket. Other answers over ``WRITE_CHUNK_BYTES`` are written a chunk per ``drain()``,
  since asyncio 3.11's transport copies whatever the socket does not take at once into one
  growing buffer. 30 concurrent fetches of 55 MiB, read into bytes and written whole, held
  every other client for 5-6 s and the broker at 1.7 GB. Records cut from their file before
  they were sent (a follower truncating) close the connection: the frame would be short.
- **Large requests.** A request frame of ``LARGE_FRAME_BYTES`` or more is decoded, and
  its answer encoded, in a worker thread, the answer still written in its turn: building
  the structs of a 2 MB Metadata request naming 80,000 topics takes a second, during which
  the loop goes on serving every other connection. The node itself still runs on the loop.
  Not Produce: however large, its frame decodes to one slice of record bytes a partition,
  cheaper than the two thread hand-offs (which cost the broker about 0.4 s of CPU a million
  records from librdkafka, whose requests are hundreds of KB: benchmarks/RESULTS.md).
- **Bad input.** A frame that is too large (``socket.request.max.bytes``), malformed, or of
  an unknown API or version closes *that* connection, with the reason logged; every other
  connection is served as before. An answer that cannot be encoded (a bug, or a request
  whose answer no version can carry) closes its connection too, logged: its client would
  otherwise wait forever, and every answer behind it with it. One failed effect never stops
  the node's other effects (answers to other clients, timers) from being applied.
- **Peers.** One outgoing connection per peer node, opened on first use. If it cannot be
  opened or breaks, the node is told ``Disconnected(peer)``, as in the simulation, and the
  next send opens it again. A node that has sent us private frames is answered over the
  connection they came in on (a broker fetching the metadata log from a controller may
  not have registered its address yet, or may have restarted on another port), and
  private frames arriving on an outgoing connection are delivered like any other. Answers from peers are not held to ``socket.request.max.bytes``
  (a follower's Fetch answer may be up to its ``max_bytes``, 50 MB; Kafka's clients read
  responses of any size): peers are other nodes of this cluster.

Never: deliver a private frame or a replica Fetch that came in on a client listener, or
anything from an inter-node connection before its handshake; let an exception from one
connection reach another, or block the loop (the node's
handlers are quick; the only disk I/O is the log's own appends, as in Kafka's request
threads). Nothing here knows Kafka's rules: those live in the node.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from minikafka.errors import IllegalArgumentError
from minikafka.messages import CONTROLLER_ID, Disconnected, FetchRequest
from minikafka.node import CancelTimer, Halt, NodeId, Send, SetTimer, StateMachine
from minikafka.storage.file_records import FileRecords
from minikafka.wire import auth, codec

log = logging.getLogger("minikafka.wire")

DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
DEFAULT_QUEUED_MAX_REQUESTS = 500  # Kafka's queued.max.requests (here: per connection)
# A request this large is decoded, and its answer encoded, in a worker thread: the loop (every
# other connection) is not held for the seconds a 2 MB Metadata request naming topics takes.
LARGE_FRAME_BYTES = 64 * 1024
WRITE_CHUNK_BYTES = 1024 * 1024  # an answer larger than this is written a chunk per drain (see _write_out)
POOLED_FRAME_BYTES = 1024 * 1024  # larger frames are read only with room in the pool (see "Memory")
READ_POOL_FRAMES = 4  # the pool, unless queued.max.request.bytes says: this many largest frames
# ... except these, whose decoding does not grow with their size in structs (see "Large requests").
ON_LOOP_HOWEVER_LARGE = frozenset({codec.PRODUCE})
# Names of closed connections the node may still answer, remembered so that a new connection
# from the same recycled port is not mistaken for the old one; bounded: oldest forgotten.
RETIRED_NAMES_KEPT = 10_000
# Kafka's default for max.connections and max.connections.per.ip: no limit.
NO_LIMIT = 2**31 - 1
# Connections torn down a loop turn (see "Closing"): the rest wait for the next turn.
CLOSES_PER_TURN = 64
# What a listener is for (Kafka's listener names): clients, or the cluster's own nodes
# (a broker's inter-broker listener, a controller's controller listener).
CLIENT_LISTENER, INTER_NODE_LISTENER = "client", "inter-node"


def _private_name(api_key: int) -> str:
    names = {key: cls.__name__ for cls, key in codec.INTERNAL_API_KEYS.items()}
    return names.get(api_key, "unknown private api")


class RefusedFrame(codec.FrameError):
    """A well-formed frame this listener must not deliver (an inter-node message from a client)."""


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class _Connection:
    """An incoming connection: a client, or a broker fetching as a follower."""

    name: str
    writer: asyncio.StreamWriter
    inter_node: bool = False  # came in on an inter-node listener and passed the handshake
    order: deque = field(default_factory=deque)  # correlation ids, in arrival order
    requests: dict[int, Any] = field(default_factory=dict)  # corr -> (Decoded, answers so far)
    ready: dict[int, bytes] = field(default_factory=dict)  # corr -> encoded answer
    closed: bool = False
    # What the connection holds in our memory: the frames of its unanswered requests and
    # the answers waiting for an earlier one. Reads stop while it is over the limits.
    held_bytes: int = 0
    sizes: dict[int, int] = field(default_factory=dict)  # corr -> its request frame's size
    room: asyncio.Event = field(default_factory=asyncio.Event)
    # Answers handed over in order but not yet to the transport: large ones go a chunk at a
    # time, each once the socket took the last (asyncio 3.11 copies whatever it buffers).
    outbox: deque = field(default_factory=deque)
    writing: bool = False


@dataclass
class _Peer:
    """An outgoing connection to another node."""

    node: NodeId
    writer: asyncio.StreamWriter | None = None
    connecting: asyncio.Task | None = None
    queue: list[bytes] = field(default_factory=list)  # frames waiting for the connection
    expecting: dict[int, tuple[int, int]] = field(default_factory=dict)  # corr -> (api key, version)


def _off_loop(size: int, api_key: int) -> bool:
    """Is a request of this size and API decoded, and its answer encoded, in a worker thread?
    (see "Large requests")"""
    return size >= LARGE_FRAME_BYTES and api_key not in ON_LOOP_HOWEVER_LARGE


class NodeHalted(Exception):
    """The node halted itself (the ``Halt`` effect): ``serve`` raises it once the listeners
    are closed, and a node's process exits with it (status 1), as Kafka's ``Exit.halt``."""

    def __init__(self, node_id: NodeId, reason: str) -> None:
        super().__init__(f"{node_id} halted: {reason}")
        self.node_id, self.reason = node_id, reason


class NodeRuntime:
    """Run ``node`` (a ``StateMachine``) on ``host:port``; ``addresses`` maps peer node ids to
    ``(host, port)`` (more may be learned later with ``learn_address``)."""

    def __init__(
        self, node: StateMachine, host: str, port: int, *, addresses: dict[NodeId, tuple[str, int]] | None = None,
        clock: Callable[[], int] = wall_clock_ms, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        context: Callable[[], Any] | None = None, resolve: Callable[[NodeId], tuple[str, int] | None] | None = None,
        listener: str = CLIENT_LISTENER, inter_node_port: int | None = None, secret: bytes | None = None,
        queued_max_requests: int = DEFAULT_QUEUED_MAX_REQUESTS, queued_max_request_bytes: int = -1,
        reuse_port: bool = False, max_connections: int = NO_LIMIT, max_connections_per_ip: int = NO_LIMIT,
        max_connections_per_ip_overrides: dict[str, int] | None = None,
    ) -> None:
        if listener not in (CLIENT_LISTENER, INTER_NODE_LISTENER):
            raise IllegalArgumentError(f"a listener is {CLIENT_LISTENER!r} or {INTER_NODE_LISTENER!r}, not {listener!r}")
        if secret is None:  # every node talks to others (its peers' listeners are inter-node ones)
            raise IllegalArgumentError("a node needs the cluster secret to reach or admit other nodes")
        self.node = node
        self.host, self.port = host, port
        self.listener = listener  # what ``port`` is for
        self.inter_node_port = inter_node_port  # a second listener, for the other nodes (a broker's)
        self.secret = secret
        # SO_REUSEPORT on the listeners of given ports: the launcher holds them (see wire/process.py)
        self.reuse_port = reuse_port
        self.addresses: dict[NodeId, tuple[str, int]] = dict(addresses or {})
        self.clock = clock
        self.max_request_bytes = max_request_bytes
        self.queued_max_requests = queued_max_requests
        # Kafka's queued.max.request.bytes (-1: unbounded there); here per connection, and
        # -1 means socket.request.max.bytes: one connection holds at most one largest request's worth.
        self.queued_max_request_bytes = queued_max_request_bytes if queued_max_request_bytes > 0 else max_request_bytes
        # For all connections: bytes set aside for large frames being read (see "Memory").
        self.read_pool_bytes = (queued_max_request_bytes if queued_max_request_bytes > 0
                                else READ_POOL_FRAMES * max_request_bytes)
        self._pool_free = self.read_pool_bytes
        self._pool_returned = asyncio.Event()
        self.context = context  # what the codec needs to describe the cluster (broker addresses)
        self.resolve = resolve  # where a node lives, as the node itself has learned it
        self._connections: dict[str, _Connection] = {}
        self._peers: dict[NodeId, _Peer] = {}
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self._server: asyncio.base_events.Server | None = None
        self._inter_node_server: asyncio.base_events.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._counter = itertools.count(2)
        self._retired: dict[str, None] = {}  # names of closed connections with requests unanswered
        self._inbound: dict[NodeId, _Connection] = {}  # peers without an address: their own connection
        # Connection quotas (see "Connection quotas"): counted per address and in all.
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.max_connections_per_ip_overrides = dict(max_connections_per_ip_overrides or {})
        self._per_ip: dict[str, int] = {}
        self._open_connections = 0
        self._slot_freed = asyncio.Event()
        self._closing: deque = deque()  # connections waiting for the closer (see "Closing")
        self.halted: str | None = None  # why the node halted (then it handles nothing more)
        self._halt_waiter: asyncio.Future | None = None  # ``serve`` wakes on it
        self._closer_scheduled = False
        self.stats = {"requests": 0, "bad_frames": 0, "connections": 0, "refused": 0, "failed_handshakes": 0,
                      "muted": 0, "decoded_in_thread": 0, "waited_for_memory": 0, "bytes_sent_from_files": 0,
                      "rejected_connections": 0, "waited_for_slot": 0, "closed_least_recently_used": 0}

    # --- lifecycle ---------------------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._halt_waiter = self._loop.create_future()
        main_is_inter_node = self.listener == INTER_NODE_LISTENER
        self._server = await asyncio.start_server(
            lambda r, w: self._serve(r, w, main_is_inter_node), self.host, self.port, reuse_address=True,
            reuse_port=self.reuse_port and self.port != 0)
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]
        if self.inter_node_port is not None:
            self._inter_node_server = await asyncio.start_server(
                lambda r, w: self._serve(r, w, True), self.host, self.inter_node_port, reuse_address=True,
                reuse_port=self.reuse_port and self.inter_node_port != 0)
            if self.inter_node_port == 0:  # a free port, taken at bind (no window for another to take it)
                self.inter_node_port = self._inter_node_server.sockets[0].getsockname()[1]
                if hasattr(self.node, "inter_broker_port"):  # registered with the controller at node.start
                    self.node.inter_broker_port = self.inter_node_port
        self._apply(self.node.start(self.clock()))

    async def serve(self) -> None:
        """Serve every listener until cancelled (after ``start``); ``NodeHalted`` once the node
        halts itself, its listeners and connections closed."""
        servers = [s for s in (self._server, self._inter_node_server) if s is not None]
        serving = asyncio.gather(*(s.serve_forever() for s in servers))
        try:
            await asyncio.wait({serving, self._halt_waiter}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            serving.cancel()
            raise
        if self.halted is None:
            await serving  # (its failure, if it failed)
            return
        # Connections first: a cancelled ``serve_forever`` waits in ``Server.wait_closed``,
        # which since Python 3.12 waits for every connection it accepted to close. Closed
        # after, they would hang there until each client gave up (30 s of silence for them).
        await self.close()
        serving.cancel()
        done, _ = await asyncio.wait({serving}, timeout=5)
        if not done:  # a connection still being admitted: a second cancel ends the wait
            serving.cancel()
            done, _ = await asyncio.wait({serving}, timeout=5)
        for future in done:  # its CancelledError, read here: nothing to report later, at GC
            if not future.cancelled():
                future.exception()
        raise NodeHalted(self.node.node_id, self.halted)

    async def serve_forever(self) -> None:
        await self.start()
        await self.serve()

    async def close(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for server in (self._server, self._inter_node_server):
            if server is not None:
                server.close()
        for conn in list(self._connections.values()):
            self._close_connection(conn, "shutting down", at_once=True)
        self._close_some(len(self._closing))
        for peer in self._peers.values():
            if peer.writer is not None:
                peer.writer.close()
            if peer.connecting is not None:
                peer.connecting.cancel()

    def learn_address(self, node: NodeId, host: str, port: int) -> None:
        self.addresses[node] = (host, port)

    def _lookup(self, node: NodeId) -> tuple[str, int] | None:
        found = self.resolve(node) if self.resolve is not None else None
        return found or self.addresses.get(node)

    # --- the node's effects -------------------------------------------------------------------------------

    def _apply(self, effects: list) -> None:
        for effect in effects:
            if type(effect) is Halt:
                self._halt(effect.reason)
                return  # nothing after a halt happens
            try:
                self._apply_one(effect)
            except Exception:  # the others (answers to other clients, timers) must still happen
                what = (f"{type(effect.message).__name__} to {effect.dst!r}" if type(effect) is Send
                        else repr(effect))
                log.exception("%s: could not apply %s", self.node.node_id, what)

    def _halt(self, reason: str) -> None:
        """The node stops for good: no timer fires and no input reaches it any more, and
        ``serve`` closes the listeners and raises ``NodeHalted``."""
        if self.halted is not None:
            return
        self.halted = reason
        log.critical("%s: halting: %s", self.node.node_id, reason)
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        if self._halt_waiter is not None and not self._halt_waiter.done():
            self._halt_waiter.set_result(reason)

    def _apply_one(self, effect: Any) -> None:
        if type(effect) is Send:
            self._route(effect.dst, effect.message)
        elif type(effect) is SetTimer:
            old = self._timers.pop(effect.key, None)
            if old is not None:
                old.cancel()
            self._timers[effect.key] = self._loop.call_later(effect.delay_ms / 1000, self._fire, effect.key)
        elif type(effect) is CancelTimer:
            old = self._timers.pop(effect.key, None)
            if old is not None:
                old.cancel()

    def _fire(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        self._run(lambda now: self.node.timer(now, key))

    def _run(self, step: Callable[[int], list]) -> None:
        if self.halted is not None:
            return  # a halted node handles nothing (its listeners are closing)
        try:
            effects = step(self.clock())
        except Exception:  # a bug in the node must not take the process down silently
            log.exception("%s: the node failed while handling an input", self.node.node_id)
            # What it did before failing is in its state already (a purgatory entry, an
            # append): its effects (that entry's timer, a follower's wake-up) must happen too,
            # and not leak into the answer to the next input.
            self._apply(self.node._take())
            raise
        self._apply(effects)

    def _route(self, dst: NodeId, message: Any) -> None:
        conn = self._connections.get(dst) if isinstance(dst, str) else None
        inbound = self._inbound.get(dst)
        if conn is not None:
            self._answer(conn, message)
        elif inbound is not None and not inbound.closed and codec.is_private(message):
            # The peer's own connection, the one it is reading: surer than an address
            # learned earlier (a restarted process may listen elsewhere now).
            frame, _ = codec.encode_outgoing(message, sender=self.node.node_id)
            inbound.writer.write(frame)
        elif dst in self.addresses or dst in self._peers or self._lookup(dst) is not None:
            self._send_to_peer(dst, message)
        elif isinstance(dst, str) and dst.startswith("/"):
            pass  # the client hung up before its answer was ready
        else:
            log.warning("%s: no address for node %r; dropping %s", self.node.node_id, dst, type(message).__name__)
            self._loop.call_soon(self._disconnected, dst)

    # --- incoming connections ------------------------------------------------------------------------------

    async def _admit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, name: str) -> bool:
        """The inter-node handshake (``minikafka.wire.auth``): True if the peer knows the
        cluster secret; otherwise the connection is closed, having delivered nothing."""
        nonce = auth.challenge()
        try:
            writer.write(nonce)
            response = await asyncio.wait_for(reader.readexactly(auth.ANSWER_BYTES), auth.HANDSHAKE_TIMEOUT_S)
        except (asyncio.IncompleteReadError, ConnectionError, OSError, asyncio.TimeoutError):
            response = None  # a port probe, or a peer gone (or silent) before answering
        if response is not None and auth.verify(self.secret, nonce, response):
            return True
        self.stats["failed_handshakes"] += 1
        if response is not None:
            log.warning("%s: closing connection %s on the inter-node listener: it failed the cluster-secret "
                        "handshake (not a node of this cluster)", self.node.node_id, name)
        writer.close()
        return False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, inter_node: bool) -> None:
        host, port = (writer.get_extra_info("peername") or ("unknown", 0))[:2]  # None if already reset
        name = f"/{host}:{port}"
        # A broker's inter-broker listener beside its client listener is protected (see "Connection quotas").
        protected = inter_node and self.inter_node_port is not None
        if not protected and self._open_connections >= self.max_connections:
            self.stats["waited_for_slot"] += 1
            while self._open_connections >= self.max_connections:
                self._slot_freed.clear()
                await self._slot_freed.wait()
        self._open_connections += 1
        count = self._per_ip.get(host, 0)
        self._per_ip[host] = count + 1
        try:
            limit = self.max_connections_per_ip_overrides.get(host, self.max_connections_per_ip)
            if count >= limit:
                self.stats["rejected_connections"] += 1
                log.warning("%s: rejected connection from %s: address already has the configured maximum of %d "
                            "connections (max.connections.per.ip)", self.node.node_id, host, limit)
                writer.close()
                return
            if self._open_connections > self.max_connections:  # a protected one over the limit
                self._close_least_recently_used()
            await self._serve_admitted(reader, writer, inter_node, name)
        finally:
            self._open_connections -= 1
            if self._per_ip[host] == 1:
                del self._per_ip[host]
            else:
                self._per_ip[host] -= 1
            self._slot_freed.set()

    def _close_least_recently_used(self) -> None:
        """Kafka's ``maxConnectionsExceeded``: the client connection idle longest goes."""
        for conn in self._connections.values():  # in order of last request (see _serve_admitted)
            if not conn.inter_node and not conn.closed:
                self.stats["closed_least_recently_used"] += 1
                log.warning("%s: closing connection %s, the least recently used: over max.connections (%d)",
                            self.node.node_id, conn.name, self.max_connections)
                self._close_connection(conn, "over max.connections")
                return

    async def _serve_admitted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, inter_node: bool,
                              name: str) -> None:
        if inter_node and not await self._admit(reader, writer, name):
            return
        if name in self._retired or name in self._connections:  # a recycled port: see "Who is who"
            name = f"{name}#{next(self._counter)}"
        conn = _Connection(name, writer, inter_node)
        self._connections[conn.name] = conn
        self.stats["connections"] += 1
        try:
            while not conn.closed:
                header = await reader.readexactly(4)
                size = int.from_bytes(header, "big", signed=True)
                if size < 0:
                    raise codec.FrameError(f"frame of {size} bytes: a length cannot be negative")
                if size > self.max_request_bytes:
                    raise codec.FrameError(
                        f"frame of {size} bytes (socket.request.max.bytes is {self.max_request_bytes})")
                frame = await self._read_frame(reader, size)
                if not inter_node:  # the most recently used last: the least is first (max.connections)
                    self._connections[conn.name] = self._connections.pop(conn.name)
                if _off_loop(size, int.from_bytes(frame[:2], "big", signed=True)) and not codec.is_internal(frame):
                    self.stats["decoded_in_thread"] += 1
                    self._on_frame(conn, frame, await asyncio.to_thread(codec.decode_request, frame))
                else:
                    self._on_frame(conn, frame)
                # Back-pressure: while the client leaves its answers unread (the socket buffer
                # is full), read nothing more from it.
                await writer.drain()
                # ... nor while it is owed an answer (a client: one request at a time) or has
                # too much waiting here (requests parked in a purgatory, answers queued behind
                # a slow one): Kafka mutes such a channel too.
                while self._over_limits(conn) and not conn.closed:
                    self.stats["muted"] += 1
                    conn.room.clear()
                    await conn.room.wait()
                await asyncio.sleep(0)  # the next ready connection's turn (see "One request at a time")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away
        except RefusedFrame as e:
            self.stats["refused"] += 1
            log.warning("%s: closing connection %s: %s", self.node.node_id, conn.name, e)
        except codec.FrameError as e:
            self.stats["bad_frames"] += 1
            log.warning("%s: closing connection %s: %s", self.node.node_id, conn.name, e)
        except Exception:
            self.stats["bad_frames"] += 1
            log.exception("%s: closing connection %s after an unexpected error", self.node.node_id, conn.name)
        finally:
            self._close_connection(conn, "closed")

    async def _read_frame(self, reader: asyncio.StreamReader, size: int) -> bytes:
        """A frame's ``size`` bytes; a large one only with its size set aside from the pool."""
        if size <= POOLED_FRAME_BYTES:
            return await reader.readexactly(size)
        # A frame larger than the pool (a pool set below socket.request.max.bytes) waits for
        # all of it: it is read alone, as Kafka's pool lets one request overdraw it.
        need = min(size, self.read_pool_bytes)
        while self._pool_free < need:
            self.stats["waited_for_memory"] += 1
            self._pool_returned.clear()
            await self._pool_returned.wait()
        self._pool_free -= need
        try:
            return await reader.readexactly(size)
        finally:
            self._pool_free += need
            self._pool_returned.set()

    def _on_frame(self, conn: _Connection, frame: bytes, decoded: codec.Decoded | None = None) -> None:
        if codec.is_internal(frame):
            if not conn.inter_node:  # checked before decoding: nothing of it reaches the node
                api_key = int.from_bytes(frame[:2], "big", signed=True)
                raise RefusedFrame(f"api key {api_key} ({_private_name(api_key)}) is inter-node traffic, "
                                   f"refused on the client listener")
            src, message = codec.decode_internal(frame)
            if src is not None and not isinstance(src, str):
                self._inbound[src] = conn
            self._deliver(src, message)
            return
        if decoded is None:
            decoded = codec.decode_request(frame)
        if not conn.inter_node and any(type(m) is FetchRequest and m.replica_id >= 0 for m in decoded.messages):
            # Kafka: replica_id >= 0 only from brokers; a client posing as a follower would
            # move a high watermark or bring a dead replica back into the ISR.
            raise RefusedFrame(f"api key {decoded.api_key} ({decoded.api_name}) from replica "
                               f"{decoded.messages[0].replica_id} is inter-broker traffic, refused on the client listener")
        self.stats["requests"] += 1
        corr = decoded.correlation_id
        if decoded.api_key == codec.API_VERSIONS:  # the connection's business, not the node's
            self._enqueue(conn, corr, codec.encode_api_versions(decoded))
            return
        if decoded.reply is not None:  # refused by the codec with a reason: answer in turn
            self._enqueue(conn, corr, codec.encode_response(decoded, decoded.reply, context=self._context()))
            return
        if decoded.expects_response:
            if corr in conn.requests:
                raise codec.FrameError(f"correlation id {corr} is already in use on this connection")
            conn.order.append(corr)
            conn.requests[corr] = (decoded, [])
            conn.sizes[corr] = len(frame)
            conn.held_bytes += len(frame)
        for message in decoded.messages:  # one, except a LeaveGroup naming several members
            self._deliver(conn.name, message)

    def _context(self) -> Any:
        return self.context() if self.context is not None else None

    def _enqueue(self, conn: _Connection, corr: int, data: bytes) -> None:
        """An answer that is ready now, written once the answers before it are."""
        conn.order.append(corr)
        self._ready(conn, corr, data)

    def _ready(self, conn: _Connection, corr: int, data: Any) -> None:
        """``data``: the encoded answer, bytes or a list of buffers (``encode_response_parts``)."""
        parts = data if isinstance(data, list) else [data]
        conn.ready[corr] = parts
        conn.held_bytes += sum(len(b) for b in parts) - conn.sizes.pop(corr, 0)
        self._flush(conn)

    def _flush(self, conn: _Connection) -> None:
        while conn.order and conn.order[0] in conn.ready:
            parts = conn.ready.pop(conn.order.popleft())
            size = sum(len(b) for b in parts)
            if conn.writing or size > WRITE_CHUNK_BYTES or any(type(b) is FileRecords for b in parts):
                conn.outbox.append(parts)
                if not conn.writing:
                    conn.writing = True
                    self._loop.create_task(self._write_out(conn))
                continue
            conn.held_bytes -= size
            for b in parts:
                if b:
                    # A view: what the socket does not take at once, asyncio's transport (3.11)
                    # slices off and buffers; a slice of a view is free, of a bytearray a copy.
                    conn.writer.write(memoryview(b))  # from here on the transport's: drain() waits for it
        if not self._over_limits(conn):
            conn.room.set()

    async def _write_out(self, conn: _Connection) -> None:
        """Large answers, in order, a chunk at a time: the transport (asyncio 3.11) copies what
        the socket does not take into one growing buffer and moves what is left after every
        send, so 30 answers of 55 MiB handed over whole were copied again and again on the loop.
        Records left in their segment (``FileRecords``) go by sendfile, never read in here."""
        try:
            while conn.outbox and not conn.closed:
                parts = conn.outbox.popleft()
                for b in parts:
                    if type(b) is FileRecords:
                        if not await self._send_file_records(conn, b):
                            return
                        continue
                    view = memoryview(b)
                    for start in range(0, len(view), WRITE_CHUNK_BYTES):
                        conn.writer.write(view[start:start + WRITE_CHUNK_BYTES])
                        await conn.writer.drain()
                        if conn.closed:
                            return
                conn.held_bytes -= sum(len(b) for b in parts)
                if not self._over_limits(conn):
                    conn.room.set()
        except (ConnectionError, OSError):
            pass  # the client went away: its reader sees it too
        finally:
            conn.writing = False
            if conn.outbox and not conn.closed:  # handed over while the last drain was returning
                conn.writing = True
                self._loop.create_task(self._write_out(conn))

    async def _send_file_records(self, conn: _Connection, records: FileRecords) -> bool:
        """Send ``records`` from their file with ``os.sendfile`` (the kernel copies from the
        page cache; asyncio waits for the transport to be empty first, and pauses reading
        meanwhile). False, and the connection closed, if they could not all be sent: bytes
        cut from the file since the answer was read would leave its frame short, and the
        client waiting for the rest (Kafka's ``FileRecords.writeTo`` fails so too)."""
        try:
            sent = await self._loop.sendfile(conn.writer.transport, records, records.position, len(records),
                                             fallback=False)
        except (ConnectionError, OSError, RuntimeError):  # the client went away mid-send
            sent = -1
        self.stats["bytes_sent_from_files"] += max(sent, 0)
        if conn.closed:
            return False
        if sent == len(records):
            return True
        if sent >= 0:
            log.warning("%s: %r: the file was cut below records being sent; closing the connection",
                        self.node.node_id, records)
        self._close_connection(conn, "records cut from their file while being sent")
        return False

    def _over_limits(self, conn: _Connection) -> bool:
        if conn.order and not conn.inter_node:  # a client: one request at a time
            return True
        return len(conn.order) >= self.queued_max_requests or conn.held_bytes >= self.queued_max_request_bytes

    def _deliver(self, src: NodeId, message: Any) -> None:
        self._run(lambda now: self.node.handle(now, src, message))

    def _answer(self, conn: _Connection, message: Any) -> None:
        corr = message.correlation_id
        entry = conn.requests.get(corr)
        if entry is None or conn.closed:
            return
        decoded, answers = entry
        answers.append(message)
        if len(answers) < len(decoded.messages):
            return  # a fanned-out LeaveGroup: wait for every member's answer
        del conn.requests[corr]
        response = answers[0] if len(answers) == 1 else answers
        context = self._context()  # read here, on the loop: the node's state may change meanwhile
        if _off_loop(conn.sizes.get(corr, 0), decoded.api_key):
            self._loop.create_task(self._answer_in_thread(conn, corr, decoded, response, context))
            return
        try:
            data = codec.encode_response_parts(decoded, response, context=context)
        except Exception:
            self._unencodable(conn, decoded, corr)
            return
        self._ready(conn, corr, data)

    async def _answer_in_thread(self, conn: _Connection, corr: int, decoded: Any, response: Any, context: Any) -> None:
        try:
            data = await asyncio.to_thread(codec.encode_response_parts, decoded, response, context=context)
        except Exception:
            self._unencodable(conn, decoded, corr)
            return
        if not conn.closed:
            self._ready(conn, corr, data)

    def _unencodable(self, conn: _Connection, decoded: Any, corr: int) -> None:
        # Its client would wait forever, and every answer queued behind it.
        self.stats["bad_frames"] += 1
        log.exception("%s: closing connection %s: cannot encode the answer to %s v%d (correlation id %d)",
                      self.node.node_id, conn.name, decoded.api_name, decoded.api_version, corr)
        self._close_connection(conn, "unencodable answer")

    def _close_connection(self, conn: _Connection, why: str, *, at_once: bool = False) -> None:
        if conn.closed:
            return
        conn.closed = True
        conn.room.set()  # a muted reader wakes to see it closed
        self._connections.pop(conn.name, None)
        for node in [n for n, c in self._inbound.items() if c is conn]:
            del self._inbound[node]
        if conn.requests:  # the node may still answer them: keep the name from a newcomer
            self._retired[conn.name] = None
            if len(self._retired) > RETIRED_NAMES_KEPT:
                del self._retired[next(iter(self._retired))]
        self._closing.append(conn.writer)
        if at_once:
            self._close_some(len(self._closing))
        elif not self._closer_scheduled:
            self._closer_scheduled = True
            self._loop.call_soon(self._close_some)

    def _close_some(self, n: int = CLOSES_PER_TURN) -> None:
        """The closer (see "Closing"): ``n`` transports now, the rest in later loop turns."""
        self._closer_scheduled = False
        for _ in range(min(n, len(self._closing))):
            writer = self._closing.popleft()
            try:
                writer.close()
            except Exception:  # already broken
                pass
        if self._closing and not self._closer_scheduled:
            self._closer_scheduled = True
            self._loop.call_soon(self._close_some)

    # --- outgoing connections -------------------------------------------------------------------------------

    def _send_to_peer(self, dst: NodeId, message: Any) -> None:
        peer = self._peers.get(dst)
        if peer is None:
            peer = self._peers[dst] = _Peer(dst)
        frame, expect = codec.encode_outgoing(message, sender=self.node.node_id)
        if expect is not None:
            peer.expecting[message.correlation_id] = expect
        if peer.writer is not None:
            peer.writer.write(frame)
            return
        peer.queue.append(frame)
        if peer.connecting is None:
            peer.connecting = self._loop.create_task(self._connect(peer))

    async def _connect(self, peer: _Peer) -> None:
        address = self._lookup(peer.node)
        try:
            if address is None:
                raise ConnectionError(f"no address for node {peer.node!r}")
            reader, writer = await asyncio.open_connection(*address)
            try:  # every peer listens on an inter-node listener: prove we belong first
                nonce = await asyncio.wait_for(reader.readexactly(auth.NONCE_BYTES), auth.HANDSHAKE_TIMEOUT_S)
                writer.write(auth.answer(self.secret, nonce))
            except (asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
                writer.close()
                raise ConnectionError(f"{address[0]}:{address[1]} did not open the inter-node handshake ({e!r})")
        except (OSError, ConnectionError) as e:
            log.info("%s: cannot reach %r: %s", self.node.node_id, peer.node, e)
            peer.connecting = None
            peer.queue.clear()
            peer.expecting.clear()
            self._disconnected(peer.node)
            return
        peer.writer = writer
        peer.connecting = None
        for frame in peer.queue:
            writer.write(frame)
        peer.queue.clear()
        self._loop.create_task(self._read_responses(peer, reader, writer))

    async def _read_responses(self, peer: _Peer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
                if size < 0:  # no max: a peer's answer is as large as we asked (see "Peers")
                    raise codec.FrameError(f"response frame of {size} bytes")
                frame = await reader.readexactly(size)
                corr = int.from_bytes(frame[:4], "big", signed=True)
                expect = peer.expecting.pop(corr, None)
                if expect is None:
                    if codec.is_internal(frame):  # the peer answers us here: it has no address for us
                        sender, message = codec.decode_internal(frame)
                        self._deliver(peer.node if sender is None else sender, message)
                    continue  # an answer to a request we gave up on
                message = codec.decode_response(*expect, frame)
                self._deliver(peer.node, message)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except codec.FrameError as e:
            log.warning("%s: bad answer from %r: %s", self.node.node_id, peer.node, e)
        finally:
            if peer.writer is writer:
                peer.writer = None
                peer.expecting.clear()
                writer.close()
                self._disconnected(peer.node)

    def _disconnected(self, node: NodeId) -> None:
        self._deliver(node, Disconnected(node))


__all__ = ["CONTROLLER_ID", "NodeRuntime", "wall_clock_ms"]
