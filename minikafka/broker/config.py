"""Broker and topic settings, with Kafka's names and defaults.

A topic's config (``min.insync.replicas``, ``retention.ms``, ...) overrides the broker's
default of the same name, as in Kafka. Unknown keys are refused with the list of known ones,
so a typo in a notebook fails loudly instead of silently doing nothing.
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
    # durability: how often logs are flushed (Kafka leaves it to the OS's ~30 s writeback)
    "log.flush.interval.ms": 30_000,
    # liveness (KRaft's names)
    "broker.heartbeat.interval.ms": 2_000,
    "broker.session.timeout.ms": 9_000,
    # topics
    "num.partitions": 1,
    "default.replication.factor": 1,
    "auto.create.topics.enable": False,
    # log (topic-level names)
    "segment.bytes": LogConfig().segment_bytes,
    "segment.ms": LogConfig().segment_ms,
    "retention.ms": LogConfig().retention_ms,
    "retention.bytes": LogConfig().retention_bytes,
    "index.interval.bytes": LogConfig().index_interval_bytes,
    "max.message.bytes": LogConfig().max_message_bytes,
}
TOPIC_KEYS = {
    "min.insync.replicas", "unclean.leader.election.enable", "segment.bytes", "segment.ms",
    "retention.ms", "retention.bytes", "index.interval.bytes", "max.message.bytes",
}
_BOOLS = {"unclean.leader.election.enable", "auto.create.topics.enable"}


def _coerce(key: str, value: Any) -> Any:
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
    if out.get("min.insync.replicas", 1) < 1:
        raise IllegalArgumentError("min.insync.replicas must be >= 1")
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
        return LogConfig.of({k: c[k] for k in ("segment.bytes", "segment.ms", "retention.ms", "retention.bytes",
                                                "index.interval.bytes", "max.message.bytes")})
