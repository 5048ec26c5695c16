"""Consumer-group administration: kafka-python's ``KafkaAdminClient`` and ``kafka-consumer-groups``.

Theory of operation
-------------------
``KafkaAdminClient(bootstrap_servers=cluster)`` is, like the producer and the consumer, two
things: this object (the *user thread*) and an ``AdminClientNode`` in the cluster's world
(the client's *process*), which only sends requests and keeps the answers until they are
collected. Every method blocks by running the simulated world until its answer is there, so
"waiting" costs simulated time, never wall-clock time. Given a real address instead (or a
``launch()`` cluster), the same node runs in ``minikafka.wire.client_runtime``, on real time.

How each question is answered, as in Kafka:

- *Which brokers, which leaders*: a Metadata request to any broker (the bootstrap list is the
  cluster's brokers; a broker that refuses the connection or stays silent is skipped).
- *A group's coordinator*: FindCoordinator to any broker. The first one ever asked creates
  ``__consumer_offsets`` and answers COORDINATOR_NOT_AVAILABLE meanwhile; the client backs
  off ``retry_backoff_ms`` and asks again. The answer is cached per group and forgotten on
  NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a dead/silent coordinator (failover).
- *Groups*: ListGroups to every live broker (each lists the groups it coordinates);
  DescribeGroups, OffsetFetch, OffsetCommit and DeleteGroups to the group's coordinator.
- *Log ends*: ListOffsets (earliest -2, latest -1 = the high watermark, or a timestamp) to
  each partition's leader.
- *Topics and partitions*: CreateTopics, CreatePartitions and (Incremental)AlterConfigs to
  any broker, which forwards them to the active controller (``NewTopic``/``NewPartitions``,
  explicit replica assignments included: ``minikafka.clients.new_topic``).

Retriable failures (a refused connection, no answer within ``request_timeout_ms``, a moved
coordinator or leader) are retried after ``retry_backoff_ms`` until ``request_timeout_ms``
of simulated time has passed since the call began; then ``KafkaTimeoutError`` says which
operation gave up and why. Anything else is raised at once, with Kafka's error class.

``ConsumerGroupCommand`` is ``kafka-consumer-groups`` on top of it: ``list_groups``,
``describe_group`` (the offsets view, with LAG), ``describe_members`` (``--members``),
``describe_state`` (``--state``), ``reset_offsets`` (``--reset-offsets``, a dry run unless
``execute=True``) and ``delete_groups``. Each returns rows plus ``table()``, the text the
Kafka tool prints (column widths included), deterministic for a seed.

Invariants: an answer is matched to its request by correlation id *and* sender, so a late
answer to an abandoned request is dropped; offsets are only ever changed with a *simple*
commit (generation -1, member ""), which the coordinator accepts only while the group has no
members, so an admin can never overwrite an active consumer's progress.

Never: read the wall clock or sleep (waiting runs the world); be called from code the world
itself runs (a node's handler or a ``call_at`` action), since its methods run the world; change
a group that has active members (``reset_offsets`` refuses before sending anything).

Names and shapes: the methods the course uses are kafka-python 2.x's (``list_consumer_groups``,
``describe_consumer_groups`` returning ``GroupInformation`` namedtuples, ...), which most
tutorials show; kafka-python 3.0 renamed them (``list_groups``, ``describe_groups``,
``list_group_offsets``, ``delete_groups`` returning dicts), and those exist here too, with 3.0's
shapes. Configuration keys are kafka-python's; network-only keys are accepted and ignored.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from minikafka.clients.bootstrap import check_bootstrap_servers, cluster_for
from minikafka.clients.new_topic import creatable_topics, new_partitions
from minikafka.assignors import Assignment, Subscription
from minikafka.errors import (
    BrokerResponseError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    IllegalArgumentError,
    IllegalStateError,
    InvalidGroupIdError,
    KafkaConfigurationError,
    KafkaConnectionError,
    KafkaTimeoutError,
    LeaderNotAvailableError,
    NonEmptyGroupError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    NotLeaderForPartitionError,
    OffsetNotAvailableError,
    RequestTimedOutError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
    for_code,
)
from minikafka.messages import (
    CONFIG_APPEND,
    CONFIG_DELETE,
    CONFIG_SET,
    CONFIG_SUBTRACT,
    COORDINATOR_LOAD_IN_PROGRESS,
    AlterConfigsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DeleteRecordsRequest,
    COORDINATOR_NOT_AVAILABLE,
    NO_ERROR,
    NOT_COORDINATOR,
    NOT_LEADER_OR_FOLLOWER,
    UNKNOWN_MEMBER_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    DeleteGroupsRequest,
    DescribedGroup,
    DescribeGroupsRequest,
    Disconnected,
    FindCoordinatorRequest,
    ListGroupsRequest,
    ListOffsetsRequest,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from minikafka.group_state import COMPLETING_REBALANCE, DEAD, EMPTY, GROUP_STATES, PREPARING_REBALANCE
from minikafka.node import NodeId, StateMachine
from minikafka.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from minikafka.topic import OffsetAndMetadata, TopicPartition, validate_topic_name

OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state"})
MISSING = "-"  # Kafka's MISSING_COLUMN_VALUE

# Group states (Kafka's GroupState names, as DescribeGroups and ListGroups spell them) are
# minikafka.group_state's enum, the one the coordinator moves along its table of transitions:
# EMPTY, DEAD and the two rebalancing states are read here, GROUP_STATES validates --state.

# Failures that say "ask again, maybe elsewhere" rather than "no".
_RETRIABLE = (KafkaConnectionError, KafkaTimeoutError, CoordinatorNotAvailableError, NotCoordinatorError,
              CoordinatorLoadInProgressError, LeaderNotAvailableError, NotLeaderForPartitionError,
              RequestTimedOutError, NotEnoughReplicasError, OffsetNotAvailableError)
_COORDINATOR_MOVED = (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS)


# --- kafka-python's result shapes ------------------------------------------------------------------


class MemberInformation(NamedTuple):
    """One member of a described group (kafka-python 2.x's ``kafka.structs.MemberInformation``).
    ``member_metadata`` is the decoded ``Subscription`` and ``member_assignment`` the decoded
    ``Assignment`` while the group is Stable; ``b""`` otherwise (the coordinator sends them
    only then)."""

    member_id: str
    client_id: str
    client_host: str
    member_metadata: Any
    member_assignment: Any


class GroupInformation(NamedTuple):
    """A described group (kafka-python 2.x's ``kafka.structs.GroupInformation``). A group
    the coordinator does not know is ``state='Dead'`` with no members, as Kafka answers."""

    error_code: int
    group: str
    state: str
    protocol_type: str
    protocol: str
    members: list
    authorized_operations: Any


def _decode(decoder: Callable[[bytes], Any], data: bytes) -> Any:
    if not data:
        return data  # not Stable: the coordinator sends no metadata (kafka-python keeps b"")
    try:
        return decoder(data)
    except Exception:  # noqa: BLE001 - a foreign protocol's bytes: show them as they are
        return data


def _assigned(member: MemberInformation) -> list[TopicPartition]:
    a = member.member_assignment
    return sorted(a.partitions) if isinstance(a, Assignment) else []


# --- the client's process ---------------------------------------------------------------------------


class AdminClientNode(StateMachine):
    """The admin client's process: sends requests and keeps each answer (or the refused
    connection that replaces it) until the user thread collects it."""

    # A broker that dies with our request in flight resets the connection: the request fails
    # at once (and is retried elsewhere) instead of after request_timeout_ms (minikafka.sim.world).
    sees_connection_resets = True

    def __init__(self, node_id: NodeId) -> None:
        super().__init__(node_id)
        self.answers: dict[int, Any] = {}
        self._waiting: dict[int, NodeId] = {}  # correlation id -> the broker asked
        self._correlation = itertools.count(1)

    def request(self, dst: NodeId, make: Callable[[int], Any]) -> int:
        corr = next(self._correlation)
        self._waiting[corr] = dst
        self.send(dst, make(corr))
        return corr

    def forget(self, corr: int) -> None:
        """The user thread gave up on ``corr``: a late answer must not be kept forever."""
        self._waiting.pop(corr, None)
        self.answers.pop(corr, None)

    def on_message(self, src: NodeId, message: Any) -> None:
        if isinstance(message, Disconnected):
            for corr, dst in list(self._waiting.items()):
                if dst == message.node:
                    del self._waiting[corr]
                    self.answers[corr] = KafkaConnectionError(f"connection to broker {dst} refused")
            return
        corr = getattr(message, "correlation_id", None)
        if corr in self._waiting and self._waiting[corr] == src:
            del self._waiting[corr]
            self.answers[corr] = message


# --- KafkaAdminClient ---------------------------------------------------------------------------------

_NETWORK_ONLY = {
    "connections_max_idle_ms": 9 * 60 * 1000, "reconnect_backoff_ms": 50, "reconnect_backoff_max_ms": 30000,
    "max_in_flight_requests_per_connection": 5, "receive_message_max_bytes": 100_000_000,
    "receive_buffer_bytes": None, "send_buffer_bytes": None, "socket_options": None,
    "metadata_max_age_ms": 300000, "client_dns_lookup": "use_all_dns_ips", "security_protocol": "PLAINTEXT",
    "ssl_context": None, "ssl_check_hostname": True, "ssl_cafile": None, "ssl_certfile": None,
    "ssl_keyfile": None, "ssl_password": None, "ssl_crlfile": None, "api_version": None,
    "bootstrap_timeout_ms": 30000, "selector": None, "sasl_mechanism": None, "sasl_plain_username": None,
    "sasl_plain_password": None, "sasl_kerberos_name": None, "sasl_kerberos_service_name": "kafka",
    "sasl_kerberos_domain_name": None, "sasl_oauth_token_provider": None, "proxy_url": None,
    "socks5_proxy": None, "metric_reporters": [], "metrics_num_samples": 2, "metrics_sample_window_ms": 30000,
    "kafka_client": None,
}


class KafkaAdminClient:
    """Administer a minikafka cluster's consumer groups (kafka-python's ``KafkaAdminClient``).

    >>> admin = KafkaAdminClient(bootstrap_servers=cluster)                      # doctest: +SKIP
    >>> admin.list_consumer_groups()                                             # doctest: +SKIP
    [('dispatch', 'consumer')]
    """

    DEFAULT_CONFIG: dict[str, Any] = {
        "bootstrap_servers": "localhost",
        "client_id": None,  # None: the node's name, e.g. "admin-7" (kafka-python: 'kafka-python-<version>')
        "request_timeout_ms": 30000,
        "retry_backoff_ms": 100,
        **_NETWORK_ONLY,
    }

    def __init__(self, **configs: Any) -> None:
        unknown = sorted(set(configs) - set(self.DEFAULT_CONFIG))
        if unknown:
            raise KafkaConfigurationError(
                f"Unrecognized configs: {unknown} (keys are kafka-python's, e.g. request_timeout_ms)")
        self.config = {**self.DEFAULT_CONFIG, **configs}
        self._check_config()
        self._cluster = cluster_for(self.config["bootstrap_servers"], "admin", self.config)
        self._world = self._cluster.world
        self._closed = False
        self._brokers: list[int] = list(self._cluster.broker_ids)  # bootstrap; then what metadata says
        self._rotation = 0
        self._coordinators: dict[str, int] = {}
        self._node_id = self._cluster.add_client("admin", AdminClientNode)
        if self.config["client_id"] is None:
            self.config["client_id"] = str(self._node_id)

    def _check_config(self) -> None:
        c = self.config
        check_bootstrap_servers(c["bootstrap_servers"], "KafkaAdminClient")
        for key, minimum in (("request_timeout_ms", 1), ("retry_backoff_ms", 0)):
            v = c[key]
            if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
                raise KafkaConfigurationError(f"{key} must be an int >= {minimum}, not {v!r}")
        if c["client_id"] is not None and not isinstance(c["client_id"], str):
            raise KafkaConfigurationError(f"client_id must be a str or None, not {c['client_id']!r}")

    # --- the runtime ---------------------------------------------------------------------------------

    @property
    def node_id(self) -> NodeId:
        """This client's node in the world (name it in ``cluster.partition(...)``)."""
        return self._node_id

    @property
    def _node(self) -> AdminClientNode:
        if self._closed:
            raise IllegalStateError("KafkaAdminClient is closed")
        node = self._world.nodes.get(self._node_id)
        if node is None:
            raise IllegalStateError(f"the admin client's process {self._node_id!r} has crashed")
        return node

    def close(self) -> None:
        """Stop the client's process; the object is unusable afterwards."""
        if not self._closed:
            self._world.crash(self._node_id)
            self._closed = True

    def __enter__(self) -> "KafkaAdminClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<KafkaAdminClient client_id={self.config['client_id']}{' closed' if self._closed else ''}>"

    def _roundtrip(self, dst: int, make: Callable[[int], Any], what: str, deadline: int) -> Any:
        """One request to broker ``dst``; its answer, or KafkaConnectionError (refused) or
        KafkaTimeoutError (silent for ``request_timeout_ms``, or past ``deadline``)."""
        node = self._node
        corr = self._world.call_node(self._node_id, lambda n: n.request(dst, make))
        wait = max(0, min(self.config["request_timeout_ms"], deadline - self._world.now))
        if not self._world.run_until(lambda: corr in node.answers, wait):
            node.forget(corr)
            raise KafkaTimeoutError(f"no answer to {what} from broker {dst} within {wait} ms")
        answer = node.answers.pop(corr)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def _retrying(self, what: str, attempt: Callable[[int], Any], timeout_ms: int | None = None) -> Any:
        """Run ``attempt(deadline)`` until it returns, retrying retriable failures after
        ``retry_backoff_ms``, for at most ``timeout_ms`` (default ``request_timeout_ms``) of
        simulated time."""
        self._node  # a clear error if closed
        timeout = self.config["request_timeout_ms"] if timeout_ms is None else timeout_ms
        deadline = self._world.now + timeout
        while True:
            try:
                return attempt(deadline)
            except _RETRIABLE as e:
                if self._world.now + self.config["retry_backoff_ms"] >= deadline:
                    raise KafkaTimeoutError(f"{what} did not succeed within {timeout} ms (last error: {e})") from e
                self._world.advance(self.config["retry_backoff_ms"])

    def _any_broker(self, make: Callable[[int], Any], what: str, deadline: int) -> Any:
        """Ask the next broker in turn; one that is dead or silent is skipped next time."""
        brokers = self._brokers or list(self._cluster.broker_ids)
        broker = brokers[self._rotation % len(brokers)]
        try:
            return self._roundtrip(broker, make, what, deadline)
        except (KafkaConnectionError, KafkaTimeoutError):
            self._rotation += 1
            raise

    def _metadata(self, topics: Iterable[str] | None, deadline: int) -> MetadataResponse:
        topics = None if topics is None else tuple(topics)
        response = self._any_broker(lambda c: MetadataRequest(c, topics), "Metadata", deadline)
        if response.brokers:
            self._brokers = sorted(response.brokers)
        return response

    # --- coordinators ----------------------------------------------------------------------------------

    def _find_coordinator(self, group_id: str, deadline: int) -> int:
        if group_id in self._coordinators:
            return self._coordinators[group_id]
        response = self._any_broker(lambda c: FindCoordinatorRequest(c, group_id),
                                    f"FindCoordinator({group_id!r})", deadline)
        if response.error != NO_ERROR:
            raise for_code(response.error)(response.error_message or f"no coordinator for group {group_id!r} yet")
        self._coordinators[group_id] = response.node_id
        return response.node_id

    def _to_coordinator(self, group_id: str, make: Callable[[int], Any], what: str, deadline: int,
                        coordinator: int | None = None) -> tuple[int, Any]:
        """Send to the group's coordinator (found, or ``coordinator`` if given); a dead or
        silent coordinator is forgotten so that the retry finds the new one."""
        node = self._find_coordinator(group_id, deadline) if coordinator is None else coordinator
        try:
            return node, self._roundtrip(node, make, what, deadline)
        except (KafkaConnectionError, KafkaTimeoutError):
            self._coordinators.pop(group_id, None)
            raise

    def _coordinator_error(self, group_id: str, error: int, what: str) -> None:
        """Raise for ``error``; a moved coordinator is forgotten (the error is retriable)."""
        if error == NO_ERROR:
            return
        if error in _COORDINATOR_MOVED:
            self._coordinators.pop(group_id, None)
        raise for_code(error)(f"{what} for group {group_id!r}")

    @staticmethod
    def _check_group_id(group_id: Any) -> str:
        if not isinstance(group_id, str) or not group_id:
            raise InvalidGroupIdError(f"a group id must be a non-empty str, not {group_id!r}")
        return group_id

    def _check_group_ids(self, group_ids: Any) -> list[str]:
        if isinstance(group_ids, str):
            raise IllegalArgumentError(f"group_ids must be a list of group ids, not the str {group_ids!r}; "
                                       f"write [{group_ids!r}]")
        return [self._check_group_id(g) for g in group_ids]

    # --- listing groups ----------------------------------------------------------------------------------

    def _list_groups_raw(self, broker_ids: Iterable[int] | None) -> list[tuple[str, str, str]]:
        def attempt(deadline: int) -> list[tuple[str, str, str]]:
            brokers = list(broker_ids) if broker_ids is not None else list(self._metadata((), deadline).brokers)
            found: dict[str, tuple[str, str, str]] = {}
            for b in sorted(brokers):
                response = self._roundtrip(b, lambda c: ListGroupsRequest(c), f"ListGroups (broker {b})", deadline)
                if response.error != NO_ERROR:
                    raise for_code(response.error)(f"ListGroups failed on broker {b}")
                for group_id, protocol_type, state in response.groups:
                    found[group_id] = (group_id, protocol_type, state)
            return [found[g] for g in sorted(found)]
        return self._retrying("ListGroups", attempt)

    def list_consumer_groups(self, broker_ids: Iterable[int] | None = None) -> list[tuple[str, str]]:
        """Every group the brokers coordinate, as ``[(group_id, protocol_type)]`` sorted by
        id (kafka-python 2.x). ``protocol_type`` is "consumer" for groups of consumers and ""
        for a group that only has offsets (made by an admin's commit). ``broker_ids``: ask
        only these brokers (each lists the groups it coordinates)."""
        return [(g, t) for g, t, _ in self._list_groups_raw(broker_ids)]

    def list_groups(self, broker_ids: Iterable[int] | None = None, states_filter: Iterable[str] | None = None,
                    types_filter: Iterable[str] | None = None) -> list[dict]:
        """kafka-python 3.0's ``list_groups``: ``[{'group_id', 'protocol_type', 'group_state',
        'group_type'}]``. ``states_filter``: e.g. ``['Stable', 'Empty']`` (any case);
        every group here uses the classic protocol (``group_type`` 'classic')."""
        states = None if states_filter is None else {_state_name(s) for s in states_filter}
        types = None if types_filter is None else {str(t).lower() for t in types_filter}
        out = []
        for g, t, s in self._list_groups_raw(broker_ids):
            if (states is None or s in states) and (types is None or "classic" in types):
                out.append({"group_id": g, "protocol_type": t, "group_state": s, "group_type": "classic"})
        return out

    # --- describing groups --------------------------------------------------------------------------------

    def _describe_one(self, group_id: str, coordinator: int | None) -> tuple[int, DescribedGroup]:
        def attempt(deadline: int) -> tuple[int, DescribedGroup]:
            node, response = self._to_coordinator(
                group_id, lambda c: DescribeGroupsRequest(c, (group_id,)), f"DescribeGroups({group_id!r})",
                deadline, coordinator)
            described = response.groups[0]
            self._coordinator_error(group_id, described.error, "DescribeGroups")
            return node, described
        return self._retrying(f"DescribeGroups({group_id!r})", attempt)

    @staticmethod
    def _group_information(described: DescribedGroup) -> GroupInformation:
        consumer = described.protocol_type in ("consumer", "")
        members = [
            MemberInformation(m.member_id, m.client_id, m.client_host,
                              _decode(Subscription.decode, m.metadata) if consumer else m.metadata,
                              _decode(Assignment.decode, m.assignment) if consumer else m.assignment)
            for m in described.members]
        return GroupInformation(described.error, described.group_id, described.state, described.protocol_type,
                                described.protocol, members, None)

    def describe_consumer_groups(self, group_ids: Iterable[str], group_coordinator_id: int | None = None,
                                 include_authorized_operations: bool = False) -> list[GroupInformation]:
        """One ``GroupInformation`` per group id, in the order given (kafka-python 2.x):
        DescribeGroups at each group's coordinator, members' subscriptions and assignments
        decoded. There are no ACLs here: ``authorized_operations`` is always None."""
        return [self._group_information(self._describe_one(g, group_coordinator_id)[1])
                for g in self._check_group_ids(group_ids)]

    def describe_groups(self, group_ids: Iterable[str], group_coordinator_id: int | None = None,
                        include_authorized_operations: bool = False) -> dict[str, dict]:
        """kafka-python 3.0's ``describe_groups``: ``{group_id: {group_id, group_state,
        protocol_type, protocol_data, members: [{member_id, group_instance_id, client_id,
        client_host, member_metadata, member_assignment}], authorized_operations, error}}``."""
        out = {}
        for info in self.describe_consumer_groups(group_ids, group_coordinator_id):
            out[info.group] = {
                "group_id": info.group, "group_state": info.state, "protocol_type": info.protocol_type,
                "protocol_data": info.protocol,
                "members": [{"member_id": m.member_id, "group_instance_id": None, "client_id": m.client_id,
                             "client_host": m.client_host, "member_metadata": m.member_metadata,
                             "member_assignment": m.member_assignment} for m in info.members],
                "authorized_operations": None, "error": None,
            }
        return out

    def _coordinator_of(self, group_id: str) -> int:
        """The broker coordinating ``group_id`` (found, with retries)."""
        return self._retrying(f"FindCoordinator({group_id!r})", lambda d: self._find_coordinator(group_id, d))

    # --- committed offsets ---------------------------------------------------------------------------------

    def list_consumer_group_offsets(self, group_id: str, group_coordinator_id: int | None = None,
                                    partitions: Iterable[TopicPartition] | None = None
                                    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets, ``{TopicPartition: OffsetAndMetadata}`` sorted by
        partition (kafka-python 2.x). Without ``partitions``, every partition with an offset;
        with them, each one asked for, offset -1 where nothing is committed. An unknown
        group has no offsets: ``{}``."""
        self._check_group_id(group_id)
        wanted = None if partitions is None else tuple(sorted({_as_tp(tp) for tp in partitions}))

        def attempt(deadline: int) -> dict[TopicPartition, OffsetAndMetadata]:
            _, response = self._to_coordinator(
                group_id, lambda c: OffsetFetchRequest(c, group_id, wanted), f"OffsetFetch({group_id!r})",
                deadline, group_coordinator_id)
            self._coordinator_error(group_id, response.error, "OffsetFetch")
            out = {}
            for p in response.partitions:
                tp = TopicPartition(p.topic, p.partition)
                if p.error != NO_ERROR:
                    raise for_code(p.error)(f"OffsetFetch for {tp} of group {group_id!r}")
                out[tp] = OffsetAndMetadata(p.offset, p.metadata or "", p.leader_epoch)
            return dict(sorted(out.items()))
        return self._retrying(f"OffsetFetch({group_id!r})", attempt)

    def list_group_offsets(self, group_specs: Any) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
        """kafka-python 3.0's ``list_group_offsets``: ``{group_id: partitions or None}`` (or a
        group id, or a list of them) -> ``{group_id: {TopicPartition: OffsetAndMetadata}}``."""
        if isinstance(group_specs, str):
            group_specs = {group_specs: None}
        elif not isinstance(group_specs, Mapping):
            group_specs = {g: None for g in group_specs}
        if not group_specs:
            raise IllegalArgumentError("Empty group_specs!")
        return {g: self.list_consumer_group_offsets(g, partitions=parts) for g, parts in group_specs.items()}

    def alter_consumer_group_offsets(self, group_id: str, offsets: Mapping[Any, Any],
                                     group_coordinator_id: int | None = None
                                     ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Set the group's committed offsets (Java's ``alterConsumerGroupOffsets``): a simple
        OffsetCommit (generation -1, member ""), which the coordinator accepts only while the
        group has no members. ``offsets``: ``{TopicPartition: OffsetAndMetadata or int}``.
        Returns what was committed; raises ``UnknownMemberIdError`` if the group is active."""
        self._check_group_id(group_id)
        if not isinstance(offsets, Mapping):
            raise IllegalArgumentError(f"offsets must be a dict {{TopicPartition: OffsetAndMetadata}}, not {offsets!r}")
        committed = {}
        for tp, om in offsets.items():
            tp = _as_tp(tp)
            if isinstance(om, int) and not isinstance(om, bool):
                om = OffsetAndMetadata(om, "", -1)
            elif not isinstance(om, OffsetAndMetadata):
                om = OffsetAndMetadata(*om)
            if not isinstance(om.offset, int) or isinstance(om.offset, bool) or om.offset < 0:
                raise IllegalArgumentError(f"the offset for {tp} must be an int >= 0, not {om.offset!r}")
            committed[tp] = OffsetAndMetadata(om.offset, om.metadata or "",
                                              -1 if om.leader_epoch is None else om.leader_epoch)
        committed = dict(sorted(committed.items()))
        if not committed:
            return {}
        parts = tuple(OffsetCommitPartition(tp.topic, tp.partition, om.offset, om.leader_epoch, om.metadata)
                      for tp, om in committed.items())

        def attempt(deadline: int) -> None:
            _, response = self._to_coordinator(
                group_id, lambda c: OffsetCommitRequest(c, group_id, -1, "", parts), f"OffsetCommit({group_id!r})",
                deadline, group_coordinator_id)
            errors = {TopicPartition(t, p): e for t, p, e in response.partitions if e != NO_ERROR}
            if not errors:
                return
            error = next(iter(errors.values()))
            if error == UNKNOWN_MEMBER_ID:
                raise UnknownMemberIdError(
                    f"group {group_id!r} has active members: its offsets can only be altered while it has "
                    "none (stop or close its consumers first)")
            self._coordinator_error(group_id, error, f"OffsetCommit of {sorted(errors)}")
        self._retrying(f"OffsetCommit({group_id!r})", attempt)
        return committed

    # --- deleting groups -------------------------------------------------------------------------------------

    def delete_consumer_groups(self, group_ids: Iterable[str], group_coordinator_id: int | None = None
                               ) -> list[tuple[str, type[BrokerResponseError] | None]]:
        """Delete groups (DeleteGroups at each coordinator): ``[(group_id, error)]`` in the
        order given, ``error`` None when deleted, else the error class, e.g.
        ``NonEmptyGroupError`` (the group has members) or ``GroupIdNotFoundError``
        (kafka-python 2.x's shape, with None for its ``NoError``)."""
        results = []
        for g in self._check_group_ids(group_ids):
            def attempt(deadline: int, g: str = g) -> int:
                _, response = self._to_coordinator(
                    g, lambda c: DeleteGroupsRequest(c, (g,)), f"DeleteGroups({g!r})", deadline, group_coordinator_id)
                error = dict(response.results).get(g, NO_ERROR)
                if error in _COORDINATOR_MOVED:
                    self._coordinator_error(g, error, "DeleteGroups")
                return error
            error = self._retrying(f"DeleteGroups({g!r})", attempt)
            results.append((g, None if error == NO_ERROR else for_code(error)))
        return results

    def delete_groups(self, group_ids: Iterable[str], group_coordinator_id: int | None = None) -> dict[str, str]:
        """kafka-python 3.0's ``delete_groups``: ``{group_id: 'OK' or the error's class name}``."""
        return {g: "OK" if e is None else e.__name__
                for g, e in self.delete_consumer_groups(group_ids, group_coordinator_id)}

    # --- topics and log offsets --------------------------------------------------------------------------------

    def list_topics(self) -> list[str]:
        """Every topic's name, internal ones (``__consumer_offsets``) included, sorted."""
        response = self._retrying("Metadata", lambda d: self._metadata(None, d))
        return sorted(t.name for t in response.topics)

    def describe_topics(self, topics: Iterable[str] | None = None) -> list[dict]:
        """Metadata of ``topics`` (all if None), in kafka-python 3.0's shape: ``[{'error_code',
        'name', 'is_internal', 'partitions': [{'error_code', 'partition_index', 'leader_id',
        'leader_epoch', 'replica_nodes', 'isr_nodes', 'offline_replicas'}]}]``."""
        if isinstance(topics, str):
            topics = [topics]
        names = None if topics is None else [validate_topic_name(t) for t in topics]
        response = self._retrying("Metadata", lambda d: self._metadata(names, d))
        live = set(response.brokers)
        return [{
            "error_code": t.error, "name": t.name, "is_internal": t.name in INTERNAL_TOPICS,
            "partitions": [{"error_code": p.error, "partition_index": p.partition, "leader_id": p.leader,
                            "leader_epoch": p.leader_epoch, "replica_nodes": list(p.replicas),
                            "isr_nodes": list(p.isr), "offline_replicas": [r for r in p.replicas if r not in live]}
                           for p in t.partitions],
        } for t in response.topics]

    def _partitions_at(self, topics: Iterable[str], deadline: int) -> dict[str, dict[int, int]]:
        """{topic: {partition: leader (-1: none)}} from one Metadata answer;
        UnknownTopicOrPartitionError for a topic that does not exist."""
        names = sorted(set(topics))
        if not names:
            return {}
        out = {}
        for t in self._metadata(names, deadline).topics:
            if t.error == UNKNOWN_TOPIC_OR_PARTITION:
                raise UnknownTopicOrPartitionError(f"topic {t.name!r} does not exist")
            out[t.name] = {p.partition: p.leader for p in t.partitions}
        return out

    def _partitions(self, topics: Iterable[str]) -> dict[str, dict[int, int]]:
        topics = list(topics)
        return self._retrying("Metadata", lambda d: self._partitions_at(topics, d))

    def _list_offsets(self, partitions: Iterable[TopicPartition], timestamp: int, *,
                      skip_leaderless: bool = False) -> dict[TopicPartition, int | None]:
        """ListOffsets at each partition's leader: ``{tp: offset}``, -1 where no record has a
        timestamp at or after ``timestamp``. With ``skip_leaderless`` a partition without a
        leader gets None at once (``kafka-consumer-groups --describe`` shows '-')."""
        tps = sorted(set(partitions))
        if not tps:
            return {}

        def attempt(deadline: int) -> dict[TopicPartition, int | None]:
            leaders = self._partitions_at((tp.topic for tp in tps), deadline)
            out: dict[TopicPartition, int | None] = {}
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in tps:
                leader = leaders[tp.topic].get(tp.partition)
                if leader is None:
                    raise UnknownTopicOrPartitionError(f"partition {tp} does not exist")
                if leader < 0:
                    if skip_leaderless:
                        out[tp] = None
                        continue
                    raise LeaderNotAvailableError(f"partition {tp} has no leader")
                by_leader.setdefault(leader, []).append(tp)
            for leader, group in sorted(by_leader.items()):
                request = tuple((tp.topic, tp.partition, timestamp) for tp in group)
                response = self._roundtrip(leader, lambda c: ListOffsetsRequest(c, request),
                                           f"ListOffsets (broker {leader})", deadline)
                for topic, partition, error, _ts, offset in response.partitions:
                    tp = TopicPartition(topic, partition)
                    if error in (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION):
                        # Our metadata is stale: the leader moved. Ask again.
                        raise NotLeaderForPartitionError(f"broker {leader} no longer leads {tp}")
                    if error != NO_ERROR:
                        raise for_code(error)(f"ListOffsets for {tp}")
                    out[tp] = offset
            return dict(sorted(out.items()))
        return self._retrying("ListOffsets", attempt)

    # --- changing topics: partitions and configs -------------------------------------------------------

    def _to_controller(self, make: Callable[[int], Any], what: str, timeout_ms: int | None = None) -> Any:
        """Ask any broker: it forwards to the active controller and answers once the change is
        in its own metadata (as KRaft brokers do for kafka-python's admin client)."""
        return self._retrying(what, lambda deadline: self._any_broker(make, what, deadline), timeout_ms)

    def create_topics(self, new_topics: Any, timeout_ms: int | None = None, validate_only: bool = False,
                      raise_errors: bool = True) -> dict[str, list[dict]]:
        """Create topics (CreateTopics through any broker, which forwards it to the active
        controller), as kafka-python 3.0 does: a list of ``NewTopic(name, num_partitions,
        replication_factor, replica_assignments, topic_configs)`` (-1: the broker's default),
        a list of names, or ``{name: {'num_partitions': ..., 'replication_factor': ...,
        'assignments': {partition: [brokers]}, 'configs': {...}}}``. With
        ``replica_assignments`` the replicas are yours, the first of each list its preferred
        leader; the counts must then be -1 and the controller judges the lists as Kafka's does
        (``minikafka.replica_assignment``). The first refused topic raises its Kafka error
        (``TopicAlreadyExistsError``, ``InvalidReplicationAssignmentError``, ...) unless
        ``raise_errors=False``. Returns kafka-python's shape, the fields minikafka answers:
        ``{'topics': [{'name': ..., 'error_code': 0, 'error_message': None}, ...]}``.
        ``timeout_ms``: how long to keep trying (simulated ms; default ``request_timeout_ms``)."""
        topics = creatable_topics(new_topics)
        if validate_only:
            raise IllegalArgumentError("validate_only is not supported: minikafka's controller would really create "
                                       "the topics (the wire broker answers INVALID_REQUEST for it too)")
        if timeout_ms is not None and (not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool)
                                       or timeout_ms < 1):
            raise IllegalArgumentError(f"timeout_ms must be an int >= 1 or None, not {timeout_ms!r}")
        response = self._to_controller(lambda c: CreateTopicsRequest(c, topics), "CreateTopics", timeout_ms)
        if raise_errors:
            for topic, error, message in response.results:
                if error != NO_ERROR:
                    raise for_code(error)(message or f"CreateTopics for {topic!r}")
        return {"topics": [{"name": topic, "error_code": error, "error_message": message}
                           for topic, error, message in response.results]}

    def delete_topics(self, topics: Iterable[str], timeout_ms: int | None = None,
                      raise_errors: bool = True) -> dict[str, list[dict]]:
        """Delete topics (DeleteTopics through any broker, which forwards it to the active
        controller), as kafka-python 3.0 does. The first refused topic raises its Kafka error
        (``UnknownTopicOrPartitionError`` for one that does not exist) unless
        ``raise_errors=False``. Returns ``{'topics': [{'name': ..., 'error_code': 0,
        'error_message': None}, ...]}``. ``timeout_ms``: how long to keep trying (default
        ``request_timeout_ms``)."""
        if isinstance(topics, str):
            raise IllegalArgumentError(f"topics must be a list of names, not the string {topics!r}")
        names = tuple(validate_topic_name(t) for t in topics)
        if not names:
            return {"topics": []}
        if timeout_ms is not None and (not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool)
                                       or timeout_ms < 1):
            raise IllegalArgumentError(f"timeout_ms must be an int >= 1 or None, not {timeout_ms!r}")
        wait = self.config["request_timeout_ms"] if timeout_ms is None else timeout_ms
        response = self._to_controller(lambda c: DeleteTopicsRequest(c, names, wait), "DeleteTopics", timeout_ms)
        if raise_errors:
            for topic, error, message in response.results:
                if error != NO_ERROR:
                    raise for_code(error)(message or f"DeleteTopics for {topic!r}")
        return {"topics": [{"name": topic, "error_code": error, "error_message": message}
                           for topic, error, message in response.results]}

    def create_partitions(self, topic_partitions: Mapping[str, Any], validate_only: bool = False) -> dict[str, str]:
        """Grow topics to a new total partition count: ``create_partitions({'orders': 6})``
        (kafka-python's; ``NewPartitions(6, new_assignments=[[2, 3]])`` or ``{'count': 6,
        'assignments': [[2, 3]]}`` name the new partitions' replicas, one list per new partition).
        Partitions are only ever added: a count that is not an increase raises
        ``InvalidPartitionsError``; an unknown topic ``UnknownTopicOrPartitionError``; replicas
        the controller cannot use ``InvalidReplicationAssignmentError``. Keys already written
        keep their partition; *new* records of a key may now hash elsewhere.
        Returns ``{topic: 'OK'}``."""
        if not isinstance(topic_partitions, Mapping):
            raise IllegalArgumentError(f"topic_partitions must be a dict {{topic: new total count}}, "
                                       f"not {topic_partitions!r}")
        topics, assignments = [], []
        for topic, spec in topic_partitions.items():
            count, assigned = new_partitions(topic, spec)
            topics.append((validate_topic_name(topic), count))
            assignments.append(assigned)
        assignments = tuple(assignments) if any(a is not None for a in assignments) else ()
        response = self._to_controller(
            lambda c: CreatePartitionsRequest(c, tuple(topics), validate_only, assignments), "CreatePartitions")
        for topic, error, message in response.results:
            if error != NO_ERROR:
                raise for_code(error)(message or f"CreatePartitions for {topic!r}")
        return {topic: "OK" for topic, _, _ in response.results}

    def alter_configs(self, config_resources: Iterable[Any], validate_only: bool = False) -> dict[str, dict[str, str]]:
        """Change topic configs, as IncrementalAlterConfigs does (kafka-python 3.0's
        ``alter_configs``): each resource a ``ConfigResource('topic', name, {key: value})``,
        a value of None (or ``('DELETE', None)``) putting the key back to the broker's
        default. The running logs take the new values at once. Returns kafka-python's shape:
        ``{'topic': {name: 'OK' or '[Error 40] InvalidConfigurationError: why'}}``."""
        resources = []
        for res in config_resources:
            rtype = _resource_type(res.resource_type)
            entries = []
            for key, change in dict(res.configs or {}).items():
                op, value = change if isinstance(change, tuple) else (CONFIG_SET, change)
                op = _config_op(op)
                if value is None:
                    op = CONFIG_DELETE
                entries.append((key, op, None if op == CONFIG_DELETE else str(value)))
            resources.append((rtype, res.name, tuple(entries)))
        response = self._to_controller(lambda c: AlterConfigsRequest(c, tuple(resources), True, validate_only),
                                       "IncrementalAlterConfigs")
        out: dict[str, dict[str, str]] = {}
        for rtype, name, error, message in response.results:
            kind = {2: "topic", 4: "broker"}.get(rtype, str(rtype))
            if error == NO_ERROR:
                out.setdefault(kind, {})[name] = "OK"
            else:
                cls = for_code(error)
                out.setdefault(kind, {})[name] = f"[Error {error}] {cls.__name__}: {message}"
        return out

    def delete_records(self, records_to_delete: Mapping[Any, int]) -> dict[TopicPartition, dict]:
        """DeleteRecords at each partition's leader: ``{TopicPartition('t', 0): 100}`` makes
        offset 100 the partition's first (its log start offset, the "low watermark"); -1
        means the high watermark (everything committed goes). A consumer positioned below it
        then gets OFFSET_OUT_OF_RANGE and ``auto_offset_reset`` decides. An offset past the
        high watermark raises ``OffsetOutOfRangeError``. Returns kafka-python's shape:
        ``{tp: {'low_watermark': new log start offset}}``."""
        wanted = {_as_tp(tp): offset for tp, offset in dict(records_to_delete).items()}
        for tp, offset in wanted.items():
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < -1:
                raise IllegalArgumentError(f"the offset to delete before in {tp} must be an int >= -1, not {offset!r}")

        def attempt(deadline: int) -> dict[TopicPartition, dict]:
            leaders = self._partitions_at((tp.topic for tp in wanted), deadline)
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(wanted):
                leader = leaders[tp.topic].get(tp.partition)
                if leader is None:
                    raise UnknownTopicOrPartitionError(f"partition {tp} does not exist")
                if leader < 0:
                    raise LeaderNotAvailableError(f"partition {tp} has no leader")
                by_leader.setdefault(leader, []).append(tp)
            out: dict[TopicPartition, dict] = {}
            for leader, group in sorted(by_leader.items()):
                request = tuple((tp.topic, tp.partition, wanted[tp]) for tp in group)
                response = self._roundtrip(leader, lambda c: DeleteRecordsRequest(c, request),
                                           f"DeleteRecords (broker {leader})", deadline)
                for topic, partition, low, error in response.results:
                    tp = TopicPartition(topic, partition)
                    if error in (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION):
                        raise NotLeaderForPartitionError(f"broker {leader} no longer leads {tp}")
                    if error != NO_ERROR:
                        raise for_code(error)(f"DeleteRecords for {tp} before offset {wanted[tp]}: past its "
                                              "high watermark" if error == 1 else f"DeleteRecords for {tp}")
                    out[tp] = {"low_watermark": low}
            return dict(sorted(out.items()))
        return self._retrying("DeleteRecords", attempt)


