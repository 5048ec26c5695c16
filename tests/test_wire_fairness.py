"""One client's flood must not stall everyone (issue 37): the runtime reads a client connection
one request at a time and serves ready connections in turns, and enforces Kafka's connection
quotas (``max.connections``, ``max.connections.per.ip``). In one process, counted, never timed."""

from __future__ import annotations

import asyncio
import struct

import pytest

from minikafka.errors import IllegalArgumentError
from minikafka.messages import MetadataResponse
from minikafka.node import StateMachine
from minikafka.wire import auth
from minikafka.wire.process import split_config
from minikafka.wire.runtime import NodeRuntime
from tests.test_wire_auth import metadata_frame, run, until

CONTEXT = {"brokers": {1: ("127.0.0.1", 9092)}, "cluster_id": "t", "broker_id": 1}


class Answerer(StateMachine):
    """Answers every Metadata request at once, recording (connection, correlation id) in the
    order it handled them."""

    def __init__(self) -> None:
        super().__init__(1)
        self.handled: list[tuple[str, int]] = []

    def start(self, now):
        return self._take()

    def handle(self, now, src, message):
        self.handled.append((src, message.correlation_id))
        self.send(src, MetadataResponse(message.correlation_id, (1,), 1, ()))
        return self._take()

    def timer(self, now, key):
        return self._take()


async def read_answers(reader: asyncio.StreamReader, n: int) -> list[int]:
    corrs = []
    for _ in range(n):
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        corrs.append(struct.unpack(">i", (await reader.readexactly(size))[:4])[0])
    return corrs


async def closed_by_the_broker(reader: asyncio.StreamReader) -> bool:
    """End of stream, or a reset (the broker closed with our request unread)."""
    try:
        return await reader.read() == b""
    except ConnectionResetError:
        return True


def runtime_for(node, **kw) -> NodeRuntime:
    return NodeRuntime(node, "127.0.0.1", 0, secret=auth.generate(), context=lambda: CONTEXT, **kw)


def test_a_pipelining_connection_is_answered_in_order_and_a_second_is_served_in_between():
    async def main():
        node = Answerer()
        runtime = runtime_for(node)
        await runtime.start()
        try:
            r1, w1 = await asyncio.open_connection("127.0.0.1", runtime.port)
            r2, w2 = await asyncio.open_connection("127.0.0.1", runtime.port)
            await until(lambda: runtime.stats["connections"] == 2, "both connections")
            answers = asyncio.create_task(read_answers(r1, 1000))
            w1.write(b"".join(metadata_frame(corr) for corr in range(1, 1001)))  # one write: all in its buffer
            for _ in range(100_000):  # loop turns, not time: a timed wait lets the first run on
                if node.handled:
                    break
                await asyncio.sleep(0)
            assert node.handled, "the first connection's first request"
            w2.write(metadata_frame(5000))
            assert await read_answers(r2, 1) == [5000]
            assert await answers == list(range(1, 1001))  # every answer, in the order asked
            order = [corr for _, corr in node.handled]
            # Before: the first connection's whole buffer was served before the second was read.
            assert order.index(5000) < order.index(100), order[:120]
            w1.close()
            w2.close()
        finally:
            await runtime.close()

    run(main())


def test_max_connections_per_ip_closes_the_connection_over_the_limit_at_once():
    async def main():
        node = Answerer()
        runtime = runtime_for(node, max_connections_per_ip=2)
        await runtime.start()
        try:
            kept = [await asyncio.open_connection("127.0.0.1", runtime.port) for _ in range(2)]
            r3, w3 = await asyncio.open_connection("127.0.0.1", runtime.port)
            w3.write(metadata_frame(3))
            assert await closed_by_the_broker(r3)  # closed, nothing answered
            assert runtime.stats["rejected_connections"] == 1 and node.handled == []
            for corr, (r, w) in enumerate(kept, 1):  # the two within the limit are served
                w.write(metadata_frame(corr))
                assert await read_answers(r, 1) == [corr]
            kept[0][1].close()  # one goes: a new one from the address is admitted
            await until(lambda: runtime._per_ip.get("127.0.0.1") == 1, "the closed connection uncounted")
            r4, w4 = await asyncio.open_connection("127.0.0.1", runtime.port)
            w4.write(metadata_frame(4))
            assert await read_answers(r4, 1) == [4]
            for w in (kept[1][1], w3, w4):
                w.close()
        finally:
            await runtime.close()

    run(main())


