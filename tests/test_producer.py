"""The producer client: RecordAccumulator, Sender and KafkaProducer.

Three layers of tests, fastest first:

- the accumulator alone (no network, no clock: ``now`` is an argument);
- the Sender as a sans-I/O state machine, fed by hand: a ``World`` supplies only the clock
  and timers, and fake brokers record what the Sender sends and answer what the test says;
- ``KafkaProducer`` against the real simulated ``Cluster``, with faults: lost requests,
  lost responses, dead leaders, shrunken ISRs, a full buffer.

Everything is seeded and simulated: the whole file runs in a few seconds.
"""

from __future__ import annotations

import json
import random

import pytest

from minikafka.clients import KafkaConfigurationError, KafkaProducer, RecordMetadata
from minikafka.clients.future import Future
from minikafka.clients.record_accumulator import RecordAccumulator, estimate_size_in_bytes
from minikafka.clients.sender import ClusterMetadata, Sender, TransactionManager
from minikafka.errors import (
    NotEnoughReplicasAfterAppendError,
    OutOfOrderSequenceNumberError,
    RequestTimedOutError,
)
from minikafka.cluster import Cluster
from minikafka.errors import (
    CorruptRecordError,
    IllegalStateError,
    InvalidTopicError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NotEnoughReplicasError,
)
from minikafka.messages import (
    COORDINATOR_LOAD_IN_PROGRESS,
    CORRUPT_MESSAGE,
    DUPLICATE_SEQUENCE_NUMBER,
    NO_ERROR,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataRequest,
    MetadataResponse,
    PartitionMetadata,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    TopicMetadata,
    UNKNOWN_SERVER_ERROR,
)
from minikafka.node import StateMachine
from minikafka.partitioner import partition_for_key
from minikafka.records import Compression, MemoryRecords, Record, RecordBatch
from minikafka.sim import World
from minikafka.topic import TopicPartition

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


# --- the accumulator alone --------------------------------------------------------------------------------


class StaticMetadata:
    """Leaders by partition, for accumulator tests."""

    def __init__(self, leaders):
        self.leaders = leaders

    def leader_for_partition(self, tp):
        return self.leaders.get(tp)

    def partitions_for_broker(self, node):
        return sorted(tp for tp, leader in self.leaders.items() if leader == node)


def accumulator(**config):
    config.setdefault("batch_size", 200)
    return RecordAccumulator(**config)


def test_records_join_the_open_batch_until_batch_size_then_a_new_batch_starts():
    acc = accumulator(batch_size=200)
    results = [acc.append(TP0, 0, None, b"v" * 30, [], now=0) for _ in range(6)]  # 61 + 3 * 37 bytes
    assert [r.new_batch_created for r in results] == [True, False, False, True, False, False]
    # The first batch is "full" as soon as a second one queues behind it.
    assert [r.batch_is_full for r in results] == [False, False, False, True, True, True]
    assert [b.record_count for b in acc.batches(TP0)] == [3, 3]
    # A record larger than batch_size still gets a batch of its own.
    big = acc.append(TP1, 0, None, b"x" * 500, [], now=0)
    assert big.new_batch_created and acc.batches(TP1)[0].record_count == 1


def test_a_batch_is_ready_after_linger_ms_or_when_full_or_flushing():
    acc = accumulator(batch_size=200, linger_ms=50)
    md = StaticMetadata({TP0: 1, TP1: 2})
    acc.append(TP0, 0, None, b"v", [], now=0)
    assert acc.ready(md, now=10) == (set(), 40, False)  # lingering: 40 ms to go
    assert acc.ready(md, now=50)[0] == {1}
    for _ in range(10):  # fill TP1 past one batch: ready without lingering
        acc.append(TP1, 0, None, b"v" * 40, [], now=10)
    assert acc.ready(md, now=10)[0] == {2}
    acc.begin_flush()
    assert acc.ready(md, now=10)[0] == {1, 2}
    acc.end_flush()
    # A partition without a known leader is reported, so the Sender refreshes metadata.
    assert acc.ready(StaticMetadata({TP1: 2}), now=50)[2] is True


def test_drain_takes_one_batch_per_partition_and_closes_it_into_record_batch_bytes():
    acc = accumulator(batch_size=200, compression_type="gzip")
    md = StaticMetadata({TP0: 1, TP1: 1})
    for i in range(5):
        acc.append(TP0, 1000 + i, b"k%d" % i, b"v" * 30, [("h", b"1")], now=0)
    acc.append(TP1, 7, None, b"w", [], now=0)
    drained = acc.drain(md, [1], max_size=10_000, now=0)[1]
    assert [(b.topic_partition, b.record_count) for b in drained] == [(TP0, 3), (TP1, 1)]
    batch = RecordBatch(drained[0].buffer).validate()
    assert batch.compression == Compression.GZIP
    assert [(r.key, r.timestamp, r.headers) for r in batch.records()] == [
        (b"k0", 1000, (("h", b"1"),)), (b"k1", 1001, (("h", b"1"),)), (b"k2", 1002, (("h", b"1"),))]
    assert batch.producer_id == -1 and batch.base_sequence == -1  # not idempotent
    # max_size bounds a request, but one batch always goes.
    assert len(acc.drain(md, [1], max_size=1, now=0)[1]) == 1


def test_buffer_memory_is_reserved_per_batch_and_freed_when_the_batch_completes():
    acc = accumulator(batch_size=100, buffer_memory=250)
    first = acc.append(TP0, 0, None, b"v" * 20, [], now=0)
    acc.append(TP1, 0, None, b"v" * 20, [], now=0)
    assert acc.available_memory == 50
    blocked = acc.append(TopicPartition("t", 2), 0, None, b"v", [], now=0)
    assert blocked.future is None and blocked.memory_needed == 100
    batch = acc.batches(TP0)[0]
    batch.complete(base_offset=0)
    acc.deallocate(batch)
    assert acc.available_memory == 150 and first.future.get().offset == 0


