"""The contract between a node's state machine and the runtime that drives it.

Theory of operation
-------------------
Brokers, the controller and clients are *sans-I/O* state machines (as h11 is for HTTP):
they never open a socket, start a thread or read a clock. A runtime calls them with one
input at a time, each stamped with the current time in milliseconds:

- ``start(now)``: the node (re)starts; a restarted broker reopens its log directory here;
- ``handle(now, src, message)``: a message from node ``src`` arrived;
- ``timer(now, key)``: a timer the node set has fired.

Each call returns the *effects* the node wants: ``Send(dst, message)`` and
``SetTimer(key, delay_ms)`` (setting a key again replaces the earlier timer;
``CancelTimer(key)`` drops it), and, rarely, ``Halt(reason)``: the node cannot go on safely
and its process stops, as Kafka's ``Exit.halt`` (a broker whose metadata log can no longer be
written); what it asked before the ``Halt`` happens, nothing after it. The simulated runtime (``minikafka.sim``) delivers them on
a virtual clock through a faulty network; the TCP runtime (``minikafka.wire``) turns the
same messages into Kafka protocol frames. So the same broker code is what a test replays
from a seed and what kafka-python talks to.

Invariants: a node's behaviour depends only on the inputs it was given (and its seeded
RNG, if any). It must never read ``time.time()``, sleep, or do I/O other than through the
storage layer's files, which the runtime owns the lifetime of.
"""

from __future__ import annotations

from minikafka.frozen import frozen_dataclass
from typing import Any, Hashable, Union

NodeId = Union[int, str]


@frozen_dataclass
class Send:
    dst: NodeId
    message: Any


@frozen_dataclass
class SetTimer:
    key: Hashable
    delay_ms: int


@frozen_dataclass
class CancelTimer:
    key: Hashable


@frozen_dataclass
class Halt:
    reason: str


Effect = Union[Send, SetTimer, CancelTimer, Halt]


class StateMachine:
    """Base for nodes: collect effects while handling an input, hand them over at the end."""

    node_id: NodeId

    def __init__(self, node_id: NodeId) -> None:
        self.node_id = node_id
        self._effects: list[Effect] = []
        self.now = 0  # the time of the input being handled, given by the runtime

    # -- what subclasses call
    def send(self, dst: NodeId, message: Any) -> None:
        self._effects.append(Send(dst, message))

    def set_timer(self, key: Hashable, delay_ms: int) -> None:
        if type(delay_ms) is not int or delay_ms < 0:  # (an int >= 0 is the common case)
            delay_ms = max(0, int(delay_ms))
        self._effects.append(SetTimer(key, delay_ms))

    def cancel_timer(self, key: Hashable) -> None:
        self._effects.append(CancelTimer(key))

    def halt(self, reason: str) -> None:
        """Stop this node's process for good (a restart starts it again from its disk)."""
        self._effects.append(Halt(reason))

    # -- what runtimes call
    def start(self, now: int) -> list[Effect]:
        self.now = now
        self.on_start()
        return self._take()

    def handle(self, now: int, src: NodeId, message: Any) -> list[Effect]:
        self.now = now
        self.on_message(src, message)
        return self._take()

    def timer(self, now: int, key: Hashable) -> list[Effect]:
        self.now = now
        self.on_timer(key)
        return self._take()

    def _take(self) -> list[Effect]:
        effects, self._effects = self._effects, []
        return effects

    # -- what subclasses implement
    def on_start(self) -> None:
        pass

    def on_message(self, src: NodeId, message: Any) -> None:
        raise NotImplementedError

    def on_timer(self, key: Hashable) -> None:
        pass
