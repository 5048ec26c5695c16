"""KafkaOffsetReader: which partitions a query reads, and where their logs begin and end.

Theory of operation
-------------------
Planning a micro-batch needs three facts per topic-partition, asked of the brokers through
the Kafka protocol (Metadata and ListOffsets), so it works the same on minikafka's
multi-process cluster and on a real Kafka:

- the partitions the subscription covers now (``subscribe``, ``subscribePattern``, ``assign``):
  topics are listed afresh each time, so partitions added to a topic, and new topics that
  match a pattern, are picked up at the next trigger;
- each partition's earliest offset (the log start: older records were deleted by retention);
- each partition's latest offset (the log end as consumers see it, the high watermark);
- and, to check what the tasks fetch, which topics are compacted (DescribeConfigs'
  ``cleanup.policy``): only a compacted log may have holes between its offsets.

Who asks: ``offset_client.OffsetClient`` (plain sockets) when the query's ``kafka.*``
settings are ones it honours (plain TCP, ``PLAIN_SETTINGS``), else a kafka-python consumer
(SSL, SASL, every other setting). The stream reader runs in a Python process Spark starts
for each query, and importing kafka-python there cost 0.15-0.3 s of every query's start.
Either keeps its connections for the query's life (Spark calls it from one long-lived
Python process on the driver); neither joins a group nor commits.
Unreachable brokers and missing topics become ``KafkaSourceError`` with the address or the
topic named, instead of kafka-python's bare ``NoBrokersAvailable`` or an empty result.
Every wait is bounded by ``kafkaConsumer.pollTimeoutMs``; kafka-python's own
``KafkaConsumer.topics()`` waits for a metadata refresh with no timeout at all (3.0.12), and
a refresh whose only known broker died may never end.
"""

from __future__ import annotations

import time
from typing import Iterable

from minikafka.spark.offset_client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    LookupTimeout,
    NoBrokerAnswered,
    OffsetClient,
    plain_settings,
)
from minikafka.spark.options import KafkaSourceOptions, TopicPartition


LOOKUP_ROUND_MS = 5_000
METADATA_SPACING_MS = 1


class KafkaSourceError(RuntimeError):
    """The source cannot do what the query asks of the Kafka cluster (not an option typo)."""


class TopicsVanished(Exception):
    """Topics were deleted while their offsets were being looked up."""

    def __init__(self, topics: set[str]) -> None:
        super().__init__(", ".join(sorted(topics)))
        self.topics = topics


def connect_consumer(options: KafkaSourceOptions, **overrides):
    """A kafka-python consumer without a group, or a clear error if no broker answers."""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaConfigurationError, KafkaTimeoutError

    kwargs = options.consumer_kwargs(group_id=None, enable_auto_commit=False, **overrides)
    kwargs.setdefault("bootstrap_timeout_ms", 10_000)
    try:
        consumer = KafkaConsumer(**kwargs)
    except (KafkaConfigurationError, AssertionError, ValueError, TypeError) as exc:
        raise KafkaSourceError(f"kafka-python refused the source's consumer settings: {exc}") from None
    except KafkaTimeoutError:  # kafka-python 3: "Unable to bootstrap from ..."
        raise _no_broker(options) from None
    # kafka-python 3.0.12 keeps its metadata's own retry_backoff_ms at 100 whatever the
    # consumer's, and waits that long between two refreshes even when both succeed: every
    # topics() of a query's offset lookups took 100 ms. Give it the consumer's setting.
    consumer._cluster.config["retry_backoff_ms"] = consumer.config["retry_backoff_ms"]
    return consumer


def _no_broker(options: KafkaSourceOptions) -> KafkaSourceError:
    return KafkaSourceError(
        f"No Kafka broker answered at kafka.bootstrap.servers={options.bootstrap_servers!r}. "
        "Is the cluster running (e.g. minikafka.wire.process.launch(), or `minikafka cluster up`), "
        "and is that its address?")