class ConfigResource(NamedTuple):
    """kafka-python's ``ConfigResource``: ``ConfigResource('topic', 'orders', {'retention.ms': '60000'})``."""

    resource_type: Any  # 'topic' / 'broker', or Kafka's number (2 / 4)
    name: str
    configs: Mapping[str, Any] | None = None


def _resource_type(value: Any) -> int:
    name = getattr(value, "name", value)
    if isinstance(name, str) and name.lower() in ("topic", "broker"):
        return 2 if name.lower() == "topic" else 4
    if name in (2, 4):
        return name
    raise IllegalArgumentError(f"a config resource type is 'topic' or 'broker', not {value!r}")


def _config_op(value: Any) -> int:
    ops = {"SET": CONFIG_SET, "DELETE": CONFIG_DELETE, "APPEND": CONFIG_APPEND, "SUBTRACT": CONFIG_SUBTRACT}
    name = getattr(value, "name", value)
    if isinstance(name, str) and name.upper() in ops:
        return ops[name.upper()]
    if name in ops.values():
        return name
    raise IllegalArgumentError(f"a config operation is one of {', '.join(ops)}, not {value!r}")


def _as_tp(tp: Any) -> TopicPartition:
    try:
        topic, partition = tp
    except (TypeError, ValueError):
        raise IllegalArgumentError(f"expected a TopicPartition(topic, partition), not {tp!r}") from None
    validate_topic_name(topic)
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise IllegalArgumentError(f"a partition number must be an int >= 0, not {partition!r} (in {tp!r})")
    return TopicPartition(topic, partition)


