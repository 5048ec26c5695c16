"""Rules: the decisions a lecture teaches, as plain functions the brokers call through one seam.

Theory of operation
-------------------
A broker is mostly bookkeeping around a few small decisions, each one a rule of Kafka's that
fits in a few lines: what the high watermark is now, whether a follower's fetch shows it was
caught up, where a returning replica cuts its log. Each is a ``Rule`` here: a name, the
function's signature (the exercise's signature, word for word), Kafka's rule in one sentence,
its *reference* implementation, and a contract on what it may return.

The package calls every rule through a ``Rules`` object, one attribute per rule:
``Partition`` asks ``rules.high_watermark(...)`` and ``rules.last_caught_up(...)``,
``ReplicaManager`` asks ``rules.truncation_offset(...)``. ``REFERENCE`` (the default everywhere)
holds the reference functions themselves, unwrapped, so the seam costs one attribute lookup and
changes nothing (``benchmarks/sim_fingerprint.txt`` proves it). There is no second code path:
the reference *is* what the brokers run.

``Rules({"high_watermark": my_fn}, node=2, clock=...)`` puts a student's function in place of
the reference, wrapped in a guard (``_Guarded``). The guard treats the function as untrusted:

- it passes copies of the arguments (a function that mutates them cannot corrupt the broker);
- an exception, a value of the wrong type or one that breaks the rule's contract (a high
  watermark above the log end or below the old one, a caught-up time in the future...) stops
  the run with one ``RuleError`` naming the rule, the node, the simulated time, the
  arguments, what the function returned and what Kafka's rule returns;
- a call that runs longer than ``budget_s`` of wall time (a loop that never ends) is
  interrupted and reported the same way, where the platform can interrupt a running
  function (``minikafka.deadline``: a Unix interval timer in the main thread, and a function
  that catches the interruption with a bare ``except:`` is stopped at its next line; elsewhere
  no budget);
- every call is counted, and each call whose answer differs from Kafka's is kept in a
  ``RuleTrace`` (the first ``RuleTrace.keep``): the judge's timeline shows them;
- inside ``with allowance(seconds)`` (the judge's: ``tester.judge``) every call also spends from
  one wall-time allowance shared by all the rules, so a rule that is slow on every call but
  never past ``budget_s`` (Kafka's rules take microseconds; a judge calls them up to ~100,000
  times) stops the judge with a ``RuleError`` naming each rule's calls and seconds, instead of
  running for an hour. Once it is spent every guarded call stops at once (``out_of_time``: the
  judge then shrinks nothing). A call running inside another guarded call (an application's
  step polls the world, which calls the broker's rules) spends nothing twice.

A ``RuleError`` raised inside the simulated world propagates out of ``Cluster.advance`` /
``run_until``, which close the cluster first: the run stops cleanly, and the notebook shows
the message.

The rules of notebook 04 (replication and the ISR):

==================  ===========================================================================
high_watermark      ``Partition.maybe_increment_high_watermark``: the least LEO in the maximal
                    ISR, never backwards
last_caught_up      ``Partition.update_follower_fetch_state``: the follower's last caught-up
                    time after one more of its fetches
truncation_offset   ``ReplicaManager.handle_fetch_response``: where a follower cuts its log when
                    the leader answers "diverging at (epoch, end)"
==================  ===========================================================================

The rules of notebook 08 (the controller quorum's Raft, ``raft/client.py``):

==========================  ===================================================================
grant_vote                  ``KafkaRaftClient._handle_vote_request``: does this voter grant its
                            vote (or pre-vote, KIP-996) to the candidate? (``Voter``, ``Request``)
metadata_truncation_offset  ``KafkaRaftClient._truncate_to_diverging``: where a voter or observer
                            cuts its metadata log when the leader answers "diverging at (epoch,
                            end)" (Kafka's rule is the partitions' one: the same reference)
==========================  ===================================================================

Who *can* be elected is no one node's decision in KRaft: it is what the voters' ``grant_vote``
answers add up to, so the judge of notebook 08 tests it through ``grant_vote`` (a quorum that
can elect nobody is caught as one that never elects a leader after the faults heal).

The rules of notebooks 01 (the log) and 02 (topics and partitions); a ``Log`` calls them through
its own ``rules`` (the broker's, handed down by ``LogManager``), a producer through its
``DefaultPartitioner`` (the cluster's, for the producers made on it):

==================  ===========================================================================
index_lookup        ``OffsetIndex.lookup``: the last (offset, position) entry at or below an
                    offset, where every read starts scanning the segment
roll_reason         ``Log._maybe_roll``: why a batch must go to a new segment, or None
segments_to_delete  ``Log.delete_old_segments``: which old segments retention deletes, and why
murmur2             ``DefaultPartitioner``: Kafka's hash of a record's key
partition_for_key   ``DefaultPartitioner``: the partition of a keyed record; a student's
                    ``murmur2`` alone runs through Kafka's ``toPositive(hash) % n``

The rules of notebook 06 (consumer groups), called by the group's *leader* (a consumer: in
Kafka's classic protocol the coordinator only collects the members and passes their
subscriptions to one of them), in the shape of kafka-python's
``AbstractPartitionAssignor.assign(cluster, members) -> {member: assignment}`` cut down to
what the rule needs (partition counts for the cluster, topic lists for the members):

==================  ===========================================================================
range_assign        ``RangeAssignor.assign``: ``{member: [(topic, partition)]}`` for
                    ``{topic: partition count}`` and ``{member: [topics]}``
reassign            ``StickyAssignor.assign`` for one topic every member reads:
                    ``{member: [partitions]}`` for (partitions, what each owned, the members)
==================  ===========================================================================

The rules of notebook 03 (brokers and the cluster), called by the active controller
(``minikafka.controller``; the functions live in ``minikafka.replicas``):

==================  ===========================================================================
assign_replicas     ``QuorumController._create_topics`` / ``_new_partitions``: Kafka's rack-unaware
                    placement (``AdminUtils.assignReplicasToBrokers``), one tuple of broker ids
                    per partition, the preferred leader first
elect_leader        ``QuorumController._elect``: the new leader of a partition whose leader died,
                    was fenced, or that was offline (``PartitionChangeBuilder.electLeader``), or
                    None (offline)
==================  ===========================================================================

The rules of notebook 05 (producers and acks): the broker's idempotence check, asked by a
partition's ``ProducerStateManager`` before each batch of a client is appended, and the
producer's "ready" rule, asked by its ``RecordAccumulator`` (the cluster's, for the producers
made on it) for the first batch of each partition each time the Sender looks for work:

==================  ===========================================================================
check_batch         ``ProducerStateManager.check``: "append", "duplicate", "out of order" or
                    "fenced" for a batch (producer id, epoch, first sequence, record count),
                    given ``state`` {producer id: (epoch, [(first_seq, last_seq), ...])}
batch_ready         ``RecordAccumulator.ready``: may the first batch of a partition go now
                    (full, another batch queued behind it, lingered ``linger_ms``, or the
                    producer flushing or closing)? A retried batch waits for its backoff
                    outside the rule (its bytes are sealed: Kafka counts it as full).
==================  ===========================================================================

The rules of notebook 07 (offsets and delivery) are the *application's*: one iteration of a
consumer's loop, or its rebalance callback, with the exercise's signature (``minikafka.recipes``
holds Kafka's recipes). They act on a consumer, a producer or a sink rather than return a value,
so the guard never runs the reference beside them (``Rule.effects``: that would poll, commit and
write twice); it still catches what they raise (an exception that is not the judge's own
``Crash``, see ``minikafka.course.tester_delivery``) and a hang (``Rule.budget_s``: a step runs the
simulated world inside its ``poll``, so its budget is longer). What they *do* is judged by
the guarantee they promise, on the records processed, counted or written:

==================  ===========================================================================
no_record_lost      at-least-once: poll, process, commit (nothing lost; only what a crash
                    interrupted is processed again)
no_record_twice     at-most-once: poll, commit, process
on_assigned         a sink's ``onPartitionsAssigned``: seek to the offsets stored with the results
count_reports       the sink's write: the count and the next offset in one atomic transaction
transactional_step  read-process-write: outputs and offsets in one Kafka transaction
==================  ===========================================================================

and one of the broker's: ``decode_key`` (exercise 3), how ``GroupCoordinator._replay`` reads a
key of ``__consumer_offsets`` when a broker loads the groups it now coordinates.
"""

