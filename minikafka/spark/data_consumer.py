"""One partition's offset range, fetched for a Spark task: Spark's ``KafkaDataConsumer``.

Theory of operation
-------------------
A task must read exactly the offsets ``[from, until)`` of one partition. kafka-python's
``KafkaConsumer`` keeps the jobs a client library is for: bootstrapping, the connection
settings the query's ``kafka.*`` options give (SSL, SASL, timeouts), API version
negotiation, metadata and leaders. But its ``poll()`` builds a Python object per record, so
the task sends its *own* Fetch requests (kafka-python's protocol classes, on the consumer's
connections: ``_manager.send``, the same call its fetcher makes; the version is pinned in
``pyproject.toml``) and hands the partition's records, still bytes, to ``arrow_records``.

Where the consumer talks to its brokers in plain TCP (``security.protocol`` PLAINTEXT, no
proxy: the course's clusters and most local Kafkas), the Fetch requests go on a connection of
the task's own to the leader (``FetchConnection``: a blocking socket, each response read
with ``recv_into`` into one buffer of the frame's size). kafka-python receives in 4 KiB
``recv`` calls on its network thread and copies each frame twice more; measured on one
partition, 8 MiB fetches came twice as fast this way (440-460 against 180-220 MB/s), and no
thread contends for the GIL with the decoding. The consumer still gives the leaders, the
negotiated Fetch version and the client id; under SSL, SASL or a proxy the requests go on
its own connections, which do those.

The loop, per response: read the partition's error; find where the next fetch starts from
the batch headers alone, and send that fetch at once, so the broker and the network work
while this process decodes; then decode into columns. Rules kept from the kafka-python
reader it replaces:

- Progress or a clear error: a leader change, a restarting broker or a lost connection is
  retried after a metadata refresh, but ``kafkaConsumer.pollTimeoutMs`` without a single
  new offset fails the task, naming the partition and the range.
- ``OFFSET_OUT_OF_RANGE``: records the query still needed were deleted: data loss (fails
  unless ``failOnDataLoss=false``, which skips to the log start).
- ``isolation.level=read_committed`` (``kafka.isolation.level``): the broker stops at the
  last stable offset and lists aborted transactions, whose records are dropped.
- A range whose end a broker gave as its log's end is checked against the batches fetched:
  one holding offsets on both sides of that end proves the answer wrong (a Kafka-compatible
  broker that answers ListOffsets "latest" with something else), and the task fails with
  the broker and the partition named: reading on would be silently short.
- Offsets missing between the batches fetched (or inside one) fail the task the same way,
  unless the topic is compacted (the planner asked its ``cleanup.policy``) or the query set
  ``failOnDataLoss=false``: only the cleaner leaves such holes.
"""

from __future__ import annotations

import logging
import socket
import struct
import time
import weakref
from typing import Iterator

from minikafka.spark.arrow_records import AbortedTransactions, FetchedRecords, decode_fetched
from minikafka.spark.offset_reader import KafkaSourceError

_PREFIX = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23
_RECORDS_COUNT_AT = 57
_HEADER_SIZE = 61
FETCH_MAX_VERSION = 11  # the last non-flexible Fetch: topics by name, what every broker here speaks
PARTITION_FETCH_BYTES = 8 << 20
_INT32 = struct.Struct(">i")  # a frame's size; a response header's correlation id

logger = logging.getLogger("minikafka.spark.source")


