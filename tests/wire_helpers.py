"""Helpers for tests/test_wire*.py: raw Kafka connections, record batches, polling, processes.

A ``RawConnection`` speaks the Kafka protocol with kafka-python's own framing
(``KafkaProtocol``): it is how a test sends what no well-behaved client would (a corrupt
batch, a name the client would refuse, an acks=0 Produce followed by a Metadata on the same
connection) and how it tells a connection the broker closed from one it still serves.
"""

from __future__ import annotations

import errno
import itertools
import os
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from minikafka.checker import History

CLIENT_ID = "minikafka-wire-test"


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned); fail saying ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


# --- record batches and frames ---------------------------------------------------------------------


def batch(*values: bytes, producer_id: int = -1, base_sequence: int = -1) -> bytes:
    """A record batch v2 as kafka-python's producer writes it (uncompressed)."""
    builder = DefaultRecordBatchBuilder(2, 0, False, producer_id, 0, base_sequence, 1 << 24)
    for i, value in enumerate(values):
        builder.append(i, int(time.time() * 1000), None, value, [])
    return bytes(builder.build())


def produce_request(topic: str, partition: int, records: bytes, acks: int = 1) -> ProduceRequest:
    Topic = ProduceRequest.TopicProduceData
    return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=10_000, topic_data=[
        Topic(name=topic, partition_data=[Topic.PartitionProduceData(index=partition, records=records)])])


def metadata_request(*topics: str) -> MetadataRequest:
    return MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                           allow_auto_topic_creation=False)


def api_versions_request() -> ApiVersionsRequest:
    return ApiVersionsRequest(client_software_name="wire-test", client_software_version="1")


def frame(request: Any, version: int, correlation_id: int = 1, client_id: str = CLIENT_ID) -> bytes:
    """A whole request frame (length prefix included), as kafka-python frames it."""
    parser = KafkaProtocol(client_id=client_id)
    request.API_VERSION = version
    parser.send_request(request, correlation_id=correlation_id)
    return bytes(parser.send_bytes())


def header_only_frame(api_key: int, version: int, correlation_id: int = 1, body: bytes = b"") -> bytes:
    """A request header v1 (client id "raw") and ``body``, framed."""
    payload = struct.pack(">hhih", api_key, version, correlation_id, 3) + b"raw" + body
    return struct.pack(">i", len(payload)) + payload


# --- a raw connection --------------------------------------------------------------------------------


class ConnectionClosed(Exception):
    pass