def test_idempotent_drain_stamps_sequences_and_retries_go_back_in_sequence_order():
    tm = TransactionManager()
    acc = accumulator(batch_size=160, transaction_manager=tm)
    md = StaticMetadata({TP0: 1})
    for _ in range(6):
        acc.append(TP0, 0, None, b"v" * 40, [], now=0)  # 2 records per batch -> 3 batches
    assert acc.drain(md, [1], 10_000, now=0)[1] == []  # no producer id yet: nothing goes
    tm.set_producer_id_and_epoch(42, 0)
    sent = []
    for _ in range(3):
        (batch,) = acc.drain(md, [1], 10_000, now=0)[1]
        tm.add_in_flight_batch(batch)
        sent.append(batch)
    assert [(b.producer_id, b.base_sequence) for b in sent] == [(42, 0), (42, 2), (42, 4)]
    assert RecordBatch(sent[1].buffer).base_sequence == 2
    # Batches 2 and 1 fail (in that order): they queue by sequence, not by failure time.
    acc.reenqueue(sent[2], now=0)
    acc.reenqueue(sent[1], now=0)
    assert [b.base_sequence for b in acc.batches(TP0)] == [2, 4]
    # Batch 0 is unresolved, so the retry of 2 must wait; once 0 is acked it goes, same bytes.
    assert acc.drain(md, [1], 10_000, now=1000)[1] == []
    tm.on_acked(sent[0])
    (retry,) = acc.drain(md, [1], 10_000, now=1000)[1]
    assert retry is sent[1] and retry.base_sequence == 2
    assert acc.drain(md, [1], 10_000, now=1000)[1] == []  # 4 waits for 2


def test_estimated_size_is_exact_for_an_uncompressed_single_record_batch():
    for key, value, headers in [(None, b"", []), (b"k", b"v" * 300, [("a", b"b")]), (b"", None, [])]:
        built = RecordBatch.build([Record(key, value, 0, tuple(headers))])
        assert estimate_size_in_bytes(key, value, headers) == built.size_in_bytes


# --- the Sender, fed by hand ---------------------------------------------------------------------------------


class FakeBroker(StateMachine):
    """Records what arrives; the test answers."""

    def __init__(self, node_id):
        super().__init__(node_id)
        self.inbox = []

    def on_message(self, src, message):
        self.inbox.append((src, message))


class Rig:
    """A Sender named "p" and fake brokers 1 and 2 in a World used only as clock and mailman."""

    def __init__(self, *, idempotent=False, leaders=(1, 2), **config):
        self.world = World(seed=1)
        self.brokers = {b: FakeBroker(b) for b in (1, 2)}
        for b, node in self.brokers.items():
            self.world.add(b, lambda node=node: node)
        self.leaders = list(leaders)
        self.epoch = 0
        tm = TransactionManager() if idempotent else None
        acc = RecordAccumulator(transaction_manager=tm, **config)
        self.sender = Sender("p", acc, ClusterMetadata([1, 2]), transaction_manager=tm, **config)
        self.world.add("p", lambda: self.sender)
        self.world.advance(1)  # what the Sender sent at start has arrived

    def take(self, broker, kind):
        """Every message of type ``kind`` broker got so far (removed from its inbox)."""
        node = self.brokers[broker]
        got = [m for _, m in node.inbox if isinstance(m, kind)]
        node.inbox = [(s, m) for s, m in node.inbox if not isinstance(m, kind)]
        return got

    def reply(self, broker, message):
        self.world.call_node(broker, lambda b: b.send("p", message))
        self.world.advance(2)  # the answer arrives, and whatever the Sender sends in reply

    def metadata_response(self, corr):
        parts = tuple(PartitionMetadata(p, NO_ERROR, leader, self.epoch, (1, 2), (1, 2))
                      for p, leader in enumerate(self.leaders))
        return MetadataResponse(corr, (1, 2), 3000, (TopicMetadata("t", NO_ERROR, parts),))

    def answer_metadata(self):
        for b in (1, 2):
            for req in self.take(b, MetadataRequest):
                self.reply(b, self.metadata_response(req.correlation_id))

    def start_topic(self):
        self.world.call_node("p", lambda s: s.add_topic("t"))
        self.world.advance(1)
        self.answer_metadata()

    def append(self, tp, value, key=None):
        result = self.world.call_node("p", lambda s: s.append(tp, self.world.now, key, value, []))
        return result.future

    def produce_answer(self, req, *errors_and_offsets):
        parts = tuple(ProducePartitionResponse(pp.topic, pp.partition, err, off)
                      for pp, (err, off) in zip(req.partitions, errors_and_offsets))
        return ProduceResponse(req.correlation_id, parts)


def test_sender_fetches_metadata_then_sends_one_produce_request_per_leader():
    rig = Rig(linger_ms=5)
    rig.start_topic()
    f0 = [rig.append(TP0, b"a"), rig.append(TP0, b"b")]
    f1 = rig.append(TP1, b"c")
    rig.world.advance(4)
    assert rig.take(1, ProduceRequest) == []  # still lingering
    rig.world.advance(2)
    (req1,) = rig.take(1, ProduceRequest)
    (req2,) = rig.take(2, ProduceRequest)
    assert [(p.topic, p.partition) for p in req1.partitions] == [("t", 0)]
    assert req1.acks == -1 and req1.timeout_ms == 30000
    assert [r.value for r in MemoryRecords(req1.partitions[0].records).records()] == [b"a", b"b"]
    rig.reply(1, rig.produce_answer(req1, (NO_ERROR, 100)))
    assert [f.get(timeout=0).offset for f in f0] == [100, 101]
    assert not f1.is_done
    rig.reply(2, rig.produce_answer(req2, (NO_ERROR, 7)))
    meta = f1.get(timeout=0)
    assert isinstance(meta, RecordMetadata) and (meta.topic, meta.partition, meta.offset) == ("t", 1, 7)


def test_not_leader_refreshes_metadata_and_retries_after_backoff_at_the_new_leader():
    rig = Rig(retry_backoff_ms=100)
    rig.start_topic()
    rig.world.advance(200)  # past the metadata refresh backoff
    f = rig.append(TP0, b"a")
    rig.world.advance(1)
    (req,) = rig.take(1, ProduceRequest)
    rig.leaders = [2, 2]
    rig.epoch = 1
    rig.reply(1, rig.produce_answer(req, (NOT_LEADER_OR_FOLLOWER, -1)))
    assert not f.is_done
    rig.answer_metadata()  # the error asked for fresh metadata
    rig.world.advance(50)
    assert rig.take(2, ProduceRequest) == []  # backing off
    rig.world.advance(60)
    (retry,) = rig.take(2, ProduceRequest)
    assert retry.partitions[0].records == req.partitions[0].records  # the same bytes
    rig.reply(2, rig.produce_answer(retry, (NO_ERROR, 5)))
    assert f.get(timeout=0).offset == 5
    assert rig.sender.sensors["record-retry-total"] == 1


