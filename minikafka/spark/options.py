"""The "minikafka" source's options: Spark's Kafka source options, parsed and checked once.

Theory of operation
-------------------
A Spark job reads Kafka with a handful of string options (``kafka.bootstrap.servers``,
``subscribe``, ``startingOffsets``, ...). ``KafkaSourceOptions.parse`` turns them into one
immutable value with the meanings Spark's own Kafka source gives them, so a pipeline written
against minikafka runs on a real Kafka (``format("kafka")``) unchanged, and the reverse.

It runs where Spark first calls the source (the driver, when the query is planned), so a
mistake in an option fails the query before anything is read, with a message naming the
option, the bad value and what would be accepted. It never talks to a broker.

- ``kafka.*`` options are the Kafka consumer's settings. They become kafka-python keyword
  arguments (``kafka.fetch.max.bytes`` -> ``fetch_max_bytes``), typed after kafka-python's
  defaults. The ones Spark's source refuses (the source owns deserialising, offsets and
  commits) are refused here with Spark's reason.
- Offsets as Spark writes them in JSON: ``{"topic": {"0": 23, "1": -2}}`` where -2 means
  earliest and -1 latest. Parsed to ``{(topic, partition): offset}``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

EARLIEST = -2  # Spark's (and Kafka's ListOffsets) code for "the log start offset"
LATEST = -1  # ... and for "the log end offset"

TopicPartition = tuple[str, int]

# Spark refuses these Kafka settings because the source manages them itself.
_REFUSED = {
    "auto.offset.reset": "Set the source option 'startingOffsets' instead to specify where to start.",
    "key.deserializer": "Keys are always read as byte arrays: cast or parse the 'key' column.",
    "value.deserializer": "Values are always read as byte arrays: cast or parse the 'value' column.",
    "enable.auto.commit": "The source does not commit offsets to Kafka: Spark's checkpoint holds them.",
    "interceptor.classes": "Interceptors would see raw records the source has not deduplicated.",
}

# Spark Kafka source options this source does not implement: refused rather than ignored, so a
# pipeline never silently means something else here than on Spark's connector.
_NOT_IMPLEMENTED = (
    "startingtimestamp", "startingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy",
    "endingtimestamp", "endingoffsetsbytimestamp", "minoffsetspertrigger", "maxtriggerdelay",
    "groupidprefix", "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
)

_SUBSCRIPTIONS = ("subscribe", "subscribepattern", "assign")


class SourceOptionError(ValueError):
    """An option of the "minikafka" source is missing, malformed or not supported."""


@dataclass(frozen=True)
class KafkaSourceOptions:
    """What a query asked for; see the module docstring for the option names."""

    bootstrap_servers: str
    strategy: str  # "subscribe" | "subscribepattern" | "assign"
    topics: tuple[str, ...] = ()  # subscribe
    pattern: str | None = None  # subscribePattern (Java-regex subset: matched with re.fullmatch)
    assigned: tuple[TopicPartition, ...] = ()  # assign
    starting: int | dict[TopicPartition, int] = LATEST  # EARLIEST, LATEST or per partition
    ending: int | dict[TopicPartition, int] = LATEST  # batch queries only
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None  # minPartitions: cut large ranges into about this many tasks
    max_records_per_partition: int | None = None  # maxRecordsPerPartition: no task reads more offsets
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000  # kafkaConsumer.pollTimeoutMs: Spark's default, spark.network.timeout
    consumer_config: dict[str, Any] = field(default_factory=dict)  # kafka-python keyword arguments

    @classmethod
    def parse(cls, options: Mapping[str, str], *, batch: bool) -> "KafkaSourceOptions":
        opts = {str(k).lower(): v for k, v in options.items()}
        servers = opts.get("kafka.bootstrap.servers")
        if not servers or not str(servers).strip():
            raise SourceOptionError(
                "Option 'kafka.bootstrap.servers' must be specified for the minikafka source, "
                "e.g. .option('kafka.bootstrap.servers', cluster.bootstrap_servers) "
                "(a comma-separated list of host:port).")
        for name in _NOT_IMPLEMENTED:
            if name in opts:
                raise SourceOptionError(
                    f"Option {name!r} of Spark's Kafka source is not supported by the minikafka source.")

        given = [s for s in _SUBSCRIPTIONS if s in opts]
        if len(given) != 1:
            raise SourceOptionError(
                "Exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be "
                f"specified for the minikafka source, not {len(given)}"
                + (f" ({', '.join(given)})" if given else "") + ".")
        strategy = given[0]
        topics: tuple[str, ...] = ()
        pattern = None
        assigned: tuple[TopicPartition, ...] = ()
        if strategy == "subscribe":
            topics = tuple(t.strip() for t in str(opts["subscribe"]).split(",") if t.strip())
            if not topics:
                raise SourceOptionError(f"Option 'subscribe' names no topic: {opts['subscribe']!r}.")
        elif strategy == "subscribepattern":
            pattern = str(opts["subscribepattern"]).strip()
            if not pattern:
                raise SourceOptionError("Option 'subscribePattern' is empty.")
            try:
                re.compile(pattern)
            except re.error as e:
                raise SourceOptionError(f"Option 'subscribePattern' is not a valid regex: {pattern!r} ({e}).") from None
        else:
            assigned = _parse_assign(opts["assign"])

        starting = _parse_offsets(opts.get("startingoffsets", "earliest" if batch else "latest"), "startingOffsets")
        if batch and starting == LATEST:
            raise SourceOptionError(
                "startingOffsets='latest' is not allowed for a batch query: it would read nothing. "
                "Use 'earliest' or a JSON with offsets per partition.")
        if isinstance(starting, dict) and batch and LATEST in starting.values():
            raise SourceOptionError("startingOffsets for a batch query may not use -1 (latest) for a partition.")
        ending: int | dict[TopicPartition, int] = LATEST
        if "endingoffsets" in opts:
            if not batch:
                raise SourceOptionError("Option 'endingOffsets' is for batch queries (spark.read), not streaming ones.")
            ending = _parse_offsets(opts["endingoffsets"], "endingOffsets")
            if ending == EARLIEST or (isinstance(ending, dict) and EARLIEST in ending.values()):
                raise SourceOptionError("endingOffsets may not be 'earliest' (-2): a batch query would read nothing.")
        for name, offsets in (("startingOffsets", starting), ("endingOffsets", ending)):
            if isinstance(offsets, dict) and strategy == "assign" and set(offsets) != set(assigned):
                raise SourceOptionError(
                    f"{name} must name exactly the assigned partitions. "
                    f"Assigned: {_fmt(assigned)}, in {name}: {_fmt(offsets)}.")

        max_per_trigger = None
        if "maxoffsetspertrigger" in opts:
            if batch:
                raise SourceOptionError("Option 'maxOffsetsPerTrigger' is for streaming queries, not batch ones.")
            max_per_trigger = _positive_int(opts["maxoffsetspertrigger"], "maxOffsetsPerTrigger")
        return cls(
            bootstrap_servers=",".join(s.strip() for s in str(servers).split(",") if s.strip()),
            strategy=strategy,
            topics=topics,
            pattern=pattern,
            assigned=assigned,
            starting=starting,
            ending=ending,
            max_offsets_per_trigger=max_per_trigger,
            min_partitions=_positive_int(opts["minpartitions"], "minPartitions") if "minpartitions" in opts else None,
            max_records_per_partition=(_positive_int(opts["maxrecordsperpartition"], "maxRecordsPerPartition")
                                       if "maxrecordsperpartition" in opts else None),
            fail_on_data_loss=_bool(opts.get("failondataloss", "true"), "failOnDataLoss"),
            include_headers=_bool(opts.get("includeheaders", "false"), "includeHeaders"),
            poll_timeout_ms=_positive_int(opts.get("kafkaconsumer.polltimeoutms", "120000"),
                                          "kafkaConsumer.pollTimeoutMs"),
            consumer_config=_consumer_config(opts),
        )

    def wants(self, topic: str) -> bool:
        """Does the subscription take this topic (for subscribe and subscribePattern)?"""
        if self.strategy == "subscribe":
            return topic in self.topics
        if self.strategy == "subscribepattern":
            # Kafka consumers leave internal topics (__consumer_offsets) out of pattern subscriptions.
            return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assigned)

    def consumer_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments for kafka-python's KafkaConsumer: the user's kafka.* plus ours."""
        kwargs = {"bootstrap_servers": self.bootstrap_servers.split(","), **self.consumer_config}
        kwargs.update(overrides)
        return kwargs


