"""Delivery semantics, proven: what consumers *processed*, counted against what the topic holds.

Theory of operation
-------------------
The producer-side checker asks "is every acknowledged write in the log?". This one asks
the consumer's question: "was every record in the log *processed*, and how many times?".
Processing is the application's side effect (a row written, an e-mail sent); a consumer
crash can cut it off at any point, and where the consumer commits its position relative
to that side effect decides what a crash costs:

==================  ===================================================  ======================
strategy            the loop                                             a crash ...
==================  ===================================================  ======================
``at-most-once``    poll; ``commit()`` the batch's end; then process     loses the unprocessed
                    the records one by one                               rest of the batch
``at-least-once``   poll; process the batch; then ``commit()``           makes the next owner
                                                                         process again what
                                                                         was processed since
                                                                         the last commit
``auto-commit``     ``enable_auto_commit=True``; poll, hand the records  loses the hand-off
                    to a work queue (a worker thread's), process a few   queue, whose positions
                    per loop iteration                                   a later poll committed
``exactly-once``    results and next offsets written together to an      costs nothing
                    external store, one atomic update per record; on
                    assignment, ``seek`` to the store's offsets
==================  ===================================================  ======================

Auto commit alone is not at-most-once: Kafka's consumer (Java and kafka-python) commits,
at the start of ``poll()``, the positions of records returned by *earlier* polls. An
application that processes each batch before polling again (synchronous processing) has
therefore processed everything an auto commit covers: a crash costs re-processing, never
loss, i.e. at-least-once. Records are lost only when the application hands them off
(a queue, a thread) and polls again before they are processed; the ``auto-commit``
strategy makes that hand-off explicit.

Exactly-once here is Kafka's recipe for external systems (the "storing offsets outside
Kafka" section of the ``KafkaConsumer`` javadoc): the result and the offset it consumed
are one atomic write, so they can never disagree, and a new owner of a partition starts
where the store says, ignoring Kafka's committed offsets. (A real system would also fence
a zombie, a consumer that lost its partition without knowing it, with a conditional write;
the single-threaded runner here never makes one.)

Three rooms:

- the *consumer history* (``ConsumerHistory``): what each consumer processed (topic,
  partition, offset, value, consumer, time), what it committed and whether the commit
  was accepted, crashes and restarts;
- the *analysis* (``analyse_delivery(history, records)``): ``records`` is the topic's
  content (a checker ``History`` after ``final_read``, whose final read is used, or whose
  acknowledged sends are, or (topic, partition, offset, value) tuples); the report counts
  records *lost* (never processed by anyone) and *duplicated* (processed more than once,
  with how many times), and ``delivery_table`` puts reports side by side;
- the *runs*: ``run_delivery_scenario(strategy, seed=...)`` runs one seeded scenario on a
  simulated cluster (3 brokers, a topic with RF 3, a producer preloading half the records
  and sending the rest while the consumers run, 1 to 3 consumers in one group, crashes
  with ``cluster.kill_consumer`` at seeded points and restarts after seeded delays) until
  the consumers have caught up or a simulated deadline passes; ``delivery_campaign``
  adds up many seeds.

A seed decides a ``DeliveryPlan`` before anything runs (consumers, crash points, restart
delays, batch sizes), the same for every strategy: a table of the four strategies run
with one seed compares them under the same crashes. A crash point is "right after the
n-th processing" (every processing counts, repeats included), so a crash always lands
while a consumer is at work, where the strategies differ (right after the last record
of a batch, at-most-once loses nothing and at-least-once repeats the whole batch).
Consumers take turns (the order drawn from the seed), each turn one iteration of its
poll loop; ``poll`` runs the simulated world, so heartbeats, rebalances and fetches go
on between turns as they would between threads. Same seed, same run, same report.

Crashes are the only fault: no broker faults, and no consumer that stalls past
``max_poll_interval_ms`` and goes on working after the group gave its partitions away
(a zombie). A turn takes milliseconds, so the group never evicts a member between its
poll and its commit, and no commit is refused.

Where each part lives
---------------------
``history`` (what consumers did: ``ConsumerHistory``), ``report`` (the strategies, their
guarantees and ``analyse_delivery``), ``plan`` (what a seed decides: ``DeliveryPlan``),
``apps`` (one poll loop per strategy, the exactly-once ``ExternalStore``) and ``runner``
(one run, many runs). Import from ``minikafka.checker.delivery``.
"""

from __future__ import annotations

from minikafka.checker.delivery.history import (  # noqa: F401
    RecordKey,
    Processed,
    Commit,
    Crash,
    Restart,
    ConsumerHistory,
    topic_records,
)
from minikafka.checker.delivery.report import (  # noqa: F401
    AT_MOST_ONCE,
    AT_LEAST_ONCE,
    AUTO_COMMIT,
    EXACTLY_ONCE,
    STRATEGIES,
    LOST,
    DUPLICATED,
    GUARANTEES,
    DeliveryReport,
    analyse_delivery,
    TABLE_HEADER,
    delivery_table,
)
from minikafka.checker.delivery.plan import (  # noqa: F401
    DeliveryPlan,
    draw_plan,
    TOPIC,
    GROUP,
    DELIVERY_BROKER_CONFIG,
    ScenarioParams,
)
from minikafka.checker.delivery.apps import (  # noqa: F401
    ExternalStore,
    SeekToStoredOffsets,
)
from minikafka.checker.delivery.runner import (  # noqa: F401
    run_delivery_scenario,
    DeliveryCampaign,
    delivery_campaign,
)

__all__ = [
    "RecordKey",
    "Processed",
    "Commit",
    "Crash",
    "Restart",
    "ConsumerHistory",
    "topic_records",
    "AT_MOST_ONCE",
    "AT_LEAST_ONCE",
    "AUTO_COMMIT",
    "EXACTLY_ONCE",
    "STRATEGIES",
    "LOST",
    "DUPLICATED",
    "GUARANTEES",
    "DeliveryReport",
    "analyse_delivery",
    "TABLE_HEADER",
    "delivery_table",
    "DeliveryPlan",
    "draw_plan",
    "TOPIC",
    "GROUP",
    "DELIVERY_BROKER_CONFIG",
    "ScenarioParams",
    "ExternalStore",
    "SeekToStoredOffsets",
    "run_delivery_scenario",
    "DeliveryCampaign",
    "delivery_campaign",
]