from __future__ import annotations

import bisect
import contextvars
import functools
import inspect
import time
from collections import namedtuple
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from minikafka.assignors import range_assign, reassign
from minikafka.deadline import RuleTimeout, call_within
from minikafka.errors import IllegalArgumentError
from minikafka.partitioner import murmur2, partition_for_key, to_positive  # lecture 02's rules live there
from minikafka.recipes import count_reports, no_record_lost, no_record_twice, on_assigned, transactional_step
from minikafka.replicas import assign_replicas, elect_leader  # lecture 03's rules live there

# --- the reference implementations (Kafka's rules) -------------------------------------------------


def high_watermark(hw, leader, leader_leo, follower_leos, isr, pending_isr):
    """The leader's new high watermark: the least log end offset among the leader and the
    followers of the maximal ISR (committed or pending, KIP-497), never below ``hw``.
    ``follower_leos``: {broker: LEO at its last fetch, -1 before any}."""
    candidate = leader_leo
    members = isr if pending_isr is None else set(isr).union(pending_isr)
    for b in members:
        if b != leader:
            leo = follower_leos.get(b, -1)
            if leo < candidate:
                candidate = leo
    return candidate if candidate > hw else hw


def last_caught_up(last_caught_up_ms, fetch, previous_fetch):
    """A follower's last caught-up time after one more fetch. ``fetch`` and
    ``previous_fetch`` are ``(time_ms, fetch_offset, leader_leo)``; ``previous_fetch`` is
    None before the follower's first fetch to this leader."""
    time_ms, fetch_offset, leader_leo = fetch
    if fetch_offset >= leader_leo:
        return time_ms if time_ms > last_caught_up_ms else last_caught_up_ms
    if previous_fetch is not None and fetch_offset >= previous_fetch[2]:
        return previous_fetch[0] if previous_fetch[0] > last_caught_up_ms else last_caught_up_ms
    return last_caught_up_ms


def end_offset_for(entries, epoch, log_end_offset):
    """In a leader epoch cache ``[(epoch, start_offset), ...]``: (the largest epoch <=
    ``epoch``, the offset where it ends), or (-1, -1) if there is none."""
    found = -1
    for i, (e, _) in enumerate(entries):
        if e <= epoch:
            found = i
    if found < 0:
        return -1, -1
    end = entries[found + 1][1] if found + 1 < len(entries) else log_end_offset
    return entries[found][0], end


def truncation_offset(leader_epoch, leader_end_offset, follower_epochs, follower_leo, follower_log_start):
    """Where a follower cuts its log when its leader answers "diverging at (``leader_epoch``,
    ``leader_end_offset``)": at the end of that epoch in the follower's own cache, or the
    leader's end if that is lower; at its log start if it has no epoch at or below the
    leader's (nothing in common)."""
    my_epoch, my_end = end_offset_for(follower_epochs, leader_epoch, follower_leo)
    target = min(leader_end_offset, my_end) if my_epoch >= 0 else follower_log_start
    return max(target, 0)


# The vote rule's arguments (notebook 08): what the voter knows of itself, and what the
# candidate's VoteRequest says. ``last_epoch``: the epoch of the last record (-1: empty log).
Voter = namedtuple("Voter", "epoch voted_for leader last_epoch log_end")
Request = namedtuple("Request", "candidate epoch last_epoch log_end")


