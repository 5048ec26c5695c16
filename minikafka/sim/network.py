"""The simulated network: per-link latency, loss, partitions and heals.

Theory of operation
-------------------
A message from ``src`` to ``dst`` is either dropped or delivered after the link's latency
(plus seeded jitter). Links behave like TCP connections: what arrives, arrives in the
order it was sent (a later message never overtakes an earlier one on the same link), so a
broker sees a client's requests in order, as Kafka relies on.

Faults: ``partition(a, b)`` cuts every link between the groups (both ways) until
``heal()``; ``set_link(src, dst, latency_ms=..., loss=...)`` makes one direction slow or
lossy. Nodes named in no fault keep their links. All randomness comes from the world's
seeded RNG, so a run replays exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable

from minikafka.node import NodeId


@dataclass
class Link:
    latency_ms: int = 1
    jitter_ms: int = 0
    loss: float = 0.0


class Network:
    def __init__(self, rng: random.Random, *, latency_ms: int = 1, jitter_ms: int = 0) -> None:
        self.rng = rng
        self.default = Link(latency_ms, jitter_ms)
        self.links: dict[tuple[NodeId, NodeId], Link] = {}
        self.cut: set[frozenset] = set()  # pairs that cannot talk
        self._last_arrival: dict[tuple[NodeId, NodeId], int] = {}

    def link(self, src: NodeId, dst: NodeId) -> Link:
        return self.links.get((src, dst), self.default)

    def set_link(
        self, src: NodeId, dst: NodeId, *, latency_ms: int | None = None,
        jitter_ms: int | None = None, loss: float | None = None,
    ) -> None:
        old = self.link(src, dst)
        self.links[(src, dst)] = Link(
            old.latency_ms if latency_ms is None else latency_ms,
            old.jitter_ms if jitter_ms is None else jitter_ms,
            old.loss if loss is None else loss,
        )

    def partition(self, a: Iterable[NodeId], b: Iterable[NodeId]) -> None:
        b = list(b)
        for x in a:
            for y in b:
                if x != y:
                    self.cut.add(frozenset((x, y)))

    def isolate(self, node: NodeId, others: Iterable[NodeId]) -> None:
        self.partition([node], [o for o in others if o != node])

    def heal(self) -> None:
        """Reconnect everything and restore every link to the default."""
        self.cut.clear()
        self.links.clear()

    def connected(self, src: NodeId, dst: NodeId) -> bool:
        return frozenset((src, dst)) not in self.cut

    def arrival(self, now: int, src: NodeId, dst: NodeId) -> int | None:
        """When a message sent now arrives, or None if the network loses it."""
        if src == dst:
            return now
        # Every message passes here: skip building the pair's key while nothing is cut.
        if self.cut and frozenset((src, dst)) in self.cut:
            return None
        link = self.links.get((src, dst), self.default) if self.links else self.default
        if link.loss and self.rng.random() < link.loss:
            return None
        at = now + link.latency_ms + (self.rng.randint(0, link.jitter_ms) if link.jitter_ms else 0)
        pair = (src, dst)
        last = self._last_arrival.get(pair, 0)
        if last > at:
            at = last  # FIFO per link: never before a message sent earlier
        self._last_arrival[pair] = at
        return at

    def describe(self) -> list[tuple[str, str]]:
        """The faults in force, for pictures and tables."""
        out = [(" <-/-> ".join(sorted(map(str, pair))), "partitioned") for pair in self.cut]
        for (s, d), link in self.links.items():
            out.append((f"{s} -> {d}", f"latency {link.latency_ms} ms, loss {link.loss:.0%}"))
        return sorted(out)