def _state_name(state: Any) -> str:
    by_lower = {s.lower(): s for s in GROUP_STATES}
    key = str(state).replace("-", "").replace("_", "").lower()
    if key not in by_lower:
        raise IllegalArgumentError(f"Invalid state {state!r}. Valid states are: {', '.join(GROUP_STATES)}")
    return by_lower[key]


# --- kafka-consumer-groups -------------------------------------------------------------------------------


class PartitionAssignmentState(NamedTuple):
    """A row of ``kafka-consumer-groups --describe`` (Kafka's ``PartitionAssignmentState``);
    None is what the tool prints as '-'."""

    group: str
    topic: str | None
    partition: int | None
    current_offset: int | None  # the committed offset
    log_end_offset: int | None  # the high watermark
    lag: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None
    leader_epoch: int | None = None  # of the committed offset (shown with verbose)


class MemberAssignmentState(NamedTuple):
    """A row of ``--describe --members`` (Kafka's ``MemberAssignmentState``)."""

    group: str
    consumer_id: str
    host: str
    client_id: str
    num_partitions: int
    assignment: tuple[TopicPartition, ...]


class GroupStateInformation(NamedTuple):
    """The row of ``--describe --state`` (Kafka's command calls it ``GroupInformation``)."""

    group: str
    coordinator: str  # "broker-2  (2)": Kafka prints "host:port  (id)"
    coordinator_id: int
    assignment_strategy: str
    state: str
    num_members: int


