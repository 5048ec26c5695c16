"""Futures: how ``producer.send()`` hands back a result that does not exist yet.

Theory of operation
-------------------
``send()`` returns at once, before any byte has left the producer, with a
``FutureRecordMetadata``. Two futures are involved, as in kafka-python:

- one ``FutureProduceResult`` per ``ProducerBatch``: the Sender completes it once, with
  ``(base_offset, timestamp, error_fn)``, when the broker answers for the whole batch;
- one ``FutureRecordMetadata`` per record, chained to its batch's future: it turns the
  batch's base offset into the record's own offset (base + index in the batch) and the
  record's ``RecordMetadata``, or fails with the batch's error.

Callbacks and errbacks run when the future completes, inside the simulation step that
completes it (the Sender handling a ProduceResponse or a timer), in the order they were
added. A callback added to a future that is already done runs at once.

``get(timeout)`` is the only blocking call. A future never reads a clock: blocking means
"let the runtime run until I am done", so the producer gives each batch future a
``wait(done, timeout_ms)`` function. In the simulated world that runs the event loop
(``timeout`` is in *simulated* seconds); the TCP runtime will poll sockets instead.

Invariants: a future completes at most once; its value and exception never change after.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable, NamedTuple, Optional

from minikafka.errors import IllegalStateError, KafkaTimeoutError
from minikafka.topic import TopicPartition

log = logging.getLogger(__name__)

# wait(done, timeout_ms) -> bool: run the runtime until done() or timeout_ms passed.
Waiter = Callable[[Callable[[], bool], Optional[int]], bool]


class Future:
    """kafka-python's ``kafka.future.Future``: a value or an exception, plus callbacks."""

    error_on_callbacks = False  # as kafka-python: a failing callback is logged, not raised

    def __init__(self) -> None:
        self.is_done = False
        self.value: Any = None
        self.exception: BaseException | None = None
        self._callbacks: list[Callable] = []
        self._errbacks: list[Callable] = []

    def succeeded(self) -> bool:
        return self.is_done and self.exception is None

    def failed(self) -> bool:
        return self.is_done and self.exception is not None

    def retriable(self) -> bool:
        return self.failed() and bool(getattr(self.exception, "retriable", False))

    def success(self, value: Any) -> "Future":
        if self.is_done:
            raise IllegalStateError("a future completes only once")
        self.value, self.is_done = value, True
        callbacks, self._callbacks, self._errbacks = self._callbacks, [], []
        for f in callbacks:
            self._call(f, value, "callback")
        return self

    def failure(self, e: BaseException | type) -> "Future":
        if self.is_done:
            raise IllegalStateError("a future completes only once")
        exception = e() if isinstance(e, type) else e
        if not isinstance(exception, BaseException):
            raise TypeError("future failed without an exception")
        self.exception, self.is_done = exception, True
        errbacks, self._callbacks, self._errbacks = self._errbacks, [], []
        for f in errbacks:
            self._call(f, exception, "errback")
        return self

    def add_callback(self, f: Callable, *args: Any, **kwargs: Any) -> "Future":
        if args or kwargs:
            f = functools.partial(f, *args, **kwargs)
        if not self.is_done:
            self._callbacks.append(f)
        elif self.exception is None:
            self._call(f, self.value, "callback")
        return self

    def add_errback(self, f: Callable, *args: Any, **kwargs: Any) -> "Future":
        if args or kwargs:
            f = functools.partial(f, *args, **kwargs)
        if not self.is_done:
            self._errbacks.append(f)
        elif self.exception is not None:
            self._call(f, self.exception, "errback")
        return self

    def add_both(self, f: Callable, *args: Any, **kwargs: Any) -> "Future":
        self.add_callback(f, *args, **kwargs)
        self.add_errback(f, *args, **kwargs)
        return self

    def chain(self, future: "Future") -> "Future":
        self.add_callback(future.success)
        self.add_errback(future.failure)
        return self

    def _call(self, f: Callable, arg: Any, kind: str) -> None:
        # A user's callback must not take the Sender down with it (it runs inside the
        # Sender's step); kafka-python logs and carries on, and so do we.
        try:
            f(arg)
        except Exception:
            log.exception("Error processing %s", kind)
            if self.error_on_callbacks:
                raise


class FutureProduceResult(Future):
    """The future of one ``ProducerBatch``: ``(base_offset, timestamp_ms, error_fn)``."""

    def __init__(self, topic_partition: TopicPartition, wait: Waiter | None = None) -> None:
        super().__init__()
        self.topic_partition = topic_partition
        self._wait = wait

    def wait(self, timeout_ms: int | None = None) -> bool:
        """Run the runtime until this batch is done; False if ``timeout_ms`` passed first."""
        if self.is_done:
            return True
        if self._wait is None:
            raise IllegalStateError("this future is not attached to a running producer")
        return self._wait(lambda: self.is_done, timeout_ms)


class RecordMetadata(NamedTuple):
    """Where a record landed, as kafka-python's ``RecordMetadata`` (same fields, same order).

    ``offset`` is -1 when the broker was not asked to answer (``acks=0``); ``checksum`` is
    always None (record batch v2 has one CRC per batch, not per record).
    """

    topic: str
    partition: int
    topic_partition: TopicPartition
    offset: int
    timestamp: int
    checksum: int | None
    serialized_key_size: int
    serialized_value_size: int
    serialized_header_size: int


class FutureRecordMetadata(Future):
    """What ``producer.send()`` returns: resolves to a ``RecordMetadata``."""

    def __init__(
        self, produce_future: FutureProduceResult, batch_index: int, timestamp_ms: int,
        checksum: int | None, serialized_key_size: int, serialized_value_size: int,
        serialized_header_size: int,
    ) -> None:
        super().__init__()
        self._produce_future = produce_future
        self.args = (batch_index, timestamp_ms, checksum, serialized_key_size,
                     serialized_value_size, serialized_header_size)
        produce_future.add_callback(self._produce_success)
        produce_future.add_errback(self.failure)

    def _produce_success(self, result: tuple) -> None:
        offset, produce_timestamp_ms, record_exceptions_fn = result
        batch_index, timestamp_ms, checksum, key_size, value_size, header_size = self.args
        if record_exceptions_fn is not None:
            self.failure(record_exceptions_fn(batch_index))
            return
        # -1: the broker keeps the producer's CreateTime (LogAppendTime would replace it).
        if produce_timestamp_ms is not None and produce_timestamp_ms != -1:
            timestamp_ms = produce_timestamp_ms
        if offset != -1:
            offset += batch_index
        tp = self._produce_future.topic_partition
        self.success(RecordMetadata(tp.topic, tp.partition, tp, offset, timestamp_ms,
                                    checksum, key_size, value_size, header_size))

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait up to ``timeout`` seconds (simulated, in the simulated world) for the result.

        Returns the ``RecordMetadata`` or raises the send's error; ``KafkaTimeoutError`` if
        the record is still pending when the time is up.
        """
        if not self.is_done:
            timeout_ms = None if timeout is None else int(timeout * 1000)
            self._produce_future.wait(timeout_ms)
            if not self.is_done:
                raise KafkaTimeoutError(f"Timeout after waiting for {timeout} secs.")
        if self.exception is not None:
            raise self.exception
        return self.value

    def __repr__(self) -> str:
        tp = self._produce_future.topic_partition
        state = "pending" if not self.is_done else (
            f"offset={self.value.offset}" if self.exception is None else f"failed: {self.exception!r}")
        return f"<FutureRecordMetadata {tp} {state}>"
