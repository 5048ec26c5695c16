"""The transactional producer's protocol: the part of Kafka's ``TransactionManager`` that
talks to the transaction coordinator (KIP-98), driven by the ``Sender``.

Theory of operation
-------------------
A producer with a ``transactional_id`` moves through Kafka's client states::

    Uninitialized --init_transactions--> Initializing --> Ready --begin--> InTransaction
    InTransaction --commit--> CommittingTransaction --EndTxn answered--> Ready
    InTransaction --abort---> AbortingTransaction  --EndTxn answered--> Ready
    (any) --PRODUCER_FENCED / INVALID_PRODUCER_EPOCH--> FatalError (a newer instance owns the id)

Requests go one at a time, in order, from a queue: FindCoordinator (key type 1 for the
transaction coordinator, 0 for a group's) whenever a coordinator is unknown or said
NOT_COORDINATOR; InitProducerId(transactional id); AddPartitionsToTxn for every partition
the transaction is about to write, *before* any batch of it is sent (such a partition is
muted in the accumulator until the coordinator has added it); AddOffsetsToTxn then
TxnOffsetCommit for ``send_offsets_to_transaction``; EndTxn once every batch of the
transaction is acknowledged. Retriable answers (CONCURRENT_TRANSACTIONS, coordinator
moved or loading, a timeout) put the request back after ``retry_backoff_ms``.

Every user call gets a ``TransactionalRequestResult`` the ``KafkaProducer`` waits on.
No I/O, no clock: the Sender sends, times out and delivers.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from minikafka import errors
from minikafka.errors import IllegalStateError, KafkaError
from minikafka.messages import (
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    INVALID_PRODUCER_EPOCH,
    NO_ERROR,
    NOT_COORDINATOR,
    PRODUCER_FENCED,
    REQUEST_TIMED_OUT,
    UNKNOWN_TOPIC_OR_PARTITION,
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    OffsetCommitPartition,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from minikafka.topic import TopicPartition

if TYPE_CHECKING:
    from minikafka.clients.sender import Sender

RETRIABLE = {CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
             REQUEST_TIMED_OUT, UNKNOWN_TOPIC_OR_PARTITION}
FENCED = {PRODUCER_FENCED, INVALID_PRODUCER_EPOCH}
RESPONSES = (FindCoordinatorResponse, InitProducerIdResponse, AddPartitionsToTxnResponse, AddOffsetsToTxnResponse,
             TxnOffsetCommitResponse, EndTxnResponse)


class TransactionState(enum.Enum):
    UNINITIALIZED = "Uninitialized"
    INITIALIZING = "Initializing"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    COMMITTING_TRANSACTION = "CommittingTransaction"
    ABORTING_TRANSACTION = "AbortingTransaction"
    FATAL_ERROR = "FatalError"


S = TransactionState
VALID_PREVIOUS = {  # Kafka's TransactionManager.State.isTransitionValid, without the abortable-error state
    S.INITIALIZING: {S.UNINITIALIZED},
    S.READY: {S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION},
    S.IN_TRANSACTION: {S.READY},
    S.COMMITTING_TRANSACTION: {S.IN_TRANSACTION},
    S.ABORTING_TRANSACTION: {S.IN_TRANSACTION},
    S.FATAL_ERROR: set(S),
}


class TransactionalRequestResult:
    """What ``init_transactions``/``commit_transaction``/... wait for."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.done = False
        self.error: KafkaError | None = None

    def succeed(self) -> None:
        self.done = True

    def fail(self, error: KafkaError) -> None:
        self.done, self.error = True, error


@dataclass
class TxnOp:
    kind: str  # "init" | "add_partitions" | "add_offsets" | "txn_offset_commit" | "end_txn"
    result: TransactionalRequestResult | None
    args: dict = field(default_factory=dict)


