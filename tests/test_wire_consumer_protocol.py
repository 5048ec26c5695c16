"""KIP-848's consumer group protocol over TCP, with a client we did not write: confluent-kafka
(librdkafka) with ``group.protocol=consumer`` against ``minikafka.wire.process.launch()``.

The broker computes the assignment and hands it out in ConsumerGroupHeartbeat answers (topics by
id, so Metadata v10+ carries topic ids); two consumers share a topic's partitions; when one
leaves (closed) or dies (SIGKILL, fenced after group.consumer.session.timeout.ms) the other gets
its partitions and resumes at the committed offsets. Every wait is for a state (an assignment,
the records read), never a guessed sleep."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from minikafka.wire import codec
from minikafka.wire.process import launch

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka (librdkafka) comes with the dev extra")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

SESSION_MS = 3_000
CONFIG = {
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 2,
    "group.consumer.session.timeout.ms": SESSION_MS,
    "group.consumer.heartbeat.interval.ms": 300,
}
WAIT_S = 60  # an upper bound for a state to be reached, not a duration anything depends on


@pytest.fixture(scope="module")
def cluster():
    with launch(brokers=1, config=CONFIG) as c:
        yield c


def create_topic(cluster, name: str, partitions: int = 4) -> str:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(WAIT_S)
    return name


def produce(cluster, topic: str, values: list[bytes]) -> None:
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i, v in enumerate(values):
        p.produce(topic, key=b"k%d" % i, value=v)
    assert p.flush(WAIT_S) == 0


def new_consumer(cluster, group: str, **extra):
    return ck.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                        "group.protocol": "consumer", "auto.offset.reset": "earliest",
                        "enable.auto.commit": False, **extra})


def poll_until(consumers, done, what: str, read: list | None = None):
    """Poll every consumer (that is how librdkafka moves) until ``done()``; records go to ``read``."""
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        for c in consumers:
            msg = c.poll(0.1)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            if read is not None:
                read.append((msg.partition(), msg.offset(), msg.value()))


def partitions(c) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def test_the_broker_advertises_consumer_group_heartbeat():
    assert codec.SUPPORTED[codec.CONSUMER_GROUP_HEARTBEAT] == (0, 1)
    assert codec.SUPPORTED[codec.METADATA][1] >= 12  # topics by id: the heartbeat names them so


def test_two_consumers_share_then_one_leaves_and_the_other_resumes_at_the_commits(cluster):
    topic, group = create_topic(cluster, "shared"), "g-shared"
    produce(cluster, topic, [b"a%d" % i for i in range(40)])
    c1, c2 = new_consumer(cluster, group), new_consumer(cluster, group)
    try:
        c1.subscribe([topic])
        poll_until([c1], lambda: partitions(c1) == {0, 1, 2, 3}, "c1 to own all four partitions")
        c2.subscribe([topic])
        read: list = []
        # The broker moves two partitions: revoked from c1 first, then given to c2.
        poll_until([c1, c2], lambda: len(partitions(c2)) == 2 and partitions(c1) == {0, 1, 2, 3} - partitions(c2),
                   "the partitions to be split two and two", read)
        poll_until([c1, c2], lambda: len({(p, o) for p, o, _ in read}) == 40, "all 40 records", read)
        c1.commit(asynchronous=False)
        c2.commit(asynchronous=False)
        c2.close()  # leaves the group (MemberEpoch -1): c1 gets its partitions back at once
        c2 = None
        poll_until([c1], lambda: partitions(c1) == {0, 1, 2, 3}, "c1 to get c2's partitions back")
        produce(cluster, topic, [b"b%d" % i for i in range(20)])
        after: list = []
        poll_until([c1], lambda: len(after) >= 20, "the 20 new records", after)
        # Nothing committed is read again: c1 starts c2's old partitions at c2's commits.
        assert sorted(v for _, _, v in after) == sorted(b"b%d" % i for i in range(20))
        committed = c1.committed([ck.TopicPartition(topic, p) for p in range(4)], timeout=WAIT_S)
        assert sum(tp.offset for tp in committed) == 40
    finally:
        for c in (c1, c2):
            if c is not None:
                c.close()


CHILD = textwrap.dedent("""
    import sys, confluent_kafka as ck
    bootstrap, group, topic = sys.argv[1:4]
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    seen = 0
    while True:  # read, commit what was read, say so; then wait to be killed
        msg = c.poll(0.1)
        if msg is not None and msg.error() is None:
            seen += 1
            c.commit(msg, asynchronous=False)
            print("committed", msg.partition(), msg.offset(), flush=True)
