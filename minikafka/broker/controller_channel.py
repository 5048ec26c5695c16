"""A broker's requests to the active controller: Kafka's ``NodeToControllerChannelManager``.

Theory of operation
-------------------
A broker does not know for sure which controller is active: the Raft layer tells it the
leader it last heard of, and that one may have died a moment ago. So every request meant
for the controller (a heartbeat, a CreateTopics forwarded for a client, a block of
producer ids) goes through this channel, which sends it to the best guess and, when the
answer is ``NOT_CONTROLLER`` or the connection is refused, sends it again (after
``controller.quorum.retry.backoff.ms``) to the leader the Raft layer names then, or to the
next voter when it names none. Until ``timeout_ms`` runs out: then the caller's
``on_timeout`` runs once and a late answer is dropped.

A refusal is news about one epoch only. When the Raft layer names a new leader
(``leader_changed``, as Kafka's ``BrokerLifecycleManager`` and channel follow the quorum's
leader), every earlier refusal is forgotten (the voter that said NOT_CONTROLLER before the
election may be the leader now) and each request still out to another node is sent again to
the new leader at once: the old one may be paused, or gone, and would never answer (a
heartbeat lost that way costs the broker its session).

Some requests must not be given up on: an AlterPartition may be committed by the controller
after its sender stopped waiting, so the leader has to hear how it ended. Sent with
``timeout_ms=None`` and an ``attempt_timeout_ms``, a request is sent again (to the controller
active then) whenever an attempt goes unanswered that long, and never times out; only its
caller can ``cancel`` it (Kafka's channel for AlterPartition retries the same way, with
``retryTimeoutMs`` = forever).

Each request keeps its correlation id across retries, so whatever answer comes back is
matched to it, the first one delivered; an answer to a request already answered, timed out
or cancelled is dropped.

Never: answer a caller twice, or retry a request whose answer has been delivered.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from minikafka.messages import NOT_CONTROLLER


@dataclass
class _Pending:
    make: Callable[[int], Any]  # correlation id -> the request
    on_response: Callable[[Any], None]
    on_timeout: Callable[[], None] | None
    attempt_timeout_ms: int | None = None  # send again when an attempt is unanswered this long
    sent_to: int | None = None


def response_error(response: Any) -> int:
    """The error a controller's answer carries (for CreateTopics/DeleteTopics: the one every
    topic got, if they all got the same)."""
    error = getattr(response, "error", None)
    if error is not None:
        return error
    results = getattr(response, "results", None)
    if results:
        errors = {r[1] for r in results}
        if len(errors) == 1:
            return errors.pop()
    return 0


class NodeToControllerChannelManager:
    def __init__(self, node, controllers: Sequence[int], leader: Callable[[], int | None], *,
                 retry_backoff_ms: int = 50, first_correlation: int = 1_000_000) -> None:
        self.node = node
        self.controllers = tuple(controllers)
        self.leader = leader  # the Raft layer's current belief, or None
        self.retry_backoff_ms = max(1, retry_backoff_ms)
        self._pending: dict[int, _Pending] = {}
        self._correlation = itertools.count(first_correlation)
        self._rotation = 0
        self._refused: set[int] = set()  # controllers that refused lately (cleared on any answer)

    def target(self) -> int:
        """Where a request to the controller goes now."""
        leader = self.leader()
        if leader is not None and leader not in self._refused:
            return leader
        for _ in range(len(self.controllers)):
            candidate = self.controllers[self._rotation % len(self.controllers)]
            self._rotation += 1
            if candidate not in self._refused or len(self._refused) >= len(self.controllers):
                return candidate
        return self.controllers[0]

    def send(self, make: Callable[[int], Any], on_response: Callable[[Any], None], *,
             timeout_ms: int | None, on_timeout: Callable[[], None] | None = None,
             attempt_timeout_ms: int | None = None) -> int:
        """Send ``make(corr)`` to the active controller; ``on_response`` gets the answer. Its
        correlation id, which ``cancel`` takes. ``timeout_ms=None``: never give up (then an
        ``attempt_timeout_ms`` is needed, or a lost request would wait forever)."""
        if timeout_ms is None and attempt_timeout_ms is None:
            raise ValueError("a request without timeout_ms needs attempt_timeout_ms: "
                             "it would wait forever for an answer that was lost")
        corr = next(self._correlation)
        self._pending[corr] = _Pending(make, on_response, on_timeout, attempt_timeout_ms)
        if timeout_ms is not None:
            self.node.set_timer(("controller-timeout", corr), timeout_ms)
        self._attempt(corr)
        return corr

    def cancel(self, corr: int) -> None:
        """The caller no longer wants an answer (nor retries): a late one is dropped."""
        pending = self._pending.pop(corr, None)
        if pending is not None:
            self.node.cancel_timer(("controller-retry", corr))
            self.node.cancel_timer(("controller-timeout", corr))
            if pending.attempt_timeout_ms is not None:
                self.node.cancel_timer(("controller-attempt", corr))

    def _attempt(self, corr: int) -> None:
        pending = self._pending.get(corr)
        if pending is None:
            return
        pending.sent_to = self.target()
        self.node.send(pending.sent_to, pending.make(corr))
        if pending.attempt_timeout_ms is not None:
            self.node.set_timer(("controller-attempt", corr), pending.attempt_timeout_ms)

    def _retry_later(self, corr: int, pending: _Pending) -> None:
        self.node.set_timer(("controller-retry", corr), self.retry_backoff_ms)
        if pending.attempt_timeout_ms is not None:
            self.node.cancel_timer(("controller-attempt", corr))  # the retry sends it, and sets it again

    def pending_count(self) -> int:
        return len(self._pending)

    # --- what the broker routes here -------------------------------------------------------------------

    def handle_response(self, src: Any, response: Any) -> bool:
        """True if ``response`` answers one of the channel's requests (delivered or retried).
        Only a controller answers them: a client's or a follower's request whose correlation
        id happens to equal a pending one's is not an answer (and most messages a broker
        gets are those, so they are let through first)."""
        if src not in self.controllers:
            return False
        corr = getattr(response, "correlation_id", None)
        pending = self._pending.get(corr)
        if pending is None:
            return False
        if response_error(response) == NOT_CONTROLLER:
            self._refused.add(src)
            self._retry_later(corr, pending)
            return True
        self._refused.discard(src)
        del self._pending[corr]
        self.node.cancel_timer(("controller-timeout", corr))
        if pending.attempt_timeout_ms is not None:
            self.node.cancel_timer(("controller-attempt", corr))
        pending.on_response(response)
        return True

    def leader_changed(self, leader: int | None) -> None:
        """The Raft layer names a new leader (or none): refusals from before are void, and what
        was sent to someone else goes to the new leader now (same correlation id: whichever
        answer comes first is the one delivered)."""
        self._refused.clear()
        if leader is None or leader not in self.controllers:
            return
        for corr, pending in list(self._pending.items()):
            if pending.sent_to is not None and pending.sent_to != leader:
                self.node.cancel_timer(("controller-retry", corr))
                self._attempt(corr)

    def disconnected(self, node: Any) -> None:
        """A controller refused the connection or died: what was sent to it goes elsewhere."""
        if node not in self.controllers:
            return
        self._refused.add(node)
        for corr, pending in list(self._pending.items()):
            if pending.sent_to == node:
                pending.sent_to = None
                self._retry_later(corr, pending)

    def on_timer(self, key: Any) -> bool:
        if not (isinstance(key, tuple) and key
                and key[0] in ("controller-retry", "controller-timeout", "controller-attempt")):
            return False
        corr = key[1]
        if key[0] == "controller-retry":
            if len(self._refused) >= len(self.controllers):
                self._refused.clear()  # everyone refused once: start over
            self._attempt(corr)
        elif key[0] == "controller-attempt":
            self._attempt(corr)  # no answer in time: send it again, to whoever is active now
        else:
            pending = self._pending.pop(corr, None)
            self.node.cancel_timer(("controller-retry", corr))
            if pending is not None and pending.attempt_timeout_ms is not None:
                self.node.cancel_timer(("controller-attempt", corr))
            if pending is not None and pending.on_timeout is not None:
                pending.on_timeout()
        return True