def grant_vote(voter, request):
    """Raft's vote rule (KIP-595): no vote for an older epoch; a newer one first moves the
    voter to it (no vote, no leader there); then only if the voter knows no leader and voted
    for nobody else in that epoch, and the candidate's log is at least as up to date as the
    voter's ((last epoch, log end) compared as pairs)."""
    if request.epoch < voter.epoch:
        return False
    if request.epoch > voter.epoch:
        voted_for, leader = None, None
    else:
        voted_for, leader = voter.voted_for, voter.leader
    if leader is not None or voted_for not in (None, request.candidate):
        return False
    return (request.last_epoch, request.log_end) >= (voter.last_epoch, voter.log_end)


# lecture 01: the log. The rules see plain tuples: ``segment`` (base_offset, size, first_timestamp),
# ``batch`` (size, max_timestamp, last_offset), retention's segments (base_offset, size,
# newest_timestamp), as the exercises' namedtuples do.

_NO_POSITION = 2**31  # above any position in a segment: (offset, _NO_POSITION) sorts after (offset, p)


def index_lookup(entries, offset, base_offset):
    """In a segment's sparse offset index ``entries`` [(offset, position), ...], both increasing:
    the last entry whose offset is <= ``offset``, or (``base_offset``, 0) if none (scan from the
    start of the segment)."""
    i = bisect.bisect_right(entries, (offset, _NO_POSITION))
    return entries[i - 1] if i else (base_offset, 0)


def roll_reason(segment, batch, config):
    """Why ``batch`` must go to a new segment rather than the active ``segment``:
    "segment.bytes", "segment.ms" (record time: the batch's max timestamp more than
    ``segment_ms`` after the segment's first batch's) or "offset overflow" (a relative offset
    past the index's 4 bytes), in that order; None if it fits (an empty segment takes anything)."""
    if segment.size == 0:
        return None
    if segment.size + batch.size > config.segment_bytes:
        return "segment.bytes"
    if batch.max_timestamp - segment.first_timestamp > config.segment_ms:
        return "segment.ms"
    if batch.last_offset - segment.base_offset > 2**31 - 1:
        return "offset overflow"
    return None


def segments_to_delete(segments, now_ms, retention_ms, retention_bytes):
    """The (base_offset, reason) of the segments retention deletes, oldest first, from
    ``segments`` (oldest first, the last one active): first those whose newest record is more
    than ``retention_ms`` old, from the oldest on, stopping at the first that is not (the active
    one too, if not empty: Kafka rolls it first); then, never the active one, the oldest while
    the log's size after deleting one is still >= ``retention_bytes``. -1 turns a limit off.
    (An empty segment the log cleaner left goes with the first expired one after it.)"""
    deleted, kept = [], list(segments)
    if retention_ms >= 0:
        empty = []
        while kept:
            s = kept[0]
            if s.size == 0 and len(kept) > 1:
                empty.append(kept.pop(0))
            elif s.size and now_ms - s.newest_timestamp > retention_ms:
                deleted += [(e.base_offset, "retention.ms") for e in empty]
                empty = []
                deleted.append((kept.pop(0).base_offset, "retention.ms"))
            else:
                break
        kept = empty + kept
    if retention_bytes >= 0:
        excess = sum(s.size for s in kept) - retention_bytes
        for s in kept[:-1]:
            if excess - s.size < 0:
                break
            excess -= s.size
            deleted.append((s.base_offset, "retention.bytes"))
    return deleted


def decode_key(data):
    """A key of ``__consumer_offsets``: ``("offset", group, topic, partition)`` (versions 0 and 1)
    or ``("group", group)`` (version 2). The coordinator's replay (``GroupCoordinator._replay``)
    reads every key through this rule; Kafka's reader is ``group_metadata.read_key``."""
    from minikafka.broker.group_metadata import read_key  # the broker package imports this module

    return read_key(data)


def _check_decode_key(args: dict, value: Any) -> str | None:
    if isinstance(value, tuple) and len(value) == 4 and value[0] == "offset":
        if not (isinstance(value[1], str) and isinstance(value[2], str) and _int(value[3])):
            return f"it returned {value!r}: an offset key is ('offset', group: str, topic: str, partition: int)"
        return None
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "group":
        return None if isinstance(value[1], str) else f"it returned {value!r}: a group key is ('group', group: str)"
    return (f"it returned {type(value).__name__} {value!r}, not ('offset', group, topic, partition) "
            f"or ('group', group)")


# lecture 05: producers and acks. Sequence numbers are 31-bit: after 2**31 - 1 comes 0.

_SEQ_MOD = 2**31
BATCH_DECISIONS = ("append", "duplicate", "out of order", "fenced")


def check_batch(state, producer_id, epoch, first_seq, count):
    """What a partition's leader does with a client's batch (Kafka's ``ProducerStateManager``):
    ``state`` is {producer id: (epoch, [(first_seq, last_seq), ...] its last batches, oldest
    first)}. No producer id (-1): "append". An unknown producer, or a newer epoch (a new
    session): "append" from sequence 0, else "out of order". An older epoch: "fenced" (a
    zombie). The same epoch: "duplicate" if the batch's first and last sequences are those of
    a remembered batch, "append" if it starts right after the last one, else "out of order"."""
    if producer_id == -1:
        return "append"
    entry = state.get(producer_id)
    if entry is None:
        return "append" if first_seq == 0 else "out of order"
    known_epoch, batches = entry
    if epoch < known_epoch:
        return "fenced"
    if epoch > known_epoch:
        return "append" if first_seq == 0 else "out of order"
    last_seq = (first_seq + count - 1) % _SEQ_MOD
    for f, l in batches:
        if f == first_seq and l == last_seq:
            return "duplicate"
    last = batches[-1][1] if batches else -1
    return "append" if first_seq == (last + 1) % _SEQ_MOD else "out of order"


