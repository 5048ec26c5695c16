"""KafkaBatchSink: write each Spark micro-batch's output to a Kafka topic exactly once.

Theory of operation
-------------------
``foreachBatch(fn)`` calls ``fn(batch_df, batch_id)`` once per micro-batch. Spark records a
batch's offsets (the *offset log*) before running it and marks it done (the *commit log*)
after ``fn`` returns. A query that dies in between is restarted by running the same batch
id again, on the same input offsets, so it computes the same output. A plain producer in
``fn`` would write that output twice.

So the sink makes the write idempotent, keyed by the batch id:

- every record it writes carries the header ``spark.batch_id``;
- a batch's records are sorted before writing, so a replay writes them in the same order;
- the topic has one partition, and the producer is idempotent with acks=all: what one
  attempt got acknowledged is a *prefix* of the sorted list, in order, without duplicates;
- before writing batch N the sink reads the topic's tail: if a later batch is there, N is
  done; otherwise the k records of batch N already there are the first k of the list, and
  only the rest is sent. The tail's end is the broker's ListOffsets answer, checked against
  what the read fetches (a record at or past it, a high watermark above it): a wrong answer
  stops the sink with the broker named, where it would have written records twice.

Invariants: after ``write(N, records)`` returns, the topic holds each of those records
exactly once under batch N, however many earlier attempts died part-way. It relies on
Spark's promise that batch ids only ever replay the *last* batch and that a replay gives
the same output; a non-deterministic ``fn`` (random numbers, wall-clock time in values)
breaks it. It assumes one writer: two queries writing to the same topic need a fencing
token, which ``KafkaTransactionalSink`` (``transactional_sink.py``) gets from Kafka's transactions.
"""

from __future__ import annotations

from typing import Iterable

BATCH_HEADER = "spark.batch_id"

Record = tuple[bytes | None, bytes]


def checked_batch(batch_id: int, records: Iterable[Record]) -> list[Record]:
    """``records`` as a list, once ``batch_id`` is Spark's batch id (an int >= 0, else
    ``ValueError``) and each record a (key: bytes | None, value: bytes) tuple (else
    ``TypeError`` naming it): what both sinks' ``write`` take."""
    if not isinstance(batch_id, int) or isinstance(batch_id, bool) or batch_id < 0:
        raise ValueError(f"batch_id must be Spark's batch id, an int >= 0, not {batch_id!r}")
    records = list(records)
    for record in records:
        if (not isinstance(record, tuple) or len(record) != 2 or not isinstance(record[1], bytes)
                or not isinstance(record[0], (bytes, type(None)))):
            raise TypeError(f"a record is a (key: bytes | None, value: bytes) tuple, not {record!r}")
    return records