def test_no_answer_within_request_timeout_fails_every_request_on_that_connection_and_retries():
    rig = Rig(request_timeout_ms=1000, delivery_timeout_ms=5000)
    rig.start_topic()
    fa = rig.append(TP0, b"a")
    rig.world.advance(1)
    fb = rig.append(TP0, b"b")
    rig.world.advance(1)
    assert len(rig.take(1, ProduceRequest)) == 2  # pipelined: two in flight
    rig.world.advance(1000)
    assert rig.sender.sensors["connection-close-total"] == 1 and not fa.is_done
    rig.world.advance(200)
    rig.answer_metadata()
    rig.world.advance(200)
    retries = rig.take(1, ProduceRequest)
    assert len(retries) == 2
    for i, req in enumerate(retries):
        rig.reply(1, rig.produce_answer(req, (NO_ERROR, 10 + i)))
    # As in Kafka, each failed batch goes back to the *front* of its queue: without
    # idempotence, two batches failed together are resent in reverse order.
    assert (fa.get(timeout=0).offset, fb.get(timeout=0).offset) == (11, 10)


def test_an_answer_after_the_connection_was_closed_is_ignored():
    rig = Rig(request_timeout_ms=1000)
    rig.start_topic()
    f = rig.append(TP0, b"a")
    rig.world.advance(1)
    (req,) = rig.take(1, ProduceRequest)
    rig.world.advance(1000)
    rig.reply(1, rig.produce_answer(req, (NO_ERROR, 99)))  # too late: that connection is gone
    assert not f.is_done


def test_a_non_retriable_error_fails_the_future_at_once():
    rig = Rig()
    rig.start_topic()
    f = rig.append(TP0, b"a")
    rig.world.advance(1)
    (req,) = rig.take(1, ProduceRequest)
    rig.reply(1, rig.produce_answer(req, (CORRUPT_MESSAGE, -1)))
    with pytest.raises(CorruptRecordError):
        f.get(timeout=0)
    assert rig.sender.accumulator.available_memory == rig.sender.accumulator.config["buffer_memory"]


def test_retriable_errors_are_retried_until_delivery_timeout_then_kafka_timeout_error():
    rig = Rig(request_timeout_ms=1000, delivery_timeout_ms=2000, retry_backoff_ms=100)
    rig.start_topic()
    f = rig.append(TP0, b"a")
    attempts = 0
    while not f.is_done and rig.world.now < 5000:
        rig.world.advance(10)
        for req in rig.take(1, ProduceRequest):
            attempts += 1
            rig.reply(1, rig.produce_answer(req, (NOT_ENOUGH_REPLICAS, -1)))
    with pytest.raises(KafkaTimeoutError, match="Expiring 1 record"):
        f.get(timeout=0)
    assert 15 <= attempts <= 21 and rig.world.now <= 2100


def test_retries_zero_fails_with_the_brokers_error():
    rig = Rig(retries=0)
    rig.start_topic()
    f = rig.append(TP0, b"a")
    rig.world.advance(1)
    (req,) = rig.take(1, ProduceRequest)
    rig.reply(1, rig.produce_answer(req, (NOT_ENOUGH_REPLICAS_AFTER_APPEND, -1)))
    with pytest.raises(NotEnoughReplicasAfterAppendError):
        f.get(timeout=0)


def test_acks_0_completes_when_the_request_is_sent_and_expects_no_answer():
    rig = Rig(acks=0)
    rig.start_topic()
    f = rig.append(TP0, b"a")
    now = rig.world.now
    rig.world.run_until(lambda: f.is_done)
    assert rig.world.now == now and f.get(timeout=0).offset == -1
    assert rig.sender.in_flight_request_count() == 0


def test_at_most_max_in_flight_requests_per_broker():
    rig = Rig(max_in_flight_requests_per_connection=2)
    rig.start_topic()
    futures = []
    for i in range(4):
        futures.append(rig.append(TP0, b"%d" % i))
        rig.world.advance(1)  # one record, one batch, one request each
    first = rig.take(1, ProduceRequest)
    assert len(first) == 2
    rig.reply(1, rig.produce_answer(first[0], (NO_ERROR, 0)))
    second = rig.take(1, ProduceRequest)
    assert len(second) == 1  # one slot freed, one more request
    assert [r.value for r in MemoryRecords(second[0].partitions[0].records).records()] == [b"2", b"3"]


def test_max_in_flight_1_without_idempotence_mutes_the_partition_so_a_retry_cannot_be_overtaken():
    rig = Rig(max_in_flight_requests_per_connection=1, batch_size=60)
    rig.start_topic()
    fa = rig.append(TP0, b"a" * 40)
    rig.world.advance(1)
    (req_a,) = rig.take(1, ProduceRequest)
    fb = rig.append(TP0, b"b" * 40)
    rig.world.advance(1)
    assert rig.take(1, ProduceRequest) == []
    rig.reply(1, rig.produce_answer(req_a, (NOT_ENOUGH_REPLICAS, -1)))
    rig.world.advance(150)
    (retry,) = rig.take(1, ProduceRequest)
    assert retry.partitions[0].records == req_a.partitions[0].records  # a goes again before b
    rig.reply(1, rig.produce_answer(retry, (NO_ERROR, 0)))
    (req_b,) = rig.take(1, ProduceRequest)
    rig.reply(1, rig.produce_answer(req_b, (NO_ERROR, 1)))
    assert (fa.get(timeout=0).offset, fb.get(timeout=0).offset) == (0, 1)


