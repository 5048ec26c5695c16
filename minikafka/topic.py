"""Topic names and topic-partitions, validated as Kafka's ``Topic.validate`` does.

A topic name becomes a directory name (``<topic>-<partition>``) under the broker's log
directory, so validation is also what keeps a name from reaching outside it: only ASCII
letters, digits, ``.``, ``_`` and ``-``; at most 249 characters; never ``.`` or ``..``.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from minikafka.errors import InvalidTopicError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


# Topics the brokers keep for themselves: clients may read them, never write or create them
# (Kafka's Topic.isInternal, plus KRaft's metadata log).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__cluster_metadata"})

def validate_topic_name(name: str) -> str:
    """Return ``name`` if Kafka would accept it, else raise ``InvalidTopicError`` saying why."""
    if not isinstance(name, str):
        raise InvalidTopicError(f"topic name must be a str, not {type(name).__name__}")
    if not name:
        raise InvalidTopicError("topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters "
            f"({len(name)} given): {name[:40]}..."
        )
    if not _LEGAL.fullmatch(name):
        bad = sorted({c for c in name if not _LEGAL.fullmatch(c)})
        raise InvalidTopicError(
            f"topic name {name!r} is illegal: it contains {''.join(bad)!r}; only ASCII "
            "alphanumerics, '.', '_' and '-' are allowed"
        )
    return name


class TopicPartition(NamedTuple):
    """(topic, partition), as kafka-python's ``kafka.TopicPartition``."""

    topic: str
    partition: int

    @property
    def dir_name(self) -> str:
        """The partition's directory under a log dir, as Kafka names it: ``trucks_gps-3``."""
        validate_topic_name(self.topic)
        if not isinstance(self.partition, int) or isinstance(self.partition, bool) or self.partition < 0:
            raise ValueError(f"partition must be an int >= 0, not {self.partition!r}")
        return f"{self.topic}-{self.partition}"

    @classmethod
    def from_dir_name(cls, name: str) -> "TopicPartition":
        topic, sep, partition = name.rpartition("-")
        if not sep or not partition.isdigit():
            raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
        return cls(validate_topic_name(topic), int(partition))

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class OffsetAndMetadata(NamedTuple):
    """A committed offset: the *next* offset to read, plus free-form metadata (kafka-python's
    ``kafka.OffsetAndMetadata``)."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int = -1