class KafkaBatchSink:
    """Exactly-once writes of micro-batches to a one-partition topic (see the module docstring)."""

    def __init__(self, bootstrap_servers: str, topic: str, *, replication_factor: int | None = None,
                 producer_config: dict | None = None) -> None:
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"topic must be a non-empty str, not {topic!r}")
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.replication_factor = replication_factor
        self.producer_config = dict(producer_config or {})
        for key in ("acks", "enable_idempotence"):
            if key in self.producer_config:
                raise ValueError(f"producer_config may not set {key!r}: exactly-once needs acks='all' "
                                 "and an idempotent producer")
        self._producer = None
        self._consumer = None
        self._ensure_topic()

    # --- the topic ---------------------------------------------------------------------------

    def _ensure_topic(self) -> None:
        from kafka.admin import KafkaAdminClient, NewTopic
        from kafka.errors import TopicAlreadyExistsError

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap_servers, client_id="minikafka-batch-sink")
        try:
            if self.topic not in admin.list_topics():
                rf = self.replication_factor or min(3, len(admin.describe_cluster()["brokers"]))
                try:
                    admin.create_topics([NewTopic(self.topic, 1, rf)])
                except TopicAlreadyExistsError:
                    pass
            described = admin.describe_topics([self.topic])[0]
            count = len(described["partitions"])
        finally:
            admin.close()
        if count != 1:
            raise ValueError(f"KafkaBatchSink needs a topic with one partition (to keep a batch's records "
                             f"in order); {self.topic!r} has {count}")

    @property
    def _tp(self):
        from kafka import TopicPartition

        return TopicPartition(self.topic, 0)

    def _reader(self):
        if self._consumer is None:
            from kafka import KafkaConsumer

            self._consumer = KafkaConsumer(bootstrap_servers=self.bootstrap_servers, group_id=None,
                                           enable_auto_commit=False, auto_offset_reset="earliest",
                                           client_id="minikafka-batch-sink")
            self._consumer.assign([self._tp])
        return self._consumer

    def _read(self, start: int, end: int, timeout_s: float = 60.0, *,
              end_is_log_end: bool = False) -> list[tuple[int, bytes | None, bytes]]:
        """Records at offsets [start, end) as (batch_id, key, value).

        With ``end_is_log_end`` (``end`` is the broker's ListOffsets answer and nothing has
        been written since: the sink is the topic's only writer), a record at ``end`` or after
        it, or a fetch's high watermark above ``end``, proves that answer wrong: the
        replay would write again what is there, so the sink stops instead.
        """
        import time

        consumer = self._reader()
        consumer.seek(self._tp, start)
        out = []
        deadline = time.monotonic() + timeout_s
        while consumer.position(self._tp) < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {self.topic}-0 offsets [{start}, {end}) from "
                                   f"{self.bootstrap_servers} within {timeout_s:g} s: is its leader up?")
            for record in consumer.poll(timeout_ms=1000).get(self._tp, []):
                if record.offset < end:
                    out.append((_batch_id(record), record.key, record.value))
                elif end_is_log_end:
                    raise self._wrong_end(end, f"a record at offset {record.offset}")
        hw = consumer.highwater(self._tp)
        if end_is_log_end and hw is not None and hw > end:  # (below: a new leader's lagging one)
            raise self._wrong_end(end, f"a high watermark of {hw} in its Fetch answer")
        return out

    def _wrong_end(self, end: int, seen: str):
        from minikafka.spark.data_consumer import BrokerAnsweredWrongly

        consumer = self._reader()
        cluster = consumer._cluster
        leader = cluster.leader_for_partition(self._tp)
        broker = cluster.broker_metadata(leader) if leader is not None and leader >= 0 else None
        where = f"{broker.host}:{broker.port} (broker {leader})" if broker is not None else self.bootstrap_servers
        return BrokerAnsweredWrongly(
            f"The broker {where} (leader of {self.topic}-0) said the log ends at offset {end} "
            f"(ListOffsets), but the sink then read {seen}, and nothing was written in between: "
            "replaying the batch on that answer would write records twice. KafkaBatchSink stops "
            "rather than double the output; is this a Kafka-compatible broker whose ListOffsets "
            "answers are wrong?")

    def _bounds(self) -> tuple[int, int]:
        consumer = self._reader()
        tp = self._tp
        return consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]

    # --- what is there -----------------------------------------------------------------------

    def read(self) -> list[tuple[int, bytes | None, bytes]]:
        """Everything in the topic, as (batch_id, key, value) in offset order."""
        return self._read(*self._bounds())

    def batches(self) -> dict[int, int]:
        """How many records each batch id has in the topic."""
        counts: dict[int, int] = {}
        for batch_id, _, _ in self.read():
            counts[batch_id] = counts.get(batch_id, 0) + 1
        return counts

    def _written(self, batch_id: int) -> int | None:
        """Records of ``batch_id`` at the topic's tail; None if a later batch follows (done)."""
        begin, end = self._bounds()
        count, chunk, pos = 0, 64, end
        while pos > begin:
            start = max(begin, pos - chunk)
            ids = [b for b, _, _ in self._read(start, pos, end_is_log_end=pos == end)]
            if any(b > batch_id for b in ids):
                return None
            count += sum(1 for b in ids if b == batch_id)
            if any(b < batch_id for b in ids):
                break
            pos, chunk = start, chunk * 4
        return count

    # --- writing -----------------------------------------------------------------------------

    def write(self, batch_id: int, records: Iterable[Record]) -> int:
        """Write batch ``batch_id``'s records exactly once; return how many were sent now."""
        records = checked_batch(batch_id, records)
        records.sort(key=lambda r: (r[0] or b"", r[1]))
        done = self._written(batch_id)
        if done is None:
            return 0
        todo = records[done:]
        if not todo:
            return 0
        producer = self._writer()
        header = [(BATCH_HEADER, str(batch_id).encode())]
        futures = [producer.send(self.topic, key=k, value=v, partition=0, headers=header) for k, v in todo]
        producer.flush()
        failed = [f.exception for f in futures if f.failed()]
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(todo)} records of batch {batch_id} were not "
                               f"written to {self.topic!r}: {failed[0]!r}; the query's retry of this "
                               "batch will write them")
        return len(todo)

    def _writer(self):
        if self._producer is None:
            from kafka import KafkaProducer

            self._producer = KafkaProducer(bootstrap_servers=self.bootstrap_servers, acks="all",
                                           enable_idempotence=True, client_id="minikafka-batch-sink",
                                           **self.producer_config)
        return self._producer

    def close(self) -> None:
        for client in (self._producer, self._consumer):
            if client is not None:
                client.close()
        self._producer = self._consumer = None

    def __enter__(self) -> "KafkaBatchSink":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _batch_id(record, sink: str = "KafkaBatchSink") -> int:
    """The batch id a sink stamped on ``record`` (its ``BATCH_HEADER``)."""
    for key, value in record.headers or ():
        if key == BATCH_HEADER:
            return int(value)
    raise ValueError(f"record at offset {record.offset} of {record.topic} has no {BATCH_HEADER!r} "
                     f"header: {sink} needs a topic only it writes to")
