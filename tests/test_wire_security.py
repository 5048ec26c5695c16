"""Issue 13: what a local client must not be able to do to a real-process cluster.

Each test is a reproducer of an attack that worked against ``launch()`` before the
inter-node listeners (it fails on that code) and now proves the defence:

- the controller's private messages (heartbeats, registrations, the Raft quorum's) sent by a
  client: to a broker's client listener they close the connection; to a controller, which
  has only the controller listener, they fail the cluster-secret handshake; nothing is
  delivered, and the metadata log shows no trace of them;
- a Fetch posing as a follower (replica_id >= 0) on a client listener is refused, so it
  cannot move a high watermark past what the real followers have;
- an inter-node listener admits only a peer that proves it knows the cluster secret, which
  is in a 0600 file and never on a command line;
- limits with Kafka's names: ``max.request.partition.size.limit`` for CreateTopics and
  CreatePartitions, ``fetch.max.bytes`` clamping a consumer's ``max_bytes``.

"Nothing changed" is checked after a later metadata change has committed and reached the
broker (a forged record would have been ordered before it), never after a guessed sleep.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import stat
import struct
import time
import uuid

import pytest

pytest.importorskip("kafka")

import kafka.errors as Errors  # noqa: E402
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition  # noqa: E402
from kafka.admin import NewPartitions, NewTopic  # noqa: E402
from kafka.protocol.consumer import FetchRequest  # noqa: E402

from minikafka import messages as m  # noqa: E402
from minikafka.raft import messages as raft  # noqa: E402
from minikafka.tools.metadata_quorum import describe_quorum  # noqa: E402
from minikafka.wire import auth, codec  # noqa: E402
from minikafka.wire.admin_probe import live_endpoints  # noqa: E402
from minikafka.wire.process import launch  # noqa: E402

from wire_helpers import (  # noqa: E402
    RawConnection,
    batch,
    frame,
    leader_of,
    metadata_request,
    produce_request,
    tolerant,
    wait_until,
)

# A follower that stops fetching stays in the ISR for replica.lag.time.max.ms: long enough
# that no test here sees an ISR shrink move a high watermark.
CONFIG = {"replica.lag.time.max.ms": 120_000, "broker.session.timeout.ms": 120_000,
          "fetch.max.bytes": 65536}  # small, so that a test can fill a log past it quickly


@pytest.fixture(scope="module")
def cluster():
    with launch(brokers=3, config=CONFIG) as c:
        yield c


@pytest.fixture(scope="module")
def admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    yield client
    client.close()


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def registered(cluster) -> dict:
    return {b: (cluster.host, cluster.ports[b]) for b in cluster.broker_ids}


def metadata_still_flows(cluster, admin, broker: int) -> None:
    """Commit a metadata change and wait until ``broker`` has applied it: anything a forged
    message had set in motion before it would be in the log before it."""
    topic = name("after")
    admin.create_topics([NewTopic(topic, 1, 1)])
    wait_until(lambda: topic in {t.name for t in tolerant(lambda: _metadata(cluster, broker, topic)) or []},
               30, f"broker {broker} to see {topic}")


def ready_leader(cluster, admin, topic: str) -> int:
    """The leader of partition 0, once the leader itself knows it leads (a describe answered by
    another broker may be ahead of it: a produce sent at once would be refused)."""
    def own_view():
        leader = tolerant(lambda: leader_of(admin, topic))
        if leader not in cluster.broker_ids:
            return None
        known = tolerant(lambda: _metadata(cluster, leader, topic)) or []
        return leader if any(p.leader_id == leader for t in known for p in t.partitions) else None

    return wait_until(own_view, 30, f"the leader of {topic} to know it leads")


def _metadata(cluster, broker: int, topic: str):
    with RawConnection((cluster.host, cluster.ports[broker])) as conn:
        response = conn.request(metadata_request(topic), 4)
    return [t for t in response.topics if t.error_code == 0]


def closed_without_delivering(sock: socket.socket, timeout_s: float = 10.0) -> bool:
    """True once the far end closed the connection; whatever it wrote first (a handshake
    nonce) is read and ignored. False if it is still open after ``timeout_s``."""
    sock.settimeout(timeout_s)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if not sock.recv(1 << 16):
                return True
    except ConnectionError:
        return True
    except socket.timeout:
        return False
    return False


def forged_heartbeat(broker: int) -> m.BrokerHeartbeatRequest:
    # A "restart" of ``broker`` at an address of the attacker's choosing: a newer incarnation
    # fences the real one and sends every client of its partitions elsewhere.
    return m.BrokerHeartbeatRequest(7, broker, incarnation=int(time.time() * 1000) + 10**9,
                                    metadata_offset=1 << 40, host="10.66.66.66", port=6666)


FORGERIES = {
    "heartbeat": lambda: forged_heartbeat(2),
    "begin-quorum-epoch": lambda: raft.BeginQuorumEpochRequest(7, leader_epoch=1000, leader_id=3001),
    "vote": lambda: raft.VoteRequest(7, candidate_epoch=1000, candidate_id=3001, last_offset_epoch=1000,
                                     last_offset=1 << 40),
}


# --- private frames from a client ------------------------------------------------------------------------


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_private_frame_on_a_broker_client_listener_closes_it_and_changes_nothing(cluster, admin, forgery):
    with RawConnection((cluster.host, cluster.ports[1])) as conn:
        conn.send_raw(codec.encode_internal(FORGERIES[forgery](), sender=3000))
        assert conn.closed_by_broker(), "the broker served a private frame from a client"
    reason = cluster.out_file(1).read_text()
    assert "inter-node traffic, refused on the client listener" in reason
    metadata_still_flows(cluster, admin, 1)
    assert live_endpoints(cluster.host, cluster.ports[1]) == registered(cluster)
    quorum = describe_quorum(cluster.bootstrap_servers)
    assert quorum.leader_epoch < 1000 and quorum.leader_id in cluster.controller_ids


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_private_frame_sent_straight_to_the_controllers_is_refused_before_delivery(cluster, admin, forgery):
    for controller in cluster.controller_ids:  # whichever is active
        with socket.create_connection((cluster.host, cluster.ports[controller]), timeout=10) as sock:
            sock.sendall(codec.encode_internal(FORGERIES[forgery](), sender=3001))
            assert closed_without_delivering(sock), f"controller {controller} kept a connection without the secret"
    metadata_still_flows(cluster, admin, 2)
    assert live_endpoints(cluster.host, cluster.ports[2]) == registered(cluster)
    quorum = describe_quorum(cluster.bootstrap_servers)
    assert quorum.leader_epoch < 1000 and quorum.leader_id in cluster.controller_ids


def test_a_client_posing_as_a_follower_cannot_move_the_high_watermark(cluster, admin):
    topic = name("hw")
    admin.create_topics([NewTopic(topic, 1, 2)])
    ready_leader(cluster, admin, topic)
    (described,) = admin.describe_topics([topic])
    (partition,) = described["partitions"]
    leader = partition["leader_id"]
    (follower,) = [r for r in partition["replica_nodes"] if r != leader]
    wait_until(lambda: sorted(admin.describe_topics([topic])[0]["partitions"][0]["isr_nodes"]) == sorted(
        partition["replica_nodes"]), 30, "both replicas in the ISR")
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=None)
    tp = TopicPartition(topic, 0)
    # The consumer learns the leader and connects to it while every broker answers: once the
    # follower is paused, a metadata request kafka-python happened to send it would wait out
    # the request timeout (a paused broker's port still accepts connections).
    assert consumer.end_offsets([tp])[tp] == 0
    cluster.pause(follower)  # it cannot fetch the record below: the high watermark must stay
    try:
        with RawConnection((cluster.host, cluster.ports[leader])) as conn:
            answer = conn.request(produce_request(topic, 0, batch(b"not yet replicated"), acks=1), 3)
            assert answer.responses[0].partition_responses[0].error_code == 0
        assert consumer.end_offsets([tp])[tp] == 0  # the high watermark: read_uncommitted
        T = FetchRequest.FetchTopic
        forged = FetchRequest(replica_id=follower, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                              session_id=0, session_epoch=-1, topics=[T(topic=topic, partitions=[T.FetchPartition(
                                  partition=0, current_leader_epoch=-1, fetch_offset=1, last_fetched_epoch=-1,
                                  log_start_offset=-1, partition_max_bytes=1 << 20)])],
                              forgotten_topics_data=[], rack_id="")
        with RawConnection((cluster.host, cluster.ports[leader])) as conn:
            conn.send(forged, 11)
            assert conn.closed_by_broker(), "the leader served a replica fetch from a client"
        assert consumer.end_offsets([tp])[tp] == 0
        assert f"from replica {follower} is inter-broker traffic" in cluster.out_file(leader).read_text()
    finally:
        cluster.resume(follower)
    wait_until(lambda: consumer.end_offsets([tp])[tp] == 1, 30, "the real follower to move the high watermark")
    consumer.close()


# --- the inter-node listeners and the cluster secret -----------------------------------------------------------


def handshake(sock: socket.socket, secret: bytes) -> None:
    sock.settimeout(10)
    nonce = b""
    while len(nonce) < auth.NONCE_BYTES:
        chunk = sock.recv(auth.NONCE_BYTES - len(nonce))
        assert chunk, "the listener closed before its challenge"
        nonce += chunk
    sock.sendall(hmac.new(secret, auth.CONTEXT + nonce, hashlib.sha256).digest())


def inter_node_addresses(cluster) -> list[tuple[str, int]]:
    return ([(cluster.host, cluster.inter_broker_ports[b]) for b in cluster.broker_ids]
            + [(cluster.host, cluster.ports[c]) for c in cluster.controller_ids])


def test_an_inter_node_listener_closes_a_connection_that_fails_the_secret_handshake(cluster, admin):
    for address in inter_node_addresses(cluster):
        with socket.create_connection(address, timeout=10) as sock:
            handshake(sock, b"a guess at the cluster secret")
            sock.sendall(codec.encode_internal(forged_heartbeat(3), sender=3000))
            assert closed_without_delivering(sock), f"{address} admitted a peer with a wrong secret"
    assert "failed the cluster-secret handshake" in cluster.out_file(1).read_text()
    metadata_still_flows(cluster, admin, 3)
    assert live_endpoints(cluster.host, cluster.ports[3]) == registered(cluster)


def test_the_inter_broker_listener_serves_a_peer_that_knows_the_secret(cluster):
    secret = auth.load(cluster.secret_file)
    with socket.create_connection((cluster.host, cluster.inter_broker_ports[1]), timeout=10) as sock:
        handshake(sock, secret)
        sock.sendall(frame(metadata_request(), 4, correlation_id=5))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        body = sock.recv(size, socket.MSG_WAITALL)
        assert struct.unpack(">i", body[:4])[0] == 5  # answered, as the followers' fetches are


def test_the_cluster_secret_is_in_a_private_file_and_on_no_command_line(cluster):
    secret_hex = cluster.secret_file.read_text().strip()
    assert len(bytes.fromhex(secret_hex)) >= 16
    assert stat.S_IMODE(os.stat(cluster.secret_file).st_mode) == 0o600
    for node in cluster.node_ids:
        with open(f"/proc/{cluster.pid(node)}/cmdline", "rb") as f:
            assert secret_hex.encode() not in f.read()


def test_a_broker_started_by_hand_without_the_secret_says_what_it_needs(tmp_path):
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != auth.SECRET_ENV}
    proc = subprocess.run([sys.executable, "-m", "minikafka.cli", "controller", "--node-id", "3000", "--port", "0",
                           "--log-dir", str(tmp_path), "--controller-quorum-voters", "3000@127.0.0.1:1"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2
    assert "--cluster-secret-file" in proc.stderr and "Traceback" not in proc.stderr


def test_a_restarted_broker_rejoins_through_the_inter_broker_listener(cluster, admin):
    topic = name("rejoin")
    admin.create_topics([NewTopic(topic, 1, 3)])
    wait_until(lambda: tolerant(lambda: leader_of(admin, topic)) in cluster.broker_ids, 30, "a leader")
    victim = next(b for b in cluster.broker_ids if b != leader_of(admin, topic))
    cluster.kill(victim)
    cluster.restart(victim)
    wait_until(lambda: sorted(tolerant(lambda: admin.describe_topics([topic])[0]["partitions"][0]["isr_nodes"]) or [])
               == cluster.broker_ids, 60, f"broker {victim} back in the ISR")


# --- limits ---------------------------------------------------------------------------------------------------


def test_create_topics_over_max_request_partition_size_limit_gets_policy_violation_and_creates_nothing(
        cluster, admin):
    big, small = name("big"), name("small")
    answer = admin.create_topics([NewTopic(big, 1_000_000, 1), NewTopic(small, 1, 1)], raise_errors=False)
    assert {t["name"]: t["error_code"] for t in answer["topics"]} == {big: 44, small: 44}  # POLICY_VIOLATION
    assert "Excessively large number of partitions" in answer["topics"][0]["error_message"]
    metadata_still_flows(cluster, admin, 1)
    assert not {big, small} & set(admin.list_topics())
    for broker in cluster.broker_ids:
        assert not any(p.name.startswith(big) for p in (cluster.dir / f"broker-{broker}").iterdir())


def test_create_partitions_over_the_limit_gets_policy_violation(cluster, admin):
    topic = name("grow")
    admin.create_topics([NewTopic(topic, 1, 1)])
    with pytest.raises(Errors.PolicyViolationError):
        admin.create_partitions({topic: NewPartitions(total_count=1 + 2001)})
    wait_until(lambda: topic in set(admin.list_topics()), 30, f"{topic} listed")
    assert len(admin.describe_topics([topic])[0]["partitions"]) == 1


def test_a_fetch_asking_for_2_gib_is_clamped_to_fetch_max_bytes(cluster, admin):
    topic = name("greedy")
    admin.create_topics([NewTopic(topic, 1, 1)])
    leader = ready_leader(cluster, admin, topic)
    with RawConnection((cluster.host, cluster.ports[leader])) as conn:
        for _ in range(40):  # 40 batches of ~4 KB: 160 KB, over the cluster's fetch.max.bytes of 64 KB
            answer = conn.request(produce_request(topic, 0, batch(os.urandom(4000)), acks=1), 3)
            assert answer.responses[0].partition_responses[0].error_code == 0
        T = FetchRequest.FetchTopic
        greedy = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=2**31 - 1, isolation_level=0,
                              session_id=0, session_epoch=-1, topics=[T(topic=topic, partitions=[T.FetchPartition(
                                  partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                  log_start_offset=-1, partition_max_bytes=2**31 - 1)])],
                              forgotten_topics_data=[], rack_id="")
        response = conn.request(greedy, 11)
    records = response.responses[0].partitions[0].records
    assert 4000 < len(records) <= 65536
