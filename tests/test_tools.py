"""The Kafka CLI tools (``minikafka topics``, ``console-producer``, ``console-consumer``,
``consumer-groups``) against real broker processes, as a student runs them.

One 1-broker cluster for the module (``launch``), with ``group.initial.rebalance.delay.ms=0``
so a consumer joins its group at once; one short-lived 3-broker cluster for the replication
columns. Most runs call ``minikafka.cli.main`` in this process and read what it printed
(fast: no interpreter start); a few run ``python -m minikafka.cli`` as a subprocess, where
the point is a real process (a consumer that stays in its group, no traceback on a refused
connection). Each test makes its own topics and groups, so they run in any order.
"""

from __future__ import annotations

import io
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest

pytest.importorskip("kafka", reason="the tools are kafka-python clients (pip install kafka-python==3.0.12)")

from kafka import KafkaAdminClient, TopicPartition  # noqa: E402

from minikafka.cli import main  # noqa: E402
from minikafka.tools.common import CONSUMER_PROPERTIES, PRODUCER_PROPERTIES, ToolError, client_configs  # noqa: E402
from minikafka.tools.console_consumer import Formatter  # noqa: E402
from minikafka.tools.console_producer import LineReader  # noqa: E402
from minikafka.tools.consumer_groups import parse_datetime_ms, parse_duration_ms  # noqa: E402
from minikafka.wire.process import free_port, launch  # noqa: E402

FAST_GROUPS = {"group.initial.rebalance.delay.ms": 0}
TOPIC_ERROR = "Error while executing topic command : "


@pytest.fixture(scope="module")
def cluster():
    with launch(brokers=1, config=FAST_GROUPS) as c:
        yield c


@pytest.fixture(scope="module")
def bootstrap(cluster):
    return cluster.bootstrap_servers


@pytest.fixture(scope="module")
def admin(bootstrap):
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    yield client
    client.close()


@pytest.fixture
def tool(capsys, monkeypatch):
    """``tool(*argv, stdin=b"...")`` -> (exit code, stdout, stderr) of ``minikafka *argv``."""

    def run(*argv: str, stdin: bytes = b""):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        capsys.readouterr()
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def subprocess_tool(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "minikafka.cli", *argv], capture_output=True, text=True,
                          timeout=60, **kwargs)


def table(out: str) -> list[dict[str, str]]:
    """A kafka-consumer-groups table (after its blank line) as dicts keyed by column name."""
    lines = [line for line in out.splitlines() if line.strip()]
    header = lines[0].split()
    return [dict(zip(header, line.split())) for line in lines[1:]]


def create_topic(tool, bootstrap: str, topic: str, partitions: int = 3) -> None:
    code, out, err = tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                          "--partitions", str(partitions), "--replication-factor", "1")
    assert (code, out, err) == (0, f"Created topic {topic}.\n", "")


