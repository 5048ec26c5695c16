"""The ``Halt`` effect: a node that cannot go on safely stops its process (Kafka's
``Exit.halt``), in both runtimes. What it asked before the halt happens, nothing after it,
and it handles nothing more until it is started again."""

from __future__ import annotations

import asyncio

import pytest

from minikafka.node import StateMachine
from minikafka.sim import World
from minikafka.wire import auth
from minikafka.wire.runtime import NodeHalted, NodeRuntime


class Halter(StateMachine):
    """Says "before", halts, then says "after" (which must never go out) on "go" or at start."""

    def __init__(self, node_id, *, at_start: bool = False) -> None:
        super().__init__(node_id)
        self.at_start = at_start
        self.seen: list = []

    def on_start(self) -> None:
        if self.at_start:
            self.set_timer("halt", 0)

    def on_timer(self, key) -> None:
        self.halt("the disk said no")

    def on_message(self, src, message) -> None:
        self.seen.append(message)
        if message == "go":
            self.send("peer", "before")
            self.halt("the disk said no")
            self.send("peer", "after")
            self.set_timer("never", 1)


class Peer(StateMachine):
    def __init__(self, node_id) -> None:
        super().__init__(node_id)
        self.seen: list = []

    def on_message(self, src, message) -> None:
        self.seen.append(message)


def test_in_the_simulation_a_halted_node_is_dead_and_what_it_asked_after_the_halt_never_happens():
    world = World(seed=1)
    peer = world.add("peer", lambda: Peer("peer"))
    node = world.add("n", lambda: Halter("n"))
    released = []
    world.on_halt = lambda node_id, reason: released.append((node_id, reason))
    world.deliver("peer", "n", "go")
    world.run_until(lambda: False, 100)
    assert peer.seen == ["before"]
    assert not world.alive("n") and world.halted == {"n": "the disk said no"}
    assert released == [("n", "the disk said no")]  # the owner released its files first
    world.deliver("peer", "n", "late")
    world.run_until(lambda: False, 100)
    assert node.seen == ["go"]  # nothing reaches a halted node
    restarted = world.restart("n")
    world.deliver("peer", "n", "again")
    world.run_until(lambda: False, 100)
    assert world.alive("n") and restarted.seen == ["again"]


def test_over_tcp_a_halted_node_closes_its_listener_and_serve_raises_node_halted():
    async def main():
        node = Halter(1, at_start=True)
        runtime = NodeRuntime(node, "127.0.0.1", 0, secret=auth.generate())
        await runtime.start()
        port = runtime.port
        with pytest.raises(NodeHalted, match="the disk said no"):
            await asyncio.wait_for(runtime.serve(), 30)
        assert runtime.halted == "the disk said no"
        with pytest.raises(OSError):  # nobody listens any more
            await asyncio.open_connection("127.0.0.1", port)

    asyncio.run(main())
