"""KafkaProducer: the object a notebook holds, with kafka-python's API.

Theory of operation
-------------------
A producer is two things, as in Kafka: this thin user-facing object, and a ``Sender``
node (with its ``RecordAccumulator``) that lives in the runtime next to the brokers.
``KafkaProducer(bootstrap_servers=cluster, ...)`` checks the configuration, adds a Sender
node to the cluster's world (``cluster.add_client``) and from then on only *calls into*
it between simulation steps (``world.call_node``):

- ``send()`` serializes, waits for the topic's metadata if it has none, picks the
  partition (the partitioner), appends to the accumulator and returns a
  ``FutureRecordMetadata`` at once. Nothing is on the wire yet.
- Blocking calls run the simulated world instead of sleeping: ``future.get(timeout)``,
  ``flush()``, and ``send()`` when metadata is missing or ``buffer_memory`` is full
  (for at most ``max_block_ms``; then ``KafkaTimeoutError``). All times are simulated, so
  waiting 30 s for a request timeout costs only the events in between.

Over TCP: given a real address (``"host:port"``, a list of them, or a ``launch()`` cluster;
``clients/bootstrap.py``) the same Sender runs in ``minikafka.wire.client_runtime`` instead of
a simulated world; the same calls then wait on the wall clock, and its requests are Kafka frames.

Configuration keys, defaults and checks are kafka-python 3.0's (``linger_ms=0``,
``acks='all'``, ``enable_idempotence=True``, ``retries=inf``, ...), plus ``buffer_memory``
(Kafka's; kafka-python 3 dropped it). Network-only keys (``security_protocol``, ``ssl_*``,
``api_version``, ...) are accepted and ignored so real-Kafka code runs unchanged.
Idempotence, as kafka-python: left at its default, a conflicting ``acks``/``retries``/
``max_in_flight_requests_per_connection`` quietly turns it off; asked for explicitly, the
conflict is an error.

Never: read the wall clock, start a thread, or touch the network itself. Determinism
comes from the world: the default partitioner is seeded from the world's seed and the
client id, never from global ``random``.
"""

from __future__ import annotations

import logging
import math
import random
from typing import Any, Callable

from minikafka.clients.bootstrap import check_bootstrap_servers, cluster_for
from minikafka.clients.future import FutureRecordMetadata
from minikafka.clients.record_accumulator import RecordAccumulator, estimate_size_in_bytes
from minikafka.clients.cluster_metadata import ClusterMetadata
from minikafka.clients.sender import Sender, TransactionManager
from minikafka.clients.transactions import TransactionalRequests
from minikafka.errors import (
    IllegalStateError,
    KafkaConfigurationError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    UnsupportedCodecError,
)
from minikafka.partitioner import DefaultPartitioner, Partitioner
from minikafka.records import Compression
from minikafka.topic import TopicPartition, validate_topic_name

log = logging.getLogger(__name__)


# Keys kafka-python accepts that only matter for real sockets: taken, kept in .config, unused (but
# allow_auto_create_topics, which a producer over TCP asks its Metadata requests with).
_NETWORK_ONLY = {
    "connections_max_idle_ms": 9 * 60 * 1000, "allow_auto_create_topics": True,
    "client_dns_lookup": "use_all_dns_ips", "receive_message_max_bytes": 100_000_000,
    "receive_buffer_bytes": None, "send_buffer_bytes": None, "socket_options": None,
    "reconnect_backoff_max_ms": 30000, "security_protocol": "PLAINTEXT", "ssl_context": None,
    "ssl_check_hostname": True, "ssl_cafile": None, "ssl_certfile": None, "ssl_keyfile": None,
    "ssl_crlfile": None, "ssl_password": None, "ssl_ciphers": None, "api_version": None,
    "bootstrap_timeout_ms": 30000, "metric_reporters": [], "metrics_enabled": True,
    "metrics_num_samples": 2, "metrics_sample_window_ms": 30000, "selector": None,
    "sasl_mechanism": None, "sasl_plain_username": None, "sasl_plain_password": None,
    "sasl_kerberos_name": None, "sasl_kerberos_service_name": "kafka",
    "sasl_kerberos_domain_name": None, "sasl_oauth_token_provider": None, "proxy_url": None,
    "socks5_proxy": None, "kafka_client": None, "transaction_timeout_ms": 60000,
}