class KafkaOffsetReader:
    """Metadata and offset lookups for one query (see the module docstring)."""

    def __init__(self, options: KafkaSourceOptions) -> None:
        self.options = options
        self._consumer = None
        self._client = None
        self.plain = plain_settings(options.consumer_config)

    def __getstate__(self) -> dict:
        # Spark pickles the reader into its Python workers: a live connection cannot travel.
        return {"options": self.options, "_consumer": None, "_client": None, "plain": self.plain}

    @property
    def consumer(self):
        if self._consumer is None:
            # Short back-off unless the query set one: a trigger's lookups follow each other.
            fast = {} if "retry_backoff_ms" in self.options.consumer_config else {"retry_backoff_ms": 20}
            self._consumer = connect_consumer(self.options, **fast)
            if fast:
                # kafka-python spaces two metadata refreshes by retry_backoff_ms even when both
                # succeed, and a trigger asks for three in a row (prepare, initial, latest
                # offsets): 20 ms each, ~40 ms of every latestOffset. A failing refresh is
                # still spaced by kafka-python's own exponential back-off (KIP-580).
                self._consumer._cluster.config["retry_backoff_ms"] = METADATA_SPACING_MS
        return self._consumer

    @property
    def client(self) -> OffsetClient:
        if self._client is None:
            cfg = self.options.consumer_config
            self._client = OffsetClient(
                self.options.bootstrap_servers, client_id=cfg.get("client_id", "minikafka-spark"),
                request_timeout_ms=cfg.get("request_timeout_ms", 30_000),
                retry_backoff_ms=cfg.get("retry_backoff_ms", 20),
                isolation_level=cfg.get("isolation_level", "read_uncommitted"))
        return self._client

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def partitions(self, *, require_topics: bool) -> list[TopicPartition]:
        """The topic-partitions the subscription covers, sorted.

        With ``require_topics`` a topic named by ``subscribe`` or ``assign`` that does not
        exist is an error (our brokers, like Kafka 4, do not create topics on first read).
        """
        opts = self.options
        existing = self.topics()  # a fresh Metadata request: sees new topics and partitions
        if opts.strategy == "assign":
            missing = sorted({t for t, _ in opts.assigned} - existing)
            if missing and require_topics:
                raise self._missing(missing)
            known = {(t, p) for t in {t for t, _ in opts.assigned} & existing for p in self._partitions_of(t)}
            absent = sorted(set(opts.assigned) - known)
            if absent and require_topics and not missing:
                raise KafkaSourceError(
                    "Option 'assign' names partitions that do not exist: "
                    + ", ".join(f"{t}-{p}" for t, p in absent) + ".")
            return sorted(set(opts.assigned) & known)
        if opts.strategy == "subscribe":
            missing = sorted(set(opts.topics) - existing)
            if missing and require_topics:
                raise self._missing(missing)
        topics = sorted(t for t in existing if opts.wants(t))
        return sorted((t, p) for t in topics for p in self._partitions_of(t))

    def _partitions_of(self, topic: str) -> list[int]:
        """The partitions of ``topic`` in the metadata ``topics()`` fetched last."""
        if self.plain:
            return sorted(self.client.view.topics.get(topic, {})) if self.client.view is not None else []
        return sorted(self.consumer._cluster.partitions_for_topic(topic) or ())

    def topics(self) -> set[str]:
        """Every topic on the cluster, from a fresh Metadata request, within pollTimeoutMs."""
        if not self.plain:
            return self._consumer_topics()
        try:
            return set(self.client.metadata(time.monotonic() + self.options.poll_timeout_ms / 1000).topics)
        except LookupTimeout:
            raise self._no_metadata() from None
        except NoBrokerAnswered:
            raise _no_broker(self.options) from None

    def _no_metadata(self) -> KafkaSourceError:
        return KafkaSourceError(
            f"The brokers at {self.options.bootstrap_servers} sent no metadata within "
            f"kafkaConsumer.pollTimeoutMs={self.options.poll_timeout_ms} ms: are they up?")

    def _consumer_topics(self) -> set[str]:
        """``KafkaConsumer.topics()`` with its waits bounded (it waits for ever on a refresh
        that never ends)."""
        from kafka.errors import KafkaTimeoutError

        consumer = self.consumer
        cluster = consumer._cluster
        deadline = time.monotonic() + self.options.poll_timeout_ms / 1000

        def wait(future) -> None:
            # In rounds: each new request_update() nudges kafka-python's refresh loop again.
            while True:
                remaining_ms = int((deadline - time.monotonic()) * 1000)
                if remaining_ms <= 0:
                    raise self._no_metadata()
                try:
                    consumer._net.run(consumer._manager.wait_for, future, min(LOOKUP_ROUND_MS, remaining_ms))
                    return
                except KafkaTimeoutError:
                    future = cluster.request_update()

        if cluster.metadata_refresh_in_progress:  # it may have been sent before a change we must see
            wait(cluster.request_update())
        stash = cluster.need_all_topic_metadata
        cluster.need_all_topic_metadata = True
        try:
            wait(cluster.request_update())
        finally:
            cluster.need_all_topic_metadata = stash
        return cluster.topics()

    def _missing(self, topics: list[str]) -> KafkaSourceError:
        return KafkaSourceError(
            f"Topic{'s' if len(topics) > 1 else ''} {', '.join(map(repr, topics))} "
            f"do{'' if len(topics) > 1 else 'es'} not exist on the cluster at "
            f"{self.options.bootstrap_servers}. Create it first (KafkaAdminClient.create_topics, "
            "`minikafka topics --create`, or minikafka.feed.produce_trucks).")

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._offsets(tps, "beginning_offsets")

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._offsets(tps, "end_offsets")

    def _offsets(self, tps: Iterable[TopicPartition], method: str) -> dict[TopicPartition, int]:
        tps = sorted(set(tps))
        if not tps:
            return {}
        if self.plain:
            return self._plain_offsets(tps, EARLIEST_TIMESTAMP if method == "beginning_offsets" else LATEST_TIMESTAMP)
        from kafka import TopicPartition as KTP
        from kafka.errors import KafkaTimeoutError

        # Ask in short rounds, and between them look whether a topic was deleted meanwhile: a
        # broker that has not heard of the deletion yet may have listed it a moment ago, and
        # kafka-python would wait out the whole timeout for a partition that no longer exists.
        deadline = time.monotonic() + self.options.poll_timeout_ms / 1000
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            try:
                found = getattr(self.consumer, method)([KTP(t, p) for t, p in tps],
                                                       timeout_ms=max(1, min(LOOKUP_ROUND_MS, remaining_ms)))
                return {(tp.topic, tp.partition): off for tp, off in found.items()}
            except KafkaTimeoutError:
                vanished = {t for t, _ in tps} - self.topics()
                if vanished:
                    raise TopicsVanished(vanished) from None
                if time.monotonic() >= deadline:
                    raise self._no_offsets(tps) from None

    def _plain_offsets(self, tps: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        # The same rounds as with kafka-python: between them, look whether a topic was deleted.
        deadline = time.monotonic() + self.options.poll_timeout_ms / 1000
        while True:
            round_end = min(deadline, time.monotonic() + LOOKUP_ROUND_MS / 1000)
            try:
                return self.client.list_offsets(tps, timestamp, round_end)
            except NoBrokerAnswered:
                raise _no_broker(self.options) from None
            except LookupTimeout:
                if time.monotonic() >= deadline:
                    raise self._no_offsets(tps) from None
                vanished = {t for t, _ in tps} - self.topics()
                if vanished:
                    raise TopicsVanished(vanished) from None

    def compacted(self, topics: Iterable[str]) -> set[str]:
        """Which of ``topics`` may have holes between offsets: those whose ``cleanup.policy``
        includes ``compact``, and those no broker would describe (an old or partial
        Kafka-compatible broker: their reads cannot be checked for holes, so none is refused)."""
        topics = sorted(set(topics))
        if not topics:
            return set()
        deadline = time.monotonic() + min(self.options.poll_timeout_ms, LOOKUP_ROUND_MS) / 1000
        try:
            if self.plain:
                policies = self.client.topic_config(topics, "cleanup.policy", deadline)
            else:
                policies = self._described_policies(topics, deadline)
        except (LookupTimeout, NoBrokerAnswered, OSError):
            return set(topics)
        return {t for t in topics if "compact" in (policies.get(t) or "compact")}

    def _described_policies(self, topics: list[str], deadline: float) -> dict[str, str | None]:
        from kafka.protocol.admin import DescribeConfigsRequest

        c = self.consumer
        request = DescribeConfigsRequest(resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=2, resource_name=t, configuration_keys=["cleanup.policy"]) for t in topics],
            include_synonyms=False)
        node = c._manager.least_loaded_node()
        if node is None:
            return {}
        try:
            future = c._manager.send(request, node_id=node)
            response = c._net.run(c._manager.wait_for, future, max(1, int((deadline - time.monotonic()) * 1000)))
        except Exception:  # noqa: BLE001 - unsupported, timed out, disconnected: not known
            return {}
        return {r.resource_name: next((e.value for e in r.configs if e.name == "cleanup.policy"), None)
                for r in response.results if r.error_code == 0}

    def _no_offsets(self, tps: list[TopicPartition]) -> KafkaSourceError:
        return KafkaSourceError(
            f"The brokers at {self.options.bootstrap_servers} did not give the offsets of "
            f"{', '.join(f'{t}-{p}' for t, p in tps)} within kafkaConsumer.pollTimeoutMs="
            f"{self.options.poll_timeout_ms} ms: is every partition's leader up?")
