"""KafkaConsumer: the object a notebook holds, with kafka-python's API.

Theory of operation
-------------------
As with the producer, the consumer is two things: this object, the *user thread*, and a
``ConsumerNetworkClient`` node in the cluster's world, the consumer's *process* (its
metadata, group membership, positions, fetch buffers and heartbeats). Blocking calls run
the simulated world instead of sleeping: ``poll(timeout_ms=1000)`` lets up to one simulated
second pass and returns as soon as records are there.

``poll()`` is where the group protocol meets user code, exactly as in Kafka:

1. if the group must (re)balance: auto-commit what was consumed (with
   ``enable_auto_commit``), call ``on_partitions_revoked``, and let the node join;
2. if a new assignment has arrived: take it, call ``on_partitions_revoked`` with the partitions
   that left it (KIP-848 only; the classic protocol gave everything up in step 1) and
   ``on_partitions_assigned`` with the partitions that are new (all of them after an eager
   rebalance; under KIP-848 only the added ones, as Kafka's ``ConsumerMembershipManager`` does);
3. fire the auto commit when ``auto_commit_interval_ms`` has passed (asynchronous: it
   commits the positions of records returned by *earlier* polls);
4. hand out up to ``max_poll_records`` buffered records, moving the positions past them.

Between two calls to ``poll()`` the node goes on heartbeating; if the gap exceeds
``max_poll_interval_ms`` it leaves the group and another member takes the partitions.

``cluster.kill_consumer(c)`` crashes the process: positions and uncommitted progress are
gone, and the group notices when ``session_timeout_ms`` passes without a heartbeat.
``cluster.restart_consumer(c)`` starts the process again, with the same subscription: it
joins as a new member and starts from the group's committed offsets.

Over TCP (``bootstrap_servers="host:port"``, a list, or a ``launch()`` cluster) the same node
runs in ``minikafka.wire.client_runtime``: ``poll`` then waits on the wall clock, and the node
heartbeats only while the application is inside a call (there is no heartbeat thread).

Configuration keys and defaults are kafka-python 3.0's; network-only keys are accepted and
ignored. Never: read the wall clock or start a thread.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable, Iterable

from minikafka.assignors import assignor_for
from minikafka.clients.bootstrap import _is_simulated, check_bootstrap_servers, cluster_for
from minikafka.clients.consumer_coordinator import ConsumerCoordinator
from minikafka.clients.consumer_network_client import ConsumerNetworkClient
from minikafka.clients.fetcher import ConsumerRecord
from minikafka.clients.subscription_state import EARLIEST, LATEST, NONE
from minikafka.errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaConfigurationError,
    KafkaError,
    KafkaTimeoutError,
)
from minikafka.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from minikafka.topic import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition, validate_topic_name

log = logging.getLogger(__name__)

_NETWORK_ONLY = {
    "client_rack": "", "group_instance_id": None, "enable_incremental_fetch_sessions": True,
    "reconnect_backoff_ms": 50, "reconnect_backoff_max_ms": 30000, "max_in_flight_requests_per_connection": 5,
    "check_crcs": True, "allow_auto_create_topics": True,
    "client_dns_lookup": "use_all_dns_ips", "receive_buffer_bytes": None, "send_buffer_bytes": None,
    "receive_message_max_bytes": 100_000_000, "socket_options": None, "security_protocol": "PLAINTEXT",
    "ssl_context": None, "ssl_check_hostname": True, "ssl_cafile": None, "ssl_certfile": None,
    "ssl_keyfile": None, "ssl_crlfile": None, "ssl_password": None, "ssl_ciphers": None, "api_version": None,
    "api_version_auto_timeout_ms": 2000, "connections_max_idle_ms": 9 * 60 * 1000, "metric_reporters": [],
    "metrics_enabled": True, "metrics_num_samples": 2, "metrics_sample_window_ms": 30000, "metric_group_prefix": "consumer",
    "selector": None, "sasl_mechanism": None, "sasl_plain_username": None, "sasl_plain_password": None,
    "sasl_kerberos_name": None, "sasl_kerberos_service_name": "kafka", "sasl_kerberos_domain_name": None,
    "sasl_oauth_token_provider": None, "proxy_url": None, "socks5_proxy": None, "kafka_client": None,
    "bootstrap_timeout_ms": 30000, "legacy_iterator": False,
}


class CommitFuture:
    """What ``commit_async`` returns (the shape of kafka-python's ``Future``)."""

    def __init__(self) -> None:
        self.is_done = False
        self.value: Any = None
        self.exception: Exception | None = None

    def succeeded(self) -> bool:
        return self.is_done and self.exception is None

    def failed(self) -> bool:
        return self.is_done and self.exception is not None

    def __repr__(self) -> str:
        state = "pending" if not self.is_done else ("ok" if self.exception is None else f"failed: {self.exception!r}")
        return f"<CommitFuture {state}>"


class KafkaConsumer:
    """Consume records from a minikafka cluster (kafka-python's ``KafkaConsumer`` API).

    >>> consumer = KafkaConsumer("trucks_gps", bootstrap_servers=cluster, group_id="dispatch",
    ...                          auto_offset_reset="earliest")                     # doctest: +SKIP
    >>> consumer.poll(timeout_ms=1000)                                              # doctest: +SKIP
    {TopicPartition(topic='trucks_gps', partition=3): [ConsumerRecord(...), ...]}
    """

    DEFAULT_CONFIG: dict[str, Any] = {
        "bootstrap_servers": "localhost",
        "client_id": None,
        "group_id": None,
        "key_deserializer": None,
        "value_deserializer": None,
        "fetch_max_wait_ms": 500,
        "fetch_min_bytes": 1,
        "fetch_max_bytes": 52428800,
        "max_partition_fetch_bytes": 1 * 1024 * 1024,
        "request_timeout_ms": 30000,
        "retry_backoff_ms": 100,
        "auto_offset_reset": "latest",
        "enable_auto_commit": True,
        "auto_commit_interval_ms": 5000,
        "default_offset_commit_callback": lambda offsets, response: True,
        "metadata_max_age_ms": 5 * 60 * 1000,
        "partition_assignment_strategy": ("range", "roundrobin"),
        "max_poll_records": 500,
        "max_poll_interval_ms": 300000,
        "session_timeout_ms": 45000,
        "heartbeat_interval_ms": 3000,
        "consumer_timeout_ms": float("inf"),
        "exclude_internal_topics": True,
        "default_api_timeout_ms": 60000,
        "isolation_level": "read_uncommitted",  # read_committed: only committed transactions (KIP-98)
        # Java's group.protocol / group.remote.assignor (kafka-python has neither): "consumer" is
        # KIP-848's protocol, where the broker assigns ("uniform" or "range"; None: the broker's pick)
        "group_protocol": "classic",
        "group_remote_assignor": None,
        **_NETWORK_ONLY,
    }

    def __init__(self, *topics: str, **configs: Any) -> None:
        unknown = sorted(set(configs) - set(self.DEFAULT_CONFIG))
        if unknown:
            raise KafkaConfigurationError(
                f"Unrecognized configs: {unknown} (keys are kafka-python's, e.g. group_id, not group.id)")
        self.config = {**self.DEFAULT_CONFIG, **configs}
        self._check_config()
        cluster = cluster_for(self.config["bootstrap_servers"], "consumer", self.config)
        self._cluster = cluster
        self._world = cluster.world
        self._closed = False
        self._assignors = [assignor_for(a) for a in self.config["partition_assignment_strategy"]]
        self._subscribe_call: tuple | None = None  # replayed into a restarted process
        self._iterator = None
        self._node_id = cluster.add_client("consumer", self._new_client)
        if self.config["client_id"] is None:
            self.config["client_id"] = str(self._node_id)
            self._call(lambda n: n.config.__setitem__("client_id", str(self._node_id)))
        if hasattr(cluster, "_consumers"):
            cluster._consumers.append(self)
        if topics:
            self.subscribe(topics)

    # --- configuration -----------------------------------------------------------------------------

    def _check_config(self) -> None:
        c = self.config
        check_bootstrap_servers(c["bootstrap_servers"], "KafkaConsumer")
        for key, minimum in (("fetch_max_wait_ms", 0), ("fetch_min_bytes", 0), ("fetch_max_bytes", 1),
                             ("max_partition_fetch_bytes", 1), ("request_timeout_ms", 1), ("retry_backoff_ms", 0),
                             ("auto_commit_interval_ms", 1), ("metadata_max_age_ms", 0), ("max_poll_records", 1),
                             ("max_poll_interval_ms", 1), ("session_timeout_ms", 1), ("heartbeat_interval_ms", 1),
                             ("default_api_timeout_ms", 0)):
            v = c[key]
            if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
                raise KafkaConfigurationError(f"{key} must be an int >= {minimum}, not {v!r}")
        if c["auto_offset_reset"] not in (EARLIEST, LATEST, NONE, "smallest", "largest"):
            raise KafkaConfigurationError(
                f"auto_offset_reset must be 'earliest', 'latest' or 'none', not {c['auto_offset_reset']!r}")
        c["auto_offset_reset"] = {"smallest": EARLIEST, "largest": LATEST}.get(c["auto_offset_reset"],
                                                                              c["auto_offset_reset"])
        if c["isolation_level"] not in ("read_uncommitted", "read_committed"):
            raise KafkaConfigurationError(
                f"isolation_level must be 'read_uncommitted' or 'read_committed', not {c['isolation_level']!r}")
        if c["group_instance_id"] is not None and (not isinstance(c["group_instance_id"], str)
                                                   or not c["group_instance_id"]):
            raise KafkaConfigurationError(
                f"group_instance_id must be a non-empty str or None, not {c['group_instance_id']!r}")
        if c["group_protocol"] not in ("classic", "consumer"):
            raise KafkaConfigurationError(f"group_protocol must be 'classic' or 'consumer', not {c['group_protocol']!r}")
        if c["group_protocol"] == "consumer" and c["group_id"] is not None and not _is_simulated(c["bootstrap_servers"]):
            raise KafkaConfigurationError(
                "group_protocol='consumer' works with minikafka's own KafkaConsumer in the simulation only: its "
                "TCP runtime does not speak ConsumerGroupHeartbeat yet (the brokers do: over TCP, use "
                "confluent-kafka with group.protocol=consumer)")
        if c["group_remote_assignor"] is not None and c["group_protocol"] != "consumer":
            raise KafkaConfigurationError("group_remote_assignor is for group_protocol='consumer' only")
        if c["group_id"] is not None and (not isinstance(c["group_id"], str) or not c["group_id"]):
            raise KafkaConfigurationError(f"group_id must be a non-empty str or None, not {c['group_id']!r}")
        if c["heartbeat_interval_ms"] >= c["session_timeout_ms"]:
            raise KafkaConfigurationError(
                f"heartbeat_interval_ms ({c['heartbeat_interval_ms']}) must be lower than session_timeout_ms "
                f"({c['session_timeout_ms']}); Kafka advises a third of it")
        if c["group_id"] is None and c["enable_auto_commit"]:
            # kafka-python quietly disables auto commit without a group: there is nowhere to commit.
            c["enable_auto_commit"] = False
        for key in ("key_deserializer", "value_deserializer"):
            d = c[key]
            if d is not None and not callable(d) and not callable(getattr(d, "deserialize", None)):
                raise KafkaConfigurationError(f"{key} must be a callable (bytes -> value) or None, not {d!r}")
        timeout = c["consumer_timeout_ms"]
        if not (timeout == math.inf or (isinstance(timeout, int) and not isinstance(timeout, bool))):
            raise KafkaConfigurationError(f"consumer_timeout_ms must be an int or float('inf'), not {timeout!r}")
        strategies = c["partition_assignment_strategy"]
        if isinstance(strategies, (str, type)) or not isinstance(strategies, (list, tuple)) or not strategies:
            c["partition_assignment_strategy"] = (strategies,) if strategies else ()
        if not c["partition_assignment_strategy"]:
            raise KafkaConfigurationError("partition_assignment_strategy needs at least one assignor")

    def _new_client(self, node_id: Any) -> ConsumerNetworkClient:
        """The factory the world calls (again on a restart: a new process remembers nothing)."""
        client = ConsumerNetworkClient(node_id, dict(self.config), list(self._cluster.broker_ids), self._assignors,
                                       self._rules(node_id))
        call = getattr(self, "_subscribe_call", None)
        if call is not None:
            kind, args = call
            if kind == "subscribe":
                topics, pattern, listener = args
                client.subscriptions.subscribe(topics, pattern, listener)
            else:
                client.subscriptions.assign_from_user(args)
        return client

    def _rules(self, node_id: Any) -> Any:
        """The assignors' rules when this consumer leads its group: the cluster's (a student's,
        under guard, on ``Cluster(rules=...)``), or Kafka's."""
        rules_for = getattr(self._cluster, "client_rules", None)
        return rules_for(str(node_id)) if rules_for is not None else None

    # --- the runtime -------------------------------------------------------------------------------------

    @property
    def node_id(self) -> Any:
        """This consumer's node in the world (name it in ``cluster.partition(...)``)."""
        return self._node_id

    @property
    def _node(self) -> ConsumerNetworkClient:
        node = self._world.nodes.get(self._node_id)
        if node is None:
            raise IllegalStateError(
                f"the consumer's process {self._node_id!r} has crashed; "
                "cluster.restart_consumer(consumer) starts it again")
        return node

    @property
    def alive(self) -> bool:
        return self._world.alive(self._node_id)

    @property
    def coordinator(self) -> ConsumerCoordinator | None:
        """This consumer's group state machine (Kafka's ``ConsumerCoordinator``), for a lecture to
        read: ``coordinator`` (the broker that coordinates the group), ``member_id``,
        ``generation``, ``state`` and ``events`` (what happened, with the simulated time). None
        without a ``group_id``. Raises ``IllegalStateError`` if the consumer's process crashed."""
        return self._node.coordinator

    def _call(self, fn: Callable[[ConsumerNetworkClient], Any]) -> Any:
        self._node  # a clear error if the process is gone
        return self._world.call_node(self._node_id, fn)

    def _wait(self, done: Callable[[], bool], timeout_ms: int | None) -> bool:
        if done():
            return True
        node = self._world.nodes.get(self._node_id)
        if node is not None and node.in_step:
            raise IllegalStateError("cannot block inside a consumer callback run by the simulation")
        self._world.run_until(lambda: done() or not self.alive, timeout_ms)
        return done()

    def _ensure_open(self) -> None:
        if self._closed:
            raise IllegalStateError("KafkaConsumer is closed")

    # --- subscribe / assign ------------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] = (), pattern: str | None = None, listener: Any = None) -> None:
        """Join ``group_id`` for ``topics`` (or every topic matching the regex ``pattern``);
        the group decides which partitions this consumer reads. ``listener`` is a
        ``ConsumerRebalanceListener`` (``on_partitions_revoked``/``on_partitions_assigned``)."""
        self._ensure_open()
        if isinstance(topics, str):
            topics = [topics]
        topics = list(topics)
        if (not topics) == (pattern is None):
            raise IllegalStateError("You must choose topic(s) or pattern (and not both)")
        for t in topics:
            validate_topic_name(t)
        if self.config["group_id"] is None:
            raise KafkaConfigurationError("subscribe() needs a group_id; without one, use assign()")
        if listener is not None and not (hasattr(listener, "on_partitions_revoked")
                                         and hasattr(listener, "on_partitions_assigned")):
            raise TypeError("listener must have on_partitions_revoked and on_partitions_assigned methods")
        self._call(lambda n: n.subscriptions.subscribe(topics, pattern, listener))
        self._subscribe_call = ("subscribe", (topics, pattern, listener))
        if self._node.coordinator.state == "STABLE":
            self._call(lambda n: n.coordinator.request_rejoin("subscription changed"))
        self._call(lambda n: n.wakeup())

    def unsubscribe(self) -> None:
        self._ensure_open()
        node = self._node
        if node.coordinator is not None and node.subscriptions.partitions_auto_assigned:
            self._revoke_all()
            self._call(lambda n: n.coordinator.leave_group())
            self._call(lambda n: setattr(n.coordinator, "state", "UNJOINED"))
        self._call(lambda n: (n.subscriptions.unsubscribe(), n.fetcher.drop_buffered()))
        self._subscribe_call = None

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions: no group membership, no rebalances."""
        self._ensure_open()
        partitions = [TopicPartition(*tp) for tp in partitions]
        for tp in partitions:
            validate_topic_name(tp.topic)
        self._call(lambda n: n.subscriptions.assign_from_user(partitions))
        self._subscribe_call = ("assign", partitions)
        self._call(lambda n: n.wakeup())

    def assignment(self) -> set[TopicPartition]:
        return set(self._node.subscriptions.assignment)

    @property
    def coordinator_id(self) -> Any:
        """minikafka's, not kafka-python's: the broker this consumer takes for its group's
        coordinator now (None while it knows none), as a lecture shows it beside the cluster."""
        return self._node.coordinator.coordinator

    @property
    def group_events(self) -> list[tuple[int, str]]:
        """minikafka's: this member's story in its group, ``(simulated time in ms, what
        happened)``: the coordinator found, each join and generation, each revocation."""
        return list(self._node.coordinator.events)

    def subscription(self) -> set[str] | None:
        subs = self._node.subscriptions
        return set(subs.subscription) if subs.partitions_auto_assigned else None

    # --- poll ----------------------------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0, max_records: int | None = None,
             update_offsets: bool = True) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records since the last poll, by partition; waits up to ``timeout_ms`` simulated ms."""
        if timeout_ms < 0:
            raise ValueError("Timeout must not be negative")
        if max_records is None:
            max_records = self.config["max_poll_records"]
        if not isinstance(max_records, int) or isinstance(max_records, bool):
            raise TypeError("max_records must be an integer")
        if max_records <= 0:
            raise ValueError("max_records must be positive")
        self._ensure_open()
        deadline = self._world.now + timeout_ms
        self._call(lambda n: setattr(n, "last_poll_ms", self._world.now))
        while True:
            self._poll_coordinator()
            self._raise_errors()
            records = self._call(lambda n: n.fetcher.fetched_records(max_records))
            if records:
                self._call(lambda n: n.wakeup())  # the next fetches go out while the user works
                return {tp: [self._deserialize(r) for r in rs] for tp, rs in records.items()}
            left = deadline - self._world.now
            if left <= 0:
                return {}
            self._wait(lambda: self._node_has_work(), left)
            if not self.alive:
                self._node  # raises: the process crashed while we waited

    def _node_has_work(self) -> bool:
        node = self._world.nodes.get(self._node_id)
        return node is None or node.has_work_for_user()

    def _raise_errors(self) -> None:
        node = self._node
        if node.fatal:
            raise node.fatal.pop(0)
        if node.fetcher.errors:
            raise node.fetcher.errors.pop(0)

    def _poll_coordinator(self) -> None:
        node = self._node
        self._invoke_commit_callbacks()
        co = node.coordinator
        if co is None:
            return
        if co.needs_join_prepare():
            self._on_join_prepare()
            self._call(lambda n: n.coordinator.start_join())
        assigned = self._call(lambda n: n.coordinator.take_assignment())
        if assigned is not None:
            interval = self.config["auto_commit_interval_ms"]
            # Kafka's listener contract, both protocols: on_partitions_revoked gets only what left
            # the assignment (if anything did), on_partitions_assigned only what is new (always
            # called, even with nothing new). KIP-848 (group_protocol="consumer") moves partitions
            # one by one, so a partition kept through a rebalance appears in neither. The classic
            # (eager) protocol revoked everything before it rejoined: all it gets is new.
            owned = set(node.subscriptions.assignment)
            revoked = sorted(owned - set(assigned))
            added = sorted(set(assigned) - owned)
            if revoked:
                self._revoke(revoked)

            def apply(n: ConsumerNetworkClient) -> None:
                n.subscriptions.assign_from_subscribed(assigned)
                n.fetcher.drop_buffered()
                if self.config["enable_auto_commit"]:
                    n.coordinator.next_auto_commit_ms = n.now + interval
                n.wakeup()
            self._call(apply)
            listener = node.subscriptions.listener
            if listener is not None:
                listener.on_partitions_assigned(added)
        if co.auto_commit_due(self._world.now):
            co.next_auto_commit_ms = self._world.now + self.config["auto_commit_interval_ms"]
            self.commit_async(callback=self._log_auto_commit)

    def _log_auto_commit(self, offsets: dict, error: Any) -> None:
        # kafka-python warns; INFO (and the member's event list) keeps notebook output clean.
        if isinstance(error, Exception) and self.alive:
            self._node.coordinator._event(f"auto commit failed: {error}")
            log.info("Auto offset commit failed: %s", error)

    def _on_join_prepare(self) -> None:
        """Before (re)joining: commit what was consumed (auto commit), then give it all up."""
        node = self._node
        if self.config["enable_auto_commit"] and node.subscriptions.assignment:
            try:
                self.commit()
            except KafkaError as e:
                node.coordinator._event(f"auto commit before rebalance failed: {e}")
                log.info("Auto offset commit failed before rebalance: %s", e)
        self._revoke_all()

    def _revoke(self, revoked: list[TopicPartition]) -> None:
        node = self._node
        if self.config["enable_auto_commit"] and node.coordinator.member_id:  # (fenced: lost, not revoked)
            positions = {tp: OffsetAndMetadata(node.subscriptions.assignment[tp].position, "", -1) for tp in revoked
                         if node.subscriptions.assignment[tp].position is not None}
            try:
                self.commit(positions)
            except KafkaError as e:
                node.coordinator._event(f"auto commit of revoked partitions failed: {e}")
        if node.subscriptions.listener is not None:
            node.subscriptions.listener.on_partitions_revoked(revoked)

    def _revoke_all(self) -> None:
        node = self._node
        revoked = sorted(node.subscriptions.assignment)
        if node.subscriptions.listener is not None and node.coordinator.state != "UNJOINED":
            node.subscriptions.listener.on_partitions_revoked(revoked)
        self._call(lambda n: (n.subscriptions.assign_from_subscribed([]), n.fetcher.drop_buffered()))

    def _deserialize(self, r: ConsumerRecord) -> ConsumerRecord:
        key = self._apply_deserializer("key", r.topic, r.headers, r.key)
        value = self._apply_deserializer("value", r.topic, r.headers, r.value)
        return r._replace(key=key, value=value)

    def _apply_deserializer(self, which: str, topic: str, headers: list, data: bytes | None) -> Any:
        d = self.config[f"{which}_deserializer"]
        if d is None or data is None:
            return data
        if callable(getattr(d, "deserialize", None)):
            return d.deserialize(topic, headers, data)
        return d(data)

    # --- iteration -------------------------------------------------------------------------------------------

    def __iter__(self) -> "KafkaConsumer":
        return self

    def __next__(self) -> ConsumerRecord:
        """One record at a time; ``StopIteration`` after ``consumer_timeout_ms`` (simulated)
        without one."""
        self._ensure_open()
        timeout = self.config["consumer_timeout_ms"]
        while True:
            if self._iterator:
                return self._iterator.pop(0)
            records = self.poll(timeout_ms=int(min(timeout, 2**31)), max_records=self.config["max_poll_records"])
            self._iterator = [r for _, rs in sorted(records.items()) for r in rs]
            if not self._iterator:
                raise StopIteration()

    # --- positions -----------------------------------------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._ensure_open()
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"offset must be an int >= 0, not {offset!r}")
        self._call(lambda n: (n.subscriptions.seek(partition, offset), n.fetcher.drop_buffered(partition),
                              setattr(n.subscriptions.assignment[partition], "paused", False), n.wakeup()))

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._seek_to(EARLIEST, partitions)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._seek_to(LATEST, partitions)

    def _seek_to(self, strategy: str, partitions: tuple) -> None:
        self._ensure_open()
        tps = list(partitions) or sorted(self._node.subscriptions.assignment)

        def reset(n: ConsumerNetworkClient) -> None:
            for tp in tps:
                n.subscriptions.request_reset(tp, strategy)
                n.fetcher.drop_buffered(tp)
            n.wakeup()
        self._call(reset)

    def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int:
        """The offset of the next record ``poll()`` will return from ``partition``."""
        self._ensure_open()
        state = self._node.subscriptions.assigned(partition)
        timeout = self.config["default_api_timeout_ms"] if timeout_ms is None else timeout_ms
        self._call(lambda n: n.wakeup())
        if not self._wait(lambda: self.alive and self._raise_or(lambda: state.position is not None), timeout):
            raise KafkaTimeoutError(f"Timeout waiting for the position of {partition}")
        return state.position

    def _raise_or(self, done: Callable[[], bool]) -> bool:
        node = self._world.nodes.get(self._node_id)
        if node is not None and (node.fatal or node.fetcher.errors):
            return True
        return done()

    def committed(self, partition: TopicPartition, metadata: bool = False):
        """The group's committed offset for ``partition`` (None if none), asked of the coordinator."""
        result = self._fetch_committed([partition])
        found = result.get(partition)
        if found is None or found.offset < 0:
            return None
        return found if metadata else found.offset

    def _fetch_committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
        self._ensure_open()
        if self.config["group_id"] is None:
            raise KafkaConfigurationError("committed() needs a group_id")
        deadline = self._world.now + self.config["default_api_timeout_ms"]
        while True:
            box: list = []
            self._call(lambda n: n.coordinator.fetch_committed(partitions, box.append))
            self._wait(lambda: bool(box), deadline - self._world.now)
            if box and box[0] is not None:
                return box[0]
            if self._world.now >= deadline:
                raise KafkaTimeoutError("Timeout fetching committed offsets")
            self._wait(lambda: False, self.config["retry_backoff_ms"])

    def highwater(self, partition: TopicPartition) -> int | None:
        """The high watermark the last fetch of ``partition`` saw (None before one)."""
        return self._node.subscriptions.assigned(partition).highwater

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: o for tp, (o, _) in self._list_offsets(list(partitions), EARLIEST_TIMESTAMP).items()}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: o for tp, (o, _) in self._list_offsets(list(partitions), LATEST_TIMESTAMP).items()}

    def offsets_for_times(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        out = {}
        for tp, ts in timestamps.items():
            found = self._list_offsets([tp], ts).get(tp)
            out[tp] = None if found is None or found[0] < 0 else OffsetAndTimestamp(found[0], found[1])
        return out

    def _list_offsets(self, partitions: list[TopicPartition], timestamp: int) -> dict[TopicPartition, tuple[int, int]]:
        self._ensure_open()
        deadline = self._world.now + self.config["default_api_timeout_ms"]
        for tp in partitions:
            self._call(lambda n, tp=tp: n.metadata.add_topic(tp.topic))
        while True:
            box: list = []
            self._call(lambda n: (n.wakeup(), n.fetcher.offsets_for(partitions, timestamp, box.append)))
            self._wait(lambda: bool(box), deadline - self._world.now)
            if box and set(box[0]) >= set(partitions):
                return {tp: box[0][tp] for tp in partitions}
            if self._world.now >= deadline:
                raise KafkaTimeoutError(f"Failed to get offsets by times in {self.config['default_api_timeout_ms']} ms")
            self._wait(lambda: False, self.config["retry_backoff_ms"])

    def pause(self, *partitions: TopicPartition) -> None:
        self._call(lambda n: [setattr(n.subscriptions.assigned(tp), "paused", True) for tp in partitions])

    def resume(self, *partitions: TopicPartition) -> None:
        self._call(lambda n: ([setattr(n.subscriptions.assigned(tp), "paused", False) for tp in partitions],
                              n.wakeup()))

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self._node.subscriptions.assignment.items() if s.paused}

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        validate_topic_name(topic)
        self._call(lambda n: (n.metadata.add_topic(topic), n.metadata.request_update(), n.wakeup()))
        self._wait(lambda: self._node.metadata.partitions_for_topic(topic) is not None,
                   self.config["default_api_timeout_ms"])
        return self._node.metadata.partitions_for_topic(topic)

    def topics(self) -> set[str]:
        return set(self._cluster.topics()) - ({t for t in self._cluster.topics() if t.startswith("__")}
                                              if self.config["exclude_internal_topics"] else set())

    # --- commits -----------------------------------------------------------------------------------------------

    def _consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(s.position, "", s.leader_epoch)
                for tp, s in sorted(self._node.subscriptions.assignment.items()) if s.position is not None}

    @staticmethod
    def _as_offsets(offsets: dict) -> dict[TopicPartition, OffsetAndMetadata]:
        out = {}
        for tp, om in offsets.items():
            if isinstance(om, int) and not isinstance(om, bool):
                om = OffsetAndMetadata(om, "", -1)
            if not isinstance(om, OffsetAndMetadata):
                om = OffsetAndMetadata(*om)
            out[TopicPartition(*tp)] = om
        return out

    def commit(self, offsets: dict | None = None, timeout_ms: int | None = None) -> None:
        """Commit ``offsets`` (default: every position, i.e. all records returned so far) and
        wait until the coordinator has them on every in-sync replica. Retries retriable
        errors; raises ``CommitFailedError`` if the group has moved on without us."""
        self._ensure_open()
        if self.config["group_id"] is None:
            raise KafkaConfigurationError("commit() needs a group_id")
        self._invoke_commit_callbacks()  # earlier commit_async callbacks first, as kafka-python
        offsets = self._consumed() if offsets is None else self._as_offsets(offsets)
        if not offsets:
            return
        timeout = self.config["default_api_timeout_ms"] if timeout_ms is None else timeout_ms
        deadline = self._world.now + timeout
        while True:
            box: list = []
            self._call(lambda n: n.coordinator.commit_offsets(offsets, box.append))
            self._wait(lambda: bool(box), max(0, deadline - self._world.now))
            if not self.alive:
                self._node
            if box and box[0] is None:
                return
            error = box[0] if box else None
            if error is not None and not getattr(error, "retriable", False):
                raise error
            if self._world.now >= deadline:
                raise KafkaTimeoutError(f"Timeout committing offsets after {timeout} ms (last error: {error})")
            self._call(lambda n: n.wakeup())
            self._wait(lambda: False, self.config["retry_backoff_ms"])

    def commit_async(self, offsets: dict | None = None, callback: Callable | None = None) -> CommitFuture:
        """Send a commit and return at once; ``callback(offsets, None or exception)`` runs in
        a later ``poll()`` (or ``commit()``), as in kafka-python. Not retried: a retry could
        overwrite a newer commit."""
        self._ensure_open()
        if self.config["group_id"] is None:
            raise KafkaConfigurationError("commit_async() needs a group_id")
        offsets = self._consumed() if offsets is None else self._as_offsets(offsets)
        callback = callback or self.config["default_offset_commit_callback"]
        future = CommitFuture()

        def done(error: Exception | None) -> None:
            future.is_done, future.exception = True, error
            self._world.nodes[self._node_id].completed_commits.append((callback, offsets, error))
        self._call(lambda n: n.coordinator.commit_offsets(offsets, done))
        return future

    def _invoke_commit_callbacks(self) -> None:
        node = self._node
        while node.completed_commits:
            callback, offsets, error = node.completed_commits.pop(0)
            callback(offsets, error)

    # --- the end --------------------------------------------------------------------------------------------------

    def close(self, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        """Commit (with auto commit on), leave the group and stop the process."""
        if self._closed:
            return
        if self.alive:
            node = self._node
            try:
                if autocommit and self.config["enable_auto_commit"] and node.subscriptions.assignment \
                        and node.coordinator is not None and node.coordinator.state == "STABLE":
                    self.commit(timeout_ms=timeout_ms)
            except KafkaError as e:
                log.info("Auto offset commit failed on close: %s", e)
            if node.coordinator is not None:
                self._call(lambda n: n.coordinator.leave_group())
                self._world.run_until(lambda: False, 10)  # let the LeaveGroup leave
            self._world.crash(self._node_id)
        self._closed = True

    def metrics(self, raw: bool = False) -> dict:
        node = self._node
        co = node.coordinator
        m = {
            "records-consumed-total": node.fetcher.records_fetched,
            "fetch-total": node.fetcher.fetch_requests,
            "rebalance-total": co.rebalances if co else 0,
        }
        return {"consumer-metrics": dict(sorted(m.items()))}

    def __enter__(self) -> "KafkaConsumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<KafkaConsumer client_id={self.config.get('client_id')} group_id={self.config.get('group_id')}>"


class ConsumerRebalanceListener:
    """Base for rebalance listeners (kafka-python's ``ConsumerRebalanceListener``)."""

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        pass

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        pass


__all__ = ["CommitFailedError", "ConsumerRebalanceListener", "ConsumerRecord", "KafkaConsumer", "OffsetAndMetadata"]
