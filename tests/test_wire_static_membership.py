"""Static membership (KIP-345, ``group.instance.id``) over TCP, with clients we did not write:
confluent-kafka (librdkafka) and kafka-python against ``minikafka.wire.process.launch()``.

Classic protocol: two static consumers share a topic; one (a child process) is SIGKILLed and
started again with the same instance id within its session timeout: it gets its own partitions
back and the other member is never asked to rebalance (no revocation, no new generation: its
rebalance callbacks are not called, and ``__consumer_offsets`` holds the same generation).
Started again after its session timeout, the group rebalances twice (it is removed, then joins).

KIP-848 (``group.protocol=consumer``, librdkafka 2.12+): a static member that closes sends
MemberEpoch -2 and its next instance takes its partitions back; one that is SIGKILLed still holds
its instance id, and a new instance is refused with UNRELEASED_INSTANCE_ID (fatal in librdkafka)
until the broker fences the dead one after ``group.consumer.session.timeout.ms``.

A zombie (two live processes with one instance id) is fenced with FENCED_INSTANCE_ID by the
coordinator's check of the Heartbeat's instance id; before that check the two fenced each other
in turn (this test then fails: measured against the parent commit).

Every wait is for a state (an assignment, a line from the child, a record in
``__consumer_offsets``). The one bounded observation: after a static restart, the survivor is
polled past the killed process's session timeout, to show that its expiry moves nothing."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from minikafka.broker.group_metadata import GroupKey, GroupValue, decode_key
from minikafka.wire.process import launch
from wire_helpers import ready_to_join

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka (librdkafka) comes with the dev extra")
kafka = pytest.importorskip("kafka", reason="kafka-python comes with the course extra")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

SESSION_MS = 6_000  # the classic consumers' session.timeout.ms
CONSUMER_SESSION_MS = 3_000  # KIP-848: the broker's group.consumer.session.timeout.ms
CONFIG = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1_000,
    "offsets.topic.num.partitions": 1,
    "group.consumer.session.timeout.ms": CONSUMER_SESSION_MS,
    "group.consumer.heartbeat.interval.ms": 300,
}
WAIT_S = 60  # an upper bound for a state to be reached, not a duration anything depends on
ALL = {0, 1, 2, 3}


@pytest.fixture(scope="module")
def cluster():
    with launch(brokers=1, config=CONFIG) as c:
        yield c


def create_topic(cluster, name: str) -> str:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for future in admin.create_topics([NewTopic(name, 4, 1)]).values():
        future.result(WAIT_S)
    return name


# --- the consumer in a child process: prints its assignment each time it changes ------------------------

CHILD = textwrap.dedent("""
    import signal, sys, time
    client, bootstrap, group, topic, instance, session_ms = sys.argv[1:7]
    sys.stdin.readline()  # started early, the consumer is made when the test says "go"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # SIGTERM: close() cleanly; SIGKILL: nothing
    last = None
    if client == "kafka-python":
        from kafka import KafkaConsumer
        c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, group_instance_id=instance,
                          session_timeout_ms=int(session_ms), heartbeat_interval_ms=300,
                          auto_offset_reset="earliest", auto_commit_interval_ms=300)
        # The topic's metadata before the first poll (tests/wire_helpers.py, ready_to_join): without
        # it kafka-python 3.0.12 can lose the rejoin that assigns the topic, and never owns anything.
        while c.partitions_for_topic(topic) != set(range(4)):
            time.sleep(0.05)  # a poll interval: the wait is for the metadata, never for a time
        from kafka.errors import KafkaError

        def poll():
            try:
                c.poll(timeout_ms=100)
            except KafkaError as e:
                print("error", type(e).__name__, "-", e, flush=True)
                raise SystemExit(0)
        owned = lambda: {tp.partition for tp in c.assignment()}
    else:
        import confluent_kafka as ck
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance,
                "auto.offset.reset": "earliest", "enable.auto.commit": False}
        if client == "librdkafka-consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"session.timeout.ms": int(session_ms), "heartbeat.interval.ms": 300})
        c = ck.Consumer(conf)
        c.subscribe([topic])

        def poll():
            msg = c.poll(0.1)
            if msg is not None and msg.error() is not None:
                error = msg.error()
                print("error", error.name(), "fatal" if error.fatal() else "-", error.str(), flush=True)
        owned = lambda: {tp.partition for tp in c.assignment()}
    try:
        while True:  # until killed
            poll()
            now = sorted(owned())
            if now != last:
                print("assigned", ",".join(map(str, now)), flush=True)
                last = now
    finally:
        c.close()
