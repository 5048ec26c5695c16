"""Transactions on the broker side: Kafka's ``TransactionCoordinator`` (KIP-98), with its
``TransactionMarkerChannelManager``.

Theory of operation
-------------------
A transactional producer finds its coordinator (FindCoordinator, key type 1: the leader of
its id's partition of ``__transaction_state``), then:

1. InitProducerId(transactional id): the first time, a producer id from the controller's
   blocks and epoch 0; every later time the *same* producer id with the epoch bumped. The
   bump is the fence: a zombie with the old epoch is refused everywhere (PRODUCER_FENCED
   here, INVALID_PRODUCER_EPOCH at the partitions once a marker carried the new epoch). An
   open transaction of the old epoch is aborted first (the caller is told
   CONCURRENT_TRANSACTIONS and retries).
2. AddPartitionsToTxn / AddOffsetsToTxn before the first write to a partition (or the
   offsets of a group): the partition joins the transaction, state Ongoing.
3. EndTxn(commit or abort): PrepareCommit / PrepareAbort is written, *then* the producer
   is answered: from here the outcome is decided and survives any crash. The coordinator
   then has a marker written to every partition of the transaction (WriteTxnMarkers to
   each partition's leader, retried until every one is written), and only then writes
   CompleteCommit / CompleteAbort.
4. A transaction open longer than its ``transaction.timeout.ms`` (checked every
   ``transaction.abort.timed.out.transaction.cleanup.interval.ms``) is aborted with the
   epoch bumped, so its producer is fenced.

A broker that becomes leader of a ``__transaction_state`` partition replays it
(``TransactionStateManager``) and finishes what its predecessor decided: every transaction
found in PrepareCommit/PrepareAbort gets its markers written again (markers are
idempotent at the partitions: a second one for a closed transaction changes nothing).

Invariants: no answer to EndTxn before its Prepare state is replicated; no Complete state
before every marker is; one state change per transactional id in flight (else
CONCURRENT_TRANSACTIONS).

Never: read a clock or do I/O; it asks its ``CoordinatorContext`` (time, timers, ``send``,
metadata, its partitions of ``__transaction_state``), never the broker itself.

Markers carry the coordinator epoch; a partition refuses a marker from an older coordinator
than the last one it took for that producer (TRANSACTION_COORDINATOR_FENCED).

Simplifications (vs Kafka): no transactional id expiration (``transactional.id.expiration.ms``);
no KIP-890 (server-side verification of transactional produces); no KIP-360 epoch bump
on InitProducerId v3+ (we serve v0-1); no DescribeTransactions/ListTransactions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from minikafka.broker.group_coordinator import OFFSETS_TOPIC
from minikafka.broker.transaction_state_manager import (
    TRANSACTION_STATE_TOPIC,
    TransactionMetadata,
    TransactionState,
    TransactionStateManager,
)
from minikafka.messages import (
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_NOT_AVAILABLE,
    INVALID_PRODUCER_EPOCH,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_REQUEST,
    INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE,
    NO_ERROR,
    NOT_COORDINATOR,
    NOT_LEADER_OR_FOLLOWER,
    OPERATION_NOT_ATTEMPTED,
    PRODUCER_FENCED,
    TRANSACTION_COORDINATOR_FENCED,
    UNKNOWN_TOPIC_OR_PARTITION,
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnMarker,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

if TYPE_CHECKING:
    from minikafka.broker.coordinator_context import CoordinatorContext

S = TransactionState
MAX_EPOCH = 32766  # Short.MaxValue - 1: Kafka moves to a new producer id past it
MARKER_RETRY_MS = 100  # how soon unwritten markers are sent again
logger = logging.getLogger("minikafka.broker")


@dataclass
class MarkerJob:
    """The markers one decided transaction still needs (Kafka's ``PendingCompleteTxn``)."""

    txn: TransactionMetadata
    coordinator_epoch: int
    remaining: set = field(default_factory=set)  # (topic, partition) not yet written
    in_flight: dict = field(default_factory=dict)  # (topic, partition) -> (time sent, leader sent to)
    completing: bool = False  # the Complete state is being written
    # (topic, partition) -> when a marker refused there may be sent again. Without it a
    # refusal answered at once (this broker is the leader by its metadata but its replica is
    # not, yet) would be re-sent at once, and answered at once, without end.
    retry_at: dict = field(default_factory=dict)


class TransactionCoordinator:
    def __init__(self, context: "CoordinatorContext") -> None:
        self.context = context  # what it may ask of its broker: time, timers, metadata, its partitions
        self.config = context.config
        self.state = TransactionStateManager(context)
        self.markers: dict[str, MarkerJob] = {}
        self._correlation = 0
        self._requests: dict[int, tuple[int, tuple]] = {}  # corr -> (leader, ((txn id, topic, partition), ...))

    @property
    def now(self) -> int:
        return self.context.now

    def start(self) -> None:
        self.context.set_timer("txn-abort-timed-out",
                              self.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"])

    def _send(self, dst: Any, message: Any) -> None:
        self.context.send(dst, message)

    @staticmethod
    def _append_error(error: int) -> int:
        """A failed write to __transaction_state, as the producer is told it (it retries both)."""
        if error in (NO_ERROR, NOT_COORDINATOR):
            return error
        return NOT_COORDINATOR if error == NOT_LEADER_OR_FOLLOWER else COORDINATOR_NOT_AVAILABLE

    # --- ownership ----------------------------------------------------------------------------------

    def on_metadata_changed(self) -> None:
        for p in self.state.on_metadata_changed():
            epoch = self.state.owned[p]
            for txn in list(self.state.transactions.values()):
                if self.state.partition_for(txn.transactional_id) == p and txn.state in (S.PREPARE_COMMIT,
                                                                                        S.PREPARE_ABORT):
                    self._begin_markers(txn, epoch)  # what the last coordinator decided, finished
        for txn_id in [t for t, job in self.markers.items() if self.state.coordinator_epoch(t) != job.coordinator_epoch]:
            del self.markers[txn_id]  # another broker finishes it now
        self._dispatch_markers()

    def _check(self, txn_id: str, producer_id: int, producer_epoch: int) -> tuple[TransactionMetadata | None, int]:
        """The id's state if ``producer_id``/``producer_epoch`` may act on it, else the error."""
        if self.state.coordinator_epoch(txn_id) is None:
            return None, NOT_COORDINATOR
        txn = self.state.transactions.get(txn_id)
        if txn is None or txn.producer_id != producer_id:
            return None, INVALID_PRODUCER_ID_MAPPING
        if producer_epoch != txn.producer_epoch:
            return None, PRODUCER_FENCED
        if txn_id in self.state.pending or txn.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return txn, CONCURRENT_TRANSACTIONS
        return txn, NO_ERROR

    # --- InitProducerId -------------------------------------------------------------------------------

    def init_producer_id(self, src: Any, req: InitProducerIdRequest) -> None:
        def reply(error: int, pid: int = -1, epoch: int = -1) -> None:
            self._send(src, InitProducerIdResponse(req.correlation_id, error, pid, epoch))

        txn_id = req.transactional_id
        if not txn_id:
            return reply(INVALID_REQUEST)
        if not 0 < req.transaction_timeout_ms <= self.config["transaction.max.timeout.ms"]:
            return reply(INVALID_TRANSACTION_TIMEOUT)
        if self.state.coordinator_epoch(txn_id) is None:
            return reply(NOT_COORDINATOR)
        if txn_id in self.state.pending:
            return reply(CONCURRENT_TRANSACTIONS)
        txn = self.state.transactions.get(txn_id)
        if txn is None:
            def allocated(error: int, pid: int) -> None:
                if error != NO_ERROR:
                    return reply(error)
                if txn_id in self.state.pending or txn_id in self.state.transactions:
                    return reply(CONCURRENT_TRANSACTIONS)  # a concurrent init got there first
                if self.state.coordinator_epoch(txn_id) is None:
                    return reply(NOT_COORDINATOR)
                new = TransactionMetadata(txn_id, pid, 0, req.transaction_timeout_ms, S.EMPTY,
                                          last_update_timestamp=self.now)
                self.state.append(new, lambda e: reply(self._append_error(e), pid, 0) if e else reply(NO_ERROR, pid, 0))

            return self.context.allocate_producer_id(allocated)
        if txn.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return reply(CONCURRENT_TRANSACTIONS)
        if txn.state == S.ONGOING:
            # The previous incarnation left a transaction open: fence it (epoch bump) and
            # abort it; the new producer retries once the abort is complete.
            self._prepare_end(txn, committed=False, bump=True, then=lambda e: reply(CONCURRENT_TRANSACTIONS
                                                                                   if e == NO_ERROR else e))
            return
        pid, epoch = txn.producer_id, txn.producer_epoch + 1

        def bumped(error: int, new_pid: int = pid) -> None:
            if error != NO_ERROR:
                return reply(error)
            new_epoch = 0 if new_pid != pid else epoch
            new = txn.transition(S.EMPTY, self.now, producer_id=new_pid, producer_epoch=new_epoch,
                                 timeout_ms=req.transaction_timeout_ms, partitions=frozenset(),
                                 txn_start_timestamp=-1)
            self.state.append(new, lambda e: reply(self._append_error(e)) if e else reply(NO_ERROR, new_pid, new_epoch))

        if epoch > MAX_EPOCH:
            return self.context.allocate_producer_id(lambda error, new_pid: bumped(error, new_pid))
        bumped(NO_ERROR)

    # --- AddPartitionsToTxn, AddOffsetsToTxn ------------------------------------------------------------

    def add_partitions(self, src: Any, req: AddPartitionsToTxnRequest) -> None:
        def reply(errors: dict) -> None:
            self._send(src, AddPartitionsToTxnResponse(req.correlation_id, tuple(
                (t, p, errors[(t, p)]) for t, p in req.partitions)))

        unknown = {tp for tp in req.partitions if self.context.partition_state(*tp) is None
                   or tp[0] in (TRANSACTION_STATE_TOPIC,)}
        if unknown:  # Kafka: the bad ones say why, the others were not attempted
            return reply({tp: UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else OPERATION_NOT_ATTEMPTED
                          for tp in req.partitions})
        self._add(req.transactional_id, req.producer_id, req.producer_epoch, frozenset(req.partitions),
                  lambda error: reply({tp: error for tp in req.partitions}))

    def add_offsets(self, src: Any, req: AddOffsetsToTxnRequest) -> None:
        p = self.context.group_partition_for(req.group_id)
        self._add(req.transactional_id, req.producer_id, req.producer_epoch, frozenset({(OFFSETS_TOPIC, p)}),
                  lambda error: self._send(src, AddOffsetsToTxnResponse(req.correlation_id, error)))

    def _add(self, txn_id: str, pid: int, epoch: int, partitions: frozenset, reply) -> None:
        txn, error = self._check(txn_id, pid, epoch)
        if error != NO_ERROR:
            return reply(error)
        if txn.state == S.ONGOING and partitions <= txn.partitions:
            return reply(NO_ERROR)  # a retry: nothing new to write
        start = txn.txn_start_timestamp if txn.state == S.ONGOING else self.now
        new = txn.transition(S.ONGOING, self.now, partitions=txn.partitions | partitions, txn_start_timestamp=start)
        self.state.append(new, lambda e: reply(self._append_error(e)))

    # --- EndTxn --------------------------------------------------------------------------------------------

    def end_txn(self, src: Any, req: EndTxnRequest) -> None:
        def reply(error: int) -> None:
            self._send(src, EndTxnResponse(req.correlation_id, error))

        txn, error = self._check(req.transactional_id, req.producer_id, req.producer_epoch)
        if error == CONCURRENT_TRANSACTIONS and txn is not None and txn.transactional_id not in self.state.pending:
            # Prepare written: the retry of the same decision waits, the opposite one is wrong
            same = txn.state == (S.PREPARE_COMMIT if req.committed else S.PREPARE_ABORT)
            return reply(CONCURRENT_TRANSACTIONS if same else INVALID_TXN_STATE)
        if error != NO_ERROR:
            return reply(error)
        if txn.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            done = txn.state == (S.COMPLETE_COMMIT if req.committed else S.COMPLETE_ABORT)
            return reply(NO_ERROR if done else INVALID_TXN_STATE)  # a retry after a lost answer
        if txn.state != S.ONGOING:
            return reply(INVALID_TXN_STATE)
        self._prepare_end(txn, req.committed, bump=False, then=reply)

    def _prepare_end(self, txn: TransactionMetadata, committed: bool, *, bump: bool, then) -> None:
        """Write PrepareCommit/PrepareAbort (epoch bumped to fence, if asked), answer
        ``then(error)``, and have the markers written."""
        epoch = self.state.coordinator_epoch(txn.transactional_id)
        state = S.PREPARE_COMMIT if committed else S.PREPARE_ABORT
        new = txn.transition(state, self.now, producer_epoch=txn.producer_epoch + (1 if bump else 0))

        def written(error: int) -> None:
            then(self._append_error(error))
            if error == NO_ERROR:
                self._begin_markers(new, epoch)
                self._dispatch_markers()

        self.state.append(new, written)

    # --- timeouts -------------------------------------------------------------------------------------------

    def abort_timed_out_transactions(self) -> None:
        """Kafka's ``abortTimedOutTransactions``: fence and abort what ran past its timeout."""
        self.start()
        for txn in sorted(self.state.transactions.values(), key=lambda t: t.transactional_id):
            if (txn.state == S.ONGOING and txn.transactional_id not in self.state.pending
                    and txn.txn_start_timestamp + txn.timeout_ms <= self.now
                    and self.state.coordinator_epoch(txn.transactional_id) is not None):
                logger.info("transaction %r timed out after %d ms: aborting it", txn.transactional_id, txn.timeout_ms)
                self._prepare_end(txn, committed=False, bump=txn.producer_epoch < MAX_EPOCH, then=lambda e: None)

    # --- markers: Kafka's TransactionMarkerChannelManager ----------------------------------------------------

    def _begin_markers(self, txn: TransactionMetadata, coordinator_epoch: int) -> None:
        self.markers[txn.transactional_id] = MarkerJob(txn, coordinator_epoch, set(txn.partitions))
        if not txn.partitions:
            self._complete(txn.transactional_id)

    def _dispatch_markers(self) -> None:
        """Send every unwritten marker that has no request in flight to its partition's leader."""
        timeout = self.config["request.timeout.ms"]
        by_leader: dict[int, list] = {}
        for txn_id, job in sorted(self.markers.items()):
            for tp in sorted(job.remaining):
                if self.context.topic(tp[0]) is None:
                    job.remaining.discard(tp)  # deleted topic: nothing to mark (as Kafka)
                    continue
                state = self.context.partition_state(*tp)
                sent = job.in_flight.get(tp)
                # In flight to the current leader, not timed out: wait for its answer. Sent to a
                # leader that is no more (the answer may never come): send to the new one now.
                if sent is not None and self.now - sent[0] < timeout and state is not None \
                        and state.leader == sent[1]:
                    continue
                if state is None or state.leader < 0 or job.retry_at.get(tp, -1) > self.now:
                    continue  # no leader now, or refused just now: the retry timer tries again
                by_leader.setdefault(state.leader, []).append((txn_id, tp))
                job.in_flight[tp] = (self.now, state.leader)
        for txn_id, job in list(self.markers.items()):
            if not job.remaining and not job.completing:
                self._complete(txn_id)
        for leader, items in sorted(by_leader.items()):
            markers = []
            for txn_id, tps in _group(items).items():
                job = self.markers[txn_id]
                markers.append(TxnMarker(job.txn.producer_id, job.txn.producer_epoch,
                                         job.txn.state == S.PREPARE_COMMIT, job.coordinator_epoch, tuple(tps)))
            self._correlation += 1
            corr = self._correlation
            self._requests[corr] = (leader, tuple((txn_id, *tp) for txn_id, tp in items))
            request = WriteTxnMarkersRequest(corr, tuple(markers))
            if leader == self.context.broker_id:
                self.context.write_txn_markers(request, self.markers_written)
            else:
                self._send(leader, request)
        if any(job.remaining for job in self.markers.values()):
            self.context.set_timer("txn-markers", MARKER_RETRY_MS)

    def markers_written(self, resp: WriteTxnMarkersResponse) -> None:
        sent = self._requests.pop(resp.correlation_id, None)
        if sent is None:
            return
        _, items = sent
        by_pid = {(pid, t, p): error for pid, t, p, error in resp.results}
        for txn_id, topic, partition in items:
            job = self.markers.get(txn_id)
            if job is None:
                continue
            job.in_flight.pop((topic, partition), None)
            error = by_pid.get((job.txn.producer_id, topic, partition))
            if error in (NO_ERROR, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED):
                # (INVALID_PRODUCER_EPOCH: a newer epoch already wrote there; its own marker
                # ends what this one would have. TRANSACTION_COORDINATOR_FENCED: a newer
                # coordinator decided there; ours is stale)
                job.remaining.discard((topic, partition))
                job.retry_at.pop((topic, partition), None)
            else:
                job.retry_at[(topic, partition)] = self.now + MARKER_RETRY_MS
        self._dispatch_markers()

    def leader_unreachable(self, node: Any) -> None:
        """A connection to a leader closed: what it had in flight is sent again."""
        for corr, (leader, items) in list(self._requests.items()):
            if leader == node:
                del self._requests[corr]
                for txn_id, topic, partition in items:
                    job = self.markers.get(txn_id)
                    if job is not None:
                        job.in_flight.pop((topic, partition), None)
        if self.markers:
            self.context.set_timer("txn-markers", MARKER_RETRY_MS)

    def retry_markers(self) -> None:
        self._dispatch_markers()

    def _complete(self, txn_id: str) -> None:
        job = self.markers[txn_id]
        job.completing = True
        txn = self.state.transactions.get(txn_id)
        if txn is None or txn.producer_epoch != job.txn.producer_epoch or txn.state != job.txn.state:
            del self.markers[txn_id]
            return
        state = S.COMPLETE_COMMIT if txn.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        new = txn.transition(state, self.now, partitions=frozenset(), txn_start_timestamp=-1)

        def written(error: int) -> None:
            if self.markers.get(txn_id) is not job:
                return
            if error == NO_ERROR:
                del self.markers[txn_id]
            else:
                job.completing = False  # try again at the next retry
                self.context.set_timer("txn-markers", MARKER_RETRY_MS)

        self.state.append(new, written)


def _group(items: list) -> dict[str, list]:
    out: dict[str, list] = {}
    for txn_id, tp in items:
        out.setdefault(txn_id, []).append(tp)
    return out
