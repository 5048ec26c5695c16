"""The cluster secret and its handshake (``minikafka.wire.auth``), without processes; and the
runtime's listeners in one process: what a client listener refuses, what an inter-node
listener admits, how a connection that holds too much stops being read."""

from __future__ import annotations

import asyncio
import os
import stat
import struct

import pytest

from minikafka.errors import IllegalArgumentError
from minikafka.messages import BrokerHeartbeatRequest, MetadataResponse
from minikafka.node import StateMachine
from minikafka.wire import auth, codec
from minikafka.wire.runtime import CLIENT_LISTENER, INTER_NODE_LISTENER, NodeRuntime


def test_the_secret_file_is_its_owners_alone_and_reads_back(tmp_path):
    secret = auth.generate()
    path = tmp_path / auth.SECRET_FILE
    path.write_text("old")
    os.chmod(path, 0o644)  # an older file of a laxer mode: the mode is set again
    assert auth.save(secret, tmp_path) == path
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert auth.load(path) == secret


@pytest.mark.parametrize("text,why", [("not hex", "is not hex"), ("abcd", "at least 16 are needed")])
def test_a_bad_secret_is_refused_saying_why(tmp_path, text, why):
    path = tmp_path / "s"
    path.write_text(text)
    with pytest.raises(IllegalArgumentError, match=why):
        auth.load(path)


def test_the_answer_proves_the_secret_for_this_nonce_only():
    secret, nonce = auth.generate(), auth.challenge()
    answer = auth.answer(secret, nonce)
    assert auth.verify(secret, nonce, answer)
    assert not auth.verify(auth.generate(), nonce, answer)  # another secret
    assert not auth.verify(secret, auth.challenge(), answer)  # a replayed answer
    assert secret.hex() not in answer.hex()


# --- the runtime's listeners, in one process -----------------------------------------------------------------


class Recorder(StateMachine):
    """Records what it is handed; answers Metadata only when told to."""

    def __init__(self) -> None:
        super().__init__(1)
        self.seen: list = []

    def start(self, now):
        return self._take()

    def handle(self, now, src, message):
        self.seen.append((src, message))
        return self._take()

    def timer(self, now, key):
        return self._take()


def metadata_frame(corr: int) -> bytes:
    from kafka.protocol.metadata import MetadataRequest as K
    from kafka.protocol.parser import KafkaProtocol

    parser = KafkaProtocol(client_id="t")
    request = K(topics=[], allow_auto_topic_creation=False)
    request.API_VERSION = 4
    parser.send_request(request, correlation_id=corr)
    return bytes(parser.send_bytes())


async def until(predicate, what: str, timeout_s: float = 10.0):
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.01)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_a_client_listener_closes_on_a_private_frame_before_the_node_sees_it():
    async def main():
        node = Recorder()
        runtime = NodeRuntime(node, "127.0.0.1", 0, secret=auth.generate(), listener=CLIENT_LISTENER)
        await runtime.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", runtime.port)
            writer.write(codec.encode_internal(BrokerHeartbeatRequest(1, 2, 3, 4), sender=3000))
            assert await reader.read() == b""  # closed, nothing answered
            assert node.seen == [] and runtime.stats["refused"] == 1
        finally:
            await runtime.close()

    run(main())


def test_an_inter_node_listener_delivers_only_after_the_handshake():
    async def main():
        node, secret = Recorder(), auth.generate()
        runtime = NodeRuntime(node, "127.0.0.1", 0, secret=secret, listener=INTER_NODE_LISTENER)
        await runtime.start()
        try:
            for key, delivered in ((auth.generate(), False), (secret, True)):
                reader, writer = await asyncio.open_connection("127.0.0.1", runtime.port)
                nonce = await reader.readexactly(auth.NONCE_BYTES)
                writer.write(auth.answer(key, nonce))
                writer.write(codec.encode_internal(BrokerHeartbeatRequest(1, 2, 3, 4), sender=2))
                if delivered:
                    await until(lambda: node.seen, "the heartbeat")
                    assert node.seen == [(2, BrokerHeartbeatRequest(1, 2, 3, 4))]
                else:
                    assert await reader.read() == b""
                    assert node.seen == [] and runtime.stats["failed_handshakes"] == 1
                writer.close()
        finally:
            await runtime.close()

    run(main())


def test_a_client_connection_is_read_one_request_at_a_time():
    # Kafka mutes a channel from a request until its answer is sent: a pipelining client
    # waits in its socket, and cannot have the broker work for it alone.
    async def main():
        node = Recorder()
        runtime = NodeRuntime(node, "127.0.0.1", 0, secret=auth.generate(),
                              context=lambda: {"brokers": {1: ("127.0.0.1", 9092)}, "cluster_id": "t", "broker_id": 1})
        await runtime.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", runtime.port)
            for corr in (1, 2, 3):
                writer.write(metadata_frame(corr))
            await until(lambda: len(node.seen) == 1, "the first request")
            await until(lambda: runtime.stats["muted"] >= 1, "the connection muted")
            assert [m.correlation_id for _, m in node.seen] == [1]  # the others wait in the socket
            src, first = node.seen[0]
            runtime._route(src, MetadataResponse(first.correlation_id, (1,), 1, ()))  # as the node would
            await until(lambda: len(node.seen) == 2, "the second request, once the first is answered")
            assert [m.correlation_id for _, m in node.seen] == [1, 2]
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            assert struct.unpack(">i", (await reader.readexactly(size))[:4])[0] == 1
            writer.close()
        finally:
            await runtime.close()

    run(main())


