"""Explicit replica assignments: the controller's checks on replicas a user chose by hand.

Theory of operation
-------------------
Usually the controller places a new partition's replicas itself (``minikafka.replicas``:
``assign_replicas``). A user may instead name them: ``kafka-topics --create
--replica-assignment 1:2,2:3`` or kafka-python's ``NewTopic(name, replica_assignments={0: [1,
2], 1: [2, 3]})`` (CreateTopics' ``Assignments``), and ``NewPartitions(total_count=4,
new_assignments=[[3, 1]])`` for added partitions (CreatePartitions' ``Assignments``). The
controller then only judges the lists and writes them as they are. The checks and their
words are KRaft's, ``ReplicationControlManager`` (``createTopic``, ``createPartitions`` and
``validateManualPartitionAssignment``):

==========================================  ====================================================
the request                                 the answer
==========================================  ====================================================
assignments and a replication factor        INVALID_REQUEST (``createTopic``: both cannot be set)
assignments and a partition count           INVALID_REQUEST (``createTopic``)
one partition index listed twice            INVALID_REPLICA_ASSIGNMENT (``createTopic``)
an empty replica list                       INVALID_REPLICA_ASSIGNMENT (``validateManual...``)
a broker that is not registered             INVALID_REPLICA_ASSIGNMENT, naming the broker (the
                                            smallest such id: Kafka checks the sorted list)
a broker twice in one list                  INVALID_REPLICA_ASSIGNMENT, naming the broker
a list longer or shorter than the others    INVALID_REPLICA_ASSIGNMENT (``validateManual...``;
                                            the first list, or for added partitions the
                                            topic's replication factor, sets the length)
no live (unfenced) broker in a list         INVALID_REPLICA_ASSIGNMENT (``createTopic``,
                                            ``createPartitions``)
partitions not numbered 0, 1, ..., n-1      INVALID_REPLICA_ASSIGNMENT (``createTopic``)
added partitions: not one list per new one  INVALID_REPLICA_ASSIGNMENT (``createPartitions``)
==========================================  ====================================================

A *registered* broker (one that has ever registered and not been unregistered) may be named
though it is fenced (down) now, as in Kafka: it becomes a replica outside the ISR and catches up
when it returns. Each accepted partition starts with the ISR = its live replicas in list order
and the leader = the first of them (the preferred leader, the list's head, if it is alive):
Kafka's ``buildPartitionRegistration``, ``setLeader(isr.get(0))``.

Everything here is a pure function of its arguments (the request's lists, the registered and
the live broker ids): no image, no clock, no I/O. An error is ``(error code, message)``.
"""

from __future__ import annotations

from typing import Collection, Sequence

from minikafka.messages import INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST

Placement = list[tuple[tuple[int, ...], tuple[int, ...]]]  # per partition: (replicas, ISR)
Refusal = tuple[int, str]


def validate_manual_partition_assignment(replicas: Sequence[int], registered: Collection[int],
                                         replication_factor: int | None) -> str | None:
    """Kafka's ``ReplicationControlManager.validateManualPartitionAssignment`` for one partition's
    list: what is wrong with it (INVALID_REPLICA_ASSIGNMENT's message), or None."""
    if not replicas:
        return "The manual partition assignment includes an empty replica list."
    previous = None
    for broker in sorted(replicas):
        if broker not in registered:
            return f"The manual partition assignment includes broker {broker}, but no such broker is registered."
        if broker == previous:
            return f"The manual partition assignment includes the broker {broker} more than once."
        previous = broker
    if replication_factor is not None and len(replicas) != replication_factor:
        return (f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this "
                f"is not consistent with previous partitions, which have {replication_factor} replica(s).")
    return None


def _in_sync(replicas: Sequence[int], live: Collection[int], partition: int) -> tuple[tuple[int, ...] | None, str]:
    """The new partition's ISR: its live replicas in list order (Kafka's
    ``filter(clusterControl::isActive)``); None and the message if there is none."""
    isr = tuple(b for b in replicas if b in live)
    if not isr:
        return None, (f"All brokers specified in the manual partition assignment for partition {partition} "
                      "are fenced or in controlled shutdown.")
    return isr, ""


def topic_placement(assignments: Sequence[tuple[int, Sequence[int]]], num_partitions: int,
                    replication_factor: int, registered: Collection[int],
                    live: Collection[int]) -> tuple[Placement, Refusal | None]:
    """A new topic's explicit ``(partition index, replicas)`` lists, as
    ``ReplicationControlManager.createTopic`` judges them, in its order: ``(placement, None)``
    with one ``(replicas, isr)`` per partition 0..n-1, or ``([], (error, message))``."""
    if replication_factor != -1:
        return [], (INVALID_REQUEST, "A manual partition assignment was specified, but replication factor "
                                     "was not set to -1.")
    if num_partitions != -1:
        return [], (INVALID_REQUEST, "A manual partition assignment was specified, but numPartitions was not "
                                     "set to -1.")
    by_partition: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    rf = None
    for index, replicas in assignments:
        if index in by_partition:
            return [], (INVALID_REPLICA_ASSIGNMENT, f"Found multiple manual partition assignments for partition "
                                                    f"{index}")
        wrong = validate_manual_partition_assignment(replicas, registered, rf)
        if wrong is not None:
            return [], (INVALID_REPLICA_ASSIGNMENT, wrong)
        rf = len(replicas)
        isr, wrong = _in_sync(replicas, live, index)
        if isr is None:
            return [], (INVALID_REPLICA_ASSIGNMENT, wrong)
        by_partition[index] = (tuple(replicas), isr)
    if sorted(by_partition) != list(range(len(by_partition))):
        return [], (INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer sequence")
    return [by_partition[p] for p in range(len(by_partition))], None


def added_partitions_placement(assignments: Sequence[Sequence[int]], additional: int, first: int,
                               replication_factor: int, registered: Collection[int],
                               live: Collection[int]) -> tuple[Placement, Refusal | None]:
    """Explicit replicas for ``additional`` partitions added after the ``first - 1`` a topic has,
    as ``ReplicationControlManager.createPartitions`` judges them (every list as long as the
    topic's replication factor): ``(placement, None)`` or ``([], (error, message))``."""
    if len(assignments) != additional:
        return [], (INVALID_REPLICA_ASSIGNMENT, f"Attempted to add {additional} additional partition(s), but only "
                                                f"{len(assignments)} assignment(s) were specified.")
    placement: Placement = []
    for i, replicas in enumerate(assignments):
        wrong = validate_manual_partition_assignment(replicas, registered, replication_factor)
        if wrong is not None:
            return [], (INVALID_REPLICA_ASSIGNMENT, wrong)
        isr, wrong = _in_sync(replicas, live, first + i)
        if isr is None:
            return [], (INVALID_REPLICA_ASSIGNMENT, wrong)
        placement.append((tuple(replicas), isr))
    return placement, None
