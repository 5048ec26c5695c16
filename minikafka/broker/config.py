"""Broker and topic settings, with Kafka's names and defaults.

A topic's config (``min.insync.replicas``, ``retention.ms``, ...) overrides the broker's
default of the same name, as in Kafka. Unknown keys are refused with the list of known ones,
so a typo in a notebook fails loudly instead of silently doing nothing.

Values may be given as strings (topic configs travel as strings, as in Kafka's
CreateTopics): each key is coerced to its type, an integer, a boolean or, for
``cleanup.policy``, a list of ``delete``/``compact`` kept in canonical form (``"compact,delete"``
whatever the order given). A value that cannot be coerced, or is below the key's minimum,
is refused with a message naming the key.

Simplification: where Kafka's broker-level name differs from the topic-level one
(``log.retention.ms``, ``log.cleanup.policy``), the topic-level name serves for both.
"""

from __future__ import annotations

from typing import Any, Mapping

from minikafka.broker.partition import PartitionConfig
from minikafka.errors import IllegalArgumentError
from minikafka.storage import LogConfig

DEFAULTS: dict[str, Any] = {
    # replication
    "min.insync.replicas": 1,
    "replica.lag.time.max.ms": 30_000,
    "unclean.leader.election.enable": False,
    "replica.fetch.wait.max.ms": 500,
    "replica.fetch.backoff.ms": 1_000,
    "replica.socket.timeout.ms": 30_000,
    "replica.fetch.max.bytes": 1024 * 1024,  # a follower's ask per partition (one batch at least)
    "replica.fetch.response.max.bytes": 10 * 1024 * 1024,  # ... and per fetch
    # limits on what one request may cost the broker (issue 13)
    "fetch.max.bytes": 55 * 1024 * 1024,  # 57671680: a Fetch answer's cap, whatever max_bytes asks
    # Partitions one CreateTopics/CreatePartitions may add. Kafka's controller refuses more
    # than MAX_PARTITIONS_PER_BATCH (10000, fixed) with POLICY_VIOLATION; here the limit is
    # configurable under the name Kafka gives its per-request partition limit (default 2000).
    "max.request.partition.size.limit": 2000,
    # durability: how often logs are flushed (Kafka leaves it to the OS's ~30 s writeback)
    "log.flush.interval.ms": 30_000,
    # liveness (KRaft's names)
    "broker.heartbeat.interval.ms": 2_000,
    "broker.session.timeout.ms": 9_000,
    # the metadata quorum (KRaft): Raft timeouts, and how long a metadata change may take
    "controller.quorum.election.timeout.ms": 1_000,
    "controller.quorum.fetch.timeout.ms": 2_000,
    "controller.quorum.election.backoff.max.ms": 1_000,
    "controller.quorum.request.timeout.ms": 2_000,
    "controller.quorum.retry.backoff.ms": 20,
    "request.timeout.ms": 30_000,
    # topics
    "num.partitions": 1,
    "default.replication.factor": 1,
    # Kafka's default: a producer's first send to a new topic creates it (num.partitions,
    # default.replication.factor, the latter capped at the live brokers; see Broker._metadata).
    # Only wire clients ask for it: the simulated clients' Metadata requests never do.
    "auto.create.topics.enable": True,
    # log (topic-level names)
    "segment.bytes": LogConfig().segment_bytes,
    "segment.ms": LogConfig().segment_ms,
    "retention.ms": LogConfig().retention_ms,
    "retention.bytes": LogConfig().retention_bytes,
    "index.interval.bytes": LogConfig().index_interval_bytes,
    "max.message.bytes": LogConfig().max_message_bytes,
    "cleanup.policy": LogConfig().cleanup_policy,
    "delete.retention.ms": LogConfig().delete_retention_ms,
    "min.compaction.lag.ms": LogConfig().min_compaction_lag_ms,
    # the log cleaner: one pass over the compacted logs every backoff
    "log.cleaner.enable": True,
    "log.cleaner.backoff.ms": 15_000,
    # __consumer_offsets, the compacted topic that holds committed offsets
    "offsets.topic.num.partitions": 50,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.segment.bytes": 100 * 1024 * 1024,
    "offsets.retention.minutes": 7 * 24 * 60,
    "offsets.retention.check.interval.ms": 600_000,
    "log.retention.check.interval.ms": 300_000,  # Kafka's: how often retention deletes old segments
    "offsets.commit.timeout.ms": 5_000,
    "offset.metadata.max.bytes": 4_096,
    # __transaction_state, the compacted topic that holds the transaction coordinators' state
    "transaction.state.log.num.partitions": 50,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.segment.bytes": 100 * 1024 * 1024,
    "transaction.max.timeout.ms": 900_000,  # a producer's transaction.timeout.ms may not exceed it
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 10_000,
    # consumer groups
    "group.initial.rebalance.delay.ms": 3_000,
    "group.min.session.timeout.ms": 6_000,
    "group.max.session.timeout.ms": 1_800_000,
    "group.max.size": 2**31 - 1,
    # KIP-848's consumer groups (ConsumerGroupHeartbeat): Kafka 4's defaults
    "group.consumer.session.timeout.ms": 45_000,
    "group.consumer.heartbeat.interval.ms": 5_000,
}
# The log settings a topic may override; BrokerConfig.log_config hands them to LogConfig.
LOG_KEYS = (
    "segment.bytes", "segment.ms", "retention.ms", "retention.bytes", "index.interval.bytes",
    "max.message.bytes", "cleanup.policy", "delete.retention.ms", "min.compaction.lag.ms",
)
TOPIC_KEYS = {"min.insync.replicas", "unclean.leader.election.enable", *LOG_KEYS}
_BOOLS = {"unclean.leader.election.enable", "auto.create.topics.enable", "log.cleaner.enable"}
_LISTS = {"cleanup.policy"}
CLEANUP_POLICY_VALUES = ("compact", "delete")
# Kafka's atLeast(...) validators. The log keys' own limits are LogConfig's, checked when a
# log is made; the ones here fail earlier, at CreateTopics or when the broker starts.
_MINIMUM = {
    "min.insync.replicas": 1,
    "delete.retention.ms": 0,
    "min.compaction.lag.ms": 0,
    "log.cleaner.backoff.ms": 0,
    "transaction.state.log.num.partitions": 1,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.segment.bytes": 1,
    "transaction.max.timeout.ms": 1,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1,
    "offsets.topic.num.partitions": 1,
    "offsets.topic.replication.factor": 1,
    "offsets.topic.segment.bytes": 1,
    "offsets.retention.minutes": 1,
    "offsets.retention.check.interval.ms": 1,
    "log.retention.check.interval.ms": 1,
    "offsets.commit.timeout.ms": 1,
    "group.max.size": 1,
    "group.consumer.session.timeout.ms": 1,
    "group.consumer.heartbeat.interval.ms": 1,
    "replica.fetch.max.bytes": 0,
    "replica.fetch.response.max.bytes": 0,
    "fetch.max.bytes": 0,
    "max.request.partition.size.limit": 1,
}


