"""Administration: kafka-python's ``KafkaAdminClient`` (``kafka-consumer-groups`` on top of it is
``minikafka.tools.consumer_groups.ConsumerGroupCommand``).

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
  DescribeGroups, OffsetFetch, OffsetCommit and DeleteGroups to the group's coordinator; for a
  KIP-848 group, ConsumerGroupDescribe there too (its epochs and target assignment).
- *Log ends*: ListOffsets (earliest -2, latest -1 = the high watermark, or a timestamp) to
  each partition's leader.
- *Topics and partitions*: CreateTopics, CreatePartitions and (Incremental)AlterConfigs to
  any broker, which forwards them to the active controller (``NewTopic``/``NewPartitions``,
  explicit replica assignments included: ``minikafka.clients.new_topic``).

Retriable failures (a refused connection, no answer within ``request_timeout_ms``, a moved
coordinator or leader) are retried after ``retry_backoff_ms`` until ``request_timeout_ms``
of simulated time has passed since the call began; then ``KafkaTimeoutError`` says which
operation gave up and why. Anything else is raised at once, with Kafka's error class.

``ConsumerGroupCommand`` (``minikafka.tools.consumer_groups``, with the command line of the
same tool) is ``kafka-consumer-groups`` on top of it.

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
    GROUP_ID_NOT_FOUND,
    NO_ERROR,
    NOT_COORDINATOR,
    NOT_LEADER_OR_FOLLOWER,
    UNKNOWN_MEMBER_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    ConsumerGroupDescribeRequest,
    DeleteGroupsRequest,
    DescribedConsumerGroup,
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
from minikafka.group_state import GROUP_STATES, ConsumerGroupState
from minikafka.node import NodeId, StateMachine
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


class ConsumerGroupMemberDescription(NamedTuple):
    """A member of a KIP-848 group (Java's ``MemberDescription``): its member epoch, what it
    owns now (``assignment``) and what the group's assignor gave it (``target_assignment``);
    the two differ while the member reconciles."""

    member_id: str
    instance_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]
    assignment: tuple[TopicPartition, ...]
    target_assignment: tuple[TopicPartition, ...]


class ConsumerGroupDescription(NamedTuple):
    """A group of type "consumer" as ConsumerGroupDescribe tells it (Java's
    ``ConsumerGroupDescription``): ``group_epoch`` moves when membership or subscriptions do,
    ``assignment_epoch`` is the target assignment's epoch, ``assignor`` the server assignor."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    coordinator: int
    members: list


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
        return [(g, t, s) for g, t, s, _ in self._list_groups_typed(broker_ids)]

    def _list_groups_typed(self, broker_ids: Iterable[int] | None) -> list[tuple[str, str, str, str]]:
        """(group id, protocol type, state, group type: "classic" or KIP-848's "consumer")."""
        def attempt(deadline: int) -> list[tuple[str, str, str, str]]:
            brokers = list(broker_ids) if broker_ids is not None else list(self._metadata((), deadline).brokers)
            found: dict[str, tuple[str, str, str, str]] = {}
            for b in sorted(brokers):
                response = self._roundtrip(b, lambda c: ListGroupsRequest(c), f"ListGroups (broker {b})", deadline)
                if response.error != NO_ERROR:
                    raise for_code(response.error)(f"ListGroups failed on broker {b}")
                types = response.group_types or ("classic",) * len(response.groups)
                for (group_id, protocol_type, state), group_type in zip(response.groups, types):
                    found[group_id] = (group_id, protocol_type, state, group_type)
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
        ``group_type`` is 'classic' (JoinGroup/SyncGroup) or 'consumer' (KIP-848's protocol)."""
        states = None if states_filter is None else {_state_name(s) for s in states_filter}
        types = None if types_filter is None else {str(t).lower() for t in types_filter}
        out = []
        for g, t, s, kind in self._list_groups_typed(broker_ids):
            if (states is None or s in states) and (types is None or kind in types):
                out.append({"group_id": g, "protocol_type": t, "group_state": s, "group_type": kind})
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

    def _consumer_group_describe_one(self, group_id: str) -> tuple[int, DescribedConsumerGroup]:
        def attempt(deadline: int) -> tuple[int, DescribedConsumerGroup]:
            node, response = self._to_coordinator(
                group_id, lambda c: ConsumerGroupDescribeRequest(c, (group_id,)),
                f"ConsumerGroupDescribe({group_id!r})", deadline)
            described = response.groups[0]
            if described.error == GROUP_ID_NOT_FOUND:
                raise GroupIdNotFoundError(described.error_message or f"Group {group_id} not found.")
            self._coordinator_error(group_id, described.error, "ConsumerGroupDescribe")
            return node, described
        return self._retrying(f"ConsumerGroupDescribe({group_id!r})", attempt)

    def consumer_group_describe(self, group_ids: Iterable[str]) -> list[ConsumerGroupDescription]:
        """KIP-848's ConsumerGroupDescribe (api key 69) at each group's coordinator: one
        ``ConsumerGroupDescription`` per group id, in the order given, with the group and
        assignment epochs and each member's epoch, current and target assignment (what Kafka
        4's ``Admin.describeConsumerGroups`` returns for a consumer group; kafka-python 3.0 has
        no such call). Raises ``GroupIdNotFoundError`` for an unknown group and for a classic
        one, with the broker's message ("Group g is not a consumer group.")."""
        def tps(parts: tuple[tuple[str, int], ...]) -> tuple[TopicPartition, ...]:
            return tuple(TopicPartition(t, p) for t, p in parts)

        out = []
        for g in self._check_group_ids(group_ids):
            node, d = self._consumer_group_describe_one(g)
            members = [ConsumerGroupMemberDescription(x.member_id, x.instance_id, x.member_epoch, x.client_id,
                                                      x.client_host, x.subscribed_topics, tps(x.assignment),
                                                      tps(x.target_assignment)) for x in d.members]
            out.append(ConsumerGroupDescription(d.group_id, d.state, d.group_epoch, d.assignment_epoch, d.assignor,
                                                node, members))
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
    names = list(dict.fromkeys((*GROUP_STATES, *ConsumerGroupState)))  # classic, then KIP-848's own
    by_lower = {s.lower(): s for s in names}
    key = str(state).replace("-", "").replace("_", "").lower()
    if key not in by_lower:
        raise IllegalArgumentError(f"Invalid state {state!r}. Valid states are: {', '.join(names)}")
    return by_lower[key]


__all__ = [
    "AdminClientNode",
    "GroupInformation",
    "KafkaAdminClient",
    "MemberInformation",
]
