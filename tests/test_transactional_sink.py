"""KafkaTransactionalSink without a cluster: how a fencing reaches the caller."""

from __future__ import annotations

import pytest
from kafka.errors import KafkaError, ProducerFencedError
from kafka.producer.transaction_manager import TransactionManager

from minikafka.spark.transactional_sink import KafkaTransactionalSink


class _FencedProducer:
    """A transactional producer whose sender thread already had the coordinator's PRODUCER_FENCED:
    kafka-python's own transaction manager, in the state that answer leaves it in."""

    def __init__(self) -> None:
        self._transaction_manager = TransactionManager(transactional_id="query")
        self._transaction_manager.transition_to_fatal_error(ProducerFencedError())
        self.closed = False

    def begin_transaction(self) -> None:
        self._transaction_manager.begin_transaction()

    def close(self, timeout=None) -> None:
        self.closed = True


def test_a_fencing_found_before_the_commit_is_raised_as_producer_fenced(monkeypatch):
    monkeypatch.setattr(KafkaTransactionalSink, "_ensure_topic", lambda self, partitions, rf: None)
    sink = KafkaTransactionalSink("127.0.0.1:9", "alerts", "query")
    producer = _FencedProducer()
    with pytest.raises(KafkaError) as plain:  # what kafka-python itself raises here
        producer.begin_transaction()
    assert not isinstance(plain.value, ProducerFencedError)
    sink._producer, sink._next_batch = producer, 0
    with pytest.raises(ProducerFencedError, match="newer instance") as raised:
        sink.write(3, [(b"truck-000", b"zombie alert")])
    assert raised.value.__cause__ is not None and producer.closed
    assert sink._producer is None  # the next write starts afresh with init_transactions()
