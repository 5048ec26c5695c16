"""A log's settings: Kafka's ``LogConfig`` (the topic-level ``segment.bytes``, ``retention.ms``...).

Theory of operation
-------------------
One frozen value per log, built from Kafka's dotted names (``LogConfig.of({"retention.ms":
...})``) or ours (``retention_ms``), checked when it is made: a wrong name, a non-integer or a
value below Kafka's minimum is refused with an ``IllegalArgumentError`` that names the key.
The roll and retention rules (``minikafka.rules.roll_reason``, ``segments_to_delete``) read
it; ``log.py`` applies their answers. Nothing here reads a clock or a file.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from minikafka.errors import IllegalArgumentError

DAY_MS = 24 * 60 * 60 * 1000
CLEANUP_POLICIES = ("delete", "compact", "compact,delete")


@dataclass(frozen=True)
class LogConfig:
    """Per-topic log settings, with Kafka's defaults. ``LogConfig.of({"segment.bytes": ...})``
    takes Kafka's dotted names."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * DAY_MS
    retention_ms: int = 7 * DAY_MS  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1024 * 1024 + 12  # largest batch a producer may append
    delete_retention_ms: int = DAY_MS  # how long the cleaner keeps a tombstone
    min_compaction_lag_ms: int = 0  # records younger than this are not compacted yet
    cleanup_policy: str = "delete"  # "compact": the log cleaner keeps the latest value per key

    _MINIMUM = {
        "segment_bytes": 14, "segment_ms": 1, "index_interval_bytes": 0, "max_message_bytes": 0,
        "delete_retention_ms": 0, "min_compaction_lag_ms": 0,
    }

    def __post_init__(self) -> None:
        policy = self.cleanup_policy
        if isinstance(policy, str):  # Kafka accepts a list: "compact, delete" in any order
            policy = ",".join(sorted(p.strip() for p in policy.split(",")))
            object.__setattr__(self, "cleanup_policy", policy)
        if policy not in CLEANUP_POLICIES:
            raise IllegalArgumentError(
                f"cleanup.policy must be one of {', '.join(CLEANUP_POLICIES)}, not {self.cleanup_policy!r}"
            )
        for f in fields(self):
            if f.name == "cleanup_policy":
                continue
            value = getattr(self, f.name)
            key = f.name.replace("_", ".")
            if not isinstance(value, int) or isinstance(value, bool):
                raise IllegalArgumentError(f"{key} must be an integer, not {value!r}")
            low = self._MINIMUM.get(f.name, -1)
            if value < low:
                raise IllegalArgumentError(f"{key} must be >= {low}, not {value}")

    @classmethod
    def of(cls, config: Mapping[str, Any] | None = None, **overrides: Any) -> "LogConfig":
        """Build from Kafka's names (``"retention.ms"``) or ours (``retention_ms``)."""
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in {**(config or {}), **overrides}.items():
            name = key.replace(".", "_")
            if name not in known:
                names = ", ".join(sorted(k.replace("_", ".") for k in known))
                raise IllegalArgumentError(f"unknown log config {key!r}; known: {names}")
            values[name] = int(value) if isinstance(value, str) and value.lstrip("-").isdigit() else value
        return cls(**values)


__all__ = ["CLEANUP_POLICIES", "DAY_MS", "LogConfig"]