""")


class Child:
    """A consumer process, started at once (Python and the client library load) but whose consumer
    is made only at ``go()``: a restart is then quick, whatever the machine's load. Its lines are
    read by a thread, so waiting on them never blocks the test."""

    def __init__(self, client: str, cluster, group: str, topic: str, instance: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, client, cluster.bootstrap_servers, group, topic, instance, str(SESSION_MS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.assigned: set[int] | None = None
        self.errors: list[str] = []

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.split())
        self.lines.put(None)

    def go(self) -> "Child":
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return self

    def drain(self, wait_s: float = 0.0) -> None:
        """Take the lines printed so far (waiting up to ``wait_s`` for the first one)."""
        while True:
            try:
                words = self.lines.get(timeout=wait_s) if wait_s else self.lines.get_nowait()
            except queue.Empty:
                return
            wait_s = 0.0
            if words is None:
                continue
            if words[0] == "assigned":
                self.assigned = {int(p) for p in words[1].split(",")} if len(words) > 1 else set()
            elif words[0] == "error":
                self.errors.append(" ".join(words[1:]))

    def kill(self, sig: int = signal.SIGKILL) -> None:
        os.kill(self.proc.pid, sig)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.kill()


# --- the survivor, in this process: its rebalance callbacks are the evidence ------------------------------


class Survivor:
    def __init__(self, client: str, cluster, group: str, topic: str, instance: str) -> None:
        self.calls: list[tuple[str, tuple[int, ...]]] = []
        self.client = client
        if client == "kafka-python":
            survivor = self

            class Listener(kafka.ConsumerRebalanceListener):
                def on_partitions_revoked(self, revoked):
                    survivor.calls.append(("revoked", tuple(sorted(tp.partition for tp in revoked))))

                def on_partitions_assigned(self, assigned):
                    survivor.calls.append(("assigned", tuple(sorted(tp.partition for tp in assigned))))

            self.c = kafka.KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group,
                                         group_instance_id=instance, session_timeout_ms=SESSION_MS,
                                         heartbeat_interval_ms=300, auto_offset_reset="earliest",
                                         enable_auto_commit=False)
            self.c.subscribe([topic], listener=Listener())
            ready_to_join(self.c, topic, 4)  # see its docstring: kafka-python 3.0.12's lost rejoin
        else:
            conf = {"bootstrap.servers": cluster.bootstrap_servers, "group.id": group, "group.instance.id": instance,
                    "auto.offset.reset": "earliest", "enable.auto.commit": False}
            if client == "librdkafka-consumer":
                conf["group.protocol"] = "consumer"
            else:
                conf.update({"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 300})
            self.c = ck.Consumer(conf)
            self.c.subscribe([topic], on_assign=lambda c, ps: self.calls.append(
                ("assigned", tuple(sorted(p.partition for p in ps)))), on_revoke=lambda c, ps: self.calls.append(
                ("revoked", tuple(sorted(p.partition for p in ps)))))

    def poll(self) -> None:
        if self.client == "kafka-python":
            self.c.poll(timeout_ms=100)
        else:
            msg = self.c.poll(0.1)
            assert msg is None or msg.error() is None, msg.error()

    def owned(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def close(self) -> None:
        self.c.close()


def wait_until(survivor: Survivor | None, children: list[Child], done, what: str) -> None:
    """Poll the survivor (that is how a client moves) and read the children until ``done()``."""
    deadline = time.monotonic() + WAIT_S
    while True:
        for child in children:
            child.drain(wait_s=0.1 if survivor is None else 0.0)
        if done():
            return
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        if survivor is not None:
            survivor.poll()


def generation(cluster, group: str) -> int:
    """The group's generation as the coordinator last wrote it to __consumer_offsets."""
    reader = ck.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "gen-reader",
                          "enable.auto.commit": False})
    try:
        tp = ck.TopicPartition("__consumer_offsets", 0, 0)
        _, end = reader.get_watermark_offsets(tp, timeout=WAIT_S)
        reader.assign([tp])
        found, offset = None, -1
        deadline = time.monotonic() + WAIT_S
        while offset < end - 1:
            assert time.monotonic() < deadline, "gave up reading __consumer_offsets"
            msg = reader.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            offset = msg.offset()
            key = decode_key(msg.key())
            if isinstance(key, GroupKey) and key.group == group and msg.value() is not None:
                found = GroupValue.decode(msg.value()).generation
        assert found is not None, f"no group metadata for {group!r}"
        return found
    finally:
        reader.close()