def test_an_inter_node_connection_with_queued_max_requests_unanswered_is_not_read_until_one_is_answered():
    async def main():
        node, secret = Recorder(), auth.generate()
        runtime = NodeRuntime(node, "127.0.0.1", 0, secret=secret, listener=INTER_NODE_LISTENER, queued_max_requests=2,
                              context=lambda: {"brokers": {1: ("127.0.0.1", 9092)}, "cluster_id": "t", "broker_id": 1})
        await runtime.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", runtime.port)
            writer.write(auth.answer(secret, await reader.readexactly(auth.NONCE_BYTES)))
            for corr in (1, 2, 3):
                writer.write(metadata_frame(corr))
            await until(lambda: len(node.seen) == 2, "two requests")
            await until(lambda: runtime.stats["muted"] >= 1, "the connection muted")
            assert [m.correlation_id for _, m in node.seen] == [1, 2]  # the third waits in the socket
            src, first = node.seen[0]
            runtime._route(src, MetadataResponse(first.correlation_id, (1,), 1, ()))  # as the node would
            await until(lambda: len(node.seen) == 3, "the third request, once the first is answered")
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            assert struct.unpack(">i", (await reader.readexactly(size))[:4])[0] == 1
            writer.close()
        finally:
            await runtime.close()

    run(main())


def large_frames(corr: int) -> dict[str, bytes]:
    """A Metadata request naming 6,000 topics and a Produce request of one 77 KB batch: both
    over LARGE_FRAME_BYTES."""
    from kafka.protocol.metadata import MetadataRequest as K
    from kafka.protocol.parser import KafkaProtocol

    parser = KafkaProtocol(client_id="t")
    request = K(topics=[f"topic-{i:05d}" for i in range(6000)], allow_auto_topic_creation=False)
    request.API_VERSION = 4
    parser.send_request(request, correlation_id=corr)
    return {"metadata": bytes(parser.send_bytes()), "produce": produce_frame(corr + 1, 700)}


def produce_frame(corr: int, records: int) -> bytes:
    """A Produce request (v3, acks=1) of one batch of ``records`` records of 100 bytes."""
    from minikafka.records import Record, RecordBatch

    batch = bytes(RecordBatch.build([Record(None, bytes(100), 1_700_000_000_000) for _ in range(records)]))
    body = (struct.pack(">hhih", 0, 3, corr, 1) + b"t" + struct.pack(">hhi", -1, 1, 30_000)
            + struct.pack(">ih", 1, 1) + b"p" + struct.pack(">iii", 1, 0, len(batch)) + batch)
    return struct.pack(">i", len(body)) + body


def test_a_large_metadata_request_is_decoded_off_the_loop_and_a_large_produce_on_it():
    # Decoding 6,000 topic structs would hold every other connection; a Produce request decodes
    # to one slice of record bytes, cheaper than the thread hand-offs (see "Large requests").
    from minikafka.wire.runtime import LARGE_FRAME_BYTES

    async def main():
        node = Recorder()
        runtime = NodeRuntime(node, "127.0.0.1", 0, secret=auth.generate(),
                              context=lambda: {"brokers": {1: ("127.0.0.1", 9092)}, "cluster_id": "t", "broker_id": 1})
        await runtime.start()
        try:
            frames = large_frames(1)
            assert all(len(f) - 4 >= LARGE_FRAME_BYTES for f in frames.values())
            _, writer = await asyncio.open_connection("127.0.0.1", runtime.port)
            writer.write(frames["produce"])
            await until(lambda: len(node.seen) == 1, "the Produce request")
            assert runtime.stats["decoded_in_thread"] == 0
            _, second = await asyncio.open_connection("127.0.0.1", runtime.port)  # the first waits for its answer
            second.write(frames["metadata"])
            await until(lambda: len(node.seen) == 2, "the Metadata request")
            assert runtime.stats["decoded_in_thread"] == 1
            produce, metadata = (m for _, m in node.seen)
            assert type(produce).__name__ == "ProduceRequest" and produce.correlation_id == 2
            assert type(metadata).__name__ == "MetadataRequest" and len(metadata.topics) == 6000
            writer.close()
            second.close()
        finally:
            await runtime.close()

    run(main())