def _fmt(tps: Any) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "]"


def _parse_assign(text: str) -> tuple[TopicPartition, ...]:
    example = 'e.g. {"trucks_gps": [0, 1]}'
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        raise SourceOptionError(f"Option 'assign' must be JSON, {example}; not {text!r}.") from None
    if not isinstance(value, dict) or not value:
        raise SourceOptionError(f"Option 'assign' must be a JSON object of topic to partition list, {example}; not {text!r}.")
    out = []
    for topic, parts in value.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts):
            raise SourceOptionError(f"Option 'assign': topic {topic!r} needs a list of partition numbers, not {parts!r}.")
        out.extend((topic, p) for p in parts)
    return tuple(sorted(set(out)))


def _parse_offsets(text: Any, name: str) -> int | dict[TopicPartition, int]:
    text = str(text).strip()
    if text.lower() == "earliest":
        return EARLIEST
    if text.lower() == "latest":
        return LATEST
    example = '\'earliest\', \'latest\' or JSON such as {"trucks_gps": {"0": 23, "1": -2}} (-2 earliest, -1 latest)'
    try:
        value = json.loads(text)
    except ValueError:
        raise SourceOptionError(f"Option {name!r} must be {example}; not {text!r}.") from None
    if not isinstance(value, dict) or not value:
        raise SourceOptionError(f"Option {name!r} must be {example}; not {text!r}.")
    out: dict[TopicPartition, int] = {}
    for topic, parts in value.items():
        if not isinstance(parts, dict):
            raise SourceOptionError(f"Option {name!r}: topic {topic!r} needs an object of partition to offset, not {parts!r}.")
        for p, off in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise SourceOptionError(f"Option {name!r}: {p!r} of topic {topic!r} is not a partition number.") from None
            if not isinstance(off, int) or isinstance(off, bool) or off < EARLIEST or partition < 0:
                raise SourceOptionError(
                    f"Option {name!r}: offset {off!r} for {topic}-{p} must be an offset >= 0, -2 (earliest) or -1 (latest).")
            out[(topic, partition)] = off
    return out


