"""``LossTracker``: the dashboards' live count of lost acknowledged records (the checker's
``lost-write``, counted as the run goes). Its theory of operation is the class's docstring."""

from __future__ import annotations

from collections import defaultdict

class LossTracker:
    """Every acknowledged record, and which of them the log has lost: the checker's
    ``lost-write`` (``minikafka.checker.analysis``), counted live.

    A record is kept as what its ack said: (partition, offset, value), one entry per ack,
    never one per offset -- two records acknowledged at the same offset (a stale leader's,
    then the new leader's) are two records, and one of them is lost.

    A record is *lost* once the partition's current leader provably lacks it: it has not
    got that far (a leader never takes data from anyone, so the offset will be filled
    with something else) or it holds another value there. It is *safe for now* once that
    leader has it below its high watermark (committed). Between the two (the leader has it,
    not yet committed) it is looked at again on the next update. A lost record stays lost:
    the count never goes down, and on a run that ends healed and settled it equals the
    checker's count of lost writes (tests/test_widgets.py feeds both one history).

    Cheap enough to run every tick: while a partition keeps the same leader (broker, leader
    epoch and incarnation) only records acknowledged or uncommitted since the last look are
    checked; a new leader gets every record not yet lost checked again, once.

    Limits: a record whose offset is below the leader's log start offset (deleted by
    retention) is not called lost; acks=0 records have no offset and are not tracked; a
    record called lost that an *unclean* election later brings back (an old leader's copy,
    never truncated) stays counted: the final word is the checker's, after a final read.
    """

    def __init__(self) -> None:
        # Per partition: the acknowledged records in ack order, as (offset, value, acks).
        self.records: dict[tuple[str, int], list[tuple[int, bytes | None, str]]] = defaultdict(list)
        self._pending: dict[tuple[str, int], list[int]] = defaultdict(list)  # indexes to look at
        self._leader_key: dict[tuple[str, int], tuple] = {}
        self._lost: dict[tuple[str, int], set[int]] = defaultdict(set)  # indexes; only ever grows

    def acknowledged(self, topic: str, partition: int, offset: int, value: bytes | None,
                     acks: str | None = None) -> None:
        """A record acknowledged at ``offset`` (``acks``: the producer's setting, for the
        breakdown in ``lost_by_acks``)."""
        if offset < 0:  # acks=0: the broker never said where it went
            return
        tp = (topic, partition)
        self._pending[tp].append(len(self.records[tp]))
        self.records[tp].append((offset, value, acks))

    @property
    def lost(self) -> int:
        return sum(len(s) for s in self._lost.values())

    def lost_by_acks(self) -> dict[str, int]:
        """Lost records by the acks setting they were sent with (settings used, even if 0)."""
        out: dict[str, int] = {}
        for tp, records in self.records.items():
            for i, (_, _, acks) in enumerate(records):
                key = str(acks)
                out[key] = out.get(key, 0) + (i in self._lost[tp])
        return dict(sorted(out.items()))

    def lost_records(self) -> list[tuple[str, int, int, bytes | None]]:
        """(topic, partition, offset, value) of each lost record, sorted."""
        return sorted((tp[0], tp[1], self.records[tp][i][0], self.records[tp][i][1])
                      for tp, lost in self._lost.items() for i in lost)

    def lost_offsets(self, topic: str, partition: int) -> list[int]:
        records = self.records.get((topic, partition), [])
        return sorted({records[i][0] for i in self._lost.get((topic, partition), ())})

    def update(self, cluster) -> int:
        for tp in sorted(self.records):
            state = cluster.partition_state(*tp)
            if state.leader < 0:
                continue  # offline: nobody to ask; keep the last verdict
            rep = cluster.replica(state.leader, *tp)
            if rep is None or not rep.is_leader:
                continue  # dead, or has not yet heard it leads: look again next tick
            key = (state.leader, state.leader_epoch, cluster.world.incarnation.get(state.leader))
            if self._leader_key.get(tp) != key:
                self._leader_key[tp] = key
                indexes = [i for i in range(len(self.records[tp])) if i not in self._lost[tp]]
            else:
                indexes = self._pending[tp]
            self._pending[tp] = self._check(rep, tp, indexes)
        return self.lost

    def _check(self, rep, tp: tuple[str, int], indexes: list[int]) -> list[int]:
        """Judge ``indexes`` against leader ``rep``; returns those still to look at."""
        log, records = rep.log, self.records[tp]
        start, end = log.log_start_offset, log.log_end_offset
        wanted = sorted({records[i][0] for i in indexes if start <= records[i][0] < end})
        found = _values_at(log, wanted)
        again = []
        for i in indexes:
            offset, value, _ = records[i]
            if offset < start:
                continue  # retention, not loss
            if offset >= end or found.get(offset, _MISSING) != value:
                self._lost[tp].add(i)
            elif offset >= rep.high_watermark:
                again.append(i)  # there, not yet committed
        return again


_MISSING = object()


def _values_at(log, offsets: list[int]) -> dict[int, bytes | None]:
    """The values stored at ``offsets`` (sorted) in ``log``."""
    out: dict[int, bytes | None] = {}
    if not offsets:
        return out
    want, last = set(offsets), offsets[-1]
    position = offsets[0]
    while position <= last:
        batches = list(log.read(position, 1 << 20).batches())
        if not batches:
            break
        for batch in batches:
            for record in batch:
                if record.offset in want:
                    out[record.offset] = record.value
            position = max(position, batch.last_offset + 1)
    return out
