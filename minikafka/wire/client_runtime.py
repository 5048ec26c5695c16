"""The TCP runtime for the course's own clients: the producer, consumer and admin client
that the simulation drives, driven over real sockets instead.

Theory of operation
-------------------
``KafkaProducer(bootstrap_servers=cluster)`` with a simulated ``Cluster`` adds a sans-I/O
node (the ``Sender``, the consumer's ``ConsumerNetworkClient``, the admin client's node) to
the cluster's ``World`` and, from a blocking call (``get()``, ``poll()``, ``flush()``, an
admin call), runs that world until the call's condition holds. Given a ``"host:port"``
address, a list of them, or a ``launch()`` cluster, the client gets a ``WireCluster`` instead:
the same three things a client asks of a simulated cluster (``world``, ``add_client``,
``broker_ids``), where ``world`` is a ``ClientRuntime`` that does what ``World`` does with
real time and real sockets:

- **Inputs.** ``now`` is the wall clock in epoch milliseconds (record timestamps are), read
  here and handed to the node with each input, never read by it. A response frame is decoded
  (``client_codec``) into the dataclass the node reads in the simulation and handed to
  ``node.handle(now, broker_id, message)``; a due timer to ``node.timer(now, key)``.
- **Effects.** ``Send(broker_id, request)`` is framed at the version this broker and we both
  speak and written to one connection per broker, opened on first use. A connection starts
  with ApiVersions v0 (every broker since Kafka 0.10 answers it); requests wait for its answer.
  Addresses come from the bootstrap and then from every Metadata and FindCoordinator answer.
- **Blocking.** Nothing runs between the application's calls: ``run_until(done, timeout_ms)``
  is the one loop, a ``selectors`` loop (portable: select() on Windows) waiting for sockets or
  the next timer, as the simulated world's loop pops its queue. So heartbeats go out while the
  application is inside a client call (``poll``), as in kafka-python before its heartbeat thread:
  a consumer not polled for ``session_timeout_ms`` leaves its group.
- **Failures.** A connection refused, reset or closed with requests in flight tells the node
  ``Disconnected(broker_id)``, as the simulated network does for a dead process; the node's
  own timers (request timeouts, backoff) decide what happens next. A frame that cannot be
  decoded closes its connection the same way, with the reason logged.
- **Bootstrap.** ``WireCluster(...)`` asks the bootstrap addresses, in turn, for the cluster's
  brokers (one blocking Metadata exchange, ``connect_timeout_s`` each); if none answers, the
  error names every address and why it failed.

Never: put I/O, threads or a clock into the state machines (they are the simulation's, unchanged);
use a Unix-only call (``minikafka.platform`` holds those; this file needs none).
"""

from __future__ import annotations

import errno
import heapq
import itertools
import logging
import selectors
import socket
import struct
import time
from typing import Any, Callable, Hashable, Iterable

from minikafka import messages as m
from minikafka.errors import KafkaConnectionError, UnsupportedVersionError
from minikafka.node import CancelTimer, NodeId, Send, SetTimer, StateMachine
from minikafka.wire import client_codec as cc
from minikafka.wire import codec
from minikafka.wire.codec import FrameError
from minikafka.wire.network_receive import recv_exactly

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3.0  # per bootstrap address
CLOSE_TIMEOUT_S = 3.0  # a closing client waits at most this long for the answers it is owed
BOOTSTRAP_TIMEOUT_MS = 30_000  # kafka-python's bootstrap_timeout_ms
BOOTSTRAP_BACKOFF_S = 0.1  # between metadata answers that list no broker yet
_API_VERSIONS_CORR = -1  # the correlation id of a connection's opening ApiVersions (clients count from 0 up)
_IN_PROGRESS = {0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY, getattr(errno, "WSAEWOULDBLOCK", 10035)}
_MAX_FRAME = 100_000_000  # kafka-python's receive_message_max_bytes