def _coerce_policy(key: str, value: Any) -> str:
    # Kafka's cleanup.policy is a LIST: "compact,delete", "delete, compact" or a list of
    # names; order, spaces and repeats do not matter, so one canonical string is kept.
    if isinstance(value, str):
        names = value.split(",")
    elif isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in value):
        names = list(value)
    else:
        names = None
    chosen = {n.strip() for n in names} if names is not None else set()
    if not chosen or not chosen <= set(CLEANUP_POLICY_VALUES):
        raise IllegalArgumentError(
            f"{key} must be delete, compact or both (\"compact,delete\", in any order), not {value!r}"
        )
    return ",".join(sorted(chosen))


def _coerce(key: str, value: Any) -> Any:
    if key in _LISTS:
        return _coerce_policy(key, value)
    if key in _BOOLS:
        if isinstance(value, str):
            if value.lower() not in ("true", "false"):
                raise IllegalArgumentError(f"{key} must be true or false, not {value!r}")
            return value.lower() == "true"
        return bool(value)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise IllegalArgumentError(f"{key} must be an integer, not {value!r}") from None


def validate(config: Mapping[str, Any] | None, *, allowed: set[str] | None = None) -> dict[str, Any]:
    """Coerce values to their types; refuse unknown keys by name."""
    allowed = set(DEFAULTS) if allowed is None else allowed
    out = {}
    for key, value in (config or {}).items():
        if key not in allowed:
            raise IllegalArgumentError(f"unknown config {key!r}; known: {', '.join(sorted(allowed))}")
        out[key] = _coerce(key, value)
        low = _MINIMUM.get(key)
        if low is not None and out[key] < low:
            raise IllegalArgumentError(f"{key} must be >= {low}, not {out[key]}")
    return out


class BrokerConfig:
    def __init__(self, overrides: Mapping[str, Any] | None = None) -> None:
        self.values = {**DEFAULTS, **validate(overrides)}

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def for_topic(self, topic_configs: Mapping[str, Any]) -> dict[str, Any]:
        return {**self.values, **validate(topic_configs, allowed=TOPIC_KEYS)}

    def partition_config(self, topic_configs: Mapping[str, Any]) -> PartitionConfig:
        c = self.for_topic(topic_configs)
        return PartitionConfig(
            min_insync_replicas=c["min.insync.replicas"],
            replica_lag_time_max_ms=c["replica.lag.time.max.ms"],
            unclean_leader_election=c["unclean.leader.election.enable"],
        )

    def log_config(self, topic_configs: Mapping[str, Any]) -> LogConfig:
        c = self.for_topic(topic_configs)
        return LogConfig.of({k: c[k] for k in LOG_KEYS})
