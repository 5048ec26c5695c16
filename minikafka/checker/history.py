"""The history: what the clients asked for and what they were told, nothing else.

Theory of operation
-------------------
A checker judges a run by its *history*, never by peeking into the brokers (Jepsen's
rule): the brokers may be wrong, the clients' view is the truth we can hold them to.
Two kinds of entries:

- a ``Send``: one value a producer was asked to write. It is *invoked*, then completes
  at most once as ``ok`` (acknowledged, with the partition and offset the broker gave),
  ``fail`` (definitely not written) or ``info`` (indeterminate: a timeout or an error
  after which the write may or may not be in the log, Jepsen's ``:info``). A send still
  pending when the run ends counts as ``info``: nobody knows what became of it.
- a ``Poll``: the records (offset, value) one reader saw in one fetch of one partition,
  in the order it saw them. The *final read* (every partition read from its log start to
  its high watermark once the cluster is healed) is made of polls too, marked ``final``,
  and ``final_reads`` says which partitions it read completely.

Values must be unique per run (the workload writes "v-0", "v-1", ...): the analysis
finds a value by its name, so a value written twice would look like a duplicate.

Times are the simulated clock's milliseconds, so a history replays exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from minikafka.errors import IllegalArgumentError, IllegalStateError

INVOKED, OK, FAIL, INFO = "invoke", "ok", "fail", "info"


@dataclass
class Send:
    """One value a producer was asked to write, and what it was told."""

    id: int
    topic: str
    value: Hashable
    partition: int | None = None  # asked for; the ack's partition replaces it
    invoke_ms: int = 0
    status: str = INVOKED
    offset: int | None = None  # from the ack; -1 when the broker gave none (acks=0)
    complete_ms: int | None = None
    error: str | None = None

    @property
    def tp(self) -> tuple[str, int | None]:
        return self.topic, self.partition


@dataclass(frozen=True)
class Poll:
    """The records one reader got from one fetch of one partition, in order."""

    reader: str
    topic: str
    partition: int
    records: tuple[tuple[int, Hashable], ...]  # (offset, value)
    time_ms: int = 0
    final: bool = False

    @property
    def tp(self) -> tuple[str, int]:
        return self.topic, self.partition


@dataclass(frozen=True)
class FinalRead:
    """How far the final read got in one partition: from ``log_start`` up to (not
    including) ``high_watermark``; ``complete`` if it got all of it."""

    log_start: int
    high_watermark: int
    complete: bool


def value_of(raw: Any) -> Hashable:
    """A record's value as the history keeps it: bytes decoded to str ("v-17")."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return bytes(raw).decode("utf-8", errors="backslashreplace")
    return raw


@dataclass
class History:
    """``History(clock=lambda: cluster.now)``: the clock stamps sends recorded with ``send``."""

    sends: list[Send] = field(default_factory=list)
    polls: list[Poll] = field(default_factory=list)
    final_reads: dict[tuple[str, int], FinalRead] = field(default_factory=dict)
    clock: Callable[[], int] | None = field(default=None, repr=False, compare=False)

    # --- sends -------------------------------------------------------------------------------------

    def invoke(self, topic: str, value: Hashable, *, partition: int | None = None, time_ms: int = 0) -> Send:
        op = Send(len(self.sends), topic, value_of(value), partition, time_ms)
        self.sends.append(op)
        return op

    def _complete(self, op: Send, status: str, time_ms: int) -> None:
        if op.status != INVOKED:
            # A future completes once; a second completion means a client bug, which the
            # history must not paper over.
            raise IllegalStateError(f"send {op.value!r} completed twice: {op.status}, then {status}")
        op.status, op.complete_ms = status, time_ms

    def ok(self, op: Send, partition: int, offset: int, *, time_ms: int = 0) -> None:
        self._complete(op, OK, time_ms)
        op.partition, op.offset = partition, offset

    def fail(self, op: Send, error: Any = None, *, time_ms: int = 0, definite: bool = True) -> None:
        """A send that failed: ``definite`` if it certainly never reached the log, else
        it is indeterminate (``info``)."""
        self._complete(op, FAIL if definite else INFO, time_ms)
        op.error = None if error is None else _describe_error(error)

    def info(self, op: Send, error: Any = None, *, time_ms: int = 0) -> None:
        self.fail(op, error, time_ms=time_ms, definite=False)

    def send(self, producer: Any, topic: str, value: Any, *, key: Any = None, partition: int | None = None,
             clock: Callable[[], int] | None = None,
             definite: Callable[[BaseException], bool] | None = None) -> Send:
        """``producer.send(...)``, recorded: the invocation now, the outcome when its future
        completes (times from ``clock``, else the history's). ``definite(exc)`` says whether
        an error proves the value was never written; by default no error does (with
        retries, an earlier attempt may have landed), so every failure is ``info``."""
        clock = clock or self.clock or (lambda: 0)
        op = self.invoke(topic, value, partition=partition, time_ms=clock())
        try:
            future = producer.send(topic, value=value, key=key, partition=partition)
        except Exception as e:  # refused before anything left the client: certainly not written
            self.fail(op, e, time_ms=clock())
            raise
        future.add_callback(lambda md: self.ok(op, md.partition, md.offset, time_ms=clock()))
        future.add_errback(lambda e: self.fail(
            op, e, time_ms=clock(), definite=bool(definite and definite(e))))
        return op

    # --- reads -------------------------------------------------------------------------------------

    def poll(self, reader: str, topic: str, partition: int, records, *, time_ms: int = 0,
             final: bool = False) -> Poll | None:
        """Record what one fetch returned: ``records`` as (offset, value) pairs, or as
        ``Record`` objects read back from a log (they carry their offsets)."""
        pairs = []
        for r in records:
            if isinstance(r, tuple):
                offset, value = r
            else:
                offset, value = r.offset, r.value
            if not isinstance(offset, int) or offset < 0:
                raise IllegalArgumentError(f"a polled record needs an offset >= 0, not {offset!r}")
            pairs.append((offset, value_of(value)))
        if not pairs:
            return None  # an empty poll says nothing about order
        poll = Poll(reader, topic, partition, tuple(pairs), time_ms, final)
        self.polls.append(poll)
        return poll

    def final_read(self, topic: str, partition: int, records=(), *, log_start: int = 0,
                   high_watermark: int | None = None, complete: bool = True, reader: str = "final",
                   time_ms: int = 0) -> None:
        """Record a whole partition's final read at once (hand-made histories, tests)."""
        poll = self.poll(reader, topic, partition, records, time_ms=time_ms, final=True)
        if high_watermark is None:
            high_watermark = poll.records[-1][0] + 1 if poll else log_start
        self.final_reads[(topic, partition)] = FinalRead(log_start, high_watermark, complete)

    # --- views ---------------------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """How the sends ended (pending ones are indeterminate) and how much was read."""
        out = {OK: 0, FAIL: 0, INFO: 0}
        for op in self.sends:
            out[INFO if op.status == INVOKED else op.status] += 1
        out["polls"] = sum(1 for p in self.polls if not p.final)
        out["records polled"] = sum(len(p.records) for p in self.polls if not p.final)
        out["records in final read"] = sum(len(p.records) for p in self.polls if p.final)
        return out


def _describe_error(error: Any) -> str:
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return str(error)