def batch_ready(batch_bytes, batch_size, queued_behind, waited_ms, linger_ms, flushing):
    """May the first batch of a partition be sent now (Kafka's ``RecordAccumulator.ready``)?
    Yes when it is full (``batch_bytes`` >= ``batch_size``, or ``queued_behind`` > 0 batches
    wait behind it), when it has waited ``linger_ms`` or more, or when the producer is
    ``flushing`` (flush(), close(), or a send() blocked for buffer memory)."""
    return queued_behind > 0 or batch_bytes >= batch_size or waited_ms >= linger_ms or flushing

# --- the rules: names, signatures, statements, contracts -----------------------------------------------


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_high_watermark(args: dict, value: Any) -> str | None:
    if not _int(value):
        return f"it returned {type(value).__name__} {value!r}, not an int offset"
    if value < args["hw"]:
        return f"it moved the high watermark backwards, from {args['hw']} to {value}"
    if value > args["leader_leo"]:
        return f"it put the high watermark at {value}, above the leader's log end {args['leader_leo']}"
    return None


def _check_last_caught_up(args: dict, value: Any) -> str | None:
    if not _int(value):
        return f"it returned {type(value).__name__} {value!r}, not a time in ms"
    if value < args["last_caught_up_ms"]:
        return f"it moved the caught-up time backwards, from {args['last_caught_up_ms']} to {value}"
    if value > args["fetch"][0]:
        return f"it says the follower was caught up at {value}, after the fetch at {args['fetch'][0]}"
    return None


def _check_truncation_offset(args: dict, value: Any) -> str | None:
    if not _int(value):
        return f"it returned {type(value).__name__} {value!r}, not an int offset"
    if value < 0:
        return f"it cut the log at a negative offset ({value})"
    if value > args["follower_leo"]:
        return f"it cut the log at {value}, past its end {args['follower_leo']}: a cut never lengthens a log"
    return None


def _check_grant_vote(args: dict, value: Any) -> str | None:
    if not isinstance(value, bool):
        return f"it returned {type(value).__name__} {value!r}, not True or False"
    voter, request = args["voter"], args["request"]
    if value and request.epoch < voter.epoch:
        return (f"it granted a vote in epoch {request.epoch}, older than the voter's epoch {voter.epoch}: "
                f"a voter never goes back to an epoch it has left")
    return None


def metadata_truncation_offset(diverging_epoch, diverging_end_offset, follower_epochs, follower_leo,
                               follower_log_start):
    """Where a follower of the metadata quorum cuts its log when the leader answers "diverging at
    (``diverging_epoch``, ``diverging_end_offset``)": Kafka's rule for partitions, word for word
    (``truncation_offset``), on the metadata log's own epoch cache."""
    return truncation_offset(diverging_epoch, diverging_end_offset, follower_epochs, follower_leo,
                             follower_log_start)


def _check_index_lookup(args: dict, value: Any) -> str | None:
    if not (isinstance(value, tuple) and len(value) == 2 and all(_int(v) for v in value)):
        return f"it returned {type(value).__name__} {value!r}, not an (offset, position) pair"
    entries = args["entries"]
    if value != (args["base_offset"], 0) and value not in entries:
        return (f"it returned {value!r}, which is neither an entry of the index nor (base_offset, 0): "
                f"a read would start scanning in the middle of a batch")
    return None


ROLL_REASONS = (None, "segment.bytes", "segment.ms", "offset overflow")


def _check_roll_reason(args: dict, value: Any) -> str | None:
    if value not in ROLL_REASONS:
        return f"it returned {value!r}, not one of {', '.join(map(repr, ROLL_REASONS))}"
    segment, batch = args["segment"], args["batch"]
    if value is None and segment.size and batch.last_offset - segment.base_offset > 2**31 - 1:
        return (f"it kept a batch ending at offset {batch.last_offset} in the segment based at {segment.base_offset}: "
                f"its relative offset does not fit the index's 4 bytes, the append would fail")
    return None


def _check_segments_to_delete(args: dict, value: Any) -> str | None:
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(d, tuple) and len(d) == 2 and _int(d[0]) for d in value):
        return f"it returned {type(value).__name__} {value!r}, not a list of (base_offset, reason) pairs"
    segments = list(args["segments"])
    bases = [s.base_offset for s in segments]
    for i, (base, reason) in enumerate(value):
        if reason not in ("retention.ms", "retention.bytes"):
            return f"it gave the reason {reason!r} for segment {base}, not 'retention.ms' or 'retention.bytes'"
        if i >= len(bases) or base != bases[i]:
            return (f"it deleted segment {base} where the oldest remaining segment is "
                    f"{bases[i] if i < len(bases) else 'none'}: retention deletes whole segments from the old "
                    f"end, or consumers would find a hole in the log")
        if i == len(bases) - 1 and (reason != "retention.ms" or not segments[i].size):
            return (f"it deleted the active segment {base} ({reason}, {segments[i].size} bytes): Kafka only "
                    f"deletes it by retention.ms, after rolling it, when it holds records")
    return None


def _check_murmur2(args: dict, value: Any) -> str | None:
    if not _int(value):
        return f"it returned {type(value).__name__} {value!r}, not an int hash"
    if not -2**31 <= value < 2**31:
        return f"it returned {value}, not a signed 32-bit int as Java's murmur2 (keep h to 32 bits, then sign it)"
    return None


def _check_partition_for_key(args: dict, value: Any) -> str | None:
    if not _int(value):
        return f"it returned {type(value).__name__} {value!r}, not a partition number"
    if not 0 <= value < args["num_partitions"]:
        return f"it returned partition {value}, outside 0..{args['num_partitions'] - 1}"
    return None