def test_without_idempotence_a_retried_batch_lands_after_a_later_one():
    rig = Rig(batch_size=60)
    rig.start_topic()
    fa = rig.append(TP0, b"a" * 40)
    rig.world.advance(1)
    fb = rig.append(TP0, b"b" * 40)
    rig.world.advance(1)
    req_a, req_b = rig.take(1, ProduceRequest)
    rig.reply(1, rig.produce_answer(req_a, (NOT_ENOUGH_REPLICAS, -1)))  # the ISR was short, briefly
    rig.reply(1, rig.produce_answer(req_b, (NO_ERROR, 0)))
    rig.world.advance(150)
    (retry,) = rig.take(1, ProduceRequest)
    rig.reply(1, rig.produce_answer(retry, (NO_ERROR, 1)))
    assert (fb.get(timeout=0).offset, fa.get(timeout=0).offset) == (0, 1)  # b before a


def test_idempotent_sender_gets_a_producer_id_first_and_retries_out_of_order_batches_in_order():
    rig = Rig(idempotent=True, batch_size=60)
    (init,) = rig.take(1, InitProducerIdRequest)  # asked for at start, before any record
    rig.start_topic()
    fa = rig.append(TP0, b"a" * 40)
    rig.world.advance(1)
    assert rig.take(1, ProduceRequest) == []  # no producer id yet
    rig.reply(1, InitProducerIdResponse(init.correlation_id, NO_ERROR, 1000, 0))
    fb = rig.append(TP0, b"b" * 40)
    rig.world.advance(1)
    req_a, req_b = rig.take(1, ProduceRequest)
    seqs = [RecordBatch(r.partitions[0].records).base_sequence for r in (req_a, req_b)]
    assert seqs == [0, 1] and RecordBatch(req_a.partitions[0].records).producer_id == 1000
    # a was refused; so the broker refuses b too: its sequence is not the next one.
    rig.reply(1, rig.produce_answer(req_a, (NOT_ENOUGH_REPLICAS, -1)))
    rig.reply(1, rig.produce_answer(req_b, (OUT_OF_ORDER_SEQUENCE_NUMBER, -1)))
    assert not fb.is_done  # retriable: an earlier sequence (a) is unresolved
    rig.world.advance(150)
    (retry_a,) = rig.take(1, ProduceRequest)  # only a: b waits for it
    assert retry_a.partitions[0].records == req_a.partitions[0].records
    rig.reply(1, rig.produce_answer(retry_a, (NO_ERROR, 0)))
    rig.world.advance(150)
    (retry_b,) = rig.take(1, ProduceRequest)
    assert RecordBatch(retry_b.partitions[0].records).base_sequence == 1
    rig.reply(1, rig.produce_answer(retry_b, (DUPLICATE_SEQUENCE_NUMBER, 1)))  # a duplicate is success
    assert (fa.get(timeout=0).offset, fb.get(timeout=0).offset) == (0, 1)


def test_idempotent_out_of_order_with_nothing_earlier_pending_fails_and_resets_the_producer_id():
    rig = Rig(idempotent=True)
    (init,) = rig.take(1, InitProducerIdRequest)
    rig.reply(1, InitProducerIdResponse(init.correlation_id, NO_ERROR, 7, 0))
    rig.start_topic()
    f = rig.append(TP0, b"a")
    rig.world.advance(1)
    (req,) = rig.take(1, ProduceRequest)
    rig.reply(1, rig.produce_answer(req, (OUT_OF_ORDER_SEQUENCE_NUMBER, -1)))
    with pytest.raises(OutOfOrderSequenceNumberError):
        f.get(timeout=0)
    rig.world.advance(1)
    assert rig.take(1, InitProducerIdRequest) or rig.take(2, InitProducerIdRequest)  # a new id
    assert rig.sender.transaction_manager.resets == 1


def test_an_init_producer_id_error_no_retry_mends_fails_every_send_with_it_instead_of_waiting():
    """A broker that answers InitProducerId with UNKNOWN_SERVER_ERROR (Tansu 0.6 does) never
    gives this producer an id: Kafka's producer makes that a fatal error and fails the sends;
    retrying for ever would hold every record until delivery.timeout.ms, sending nothing."""
    rig = Rig(idempotent=True)
    (init,) = rig.take(1, InitProducerIdRequest)
    rig.start_topic()
    before = rig.append(TP0, b"a")
    rig.world.advance(1)
    rig.reply(1, InitProducerIdResponse(init.correlation_id, COORDINATOR_LOAD_IN_PROGRESS, -1, -1))
    assert not before.is_done  # retriable: asked again after the back-off
    rig.world.advance(150)
    (again,) = rig.take(1, InitProducerIdRequest) or rig.take(2, InitProducerIdRequest)
    rig.reply(1, InitProducerIdResponse(again.correlation_id, UNKNOWN_SERVER_ERROR, -1, -1))
    with pytest.raises(KafkaError, match="InitProducerId with UNKNOWN_SERVER_ERROR.*enable_idempotence=False"):
        before.get(timeout=0)
    after = rig.append(TP1, b"b")
    rig.world.advance(1)
    with pytest.raises(KafkaError, match="InitProducerId with UNKNOWN_SERVER_ERROR"):
        after.get(timeout=0)
    rig.world.advance(1000)
    assert rig.take(1, InitProducerIdRequest) == rig.take(2, InitProducerIdRequest) == []  # not asked again
    assert rig.take(1, ProduceRequest) == rig.take(2, ProduceRequest) == []


def test_the_sender_is_deterministic():
    def run():
        rig = Rig(linger_ms=3)
        rig.start_topic()
        for i in range(20):
            rig.append(TopicPartition("t", i % 2), b"%d" % i)
            rig.world.advance(i % 4)
        return rig.world.history
    assert run() == run()


# --- KafkaProducer against the simulated cluster --------------------------------------------------------------


def make_cluster(partitions=1, seed=7, **topic_config):
    cluster = Cluster(brokers=3, seed=seed)
    cluster.create_topic("t", partitions=partitions, replication_factor=3,
                         config={"min.insync.replicas": 2, **topic_config})
    return cluster


def log_of(cluster, partition=0, topic="t"):
    leader = cluster.partition_state(topic, partition).leader
    log = cluster.replica(leader, topic, partition).log
    return [(r.offset, r.value) for r in log.read(0, 1 << 30).records()]