def test_large_frames_being_read_share_one_pool_and_ordinary_requests_never_wait_for_it():
    # 40 connections each sending 90 MB of a 100 MB frame held 4.3 GB of one broker: the
    # limit was per connection. Now large frames are read only with room in one pool.
    from minikafka.wire.runtime import POOLED_FRAME_BYTES, READ_POOL_FRAMES

    mib = 1024 * 1024
    assert POOLED_FRAME_BYTES <= mib and READ_POOL_FRAMES == 4

    async def main():
        node = Recorder()
        runtime = NodeRuntime(node, "127.0.0.1", 0, secret=auth.generate(), max_request_bytes=4 * mib,
                              context=lambda: {"brokers": {1: ("127.0.0.1", 9092)}, "cluster_id": "t", "broker_id": 1})
        assert runtime.read_pool_bytes == 16 * mib  # four of the largest requests
        await runtime.start()
        try:
            stuck = []
            for _ in range(5):  # five frames of 3 MiB, each 2 MiB short: 15 MiB set aside
                reader, writer = await asyncio.open_connection("127.0.0.1", runtime.port)
                writer.write(struct.pack(">i", 3 * mib) + bytes(2 * mib))
                stuck.append(writer)
            await until(lambda: runtime._pool_free == mib, "five large frames being read")
            whole = produce_frame(6, 3 * mib // 120)  # a whole 3 MiB request: no room for it
            assert 2 * mib < len(whole) - 4 <= 3 * mib
            _, big = await asyncio.open_connection("127.0.0.1", runtime.port)
            big.write(whole)
            await until(lambda: runtime.stats["waited_for_memory"] >= 1, "the whole frame waiting for room")
            _, small = await asyncio.open_connection("127.0.0.1", runtime.port)
            small.write(metadata_frame(7))  # an ordinary request is served meanwhile
            await until(lambda: len(node.seen) == 1, "the small request")
            assert type(node.seen[0][1]).__name__ == "MetadataRequest" and runtime._pool_free == mib
            stuck[0].close()  # one sender gives up: its share goes back to the pool
            await until(lambda: len(node.seen) == 2, "the whole frame, read once there was room")
            produce = node.seen[1][1]
            assert type(produce).__name__ == "ProduceRequest" and produce.correlation_id == 6
            await until(lambda: runtime._pool_free == 4 * mib, "the pool, once that frame is read")
            for writer in (*stuck, big, small):
                writer.close()
        finally:
            await runtime.close()

    run(main())


class FileServer(StateMachine):
    """Answers a consumer's Fetch with records left in a log's file, as a broker on the wire
    does; ``cut`` truncates the log right after the answer is made, before it is sent."""

    def __init__(self, log) -> None:
        super().__init__(1)
        self.log = log
        self.cut: int | None = None

    def start(self, now):
        return self._take()

    def handle(self, now, src, message):
        from minikafka.messages import FetchPartitionResponse, FetchResponse

        fp = message.partitions[0]
        records = self.log.read_file_records(fp.fetch_offset, fp.partition_max_bytes)
        if self.cut is not None:
            self.log.truncate_to(self.cut)
        self.send(src, FetchResponse(message.correlation_id, (
            FetchPartitionResponse(fp.topic, fp.partition, 0, self.log.log_end_offset, 0, records),)))
        return self._take()

    def timer(self, now, key):
        return self._take()


def test_records_left_in_their_file_are_sent_by_sendfile_and_a_cut_file_closes_the_connection(tmp_path):
    # 30 fetches of 55 MiB read into bytes held a broker's other clients for seconds and took
    # it to 1.7 GB: large record sets now go from the page cache to the socket unread.
    from minikafka.messages import FetchPartition, FetchRequest
    from minikafka.records import Record, RecordBatch
    from minikafka.storage import Log

    log = Log(tmp_path / "t-0", {}, clock=lambda: 0)
    for i in range(40):  # 40 batches of 100 KB: 4 MB
        log.append(RecordBatch.build([Record(b"k", bytes([i]) * 100_000, 1_000 + i)]))
    expected = bytes(log.read(0, 8 << 20))
    assert len(expected) > 4_000_000

    def fetch(corr, version):
        request = FetchRequest(corr, -1, 0, 0, (FetchPartition("t", 0, 0, partition_max_bytes=8 << 20),), 8 << 20)
        return codec.encode_request(request, version=version, client_id="t")

    async def main():
        node = FileServer(log)
        runtime = NodeRuntime(node, "127.0.0.1", 0, secret=auth.generate())
        await runtime.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", runtime.port)
            for corr, version in ((1, 11), (2, 12)):  # a client's and a follower's framing
                writer.write(fetch(corr, version))
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                answer = codec.decode_response(codec.FETCH, version, await reader.readexactly(size))
                assert answer.correlation_id == corr and bytes(answer.partitions[0].records) == expected
            assert runtime.stats["bytes_sent_from_files"] == 2 * len(expected)
            node.cut = 20  # the file loses the last 20 batches before the third answer is sent
            writer.write(fetch(3, 11))
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            assert size > len(expected)  # the frame promised all 40 batches ...
            with pytest.raises(asyncio.IncompleteReadError):  # ... and the connection closes short
                await reader.readexactly(size)
            assert log.log_end_offset == 20
            writer.close()
        finally:
            await runtime.close()

    run(main())


def test_a_runtime_without_the_secret_is_refused():
    with pytest.raises(IllegalArgumentError, match="cluster secret"):
        NodeRuntime(Recorder(), "127.0.0.1", 0)
