"""Kafka's recipes for an application's consumer loop: where to commit, where to start, what to
make one transaction (lecture 07).

Theory of operation
-------------------
Lecture 07's rules are not the broker's decisions but the application's: the same broker and
the same consumer give at-most-once, at-least-once or exactly-once depending on where the
application puts its commit relative to its effect. Each function here is one of Kafka's
recipes, as one iteration (or one callback) of the application's loop, with the exercise's
signature; ``minikafka.rules`` names them (lecture "07") and the judge of lecture 07
(``minikafka.course.tester_delivery``) runs them, or a student's functions in their place,
under crashes:

=====================  =====================================================================
no_record_lost         poll, process every record, then ``commit()``: at-least-once (a crash
                       repeats only what the interrupted iteration processed)
no_record_twice        poll, ``commit()``, then process: at-most-once (a crash loses only
                       what the interrupted iteration's poll returned)
on_assigned            ``ConsumerRebalanceListener.onPartitionsAssigned`` of a sink that
                       stores offsets with its results: seek to the sink's offsets
count_reports          one atomic write per record to the sink: the count and the next
                       offset together ("storing offsets outside Kafka", KafkaConsumer's
                       javadoc)
transactional_step     read-process-write: outputs and the consumer's offsets in one Kafka
                       transaction (``send_offsets_to_transaction``), KIP-98/KIP-447
=====================  =====================================================================

They do no I/O of their own and read no clock: everything goes through the consumer, the
producer, ``process``, ``transform`` and ``db`` they are given.
"""

from __future__ import annotations

from typing import Any, Callable

from minikafka.topic import OffsetAndMetadata


def no_record_lost(consumer: Any, process: Callable[[Any], Any]) -> None:
    """One iteration, at-least-once: poll, process every record in order, then commit the
    positions (each partition's last record + 1)."""
    for tp, records in consumer.poll(timeout_ms=1_000).items():
        for record in records:
            process(record)
    consumer.commit()


def no_record_twice(consumer: Any, process: Callable[[Any], Any]) -> None:
    """One iteration, at-most-once: poll, commit the positions, then process the records."""
    batch = consumer.poll(timeout_ms=1_000)
    consumer.commit()
    for tp, records in batch.items():
        for record in records:
            process(record)


def on_assigned(consumer: Any, partitions: list, db: Any) -> None:
    """The group gave ``consumer`` these partitions: start each where the sink's own offset
    row says (the sink, not Kafka's committed offset, knows what is counted); a partition with
    no row yet starts at Kafka's committed offset, or by ``auto_offset_reset``."""
    for tp in partitions:
        stored = db.get(("offset", tp.topic, tp.partition))
        if stored is not None:
            consumer.seek(tp, stored)


def count_reports(consumer: Any, records: list, db: Any) -> None:
    """Count each record for its key (truck), exactly once: the count and the partition's next
    offset are one atomic transaction of the sink."""
    for record in records:
        count = ("count", record.key)
        db.transaction({count: db.get(count, 0) + 1,
                        ("offset", record.topic, record.partition): record.offset + 1})


def transactional_step(consumer: Any, producer: Any, transform: Callable[[Any], bytes]) -> None:
    """One iteration of read-process-write: poll; in one transaction, each record's
    ``transform`` to ``out`` (same partition) and the consumer's next offsets for the group
    ``upper``; commit it."""
    batch = consumer.poll(timeout_ms=1_000)
    if not batch:
        return
    producer.begin_transaction()
    for tp, records in batch.items():
        for record in records:
            producer.send("out", transform(record), partition=record.partition)
    producer.send_offsets_to_transaction(
        {tp: OffsetAndMetadata(records[-1].offset + 1, "", -1) for tp, records in batch.items()}, "upper")
    producer.commit_transaction()
