"""Read-process-write under faults: the transactional workload of the fault campaign.

Theory of operation
-------------------
Kafka's exactly-once loop (KIP-98, as Kafka Streams runs it): a consumer reads an input
topic ``in`` (read_committed), a producer writes one output per input to ``out`` (same
partition) and commits the input offsets *inside its transaction*
(``send_offsets_to_transaction``), then ``commit_transaction``. Each output value is the
input value plus the attempt's number (``v-3@7``), so every value is unique in the run and
names the input it was made from.

The inputs are written before the faults begin (acks=all, idempotent), so the checker
knows exactly what must come out. The loop takes ``max_poll_records`` inputs per
transaction, one transaction every ``interval_ms`` of simulated time, while the
nemesis strikes. Two faults belong to the workload itself, because only it knows when a
transaction is open (the nemesis asks for them with ``crash_producer``; the next
transaction takes it, after its sends and offsets, before its commit):

- *producer crash*: the application dies mid-transaction (both clients' nodes crash);
- *zombie*: the application stalls mid-transaction (its consumer's node crashes, its
  producer lives on); a new instance takes over, and the zombie then tries to commit: it
  must be fenced (``ProducerFencedError``).

Either way a new instance with the same ``transactional.id`` starts, and its
``init_transactions`` fences the old one and aborts its open transaction; it resumes from
the committed input offsets. A commit that raises (a timeout while no coordinator could be
reached) is ``unknown`` (Jepsen's ``:info``), and the application starts over the same way.

At the end (faults over, network healed, brokers restarted) the loop drains what is left,
then a read_committed consumer reads ``out`` from the beginning to its end offsets (the
last stable offset) and ``checker.transactions`` judges the history with the inputs.

``transactional=False`` is the negative control: the same loop with a plain (idempotent)
producer that flushes its outputs and then commits the consumer's offsets itself, which is
at-least-once: a crash between the two makes a new instance process the inputs again, and
the checker must see it (``input-not-once``).

Never: look inside the brokers to judge. The harness may look (``settled``) to know when
to stop waiting; the verdict comes only from what clients were told and what a reader read.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping

from minikafka.checker.transactions import TXN_ANOMALIES, TransactionHistory, analyse_transactions
from minikafka.clients.consumer import KafkaConsumer
from minikafka.clients.producer import KafkaProducer
from minikafka.cluster import Cluster
from minikafka.errors import KafkaError, ProducerFencedError
from minikafka.topic import OffsetAndMetadata, TopicPartition

INPUT, OUTPUT, GROUP, TRANSACTIONAL_ID = "in", "out", "rpw", "rpw"


@dataclass
class RpwReport:
    """One schedule's verdict: the transaction checker's anomalies (``cases``: examples),
    the transactions' outcomes (``counts``), what the workload did (``faults``: its own
    producer crashes and zombies, added to the nemesis's by the campaign)."""

    anomalies: dict
    cases: dict
    counts: dict
    faults: Counter = field(default_factory=Counter)
    unchecked: bool = False
    notes: list = field(default_factory=list)

    def table(self) -> str:
        lines = ["transactions: " + ", ".join(f"{k} {v}" for k, v in self.counts.items())]
        lines += [f"  {name:<16} {self.anomalies[name]:>5}  {self.cases.get(name, [])[:3]}"
                  for name in TXN_ANOMALIES]
        lines += self.notes
        return "\n".join(lines)