def produce_requests(cluster, producer):
    return sum(1 for e in cluster.world.history
               if e[1] == "recv" and e[2] == producer.node_id and e[4] == "ProduceRequest")


@pytest.fixture
def cluster():
    c = make_cluster(partitions=3)
    yield c
    c.close()


def test_send_and_get_returns_record_metadata(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster, acks="all", linger_ms=5)
    future = producer.send("t", key=b"truck-7", value=b"pos")
    assert not future.is_done  # nothing has left the producer yet
    meta = future.get(timeout=10)
    assert meta.topic == "t" and meta.partition == partition_for_key(b"truck-7", 3)
    assert meta.topic_partition == TopicPartition("t", meta.partition) and meta.offset == 0
    assert (meta.serialized_key_size, meta.serialized_value_size, meta.serialized_header_size) == (7, 3, -1)
    assert log_of(cluster, meta.partition) == [(0, b"pos")]
    assert producer.partitions_for("t") == {0, 1, 2}
    stamped = producer.send("t", value=b"x", partition=1, timestamp_ms=1234).get(timeout=10)
    assert stamped.timestamp == 1234 and meta.timestamp <= cluster.now  # simulated ms, no wall clock


def test_same_key_same_partition_and_per_partition_order(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster, linger_ms=2)
    futures = [producer.send("t", key=b"truck-%d" % (i % 4), value=b"%d" % i) for i in range(40)]
    producer.flush()
    for i, f in enumerate(futures):
        assert f.get().partition == partition_for_key(b"truck-%d" % (i % 4), 3)
    for p in range(3):
        values = [int(v) for _, v in log_of(cluster, p)]
        assert values == sorted(values)


def test_linger_batches_records_into_one_request(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster, linger_ms=50)
    producer.partitions_for("t")
    before = produce_requests(cluster, producer)
    futures = [producer.send("t", value=b"r%d" % i, partition=0) for i in range(10)]
    futures[-1].get(timeout=10)
    assert produce_requests(cluster, producer) - before == 1
    leader = cluster.partition_state("t", 0).leader
    batches = list(cluster.replica(leader, "t", 0).log.read(0, 1 << 30).batches())
    assert [b.records_count for b in batches] == [10]
    assert [f.get().offset for f in futures] == list(range(10))


def test_batch_size_splits_batches_and_one_request_per_leader_carries_all_its_partitions():
    cluster = make_cluster(partitions=6)
    sent = []
    deliver = cluster.world.deliver
    cluster.world.deliver = lambda src, dst, msg: (sent.append((src, dst, msg)), deliver(src, dst, msg))[1]
    producer = KafkaProducer(bootstrap_servers=cluster, linger_ms=20, batch_size=240)
    producer.partitions_for("t")
    for p in range(6):
        for i in range(5):
            producer.send("t", value=b"v" * 50, partition=p)
    producer.flush()
    requests = [(dst, m) for src, dst, m in sent if src == producer.node_id and isinstance(m, ProduceRequest)]
    leaders = {cluster.partition_state("t", p).leader for p in range(6)}
    first_round = requests[:len(leaders)]
    assert sorted(dst for dst, _ in first_round) == sorted(leaders)
    for dst, req in first_round:  # one request per broker, one batch per partition it leads
        led = sorted(p for p in range(6) if cluster.partition_state("t", p).leader == dst)
        assert [pp.partition for pp in req.partitions] == led
    leader0 = cluster.partition_state("t", 0).leader
    counts = [b.records_count for b in cluster.replica(leader0, "t", 0).log.read(0, 1 << 30).batches()]
    assert counts == [3, 2]  # a 240-byte batch: a 61-byte header and three 57-byte records
    cluster.close()


def test_null_keys_stick_to_one_partition_until_a_new_batch(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster, linger_ms=10, batch_size=300)
    futures = [producer.send("t", value=b"v" * 50) for _ in range(12)]
    producer.flush()
    parts = [f.get().partition for f in futures]
    # Runs of one partition, each as long as a batch (4 records of ~60 bytes in 300).
    runs = [parts[i:i + 4] for i in range(0, 12, 4)]
    assert all(len(set(run)) == 1 for run in runs)
    assert runs[0][0] != runs[1][0] != runs[2][0]


def test_the_default_partitioner_is_seeded_not_global_random():
    def partitions(seed):
        random.seed(seed * 1000)  # the global generator must not matter
        c = make_cluster(partitions=3, seed=seed)
        producer = KafkaProducer(bootstrap_servers=c, batch_size=100)
        futures = [producer.send("t", value=b"v" * 60) for _ in range(8)]
        producer.flush()
        c.close()
        return [f.get().partition for f in futures]
    assert partitions(3) == partitions(3)


def test_acks_0_succeeds_as_soon_as_the_request_is_sent_even_if_it_is_lost(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster, acks=0)
    assert producer.config["enable_idempotence"] is False  # acks=0 turns the default off
    producer.partitions_for("t")
    future = producer.send("t", value=b"zero", partition=0)
    now, received = cluster.now, produce_requests(cluster, producer)
    meta = future.get(timeout=10)
    assert meta.offset == -1 and cluster.now == now
    assert produce_requests(cluster, producer) == received  # done before the broker saw it
    cluster.advance(10)
    assert log_of(cluster, 0) == [(0, b"zero")]
    # Fire and forget: with the leader unreachable the send still "succeeds", and is lost.
    cluster.partition([producer.node_id], cluster.broker_ids)
    assert producer.send("t", value=b"lost", partition=0).get(timeout=10).offset == -1
    cluster.heal()
    cluster.advance(100)
    assert log_of(cluster, 0) == [(0, b"zero")]