def _positive_int(text: Any, name: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise SourceOptionError(f"Option {name!r} must be a positive whole number, not {text!r}.") from None
    if value <= 0:
        raise SourceOptionError(f"Option {name!r} must be a positive whole number, not {text!r}.")
    return value


def _bool(text: Any, name: str) -> bool:
    value = str(text).strip().lower()
    if value not in ("true", "false"):
        raise SourceOptionError(f"Option {name!r} must be 'true' or 'false', not {text!r}.")
    return value == "true"


def _consumer_config(opts: Mapping[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    given = sorted((k, v) for k, v in opts.items() if k.startswith("kafka.") and k != "kafka.bootstrap.servers")
    if not given:
        return config  # (kafka-python not imported: a streaming query's planner may not need it)
    from kafka import KafkaConsumer  # kafka-python: the client the source reads with

    defaults = KafkaConsumer.DEFAULT_CONFIG
    for key, text in given:
        name = key[len("kafka."):]
        if name in _REFUSED:
            raise SourceOptionError(f"Kafka option {name!r} is not supported. {_REFUSED[name]}")
        arg = name.replace(".", "_")
        if arg not in defaults:
            raise SourceOptionError(
                f"Option {key!r} is not a Kafka consumer setting kafka-python knows "
                f"(it has no {arg!r}); see kafka.KafkaConsumer's documentation.")
        default = defaults[arg]
        try:
            if isinstance(default, bool):
                value: Any = _bool(text, key)
            elif isinstance(default, int) or arg.endswith(("_ms", "_bytes")):
                value = int(str(text).strip())
            elif default is None or isinstance(default, str):
                value = str(text)
            else:
                raise SourceOptionError(f"Option {key!r} cannot be given as a string to the minikafka source.")
        except ValueError:
            raise SourceOptionError(f"Option {key!r} must be a number, not {text!r}.") from None
        config[arg] = value
    return config
