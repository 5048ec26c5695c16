"""KafkaTransactionalSink: write each Spark micro-batch to a Kafka topic in one Kafka transaction.

Theory of operation
-------------------
``foreachBatch(fn)`` may run a batch id twice: Spark records a batch's offsets before running
it and marks it done after ``fn`` returns, so a query that dies in between runs the same batch
id again, on the same input. ``KafkaBatchSink`` makes that replay harmless by reading what it
already wrote; this sink uses Kafka's transactions (KIP-98) instead:

- the producer has a ``transactional_id`` that the caller derives from the *query* (its name,
  or its checkpoint), so a restarted query gets the same one. ``init_transactions()`` then
  fences any older instance still alive (a zombie driver) and aborts what it left open;
- each batch is one transaction: its records, *and* the sink's progress, committed together.
  The progress is an offset commit (``send_offsets_to_transaction``) for the group named after
  the transactional id, on partition 0 of the output topic: offset ``batch_id + 1``, metadata
  ``spark.batch_id``. It says "batches up to here are in the topic" and becomes visible with
  the records or not at all;
- before a batch, a new instance reads that progress once (after ``init_transactions()``, so
  whatever a predecessor decided is settled); a batch at or below it is skipped. From then on
  the instance knows its progress itself: it is the only writer left.

Compared with ``KafkaBatchSink``: any number of partitions (records are placed by key, as any
producer places them), no need for a deterministic order of a batch's records, and a zombie
cannot add anything once fenced; but readers must use ``isolation_level="read_committed"``
(a ``read_uncommitted`` reader sees the records of aborted attempts too), and every batch costs
a transaction (a few round trips to the transaction coordinator, a marker per partition).

Invariants: after ``write(N, records)`` returns, a read_committed reader finds each of those
records exactly once under batch N, whatever earlier attempts did. Like ``KafkaBatchSink`` it
relies on Spark replaying only the last batch; unlike it, a replay may give another output (the
first attempt's output was aborted, or committed and then skipped: never both).

Never: commit a transaction without the progress in it, or trust a progress read before
``init_transactions()`` returned.
"""

from __future__ import annotations

from typing import Iterable

from minikafka.spark.sink import BATCH_HEADER, Record, _batch_id, checked_batch


def _fenced(producer):
    """The ProducerFencedError the producer's transaction manager holds, if it was fenced.

    kafka-python records a fencing as the transaction's fatal error, but the call that finds it
    depends on timing: when its sender thread already had the coordinator's answer, the next
    ``send`` or ``send_offsets_to_transaction`` raises a plain ``KafkaError`` ("... in an error
    state"); otherwise ``commit_transaction`` raises ``ProducerFencedError`` itself. Java's
    client throws ``ProducerFencedException`` either way, and so does this sink.
    """
    from kafka.errors import ProducerFencedError

    error = getattr(getattr(producer, "_transaction_manager", None), "last_error", None)
    if isinstance(error, ProducerFencedError):
        return ProducerFencedError(f"transactional id is fenced: a newer instance of the sink called "
                                   f"init_transactions() ({error})")
    return None