def test_acks_all_with_too_few_in_sync_replicas():
    cluster = make_cluster()
    leader = cluster.partition_state("t", 0).leader
    for b in cluster.broker_ids:
        if b != leader:
            cluster.kill(b)
    cluster.advance(40_000)  # the ISR shrinks to the leader alone
    assert cluster.partition_state("t", 0).isr == (leader,)
    impatient = KafkaProducer(bootstrap_servers=cluster, retries=0)  # (turns idempotence off)
    with pytest.raises(NotEnoughReplicasError):
        impatient.send("t", value=b"x").get(timeout=10)
    patient = KafkaProducer(bootstrap_servers=cluster, delivery_timeout_ms=35_000)
    future = patient.send("t", value=b"y")
    start = cluster.now
    with pytest.raises(KafkaTimeoutError, match="Expiring 1 record"):
        future.get(timeout=60)
    assert 35_000 <= cluster.now - start <= 35_200
    assert patient.metrics()["producer-metrics"]["record-retry-total"] > 100  # every 100 ms
    # acks=1 does not care about the ISR.
    assert KafkaProducer(bootstrap_servers=cluster, acks=1).send("t", value=b"z").get(timeout=10).offset == 0
    cluster.close()


def test_a_dead_leader_refuses_at_once_and_the_record_waits_for_the_election():
    cluster = make_cluster()
    producer = KafkaProducer(bootstrap_servers=cluster)
    producer.send("t", value=b"before").get(timeout=10)
    old = cluster.partition_state("t", 0).leader
    cluster.kill(old)
    start = cluster.now
    meta = producer.send("t", value=b"after").get(timeout=120)
    new = cluster.partition_state("t", 0).leader
    assert new != old and meta.offset == 1
    # The killed process's port refuses at once, so the producer keeps retrying until the
    # controller notices (broker.session.timeout.ms) and elects a new leader: no 30 s
    # request timeout.
    session = cluster.config["broker.session.timeout.ms"]
    assert session - 2_000 <= cluster.now - start < session + 2_000
    assert log_of(cluster) == [(0, b"before"), (1, b"after")]
    cluster.close()


def _lose_first_request_then_send_another(idempotent):
    """Record A's request is lost on the way to the leader; B, sent just after, is not."""
    cluster = make_cluster()
    producer = KafkaProducer(bootstrap_servers=cluster, enable_idempotence=idempotent)
    producer.send("t", value=b"x").get(timeout=10)
    leader = cluster.partition_state("t", 0).leader
    cluster.world.network.set_link(producer.node_id, leader, loss=1.0)
    a = producer.send("t", value=b"A")
    cluster.advance(5)
    cluster.heal()
    b = producer.send("t", value=b"B")
    b_first = None
    try:
        b_first = b.get(timeout=5).offset
    except KafkaTimeoutError:
        pass
    a.get(timeout=100)
    b.get(timeout=100)
    return cluster, producer, a, b, b_first


def test_reordering_without_idempotence_a_retried_batch_lands_after_a_later_one():
    cluster, producer, a, b, b_first = _lose_first_request_then_send_another(idempotent=False)
    assert b_first == 1  # B is in the log while A waits for its request timeout
    assert a.get().offset == 2
    assert log_of(cluster) == [(0, b"x"), (1, b"B"), (2, b"A")]  # sent A, B; stored B, A
    cluster.close()


def test_idempotence_keeps_send_order_when_a_request_is_lost():
    cluster, producer, a, b, b_first = _lose_first_request_then_send_another(idempotent=True)
    assert b_first is None  # the broker refused B (out of order) until A arrived
    assert (a.get().offset, b.get().offset) == (1, 2)
    assert log_of(cluster) == [(0, b"x"), (1, b"A"), (2, b"B")]
    assert producer.metrics()["producer-metrics"]["record-retry-total"] >= 2
    cluster.close()


def _lose_the_answer(idempotent):
    """The leader appends record A, but its answer never reaches the producer."""
    cluster = make_cluster()
    producer = KafkaProducer(bootstrap_servers=cluster, enable_idempotence=idempotent)
    producer.send("t", value=b"x").get(timeout=10)
    leader = cluster.partition_state("t", 0).leader
    cluster.world.network.set_link(leader, producer.node_id, loss=1.0)
    a = producer.send("t", value=b"A")
    cluster.advance(50)
    assert log_of(cluster) == [(0, b"x"), (1, b"A")]  # appended and replicated
    cluster.heal()
    meta = a.get(timeout=100)  # retried after request_timeout_ms
    return cluster, meta


def test_without_idempotence_a_lost_answer_means_a_duplicate():
    cluster, meta = _lose_the_answer(idempotent=False)
    assert log_of(cluster) == [(0, b"x"), (1, b"A"), (2, b"A")]
    assert meta.offset == 2
    cluster.close()


def test_idempotence_deduplicates_the_retry_of_a_lost_answer():
    cluster, meta = _lose_the_answer(idempotent=True)
    assert log_of(cluster) == [(0, b"x"), (1, b"A")]  # exactly one copy
    assert meta.offset == 1  # the original offset
    cluster.close()


def test_idempotent_batches_carry_producer_id_and_per_partition_sequences(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster, linger_ms=5, batch_size=240)
    for i in range(6):
        producer.send("t", value=b"v" * 50, partition=i % 2)
    producer.flush()
    for p in (0, 1):
        leader = cluster.partition_state("t", p).leader
        batches = list(cluster.replica(leader, "t", p).log.read(0, 1 << 30).batches())
        assert [b.base_sequence for b in batches] == [0]
        assert batches[0].producer_id >= 0 and batches[0].records_count == 3


def test_a_full_buffer_blocks_send_for_max_block_ms_then_raises(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster, batch_size=1024, buffer_memory=4096, max_block_ms=2000)
    producer.send("t", value=b"warm", partition=0).get(timeout=10)
    cluster.partition([producer.node_id], cluster.broker_ids)  # nothing can complete
    pending = [producer.send("t", value=b"v" * 900, partition=0) for _ in range(4)]
    start = cluster.now
    with pytest.raises(KafkaTimeoutError, match="Failed to allocate memory"):
        producer.send("t", value=b"v" * 900, partition=0)
    assert cluster.now - start == 2000
    cluster.heal()
    producer.flush()
    assert [f.get().offset for f in pending] == [1, 2, 3, 4]


def test_a_full_buffer_blocks_until_batches_complete(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster, batch_size=1024, buffer_memory=2048, linger_ms=1000)
    producer.partitions_for("t")
    start = cluster.now
    futures = [producer.send("t", value=b"v" * 900, partition=0) for _ in range(6)]
    # Two batches fit; each later send waited (blocked, every batch ready at once) for one to complete.
    assert all(f.is_done for f in futures[:4])
    assert cluster.now - start < 1000  # blocking made the batches ready despite linger_ms
    producer.flush()
    assert [f.get().offset for f in futures] == list(range(6))


