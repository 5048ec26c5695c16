"""The consumer's node: Kafka's ``ConsumerNetworkClient`` plus its heartbeat thread.

Theory of operation
-------------------
A ``KafkaConsumer`` is a thin object in the notebook; this state machine is the consumer's
process in the simulated world (``cluster.add_client``). It owns everything that must live
with the process (a crash loses it all, as a real crash would): the metadata, the
``SubscriptionState`` (assignment and positions), the ``Fetcher`` and the
``ConsumerCoordinator``.

Requests go out through ``send_request(node, make, on_response, on_error)``: each gets a
correlation id, a timeout (``request_timeout_ms`` unless told otherwise) and exactly one
outcome, its answer or an error (the timeout, or ``Disconnected`` when the broker's process
is gone). After every input the node runs one round of background work, as Kafka's
network thread would: refresh metadata, find the coordinator, carry a started join, look
up missing positions (committed offsets, then resets) and send fetches. Heartbeats have
their own timer, so they go on while the user is busy between two ``poll()`` calls.

Never: read a clock (``self.now`` is the input's time), block, or call user code: listeners,
deserializers and commit callbacks run in ``KafkaConsumer``, the user's thread.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Hashable

from minikafka.assignors import PartitionAssignor
from minikafka.clients.consumer_coordinator import ConsumerCoordinator
from minikafka.clients.consumer_membership import ConsumerMembershipManager
from minikafka.clients.fetcher import Fetcher
from minikafka.clients.cluster_metadata import ClusterMetadata
from minikafka.clients.subscription_state import SubscriptionState
from minikafka.errors import KafkaConnectionError, KafkaError, RequestTimedOutError
from minikafka.messages import Disconnected, MetadataRequest, MetadataResponse
from minikafka.node import NodeId, StateMachine
from minikafka.topic import TopicPartition

_WAKE = "wake"
_HEARTBEAT = "heartbeat"


class ConsumerNetworkClient(StateMachine):
    # A broker process that dies resets our connections: a JoinGroup parked on the dead
    # coordinator fails at once instead of after its 5-minute timeout (see minikafka.sim.world).
    sees_connection_resets = True

    def __init__(self, node_id: NodeId, config: dict, bootstrap: list[NodeId],
                 assignors: list[PartitionAssignor], rules: Any = None) -> None:
        super().__init__(node_id)
        self.config = config
        self.metadata = ClusterMetadata(bootstrap)
        self.subscriptions = SubscriptionState(config["auto_offset_reset"])
        self.fetcher = Fetcher(self, config)
        # group_protocol (Java's group.protocol): "classic" JoinGroup/SyncGroup, or KIP-848's "consumer"
        membership = ConsumerMembershipManager if config.get("group_protocol") == "consumer" else ConsumerCoordinator
        self.coordinator = membership(self, config, assignors, rules) if config["group_id"] else None
        self.all_topics: set[str] | None = None  # from the last full metadata answer (patterns)
        self.last_poll_ms = 0
        self.fatal: list[Exception] = []  # errors poll() must raise
        self.completed_commits: list[tuple[Callable, dict, Exception | None]] = []  # async callbacks
        self._in_flight: dict[int, tuple[NodeId, Callable, Callable]] = {}
        self._correlation = itertools.count(1)
        self._committed_in_flight = False
        self._metadata_in_flight = False
        self._wake_at: int | None = None
        self._rotation = 0
        # Brokers that refused or timed out: skipped for an exponential back-off
        # (reconnect_backoff_ms doubling up to reconnect_backoff_max_ms), as Kafka's client does.
        self._node_failures: dict[NodeId, int] = {}
        self._node_backoff_until: dict[NodeId, int] = {}
        self.in_step = False

    # --- requests ----------------------------------------------------------------------------------

    def send_request(self, node: NodeId, make: Callable[[int], Any], on_response: Callable[[Any], None],
                     on_error: Callable[[KafkaError], None], *, timeout_ms: int | None = None) -> int:
        corr = next(self._correlation)
        self._in_flight[corr] = (node, on_response, on_error)
        self.send(node, make(corr))
        self.set_timer(("timeout", corr), self.config["request_timeout_ms"] if timeout_ms is None else timeout_ms)
        return corr

    def least_loaded_node(self) -> NodeId | None:
        candidates = [n for n in (self.metadata.brokers or self.metadata.bootstrap_nodes)
                      if self._node_backoff_until.get(n, 0) <= self.now]
        if not candidates:
            return None
        k = self._rotation % len(candidates)
        self._rotation += 1
        candidates = candidates[k:] + candidates[:k]
        load = {n: 0 for n in candidates}
        for node, _, _ in self._in_flight.values():
            if node in load:
                load[node] += 1
        return min(candidates, key=lambda n: load[n])

    def leader_epoch(self, tp: TopicPartition) -> int:
        pm = self.metadata._partitions.get(tp.topic, {}).get(tp.partition)
        return -1 if pm is None else pm.leader_epoch

    # --- inputs --------------------------------------------------------------------------------------------

    def on_start(self) -> None:
        self.last_poll_ms = self.now
        self._run_once()

    def on_message(self, src: NodeId, message: Any) -> None:
        self.in_step = True
        try:
            if isinstance(message, Disconnected):
                self._fail_node(message.node, KafkaConnectionError(f"connection to broker {message.node} refused"))
            else:
                entry = self._in_flight.get(getattr(message, "correlation_id", None))
                if entry is not None and entry[0] == src:
                    self._node_failures.pop(src, None)
                    del self._in_flight[message.correlation_id]
                    self.cancel_timer(("timeout", message.correlation_id))
                    entry[1](message)
            self._run_once()
        finally:
            self.in_step = False

    def on_timer(self, key: Hashable) -> None:
        if key == _WAKE:
            self._wake_at = None
        elif key == _HEARTBEAT:
            if self.coordinator is not None:
                self.coordinator.heartbeat()
                self.schedule_heartbeat()
        elif isinstance(key, tuple) and key[0] == "timeout":
            entry = self._in_flight.pop(key[1], None)
            if entry is not None:
                self._node_failed(entry[0])
                self.metadata.request_update()
                entry[2](RequestTimedOutError(f"request to broker {entry[0]} timed out"))
        self._run_once()

    def _node_failed(self, node: NodeId) -> None:
        n = self._node_failures[node] = self._node_failures.get(node, 0) + 1
        c = self.config
        self._node_backoff_until[node] = self.now + min(c["reconnect_backoff_ms"] * 2 ** (n - 1),
                                                        c["reconnect_backoff_max_ms"])

    def _fail_node(self, node: NodeId, error: KafkaError) -> None:
        self._node_failed(node)
        failed = [corr for corr, (n, _, _) in self._in_flight.items() if n == node]
        for corr in failed:
            _, _, on_error = self._in_flight.pop(corr)
            self.cancel_timer(("timeout", corr))
            on_error(error)
        self.metadata.request_update()

    def schedule_heartbeat(self) -> None:
        self.set_timer(_HEARTBEAT, self.config["heartbeat_interval_ms"])

    def wakeup(self) -> None:
        """Run a round of background work right after the current input."""
        if self._wake_at != self.now:
            self._wake_at = self.now
            self.set_timer(_WAKE, 0)

    # --- the background round --------------------------------------------------------------------------

    def _run_once(self) -> None:
        wake: list[int | None] = [self._maybe_update_metadata()]
        co = self.coordinator
        if co is not None:
            if co.coordinator is None and (co.state != "UNJOINED" or self.subscriptions.assignment):
                wake.append(co.ensure_coordinator())
            wake.append(co.maybe_send_join())
            co.maybe_finish_leader_sync()
        self._init_positions()
        self.fetcher.reset_offsets_if_needed()
        self.fetcher.send_fetches()
        wake.append(self.fetcher.next_retry())
        times = [w for w in wake if w is not None]
        if times:
            at = max(min(times), self.now + 1)
            if self._wake_at is None or self._wake_at <= self.now or at < self._wake_at:
                self._wake_at = at
                self.set_timer(_WAKE, at - self.now)

    def wanted_topics(self) -> list[str]:
        topics = set(self.subscriptions.subscription) | {tp.topic for tp in self.subscriptions.assignment}
        return sorted(topics | set(self.metadata.topics()))

    def _maybe_update_metadata(self) -> int | None:
        md = self.metadata
        pattern = self.subscriptions.pattern is not None
        for t in self.wanted_topics():
            md.add_topic(t)
        if not pattern and not md.topics():
            return None
        if self._metadata_in_flight:
            return None
        age_at = None if md.last_refresh_ms is None else md.last_refresh_ms + self.config["metadata_max_age_ms"]
        if not md.need_update and age_at is not None and age_at > self.now:
            return age_at
        not_before = 0 if md.last_attempt_ms is None else md.last_attempt_ms + self.config["retry_backoff_ms"]
        if not_before > self.now:
            return not_before
        node = self.least_loaded_node()
        if node is None:
            return self.now + self.config["retry_backoff_ms"]
        md.last_attempt_ms = self.now
        self._metadata_in_flight = True
        topics = None if pattern else tuple(md.topics())
        self.send_request(node, lambda corr: MetadataRequest(corr, topics), self._on_metadata,
                          lambda error: self._metadata_failed())
        return None

    def _metadata_failed(self) -> None:
        self._metadata_in_flight = False
        self.metadata.request_update()

    def _on_metadata(self, response: MetadataResponse) -> None:
        self._metadata_in_flight = False
        self.metadata.update(response, self.now)
        subs = self.subscriptions
        if subs.pattern is not None:
            self.all_topics = {t.name for t in response.topics if t.error == 0}
            exclude = self.config["exclude_internal_topics"]
            matched = {t for t in self.all_topics if subs.pattern.match(t) and not (exclude and t.startswith("__"))}
            if subs.change_subscription(matched) and self.coordinator is not None:
                for t in matched:
                    self.metadata.add_topic(t)
                if self.coordinator.state == "STABLE":
                    self.coordinator.request_rejoin(f"pattern now matches {sorted(matched)}")
        if self.coordinator is not None:
            self.coordinator.metadata_changed()

    def _init_positions(self) -> None:
        """Partitions without a position: committed offset first (with a group), else reset."""
        missing = [tp for tp in self.subscriptions.missing_positions()
                   if self.subscriptions.assignment[tp].reset_strategy is None]
        if not missing:
            return
        if self.coordinator is None:
            for tp in missing:
                self.subscriptions.assignment[tp].reset_strategy = self.subscriptions.default_reset
            return
        unchecked = [tp for tp in missing if not self.subscriptions.assignment[tp].committed_checked]
        if not unchecked or self._committed_in_flight:
            return
        if self.coordinator.coordinator is None:
            self.coordinator.ensure_coordinator()
            return
        self._committed_in_flight = True

        def done(committed) -> None:
            self._committed_in_flight = False
            if committed is None:
                return  # retried on the next round
            for tp in unchecked:
                state = self.subscriptions.assignment.get(tp)
                if state is None or state.position is not None or state.committed_checked:
                    continue
                state.committed_checked = True
                found = committed.get(tp)
                if found is not None and found.offset >= 0:
                    state.position = found.offset
                else:
                    state.reset_strategy = self.subscriptions.default_reset

        self.coordinator.fetch_committed(unchecked, done)

    # --- what the user thread asks ------------------------------------------------------------------------

    def has_work_for_user(self) -> bool:
        co = self.coordinator
        return bool(
            self.fetcher.has_buffered() or self.fetcher.errors or self.fatal or self.completed_commits
            or (co is not None and (co.needs_join_prepare() or co.pending_assignment is not None
                                    or co.auto_commit_due(self.now)))
        )