class FetchConnection:
    """A task's own plain-TCP connection to one broker, for Fetch requests only.

    Requests and responses are matched by correlation id, first in first out as Kafka
    answers them. Any failure (refused, reset, timed out, a frame that does not fit) closes
    the connection and raises ``OSError``; the caller refreshes metadata and opens another.
    """

    def __init__(self, host: str, port: int, *, timeout_s: float, client_id: str, max_frame: int) -> None:
        self.address = f"{host}:{port}"
        self.client_id = client_id
        self.max_frame = max_frame
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._next_id = 0
        self.in_flight: list[int] = []

    def send(self, request) -> int:
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        request.with_header(correlation_id=self._next_id, client_id=self.client_id)
        try:
            self.sock.sendall(request.encode(header=True, framed=True))
        except OSError:
            self.close()
            raise
        self.in_flight.append(self._next_id)
        return self._next_id

    def receive(self, correlation_id: int, response_class, version: int):
        """The response to request ``correlation_id``, after any older ones (read and dropped)."""
        try:
            while self.in_flight:
                expected = self.in_flight.pop(0)
                frame = self._frame()
                (got,) = _INT32.unpack_from(frame, 0)
                if got != expected:
                    raise OSError(f"{self.address} answered correlation id {got}, expected {expected}")
                if got == correlation_id:
                    try:
                        # header=False: kafka-python would copy the whole frame to read 4 bytes
                        return response_class.decode(memoryview(frame)[4:], version=version)
                    except Exception as e:  # noqa: BLE001 - a frame kafka-python cannot parse
                        raise OSError(f"an unreadable {response_class.__name__} from {self.address}: {e}") from None
            raise OSError(f"no request {correlation_id} is waiting for an answer from {self.address}")
        except OSError:
            self.close()
            raise

    def _frame(self) -> bytearray:
        head = self._read(4)
        (size,) = _INT32.unpack(head)
        if not 4 <= size <= self.max_frame:
            raise OSError(f"a response frame of {size} bytes from {self.address} "
                          f"(kafka.receive.message.max.bytes is {self.max_frame})")
        return self._read(size)

    def _read(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if not k:
                raise OSError(f"{self.address} closed the connection")
            got += k
        return buf

    def close(self) -> None:
        self.in_flight.clear()
        self.sock.close()


# A pooled consumer's own Fetch connections, by broker id; they go when the consumer goes.
_CONNECTIONS: "weakref.WeakKeyDictionary[object, dict[int, FetchConnection]]" = weakref.WeakKeyDictionary()


def own_connections(consumer) -> bool:
    """Whether Fetch requests may go on connections of our own: plain TCP, no proxy."""
    cfg = consumer.config
    return (cfg.get("security_protocol") == "PLAINTEXT" and not cfg.get("socks5_proxy")
            and not cfg.get("proxy_url"))


def close_connections(consumer) -> None:
    """Close the Fetch connections opened for ``consumer`` (it is being thrown away)."""
    for conn in _CONNECTIONS.pop(consumer, {}).values():
        conn.close()


def whole_batches(buf: bytes) -> Iterator[tuple[int, int, int]]:
    """``(base offset, last offset, record count)`` of each whole record batch in ``buf``,
    read from the batch headers alone (a fetch may end with part of a batch: it is left out)."""
    pos, size = 0, len(buf)
    while pos + _HEADER_SIZE <= size:
        base, length = _PREFIX.unpack_from(buf, pos)
        end = pos + 12 + length
        if end > size:
            break
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(buf, pos + _LAST_OFFSET_DELTA_AT)
        (count,) = _INT32.unpack_from(buf, pos + _RECORDS_COUNT_AT)
        yield base, base + delta, count
        pos = end


def batch_across(buf: bytes, offset: int) -> tuple[int, int] | None:
    """The first and last offset of a whole record batch in ``buf`` that holds both
    ``offset - 1`` and ``offset``, if there is one: then ``offset`` is not a log end."""
    return next(((base, last) for base, last, _ in whole_batches(buf) if base < offset <= last), None)


def next_fetch_offset(buf: bytes, position: int) -> int:
    """The offset after the last whole batch in ``buf`` (``position`` if there is none)."""
    for _, last, _ in whole_batches(buf):
        position = max(position, last + 1)
    return position


def first_hole(buf: bytes, position: int) -> tuple[int, int] | None:
    """The first offsets missing from ``position`` on in ``buf``, as ``(first, last)``: a
    batch starting after the offset the one before it ended at, or a batch holding fewer
    records than its offsets span. Only a compacted log has such holes (the cleaner removes
    records and keeps the offsets of the rest); a transaction's marker is a record with an
    offset of its own, and retention removes only whole segments from the log's start."""
    expected = position
    for base, last, count in whole_batches(buf):
        if last < expected:
            continue  # (a fetch starts with the whole batch that holds ``position``)
        if base > expected:
            return expected, base - 1
        if count != last - base + 1:
            return base, last
        expected = last + 1
    return None


class _Sent:
    """A Fetch sent on a ``FetchConnection``: where and how to read its answer."""

    __slots__ = ("conn", "correlation_id", "version", "error")

    def __init__(self, conn: FetchConnection | None, correlation_id: int, version: int,
                 error: OSError | None = None) -> None:
        self.conn, self.correlation_id, self.version, self.error = conn, correlation_id, version, error


class PartitionFetcher:
    """Fetches for one partition: on our own connections (``direct``) or, under SSL, SASL or a
    proxy, on the kafka-python consumer's."""

    def __init__(self, consumer, options, topic: str, partition: int) -> None:
        from kafka import TopicPartition

        self.consumer = consumer
        self.options = options
        self.tp = TopicPartition(topic, partition)
        cfg = options.consumer_config
        self.read_committed = cfg.get("isolation_level", "read_uncommitted") == "read_committed"
        self.check_crcs = cfg.get("check_crcs", True)
        self.max_wait_ms = cfg.get("fetch_max_wait_ms", 500)
        self.min_bytes = cfg.get("fetch_min_bytes", 1)
        self.max_bytes = cfg.get("fetch_max_bytes", 50 << 20)
        self.partition_bytes = max(PARTITION_FETCH_BYTES, cfg.get("max_partition_fetch_bytes", 0))
        self.request_timeout_ms = cfg.get("request_timeout_ms", 30_000)
        self.backoff_s = cfg.get("retry_backoff_ms", 20) / 1000
        self.direct = own_connections(consumer) and consumer._manager.broker_version_data is not None
        self._wait(consumer._cluster.add_topic(topic))

    def _wait(self, future):
        if isinstance(future, _Sent):
            from kafka.protocol.consumer import FetchResponse

            if future.error is not None:
                raise future.error
            return future.conn.receive(future.correlation_id, FetchResponse, future.version)
        c = self.consumer
        return c._net.run(c._manager.wait_for, future, self.max_wait_ms + self.request_timeout_ms)

    def send(self, offset: int):
        """A Fetch for ``offset`` to the partition's leader, or None if no leader is known yet."""
        from kafka.protocol.consumer import FetchRequest

        c = self.consumer
        leader = c._cluster.leader_for_partition(self.tp)
        if leader is None or leader < 0:
            return None
        epoch = c._cluster.leader_epoch_for_partition(self.tp)
        part = FetchRequest.FetchTopic.FetchPartition(
            partition=self.tp.partition, current_leader_epoch=-1 if epoch is None else epoch,
            fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=self.partition_bytes)
        request = FetchRequest(
            replica_id=-1, max_wait_ms=self.max_wait_ms, min_bytes=self.min_bytes, max_bytes=self.max_bytes,
            isolation_level=int(self.read_committed), session_id=0, session_epoch=-1,
            topics=[FetchRequest.FetchTopic(topic=self.tp.topic, partitions=[part])],
            forgotten_topics_data=[], rack_id="",
            min_version=FetchRequest.min_version_for_isolation_level(int(self.read_committed)),
            max_version=FETCH_MAX_VERSION)
        if not self.direct:
            return c._manager.send(request, node_id=leader)
        version = c._manager.broker_version_data.api_version(request)
        request.API_VERSION = version
        conns = _CONNECTIONS.setdefault(c, {})
        conn = conns.get(leader)
        try:
            if conn is None or conn.sock.fileno() < 0:
                broker = c._cluster.broker_metadata(leader)
                if broker is None:
                    return None
                conn = conns[leader] = FetchConnection(
                    broker.host, broker.port, timeout_s=(self.max_wait_ms + self.request_timeout_ms) / 1000,
                    client_id=c.config["client_id"], max_frame=c.config["receive_message_max_bytes"])
            return _Sent(conn, conn.send(request), version)
        except OSError as e:  # refused, reset: fetch_range's retry loop refreshes metadata and tries again
            return _Sent(None, 0, version, error=e)

    def leader_address(self) -> str:
        """The partition's leader as ``host:port (broker id)``, for error messages."""
        cluster = self.consumer._cluster
        leader = cluster.leader_for_partition(self.tp)
        broker = cluster.broker_metadata(leader) if leader is not None and leader >= 0 else None
        return f"{broker.host}:{broker.port} (broker {leader})" if broker is not None else f"(broker {leader})"

    def refresh(self) -> None:
        """After a leader change or a lost connection: new metadata, then a short back-off."""
        try:
            self._wait(self.consumer._cluster.request_update())
        except Exception:  # noqa: BLE001 - the caller's progress timeout decides when to give up
            pass
        time.sleep(self.backoff_s)


class BrokerAnsweredWrongly(KafkaSourceError):
    """A broker's ListOffsets answer disagrees with the records it serves: reading on would be
    short (or, for a sink, doubled)."""


def fetch_range(consumer, options, topic: str, partition: int, from_offset: int,
                until_offset: int, end_is_log_end: bool = False,
                holes_allowed: bool = False) -> Iterator[FetchedRecords]:
    """The records of ``[from_offset, until_offset)``, one ``FetchedRecords`` per Fetch response.

    With ``end_is_log_end`` (``until_offset`` is what a broker answered for the log's end),
    a record batch that holds both ``until_offset - 1`` and ``until_offset`` proves that
    answer wrong (a log ends between batches: Kafka appends, replicates and advances the high
    watermark whole batches at a time), and the read fails naming the broker and partition.
    Without ``holes_allowed`` (a topic that is not compacted), offsets missing between the
    records fetched fail the read the same way, unless ``failOnDataLoss=false``.
    """
    import kafka.errors as Errors

    fetcher = PartitionFetcher(consumer, options, topic, partition)
    name = f"{topic}-{partition}"
    position = from_offset
    progress_at = time.monotonic()
    pending = (fetcher.send(position), position)
    while position < until_offset:
        future, sent_for = pending
        if future is None or sent_for != position:
            future = fetcher.send(position)
        pending = (None, -1)
        error = None
        if future is None:
            error = "no leader known"
        else:
            try:
                response = fetcher._wait(future)
            except Exception as exc:  # noqa: BLE001 - connection lost, timeout: retried below
                error = repr(exc)
            else:
                data = response.responses[0].partitions[0]
                code = data.error_code
                if code == Errors.OffsetOutOfRangeError.errno:
                    earliest = consumer.beginning_offsets([fetcher.tp])[fetcher.tp]
                    if options.fail_on_data_loss:
                        raise KafkaSourceError(
                            f"Offsets {position} to {min(earliest, until_offset) - 1} of {name} were "
                            "deleted (retention) before the query read them: records are lost. Set the "
                            "option failOnDataLoss=false to skip what is gone and go on.")
                    moved_to = min(max(earliest, position), until_offset)
                    if moved_to != position:
                        logger.warning("Data loss: offsets %d to %d of %s were deleted before the query "
                                       "read them. Skipped, because failOnDataLoss=false.",
                                       position, moved_to - 1, name)
                        position = moved_to
                        continue
                    error = "OffsetOutOfRangeError above the log start (log truncated?)"
                if code:
                    err = Errors.for_code(code)
                    if not (err.retriable or err.invalid_metadata):
                        raise KafkaSourceError(f"Fetching {name} at offset {position} failed: {err.__name__}")
                    error = err.__name__
                else:
                    buf = data.records or b""
                    if end_is_log_end and (across := batch_across(buf, until_offset)) is not None:
                        raise BrokerAnsweredWrongly(
                            f"The broker {fetcher.leader_address()} (leader of {name}) said the log "
                            f"ends at offset {until_offset} (ListOffsets), but its Fetch returned a record "
                            f"batch holding offsets {across[0]} to {across[1]}, across that end (high "
                            f"watermark {data.high_watermark}): reading to that end would leave records "
                            "out. The query stops rather than read short; is this a Kafka-compatible "
                            "broker whose ListOffsets answers are wrong?")
                    if not holes_allowed and options.fail_on_data_loss and \
                            (hole := first_hole(buf, position)) is not None and hole[0] < until_offset:
                        raise BrokerAnsweredWrongly(
                            f"Offsets {hole[0]} to {hole[1]} of {name} are missing from what the broker "
                            f"{fetcher.leader_address()} (its leader) returned for a fetch at offset {position}, "
                            "and the topic is not compacted (its cleanup.policy has no 'compact'): only "
                            "compaction leaves holes between offsets, so records are lost. The query stops "
                            "rather than read short. If the topic was compacted once and its policy changed "
                            "since, the holes are the cleaner's: set the option failOnDataLoss=false to read "
                            "what is there.")
                    nxt = next_fetch_offset(buf, position)
                    if position < nxt < until_offset:
                        pending = (fetcher.send(nxt), nxt)  # the broker works while we decode
                    aborted = None
                    if fetcher.read_committed:
                        aborted = AbortedTransactions(
                            [(a.producer_id, a.first_offset) for a in (data.aborted_transactions or ())])
                    rows = decode_fetched(buf, position, until_offset, check_crcs=fetcher.check_crcs,
                                          include_headers=options.include_headers, aborted=aborted,
                                          where=f"{name} fetched at offset {position}")
                    if len(rows):
                        yield rows
                    if rows.next_offset > position:
                        progress_at = time.monotonic()
                        position = rows.next_offset
                        continue
                    error = "no records below the high watermark"
        if time.monotonic() - progress_at > options.poll_timeout_ms / 1000:
            hw = data.high_watermark if error == "no records below the high watermark" else None
            raise KafkaSourceError(
                f"Reading {name} offsets [{position}, {until_offset}) from {options.bootstrap_servers} "
                f"made no progress for kafkaConsumer.pollTimeoutMs={options.poll_timeout_ms} ms "
                f"({error}" + (f": the leader {fetcher.leader_address()} reports a high watermark of "
                               f"{hw}, below the planned end {until_offset}" if hw is not None and hw < until_offset
                               else "") + "): is the partition's leader up?")
        fetcher.refresh()