def wait_for_state(admin: KafkaAdminClient, group: str, state: str, partitions: int = 0,
                   timeout_s: float = 20) -> None:
    """Until the group is in ``state`` with ``partitions`` assigned in all. A consumer that joins
    before its metadata lists a new topic's partitions is first Stable with none, then
    rebalances: waiting for Stable alone would race with that."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            described = admin.describe_groups([group])[group]
            assigned = sum(len(a["partitions"]) for m in described["members"]
                           if isinstance(m["member_assignment"], dict)
                           for a in m["member_assignment"]["assigned_partitions"])
            if described["group_state"] == state and assigned == partitions:
                return
        except Exception:  # the coordinator is not known yet: ask again
            pass
        time.sleep(0.1)
    raise AssertionError(f"group {group} did not reach {state} with {partitions} partitions within {timeout_s} s")


# --- topics ---------------------------------------------------------------------------------------------


def test_topics_create_list_describe_delete(tool, bootstrap):
    topic = name("orders")
    code, out, err = tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                          "--partitions", "3", "--replication-factor", "1", "--config", "retention.ms=60000",
                          "--config", "cleanup.policy=compact")
    assert (code, out, err) == (0, f"Created topic {topic}.\n", "")

    code, out, _ = tool("topics", "--bootstrap-server", bootstrap, "--list")
    assert code == 0 and topic in out.splitlines()

    code, out, err = tool("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    # No TopicId column: minikafka's brokers answer Metadata v8, which has no topic ids (nor does Kafka print one).
    header_configs = lines[0].split("\tConfigs: ")[1].split(",")
    assert lines[0].startswith(f"Topic: {topic}\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: ")
    assert sorted(header_configs) == ["cleanup.policy=compact", "retention.ms=60000"]  # only non-defaults
    assert lines[1:] == [f"\tTopic: {topic}\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1" for p in range(3)]

    # --topic is a regular expression that must match the whole name, as in Kafka.
    code, out, _ = tool("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic[:-3] + "...")
    assert code == 0 and out.startswith(f"Topic: {topic}\t")
    code, out, _ = tool("topics", "--bootstrap-server", bootstrap, "--list", "--topic", topic[:-1])
    assert (code, out) == (0, "")

    code, out, err = tool("topics", "--bootstrap-server", bootstrap, "--delete", "--topic", topic)
    assert (code, out, err) == (0, "", "")
    code, out, _ = tool("topics", "--bootstrap-server", bootstrap, "--list")
    assert code == 0 and topic not in out.splitlines()


def test_topics_create_with_a_replica_assignment(tool, bootstrap):
    # kafka-topics --replica-assignment: partitions separated by ',', each one's brokers by ':'
    topic = name("placed")
    code, out, err = tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                          "--replica-assignment", "1,1")
    assert (code, out, err) == (0, f"Created topic {topic}.\n", "")
    code, out, _ = tool("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith(f"Topic: {topic}\tPartitionCount: 2\tReplicationFactor: 1\t")
    assert lines[1:] == [f"\tTopic: {topic}\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1" for p in range(2)]
    # the controller's refusal, in KRaft's words
    code, out, err = tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", name("refused"),
                          "--replica-assignment", "1,2")
    assert (code, out, err) == (1, "", f"{TOPIC_ERROR}The manual partition assignment includes broker 2, but no such "
                                       "broker is registered.\n")


def test_topics_errors_are_one_line_and_exit_1(tool, bootstrap):
    topic = name("dup")
    create_topic(tool, bootstrap, topic, partitions=1)

    code, out, err = tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                          "--partitions", "1", "--replication-factor", "1")
    assert (code, out, err) == (1, "", f"{TOPIC_ERROR}Topic '{topic}' already exists.\n")
    code, out, err = tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic, "--if-not-exists")
    assert (code, out, err) == (0, "", "")

    for action in ("--describe", "--delete"):
        code, out, err = tool("topics", "--bootstrap-server", bootstrap, action, "--topic", "no-such-topic")
        assert (code, out, err) == (1, "", f"{TOPIC_ERROR}Topic 'no-such-topic' does not exist as expected\n")
        code, out, err = tool("topics", "--bootstrap-server", bootstrap, action, "--topic", "no-such-topic",
                              "--if-exists")
        assert (code, out, err) == (0, "", "")

    # The broker's refusal, in its own words.
    code, _, err = tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", name("rf"),
                        "--replication-factor", "3")
    assert code == 1 and err.startswith(TOPIC_ERROR) and "replication factor 3" in err and err.count("\n") == 1
    code, _, err = tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", name("p"),
                        "--partitions", "0")
    assert (code, err) == (1, f"{TOPIC_ERROR}The partitions must be greater than 0\n")
    code, _, err = tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", name("c"), "--config", "x")
    assert (code, err) == (1, f'{TOPIC_ERROR}Invalid topic config: all configs to be added must be in the format '
                              '"key=val".\n')

    # Flags that do not go together are usage errors (argparse's exit code 2).
    with pytest.raises(SystemExit) as exit_:
        tool("topics", "--bootstrap-server", bootstrap, "--create")
    assert exit_.value.code == 2


def test_no_broker_reachable_is_one_line_without_traceback():
    nobody = f"127.0.0.1:{free_port()}"
    for argv in (["topics", "--bootstrap-server", nobody, "--list"],
                 ["consumer-groups", "--bootstrap-server", nobody, "--list"]):
        done = subprocess_tool(*argv)
        assert done.returncode == 1, done
        assert done.stdout == "" and "Traceback" not in done.stderr
        assert done.stderr.count("\n") == 1 and f"no broker reachable at {nobody}" in done.stderr


# --- console producer and consumer, then consumer-groups --describe ----------------------------------------


def test_produce_keys_consume_from_beginning_then_describe_shows_lag_0(tool, bootstrap, admin):
    topic, group = name("keyed"), name("readers")
    create_topic(tool, bootstrap, topic)
    lines = [f"key{i}:value {i}" for i in range(9)]
    code, out, err = tool("console-producer", "--bootstrap-server", bootstrap, "--topic", topic,
                          "--property", "parse.key=true", "--property", "key.separator=:",
                          "--producer-property", "acks=all", "--producer-property", "linger.ms=5",
                          stdin="".join(f"{line}\n" for line in lines).encode())
    assert (code, out, err) == (0, "", "")

    code, out, err = tool("console-consumer", "--bootstrap-server", bootstrap, "--topic", topic,
                          "--from-beginning", "--group", group, "--max-messages", "9",
                          "--property", "print.key=true", "--property", "key.separator=:")
    assert code == 0
    assert sorted(out.splitlines()) == sorted(lines)  # keys came back as keys, values as values
    assert err == "Processed a total of 9 messages\n"

    # The group committed what it printed when it closed: CURRENT-OFFSET = LOG-END-OFFSET, LAG 0.
    committed = admin.list_group_offsets({group: None})[group]
    assert sum(om.offset for om in committed.values()) == 9
    code, out, err = tool("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group)
    assert code == 0
    assert err == f"\nConsumer group '{group}' has no active members.\n"
    assert out.startswith("\nGROUP ")
    rows = table(out)
    assert [(r["TOPIC"], int(r["PARTITION"])) for r in rows] == [(topic, p) for p in range(3)]
    for row in rows:
        tp = TopicPartition(topic, int(row["PARTITION"]))
        assert row["GROUP"] == group
        assert int(row["CURRENT-OFFSET"]) == committed[tp].offset == int(row["LOG-END-OFFSET"])
        assert row["LAG"] == "0" and row["CONSUMER-ID"] == row["HOST"] == row["CLIENT-ID"] == "-"

    code, out, _ = tool("consumer-groups", "--bootstrap-server", bootstrap, "--list")
    assert code == 0 and group in out.splitlines()
    code, out, _ = tool("consumer-groups", "--bootstrap-server", bootstrap, "--list", "--state", "empty")
    assert code == 0 and {"GROUP": group, "STATE": "Empty"} in table(out)


def test_console_consumer_partition_offset_and_format(tool, bootstrap):
    topic = name("single")
    create_topic(tool, bootstrap, topic, partitions=1)
    code, _, _ = tool("console-producer", "--bootstrap-server", bootstrap, "--topic", topic, stdin=b"a\nb\nc\n")
    assert code == 0
    code, out, err = tool("console-consumer", "--bootstrap-server", bootstrap, "--topic", topic,
                          "--partition", "0", "--offset", "1", "--timeout-ms", "1500",
                          "--property", "print.partition=true", "--property", "print.offset=true",
                          "--property", "print.timestamp=true", "--property", "print.key=true")
    assert code == 0 and err == "Processed a total of 2 messages\n"  # exits when nothing came for 1.5 s
    assert [re.sub(r"CreateTime:\d+", "CreateTime:T", line) for line in out.splitlines()] == [
        "CreateTime:T\tPartition:0\tOffset:1\tnull\tb", "CreateTime:T\tPartition:0\tOffset:2\tnull\tc"]

    with pytest.raises(SystemExit) as exit_:  # --offset needs --partition, as in Kafka
        tool("console-consumer", "--bootstrap-server", bootstrap, "--topic", topic, "--offset", "1")
    assert exit_.value.code == 2


def test_console_consumer_without_group_uses_a_generated_one():
    """Kafka's tool: console-consumer-<n>, with auto-commit off; --partition: no group at all."""
    from minikafka.cli import build_parser
    from minikafka.tools.console_consumer import consumer_configs

    args = build_parser().parse_args(["console-consumer", "--bootstrap-server", "x:1", "--topic", "t"])
    configs = consumer_configs(args)
    assert re.fullmatch(r"console-consumer-\d{1,5}", configs["group_id"])
    assert configs["enable_auto_commit"] is False and configs["auto_offset_reset"] == "latest"
    args = build_parser().parse_args(["console-consumer", "--bootstrap-server", "x:1", "--topic", "t",
                                      "--partition", "0", "--from-beginning"])
    assert "group_id" not in consumer_configs(args)


