"""Where a partition's replicas go, and which of them leads: the controller's two rules of notebook 03.

Theory of operation
-------------------
The controller (``minikafka.controller``) makes two small decisions about every partition's
replicas, each one a plain function here, called through the rules seam
(``minikafka.rules``: ``self.rules.assign_replicas(...)``, ``self.rules.elect_leader(...)``):

- **Placement**, once, when a topic is created (or grows): ``assign_replicas`` is Kafka's
  rack-unaware ``AdminUtils.assignReplicasToBrokers``. Partition p's first replica (its
  *preferred leader*) is broker ``(p + start_index) % n`` in the sorted broker list, so the
  leaders go round the brokers; each follower sits ``1 + (shift + j) % (n - 1)`` places after
  it, and the shift grows by one every n partitions, so a broker's partitions have their
  followers on *different* brokers. ``start_index`` and ``next_replica_shift`` are drawn at
  random per topic, so topics with few partitions do not all start on the same broker.
- **Election**, whenever a leader dies, is fenced, or an offline partition gets a replica back:
  ``elect_leader`` is KRaft's ``PartitionChangeBuilder.electLeader``: the first replica *in
  assignment order* that is in the ISR and alive; with none, and only if
  ``unclean.leader.election.enable``, the first alive replica (which may lack acknowledged
  records); else nobody (None: the partition goes offline, leader -1). Assignment order makes
  the choice predictable and gives a returning preferred leader its partitions back at the next
  election.

Both functions are pure: they read their arguments, nothing else (no clock, no I/O, no
randomness: the controller draws the two numbers and passes them in).
"""

from __future__ import annotations

from typing import Collection, Sequence


def assign_replicas(n_partitions: int, rf: int, brokers: Sequence[int], start_index: int,
                    next_replica_shift: int) -> list[tuple[int, ...]]:
    """Kafka's rack-unaware replica placement (``AdminUtils.assignReplicasToBrokers``): one
    tuple of broker ids per partition, the preferred leader first. ``brokers``: the sorted
    live broker ids; ``start_index``, ``next_replica_shift``: the controller's two draws (< n)."""
    n = len(brokers)
    placement = []
    for p in range(n_partitions):
        if p > 0 and p % n == 0:
            next_replica_shift += 1
        first = (p + start_index) % n
        replicas = [brokers[first]]
        for j in range(rf - 1):
            shift = 1 + (next_replica_shift + j) % (n - 1)
            replicas.append(brokers[(first + shift) % n])
        placement.append(tuple(replicas))
    return placement


def elect_leader(replicas: Sequence[int], isr: Collection[int], live_brokers: Collection[int],
                 unclean: bool) -> int | None:
    """KRaft's ``PartitionChangeBuilder.electLeader``: the first of ``replicas`` (assignment
    order) that is in ``isr`` and in ``live_brokers``; with none, if ``unclean`` (the topic's
    ``unclean.leader.election.enable``), the first live replica; else None (offline)."""
    for r in replicas:
        if r in isr and r in live_brokers:
            return r
    if unclean:
        for r in replicas:
            if r in live_brokers:
                return r
    return None


__all__ = ["assign_replicas", "elect_leader"]