class OffsetReset(NamedTuple):
    """A row of a ``--reset-offsets`` plan."""

    group: str
    topic: str
    partition: int
    new_offset: int


def _cell(v: Any) -> str:
    return MISSING if v is None else str(v)


def _format(fmt_widths: list[int | None], values: Iterable[Any]) -> str:
    """Java's ``%-Ns`` columns joined by one space (a None width: no padding); trailing
    blanks trimmed, so the text is stable under copy and paste."""
    cells = [_cell(v) if w is None else _cell(v).ljust(w) for w, v in zip(fmt_widths, values)]
    return " ".join(cells).rstrip()


class _Report:
    """Rows plus the text ``kafka-consumer-groups`` prints for them."""

    rows: list

    def table(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.table()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython/Jupyter show the table
        p.text(self.table())

    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def _state_notice(group: str, state: str) -> str | None:
    if state == EMPTY:
        return f"Consumer group '{group}' has no active members."
    if state in (PREPARING_REBALANCE, COMPLETING_REBALANCE):
        return f"Warning: Consumer group '{group}' is rebalancing."
    return None


@dataclass
class GroupListing(_Report):
    """``kafka-consumer-groups --list --state``: ``rows`` are ``(group, state)``."""

    rows: list[tuple[str, str]]

    @property
    def groups(self) -> list[str]:
        """The names alone (what ``--list`` prints)."""
        return [g for g, _ in self.rows]

    def table(self) -> str:
        width = max([15] + [len(g) for g, _ in self.rows]) + 10
        return "\n".join(_format([width, 20], r) for r in [("GROUP", "STATE"), *self.rows])


@dataclass
class GroupOffsets(_Report):
    """``kafka-consumer-groups --describe --group g``: one row per partition."""

    group: str
    state: str
    rows: list[PartitionAssignmentState]
    verbose: bool = False

    @property
    def notice(self) -> str | None:
        """What the tool prints on stderr before the table ("... has no active members.")."""
        return _state_notice(self.group, self.state)

    @property
    def total_lag(self) -> int:
        return sum(r.lag for r in self.rows if r.lag is not None)

    def table(self) -> str:
        lines = [self.notice, ""] if self.notice else []
        if self.rows:
            g = max([15] + [len(r.group) for r in self.rows])
            t = max([15] + [len(_cell(r.topic)) for r in self.rows])
            c = max([15] + [len(_cell(r.consumer_id)) for r in self.rows])
            h = max([15] + [len(_cell(r.host)) for r in self.rows])
            if self.verbose:
                widths = [g, t, 10, 15, 15, 15, 15, c, h, None]
                lines.append(_format(widths, ("GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET",
                                              "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID")))
                lines += [_format(widths, (r.group, r.topic, r.partition, r.leader_epoch, r.current_offset,
                                           r.log_end_offset, r.lag, r.consumer_id, r.host, r.client_id))
                          for r in self.rows]
            else:
                widths = [g, t, 10, 15, 15, 15, c, h, None]
                lines.append(_format(widths, ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                                              "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID")))
                lines += [_format(widths, r[:9]) for r in self.rows]
        return "\n".join(lines).rstrip("\n")