class _Connection:
    """One TCP connection to one broker, and what is waiting on it."""

    def __init__(self, broker: int, address: tuple[str, int], client_id: str) -> None:
        self.broker = broker
        self.address = address
        self.sock = socket.socket(socket.AF_INET6 if ":" in address[0] else socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.connecting = True
        self.versions: dict[int, int] | None = None  # api key -> version, once ApiVersions answered
        self.out = bytearray(cc.encode_api_versions_request(_API_VERSIONS_CORR, client_id=client_id))
        self.inbuf = bytearray()
        self.queued: list[Any] = []  # requests waiting for the versions
        self.pending: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version)
        code = self.sock.connect_ex(address)
        if code not in _IN_PROGRESS:
            self.sock.close()
            raise OSError(code, errno.errorcode.get(code, str(code)))

    @property
    def waiting(self) -> bool:
        return bool(self.pending or self.queued)


class ClientRuntime:
    """What ``minikafka.sim.World`` is to a client node, over TCP (see the module doc)."""

    seed = 0  # the producer's default partitioner seeds from it (with its client id)

    def __init__(self, brokers: dict[int, tuple[str, int]], *, client_id: str = "minikafka") -> None:
        self.addresses: dict[int, tuple[str, int]] = dict(brokers)
        self.nodes: dict[NodeId, StateMachine] = {}
        self.client_id = client_id
        self._epoch_ms = int(time.time() * 1000)
        self._start = time.monotonic()
        self._selector = selectors.DefaultSelector()
        self._connections: dict[int, _Connection] = {}
        self._timers: list[tuple[int, int, NodeId, Hashable, int]] = []
        self._timer_gen: dict[tuple[NodeId, Hashable], int] = {}
        self._seq = itertools.count()
        self._inbox: list[tuple[NodeId, Any, Any]] = []  # (dst node, src, message) to hand over next
        self._looping = False  # inside run_until: a nested call (a callback's) must not loop again

    # --- time: wall clock, monotonic ----------------------------------------------------------------------

    @property
    def now(self) -> int:
        return self._epoch_ms + int((time.monotonic() - self._start) * 1000)

    # --- nodes --------------------------------------------------------------------------------------------

    def add(self, node_id: NodeId, factory: Callable[[], StateMachine]) -> StateMachine:
        if self.nodes:
            raise ValueError("a ClientRuntime drives one client node")
        node = self.nodes[node_id] = factory()
        self._apply(node_id, node.start(self.now))
        return node

    def alive(self, node_id: NodeId) -> bool:
        return node_id in self.nodes

    def crash(self, node_id: NodeId, **_: Any) -> None:
        """Stop the node (a client's close): its connections close, its timers are void.

        First the answers it is owed come in (at most ``CLOSE_TIMEOUT_S``), as kafka-python's
        close waits for its LeaveGroup's: a broker reads a client connection one request at a
        time, and a socket closed with requests still unread there is reset, which takes them
        with it (a consumer's LeaveGroup lost that way leaves its group Stable for a session)."""
        if node_id not in self.nodes:
            return
        self.run_until(lambda: not any(c.waiting or c.out for c in self._connections.values()),
                       int(CLOSE_TIMEOUT_S * 1000))
        self.nodes.pop(node_id, None)
        for conn in list(self._connections.values()):
            self._close(conn, None)
        self._timers.clear()

    def release(self, node_id: NodeId) -> None:
        """A client was closed (after its flush): close its connections."""
        self.crash(node_id)

    def call_node(self, node_id: NodeId, fn: Callable[[StateMachine], Any]) -> Any:
        """Run ``fn(node)`` now (the user's ``send``, ``commit``...), apply its effects, and
        return once what it sent is written to the sockets: a request on a connection still
        being opened waits for it (at most ``CONNECT_TIMEOUT_S``). In the simulation a sent
        message is on the network at once; here, without this, a producer with acks=0 (whose
        batches are done once sent) could be closed with its records still in our buffers."""
        node = self.nodes[node_id]
        node.now = self.now
        result = fn(node)
        self._apply(node_id, node._take())
        if not self._looping:
            deadline = self.now + int(CONNECT_TIMEOUT_S * 1000)
            self.run_until(lambda: not any(c.queued or c.out for c in self._connections.values()),
                           max(0, deadline - self.now))
        return result

    # --- the loop -----------------------------------------------------------------------------------------

    def run_until(self, done: Callable[[], bool], timeout_ms: int | None = None) -> bool:
        """Serve sockets and timers until ``done()``, for at most ``timeout_ms`` real ms."""
        if self._looping:  # a client call from inside a node's step (a callback): no nested loop
            return bool(done())
        self._looping = True
        try:
            return self._run_until(done, timeout_ms)
        finally:
            self._looping = False

    def _run_until(self, done: Callable[[], bool], timeout_ms: int | None) -> bool:
        deadline = None if timeout_ms is None else self.now + timeout_ms
        while not done():
            if self._inbox:
                self._deliver_inbox()
                continue
            now = self.now
            if self._timers and self._timers[0][0] <= now:
                self._fire(heapq.heappop(self._timers))
                continue
            if not self.nodes or (deadline is not None and now >= deadline):
                return bool(done())
            wake = min(t for t in (deadline, self._timers[0][0] if self._timers else None) if t is not None) \
                if (deadline is not None or self._timers) else now + 1000
            self._select(max(0, wake - now) / 1000)
        return True

    def advance(self, ms: int) -> None:
        self.run_until(lambda: False, ms)

    def _fire(self, entry: tuple) -> None:
        _, _, node_id, key, gen = entry
        node = self.nodes.get(node_id)
        if node is not None and self._timer_gen.get((node_id, key)) == gen:
            self._apply(node_id, node.timer(self.now, key))

    def _deliver_inbox(self) -> None:
        inbox, self._inbox = self._inbox, []
        for dst, src, message in inbox:
            node = self.nodes.get(dst)
            if node is not None:
                self._apply(dst, node.handle(self.now, src, message))

    def _apply(self, node_id: NodeId, effects: list) -> None:
        for effect in effects:
            if isinstance(effect, Send):
                self._send(node_id, effect.dst, effect.message)
            elif isinstance(effect, SetTimer):
                gen = self._timer_gen.get((node_id, effect.key), 0) + 1
                self._timer_gen[(node_id, effect.key)] = gen
                heapq.heappush(self._timers, (self.now + effect.delay_ms, next(self._seq), node_id, effect.key, gen))
            elif isinstance(effect, CancelTimer):
                self._timer_gen[(node_id, effect.key)] = self._timer_gen.get((node_id, effect.key), 0) + 1

    # --- sockets ------------------------------------------------------------------------------------------

    def _send(self, node_id: NodeId, broker: Any, message: Any) -> None:
        cc.api_key_of(message)  # a request the runtime cannot carry: say so now, to the caller
        conn = self._connections.get(broker)
        if conn is None:
            address = self.addresses.get(broker)
            if address is None:
                log.info("no address known for broker %r", broker)
                self._inbox.append((node_id, broker, m.Disconnected(broker)))
                return
            try:
                conn = _Connection(broker, address, self.client_id)
            except OSError as e:
                log.info("connection to broker %r at %s:%d failed: %s", broker, *address, e)
                self._inbox.append((node_id, broker, m.Disconnected(broker)))
                return
            self._connections[broker] = conn
            self._selector.register(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)
        if conn.versions is None:
            conn.queued.append(message)
        else:
            self._write_request(conn, message)

    def _write_request(self, conn: _Connection, message: Any) -> None:
        key = cc.api_key_of(message)
        version = conn.versions.get(key)
        if version is None:
            raise UnsupportedVersionError(
                f"broker {conn.broker} at {conn.address[0]}:{conn.address[1]} serves no version of "
                f"{codec.api_name(key)} that minikafka's clients speak ({codec.SUPPORTED[key][0]}-{codec.SUPPORTED[key][1]})")
        conn.out += cc.encode_client_request(message, version, client_id=self.client_id)
        if cc.expects_response(message):
            conn.pending[message.correlation_id] = (key, version)
        self._flush(conn)

    def _flush(self, conn: _Connection) -> None:
        if conn.connecting or not conn.out:
            return
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as e:
            self._close(conn, f"send failed: {e}")
            return
        del conn.out[:sent]
        self._watch(conn)

    def _watch(self, conn: _Connection) -> None:
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.connecting or conn.out else 0)
        self._selector.modify(conn.sock, events, conn)

    def _select(self, timeout_s: float) -> None:
        if not self._connections:
            time.sleep(timeout_s)  # only timers are due: nothing else can happen meanwhile
            return
        for key, events in self._selector.select(timeout_s):
            conn = key.data
            if self._connections.get(conn.broker) is not conn:
                continue  # closed by an earlier event of this round
            if conn.connecting and events & selectors.EVENT_WRITE:
                code = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code:
                    self._close(conn, f"connect failed: {errno.errorcode.get(code, code)} ({code})")
                    continue
                conn.connecting = False
            if events & selectors.EVENT_WRITE:
                self._flush(conn)
            if events & selectors.EVENT_READ and self._connections.get(conn.broker) is conn:
                self._read(conn)

    def _read(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._close(conn, f"receive failed: {e}")
            return
        if not data:
            self._close(conn, "the broker closed the connection")
            return
        conn.inbuf += data
        while len(conn.inbuf) >= 4:
            (size,) = struct.unpack_from(">i", conn.inbuf, 0)
            if not 4 <= size <= _MAX_FRAME:
                self._close(conn, f"a response frame of {size} bytes")
                return
            if len(conn.inbuf) < 4 + size:
                return
            frame = bytes(conn.inbuf[4:4 + size])
            del conn.inbuf[:4 + size]
            try:
                self._on_frame(conn, frame)
            except FrameError as e:
                self._close(conn, str(e))
                return

    def _on_frame(self, conn: _Connection, frame: bytes) -> None:
        if conn.versions is None:
            corr, ranges = cc.decode_api_versions(frame)
            if corr != _API_VERSIONS_CORR:
                raise FrameError(f"expected the ApiVersions answer first, got correlation id {corr}")
            conn.versions = cc.negotiate(ranges)
            queued, conn.queued = conn.queued, []
            for message in queued:
                self._write_request(conn, message)
            return
        corr = cc.correlation_id_of(frame)
        expected = conn.pending.pop(corr, None)
        if expected is None:
            raise FrameError(f"a response with correlation id {corr}, which no request of ours has")
        answer = cc.decode_client_response(*expected, frame)
        for broker, address in answer.brokers.items():
            self.addresses[broker] = address
        for node_id, node in list(self.nodes.items()):
            self._apply(node_id, node.handle(self.now, conn.broker, answer.message))

    def _close(self, conn: _Connection, reason: str | None) -> None:
        if self._connections.get(conn.broker) is conn:
            del self._connections[conn.broker]
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        if reason is not None:
            log.info("connection to broker %r at %s:%d closed: %s", conn.broker, *conn.address, reason)
            if conn.waiting or conn.connecting:
                for node_id in self.nodes:
                    self._inbox.append((node_id, conn.broker, m.Disconnected(conn.broker)))

    def close(self) -> None:
        for node_id in list(self.nodes):
            self.crash(node_id)
        self._selector.close()


# --- the bootstrap: one blocking exchange, before any node runs -------------------------------------------


def _exchange(sock: socket.socket, frame: bytes) -> bytes:
    sock.sendall(frame)
    head = recv_exactly(sock, 4)
    (size,) = struct.unpack(">i", head)
    if not 4 <= size <= _MAX_FRAME:
        raise FrameError(f"a response frame of {size} bytes")
    return recv_exactly(sock, size)


def fetch_metadata(addresses: Iterable[tuple[str, int]], topics: tuple[str, ...] | None = (), *,
                   client_id: str = "minikafka", timeout_s: float = CONNECT_TIMEOUT_S
                   ) -> tuple[m.MetadataResponse, dict[int, tuple[str, int]]]:
    """Ask the addresses in turn for the cluster's metadata (``topics``: () none, None all);
    the first answer and the brokers' addresses. ``KafkaConnectionError`` naming every address
    and why, if none answers."""
    failures = []
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=timeout_s) as sock:
                _, ranges = cc.decode_api_versions(
                    _exchange(sock, cc.encode_api_versions_request(_API_VERSIONS_CORR, client_id=client_id)))
                version = cc.negotiate(ranges).get(codec.METADATA)
                if version is None:
                    failures.append(f"{host}:{port} (serves no Metadata version we speak)")
                    continue
                request = m.MetadataRequest(0, topics, False)
                answer = cc.decode_client_response(
                    codec.METADATA, version, _exchange(sock, cc.encode_client_request(request, version,
                                                                                      client_id=client_id)))
                return answer.message, dict(answer.brokers)
        except TimeoutError:
            failures.append(f"{host}:{port} (no answer within {timeout_s:g} s)")
        except FrameError as e:
            failures.append(f"{host}:{port} (not a Kafka broker's answer: {e})")
        except OSError as e:
            failures.append(f"{host}:{port} ({e.strerror or type(e).__name__})")
    raise KafkaConnectionError("no broker reachable at bootstrap_servers: " + ", ".join(failures))