class ReadProcessWrite:
    """The loop of the module docstring on ``cluster``, recorded in ``history``."""

    def __init__(self, cluster: Cluster, *, partitions: int, replication_factor: int, inputs: int,
                 rng: random.Random, transactional: bool = True, max_poll_records: int = 3,
                 producer_config: Mapping[str, Any] | None = None, clients: list | None = None) -> None:
        self.cluster = cluster
        self.partitions = partitions
        self.transactional = transactional
        self.rng = rng
        self.max_poll_records = max_poll_records
        self.producer_config = {k: v for k, v in (producer_config or {}).items()
                                if k not in ("acks", "enable_idempotence")}
        self.clients = clients if clients is not None else []  # node ids the nemesis may cut off
        self.history = TransactionHistory()
        self.faults: Counter = Counter()
        self.notes: list[str] = []
        self.crash_requested = False
        self._futures: list = []  # the current transaction's sends
        cluster.create_topic(INPUT, partitions, replication_factor)
        cluster.create_topic(OUTPUT, partitions, replication_factor)
        self.inputs = [f"v-{i}".encode() for i in range(inputs)]
        writer = KafkaProducer(bootstrap_servers=cluster, acks="all", enable_idempotence=True)
        for i, value in enumerate(self.inputs):
            writer.send(INPUT, value, partition=i % partitions)
        writer.flush()
        writer.close()
        self.input_end = {p: len(range(p, inputs, partitions)) for p in range(partitions)}
        self.producer: KafkaProducer | None = None
        self.consumer: KafkaConsumer | None = None
        self._start_instance()

    # --- instances ------------------------------------------------------------------------------

    def _start_instance(self) -> bool:
        """A new application instance: its producer first (``init_transactions`` fences the
        old one and aborts its open transaction, so the offsets read next are stable). False
        if its init timed out (no coordinator could write, e.g. too few brokers alive): the
        next ``step`` tries again, as a supervisor restarting the application would."""
        self.producer = self.consumer = None
        producer = KafkaProducer(
            bootstrap_servers=self.cluster, acks="all", enable_idempotence=True,
            transactional_id=TRANSACTIONAL_ID if self.transactional else None, **self.producer_config)
        self.clients.append(producer.node_id)
        try:
            if self.transactional:
                producer.init_transactions()
        except KafkaError:
            self.cluster.world.crash(producer.node_id)
            self.faults["init-retried"] += 1
            return False
        consumer = KafkaConsumer(bootstrap_servers=self.cluster, group_id=GROUP, enable_auto_commit=False,
                                 auto_offset_reset="earliest", isolation_level="read_committed",
                                 max_poll_records=self.max_poll_records)
        consumer.assign([TopicPartition(INPUT, p) for p in range(self.partitions)])
        self.clients.append(consumer.node_id)
        self.producer, self.consumer = producer, consumer
        return True

    def _crash_instance(self, producer_too: bool = True) -> None:
        if self.consumer is None:
            return
        world = self.cluster.world
        if world.alive(self.consumer.node_id):
            world.crash(self.consumer.node_id)
        if producer_too and world.alive(self.producer.node_id):
            world.crash(self.producer.node_id)

    def crash_producer(self) -> None:
        """Asked by the nemesis: the next transaction dies after its sends, before its commit."""
        self.crash_requested = True

    # --- the loop -------------------------------------------------------------------------------

    def step(self, poll_ms: int = 100) -> bool:
        """Poll once and process what came as one transaction; False if nothing came."""
        if self.consumer is None and not self._start_instance():
            return False
        try:
            batches = self.consumer.poll(timeout_ms=poll_ms)
        except KafkaError:
            self._crash_instance()
            self._start_instance()
            return False
        if not batches:
            return False
        txn = self.history.begin()
        self._futures = []
        try:
            if self.transactional:
                self.producer.begin_transaction()
            for tp, records in batches.items():
                for r in records:
                    value = r.value + f"@{txn.number}".encode()  # unique per attempt
                    self._futures.append(self.producer.send(OUTPUT, value, partition=tp.partition))
                    self.history.sent(txn, value, r.value)
            offsets = {tp: OffsetAndMetadata(records[-1].offset + 1, "", -1) for tp, records in batches.items()}
            if self.transactional:
                self.producer.send_offsets_to_transaction(offsets, GROUP)
            else:
                self.producer.flush()
        except KafkaError:
            # Nothing asked the coordinator to commit: the next instance's init aborts it
            # (at-least-once: some outputs may be written, and will be written again).
            self.history.end(txn, "aborted" if self.transactional else "unknown")
            self._crash_instance()
            self._start_instance()
            return True
        if self.crash_requested:
            self.crash_requested = False
            self._mid_transaction_crash(txn)
            return True
        try:
            if self.transactional:
                self.producer.commit_transaction()
            else:
                self.consumer.commit(offsets)
            self.history.end(txn, "committed" if self.transactional else self._written())
        except KafkaError:
            self.history.end(txn, "unknown" if self.transactional else self._written())
            self._crash_instance()
            self._start_instance()
        return True

    def _mid_transaction_crash(self, txn) -> None:
        zombie = self.rng.random() < 0.5
        if zombie:
            self.faults["zombie"] += 1
            old = self.producer
            try:
                old.flush()  # its writes are in the logs (open transaction)
            except KafkaError:
                pass
            self._crash_instance(producer_too=False)
            self._start_instance()
            try:
                if self.transactional:
                    old.commit_transaction()
                    self.history.end(txn, "committed")  # a zombie that commits is an anomaly to see
                else:
                    old.flush()
                    self.history.end(txn, self._written())
            except ProducerFencedError:
                self.history.end(txn, "aborted")
            except KafkaError:
                self.history.end(txn, "unknown")
            if self.cluster.world.alive(old.node_id):
                self.cluster.world.crash(old.node_id)
        else:
            self.faults["producer-crash"] += 1
            self._crash_instance()
            # Never asked to commit: aborted (at-least-once: flushed, so written all the same).
            self.history.end(txn, "aborted" if self.transactional else self._written())
            self._start_instance()

    def _written(self) -> str:
        """At-least-once: "committed" (every output acknowledged) or "unknown". A flush
        waits for the answers; it does not say they were successes."""
        return "committed" if all(f.succeeded() for f in self._futures) else "unknown"

    def run(self, duration_ms: int, interval_ms: int) -> None:
        """Transactions, one every ``interval_ms``, for ``duration_ms`` of simulated time."""
        end = self.cluster.now + duration_ms
        while self.cluster.now < end:
            self.step()
            if self.cluster.now < end:
                self.cluster.advance(min(interval_ms, end - self.cluster.now))

    def drained(self) -> bool:
        """Every input's offset committed by the group (asked as a client would)."""
        if self.consumer is None:
            return False
        try:
            return all(self.consumer.committed(TopicPartition(INPUT, p)) == n for p, n in self.input_end.items())
        except KafkaError:
            return False

    def drain(self, timeout_ms: int = 60_000) -> bool:
        end = self.cluster.now + timeout_ms
        while self.cluster.now < end:
            if not self.step() and self.drained():
                return True
        return self.drained()

    def final_read(self, timeout_ms: int = 30_000) -> list[bytes] | None:
        """Every value of ``out`` a read_committed consumer sees, from the beginning to the
        end offsets (the last stable offset); None if it could not get there."""
        reader = KafkaConsumer(bootstrap_servers=self.cluster, isolation_level="read_committed",
                               enable_auto_commit=False, auto_offset_reset="earliest")
        try:
            tps = [TopicPartition(OUTPUT, p) for p in range(self.partitions)]
            reader.assign(tps)
            ends = reader.end_offsets(tps)
            values: list[bytes] = []
            deadline = self.cluster.now + timeout_ms
            while any(reader.position(tp) < ends[tp] for tp in tps):
                if self.cluster.now > deadline:
                    return None
                for records in reader.poll(timeout_ms=200).values():
                    values += [r.value for r in records]
            return values
        finally:
            reader.close()

    def judge(self, values: list[bytes] | None) -> RpwReport:
        if values is None:
            self.notes.append("note: the final read did not reach the end offsets")
        report = analyse_transactions(self.history, values or [], inputs=self.inputs)
        return RpwReport(report.anomalies, report.examples, report.counts, Counter(self.faults),
                         unchecked=values is None, notes=list(self.notes))


def lso_settled(cluster: Cluster, topic: str) -> bool:
    """No transaction open on ``topic``: every leader's last stable offset at its high
    watermark (for the harness, to know when to read; the checker never looks)."""
    for state in cluster.partitions_of(topic):
        if state.leader < 0:
            return False
        leader = cluster.replica(state.leader, topic, state.partition)
        if leader is None or leader.last_stable_offset != leader.high_watermark:
            return False
    return True