def _assignment_string(assignment: Iterable[TopicPartition]) -> str:
    """Kafka 3.x's ``--members --verbose`` ASSIGNMENT cell: ``t1(0,2), t2(1)``."""
    by_topic: dict[str, list[int]] = {}
    for tp in assignment:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if not by_topic:
        return MISSING
    return ", ".join(sorted(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in by_topic.items()))


@dataclass
class GroupMembers(_Report):
    """``kafka-consumer-groups --describe --members [--verbose]``: one row per member."""

    group: str
    state: str
    rows: list[MemberAssignmentState]
    verbose: bool = False

    @property
    def notice(self) -> str | None:
        return _state_notice(self.group, self.state)

    def table(self) -> str:
        lines = [self.notice, ""] if self.notice else []
        widths = [max([15] + [len(r.group) for r in self.rows]), max([15] + [len(r.consumer_id) for r in self.rows]),
                  max([15] + [len(r.host) for r in self.rows]), max([15] + [len(r.client_id) for r in self.rows]), 15]
        header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        if self.verbose:
            widths.append(None)
            header.append("ASSIGNMENT")
        lines.append(_format(widths, header))
        for r in self.rows:
            cells = [r.group, r.consumer_id, r.host, r.client_id, r.num_partitions]
            if self.verbose:
                cells.append(_assignment_string(r.assignment))
            lines.append(_format(widths, cells))
        return "\n".join(lines)