def test_bad_producer_property_and_bad_lines(tool, bootstrap):
    topic = name("props")
    create_topic(tool, bootstrap, topic, partitions=1)
    base = ("console-producer", "--bootstrap-server", bootstrap, "--topic", topic)

    code, out, err = tool(*base, "--producer-property", "buffer.memory=1000", stdin=b"x\n")
    assert (code, out) == (1, "") and err.count("\n") == 1
    assert err.startswith("Error: unknown producer property 'buffer.memory'") and "linger.ms" in err
    code, _, err = tool(*base, "--producer-property", "linger.ms=soon", stdin=b"x\n")
    assert (code, err) == (1, "Error: producer property linger.ms='soon': expected an integer\n")
    code, _, err = tool(*base, "--producer-property", "acks=2", stdin=b"x\n")
    assert (code, err) == (1, "Error: producer property acks='2': expected all, -1, 0 or 1\n")
    # The default key.separator is a tab.
    code, _, err = tool(*base, "--property", "parse.key=true", stdin=b"k\tv\nno separator\n")
    assert (code, err) == (1, "Error: No key separator found on line number 2: 'no separator'\n")
    with pytest.raises(SystemExit) as exit_:
        tool(*base, "--producer-property", "acks")
    assert exit_.value.code == 2


# --- consumer-groups --reset-offsets ---------------------------------------------------------------------