def test_flush_sends_now_and_waits(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster, linger_ms=10_000)
    producer.partitions_for("t")
    start = cluster.now
    futures = [producer.send("t", value=b"%d" % i) for i in range(5)]
    producer.flush()
    assert all(f.is_done and f.succeeded() for f in futures)
    assert cluster.now - start < 100  # did not linger
    cluster.partition([producer.node_id], cluster.broker_ids)
    stuck = producer.send("t", value=b"stuck")
    start = cluster.now
    with pytest.raises(KafkaTimeoutError):
        producer.flush(timeout=1)
    assert cluster.now - start == 1000 and not stuck.is_done


def test_get_timeout_is_simulated_seconds(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster)
    producer.partitions_for("t")
    cluster.partition([producer.node_id], cluster.broker_ids)
    future = producer.send("t", value=b"x")
    start = cluster.now
    with pytest.raises(KafkaTimeoutError, match="2 secs"):
        future.get(timeout=2)
    assert cluster.now - start == 2000
    cluster.heal()
    assert future.get(timeout=60).offset == 0


def test_callbacks_run_inside_the_step_that_completes_the_future(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster, linger_ms=5)
    seen = []
    future = producer.send("t", value=b"x", partition=0)
    future.add_callback(lambda meta: seen.append(("ok", meta.offset, cluster.now)))
    future.add_errback(lambda e: seen.append(("error", e)))
    cluster.advance(1000)  # nobody calls get(): the world completes it
    assert len(seen) == 1 and seen[0][:2] == ("ok", 0) and seen[0][2] < 1000
    future.add_callback(lambda tag, meta: seen.append((tag, meta.offset)), "late")  # done: runs at once
    assert seen[-1] == ("late", 0)
    failures = []
    bad = KafkaProducer(bootstrap_servers=cluster, retries=0, acks=1)
    bad.partitions_for("t")
    leader = cluster.partition_state("t", 0).leader
    cluster.partition([bad.node_id], [leader])
    f = bad.send("t", value=b"y", partition=0)
    f.add_errback(failures.append)
    cluster.advance(31_000)
    assert len(failures) == 1 and isinstance(failures[0], RequestTimedOutError)
    assert f.failed() and not f.succeeded()


def test_blocking_inside_a_callback_is_refused(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster, linger_ms=5)
    first = producer.send("t", value=b"a", partition=0)
    errors = []

    def chain(meta):
        nxt = producer.send("t", value=b"b", partition=0)  # queuing is fine
        try:
            nxt.get(timeout=1)  # blocking is not
        except IllegalStateError as e:
            errors.append(e)

    first.add_callback(chain)
    first.get(timeout=10)
    assert len(errors) == 1 and "inside a producer callback" in str(errors[0])
    producer.flush()
    assert [v for _, v in log_of(cluster, 0)] == [b"a", b"b"]


def test_a_raising_callback_does_not_break_the_producer(cluster, caplog):
    producer = KafkaProducer(bootstrap_servers=cluster)
    f = producer.send("t", value=b"x")
    f.add_callback(lambda meta: 1 / 0)
    assert f.get(timeout=10).offset == 0
    assert producer.send("t", value=b"y", partition=f.get().partition).get(timeout=10).offset == 1
    assert "Error processing callback" in caplog.text


def test_serializers(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster,
                             key_serializer=str.encode,
                             value_serializer=lambda v: json.dumps(v).encode("utf-8"))
    meta = producer.send("t", key="truck-7", value={"lat": 52.1, "lon": 4.3}).get(timeout=10)
    assert log_of(cluster, meta.partition) == [(0, b'{"lat": 52.1, "lon": 4.3}')]
    assert meta.partition == partition_for_key(b"truck-7", 3)
    plain = KafkaProducer(bootstrap_servers=cluster)
    with pytest.raises(TypeError, match="must be bytes, not str.*value_serializer"):
        plain.send("t", value="hello")
    with pytest.raises(TypeError, match="key"):
        plain.send("t", key=7, value=b"x")
    with pytest.raises(TypeError, match="headers"):
        plain.send("t", value=b"x", headers=[("h", "not bytes")])
    with pytest.raises(ValueError, match="key or value"):
        plain.send("t")
    with pytest.raises(InvalidTopicError):
        plain.send("bad topic!", value=b"x")
    with pytest.raises(ValueError, match="Unrecognized partition 9"):
        plain.send("t", value=b"x", partition=9)
    headed = plain.send("t", value=b"x", headers=[("trace", b"abc")], partition=0).get(timeout=10)
    assert headed.serialized_header_size == len("trace") + 3


def test_msgpack_serializer_if_installed(cluster):
    msgpack = pytest.importorskip("msgpack")
    producer = KafkaProducer(bootstrap_servers=cluster, value_serializer=msgpack.dumps)
    meta = producer.send("t", value={"truck": 7}, partition=0).get(timeout=10)
    assert msgpack.loads(log_of(cluster, 0)[meta.offset][1]) == {"truck": 7}


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression(cluster, codec):
    producer = KafkaProducer(bootstrap_servers=cluster, compression_type=codec, linger_ms=5)
    for i in range(20):
        producer.send("t", value=b"truck position %d" % i, partition=2)
    producer.flush()
    leader = cluster.partition_state("t", 2).leader
    (batch,) = cluster.replica(leader, "t", 2).log.read(0, 1 << 30).batches()
    assert batch.compression == Compression[codec.upper()]
    assert [r.value for r in batch.records()] == [b"truck position %d" % i for i in range(20)]


def test_an_unknown_topic_blocks_for_max_block_ms(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster, max_block_ms=1500)
    start = cluster.now
    with pytest.raises(KafkaTimeoutError, match="'nope' is not in the cluster's metadata"):
        producer.send("nope", value=b"x")
    assert cluster.now - start == 1500
    assert "nope" not in producer._sender.metadata.topics()  # no longer asked for


def test_too_large_a_record(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster, max_request_size=1000)
    with pytest.raises(MessageSizeTooLargeError, match="max_request_size"):
        producer.send("t", value=b"x" * 2000)


