"""``minikafka.checker``: a Jepsen-style checker for the simulated cluster.

Theory of operation
-------------------
A checker judges what the clients saw, not how the brokers work: a run is reduced to a
*history* (every send and its outcome, every record every reader saw, in order) and the
history is checked against what Kafka promises. The rooms, one file each:

- ``history``: ``History``, ``Send`` (invoked, then ``ok`` with partition and offset,
  ``fail``, or ``info``: indeterminate, Jepsen's ``:info``) and ``Poll``;
- ``analysis``: ``analyse(history) -> Report`` finds Jepsen's Kafka anomalies
  (``lost-write``, ``duplicate``, ``inconsistent-offsets``, ``nonmonotonic-poll``,
  ``poll-skip``), each with examples; ``report.table()`` is the verdict;
- ``reader``: ``Reader``, the consumer that records polls (``start_reader``) and does the
  final read of every partition from log start to high watermark (``final_read``);
- ``campaign``: ``Workload`` (a producer and a reader, recorded), and
  ``run_schedule``/``fault_campaign``: many seeded runs under random faults, each
  replayable from its seed;
- ``delivery``: the consumers' side. ``ConsumerHistory`` (what each consumer processed
  and committed, crashes, restarts), ``analyse_delivery`` (records lost, records
  processed more than once), ``run_delivery_scenario``/``delivery_campaign``: the four
  delivery strategies (at-most-once, at-least-once, auto-commit with a hand-off,
  exactly-once with an external store) under seeded consumer crashes, and
  ``delivery_table`` to put them side by side.

- ``transactions``: ``TransactionHistory`` (each transaction's values and its outcome as
  the producer knew it) and ``analyse_transactions`` against a read_committed read:
  ``lost-committed``, ``duplicate``, ``aborted-visible``, ``not-atomic``, and for
  read-process-write ``input-not-once``.

By hand, in a notebook::

    history = History(clock=lambda: cluster.now)
    reader = start_reader(cluster, "events", history)
    history.send(producer, "events", b"v-1")  # producer.send, recorded
    ...                                   # kill, partition, heal, restart
    final_read(cluster, "events", history)
    print(analyse(history).table())

Or all at once: ``print(fault_campaign(schedules=200, acks=1).table())``; and for the
consumers: ``print(delivery_table(run_delivery_scenario(s, seed=7) for s in STRATEGIES))``.
"""

from minikafka.checker.analysis import (
    ANOMALIES,
    DUPLICATE,
    INCONSISTENT_OFFSETS,
    LOST_WRITE,
    NONMONOTONIC_POLL,
    POLL_SKIP,
    Anomaly,
    Report,
    analyse,
)
from minikafka.checker.campaign import (
    CAMPAIGN_BROKER_CONFIG,
    CAMPAIGN_PRODUCER_CONFIG,
    CampaignReport,
    Workload,
    fault_campaign,
    run_schedule,
    schedule_seeds,
    settle,
    settled,
)
from minikafka.checker.delivery import (
    STRATEGIES,
    Commit,
    ConsumerHistory,
    Crash,
    DeliveryCampaign,
    DeliveryPlan,
    DeliveryReport,
    ExternalStore,
    Processed,
    Restart,
    SeekToStoredOffsets,
    analyse_delivery,
    delivery_campaign,
    delivery_table,
    draw_plan,
    run_delivery_scenario,
    topic_records,
)
from minikafka.checker.history import FAIL, INFO, OK, FinalRead, History, Poll, Send
from minikafka.checker.reader import Reader, final_read, start_reader
from minikafka.checker.transactions import TXN_ANOMALIES, TransactionHistory, TxnReport, analyse_transactions

__all__ = [
    "ANOMALIES", "CAMPAIGN_BROKER_CONFIG", "CAMPAIGN_PRODUCER_CONFIG", "DUPLICATE", "FAIL",
    "INCONSISTENT_OFFSETS", "INFO", "LOST_WRITE", "NONMONOTONIC_POLL", "OK", "POLL_SKIP", "Anomaly",
    "CampaignReport", "FinalRead", "History", "Poll", "Reader", "Report", "Send", "Workload", "analyse",
    "fault_campaign", "final_read", "run_schedule", "schedule_seeds", "settle", "settled", "start_reader",
    # delivery
    "STRATEGIES", "Commit", "ConsumerHistory", "Crash", "DeliveryCampaign", "DeliveryPlan", "DeliveryReport",
    "ExternalStore", "Processed", "Restart", "SeekToStoredOffsets", "analyse_delivery", "delivery_campaign",
    "delivery_table", "draw_plan", "run_delivery_scenario", "topic_records",
    # transactions
    "TXN_ANOMALIES", "TransactionHistory", "TxnReport", "analyse_transactions",
]