def _check_assignment(value: Any, members: Any, partition_ok: Callable[[Any], str | None], what: str) -> str | None:
    """What is wrong with an assignor's answer as a data structure (which member gets what is
    the tester's to judge: two owners, none, unbalanced reach the members as they are)."""
    if not isinstance(value, dict):
        return f"it returned {type(value).__name__} {value!r}, not a dict {{member: [{what}]}}"
    for member, assigned in value.items():
        if member not in members:
            return f"it assigned to {member!r}, who is not a member of the group"
        if not isinstance(assigned, (list, tuple)):
            return f"it gave {member!r} {type(assigned).__name__} {assigned!r}, not a list of {what}"
        for item in assigned:
            problem = partition_ok(item)
            if problem is not None:
                return f"it gave {member!r} {item!r}: {problem}"
    return None


def _check_range_assign(args: dict, value: Any) -> str | None:
    counts = args["partitions_per_topic"]

    def ok(item: Any) -> str | None:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            return "not a (topic, partition) pair"
        topic, p = item
        if topic not in counts:
            return f"the leader knows no topic {topic!r}"
        if not _int(p) or not 0 <= p < counts[topic]:
            return f"{topic!r} has partitions 0 to {counts[topic] - 1}"
        return None
    return _check_assignment(value, args["subscriptions"], ok, "(topic, partition)")


def _check_reassign(args: dict, value: Any) -> str | None:
    n = args["num_partitions"]

    def ok(p: Any) -> str | None:
        return None if _int(p) and 0 <= p < n else f"the topic has partitions 0 to {n - 1}"
    return _check_assignment(value, args["members"], ok, "partitions")


def _acts(args: dict, value: Any) -> str | None:
    """An application's step (07) is judged by what it did, not by what it returned."""
    return None


DEFAULT_BUDGET_S = 2.0  # a rule's wall-time budget per call, unless Rules(budget_s=...) says otherwise
APPLICATION_BUDGET_S = 5.0  # an application's step polls: the simulated world runs inside the call


def _check_assign_replicas(args: dict, value: Any) -> str | None:
    """The contract of a placement: one replica list per partition, ``rf`` distinct live brokers
    each (where the leaders and followers go is the tester's to judge)."""
    n, rf, brokers = args["n_partitions"], args["rf"], list(args["brokers"])
    if not isinstance(value, (list, tuple)):
        return f"it returned {type(value).__name__} {value!r}, not a list of replica tuples"
    if len(value) != n:
        return f"it placed {len(value)} partition(s), not the {n} asked for"
    for p, replicas in enumerate(value):
        if not isinstance(replicas, (list, tuple)) or not all(_int(r) for r in replicas):
            return f"it gave partition {p} {replicas!r}, not a tuple of broker ids"
        if len(replicas) != rf:
            return f"it gave partition {p} {len(replicas)} replica(s) {tuple(replicas)}, not replication factor {rf}"
        if len(set(replicas)) != len(replicas):
            return (f"it put the same broker twice in partition {p} {tuple(replicas)}: two copies on one broker "
                    f"are one copy, the replication factor is broken")
        strangers = [r for r in replicas if r not in brokers]
        if strangers:
            return (f"it gave partition {p} {tuple(replicas)}: {strangers[0]} is not one of the brokers {brokers} "
                    f"(ids, not positions in the list)")
    return None


def _check_elect_leader(args: dict, value: Any) -> str | None:
    """The contract of an election: None or one of the partition's replicas (whether it is in
    sync and alive is the tester's to judge: a dead leader leaves the partition unavailable, an
    out-of-sync one loses acknowledged records)."""
    if value is None:
        return None
    if not _int(value):
        return f"it returned {type(value).__name__} {value!r}, not a broker id or None"
    if value not in args["replicas"]:
        return (f"it elected broker {value}, which is not a replica of the partition {tuple(args['replicas'])}: "
                f"it has none of the partition's records")
    return None


def _check_check_batch(args: dict, value: Any) -> str | None:
    if not isinstance(value, str) or value not in BATCH_DECISIONS:
        return f"it returned {type(value).__name__} {value!r}, not one of {', '.join(map(repr, BATCH_DECISIONS))}"
    if value == "duplicate":
        entry = args["state"].get(args["producer_id"])
        if entry is None or all(f != args["first_seq"] for f, _ in entry[1]):
            return (f"it called the batch a duplicate, but producer {args['producer_id']} has no remembered batch "
                    f"from sequence {args['first_seq']}: the broker has no offset to answer the retry with")
    return None


def _check_batch_ready(args: dict, value: Any) -> str | None:
    if not isinstance(value, bool):
        return f"it returned {type(value).__name__} {value!r}, not True or False"
    return None


@dataclass(frozen=True)
class Rule:
    """One decision of Kafka's: its reference implementation and its contract."""

    name: str
    lecture: str  # the notebook whose exercise it is
    reference: Callable
    statement: str  # Kafka's rule, in one sentence
    where: str  # the package's caller
    check: Callable[[dict, Any], str | None]  # None, or what is wrong with a returned value
    effects: bool = False  # an application's step (07): acts, returns nothing; the reference never runs beside it
    budget_s: float | None = None  # its own wall-time budget, where the node's default is too short

    @functools.cached_property  # the guard names every call's arguments by them
    def parameters(self) -> tuple[str, ...]:
        return tuple(inspect.signature(self.reference).parameters)

    @property
    def signature(self) -> str:
        return f"{self.name}({', '.join(self.parameters)})"