_ACKS = {0: 0, 1: 1, -1: -1, "all": -1, "0": 0, "1": 1, "-1": -1}


class KafkaProducer:
    """Publish records to a minikafka cluster (kafka-python's ``KafkaProducer`` API).

    >>> producer = KafkaProducer(bootstrap_servers=cluster, acks="all", linger_ms=5)  # doctest: +SKIP
    >>> producer.send("trucks_gps", key=b"truck-7", value=b"...").get(timeout=10)   # doctest: +SKIP
    RecordMetadata(topic='trucks_gps', partition=9, ...)
    """

    DEFAULT_CONFIG: dict[str, Any] = {
        "bootstrap_servers": "localhost",
        "client_id": None,
        "key_serializer": None,
        "value_serializer": None,
        "enable_idempotence": True,
        "transactional_id": None,
        "transaction_timeout_ms": 60000,
        "delivery_timeout_ms": 120000,
        "acks": -1,
        "compression_type": None,
        "retries": float("inf"),
        "batch_size": 16384,
        "linger_ms": 0,
        "partitioner": None,  # None: DefaultPartitioner seeded from the world's seed and client id
        "buffer_memory": 32 * 1024 * 1024,
        "max_block_ms": 60000,
        "max_request_size": 1048576,
        "metadata_max_age_ms": 300000,
        "retry_backoff_ms": 100,
        "request_timeout_ms": 30000,
        "reconnect_backoff_ms": 50,
        "max_in_flight_requests_per_connection": 5,
        # Kafka's Java client (KIP-601); kafka-python has no such key. A broker that has not
        # answered yet gets this long, not request_timeout_ms: a dead bootstrap broker costs 10 s.
        "socket_connection_setup_timeout_ms": 10000,
        **_NETWORK_ONLY,
    }

    def __init__(self, **configs: Any) -> None:
        unknown = sorted(set(configs) - set(self.DEFAULT_CONFIG))
        if unknown:
            raise KafkaConfigurationError(
                f"Unrecognized configs: {unknown} (keys are kafka-python's, e.g. linger_ms, not linger.ms)")
        self.config = {**self.DEFAULT_CONFIG, **configs}
        self._check_config(set(configs))
        cluster = cluster_for(self.config["bootstrap_servers"], "producer", self.config)
        self._cluster = cluster
        self._world = cluster.world
        self._closed = False
        self._node_id = cluster.add_client("producer", self._new_sender)
        if self.config["client_id"] is None:
            self.config["client_id"] = str(self._node_id)
        if self.config["partitioner"] is None:
            seed = f"{self._world.seed}/{self.config['client_id']}"
            self.config["partitioner"] = DefaultPartitioner(random.Random(seed), cluster.client_rules(self._node_id))

    # --- configuration --------------------------------------------------------------------------

    def _check_config(self, user_set: set[str]) -> None:
        c = self.config
        check_bootstrap_servers(c["bootstrap_servers"], "KafkaProducer")

        def integer(key: str, minimum: int) -> None:
            v = c[key]
            if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
                raise KafkaConfigurationError(f"{key} must be an int >= {minimum}, not {v!r}")

        for key, minimum in (("batch_size", 0), ("linger_ms", 0), ("buffer_memory", 1), ("max_block_ms", 0),
                             ("max_request_size", 1), ("request_timeout_ms", 1), ("retry_backoff_ms", 0),
                             ("delivery_timeout_ms", 1), ("max_in_flight_requests_per_connection", 1),
                             ("metadata_max_age_ms", 0), ("reconnect_backoff_ms", 0),
                             ("socket_connection_setup_timeout_ms", 1)):
            integer(key, minimum)
        retries = c["retries"]
        if not (retries == math.inf or (isinstance(retries, int) and not isinstance(retries, bool) and retries >= 0)):
            raise KafkaConfigurationError(f"retries must be an int >= 0 or float('inf'), not {retries!r}")
        if c["acks"] not in _ACKS or isinstance(c["acks"], bool):
            raise KafkaConfigurationError(f"acks must be 0, 1 or 'all' (-1), not {c['acks']!r}")
        c["acks"] = _ACKS[c["acks"]]
        try:
            codec = Compression.parse(c["compression_type"])
        except (UnsupportedCodecError, TypeError):
            raise KafkaConfigurationError(
                f"compression_type must be None, 'gzip', 'snappy', 'lz4' or 'zstd', not {c['compression_type']!r}"
            ) from None
        c["compression_type"] = None if codec == Compression.NONE else codec.name.lower()
        for key in ("key_serializer", "value_serializer"):
            s = c[key]
            if s is not None and not callable(s) and not callable(getattr(s, "serialize", None)):
                raise KafkaConfigurationError(f"{key} must be a callable (value -> bytes) or None, not {s!r}")
        p = c["partitioner"]
        if p is not None and not isinstance(p, Partitioner) and not callable(p):
            raise KafkaConfigurationError(
                f"partitioner must be a minikafka.partitioner.Partitioner or a callable "
                f"(key_bytes, all_partitions, available_partitions) -> int, not {p!r}")
        if c["client_id"] is not None and not isinstance(c["client_id"], str):
            raise KafkaConfigurationError(f"client_id must be a str or None, not {c['client_id']!r}")
        if c["transactional_id"] is not None:
            if not isinstance(c["transactional_id"], str) or not c["transactional_id"]:
                raise KafkaConfigurationError(
                    f"transactional_id must be a non-empty str or None, not {c['transactional_id']!r}")
            if c["enable_idempotence"] is False and "enable_idempotence" in user_set:
                raise KafkaConfigurationError(
                    "a transactional producer is idempotent: transactional_id needs enable_idempotence=True")
        t = c["transaction_timeout_ms"]
        if not isinstance(t, int) or isinstance(t, bool) or t < 1:
            raise KafkaConfigurationError(f"transaction_timeout_ms must be an int >= 1, not {t!r}")
        if c["delivery_timeout_ms"] < c["linger_ms"] + c["request_timeout_ms"]:
            raise KafkaConfigurationError(
                "Must set delivery_timeout_ms higher than linger_ms + request_timeout_ms "
                f"(delivery_timeout_ms={c['delivery_timeout_ms']}, linger_ms={c['linger_ms']}, "
                f"request_timeout_ms={c['request_timeout_ms']})")
        if not isinstance(c["enable_idempotence"], bool):
            raise KafkaConfigurationError(f"enable_idempotence must be True or False, not {c['enable_idempotence']!r}")
        if c["enable_idempotence"]:
            conflicts = []
            if "acks" in user_set and c["acks"] != -1:
                conflicts.append(("acks", c["acks"]))
            if "retries" in user_set and c["retries"] == 0:
                conflicts.append(("retries", 0))
            if "max_in_flight_requests_per_connection" in user_set and c["max_in_flight_requests_per_connection"] > 5:
                conflicts.append(("max_in_flight_requests_per_connection", c["max_in_flight_requests_per_connection"]))
            if conflicts:
                text = ", ".join(f"{k}={v!r}" for k, v in conflicts)
                if "enable_idempotence" in user_set:
                    raise KafkaConfigurationError(
                        f"enable_idempotence=True is incompatible with user-provided {text}: an idempotent "
                        "producer needs acks='all', retries > 0 and max_in_flight_requests_per_connection <= 5")
                # kafka-python logs this as a warning; INFO here keeps notebook output clean.
                log.info("Idempotence will be disabled because user-provided config conflicts with "
                         "idempotent defaults: %s", text)
                c["enable_idempotence"] = False

    def _new_sender(self, node_id: Any) -> Sender:
        """The factory the world calls (again on a restart: a new Sender has empty buffers)."""
        c = self.config
        tm = TransactionManager() if c["enable_idempotence"] else None
        accumulator = RecordAccumulator(transaction_manager=tm, wait=self._wait,
                                        rules=self._cluster.client_rules(node_id), **c)
        metadata = ClusterMetadata(list(self._cluster.broker_ids))
        order = not c["enable_idempotence"] and c["max_in_flight_requests_per_connection"] == 1
        skip = ("client_id", "allow_auto_create_topics")
        sender = Sender(node_id, accumulator, metadata, transaction_manager=tm,
                        guarantee_message_order=order, **{k: v for k, v in c.items() if k not in skip},
                        client_id=c["client_id"] or str(node_id), allow_auto_create_topics=self._asks_auto_create())
        if c["transactional_id"] is not None:
            tm.transactional = True
            sender.transactions = TransactionalRequests(sender, c["transactional_id"], c["transaction_timeout_ms"])
        return sender

    # --- the runtime ----------------------------------------------------------------------------

    @property
    def node_id(self) -> Any:
        """This producer's node in the world (name it in ``cluster.partition(...)``)."""
        return self._node_id

    @property
    def _sender(self) -> Sender:
        sender = self._world.nodes.get(self._node_id)
        if sender is None:
            raise IllegalStateError(f"the producer's node {self._node_id!r} has crashed; create a new KafkaProducer")
        return sender

    def _call(self, fn: Callable[[Sender], Any]) -> Any:
        self._sender  # raises a clear error if the node is gone
        return self._world.call_node(self._node_id, fn)

    def _wait(self, done: Callable[[], bool], timeout_ms: int | None) -> bool:
        """Run the world until ``done()``, for at most ``timeout_ms`` simulated ms."""
        if done():
            return True
        sender = self._world.nodes.get(self._node_id)
        if sender is not None and sender.in_step:
            # Callbacks run inside the Sender's step; blocking there would run the world
            # from inside itself (Kafka deadlocks its sender thread the same way).
            raise IllegalStateError(
                "cannot block (get(), flush(), a send() that waits) inside a producer callback: "
                "callbacks run inside the simulation step that completes the future")
        alive = lambda: self._world.alive(self._node_id)  # noqa: E731
        self._world.run_until(lambda: done() or not alive(), timeout_ms)
        return done()

    # --- the API ------------------------------------------------------------------------------------

    def send(self, topic: str, value: Any = None, key: Any = None, headers: list | None = None,
             partition: int | None = None, timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Queue one record; returns a ``FutureRecordMetadata`` at once (see the module doc)."""
        if self._closed:
            raise IllegalStateError("KafkaProducer already closed!")
        validate_topic_name(topic)
        if value is None and key is None:
            raise ValueError("Need at least one: key or value")
        headers = self._check_headers(headers)
        key_bytes = self._serialize("key", topic, headers, key)
        value_bytes = self._serialize("value", topic, headers, value)
        if timestamp_ms is not None and (not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool)):
            raise TypeError(f"timestamp_ms must be an int (ms since the epoch) or None, not {timestamp_ms!r}")

        start = self._world.now
        max_block = self.config["max_block_ms"]
        partitions = self._wait_on_metadata(topic, max_block)
        size = estimate_size_in_bytes(key_bytes, value_bytes, headers)
        self._ensure_valid_record_size(size)
        chosen = self._partition(topic, partition, key_bytes, partitions)
        if timestamp_ms is None:
            timestamp_ms = self._world.now  # simulated "now": reproducible, unlike time.time()
        sticky = partition is None and key_bytes is None
        result = self._append(TopicPartition(topic, chosen), timestamp_ms, key_bytes, value_bytes, headers,
                              sticky, start)
        if result.abort_for_new_batch:
            # KIP-480: the sticky partition's batch is done; move on, then start the new batch there.
            partitioner = self.config["partitioner"]
            if isinstance(partitioner, Partitioner):
                partitioner.on_new_batch(topic, len(partitions))
            chosen = self._partition(topic, None, key_bytes, partitions)
            result = self._append(TopicPartition(topic, chosen), timestamp_ms, key_bytes, value_bytes, headers,
                                  False, start)
        return result.future

    def _append(self, tp: TopicPartition, timestamp_ms: int, key: bytes | None, value: bytes | None,
                headers: list, abort_on_new_batch: bool, start: int):
        max_block = self.config["max_block_ms"]
        while True:
            result = self._call(lambda s: s.append(tp, timestamp_ms, key, value, headers,
                                                   abort_on_new_batch=abort_on_new_batch))
            if not result.memory_needed:
                return result
            left = max_block - (self._world.now - start)
            if left <= 0:
                raise KafkaTimeoutError(
                    f"Failed to allocate memory within the configured max blocking time {max_block} ms "
                    f"(buffer_memory={self.config['buffer_memory']} bytes are all held by unsent or unacknowledged batches)")
            # While we block, every batch counts as ready (Kafka: the pool is exhausted).
            self._call(lambda s: (s.accumulator.begin_wait_for_memory(), s.wakeup()))
            try:
                needed = result.memory_needed
                self._wait(lambda: self._sender.accumulator.available_memory >= needed, left)
            finally:
                if self._world.alive(self._node_id):
                    self._call(lambda s: s.accumulator.end_wait_for_memory())

    def _check_headers(self, headers: Any) -> list[tuple[str, bytes]]:
        if headers is None:
            return []
        if not isinstance(headers, (list, tuple)):
            raise TypeError(f"headers must be a list of (str, bytes) tuples, not {type(headers).__name__}")
        for item in headers:
            if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
                    and isinstance(item[1], (bytes, bytearray))):
                raise TypeError(f"All headers items must be (str, bytes) tuples, not {item!r}")
        return [(k, bytes(v)) for k, v in headers]

    def _serialize(self, which: str, topic: str, headers: list, data: Any) -> bytes | None:
        serializer = self.config[f"{which}_serializer"]
        if serializer is not None and data is not None:
            if callable(getattr(serializer, "serialize", None)):  # a kafka-python Serializer object
                data = serializer.serialize(topic, headers, data)
            else:
                data = serializer(data)
        if data is None or isinstance(data, bytes):
            return data
        if isinstance(data, (bytearray, memoryview)):
            return bytes(data)
        hint = (f"encode it ({which}.encode('utf-8')) or set {which}_serializer" if serializer is None
                else f"the {which}_serializer returned it")
        raise TypeError(f"the record {which} must be bytes, not {type(data).__name__} ({data!r:.60}): {hint}")

    def _ensure_valid_record_size(self, size: int) -> None:
        if size > self.config["max_request_size"]:
            raise MessageSizeTooLargeError(
                f"The message is {size} bytes when serialized which is larger than the maximum request size "
                f"you have configured with the max_request_size configuration ({self.config['max_request_size']})")
        if size > self.config["buffer_memory"]:
            raise MessageSizeTooLargeError(
                f"The message is {size} bytes when serialized which is larger than the total memory buffer "
                f"you have configured with the buffer_memory configuration ({self.config['buffer_memory']})")

    def _wait_on_metadata(self, topic: str, max_wait_ms: int) -> set[int]:
        partitions = self._sender.metadata.partitions_for_topic(topic)
        if partitions is not None:
            return partitions
        self._call(lambda s: s.add_topic(topic))
        self._wait(lambda: self._sender.metadata.partitions_for_topic(topic) is not None, max_wait_ms)
        partitions = self._sender.metadata.partitions_for_topic(topic)
        if partitions is not None:
            return partitions
        # Nobody waits for it any more: stop asking the cluster about it.
        self._call(lambda s: s.metadata.remove_topic(topic))
        if not getattr(self._cluster, "auto_create_topics", False):
            how = "create it first: cluster.create_topic(...)"
        else:
            how = ("the brokers did not create it (their auto.create.topics.enable is false?); "
                   if self._asks_auto_create() else "allow_auto_create_topics=False: ")
            how += f"create it first: KafkaAdminClient(...).create_topics([NewTopic({topic!r}, ...)])"
        raise KafkaTimeoutError(
            f"Failed to update metadata after {max_wait_ms / 1000:.1f} secs: topic {topic!r} is not in the "
            f"cluster's metadata ({how})")

    def _asks_auto_create(self) -> bool:
        """Do this producer's Metadata requests ask the brokers to create an unknown topic? Over
        TCP, as ``allow_auto_create_topics`` says; in the simulated world never."""
        return bool(self.config["allow_auto_create_topics"]) and getattr(self._cluster, "auto_create_topics", False)

    def _partition(self, topic: str, partition: int | None, key_bytes: bytes | None, partitions: set[int]) -> int:
        if partition is not None:
            if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
                raise ValueError(f"partition must be an int >= 0, not {partition!r}")
            if partition not in partitions:
                raise ValueError(f"Unrecognized partition {partition} for topic {topic} "
                                 f"(it has partitions 0..{max(partitions)})")
            return partition
        partitioner = self.config["partitioner"]
        if isinstance(partitioner, Partitioner):
            return partitioner.partition(topic, key_bytes, len(partitions))
        # kafka-python's older callable form: (key bytes, all partitions, available partitions).
        available = self._sender.metadata.available_partitions_for_topic(topic) or set()
        return partitioner(key_bytes, sorted(partitions), sorted(available))

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now (ignoring linger_ms) and wait until every record sent
        so far has succeeded or failed. ``timeout`` in (simulated) seconds."""
        if self._closed or not self._world.alive(self._node_id):
            return
        batches = self._sender.accumulator.incomplete()
        self._call(lambda s: (s.accumulator.begin_flush(), s.wakeup()))
        try:
            timeout_ms = None if timeout is None else int(timeout * 1000)
            if not self._wait(lambda: all(b.is_done for b in batches), timeout_ms):
                raise KafkaTimeoutError(f"Timeout waiting for future (flush, {timeout} secs)")
        finally:
            if self._world.alive(self._node_id):
                self._call(lambda s: s.accumulator.end_flush())

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop. Records still pending after ``timeout`` seconds fail with
        ``IllegalStateError("Producer is closed forcefully.")``."""
        if self._closed:
            return
        if timeout is not None and timeout < 0:
            raise ValueError(f"Invalid timeout: {timeout}")
        forced = False
        try:
            self.flush(timeout)
        except KafkaTimeoutError:
            forced = True
        if self._world.alive(self._node_id):
            self._call(lambda s: s.force_close() if forced else s.initiate_close())
            self._world.release(self._node_id)  # over TCP: its sockets close (the simulation keeps the node)
        self._closed = True

    # --- transactions (KIP-98): kafka-python's API ---------------------------------------------------

    def _transactions(self) -> TransactionalRequests:
        if self.config["transactional_id"] is None:
            raise IllegalStateError("Cannot use transactional methods without enabling transactions "
                                    "(set transactional_id)")
        return self._sender.transactions

    def _await(self, result, what: str) -> None:
        if not self._wait(lambda: result.done, self.config["max_block_ms"]):
            raise KafkaTimeoutError(f"Timeout expired after {self.config['max_block_ms']} ms while awaiting {what}")
        if result.error is not None:
            raise result.error

    def init_transactions(self) -> None:
        """Find the transaction coordinator and get this transactional id's producer id with
        a new epoch, which fences any older producer with the same id (its open transaction
        is aborted)."""
        self._await(self._call(lambda s: self._transactions().init()), "InitProducerId")

    def begin_transaction(self) -> None:
        self._call(lambda s: self._transactions().begin())

    def send_offsets_to_transaction(self, offsets: dict, group_metadata: Any) -> None:
        """Commit ``offsets`` ({TopicPartition: OffsetAndMetadata}) for the group within the
        transaction: they count only if it commits. ``group_metadata``: the group id (or an
        object with a ``group_id``, as kafka-python's ``ConsumerGroupMetadata``)."""
        group_id = getattr(group_metadata, "group_id", group_metadata)
        self._await(self._call(lambda s: self._transactions().send_offsets(dict(offsets), group_id)),
                    "AddOffsetsToTxn/TxnOffsetCommit")

    def commit_transaction(self) -> None:
        """Flush, then EndTxn(commit): returns once the coordinator has decided the commit."""
        result = self._call(lambda s: (s.accumulator.begin_flush(), self._transactions().end(True))[1])
        try:
            self._await(result, "EndTxn(commit)")
        finally:
            if self._world.alive(self._node_id):
                self._call(lambda s: s.accumulator.end_flush())

    def abort_transaction(self) -> None:
        """Drop what was not sent, then EndTxn(abort): nothing of the transaction is visible
        to read_committed consumers, ever."""
        self._await(self._call(lambda s: self._transactions().end(False)), "EndTxn(abort)")

    def partitions_for(self, topic: str) -> set[int]:
        """The topic's partition ids (waits up to ``max_block_ms`` for metadata)."""
        validate_topic_name(topic)
        return self._wait_on_metadata(topic, self.config["max_block_ms"])

    def metrics(self, raw: bool = False) -> dict:
        """A few counters, shaped as kafka-python's: ``{'producer-metrics': {name: value}}``."""
        sender = self._sender
        m = dict(sender.sensors)
        m["requests-in-flight"] = sender.in_flight_request_count()
        m["buffer-total-bytes"] = self.config["buffer_memory"]
        m["buffer-available-bytes"] = sender.accumulator.available_memory
        m["metadata-age"] = (None if sender.metadata.last_refresh_ms is None
                             else (self._world.now - sender.metadata.last_refresh_ms) / 1000)
        return {"producer-metrics": dict(sorted(m.items()))}

    def bootstrap_connected(self) -> bool:
        return self._world.alive(self._node_id) and self._sender.metadata.updates > 0

    def __enter__(self) -> "KafkaProducer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __str__(self) -> str:
        return (f"<KafkaProducer client_id={self.config.get('client_id')} "
                f"transactional_id={self.config.get('transactional_id')}>")

    __repr__ = __str__


__all__ = ["KafkaConfigurationError", "KafkaProducer"]