class TransactionalRequests:
    def __init__(self, sender: "Sender", transactional_id: str, transaction_timeout_ms: int) -> None:
        self.sender = sender
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.state = S.UNINITIALIZED
        self.coordinator: Any = None
        self.group_coordinators: dict[str, Any] = {}
        self.partitions_in_transaction: set[TopicPartition] = set()
        self.new_partitions: set[TopicPartition] = set()
        self.queue: deque[TxnOp] = deque()
        self.in_flight: tuple[int, TxnOp | None, str] | None = None  # (corr, op, kind of request)
        self.not_before = 0  # retry backoff
        self.last_error: KafkaError | None = None

    @property
    def tm(self):
        return self.sender.transaction_manager

    def transition(self, state: TransactionState) -> None:
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalStateError(f"TransactionalId {self.transactional_id}: invalid transition attempted "
                                    f"from state {self.state.value} to state {state.value}")
        self.state = state

    # --- what the KafkaProducer calls ------------------------------------------------------------------

    def init(self) -> TransactionalRequestResult:
        self.transition(S.INITIALIZING)
        return self._enqueue("init")

    def begin(self) -> None:
        self._check_not_fatal()
        self.transition(S.IN_TRANSACTION)

    def maybe_add_partition(self, tp: TopicPartition) -> None:
        """Before the first batch of ``tp`` in this transaction: mute it until it is added."""
        self._check_not_fatal()
        if self.state != S.IN_TRANSACTION:
            raise IllegalStateError(f"Cannot send to {tp} in state {self.state.value}: call begin_transaction() first")
        if tp not in self.partitions_in_transaction and tp not in self.new_partitions:
            self.new_partitions.add(tp)
            self.sender.accumulator.muted.add(tp)

    def send_offsets(self, offsets: dict[TopicPartition, Any], group_id: str) -> TransactionalRequestResult:
        self._check_not_fatal()
        if self.state != S.IN_TRANSACTION:
            raise IllegalStateError(f"Cannot send offsets in state {self.state.value}: call begin_transaction() first")
        return self._enqueue("add_offsets", offsets=offsets, group_id=group_id)

    def end(self, committed: bool) -> TransactionalRequestResult:
        self._check_not_fatal(allow_abort=not committed)
        self.transition(S.COMMITTING_TRANSACTION if committed else S.ABORTING_TRANSACTION)
        if not committed:  # Kafka: what was never sent is dropped, not sent and then aborted
            self.sender.accumulator.abort_undrained_batches(errors.KafkaError("the transaction was aborted"))
            for tp in self.new_partitions:
                self.sender.accumulator.muted.discard(tp)
            self.new_partitions.clear()
        if not self.partitions_in_transaction and not any(op.kind == "add_offsets" for op in self.queue) \
                and not self.new_partitions:
            result = TransactionalRequestResult("end_txn")  # nothing was written: nothing to end
            self._complete_transaction()
            result.succeed()
            return result
        return self._enqueue("end_txn", committed=committed)

    def _check_not_fatal(self, allow_abort: bool = False) -> None:
        if self.state == S.FATAL_ERROR:
            raise self.last_error or KafkaError("the producer is in a fatal error state")

    def _enqueue(self, kind: str, **args: Any) -> TransactionalRequestResult:
        result = TransactionalRequestResult(kind)
        self.queue.append(TxnOp(kind, result, args))
        self.sender.wakeup()
        return result

    def _complete_transaction(self) -> None:
        self.transition(S.READY)
        self.partitions_in_transaction.clear()

    # --- the Sender's loop ------------------------------------------------------------------------------------

    def poll(self) -> int | None:
        """Send the next transactional request if none is in flight; when to look again."""
        if self.in_flight is not None or self.state == S.FATAL_ERROR:
            return None
        if self.not_before > self.sender.now:
            return self.not_before
        if self.new_partitions and not any(op.kind == "add_partitions" for op in self.queue):
            self.queue.appendleft(TxnOp("add_partitions", None, {"partitions": set(self.new_partitions)}))
        if not self.queue:
            return None
        op = self.queue[0]
        if op.kind == "end_txn" and (self.sender.accumulator.has_incomplete or self.new_partitions):
            return None  # EndTxn only once every batch of the transaction is acknowledged
        group = op.args.get("group_id") if op.kind == "txn_offset_commit" else None
        coordinator = self.group_coordinators.get(group) if group is not None else self.coordinator
        if coordinator is None:
            key, key_type = (group, 0) if group is not None else (self.transactional_id, 1)
            node, free_at = self.sender._least_loaded_node()
            if node is None:
                return free_at
            self._send(node, lambda corr: FindCoordinatorRequest(corr, key, key_type), None, f"find:{key_type}:{key}")
            return None
        pid, epoch = self.tm.producer_id_and_epoch
        txn_id = self.transactional_id
        if op.kind == "init":
            make = lambda corr: InitProducerIdRequest(corr, txn_id, self.transaction_timeout_ms)  # noqa: E731
        elif op.kind == "add_partitions":
            parts = tuple(sorted((tp.topic, tp.partition) for tp in op.args["partitions"]))
            make = lambda corr: AddPartitionsToTxnRequest(corr, txn_id, pid, epoch, parts)  # noqa: E731
        elif op.kind == "add_offsets":
            make = lambda corr: AddOffsetsToTxnRequest(corr, txn_id, pid, epoch, op.args["group_id"])  # noqa: E731
        elif op.kind == "txn_offset_commit":
            offsets = tuple(OffsetCommitPartition(tp.topic, tp.partition, getattr(o, "offset", o),
                                                  getattr(o, "leader_epoch", -1) if getattr(o, "leader_epoch", None)
                                                  is not None else -1, getattr(o, "metadata", "") or "")
                            for tp, o in sorted(op.args["offsets"].items()))
            make = lambda corr: TxnOffsetCommitRequest(corr, txn_id, op.args["group_id"], pid, epoch, offsets)  # noqa: E731
        else:
            make = lambda corr: EndTxnRequest(corr, txn_id, pid, epoch, op.args["committed"])  # noqa: E731
        self._send(coordinator, make, op, op.kind)
        return None

    def _send(self, node: Any, make, op: TxnOp | None, kind: str) -> None:
        corr = self.sender.send_transactional(node, make)
        self.in_flight = (corr, op, kind)

    def failed(self, corr: int) -> None:
        """The request's connection closed or timed out: look for the coordinator again, retry."""
        if self.in_flight is not None and self.in_flight[0] == corr:
            kind = self.in_flight[2]
            self.in_flight = None
            if kind.startswith("find:") or kind != "txn_offset_commit":
                self.coordinator = None
            else:
                self.group_coordinators.clear()
            self.not_before = self.sender.now + self.sender.config["retry_backoff_ms"]

    def handle(self, response: Any) -> bool:
        """An answer to our request (True if it was ours)."""
        if self.in_flight is None or self.in_flight[0] != response.correlation_id:
            return False
        _, op, kind = self.in_flight
        self.in_flight = None
        if isinstance(response, FindCoordinatorResponse):
            if response.error == NO_ERROR:
                _, key_type, key = kind.split(":", 2)
                if key_type == "1":
                    self.coordinator = response.node_id
                else:
                    self.group_coordinators[key] = response.node_id
            else:
                self._back_off()
            return True
        if isinstance(response, AddPartitionsToTxnResponse):
            codes = {e for *_, e in response.results}
            error = next((e for e in sorted(codes) if e != NO_ERROR), NO_ERROR)
        else:
            error = getattr(response, "error", NO_ERROR)
            if isinstance(response, TxnOffsetCommitResponse):
                error = next((e for *_, e in response.partitions if e != NO_ERROR), NO_ERROR)
        if error in FENCED:
            return self._fatal(errors.ProducerFencedError(
                f"producer {self.tm.producer_id_and_epoch} of transactional id {self.transactional_id!r} "
                f"was fenced: another producer with the same id was initialised ({_name(error)})"))
        if error in RETRIABLE:
            if error == NOT_COORDINATOR:
                if kind == "txn_offset_commit":
                    self.group_coordinators.pop(op.args["group_id"], None)
                else:
                    self.coordinator = None
            self._back_off()
            return True
        self.queue.popleft()
        if error != NO_ERROR:
            if op.result is not None:
                op.result.fail(errors.for_code(error)(f"{kind} failed: {_name(error)}"))
            return True
        if kind == "init":
            self.tm.reset_producer_id()
            self.tm.set_producer_id_and_epoch(response.producer_id, response.producer_epoch)
            self.transition(S.READY)
        elif kind == "add_partitions":
            added = op.args["partitions"]
            self.partitions_in_transaction |= added
            self.new_partitions -= added
            for tp in added:
                self.sender.accumulator.muted.discard(tp)
        elif kind == "add_offsets":
            self.queue.appendleft(TxnOp("txn_offset_commit", op.result, op.args))
            return True
        elif kind == "end_txn":
            self._complete_transaction()
        if op.result is not None:
            op.result.succeed()
        return True

    def _back_off(self) -> None:
        self.not_before = self.sender.now + self.sender.config["retry_backoff_ms"]

    def _fatal(self, error: KafkaError) -> bool:
        self.last_error = error
        self.state = S.FATAL_ERROR
        for op in self.queue:
            if op.result is not None:
                op.result.fail(error)
        self.queue.clear()
        self.sender.accumulator.abort_undrained_batches(error)
        return True


def _name(code: int) -> str:
    from minikafka.messages import ERROR_NAMES
    return ERROR_NAMES.get(code, str(code))