@dataclass
class GroupStateReport(_Report):
    """``kafka-consumer-groups --describe --state``: the group's one row."""

    rows: list[GroupStateInformation]

    @property
    def state(self) -> str:
        return self.rows[0].state

    def table(self) -> str:
        r = self.rows[0]
        notice = _state_notice(r.group, r.state)
        widths = [max(15, len(r.group)), max(25, len(r.coordinator)), 20, 20, None]
        lines = [notice, ""] if notice else []
        lines.append(_format(widths, ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")))
        lines.append(_format(widths, (r.group, r.coordinator, r.assignment_strategy or MISSING, r.state,
                                      r.num_members)))
        return "\n".join(lines)


@dataclass
class ResetPlan(_Report):
    """``kafka-consumer-groups --reset-offsets``: the new offset of each partition; applied
    (``executed``) only with ``execute=True``, else a dry run."""

    group: str
    rows: list[OffsetReset]
    executed: bool
    warnings: list[str] = field(default_factory=list)

    @property
    def offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {TopicPartition(r.topic, r.partition): OffsetAndMetadata(r.new_offset, "", -1) for r in self.rows}

    def table(self) -> str:
        lines = list(self.warnings)
        if self.rows:
            widths = [max([15, len(self.group)]), max([15] + [len(r.topic) for r in self.rows]), 10, None]
            lines.append(_format(widths, ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")))
            lines += [_format(widths, r) for r in self.rows]
        return "\n".join(lines)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _timestamp_ms(when: Any) -> int:
    """A ``--to-datetime`` value as ms since the epoch. The simulated clock starts at 0, i.e.
    1970-01-01T00:00:00Z; a datetime without a time zone is taken as UTC (Kafka would take
    the machine's zone, which would make notebooks differ between machines)."""
    if isinstance(when, bool):
        raise IllegalArgumentError(
            f"to_datetime must be a datetime, an ISO 8601 str or ms since the epoch, not {when!r}")
    if isinstance(when, int):
        ms = when
    else:
        if isinstance(when, str):
            try:
                when = datetime.fromisoformat(when)
            except ValueError:
                raise IllegalArgumentError(
                    f"to_datetime {when!r} is not an ISO 8601 date-time such as '1970-01-01T00:00:01.500'") from None
        if not isinstance(when, datetime):
            raise IllegalArgumentError(
                f"to_datetime must be a datetime, an ISO 8601 str or ms since the epoch, not {when!r}")
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        ms = (when - _EPOCH) // timedelta(milliseconds=1)
    if ms < 0:
        raise IllegalArgumentError(f"to_datetime is before 1970-01-01T00:00:00Z ({ms} ms); record timestamps are >= 0")
    return ms


class ConsumerGroupCommand:
    """``kafka-consumer-groups`` for a minikafka cluster.

    >>> groups = ConsumerGroupCommand(cluster)              # or cluster.consumer_groups  # doctest: +SKIP
    >>> print(groups.describe_group("dispatch"))                                       # doctest: +SKIP
    GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG   ...
    """

    def __init__(self, bootstrap_servers: Any, **admin_configs: Any) -> None:
        if isinstance(bootstrap_servers, KafkaAdminClient):
            if admin_configs:
                raise IllegalArgumentError("give admin configs or an admin client, not both")
            self.admin = bootstrap_servers
        else:
            self.admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, **admin_configs)

    # --- --list ------------------------------------------------------------------------------------------

    def list_groups(self, states: Iterable[str] | str | None = None) -> GroupListing:
        """``--list --state [STATES]``: every group with its state, sorted by id; ``states``
        keeps only those (``"Stable,Empty"`` or a list, any case)."""
        if isinstance(states, str):
            states = [s.strip() for s in states.split(",") if s.strip()]
        wanted = None if states is None else {_state_name(s) for s in states}
        rows = [(g, s) for g, _, s in self.admin._list_groups_raw(None) if wanted is None or s in wanted]
        return GroupListing(rows)

    # --- --describe --------------------------------------------------------------------------------------

    def _describe(self, group: str) -> tuple[int, GroupInformation]:
        self.admin._check_group_id(group)
        coordinator, described = self.admin._describe_one(group, None)
        info = KafkaAdminClient._group_information(described)
        if info.state == DEAD:
            raise GroupIdNotFoundError(f"Consumer group '{group}' does not exist.")
        return coordinator, info

    def describe_group(self, group: str, *, verbose: bool = False) -> GroupOffsets:
        """``--describe --group g``: per partition, the committed offset (CURRENT-OFFSET),
        the high watermark (LOG-END-OFFSET), their difference (LAG) and the member reading it.
        Members' partitions first (the member with most partitions first), then partitions
        that only have a committed offset (CONSUMER-ID '-'). Raises GroupIdNotFoundError for
        a group that does not exist."""
        _, info = self._describe(group)
        committed = self.admin.list_consumer_group_offsets(group)
        owned: list[tuple[MemberInformation, list[TopicPartition]]] = [
            (m, _assigned(m)) for m in info.members if _assigned(m)]
        owned.sort(key=lambda mp: -len(mp[1]))  # stable: ties keep the coordinator's order
        assigned = {tp for _, tps in owned for tp in tps}
        unowned = sorted(tp for tp in committed if tp not in assigned)
        ends = self.admin._list_offsets(assigned | set(unowned), LATEST_TIMESTAMP, skip_leaderless=True)

        def row(tp: TopicPartition, member: MemberInformation | None) -> PartitionAssignmentState:
            c = committed.get(tp)
            offset = c.offset if c is not None and c.offset >= 0 else None
            end = ends.get(tp)
            lag = end - offset if offset is not None and end is not None else None
            epoch = c.leader_epoch if c is not None and c.leader_epoch is not None and c.leader_epoch >= 0 else None
            if member is None:  # only a committed offset: nobody reads it now
                return PartitionAssignmentState(group, tp.topic, tp.partition, offset, end, lag,
                                                None, None, None, epoch)
            return PartitionAssignmentState(group, tp.topic, tp.partition, offset, end, lag,
                                            member.member_id, member.client_host, member.client_id, epoch)

        rows = [row(tp, m) for m, tps in owned for tp in tps] + [row(tp, None) for tp in unowned]
        return GroupOffsets(group, info.state, rows, verbose)

    def describe_members(self, group: str, *, verbose: bool = False) -> GroupMembers:
        """``--describe --members [--verbose]``: CONSUMER-ID, HOST, CLIENT-ID, #PARTITIONS
        (and with ``verbose`` the ASSIGNMENT) of each member, in the coordinator's order."""
        _, info = self._describe(group)
        rows = [MemberAssignmentState(group, m.member_id, m.client_host, m.client_id, len(_assigned(m)),
                                      tuple(_assigned(m))) for m in info.members]
        return GroupMembers(group, info.state, rows, verbose)

    def describe_state(self, group: str) -> GroupStateReport:
        """``--describe --state``: COORDINATOR (ID), ASSIGNMENT-STRATEGY, STATE, #MEMBERS."""
        coordinator, info = self._describe(group)
        return GroupStateReport([GroupStateInformation(group, f"broker-{coordinator}  ({coordinator})", coordinator,
                                                       info.protocol, info.state, len(info.members))])

    # --- --reset-offsets ----------------------------------------------------------------------------------

    def _scope(self, group: str, scope: Any, all_topics: bool) -> list[TopicPartition]:
        if all_topics:
            if scope is not None:
                raise IllegalArgumentError("give topics/partitions or all_topics=True, not both")
            return sorted(self.admin.list_consumer_group_offsets(group))
        if scope is None:
            raise IllegalArgumentError("One of the reset scopes should be defined: a topic, partitions, "
                                       "or all_topics=True.")
        items = [scope] if isinstance(scope, (str, TopicPartition)) else list(scope)
        explicit: set[TopicPartition] = set()
        whole: list[str] = []
        for item in items:
            if isinstance(item, str):
                topic, sep, parts = item.partition(":")
                validate_topic_name(topic)
                if not sep:
                    whole.append(topic)
                    continue
                for p in parts.split(","):
                    if not p.strip().isdigit():
                        raise IllegalArgumentError(f"Invalid partition '{p}' specified in topic arg '{item}'")
                    explicit.add(TopicPartition(topic, int(p)))
            else:
                explicit.add(_as_tp(item))
        known = self.admin._partitions({tp.topic for tp in explicit} | set(whole))
        missing = sorted(tp for tp in explicit if tp.partition not in known[tp.topic])
        if missing:
            raise UnknownTopicOrPartitionError(
                f'The partitions "{",".join(map(str, missing))}" do not exist')
        for topic in whole:
            explicit |= {TopicPartition(topic, p) for p in known[topic]}
        tps = sorted(explicit)
        leaderless = [tp for tp in tps if known[tp.topic][tp.partition] < 0]
        if leaderless:
            raise LeaderNotAvailableError(f'The partitions "{",".join(map(str, leaderless))}" have no leader')
        return tps

    def reset_offsets(self, group: str, scope: Any = None, *, all_topics: bool = False,
                      to_earliest: bool = False, to_latest: bool = False, to_current: bool = False,
                      to_offset: int | None = None, shift_by: int | None = None, to_datetime: Any = None,
                      by_duration: timedelta | int | None = None, execute: bool = False) -> ResetPlan:
        """``--reset-offsets``: where the group will resume in each partition of ``scope``.

        ``scope``: a topic (``"t"``: all its partitions; ``"t:0,2"``: those), a
        ``TopicPartition``, or a list of them; or ``all_topics=True`` (every partition the
        group has an offset for). Exactly one strategy: ``to_earliest``, ``to_latest``,
        ``to_current``, ``to_offset=N``, ``shift_by=±N`` (from the committed offset),
        ``to_datetime`` (a datetime, ISO str or ms since the epoch of simulated time: the
        first record at or after it, or the log end if there is none) or ``by_duration`` (a
        timedelta or ms before now). ``to_offset`` and ``shift_by`` are clamped into
        [log start, log end], as Kafka does.

        A dry run unless ``execute=True``, which commits the plan (a simple commit). Like
        Kafka, refuses (NonEmptyGroupError) unless the group is Empty or does not exist yet.
        """
        self.admin._check_group_id(group)
        chosen = [name for name, on in (("to_earliest", to_earliest), ("to_latest", to_latest),
                                        ("to_current", to_current), ("to_offset", to_offset is not None),
                                        ("shift_by", shift_by is not None), ("to_datetime", to_datetime is not None),
                                        ("by_duration", by_duration is not None)) if on]
        if len(chosen) != 1:
            raise IllegalArgumentError(
                "reset_offsets needs exactly one strategy of to_earliest, to_latest, to_current, to_offset, "
                f"shift_by, to_datetime, by_duration; got {chosen or 'none'}")
        for name, value in (("to_offset", to_offset), ("shift_by", shift_by)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise IllegalArgumentError(f"{name} must be an int, not {value!r}")
        timestamp = None
        if to_datetime is not None:
            timestamp = _timestamp_ms(to_datetime)
        elif by_duration is not None:
            ms = by_duration // timedelta(milliseconds=1) if isinstance(by_duration, timedelta) else by_duration
            if not isinstance(ms, int) or isinstance(ms, bool) or ms < 0:
                raise IllegalArgumentError(f"by_duration must be a timedelta or ms >= 0, not {by_duration!r}")
            timestamp = max(0, self.admin._world.now - ms)

        # Only an inactive group's offsets may move (checked first, even for a dry run).
        _, described = self.admin._describe_one(group, None)
        if described.state not in (EMPTY, DEAD):
            raise NonEmptyGroupError(f"Assignments can only be reset if the group '{group}' is inactive, "
                                     f"but the current state is {described.state}.")
        tps = self._scope(group, scope, all_topics)
        warnings: list[str] = []
        if to_earliest:
            new = self.admin._list_offsets(tps, EARLIEST_TIMESTAMP)
        elif to_latest:
            new = self.admin._list_offsets(tps, LATEST_TIMESTAMP)
        elif timestamp is not None:
            found = self.admin._list_offsets(tps, timestamp)
            empty = [tp for tp, o in found.items() if o is None or o < 0]
            ends = self.admin._list_offsets(empty, LATEST_TIMESTAMP)
            for tp in empty:
                warnings.append(f"Warn: Partition {tp.partition} from topic {tp.topic} is empty. "
                                "Falling back to latest known offset.")
            new = {**found, **ends}
        else:
            current = self.admin.list_consumer_group_offsets(group) if (to_current or shift_by is not None) else {}
            current = {tp: om for tp, om in current.items() if om.offset >= 0}
            if to_current:
                ends = self.admin._list_offsets([tp for tp in tps if tp not in current], LATEST_TIMESTAMP)
                new = {tp: current[tp].offset if tp in current else ends[tp] for tp in tps}
            else:
                if shift_by is not None:
                    missing = [tp for tp in tps if tp not in current]
                    if missing:
                        raise IllegalArgumentError(f"Cannot shift offset for partition {missing[0]} since there is "
                                                   "no current committed offset")
                    wanted = {tp: current[tp].offset + shift_by for tp in tps}
                else:
                    wanted = {tp: to_offset for tp in tps}
                starts = self.admin._list_offsets(tps, EARLIEST_TIMESTAMP)
                ends = self.admin._list_offsets(tps, LATEST_TIMESTAMP)
                # Kafka's checkOffsetsRange: past the end -> the end; before the start -> the start.
                new = {tp: ends[tp] if o > ends[tp] else max(o, starts[tp]) for tp, o in wanted.items()}
        rows = [OffsetReset(group, tp.topic, tp.partition, new[tp]) for tp in tps]
        plan = ResetPlan(group, rows, executed=False, warnings=warnings)
        if execute and rows:
            self.admin.alter_consumer_group_offsets(group, plan.offsets)
            plan.executed = True
        return plan

    # --- --delete ----------------------------------------------------------------------------------------

    def delete_groups(self, groups: Iterable[str] | str) -> str:
        """``--delete --group g [--group h]``: returns Kafka's success line; raises the first
        failure's error (NonEmptyGroupError, GroupIdNotFoundError) with Kafka's report of
        every group in its message."""
        groups = [groups] if isinstance(groups, str) else list(groups)
        results = self.admin.delete_consumer_groups(groups)
        ok = [g for g, e in results if e is None]
        failed = [(g, e) for g, e in results if e is not None]
        if not failed:
            return f"Deletion of requested consumer groups ({', '.join(repr(g) for g in ok)}) was successful."
        lines = ["Deletion of some consumer groups failed:"]
        lines += [f"* Group '{g}' could not be deleted due to: {e.__name__}: {_ERROR_TEXT.get(e.errno, e.message)}"
                  for g, e in failed]
        if ok:
            lines.append(f"These consumer groups were deleted successfully: {', '.join(repr(g) for g in ok)}")
        raise failed[0][1]("\n".join(lines))

    def close(self) -> None:
        self.admin.close()


# Kafka's messages for the errors a delete can meet (org.apache.kafka.common.protocol.Errors).
_ERROR_TEXT = {
    NonEmptyGroupError.errno: "The group is not empty.",
    GroupIdNotFoundError.errno: "The group id does not exist.",
    InvalidGroupIdError.errno: "The configured groupId is invalid.",
}


__all__ = [
    "AdminClientNode",
    "ConsumerGroupCommand",
    "GroupInformation",
    "GroupListing",
    "GroupMembers",
    "GroupOffsets",
    "GroupStateInformation",
    "GroupStateReport",
    "KafkaAdminClient",
    "MemberAssignmentState",
    "MemberInformation",
    "OffsetReset",
    "PartitionAssignmentState",
    "ResetPlan",
]
