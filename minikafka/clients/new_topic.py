"""What an admin asks to create: kafka-python's ``NewTopic`` and ``NewPartitions``.

Theory of operation
-------------------
``KafkaAdminClient.create_topics`` and ``create_partitions`` take what kafka-python 3.0 takes,
so notebook code carries over to a real cluster:

- topics: a list of ``NewTopic(name, num_partitions=-1, replication_factor=-1,
  replica_assignments=None, topic_configs=None)`` (kafka-python's own ``kafka.admin.NewTopic``
  works too), a list of names (the broker's defaults), or kafka-python 3.0's dict
  ``{name: {'num_partitions': n, 'replication_factor': r, 'assignments': {p: [brokers]},
  'configs': {key: value}}}`` (every key optional);
- partitions: ``{name: total}``, ``{name: NewPartitions(total_count, new_assignments=None)}``
  or ``{name: {'count': total, 'assignments': [[brokers], ...]}}``.

``-1`` means "the broker's default" (``num.partitions``, ``default.replication.factor``), and
it is what Kafka requires when ``replica_assignments`` names the replicas by hand: partition
index -> broker ids, the first of them the preferred leader.

Here only the *shapes* are checked (a name is a string, counts are ints, an assignment maps
ints to lists of ints), each with a message naming the topic and the field. Whether the
values make sense (partitions 0..n-1, registered brokers, -1 with assignments) is the
controller's to judge, as in Kafka, so the admin gets Kafka's errors for them.
"""

from __future__ import annotations

from typing import Any, Mapping

from minikafka.errors import IllegalArgumentError
from minikafka.messages import TopicConfig