class RawConnection:
    """One TCP connection to a broker, requests framed and answers parsed by kafka-python."""

    def __init__(self, address: tuple[str, int], timeout_s: float = 10.0, source_port: int = 0) -> None:
        self.sock = socket.create_connection(address, timeout=timeout_s, source_address=("127.0.0.1", source_port))
        self.parser = KafkaProtocol(client_id=CLIENT_ID)
        self._corr = itertools.count(1)
        self._answers: list[tuple[int, Any]] = []

    def send(self, request: Any, version: int) -> int:
        """Send a request at ``version``; returns its correlation id."""
        corr = next(self._corr)
        request.API_VERSION = version
        self.parser.send_request(request, correlation_id=corr)
        self.sock.sendall(bytes(self.parser.send_bytes()))
        return corr

    def receive(self) -> tuple[int, Any]:
        """The next answer on this connection: (correlation id, response)."""
        while not self._answers:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionClosed("the broker closed the connection")
            self._answers.extend(self.parser.receive_bytes(data))
        return self._answers.pop(0)

    def request(self, request: Any, version: int) -> Any:
        corr = self.send(request, version)
        got, response = self.receive()
        assert got == corr, f"answer {got} came before the answer to {corr}"
        return response

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def closed_by_broker(self, timeout_s: float = 10.0) -> bool:
        """True once the broker has closed the connection (EOF or reset), False if it is
        still open after ``timeout_s`` (nothing may arrive meanwhile)."""
        self.sock.settimeout(timeout_s)
        try:
            data = self.sock.recv(1 << 16)
        except socket.timeout:
            return False
        except ConnectionError:
            return True
        if data:
            raise AssertionError(f"expected the connection to close, got {len(data)} bytes")
        return True

    def close(self) -> None:
        self.sock.close()

    def reset(self) -> None:
        """Close with a reset (RST), as a killed client's kernel does: no TIME_WAIT is left,
        so the same source port can connect again at once."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- clients ---------------------------------------------------------------------------------------


def read_partitions(bootstrap: str, topic: str, partitions: Iterable[int],
                    timeout_s: float = 30.0) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of the given partitions, log start to end offset (as it is now), with a
    group-less consumer: {partition: [(offset, value), ...]}."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out: dict[int, list[tuple[int, bytes]]] = {tp.partition: [] for tp in tps}
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise AssertionError(f"read {sum(map(len, out.values()))} records of {topic}; ends {ends}")
            for tp, records in consumer.poll(timeout_ms=200).items():
                out[tp.partition].extend((r.offset, r.value) for r in records)
        return out
    finally:
        consumer.close()


def known_everywhere(cluster, topic: str, partitions: int) -> bool:
    """Whether every live broker's Metadata answers ``topic`` with ``partitions`` partitions, each
    with a leader: the metadata log has reached them all. A client bootstraps from any broker, and
    kafka-python's group leader assigns nothing of a topic its metadata lacks (and refreshes that
    metadata only every ``metadata_max_age_ms``), so a group test starts from this state."""
    for b in cluster.broker_ids:
        if not cluster.alive(b):
            continue
        try:
            with RawConnection((cluster.host, cluster.ports[b])) as conn:
                answer = conn.request(metadata_request(topic), 8)
        except OSError:
            return False
        described = [t for t in answer.topics if t.name == topic]
        if not described or described[0].error_code != 0:
            return False
        parts = described[0].partitions
        if len(parts) != partitions or any(p.error_code != 0 or p.leader_id < 0 for p in parts):
            return False
    return True


def leader_seen_by(cluster, broker_id: int, topic: str, partition: int = 0) -> int | None:
    """The partition's leader in broker ``broker_id``'s own Metadata answer (-1: none, or the
    partition not listed); None if the broker does not answer (dead: killed or halted)."""
    try:
        with RawConnection((cluster.host, cluster.ports[broker_id])) as conn:
            answer = conn.request(metadata_request(topic), 8)
    except OSError:
        return None
    parts = [p for t in answer.topics if t.name == topic for p in t.partitions if p.partition_index == partition]
    return parts[0].leader_id if parts else -1


def halted_or_following(cluster, broker_id: int, topic: str, leaders: Iterable[int]) -> bool:
    """Whether a broker whose log directory failed has either halted (its metadata log, in
    the same directory, could not take the controller's next record) or still writes its
    metadata log and follows it (its own Metadata names one of ``leaders``). Which one depends
    on whether the last free bytes of its disk took that small record; both are Kafka's
    behaviour, and neither serves a view that no longer moves."""
    return not cluster.alive(broker_id) or leader_seen_by(cluster, broker_id, topic) in set(leaders)


def ready_to_join(consumer: KafkaConsumer, topic: str, partitions: int) -> KafkaConsumer:
    """``consumer`` (subscribed to ``topic``, not polled yet) once its *own* metadata holds
    ``topic`` with ``partitions`` partitions, so that the group its first ``poll()`` joins is
    assigned the topic at once. ``known_everywhere`` is the brokers' side of this; this is the
    client's.

    Without it, kafka-python 3.0.12 asks for a newly subscribed topic's metadata only
    ``retry_backoff_ms`` (100 ms) after its bootstrap Metadata request, while FindCoordinator and
    JoinGroup against a local broker (``group.initial.rebalance.delay.ms=0``) take a few ms: the
    consumer leads its group with no metadata for the topic and assigns nothing of it ("No
    partition metadata for topic", in every run), then rejoins when the metadata arrives. That
    second join is the one kafka-python can lose: it was asked for by the metadata change alone,
    its own assignment step clears that reason, so if the ``poll()`` that sent it times out
    before the SyncGroup answer is consumed, later polls see nothing to rejoin and never apply
    the assignment (no partitions, no heartbeats: "got 0 of 5 records in 30.0 s", seen under
    load). A first join keeps ``rejoin_needed`` set until its result is applied, so a timed-out
    one is only sent again. ``partitions_for_topic`` fetches the metadata at once."""
    wait_until(lambda: consumer.partitions_for_topic(topic) == set(range(partitions)), 20,
               f"{topic}'s {partitions} partitions in the consumer's metadata")
    return consumer


def poll_until(consumer: KafkaConsumer, count: int, timeout_s: float = 30.0) -> list:
    """Poll until ``count`` records came (all of them returned), or fail."""
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"got {len(got)} of {count} records in {timeout_s} s")
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(records)
    return got


def tolerant(ask: Callable[[], Any]) -> Any:
    """``ask()``, or None if the client failed (its broker may just have been killed): for
    ``wait_until`` while brokers come and go."""
    from kafka.errors import KafkaError

    try:
        return ask()
    except (KafkaError, OSError):
        return None


def leader_of(admin: Any, topic: str, partition: int = 0) -> int:
    """The partition's leader, or -1 (Kafka's "no leader") while the broker that answered does
    not list the partition yet: a topic just created reaches each broker's metadata a moment
    later, and a describe answered before that lists no partitions."""
    (described,) = admin.describe_topics([topic])
    return next((p["leader_id"] for p in described["partitions"] if p["partition_index"] == partition), -1)


def isr_of(admin: Any, topic: str, partition: int = 0) -> list[int]:
    (described,) = admin.describe_topics([topic])
    return sorted(next(p["isr_nodes"] for p in described["partitions"] if p["partition_index"] == partition))


# --- processes -------------------------------------------------------------------------------------


def children_of(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces or parentheses; split after the last ')'
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return sorted(out)


def running(pid: int) -> bool:
    """Is ``pid`` a live process (a zombie, dead but not yet reaped, counts as gone)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def out_text(cluster: Any, who: Any) -> str:
    return cluster.out_file(who).read_text(errors="replace")


def kill_all(pids: Iterable[int]) -> None:
    """Clean up after a failed process test (only the pids it started)."""
    for pid in pids:
        try:
            os.kill(pid, 9)
        except OSError:
            pass


class NumberedProducer(threading.Thread):
    """kafka-python, acks=all (and idempotent), sending "v-0", "v-1", ... as fast as it is
    allowed, every send and its outcome recorded in a checker ``History``."""

    def __init__(self, cluster, topic: str, history: History) -> None:
        super().__init__(daemon=True)
        self.producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=5)
        self.topic, self.history = topic, history
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        i = 0
        try:
            while not self.stopping.is_set():
                self.history.send(self.producer, self.topic, f"v-{i}".encode(), partition=0)
                i += 1
                time.sleep(0.001)
        except BaseException as e:  # reported by the test
            self.error = e

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=30)
        self.producer.flush(timeout=60)
        self.producer.close()
        assert self.error is None, self.error

    def acked_after(self, ms: int) -> int:
        return sum(1 for op in self.history.sends if op.status == "ok" and op.invoke_ms > ms)


def now_ms() -> int:
    return int(time.monotonic() * 1000)


def fill_up(path: Path) -> None:
    """Append zeros to the file ``path`` until its file system is full (ENOSPC), to the last
    byte: a disk on which nothing more can be written, not even a small metadata record."""
    for size in (64 * 1024, 4096, 512, 1):
        with open(path, "ab", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
