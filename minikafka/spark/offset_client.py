"""OffsetClient: the driver's Metadata and ListOffsets requests on plain sockets.

Theory of operation
-------------------
Each streaming query runs its stream reader in a Python process of its own, started for the
query. Planning a micro-batch asks the brokers three things (the partitions, their earliest
and latest offsets: ``offset_reader``), which kafka-python answered at the price of importing
it: 0.15-0.3 s of every query's start on this machine, about a fifth of an AvailableNow drain
of a million records (issue 16). This client asks the same questions on blocking TCP
sockets, with the two requests written out here (Metadata v4, ListOffsets v2: versions Kafka
4 still serves and minikafka's brokers serve), so the stream reader imports no Kafka client.

It is used only where kafka-python would add nothing: plain-TCP listeners and no consumer
settings but the ones it honours (``PLAIN_SETTINGS``). SSL, SASL and every other setting go
through kafka-python as before (``offset_reader``).

- Metadata is asked of any broker it knows (the bootstrap servers first), one after another
  while they fail; the answer names every topic (Metadata's null topic list) and each
  partition's leader.
- ListOffsets goes to each partition's leader, all leaders' requests written before any
  answer is read. An answer naming an error a leader change explains (not leader, unknown
  partition, leader not available, fenced epoch, ...) or a connection that fails makes it
  ask Metadata again and retry after ``retry_backoff_ms``, until its deadline
  (``LookupTimeout``); any other error is a ``KafkaSourceError`` naming it.
- Every socket wait is bounded by the request timeout and the caller's deadline, so no
  lookup waits for ever on a broker that accepted the connection and went silent.

It never joins a group, commits, or creates topics (``allow_auto_topic_creation`` false).
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field

METADATA_KEY, METADATA_VERSION = 3, 4
LIST_OFFSETS_KEY, LIST_OFFSETS_VERSION = 2, 2
DESCRIBE_CONFIGS_KEY, DESCRIBE_CONFIGS_VERSION = 32, 1
TOPIC_RESOURCE = 2  # DescribeConfigs' resource type for a topic
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1
# The kafka.* settings (as kafka-python keywords) this client honours; any other goes to kafka-python.
PLAIN_SETTINGS = frozenset({"client_id", "isolation_level", "request_timeout_ms", "retry_backoff_ms",
                            "security_protocol"})
# Errors a leader change or a topic being created explains: ask Metadata again and retry.
RETRIABLE = {3: "UNKNOWN_TOPIC_OR_PARTITION", 5: "LEADER_NOT_AVAILABLE", 6: "NOT_LEADER_OR_FOLLOWER",
             7: "REQUEST_TIMED_OUT", 13: "NETWORK_EXCEPTION", 14: "COORDINATOR_LOAD_IN_PROGRESS",
             56: "KAFKA_STORAGE_ERROR", 74: "FENCED_LEADER_EPOCH", 75: "UNKNOWN_LEADER_EPOCH",
             78: "OFFSET_NOT_AVAILABLE"}
# Names for error messages (minikafka.messages.ERROR_NAMES has them all, but importing it costs
# ~0.1 s, the kind of start-up cost this module exists to avoid).
_NAMES = {**RETRIABLE, 29: "TOPIC_AUTHORIZATION_FAILED", 35: "UNSUPPORTED_VERSION",
          42: "INVALID_REQUEST", 43: "UNSUPPORTED_FOR_MESSAGE_FORMAT"}
_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id (then the client id)
MAX_FRAME = 100 << 20
BOOTSTRAP_TIMEOUT_S = 10.0  # kafka-python's bootstrap_timeout_ms, as the source set it


class LookupTimeout(Exception):
    """The deadline passed before every answer came (the caller decides what that means)."""


class NoBrokerAnswered(OSError):
    """No bootstrap server accepted a connection within ``BOOTSTRAP_TIMEOUT_S``."""


class _ConnectFailed(OSError):
    """A connection could not be opened (refused, unreachable, a name that does not resolve)."""


def plain_settings(consumer_config: dict) -> bool:
    """Whether this client can do the lookups ``consumer_config`` asks for (else kafka-python)."""
    return (set(consumer_config) <= PLAIN_SETTINGS
            and consumer_config.get("security_protocol", "PLAINTEXT") == "PLAINTEXT"
            and consumer_config.get("isolation_level", "read_uncommitted") in ("read_uncommitted", "read_committed"))


@dataclass
class ClusterView:
    """One Metadata answer: the brokers' addresses, and each topic's partitions with their leaders."""

    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)
    topics: dict[str, dict[int, int]] = field(default_factory=dict)  # topic -> partition -> leader (-1: none)


class _Reader:
    """Reads a response body field by field (Kafka's non-flexible encodings)."""

    def __init__(self, buf: bytes, pos: int = 0) -> None:
        self.buf, self.pos = buf, pos

    def _take(self, s: struct.Struct) -> int:
        (value,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return value

    def i8(self) -> int:
        return self._take(_I8)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        text = self.buf[self.pos:self.pos + n].decode()
        self.pos += n
        return text

    def count(self) -> int:
        return max(self.i32(), 0)  # a null array reads as empty


def _string(text: str | None) -> bytes:
    if text is None:
        return _I16.pack(-1)
    data = text.encode()
    return _I16.pack(len(data)) + data


class _Connection:
    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.address = f"{host}:{port}"
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def receive(self, correlation_id: int, timeout_s: float) -> _Reader:
        self.sock.settimeout(max(timeout_s, 0.001))
        (size,) = _I32.unpack(self._read(4))
        if not 4 <= size <= MAX_FRAME:
            raise OSError(f"a response frame of {size} bytes from {self.address}")
        body = self._read(size)
        (got,) = _I32.unpack_from(body, 0)
        if got != correlation_id:
            raise OSError(f"{self.address} answered correlation id {got}, expected {correlation_id}")
        return _Reader(body, 4)

    def _read(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = self.sock.recv(n - got)
            if not chunk:
                raise OSError(f"{self.address} closed the connection")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()


class OffsetClient:
    """Metadata and ListOffsets for the source's offset reader (see the module docstring)."""

    def __init__(self, bootstrap_servers: str, *, client_id: str = "minikafka-spark",
                 request_timeout_ms: int = 30_000, retry_backoff_ms: int = 20,
                 isolation_level: str = "read_uncommitted") -> None:
        self.bootstrap = [_address(s) for s in bootstrap_servers.split(",") if s.strip()]
        self.client_id = client_id
        self.request_timeout_s = request_timeout_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.isolation_level = 1 if isolation_level == "read_committed" else 0
        self.view: ClusterView | None = None
        self._connections: dict[tuple[str, int], _Connection] = {}
        self._correlation = 0
        self._next = 0  # which known broker Metadata asks first (turns after a failure)

    # --- Metadata ------------------------------------------------------------------------------------

    def metadata(self, deadline: float) -> ClusterView:
        """Every topic and partition, from a fresh Metadata request; ``LookupTimeout`` at the
        deadline, ``NoBrokerAnswered`` if no bootstrap server (and no broker met before)
        accepts a connection."""
        body = _I32.pack(-1) + _I8.pack(0)  # every topic; allow_auto_topic_creation false
        refused_since = None
        while True:
            candidates = self._candidates()
            refused = 0
            for i in range(len(candidates)):
                address = candidates[(self._next + i) % len(candidates)]
                try:
                    view = _parse_metadata(self._call(address, METADATA_KEY, METADATA_VERSION, body, deadline))
                except _ConnectFailed:
                    refused += 1
                    continue
                except (OSError, struct.error, UnicodeDecodeError):
                    self._drop(address)  # (an answer that does not parse: that broker is no use)
                    continue
                self._next = (self._next + i) % len(candidates)
                self.view = view
                return view
            self._next += 1
            if refused == len(candidates) and self.view is None:
                # As kafka-python's bootstrap: a cluster still starting gets a few seconds.
                refused_since = refused_since or time.monotonic()
                if time.monotonic() - refused_since >= BOOTSTRAP_TIMEOUT_S:
                    raise NoBrokerAnswered(", ".join(f"{h}:{p}" for h, p in candidates))
            self._back_off(deadline)

    def _candidates(self) -> list[tuple[str, int]]:
        known = list(self.view.brokers.values()) if self.view is not None else []
        return self.bootstrap + [a for a in known if a not in self.bootstrap]

    # --- ListOffsets -----------------------------------------------------------------------------------

    def list_offsets(self, tps: list[tuple[str, int]], timestamp: int, deadline: float) -> dict[tuple[str, int], int]:
        """The offset ``timestamp`` names (-2 earliest, -1 latest) of every partition, each
        asked of its leader; ``LookupTimeout`` if the deadline passes first."""
        from minikafka.spark.offset_reader import KafkaSourceError

        found: dict[tuple[str, int], int] = {}
        if self.view is None or any(self._leader(tp) is None for tp in tps):
            self.metadata(deadline)
        while True:
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for tp in tps:
                if tp not in found:
                    leader = self._leader(tp)
                    if leader is not None:
                        by_leader.setdefault(leader, []).append(tp)
            sent = []
            for leader, asked in sorted(by_leader.items()):
                address = self.view.brokers[leader]
                try:
                    sent.append((address, self._send(address, LIST_OFFSETS_KEY, LIST_OFFSETS_VERSION,
                                                     self._list_offsets_body(asked, timestamp), deadline)))
                except OSError:
                    self._drop(address)
            for n, (address, corr) in enumerate(sent):
                try:
                    reader = self._receive(address, corr, deadline)
                except OSError:
                    continue  # (the connection was dropped)
                except LookupTimeout:
                    for other, _ in sent[n:]:  # their answers would arrive on a reused connection
                        self._drop(other)
                    raise
                try:
                    answers = _parse_list_offsets(reader)
                except (struct.error, UnicodeDecodeError):
                    self._drop(address)
                    continue
                for tp, error, offset in answers:
                    if error == 0:
                        found[tp] = offset
                    elif error not in RETRIABLE:
                        raise KafkaSourceError(
                            f"The broker at {address[0]}:{address[1]} refused the offsets of "
                            f"{tp[0]}-{tp[1]}: {_NAMES.get(error, 'error')} ({error}).")
            if all(tp in found for tp in tps):
                return {tp: found[tp] for tp in tps}
            self._back_off(deadline)  # a leader moved, died or is not known yet: ask again
            self.metadata(deadline)

    # --- DescribeConfigs -------------------------------------------------------------------------------

    def topic_config(self, topics: list[str], name: str, deadline: float) -> dict[str, str | None]:
        """The value of the topic setting ``name`` (``cleanup.policy``) for each of ``topics``
        a broker describes, asked of any broker (topic configs live in the metadata log, which
        every broker has); a topic the broker names an error for is left out."""
        if self.view is None:
            self.metadata(deadline)
        body = _I32.pack(len(topics)) + b"".join(
            _I8.pack(TOPIC_RESOURCE) + _string(t) + _I32.pack(1) + _string(name) for t in topics) + _I8.pack(0)
        while True:
            for address in self._candidates():
                try:
                    reader = self._call(address, DESCRIBE_CONFIGS_KEY, DESCRIBE_CONFIGS_VERSION, body, deadline)
                    return _parse_describe_configs(reader, name)
                except (OSError, struct.error, UnicodeDecodeError):
                    self._drop(address)
            self._back_off(deadline)

    def _leader(self, tp: tuple[str, int]) -> int | None:
        leader = self.view.topics.get(tp[0], {}).get(tp[1], -1)
        return leader if leader >= 0 and leader in self.view.brokers else None

    def _list_offsets_body(self, tps: list[tuple[str, int]], timestamp: int) -> bytes:
        topics: dict[str, list[int]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append(p)
        parts = [_I32.pack(-1), _I8.pack(self.isolation_level), _I32.pack(len(topics))]
        for t, ps in sorted(topics.items()):
            parts += [_string(t), _I32.pack(len(ps))]
            parts += [_I32.pack(p) + _I64.pack(timestamp) for p in sorted(ps)]
        return b"".join(parts)

    # --- the connections -------------------------------------------------------------------------------

    def _call(self, address: tuple[str, int], key: int, version: int, body: bytes, deadline: float) -> _Reader:
        return self._receive(address, self._send(address, key, version, body, deadline), deadline)

    def _send(self, address: tuple[str, int], key: int, version: int, body: bytes, deadline: float) -> int:
        conn = self._connections.get(address)
        try:
            if conn is None:
                try:
                    conn = _Connection(*address, self._timeout(deadline))
                except OSError as e:
                    raise _ConnectFailed(str(e)) from None
                self._connections[address] = conn
            self._correlation = (self._correlation + 1) & 0x7FFFFFFF
            request = _HEADER.pack(key, version, self._correlation) + _string(self.client_id) + body
            conn.send(_I32.pack(len(request)) + request)
        except OSError:
            self._drop(address)
            raise
        return self._correlation

    def _receive(self, address: tuple[str, int], corr: int, deadline: float) -> _Reader:
        conn = self._connections.get(address)
        if conn is None:
            raise OSError(f"no connection to {address[0]}:{address[1]}")
        try:
            return conn.receive(corr, self._timeout(deadline))
        except (OSError, struct.error, UnicodeDecodeError) as e:
            self._drop(address)
            raise OSError(str(e)) from None

    def _timeout(self, deadline: float) -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LookupTimeout()
        return min(self.request_timeout_s, remaining)

    def _back_off(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LookupTimeout()
        time.sleep(min(self.retry_backoff_s, remaining))

    def _drop(self, address: tuple[str, int]) -> None:
        conn = self._connections.pop(address, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for address in list(self._connections):
            self._drop(address)


def _address(server: str) -> tuple[str, int]:
    host, _, port = server.strip().rpartition(":")
    if not host or not port.isdigit():
        from minikafka.spark.offset_reader import KafkaSourceError

        raise KafkaSourceError(f"kafka.bootstrap.servers names {server.strip()!r}, which is not host:port.")
    return host.strip("[]"), int(port)


def _parse_metadata(r: _Reader) -> ClusterView:
    view = ClusterView()
    r.i32()  # throttle_time_ms
    for _ in range(r.count()):
        node, host, port = r.i32(), r.string(), r.i32()
        r.string()  # rack
        view.brokers[node] = (host, port)
    r.string()  # cluster_id
    r.i32()  # controller_id
    for _ in range(r.count()):
        error, name = r.i16(), r.string()
        r.i8()  # is_internal
        partitions = {}
        for _ in range(r.count()):
            r.i16()  # the partition's error (LEADER_NOT_AVAILABLE: leader -1 says it)
            partition, leader = r.i32(), r.i32()
            for _ in range(2):  # replicas, isr
                n = r.count()
                r.pos += 4 * n
            partitions[partition] = leader
        if error == 0:  # a topic being created or deleted is left out, as kafka-python does
            view.topics[name] = partitions
    return view


def _parse_list_offsets(r: _Reader) -> list[tuple[tuple[str, int], int, int]]:
    """(topic-partition, error, offset) for each partition of a ListOffsets v2 answer."""
    out = []
    r.i32()  # throttle_time_ms
    for _ in range(r.count()):
        topic = r.string()
        for _ in range(r.count()):
            partition, error = r.i32(), r.i16()
            r.i64()  # timestamp
            out.append(((topic, partition), error, r.i64()))
    return out


def _parse_describe_configs(r: _Reader, wanted: str) -> dict[str, str | None]:
    """{topic: value of ``wanted``} from a DescribeConfigs v1 answer (topics in error left out)."""
    out: dict[str, str | None] = {}
    r.i32()  # throttle_time_ms
    for _ in range(r.count()):
        error = r.i16()
        r.string()  # error_message
        r.i8()  # resource_type
        topic = r.string()
        for _ in range(r.count()):
            key, value = r.string(), r.string()
            r.i8(), r.i8(), r.i8()  # read_only, config_source, is_sensitive
            for _ in range(r.count()):  # synonyms
                r.string(), r.string(), r.i8()
            if error == 0 and key == wanted:
                out[topic] = value
    return out