class NewTopic:
    """kafka-python's ``NewTopic``: a topic for ``KafkaAdminClient.create_topics``."""

    def __init__(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                 replica_assignments: Mapping[int, Any] | None = None,
                 topic_configs: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.replica_assignments = dict(replica_assignments or {})
        self.topic_configs = dict(topic_configs or {})

    def __repr__(self) -> str:
        extra = f", replica_assignments={self.replica_assignments}" if self.replica_assignments else ""
        extra += f", topic_configs={self.topic_configs}" if self.topic_configs else ""
        return f"NewTopic({self.name!r}, {self.num_partitions}, {self.replication_factor}{extra})"


class NewPartitions:
    """kafka-python's ``NewPartitions``: grow a topic to ``total_count`` partitions; optionally
    ``new_assignments``, one broker-id list per *new* partition."""

    def __init__(self, total_count: int, new_assignments: Any = None) -> None:
        self.total_count = total_count
        self.new_assignments = new_assignments

    def __repr__(self) -> str:
        extra = "" if self.new_assignments is None else f", new_assignments={self.new_assignments}"
        return f"NewPartitions({self.total_count}{extra})"


def _int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise IllegalArgumentError(f"{what} must be an int, not {value!r}")
    return value


def _brokers(value: Any, what: str) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise IllegalArgumentError(f"{what} must be a list of broker ids, not {value!r}")
    return tuple(_int(b, f"a broker id in {what}") for b in value)


def _config_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def creatable_topic(name: Any, num_partitions: Any = -1, replication_factor: Any = -1,
                    assignments: Any = None, configs: Any = None) -> TopicConfig:
    """One topic of a CreateTopics request, its shapes checked (see the module's text)."""
    if not isinstance(name, str):
        raise IllegalArgumentError(f"a topic name must be a str, not {name!r}")
    where = f"topic {name!r}"
    assignments = {} if assignments is None else assignments
    configs = {} if configs is None else configs
    if not isinstance(assignments, Mapping):
        raise IllegalArgumentError(f"{where}: replica assignments must be a dict {{partition: [broker ids]}}, "
                                   f"not {assignments!r}")
    if not isinstance(configs, Mapping):
        raise IllegalArgumentError(f"{where}: configs must be a dict {{key: value}}, not {configs!r}")
    listed = tuple((_int(p, f"{where}: a partition index"), _brokers(replicas, f"{where}'s partition {p}"))
                   for p, replicas in assignments.items())
    for key in configs:
        if not isinstance(key, str):
            raise IllegalArgumentError(f"{where}: a config key must be a str, not {key!r}")
    return TopicConfig(name, _int(num_partitions, f"{where}: num_partitions"),
                       _int(replication_factor, f"{where}: replication_factor"),
                       tuple(sorted((k, _config_value(v)) for k, v in configs.items() if v is not None)),  # None: default
                       listed)


def creatable_topics(new_topics: Any) -> tuple[TopicConfig, ...]:
    """kafka-python 3.0's ``create_topics`` input (a list of ``NewTopic`` or of names, or a
    dict of options per name) as the request's topics."""
    if isinstance(new_topics, Mapping):
        topics = []
        for name, options in new_topics.items():
            options = {} if options is None else options
            if not isinstance(options, Mapping):
                raise IllegalArgumentError(f"topic {name!r}: options must be a dict (num_partitions, "
                                           f"replication_factor, assignments, configs), not {options!r}")
            unknown = sorted(set(options) - {"num_partitions", "replication_factor", "assignments", "configs"})
            if unknown:
                raise IllegalArgumentError(f"topic {name!r}: unknown option(s) {unknown}; the options are "
                                           "num_partitions, replication_factor, assignments, configs")
            topics.append(creatable_topic(name, options.get("num_partitions", -1),
                                          options.get("replication_factor", -1), options.get("assignments"),
                                          options.get("configs")))
        out = tuple(topics)
    elif isinstance(new_topics, (str, bytes)) or not hasattr(new_topics, "__iter__"):
        raise IllegalArgumentError(f"new_topics must be a list of NewTopic or of names, or a dict, not {new_topics!r}")
    else:
        out = tuple(creatable_topic(t) if isinstance(t, str) else _from_new_topic(t) for t in new_topics)
    if not out:
        raise IllegalArgumentError("new_topics names no topic")
    return out


def _from_new_topic(t: Any) -> TopicConfig:
    # kafka-python's NewTopic or ours: the same attributes
    if not all(hasattr(t, a) for a in ("name", "num_partitions", "replication_factor")):
        raise IllegalArgumentError(f"expected a NewTopic or a topic name, not {t!r}")
    return creatable_topic(t.name, t.num_partitions, t.replication_factor,
                           getattr(t, "replica_assignments", None), getattr(t, "topic_configs", None))


def new_partitions(topic: Any, spec: Any) -> tuple[int, tuple[tuple[int, ...], ...] | None]:
    """One topic of a CreatePartitions request: (the new total, the new partitions' replica
    lists or None), from an int, a ``NewPartitions`` or ``{'count': n, 'assignments': [...]}``."""
    if isinstance(spec, Mapping):
        unknown = sorted(set(spec) - {"count", "assignments"})
        if unknown or "count" not in spec:
            raise IllegalArgumentError(f"topic {topic!r}: expected {{'count': n, 'assignments': [[broker ids], ...]}}, "
                                       f"not {dict(spec)!r}")
        count, assignments = spec["count"], spec.get("assignments")
    else:
        count = getattr(spec, "total_count", spec)
        assignments = getattr(spec, "new_assignments", None)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise IllegalArgumentError(f"the new partition count of {topic!r} must be an int >= 1, not {count!r}")
    if assignments is None:
        return count, None
    if isinstance(assignments, (str, bytes, Mapping)) or not hasattr(assignments, "__iter__"):
        raise IllegalArgumentError(f"topic {topic!r}: new assignments must be a list of broker-id lists, one per "
                                   f"new partition, not {assignments!r}")
    return count, tuple(_brokers(a, f"topic {topic!r}'s new partition {i}") for i, a in enumerate(assignments))