def _committed(admin: KafkaAdminClient, group: str) -> dict[int, int]:
    return {tp.partition: om.offset for tp, om in admin.list_group_offsets({group: None})[group].items()}


def test_reset_offsets_dry_run_vs_execute(tool, bootstrap, admin):
    topic, group = name("replay"), name("replayers")
    create_topic(tool, bootstrap, topic, partitions=2)
    # Keyed, so both partitions get records (Kafka's murmur2 partitioner: k3,k4,k5,k7,k8,k9 -> 0).
    payload = "".join(f"k{i}\t{i}\n" for i in range(10)).encode()
    assert tool("console-producer", "--bootstrap-server", bootstrap, "--topic", topic, "--property", "parse.key=true",
                stdin=payload)[0] == 0
    assert tool("console-consumer", "--bootstrap-server", bootstrap, "--topic", topic, "--group", group,
                "--from-beginning", "--max-messages", "10")[0] == 0
    ends = _committed(admin, group)
    assert ends == {0: 6, 1: 4}
    reset = ("consumer-groups", "--bootstrap-server", bootstrap, "--reset-offsets", "--group", group, "--topic", topic)

    # Neither --dry-run nor --execute: a dry run, with Kafka's warning.
    code, out, err = tool(*reset, "--to-earliest")
    assert code == 0 and err.startswith("WARN: No action will be performed as the --execute option is missing.")
    assert table(out) == [{"GROUP": group, "TOPIC": topic, "PARTITION": str(p), "NEW-OFFSET": "0"} for p in (0, 1)]
    assert _committed(admin, group) == ends  # nothing written
    code, out, err = tool(*reset, "--to-earliest", "--dry-run")
    assert (code, err) == (0, "") and _committed(admin, group) == ends

    code, out, err = tool(*reset, "--to-earliest", "--execute")
    assert (code, err) == (0, "") and [r["NEW-OFFSET"] for r in table(out)] == ["0", "0"]
    assert _committed(admin, group) == {0: 0, 1: 0}
    code, out, _ = tool("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group)
    assert {int(r["PARTITION"]): int(r["LAG"]) for r in table(out)} == ends  # all of it to read again

    # Clamped into [log start, log end], as Kafka does; --shift-by moves from the committed offset.
    code, out, _ = tool(*reset, "--to-offset", "1000", "--execute")
    assert code == 0 and _committed(admin, group) == ends
    code, out, _ = tool(*reset[:-1], f"{topic}:0", "--shift-by", "-2", "--execute")
    assert code == 0 and [(r["PARTITION"], r["NEW-OFFSET"]) for r in table(out)] == [("0", str(ends[0] - 2))]
    assert _committed(admin, group) == {0: ends[0] - 2, 1: ends[1]}
    # Every record is younger than a day; none is in the future (then: the log end, with a warning).
    code, out, _ = tool(*reset, "--by-duration", "P1D", "--dry-run")
    assert code == 0 and [r["NEW-OFFSET"] for r in table(out)] == ["0", "0"]
    code, out, _ = tool(*reset, "--to-datetime", "2999-01-01T00:00:00.000", "--dry-run")
    assert code == 0 and f"Warn: Partition 0 from topic {topic} is empty. Falling back to latest known offset." in out
    assert [int(r["NEW-OFFSET"]) for r in table(out.split("\n\n")[-1])] == [ends[0], ends[1]]

    code, out, err = tool("consumer-groups", "--bootstrap-server", bootstrap, "--delete", "--group", group)
    assert (code, out, err) == (0, f"Deletion of requested consumer groups ('{group}') was successful.\n", "")
    code, _, err = tool("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group)
    assert (code, err) == (1, f"Error: Consumer group '{group}' does not exist.\n")


def test_reset_offsets_refused_while_a_consumer_is_active(tool, bootstrap, admin):
    topic, group = name("busy"), name("busy-group")
    create_topic(tool, bootstrap, topic, partitions=2)
    consumer = subprocess.Popen(
        [sys.executable, "-m", "minikafka.cli", "console-consumer", "--bootstrap-server", bootstrap,
         "--topic", topic, "--group", group, "--timeout-ms", "60000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_state(admin, group, "Stable", partitions=2)
        code, out, err = tool("consumer-groups", "--bootstrap-server", bootstrap, "--reset-offsets", "--group", group,
                              "--topic", topic, "--to-earliest", "--execute")
        assert (code, out) == (1, "")
        assert err == (f"Error: Assignments can only be reset if the group '{group}' is inactive, but the current "
                       "state is Stable.\n")

        # The active member owns both partitions: describe names it, --members counts them.
        code, out, err = tool("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group)
        assert (code, err) == (0, "")
        rows = table(out)
        assert len(rows) == 2 and all(r["CONSUMER-ID"] != "-" and r["CURRENT-OFFSET"] == "-" for r in rows)
        code, out, _ = tool("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group,
                            "--members")
        assert code == 0 and [r["#PARTITIONS"] for r in table(out)] == ["2"]
        code, out, _ = tool("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group,
                            "--state")
        assert code == 0 and "Stable" in out.splitlines()[-1] and out.splitlines()[-1].endswith("1")

        code, out, err = tool("consumer-groups", "--bootstrap-server", bootstrap, "--delete", "--group", group)
        assert code == 1 and err.splitlines() == [
            "Error: Deletion of some consumer groups failed:",
            f"* Group '{group}' could not be deleted due to: NonEmptyGroupError: The group is not empty."]
    finally:
        consumer.send_signal(signal.SIGTERM)  # leaves the group, as Ctrl-C does
        out, err = consumer.communicate(timeout=30)
    assert consumer.returncode == 0 and err.endswith("Processed a total of 0 messages\n"), err
    wait_for_state(admin, group, "Empty")
    code, _, err = tool("consumer-groups", "--bootstrap-server", bootstrap, "--reset-offsets", "--group", group,
                        "--topic", topic, "--to-latest", "--execute")
    assert (code, err) == (0, "")


# --- replication columns (3 brokers) ------------------------------------------------------------------------


def test_describe_replication_and_under_replicated_partitions(tool):
    config = {**FAST_GROUPS, "broker.heartbeat.interval.ms": 200, "broker.session.timeout.ms": 1000}
    with launch(brokers=3, config=config) as c:
        topic = "replicated"
        code, _, _ = tool("topics", "--bootstrap-server", c.bootstrap_servers, "--create", "--topic", topic,
                          "--partitions", "3", "--replication-factor", "3")
        assert code == 0
        code, out, _ = tool("topics", "--bootstrap-server", c.bootstrap_servers, "--describe", "--topic", topic)
        lines = out.splitlines()
        assert code == 0 and "\tReplicationFactor: 3\t" in lines[0]
        for line in lines[1:]:
            fields = dict(f.split(": ") for f in line.strip().split("\t"))
            assert sorted(fields["Replicas"].split(",")) == ["1", "2", "3"]
            assert sorted(fields["Isr"].split(",")) == ["1", "2", "3"] and fields["Leader"] in "123"
        code, out, _ = tool("topics", "--bootstrap-server", c.bootstrap_servers, "--describe",
                            "--under-replicated-partitions")
        assert (code, out) == (0, "")

        c.kill(3)
        live = ",".join(f"{c.host}:{c.ports[b]}" for b in (1, 2))
        deadline = time.monotonic() + 20
        while True:  # the controller notices after broker.session.timeout.ms and shrinks the ISRs
            code, out, _ = tool("topics", "--bootstrap-server", live, "--describe", "--under-replicated-partitions")
            if out.count("\n") == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert code == 0 and out.count("\n") == 3, out
        assert all(line.startswith(f"\tTopic: {topic}\t") and "3" not in line.split("Isr: ")[1]
                   for line in out.splitlines())
        code, out, _ = tool("topics", "--bootstrap-server", live, "--describe", "--unavailable-partitions")
        assert (code, out) == (0, "")


# --- the parts, without a cluster ------------------------------------------------------------------------


def test_line_reader_is_kafkas_line_message_reader():
    reader = LineReader.from_properties({"parse.key": "true", "key.separator": "|", "null.marker": "NULL",
                                         "parse.headers": "true"})
    assert reader.read(b"h1:a,h2\tk|v|w", 1) == ([("h1", b"a"), ("h2", None)], b"k", b"v|w")
    assert reader.read(b"\tNULL|NULL", 2) == ([], None, None)  # a tombstone with a null key
    lenient = LineReader.from_properties({"parse.key": "true", "ignore.error": "true"})
    assert lenient.read(b"no tab", 3) == ([], None, b"no tab")
    with pytest.raises(ToolError, match="unknown --property 'parse.keys'"):
        LineReader.from_properties({"parse.keys": "true"})


def test_formatter_is_kafkas_default_message_formatter():
    from kafka.consumer.fetcher import ConsumerRecord

    record = ConsumerRecord(topic="t", partition=2, leader_epoch=0, offset=7, timestamp=1000, timestamp_type=0,
                            key=None, value=b"v", headers=[("h", b"x")], checksum=None, serialized_key_size=-1,
                            serialized_value_size=1, serialized_header_size=-1)
    assert Formatter({}).format(record) == "v\n"
    assert Formatter({"print.key": "true", "print.headers": "true", "print.offset": "true",
                      "key.separator": " | "}).format(record) == "Offset:7 | h:x | null | v\n"
    assert Formatter({"print.value": "false", "print.partition": "true"}).format(record) == "Partition:2\n"


def test_topic_ids_print_as_kafka_prints_them():
    from minikafka.tools.topics import _topic_id

    assert _topic_id({}) is None and _topic_id({"topic_id": uuid.UUID(int=0)}) is None  # Metadata < v10: none
    assert _topic_id({"topic_id": uuid.UUID(bytes=bytes(range(16)))}) == "AAECAwQFBgcICQoLDA0ODw"


def test_client_properties_use_kafkas_names():
    assert client_configs({"acks": "all", "linger.ms": "5", "compression.type": "none",
                           "enable.idempotence": "false", "bootstrap.servers": "ignored:1"},
                          PRODUCER_PROPERTIES, "producer") == {
        "acks": "all", "linger_ms": 5, "compression_type": None, "enable_idempotence": False}
    configs = client_configs({"partition.assignment.strategy": "org.apache.kafka.clients.consumer.RoundRobinAssignor",
                              "max.poll.records": "10"}, CONSUMER_PROPERTIES, "consumer")
    assert configs["max_poll_records"] == 10 and configs["partition_assignment_strategy"][0].name == "roundrobin"
    with pytest.raises(ToolError, match="'value.serializer' cannot be set"):
        client_configs({"value.serializer": "x"}, PRODUCER_PROPERTIES, "producer")


def test_reset_times():
    assert parse_duration_ms("PT10M") == 600_000
    assert parse_duration_ms("P1DT2H0.5S") == (26 * 3600 + 0.5) * 1000
    assert parse_datetime_ms("1970-01-01T00:00:01.500Z") == 1500
    assert parse_datetime_ms("1970-01-01T01:00:00+01:00") == 0
    for bad in ("10m", "P", "PT"):
        with pytest.raises(ToolError, match="not an ISO-8601 duration"):
            parse_duration_ms(bad)
    with pytest.raises(ToolError, match="not a date-time"):
        parse_datetime_ms("yesterday")


# --- issue 14: partitions and configs that change, Kafka's commands as written ----------------------------------


def test_topics_alter_adds_partitions_and_refuses_fewer(tool, bootstrap, admin):
    topic = name("grow")
    assert tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic, "--partitions", "2")[0] == 0
    assert tool("topics", "--bootstrap-server", bootstrap, "--alter", "--topic", topic, "--partitions", "4") == (0, "", "")
    assert len(admin.describe_topics([topic])[0]["partitions"]) == 4
    code, out, err = tool("topics", "--bootstrap-server", bootstrap, "--alter", "--topic", topic, "--partitions", "3")
    assert code == 1 and err.startswith(TOPIC_ERROR) and "currently has 4 partition(s); 3 would not be an increase" in err
    code, _, err = tool("topics", "--bootstrap-server", bootstrap, "--alter", "--topic", name("nope"), "--partitions", "3")
    assert code == 1 and "does not exist as expected" in err


def test_configs_alter_and_describe_a_topic(tool, bootstrap):
    topic = name("cfg")
    assert tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic)[0] == 0
    code, out, err = tool("configs", "--bootstrap-server", bootstrap, "--entity-type", "topics", "--entity-name", topic,
                          "--alter", "--add-config", "retention.ms=60000,cleanup.policy=[compact,delete]")
    assert (code, out, err) == (0, f"Completed updating config for topic {topic}.\n", "")
    code, out, _ = tool("configs", "--bootstrap-server", bootstrap, "--entity-type", "topics", "--entity-name", topic,
                        "--describe")
    assert code == 0
    assert out.splitlines()[0] == f"Dynamic configs for topic {topic} are:"
    assert "  retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000}" in out.splitlines()
    assert any(line.startswith("  cleanup.policy=compact,delete ") for line in out.splitlines())
    assert tool("configs", "--bootstrap-server", bootstrap, "--topic", topic, "--alter",
                "--delete-config", "retention.ms")[0] == 0
    out = tool("configs", "--bootstrap-server", bootstrap, "--topic", topic, "--describe")[1]
    assert "retention.ms" not in out
    code, _, err = tool("configs", "--bootstrap-server", bootstrap, "--topic", topic, "--alter",
                        "--add-config", "min.insync.replicas=0")
    assert code == 1 and err.startswith("Error while executing config command : ") and "min.insync.replicas" in err
    assert len(err.splitlines()) == 1


def test_zookeeper_gets_one_line_with_the_command_to_type(tool):
    code, out, err = tool("topics", "--zookeeper", "127.0.0.1:2181", "--create", "--topic", "my-topic",
                          "--partitions", "3", "--replication-factor", "1")
    assert code == 1 and out == ""
    assert len(err.splitlines()) == 1
    assert err.strip().endswith("type instead: minikafka topics --bootstrap-server 127.0.0.1:9092 --create "
                                "--topic my-topic --partitions 3 --replication-factor 1")
    assert "--zookeeper is not a recognized option" in err


def test_broker_list_is_the_deprecated_alias_of_bootstrap_server(tool, bootstrap, admin):
    topic = name("old-flags")
    assert tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic)[0] == 0
    code, out, err = tool("console-producer", "--broker-list", bootstrap, "--topic", topic, stdin=b"a\nb\n")
    assert code == 0
    assert err.splitlines()[0] == ("Warning: --broker-list is deprecated and will be removed in a future release; "
                                   "use --bootstrap-server instead.")
    code, out, _ = tool("console-consumer", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                        "--timeout-ms", "5000")
    assert out.split() == ["a", "b"]
    with pytest.raises(SystemExit) as usage:  # neither flag: argparse's usage error, exit 2
        tool("topics", "--list")
    assert usage.value.code == 2


def test_delete_records_from_kafkas_offset_json_file(tool, bootstrap, admin, tmp_path):
    topic = name("purge")
    assert tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic)[0] == 0
    assert tool("console-producer", "--bootstrap-server", bootstrap, "--topic", topic,
                stdin=b"".join(b"line%d\n" % i for i in range(6)))[0] == 0
    offsets = tmp_path / "offsets.json"
    offsets.write_text(f'{{"partitions": [{{"topic": "{topic}", "partition": 0, "offset": 4}}], "version": 1}}')
    code, out, err = tool("delete-records", "--bootstrap-server", bootstrap, "--offset-json-file", str(offsets))
    assert (code, err) == (0, "")
    assert out.splitlines() == ["Executing records delete operation", "Records delete operation completed:",
                                f"partition: {topic}-0\tlow_watermark: 4"]
    code, out, _ = tool("console-consumer", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                        "--timeout-ms", "5000")
    assert out.split() == ["line4", "line5"]
    offsets.write_text(f'{{"partitions": [{{"topic": "{topic}", "partition": 0, "offset": 99}}], "version": 1}}')
    code, out, _ = tool("delete-records", "--bootstrap-server", bootstrap, "--offset-json-file", str(offsets))
    assert code == 1 and f"partition: {topic}-0\terror: OffsetOutOfRangeError" in out
    offsets.write_text('{"partitions": [{"topic": 3}]}')
    code, _, err = tool("delete-records", "--bootstrap-server", bootstrap, "--offset-json-file", str(offsets))
    assert code == 1 and "partitions[0] must have a \"topic\"" in err


def test_console_consumer_says_when_its_group_was_still_joining(tool):
    # Kafka's default group.initial.rebalance.delay.ms (3 s) and a 1 s timeout: the group
    # cannot have its first assignment yet, whatever the machine's speed.
    with launch(brokers=1, controllers=1) as slow:
        code, out, err = tool("console-consumer", "--bootstrap-server", slow.bootstrap_servers, "--topic",
                              name("quiet"), "--group", "g1", "--timeout-ms", "1000")
    assert code == 0 and out == ""
    assert "still joining group 'g1' when --timeout-ms 1000 ran out" in err
    assert "group.initial.rebalance.delay.ms" in err and "Processed a total of 0 messages" in err


def test_configs_alter_the_brokers_dynamic_defaults(tool, bootstrap):
    code, out, err = tool("configs", "--bootstrap-server", bootstrap, "--entity-type", "brokers", "--entity-default",
                          "--alter", "--add-config", "retention.ms=604800001")
    assert (code, out, err) == (0, "Completed updating default config for brokers in the cluster.\n", "")
    code, out, _ = tool("configs", "--bootstrap-server", bootstrap, "--entity-type", "brokers", "--entity-name", "1",
                        "--alter", "--delete-config", "retention.ms")
    assert (code, out) == (0, "Completed updating config for broker 1.\n")
    code, _, err = tool("configs", "--bootstrap-server", bootstrap, "--entity-type", "brokers", "--entity-default",
                        "--alter", "--add-config", "num.partitions=3")
    assert code == 1 and "unknown dynamic broker config 'num.partitions'" in err
    assert tool("configs", "--bootstrap-server", bootstrap, "--entity-type", "brokers", "--entity-default",
                "--alter", "--delete-config", "retention.ms")[0] == 0