def unreachable(addresses: Iterable[tuple[str, int]], timeout_s: float = CONNECT_TIMEOUT_S) -> list[str]:
    """``[]`` as soon as one address accepts a TCP connection; else each address with why it failed.
    (The CLI tools and the truck feed check this before handing an address to kafka-python,
    which says only "Unable to bootstrap".)"""
    failures = []
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return []
        except TimeoutError:
            failures.append(f"{host}:{port} (no answer within {timeout_s:g} s)")
        except OSError as exc:
            failures.append(f"{host}:{port} ({exc.strerror or type(exc).__name__})")
    return failures


class WireCluster:
    """What a client asks of a cluster (``world``, ``add_client``, ``broker_ids``,
    ``client_rules``, ``topics``), for a real Kafka cluster at ``addresses``."""

    _ids = itertools.count(1)
    # A producer here asks the brokers to create a topic they do not know, as kafka-python's and
    # Java's do (allow_auto_create_topics, default on; the brokers' auto.create.topics.enable
    # decides). The simulated world's clients never ask: its topics are the lecture's own.
    auto_create_topics = True

    def __init__(self, addresses: list[tuple[str, int]], *, client: str = "client",
                 bootstrap_timeout_ms: int = BOOTSTRAP_TIMEOUT_MS) -> None:
        self.addresses = list(addresses)
        self.client = client
        self._node_id = f"{client}-{next(self._ids)}"
        # A broker that has just started answers before it has registered with its controller:
        # its metadata lists no broker yet. Ask again (kafka-python's bootstrap_timeout_ms);
        # an address that refuses the connection fails at once, named.
        deadline = time.monotonic() + bootstrap_timeout_ms / 1000
        while True:
            metadata, brokers = fetch_metadata(self.addresses, client_id=self._node_id)
            if brokers:
                break
            if time.monotonic() >= deadline:
                raise KafkaConnectionError(f"the broker at bootstrap_servers={self.bootstrap_servers!r} listed no "
                                           f"brokers in its metadata for {bootstrap_timeout_ms} ms (still starting?)")
            time.sleep(BOOTSTRAP_BACKOFF_S)
        self.world = ClientRuntime(brokers, client_id=self._node_id)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.addresses)

    @property
    def broker_ids(self) -> list[int]:
        return sorted(self.world.addresses)

    def add_client(self, prefix: str, factory: Callable[[NodeId], StateMachine]) -> NodeId:
        node_id = self._node_id
        self.world.add(node_id, lambda: factory(node_id))
        return node_id

    def client_rules(self, client_id: str) -> Any:
        from minikafka.rules import REFERENCE  # Kafka's rules: a student's run in their own processes
        return REFERENCE

    def topics(self) -> list[str]:
        known = [(h, p) for h, p in self.world.addresses.values()] + self.addresses
        metadata, _ = fetch_metadata(known, None, client_id=self._node_id)
        return sorted(t.name for t in metadata.topics if t.error == m.NO_ERROR)

    def __repr__(self) -> str:
        return f"WireCluster(bootstrap_servers={self.bootstrap_servers!r})"


__all__ = ["CONNECT_TIMEOUT_S", "ClientRuntime", "WireCluster", "fetch_metadata", "unreachable"]