RULES: dict[str, Rule] = {r.name: r for r in (
    Rule("high_watermark", "04", high_watermark,
         "the least log end offset among the leader and the followers in the ISR, counting a pending "
         "ISR change too (KIP-497); it never moves backwards",
         "Partition.maybe_increment_high_watermark", _check_high_watermark),
    Rule("last_caught_up", "04", last_caught_up,
         "a fetch at or past the leader's log end makes the follower caught up now; one at or past the "
         "leader's log end at its previous fetch, caught up then; the time never moves backwards",
         "Partition.update_follower_fetch_state", _check_last_caught_up),
    Rule("truncation_offset", "04", truncation_offset,
         "cut at the end of the leader's diverging epoch as the follower's own epoch cache has it "
         "(the lower of the two ends), or at the log start if nothing is in common (KIP-101, KIP-279)",
         "ReplicaManager.handle_fetch_response", _check_truncation_offset),
    Rule("grant_vote", "08", grant_vote,
         "no vote for an older epoch; in its (possibly new) epoch a voter grants only if it knows no leader, "
         "voted for nobody else, and the candidate's (last epoch, log end) is at least its own",
         "KafkaRaftClient._handle_vote_request", _check_grant_vote),
    Rule("metadata_truncation_offset", "08", metadata_truncation_offset,
         "cut the metadata log at the end of the leader's diverging epoch as the follower's own epoch cache "
         "has it (the lower of the two ends), or at the log start if nothing is in common",
         "KafkaRaftClient._truncate_to_diverging", lambda args, value: _check_truncation_offset(
             {"follower_leo": args["follower_leo"]}, value)),

    Rule("index_lookup", "01", index_lookup,
         "the last index entry whose offset is <= the wanted offset, or (base offset, 0) if there is none: "
         "the read scans forward from there",
         "OffsetIndex.lookup", _check_index_lookup),
    Rule("roll_reason", "01", roll_reason,
         "roll when the batch would take the segment past segment.bytes, when its record time is more than "
         "segment.ms after the segment's first batch, or before relative offsets overflow 4 bytes; "
         "an empty segment takes any batch",
         "Log._maybe_roll", _check_roll_reason),
    Rule("segments_to_delete", "01", segments_to_delete,
         "from the oldest, segments whose newest record is more than retention.ms old (stopping at the first "
         "that is not); then the oldest, never the active one, while the log stays >= retention.bytes",
         "Log.delete_old_segments", _check_segments_to_delete),
    Rule("murmur2", "02", murmur2,
         "MurmurHash2 with seed 0x9747b28c over 4-byte little-endian blocks, as a signed 32-bit int "
         "(Kafka's Utils.murmur2)",
         "DefaultPartitioner.partition", _check_murmur2),
    Rule("partition_for_key", "02", partition_for_key,
         "toPositive(murmur2(key)) % numPartitions, toPositive clearing the sign bit (not abs)",
         "DefaultPartitioner.partition", _check_partition_for_key),
    Rule("assign_replicas", "03", assign_replicas,
         "partition p's first replica on broker (p + start_index) % n; its j-th follower "
         "1 + (shift + j) % (n - 1) places further round the broker list, the shift growing by one every "
         "n partitions (AdminUtils.assignReplicasToBrokers, rack unaware)",
         "QuorumController._create_topics, _new_partitions", _check_assign_replicas),
    Rule("elect_leader", "03", elect_leader,
         "the first replica in assignment order that is in the ISR and alive; with none, only if unclean "
         "leader election is enabled, the first alive replica; else nobody (offline)",
         "QuorumController._elect (PartitionChangeBuilder.electLeader)", _check_elect_leader),
    Rule("range_assign", "06", range_assign,
         "per topic, its subscribers sorted by member id get contiguous ranges, n // m partitions each and "
         "one more for the first n % m; every member is in the answer",
         "RangeAssignor.assign, run by the group's leader (ConsumerCoordinator._leader_sync)", _check_range_assign),
    Rule("reassign", "06", reassign,
         "balanced (counts differ by at most one), keeping every partition with its previous owner that "
         "balance allows: only the surplus of members over their quota moves",
         "StickyAssignor.assign, run by the group's leader (ConsumerCoordinator._leader_sync)", _check_reassign),

    Rule("decode_key", "07", decode_key,
         "an int16 version (0 or 1: an offset commit, then group, topic as int16-length UTF-8 strings and an "
         "int32 partition; 2: a group's metadata, then the group), all big-endian",
         "GroupCoordinator._replay (loading __consumer_offsets when a broker becomes a group's coordinator)",
         _check_decode_key),
    Rule("no_record_lost", "07", no_record_lost,
         "at-least-once: poll, process every record, then commit each partition's last record + 1; a crash "
         "repeats only what the interrupted iteration processed",
         "the application's poll loop (minikafka.recipes)", _acts, effects=True, budget_s=APPLICATION_BUDGET_S),
    Rule("no_record_twice", "07", no_record_twice,
         "at-most-once: poll, commit the positions, then process; a crash loses only what the interrupted "
         "iteration's poll returned",
         "the application's poll loop (minikafka.recipes)", _acts, effects=True, budget_s=APPLICATION_BUDGET_S),
    Rule("on_assigned", "07", on_assigned,
         "seek each assigned partition to the offset stored in the sink with the results (not Kafka's committed "
         "offset); a partition the sink has no offset for starts where Kafka says",
         "ConsumerRebalanceListener.on_partitions_assigned of the sink", _acts, effects=True,
         budget_s=APPLICATION_BUDGET_S),
    Rule("count_reports", "07", count_reports,
         "one atomic sink transaction per record: the truck's count + 1 and the partition's next offset "
         "(record.offset + 1) together",
         "the sink's poll loop (minikafka.recipes)", _acts, effects=True, budget_s=APPLICATION_BUDGET_S),
    Rule("transactional_step", "07", transactional_step,
         "poll; in one transaction, every output and the consumer's next offsets (send_offsets_to_transaction "
         "for the group), then commit_transaction; never consumer.commit()",
         "the read-process-write loop (minikafka.recipes)", _acts, effects=True, budget_s=APPLICATION_BUDGET_S),
    Rule("check_batch", "05", check_batch,
         "no producer id: append; an unknown producer or a newer epoch starts at sequence 0; an older epoch is "
         "fenced; in the same epoch a batch with the first and last sequences of a remembered one is a duplicate, "
         "one starting right after the last is appended, anything else is out of order (31-bit sequences)",
         "ProducerStateManager.check, asked by Partition.append_as_leader", _check_check_batch),
    Rule("batch_ready", "05", batch_ready,
         "the first batch of a partition may go when another batch waits behind it, when it holds batch.size "
         "bytes, when it has waited linger.ms, or when the producer is flushing or closing",
         "RecordAccumulator.ready, asked by the producer's Sender", _check_batch_ready),
)}