@pytest.mark.parametrize("client", ["librdkafka", "kafka-python"])
def test_a_static_member_restarted_in_its_session_takes_its_partitions_back_and_nobody_rebalances(
        cluster, client):
    topic = group = create_topic(cluster, f"static-{client}")
    first = Child(client, cluster, group, topic, "reader-a").go()
    survivor = None
    children = [first]
    try:
        wait_until(None, children, lambda: first.assigned == ALL, "the child alone to own all four")
        survivor = Survivor(client, cluster, group, topic, "reader-b")
        wait_until(survivor, children, lambda: len(survivor.owned()) == 2 and first.assigned == ALL - survivor.owned(),
                   "two partitions each")
        theirs, mine, gen = survivor.owned(), set(first.assigned), generation(cluster, group)
        calls = len(survivor.calls)

        again = Child(client, cluster, group, topic, "reader-a")
        children.append(again)
        first.kill()  # no LeaveGroup: a static member's partitions wait for it
        killed_at = time.monotonic()
        again.go()
        wait_until(survivor, children, lambda: again.assigned == mine, "the new process to get its partitions back")
        # Past the killed process's session timeout: its expiry moves nothing (it was replaced).
        wait_until(survivor, children, lambda: time.monotonic() > killed_at + SESSION_MS / 1000 + 1,
                   "the killed process's session timeout to pass")
        assert survivor.calls[calls:] == []  # never revoked, never reassigned
        assert survivor.owned() == theirs and again.assigned == mine
        assert generation(cluster, group) == gen  # the replacement was stored under the same generation

        # Killed again and started only after its session timeout: removed, then a new member.
        again.kill()
        wait_until(survivor, children, lambda: survivor.owned() == ALL, "the survivor to get all four")
        third = Child(client, cluster, group, topic, "reader-a").go()
        children.append(third)
        wait_until(survivor, children, lambda: third.assigned and len(survivor.owned()) == 2
                   and third.assigned == ALL - survivor.owned(), "two partitions each again")
        # At least two rebalances (the removal, the new member); a client may add one of its own
        # (kafka-python rejoins when its metadata changes), so the count is a floor, not an exact figure.
        kinds = [kind for kind, _ in survivor.calls[calls:]]
        assert len(kinds) >= 4 and kinds == ["revoked", "assigned"] * (len(kinds) // 2), kinds
        assert generation(cluster, group) >= gen + 2
    finally:
        for child in children:
            child.stop()
        if survivor is not None:
            survivor.close()


@pytest.mark.parametrize("client", ["librdkafka", "kafka-python"])
def test_a_zombie_whose_instance_id_was_taken_is_fenced_and_stops(cluster, client):
    # Two live processes with one group.instance.id: the newer replaces the older, whose next
    # Heartbeat (v3, with the instance id) is answered FENCED_INSTANCE_ID: a fatal error for it.
    # (Without the check, its old member id would only be unknown: it would rejoin and fence the
    # newer one, back and forth.)
    topic = group = create_topic(cluster, f"zombie-{client}")
    old = Child(client, cluster, group, topic, "reader-a").go()
    children = [old]
    try:
        wait_until(None, children, lambda: old.assigned == ALL, "the first process to own all four")
        new = Child(client, cluster, group, topic, "reader-a").go()
        children.append(new)
        wait_until(None, children, lambda: old.errors and new.assigned == ALL, "the first process to be fenced")
        if client == "librdkafka":  # its fatal error (_FATAL) carries the broker's FENCED_INSTANCE_ID (82)
            assert old.errors[0].startswith("_FATAL ") and "group.instance.id" in old.errors[0], old.errors
        else:  # kafka-python's heartbeat thread stops; its next (auto) commit is refused, poll() raises
            assert old.errors[0].startswith("FencedInstanceIdError "), old.errors
        assert new.errors == [] and new.assigned == ALL
    finally:
        for child in children:
            child.stop()


def test_kip_848_a_static_member_that_closes_comes_back_and_a_killed_one_is_refused_until_fenced(cluster):
    topic = group = create_topic(cluster, "static-848")
    survivor = Survivor("librdkafka-consumer", cluster, group, topic, "reader-b")
    children: list[Child] = []
    try:
        wait_until(survivor, [], lambda: survivor.owned() == ALL, "the survivor to own all four")
        first = Child("librdkafka-consumer", cluster, group, topic, "reader-a").go()
        children.append(first)
        wait_until(survivor, children, lambda: first.assigned and first.assigned == ALL - survivor.owned()
                   and len(survivor.owned()) == 2, "two partitions each")
        theirs, mine, calls = survivor.owned(), set(first.assigned), len(survivor.calls)
        # KIP-848's listener contract (what minikafka's KafkaConsumer now does too): revoked hears
        # only the two given up, assigned only what is new, and is called even when nothing is
        assert survivor.calls == [("assigned", (0, 1, 2, 3)), ("revoked", tuple(sorted(mine))), ("assigned", ())]

        again = Child("librdkafka-consumer", cluster, group, topic, "reader-a")
        children.append(again)
        first.kill(signal.SIGTERM)  # close(): a heartbeat with MemberEpoch -2, "I will be back"
        again.go()
        wait_until(survivor, children, lambda: again.assigned == mine, "the next instance to get a's partitions")
        assert survivor.calls[calls:] == [] and survivor.owned() == theirs  # the survivor never moved

        refused = Child("librdkafka-consumer", cluster, group, topic, "reader-a")
        children.append(refused)
        again.kill()  # SIGKILL: no -2, the instance id stays taken until the session timeout
        refused.go()
        wait_until(survivor, children, lambda: refused.errors, "the new instance to be refused")
        # librdkafka's fatal error (_FATAL) carries the broker's: UNRELEASED_INSTANCE_ID (111)
        assert refused.errors[0].startswith("_FATAL ")
        assert "The instance ID is still used by another member" in refused.errors[0]
        # The broker fences the dead member after its session timeout: the survivor gets its partitions.
        wait_until(survivor, children, lambda: survivor.owned() == ALL, "the dead member to be fenced")
        assert survivor.calls[calls:] == [("assigned", tuple(sorted(mine)))]  # incremental: only what is new
    finally:
        for child in children:
            child.stop()
        survivor.close()