def test_close_flushes_and_then_refuses_sends(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster, linger_ms=10_000)
    future = producer.send("t", value=b"last words", partition=1)
    producer.close()
    assert future.get().offset == 0
    with pytest.raises(IllegalStateError, match="closed"):
        producer.send("t", value=b"x")
    producer.close()  # twice is fine
    with KafkaProducer(bootstrap_servers=cluster) as p:
        p.send("t", value=b"y", partition=1)
    assert log_of(cluster, 1)[-1] == (1, b"y")


def test_close_with_a_timeout_fails_what_is_still_pending(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster)
    producer.partitions_for("t")
    cluster.partition([producer.node_id], cluster.broker_ids)
    future = producer.send("t", value=b"x")
    producer.close(timeout=1)
    with pytest.raises(IllegalStateError, match="closed forcefully"):
        future.get()


def test_configuration_errors_name_the_key_and_the_value(cluster):
    def bad(match, **config):
        with pytest.raises(KafkaConfigurationError, match=match):
            KafkaProducer(bootstrap_servers=cluster, **config)
    with pytest.raises(KafkaConfigurationError, match="bad bootstrap_servers entry 'localhost:99999'"):
        KafkaProducer(bootstrap_servers="localhost:99999")  # real addresses: tests/test_client_tcp.py
    with pytest.raises(KafkaConfigurationError, match="must be a minikafka Cluster, a launch\\(\\) cluster or 'host:port'"):
        KafkaProducer(bootstrap_servers=9092)
    bad("acks must be 0, 1 or 'all'.*'most'", acks="most")
    bad("compression_type.*'brotli'", compression_type="brotli")
    bad("linger_ms must be an int >= 0, not -1", linger_ms=-1)
    bad("batch_size", batch_size="big")
    bad("retries", retries=-1)
    bad("Unrecognized configs: \\['linger.ms'\\]", **{"linger.ms": 5})
    bad("delivery_timeout_ms higher than linger_ms \\+ request_timeout_ms", delivery_timeout_ms=1000)
    bad("enable_idempotence=True is incompatible with user-provided acks=1", enable_idempotence=True, acks=1)
    bad("max_in_flight", enable_idempotence=True, max_in_flight_requests_per_connection=6)
    bad("transactional_id must be a non-empty str", transactional_id="")
    bad("transactional_id needs enable_idempotence=True", transactional_id="tx-1", enable_idempotence=False)
    bad("transaction_timeout_ms must be an int", transaction_timeout_ms=0)
    bad("value_serializer", value_serializer="json")
    assert isinstance(KafkaConfigurationError("x"), ValueError)


def test_defaults_are_kafka_pythons(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster)
    c = producer.config
    assert (c["acks"], c["enable_idempotence"], c["linger_ms"], c["batch_size"], c["retries"]) == (
        -1, True, 0, 16384, float("inf"))
    assert (c["request_timeout_ms"], c["delivery_timeout_ms"], c["max_block_ms"], c["buffer_memory"]) == (
        30000, 120000, 60000, 32 * 1024 * 1024)
    assert c["max_in_flight_requests_per_connection"] == 5 and c["client_id"] == producer.node_id
    assert KafkaProducer(bootstrap_servers=cluster, acks=1).config["enable_idempotence"] is False
    assert KafkaProducer(bootstrap_servers=cluster, acks="all").config["acks"] == -1
    # Real-Kafka code with network-only options runs unchanged.
    KafkaProducer(bootstrap_servers=cluster, security_protocol="PLAINTEXT", api_version=(3, 0))
    assert str(producer) == f"<KafkaProducer client_id={producer.node_id} transactional_id=None>"


def test_metrics_count(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster, linger_ms=5)
    for i in range(10):
        producer.send("t", value=b"%d" % i, partition=0)
    producer.flush()
    m = producer.metrics()["producer-metrics"]
    assert m["record-send-total"] == 10 and m["batch-total"] == 1 and m["produce-request-total"] == 1
    assert m["record-error-total"] == 0 and m["requests-in-flight"] == 0
    assert m["buffer-available-bytes"] == m["buffer-total-bytes"]
    assert list(m) == sorted(m)


def test_a_producer_started_while_bootstrap_brokers_are_dead_finds_a_live_one():
    cluster = make_cluster()
    leader = cluster.partition_state("t", 0).leader
    for b in cluster.broker_ids:
        if b != leader:
            cluster.kill(b)
    start = cluster.now
    producer = KafkaProducer(bootstrap_servers=cluster, acks=1)
    assert producer.partitions_for("t") == {0}
    # A broker that never answered costs socket_connection_setup_timeout_ms (10 s), at most
    # once per dead broker, not request_timeout_ms (30 s).
    assert cluster.now - start <= 2 * 10_000 + 500
    assert producer.send("t", value=b"x").get(timeout=60).offset == 0
    cluster.close()


def test_the_client_modules_do_no_io_and_read_no_clock():
    import ast
    import inspect

    from minikafka.clients import future, record_accumulator, sender

    for module in (future, record_accumulator, sender):
        tree = ast.parse(inspect.getsource(module))
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                    for a in (n.names if isinstance(n, ast.Import) else [ast.alias(n.module or "")])}
        assert not imported & {"time", "datetime", "random", "socket", "threading", "asyncio", "select", "os"}, module


def test_a_whole_run_replays_from_its_seed():
    def run():
        cluster = make_cluster(partitions=3, seed=11)
        producer = KafkaProducer(bootstrap_servers=cluster, linger_ms=3)
        futures = [producer.send("t", key=b"k%d" % (i % 5) if i % 3 else None, value=b"%d" % i) for i in range(30)]
        cluster.advance(2)
        cluster.kill(cluster.partition_state("t", 0).leader)
        producer.flush()
        result = [(f.get().partition, f.get().offset) for f in futures], list(cluster.world.history)
        cluster.close()
        return result
    assert run() == run()


def test_future_basics():
    f = Future()
    got = []
    f.add_both(got.append)
    f.failure(ValueError("boom"))
    assert f.failed() and isinstance(got[0], ValueError)
    with pytest.raises(IllegalStateError):
        f.success(1)