def test_max_connections_per_ip_overrides_name_an_address_of_its_own():
    async def main():
        runtime = runtime_for(Answerer(), max_connections_per_ip=0, max_connections_per_ip_overrides={"127.0.0.1": 1})
        await runtime.start()
        try:
            r1, w1 = await asyncio.open_connection("127.0.0.1", runtime.port)
            w1.write(metadata_frame(1))
            assert await read_answers(r1, 1) == [1]
            r2, w2 = await asyncio.open_connection("127.0.0.1", runtime.port)
            assert await closed_by_the_broker(r2)
            w1.close()
            w2.close()
        finally:
            await runtime.close()

    run(main())


def test_max_connections_holds_the_connection_over_the_limit_unread_until_one_closes():
    async def main():
        node = Answerer()
        runtime = runtime_for(node, max_connections=2)
        await runtime.start()
        try:
            kept = [await asyncio.open_connection("127.0.0.1", runtime.port) for _ in range(2)]
            r3, w3 = await asyncio.open_connection("127.0.0.1", runtime.port)
            w3.write(metadata_frame(3))
            await until(lambda: runtime.stats["waited_for_slot"] == 1, "the third waiting for a slot")
            for corr, (r, w) in enumerate(kept, 1):  # served meanwhile; the third is not
                w.write(metadata_frame(corr))
                assert await read_answers(r, 1) == [corr]
            assert [corr for _, corr in node.handled] == [1, 2]
            kept[0][1].close()  # a slot frees: the third is read and answered
            assert await read_answers(r3, 1) == [3]
            for w in (kept[1][1], w3):
                w.close()
        finally:
            await runtime.close()

    run(main())


def test_at_max_connections_a_brokers_connection_is_admitted_and_the_least_recently_used_client_closed():
    # Kafka protects the inter-broker listener: a follower can always reach its leader.
    async def main():
        secret = auth.generate()
        node = Answerer()
        runtime = NodeRuntime(node, "127.0.0.1", 0, secret=secret, context=lambda: CONTEXT, inter_node_port=0,
                              max_connections=2)
        await runtime.start()
        try:
            clients = [await asyncio.open_connection("127.0.0.1", runtime.port) for _ in range(2)]
            for corr, (r, w) in zip((1, 2), reversed(clients)):  # the second to connect, the first to ask:
                w.write(metadata_frame(corr))                      # the least recently used
                assert await read_answers(r, 1) == [corr]
            r, w = await asyncio.open_connection("127.0.0.1", runtime.inter_node_port)
            w.write(auth.answer(secret, await r.readexactly(auth.NONCE_BYTES)))
            w.write(metadata_frame(3))
            assert await read_answers(r, 1) == [3]  # the broker's connection is served
            assert await closed_by_the_broker(clients[1][0])  # the least recently used client went
            assert runtime.stats["closed_least_recently_used"] == 1
            clients[0][1].write(metadata_frame(4))  # the other is still served
            assert await read_answers(clients[0][0], 1) == [4]
            for _, writer in (*clients, (r, w)):
                writer.close()
        finally:
            await runtime.close()

    run(main())


@pytest.mark.parametrize("config,why", [
    ({"max.connections": "-1"}, "max.connections must be an integer >= 0, not '-1'"),
    ({"max.connections.per.ip": "many"}, "max.connections.per.ip must be an integer >= 0, not 'many'"),
    ({"max.connections.per.ip.overrides": "127.0.0.1"}, "expected HOST:COUNT .* not '127.0.0.1'"),
])
def test_bad_connection_quotas_are_refused_by_name(config, why):
    with pytest.raises(IllegalArgumentError, match=why):
        split_config(config)


def test_connection_quotas_reach_the_runtime_by_kafkas_names():
    _, server = split_config({"max.connections": 10, "max.connections.per.ip": "3",
                              "max.connections.per.ip.overrides": "127.0.0.1:5,localhost:6"})
    assert server["max_connections"] == 10 and server["max_connections_per_ip"] == 3
    assert server["max_connections_per_ip_overrides"] == {"127.0.0.1": 6}  # localhost is 127.0.0.1: the last wins
    _, default = split_config({})
    assert default["max_connections"] == default["max_connections_per_ip"] == 2**31 - 1  # Kafka's: no limit