""")


def test_a_killed_consumer_is_fenced_and_the_other_resumes_at_its_commits(cluster):
    topic, group = create_topic(cluster, "killed"), "g-killed"
    produce(cluster, topic, [b"a%d" % i for i in range(40)])
    survivor = new_consumer(cluster, group)
    child = subprocess.Popen([sys.executable, "-c", CHILD, cluster.bootstrap_servers, group, topic],
                             stdout=subprocess.PIPE, text=True)
    try:
        # The child joins first and reads everything (it owns all four partitions then).
        committed_by_child: dict[int, int] = {}
        deadline = time.monotonic() + WAIT_S
        while sum(o + 1 for o in committed_by_child.values()) < 40:
            assert time.monotonic() < deadline, "the child did not commit all 40 records"
            line = child.stdout.readline()
            assert line, "the child consumer exited"
            _, p, o = line.split()
            committed_by_child[int(p)] = max(committed_by_child.get(int(p), -1), int(o))
        survivor.subscribe([topic])
        read: list = []
        poll_until([survivor], lambda: len(partitions(survivor)) == 2, "the survivor to get two partitions", read)
        os.kill(child.pid, signal.SIGKILL)  # no leave: the broker fences it after the session timeout
        child.wait()
        poll_until([survivor], lambda: partitions(survivor) == {0, 1, 2, 3},
                   "the dead member to be fenced and its partitions handed over", read)
        produce(cluster, topic, [b"b%d" % i for i in range(8)])
        poll_until([survivor], lambda: len(read) >= 8, "the 8 new records", read)
        assert sorted(v for _, _, v in read) == sorted(b"b%d" % i for i in range(8))  # nothing read twice
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        survivor.close()


# --- ConsumerGroupDescribe (api key 69) -----------------------------------------------------------------


def test_the_broker_advertises_consumer_group_describe():
    assert codec.SUPPORTED[codec.CONSUMER_GROUP_DESCRIBE] == (0, 1)


def test_clients_describe_a_consumer_group_with_its_target_assignment(cluster, capsys):
    """librdkafka's describe_consumer_groups sends ConsumerGroupDescribe first (only it carries the
    group type and each member's target assignment) and falls back to DescribeGroups for a classic
    group, which the broker answers GROUP_ID_NOT_FOUND; minikafka's own admin client and the
    consumer-groups tool ask it too."""
    from confluent_kafka import ConsumerGroupType

    from minikafka.cli import main
    from minikafka.clients.admin import KafkaAdminClient
    from minikafka.errors import GroupIdNotFoundError

    topic, group = create_topic(cluster, "described"), "g-described"
    c1, c2 = new_consumer(cluster, group), new_consumer(cluster, group)
    classic = ck.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "g-old",
                           "group.protocol": "classic", "auto.offset.reset": "earliest"})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    ours = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        c1.subscribe([topic])
        c2.subscribe([topic])
        classic.subscribe([topic])
        poll_until([c1, c2], lambda: len(partitions(c1)) == 2 and partitions(c1) | partitions(c2) == {0, 1, 2, 3},
                   "the partitions to be split two and two")
        poll_until([classic], lambda: len(partitions(classic)) == 4, "the classic consumer to own all four")
        # The broker reaches Stable once both members report what they own: wait for that state.
        deadline = time.monotonic() + WAIT_S
        while (d := ours.consumer_group_describe([group])[0]).state != "Stable":
            assert time.monotonic() < deadline, f"gave up waiting for {group} to be Stable: {d}"
            for c in (c1, c2):
                c.poll(0.1)

        # minikafka's admin client over TCP: the epochs, and each member at the target.
        assert (d.group_id, d.assignor, d.group_epoch, d.assignment_epoch) == (group, "uniform", 2, 2)
        assert sorted(m.member_epoch for m in d.members) == [2, 2]
        assert all(m.assignment == m.target_assignment and len(m.assignment) == 2 for m in d.members)
        with pytest.raises(GroupIdNotFoundError, match="Group g-old is not a consumer group"):
            ours.consumer_group_describe(["g-old"])

        # librdkafka: type CONSUMER and a target assignment only ConsumerGroupDescribe carries.
        described = {g: f.result(WAIT_S) for g, f in admin.describe_consumer_groups([group, "g-old"]).items()}
        new, old = described[group], described["g-old"]
        assert (new.type, new.partition_assignor, str(new.state.name)) == (ConsumerGroupType.CONSUMER, "uniform",
                                                                           "STABLE")
        for m in new.members:
            assert m.target_assignment is not None
            assert {tp.partition for tp in m.assignment.topic_partitions} == \
                {tp.partition for tp in m.target_assignment.topic_partitions}
        assert sorted(tp.partition for m in new.members for tp in m.assignment.topic_partitions) == [0, 1, 2, 3]
        # ... and the classic group through DescribeGroups after the broker's GROUP_ID_NOT_FOUND.
        assert old.type == ConsumerGroupType.CLASSIC and len(old.members) == 1

        # kafka-consumer-groups --describe --members --verbose / --state --verbose (Kafka 4's columns).
        capsys.readouterr()
        assert main(["consumer-groups", "--bootstrap-server", cluster.bootstrap_servers, "--describe",
                     "--group", group, "--members", "--verbose"]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        assert lines[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
                                    "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        for row in lines[1:]:
            cells = row.split()
            assert cells[0] == group and cells[4] == "2" and (cells[5], cells[7]) == ("2", "2")
            assert cells[6] == cells[8] and cells[6].startswith("described(")
        assert main(["consumer-groups", "--bootstrap-server", cluster.bootstrap_servers, "--describe",
                     "--group", group, "--state", "--verbose"]) == 0
        header, row = capsys.readouterr().out.strip().splitlines()
        assert header.split()[-3:] == ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
        assert row.split()[-5:] == ["uniform", "Stable", "2", "2", "2"]
    finally:
        ours.close()
        for c in (c1, c2, classic):
            c.close()