# --- a student's rule under guard ----------------------------------------------------------------------


def node_name(node: Any) -> str:
    """A node as messages name it: "broker 2" for a broker's id, any other node by its own name
    ("producer-4", "voter 2", "controller 3000")."""
    return f"broker {node}" if isinstance(node, int) and not isinstance(node, bool) else str(node)


class RuleError(Exception):
    """A rule raised, hung, or returned something no broker could act on."""

    def __init__(self, call: "RuleCall", problem: str) -> None:
        self.call = call
        self.problem = problem
        super().__init__(self._message())

    def _message(self) -> str:
        c = self.call
        rule = RULES[c.rule]
        args = ", ".join(f"{k}={v!r}" for k, v in c.args.items())
        kafka = (f"Kafka's rule returns None, having acted: {rule.statement}" if rule.effects
                 else f"Kafka's rule returns: {c.reference!r} ({rule.statement})")
        return (f"your rule {c.rule} broke on {node_name(c.node)} at t={c.time_ms} ms: {self.problem}\n"
                f"  called with: {c.rule}({args})\n"
                f"  it returned: {c.returned_text}\n"
                f"  {kafka}\n"
                f"  the cluster is stopped.")


@dataclass(frozen=True)
class RuleCall:
    time_ms: int
    node: Any
    rule: str
    args: dict
    returned: Any
    reference: Any
    raised: str | None = None  # what happened instead of a value: "raised ...", "nothing: ..."

    @property
    def returned_text(self) -> str:
        return f"({self.raised})" if self.raised is not None else repr(self.returned)

    def line(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return (f"t={self.time_ms:>6} ms  {node_name(self.node)}: {self.rule}({args}) -> {self.returned_text}; "
                f"Kafka's rule: {self.reference!r}")


@dataclass
class RuleTrace:
    """What a cluster's guarded rules did: calls per rule, and the calls whose answer
    differed from Kafka's (the first ``keep``)."""

    keep: int = 200
    calls: dict[str, int] = field(default_factory=dict)
    differing: list[RuleCall] = field(default_factory=list)
    differing_count: int = 0
    error: RuleError | None = None
    on_error: Callable[[RuleError], None] | None = None  # the cluster's: stop every node

    def note(self, call: RuleCall) -> None:
        self.differing_count += 1
        if len(self.differing) < self.keep:
            self.differing.append(call)


def calls_said(rule_calls: Mapping[str, int], differing: int, broke: bool = False) -> str:
    """A judge's words for what a student's rules did in a failing run: "15 index_lookup calls, 3
    answered differently from Kafka's". With ``broke`` (a ``RuleError`` stopped the run), the
    last call, counted in ``differing``, is the one that raised, hung or returned nonsense: it
    answered nothing, so it is said apart."""
    calls = ", ".join(f"{n} {name} call{'' if n == 1 else 's'}" for name, n in sorted(rule_calls.items()))
    calls = calls or "no calls"
    if not broke:
        return f"{calls}, {differing} answered differently from Kafka's"
    before = max(differing - 1, 0)
    return f"{calls}; the last one broke" + (f", {before} before it answered differently from Kafka's"
                                             if before else "")


class Allowance:
    """The wall time every guarded call inside one ``with allowance(seconds)`` may spend, in all
    (see the module docstring); ``spent`` is {rule name: [calls, seconds]}."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.spent: dict[str, list] = {}
        self.used = 0.0  # the sum of spent's seconds (kept: left() is asked twice a call)
        self.depth = 0  # guarded calls running now: only the outermost spends
        self.error: RuleError | None = None  # the call that spent the last of it

    def spend(self, rule: str, seconds: float) -> None:
        used = self.spent.setdefault(rule, [0, 0.0])
        used[0] += 1
        used[1] += seconds
        self.used += seconds

    def left(self) -> float:
        return self.seconds - self.used

    def problem(self) -> str:
        used = sorted(self.spent.items(), key=lambda item: -item[1][1])
        each = "; ".join(f"{name} {seconds:.1f} s in {calls:,} call{'s' if calls != 1 else ''} "
                         f"({1000 * seconds / max(calls, 1):.1f} ms a call)" for name, (calls, seconds) in used)
        return (f"your rules used up the judge's allowance of {self.seconds:g} s of wall time in all ({each}). "
                f"Kafka's rules take microseconds a call and a judge calls them up to ~100,000 times: "
                f"a rule should decide from its arguments alone (no sleep, no printing on every call, "
                f"no loop over more than its arguments)")


_ALLOWANCE: contextvars.ContextVar[Allowance | None] = contextvars.ContextVar("minikafka_rule_allowance",
                                                                               default=None)


@contextmanager
def allowance(seconds: float) -> Iterator[Allowance]:
    """Every guarded call in the body spends from one wall-time allowance of ``seconds``."""
    token = _ALLOWANCE.set(Allowance(seconds))
    try:
        yield _ALLOWANCE.get()
    finally:
        _ALLOWANCE.reset(token)


def out_of_time() -> bool:
    """Has the allowance of the ``with allowance(...)`` running now been spent?"""
    current = _ALLOWANCE.get()
    return current is not None and current.error is not None


def _copy(value: Any, depth: int = 1) -> Any:
    """A copy of an argument, and of the lists and dicts inside it (one level: an assignor's
    ``{member: [topics]}``)."""
    if isinstance(value, dict):
        return {k: _copy(v, depth - 1) for k, v in value.items()} if depth > 0 else dict(value)
    if isinstance(value, list):
        return [_copy(v, depth - 1) for v in value] if depth > 0 else list(value)
    return value


class _Guarded:
    """A student's function in a rule's place (see the module docstring)."""

    __slots__ = ("rule", "fn", "node", "clock", "trace", "budget_s")

    def __init__(self, rule: Rule, fn: Callable, node: Any, clock: Callable[[], int], trace: RuleTrace,
                 budget_s: float | None) -> None:
        self.rule, self.fn, self.node, self.clock, self.trace, self.budget_s = rule, fn, node, clock, trace, budget_s

    def __call__(self, *args: Any) -> Any:
        rule = self.rule
        named = dict(zip(rule.parameters, args))
        self.trace.calls[rule.name] = self.trace.calls.get(rule.name, 0) + 1
        reference = None if rule.effects else rule.reference(*args)  # a step acts: never twice
        raised, value, problem, cause = None, None, None, None
        budget, spending = self.budget_s, _ALLOWANCE.get()
        if spending is not None and spending.depth:
            spending = None  # inside another guarded call: that one spends
        if spending is not None:
            if spending.error is not None:  # spent: nothing more of the student's runs
                raise spending.error
            left = spending.left()
            budget = left if budget is None else min(budget, left)
            spending.depth += 1
        started = time.monotonic()
        try:
            if budget is not None and budget <= 0:
                raise RuleTimeout()
            value = call_within(budget, self.fn, *(_copy(a) for a in args))
        except RuleTimeout as e:
            shown = budget if budget == self.budget_s else round(max(budget, 0), 3)
            raised, cause = f"nothing: still running after {shown} s", e
            problem = f"it was still running after {shown} s of wall time (a loop that never ends?)"
        except Exception as e:  # the student's code: anything it raises is reported
            raised, cause = f"raised {type(e).__name__}: {e}", e
            problem = f"it {raised}"
        finally:
            if spending is not None:
                spending.depth -= 1
                spending.spend(rule.name, time.monotonic() - started)
        if spending is not None and spending.left() <= 0:
            problem = spending.problem()
        call = RuleCall(self.clock(), self.node, rule.name, named, value, reference, raised)
        if problem is None:
            problem = rule.check(named, value)
        if problem is not None:
            error = RuleError(call, problem)
            error.__cause__ = cause  # (its traceback: the student's line where it raised or was stopped)
            error.trace = self.trace  # what the rules did before: the judge's timeline
            if spending is not None and spending.left() <= 0:
                spending.error = error
            self.trace.error = error
            if self.trace.on_error is not None:
                self.trace.on_error(error)
            raise error
        if not rule.effects and value != reference:
            self.trace.note(call)
        return value


class Rules:
    """The rules one node calls, one attribute per rule (``rules.high_watermark(...)``).

    ``Rules()`` is Kafka's (the references); ``Rules({"high_watermark": fn}, node=..., clock=...)``
    runs ``fn`` under guard in its place and the references for the rest."""

    def __init__(self, overrides: Mapping[str, Callable] | None = None, *, node: Any = None,
                 clock: Callable[[], int] = lambda: -1, trace: RuleTrace | None = None,
                 budget_s: float | None = DEFAULT_BUDGET_S) -> None:
        overrides = validate(overrides)
        self.trace = trace if trace is not None else RuleTrace()
        self.custom = tuple(sorted(overrides))
        for name, rule in RULES.items():
            fn = overrides.get(name)
            setattr(self, name, rule.reference if fn is None or fn is rule.reference
                    else _Guarded(rule, fn, node, clock, self.trace,
                                  rule.budget_s if rule.budget_s is not None and budget_s == DEFAULT_BUDGET_S
                                  else budget_s))
        if "murmur2" in self.custom and "partition_for_key" not in self.custom:
            hash_ = self.murmur2  # the student's hash, in Kafka's toPositive(hash) % n

            def partition_for_key(key, num_partitions):
                return to_positive(hash_(key)) % num_partitions
            self.partition_for_key = partition_for_key

    def __repr__(self) -> str:
        if not self.custom:
            return "<Rules: Kafka's>"
        return f"<Rules: yours for {', '.join(self.custom)}; Kafka's for the rest>"


def validate(overrides: Mapping[str, Callable] | None) -> dict[str, Callable]:
    """Check a ``rules=`` argument: known names, callables taking the rule's arguments."""
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise IllegalArgumentError(f"rules must be a dict {{rule name: function}}, not {overrides!r}")
    out = {}
    for name, fn in overrides.items():
        rule = RULES.get(name)
        if rule is None:
            raise IllegalArgumentError(f"no rule named {name!r}; the rules are {', '.join(RULES)}")
        if not callable(fn):
            raise IllegalArgumentError(f"rules[{name!r}] must be a function {rule.signature}, not {fn!r}")
        try:
            inspect.signature(fn).bind(*rule.parameters)
        except TypeError:
            raise IllegalArgumentError(
                f"rules[{name!r}] must take the arguments {rule.signature}, "
                f"but {getattr(fn, '__name__', fn)}{inspect.signature(fn)} cannot") from None
        except ValueError:  # no signature to read (a builtin): let the call tell
            pass
        out[name] = fn
    return out


REFERENCE = Rules()


def table() -> str:
    """The rules, their signatures and Kafka's statement of each."""
    return "\n".join(f"{r.lecture}  {r.signature}\n    {r.statement}\n    called in {r.where}"
                     for r in RULES.values())

