"""What the Raft client tells the state machine on top of it: Kafka's ``RaftClient.Listener``
and the client's ``ListenerContext``.

Theory of operation
-------------------
The listener (a controller on a voter's client, a broker on an observer's) gets every record
strictly below the high watermark, in offset order, each once per client object
(``handle_commit``); a restarted client replays its log from the start as soon as it learns
the HW. A leader reports itself (``handle_leader_change(own id)``) only once the listener
has every record below its epoch's start, so whatever sits on top acts on a complete state;
every other change of (leader, epoch) as this node sees it is reported at once,
``(None, epoch)`` while no leader is known.

The listener is never called from inside a public call of the client (``append``,
``resign``, ``start``): ``_deliver`` then sets a zero-delay timer (``_DELIVER``) and the
delivery happens when it fires, so a caller can note what ``append`` returned before it
hears that the records committed.

``ListenerContext`` is one part of ``KafkaRaftClient`` (``client.py``), kept here so that
client.py reads as Raft; it uses the client's ``log``, ``high_watermark``, ``state``,
``epoch``, ``leader_id``, ``_next_delivery``, ``_notified``, ``_in_api`` and
``_epoch_start_offset``. No clock; its only I/O is reading the client's log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from minikafka.raft.states import _DELIVER, LEADER


@dataclass(frozen=True)
class CommittedRecord:
    """One committed record of the metadata log, as the listener gets it."""

    offset: int
    epoch: int  # the Raft epoch of the leader that appended it
    timestamp: int
    key: bytes | None
    value: bytes | None


class RaftListener(Protocol):
    def handle_commit(self, records: list[CommittedRecord]) -> None: ...  # in offset order, each once

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None: ...


class ListenerContext:
    """The delivery to the listener: a part of ``KafkaRaftClient`` (see above)."""

    def read_committed(self, start_offset: int = 0) -> list[CommittedRecord]:
        """Every committed record from ``start_offset`` up to the high watermark."""
        out: list[CommittedRecord] = []
        offset = max(start_offset, self.log_start_offset)
        while offset < self.high_watermark:
            got = self._read_committed_batches(offset, self.high_watermark)
            if not got:
                break
            out.extend(r for r in got if r.offset >= start_offset)
            offset = got[-1].offset + 1
        return out

    def _schedule_delivery(self) -> None:
        self._set_timer(_DELIVER, 0)

    def _deliver(self) -> None:
        """Give the listener every committed record it has not had, then any leader change."""
        if self._in_api:
            self._schedule_delivery()
            return
        while self._next_delivery < self.high_watermark:
            records = self._read_committed_batches(self._next_delivery, self.high_watermark)
            if not records:
                raise AssertionError(
                    f"raft {self.node_id}: no records at {self._next_delivery} below the high watermark "
                    f"{self.high_watermark}"
                )
            records = [r for r in records if r.offset >= self._next_delivery]
            self._next_delivery = records[-1].offset + 1 if records else self._next_delivery + 1
            if self.listener is not None and records:
                self.listener.handle_commit(records)
        self._notify_leader_change()

    def _notify_leader_change(self) -> None:
        if self.listener is None:
            return
        leader = self.leader_id
        if self.state == LEADER and self._next_delivery < self._epoch_start_offset:
            leader = None  # not before the listener has all that came before this epoch
        view = (leader, self.epoch)
        if view != self._notified:
            self._notified = view
            self.listener.handle_leader_change(*view)

    def _read_committed_batches(self, offset: int, limit: int) -> list[CommittedRecord]:
        out: list[CommittedRecord] = []
        for batch in self.log.read(offset, self.fetch_max_bytes, max_offset=limit).batches():
            epoch = batch.partition_leader_epoch
            for record in batch.records():
                if offset <= record.offset < limit:
                    out.append(CommittedRecord(record.offset, epoch, record.timestamp, record.key, record.value))
        return out


__all__ = ["CommittedRecord", "ListenerContext", "RaftListener"]