class KafkaTransactionalSink:
    """Exactly-once writes of micro-batches, one Kafka transaction per batch (see the module docstring)."""

    def __init__(self, bootstrap_servers: str, topic: str, transactional_id: str, *,
                 partitions: int = 1, replication_factor: int | None = None,
                 producer_config: dict | None = None) -> None:
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"topic must be a non-empty str, not {topic!r}")
        if not isinstance(transactional_id, str) or not transactional_id:
            raise ValueError(f"transactional_id must be a non-empty str derived from the query (its name "
                             f"or checkpoint), not {transactional_id!r}")
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.transactional_id = transactional_id
        self.group_id = transactional_id  # the group whose offset on partition 0 is the progress
        self.producer_config = dict(producer_config or {})
        for key in ("acks", "enable_idempotence", "transactional_id"):
            if key in self.producer_config:
                raise ValueError(f"producer_config may not set {key!r}: the sink sets it")
        self._producer = None
        self._next_batch: int | None = None  # the first batch id not yet in the topic
        self._ensure_topic(partitions, replication_factor)

    def _ensure_topic(self, partitions: int, replication_factor: int | None) -> None:
        from kafka.admin import KafkaAdminClient, NewTopic
        from kafka.errors import TopicAlreadyExistsError

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap_servers, client_id="minikafka-txn-sink")
        try:
            if self.topic not in admin.list_topics():
                rf = replication_factor or min(3, len(admin.describe_cluster()["brokers"]))
                try:
                    admin.create_topics([NewTopic(self.topic, partitions, rf)])
                except TopicAlreadyExistsError:
                    pass
        finally:
            admin.close()

    @property
    def _progress_tp(self):
        from kafka import TopicPartition

        return TopicPartition(self.topic, 0)

    def _writer(self):
        """The transactional producer, initialised (which fences older instances), and the progress."""
        if self._producer is None:
            from kafka import KafkaConsumer, KafkaProducer

            producer = KafkaProducer(bootstrap_servers=self.bootstrap_servers, acks="all",
                                     enable_idempotence=True, transactional_id=self.transactional_id,
                                     client_id="minikafka-txn-sink", **self.producer_config)
            try:
                producer.init_transactions()
                reader = KafkaConsumer(bootstrap_servers=self.bootstrap_servers, group_id=self.group_id,
                                       enable_auto_commit=False, client_id="minikafka-txn-sink")
                try:
                    self._next_batch = reader.committed(self._progress_tp) or 0
                finally:
                    reader.close()
            except Exception:
                producer.close(timeout=5)
                raise
            self._producer = producer
        return self._producer

    def write(self, batch_id: int, records: Iterable[Record]) -> int:
        """Write batch ``batch_id``'s records in one transaction; return how many were written
        (0 if the batch was already committed by this sink or an earlier instance)."""
        records = checked_batch(batch_id, records)
        from kafka.structs import OffsetAndMetadata

        producer = self._writer()
        if batch_id < self._next_batch:
            return 0
        header = [(BATCH_HEADER, str(batch_id).encode())]
        try:
            producer.begin_transaction()
            for key, value in records:
                producer.send(self.topic, key=key, value=value, headers=header)
            producer.send_offsets_to_transaction(
                {self._progress_tp: OffsetAndMetadata(batch_id + 1, BATCH_HEADER, -1)}, self.group_id)
            producer.commit_transaction()
        except Exception as failure:
            fenced = _fenced(producer)
            self._abandon()
            if fenced is not None and not isinstance(failure, type(fenced)):
                raise fenced from failure
            raise
        self._next_batch = batch_id + 1
        return len(records)

    def _abandon(self) -> None:
        """After a failed transaction, start afresh: the next write's ``init_transactions()``
        aborts whatever this one left open, and the progress is read again."""
        producer, self._producer, self._next_batch = self._producer, None, None
        try:
            producer.close(timeout=5)
        except Exception:  # noqa: BLE001 (a fenced or broken producer may fail to close; it is dropped)
            pass

    def read(self, isolation_level: str = "read_committed",
             timeout_s: float = 60.0) -> list[tuple[int, bytes | None, bytes]]:
        """Every record in the topic as (batch_id, key, value), partition by partition, as a
        consumer of ``isolation_level`` reads it (up to the end offsets at the call)."""
        import time

        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap_servers, group_id=None,
                                 enable_auto_commit=False, auto_offset_reset="earliest",
                                 isolation_level=isolation_level, client_id="minikafka-txn-sink")
        try:
            tps = [TopicPartition(self.topic, p) for p in sorted(consumer.partitions_for_topic(self.topic) or ())]
            consumer.assign(tps)
            end = consumer.end_offsets(tps)  # the last stable offsets, for read_committed
            out: dict = {tp: [] for tp in tps}
            deadline = time.monotonic() + timeout_s
            while any(consumer.position(tp) < end[tp] for tp in tps):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"could not read {self.topic} to its end offsets {end} within {timeout_s:g} s")
                for tp, batch in consumer.poll(timeout_ms=1000).items():
                    out[tp] += [(_batch_id(r, "KafkaTransactionalSink"), r.key, r.value) for r in batch if r.offset < end[tp]]
        finally:
            consumer.close()
        return [row for tp in tps for row in out[tp]]

    def batches(self, isolation_level: str = "read_committed") -> dict[int, int]:
        """How many records each batch id has in the topic, as a reader of ``isolation_level`` sees it."""
        counts: dict[int, int] = {}
        for batch_id, _, _ in self.read(isolation_level):
            counts[batch_id] = counts.get(batch_id, 0) + 1
        return dict(sorted(counts.items()))

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
        self._producer = None

    def __enter__(self) -> "KafkaTransactionalSink":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

