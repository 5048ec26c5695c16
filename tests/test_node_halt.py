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

from test_wire_auth import metadata_frame


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
        if message == "go" or not isinstance(message, str):  # (over TCP: any request)
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


def test_over_tcp_a_halted_node_closes_its_connections_and_listener_and_serve_raises_node_halted():
    # A client is connected when the node halts (its request is what makes it halt): the
    # connection is closed at once, not left to the client's request timeout. (Python 3.12's
    # Server.wait_closed waits for every accepted connection: closed after it, they hung.)
    async def main():
        node = Halter(1)
        runtime = NodeRuntime(node, "127.0.0.1", 0, secret=auth.generate(),
                              context=lambda: {"brokers": {1: ("127.0.0.1", 9092)}, "cluster_id": "t", "broker_id": 1})
        await runtime.start()
        serving = asyncio.ensure_future(runtime.serve())
        reader, writer = await asyncio.open_connection("127.0.0.1", runtime.port)
        writer.write(metadata_frame(7))
        # (a deadlock guard only: the answer comes in milliseconds)
        assert await asyncio.wait_for(reader.read(), 20) == b""  # closed, nothing answered
        with pytest.raises(NodeHalted, match="the disk said no"):
            await asyncio.wait_for(serving, 20)
        assert runtime.halted == "the disk said no" and len(node.seen) == 1
        with pytest.raises(OSError):  # nobody listens any more
            await asyncio.open_connection("127.0.0.1", runtime.port)
        writer.close()

    asyncio.run(main())
