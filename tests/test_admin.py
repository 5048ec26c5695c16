"""KafkaAdminClient and kafka-consumer-groups (minikafka.clients.admin) on a simulated cluster.

Every cluster is seeded and small (3 partitions of __consumer_offsets, no initial rebalance
delay) so each test runs in well under a second of wall-clock time.
"""

from datetime import datetime, timedelta, timezone

import pytest

from minikafka import Cluster, KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from minikafka.assignors import Assignment, Subscription
from minikafka.broker.group_coordinator import partition_for
from minikafka.clients.admin import GroupInformation, KafkaAdminClient, MemberInformation
from minikafka.tools.consumer_groups import ConsumerGroupCommand
from minikafka.errors import (
    GroupIdNotFoundError,
    IllegalArgumentError,
    InvalidGroupIdError,
    KafkaConfigurationError,
    KafkaTimeoutError,
    NonEmptyGroupError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)

FAST = {"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0}


@pytest.fixture
def cluster():
    with Cluster(3, seed=11, config=FAST) as c:
        yield c


def produce(cluster, topic, per_partition, partitions, *, timestamps=None):
    """``per_partition`` records into each partition; record i of a partition gets
    ``timestamps[i]`` if given."""
    producer = KafkaProducer(bootstrap_servers=cluster)
    for i in range(per_partition):
        for p in range(partitions):
            ts = None if timestamps is None else timestamps[i]
            producer.send(topic, value=f"{p}-{i}".encode(), partition=p, timestamp_ms=ts)
    producer.flush()
    producer.close()
    cluster.advance(200)  # followers fetch: the high watermark reaches the log end


def new_consumer(cluster, group, topic, **configs):
    return KafkaConsumer(topic, bootstrap_servers=cluster, group_id=group, auto_offset_reset="earliest",
                         enable_auto_commit=False, **configs)


def settle(consumers, rounds=200):
    """Poll every consumer in turn until the group has one generation that all have taken."""
    for _ in range(rounds):
        for c in consumers:
            c.poll(timeout_ms=20)
        cos = [c._node.coordinator for c in consumers]
        if all(co.state == "STABLE" and not co.need_rejoin and co.pending_assignment is None for co in cos) \
                and len({co.generation for co in cos}) == 1:
            return
    raise AssertionError("the group did not settle")


def consume(consumer, count):
    """Exactly ``count`` records; {tp: next offset} of what was consumed."""
    consumed = {}
    got = 0
    for _ in range(200):
        records = consumer.poll(timeout_ms=100, max_records=min(5, count - got))
        for tp, rs in records.items():
            consumed[tp] = rs[-1].offset + 1
            got += len(rs)
        if got == count:
            return consumed
    raise AssertionError(f"consumed {got} of {count}")


def member_id(consumer):
    return consumer._node.coordinator.member_id


# --- kafka-consumer-groups --describe --------------------------------------------------------------


def test_describe_group_reports_committed_offsets_log_end_and_exact_lag(cluster):
    cluster.create_topic("orders", 3, 2)
    produce(cluster, "orders", 10, 3)  # N = 30
    consumer = new_consumer(cluster, "shipping", "orders", max_poll_records=5)
    consumed = consume(consumer, 12)  # M = 12
    offsets = {TopicPartition("orders", p): consumed.get(TopicPartition("orders", p), 0) for p in range(3)}
    consumer.commit({tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets.items()})

    report = cluster.consumer_groups.describe_group("shipping")

    assert report.state == "Stable" and report.notice is None
    assert [(r.topic, r.partition) for r in report.rows] == [("orders", 0), ("orders", 1), ("orders", 2)]
    for r in report.rows:
        tp = TopicPartition(r.topic, r.partition)
        leader = cluster.partition_state("orders", r.partition).leader
        assert r.log_end_offset == 10 == cluster.replica(leader, "orders", r.partition).high_watermark
        assert r.current_offset == offsets[tp]
        assert r.lag == 10 - offsets[tp]
        assert (r.consumer_id, r.host, r.client_id) == (member_id(consumer), consumer.node_id, consumer.node_id)
    assert sum(offsets.values()) == 12
    assert report.total_lag == 30 - 12

    # The text is kafka-consumer-groups' (column widths: max(15, longest) for group, topic,
    # consumer id and host; 10 for PARTITION; 15 for the offsets and LAG).
    lines = report.table().splitlines()
    mid = member_id(consumer)
    assert lines[0] == ("GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             "
                        f"{'CONSUMER-ID':<{len(mid)}} HOST            CLIENT-ID")
    first = report.rows[0]
    assert lines[1] == (f"shipping        orders          0          {first.current_offset:<15} 10              "
                        f"{first.lag:<15} {mid} {consumer.node_id:<15} {consumer.node_id}")
    assert str(report) == report.table() and len(lines) == 4

    # The admin client's own view agrees with what was committed.
    committed = cluster.admin().list_consumer_group_offsets("shipping")
    assert {tp: om.offset for tp, om in committed.items()} == offsets


def test_members_and_state_views_two_consumers_on_four_partitions(cluster):
    cluster.create_topic("trucks", 4, 2)
    a, b = new_consumer(cluster, "fleet", "trucks"), new_consumer(cluster, "fleet", "trucks")
    settle([a, b])

    members = cluster.consumer_groups.describe_members("fleet", verbose=True)
    assert {r.consumer_id for r in members.rows} == {member_id(a), member_id(b)}
    by_id = {r.consumer_id: r for r in members.rows}
    for consumer in (a, b):
        row = by_id[member_id(consumer)]
        assert row.num_partitions == 2
        assert set(row.assignment) == consumer.assignment()
        assert (row.host, row.client_id) == (consumer.node_id, consumer.node_id)
    assert set(by_id[member_id(a)].assignment) | set(by_id[member_id(b)].assignment) == {
        TopicPartition("trucks", p) for p in range(4)}
    text = members.table().splitlines()
    assert text[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
    assert sorted(line.split()[-1] for line in text[1:]) == ["trucks(0,1)", "trucks(2,3)"]  # range assignor
    assert "ASSIGNMENT" not in cluster.consumer_groups.describe_members("fleet").table()

    state = cluster.consumer_groups.describe_state("fleet")
    (row,) = state.rows
    coordinator = cluster.partition_state("__consumer_offsets", partition_for("fleet", 3)).leader
    assert (row.state, row.num_members, row.assignment_strategy, row.coordinator_id) == ("Stable", 2, "range",
                                                                                         coordinator)
    assert state.table().splitlines() == [
        "GROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE                #MEMBERS",
        f"fleet           {f'broker-{coordinator}  ({coordinator})':<25} range                Stable               2",
    ]

    # kafka-python's shapes: the subscription and assignment bytes come back decoded.
    (info,) = cluster.admin().describe_consumer_groups(["fleet"])
    assert isinstance(info, GroupInformation) and (info.group, info.state, info.protocol_type, info.protocol) == (
        "fleet", "Stable", "consumer", "range")
    assert all(isinstance(m, MemberInformation) for m in info.members)
    assert all(isinstance(m.member_metadata, Subscription) and m.member_metadata.topics == ("trucks",)
               for m in info.members)
    assert all(isinstance(m.member_assignment, Assignment) and len(m.member_assignment.partitions) == 2
               for m in info.members)
    assert info.authorized_operations is None
    as_dict = cluster.admin().describe_groups(["fleet"])["fleet"]  # kafka-python 3.0
    assert as_dict["group_state"] == "Stable" and len(as_dict["members"]) == 2

    # A third consumer joins: during the rebalance nobody owns anything, and the tool says so.
    new_consumer(cluster, "fleet", "trucks").poll(timeout_ms=50)
    rebalancing = cluster.consumer_groups.describe_members("fleet")
    assert rebalancing.state == "PreparingRebalance"
    assert rebalancing.table().startswith("Warning: Consumer group 'fleet' is rebalancing.\n\nGROUP ")
    assert [r.num_partitions for r in rebalancing.rows] == [0, 0, 0]


def test_eight_consumers_on_six_partitions_leave_two_members_idle(cluster):
    cluster.create_topic("gps", 6, 1)
    consumers = [new_consumer(cluster, "tracking", "gps") for _ in range(8)]
    settle(consumers)

    members = cluster.consumer_groups.describe_members("tracking")
    assert len(members.rows) == 8
    assert sorted(r.num_partitions for r in members.rows) == [0, 0, 1, 1, 1, 1, 1, 1]
    idle = {r.consumer_id for r in members.rows if r.num_partitions == 0}
    assert idle == {member_id(c) for c in consumers if not c.assignment()}

    # The offsets view lists partitions, not members: the idle two are not in it, and with
    # nothing committed CURRENT-OFFSET and LAG are '-'.
    report = cluster.consumer_groups.describe_group("tracking")
    assert sorted(r.partition for r in report.rows) == list(range(6))
    assert not idle & {r.consumer_id for r in report.rows}
    assert all(r.current_offset is None and r.lag is None and r.log_end_offset == 0 for r in report.rows)
    assert all(line.split()[3:6] == ["-", "0", "-"] for line in report.table().splitlines()[1:])
    assert cluster.consumer_groups.describe_state("tracking").rows[0].num_members == 8


# --- kafka-consumer-groups --reset-offsets -------------------------------------------------------------


@pytest.fixture
def drained(cluster):
    """Group "billing" read all 10 records of each partition of "invoices", committed, and left."""
    cluster.create_topic("invoices", 2, 2)
    produce(cluster, "invoices", 10, 2)
    consumer = new_consumer(cluster, "billing", "invoices")
    consume(consumer, 20)
    consumer.commit()
    consumer.close()
    return cluster


def committed(cluster, group):
    offsets = cluster.admin().list_consumer_group_offsets(group)
    return {(tp.topic, tp.partition): om.offset for tp, om in offsets.items()}


def plan(result):
    return {(r.topic, r.partition): r.new_offset for r in result.rows}


def test_reset_offsets_dry_run_changes_nothing_and_execute_moves_a_restarted_consumer(drained):
    cluster = drained
    groups = cluster.consumer_groups
    empty = groups.describe_group("billing")
    assert empty.state == "Empty" and empty.notice == "Consumer group 'billing' has no active members."
    assert empty.table().startswith("Consumer group 'billing' has no active members.\n\nGROUP ")
    assert [(r.partition, r.current_offset, r.lag, r.consumer_id) for r in empty.rows] == [
        (0, 10, 0, None), (1, 10, 0, None)]  # from the committed offsets alone: CONSUMER-ID '-'

    assert empty.table().splitlines()[-1].split() == ["billing", "invoices", "1", "10", "10", "0", "-", "-", "-"]

    dry = groups.reset_offsets("billing", "invoices", to_earliest=True)
    assert not dry.executed and plan(dry) == {("invoices", 0): 0, ("invoices", 1): 0}
    assert dry.table().splitlines() == ["GROUP           TOPIC           PARTITION  NEW-OFFSET",
                                        "billing         invoices        0          0",
                                        "billing         invoices        1          0"]
    assert committed(cluster, "billing") == {("invoices", 0): 10, ("invoices", 1): 10}  # a dry run

    assert plan(groups.reset_offsets("billing", "invoices:1", to_offset=3, execute=True)) == {("invoices", 1): 3}
    assert committed(cluster, "billing") == {("invoices", 0): 10, ("invoices", 1): 3}
    assert plan(groups.reset_offsets("billing", "invoices", shift_by=-2)) == {("invoices", 0): 8, ("invoices", 1): 1}
    # Clamped into [log start, log end], as Kafka does.
    assert plan(groups.reset_offsets("billing", "invoices", shift_by=-5)) == {("invoices", 0): 5, ("invoices", 1): 0}
    assert plan(groups.reset_offsets("billing", "invoices", shift_by=+50)) == {("invoices", 0): 10,
                                                                               ("invoices", 1): 10}
    assert plan(groups.reset_offsets("billing", "invoices", to_offset=99)) == {("invoices", 0): 10,
                                                                               ("invoices", 1): 10}
    assert plan(groups.reset_offsets("billing", "invoices", to_offset=-4)) == {("invoices", 0): 0, ("invoices", 1): 0}
    assert plan(groups.reset_offsets("billing", all_topics=True, to_current=True)) == {("invoices", 0): 10,
                                                                                       ("invoices", 1): 3}
    groups.reset_offsets("billing", "invoices", to_latest=True, execute=True)
    assert committed(cluster, "billing") == {("invoices", 0): 10, ("invoices", 1): 10}

    executed = groups.reset_offsets("billing", [TopicPartition("invoices", 0), "invoices:1"], to_offset=4,
                                    execute=True)
    assert executed.executed and committed(cluster, "billing") == {("invoices", 0): 4, ("invoices", 1): 4}
    report = groups.describe_group("billing")
    assert [(r.current_offset, r.lag) for r in report.rows] == [(4, 6), (4, 6)]

    # A consumer of the group starting now resumes exactly there.
    restarted = new_consumer(cluster, "billing", "invoices")
    first = {}
    for _ in range(50):
        for tp, rs in restarted.poll(timeout_ms=100).items():
            first.setdefault(tp.partition, rs[0].offset)
        if len(first) == 2:
            break
    assert first == {0: 4, 1: 4}


def test_reset_offsets_to_datetime_uses_record_timestamps(cluster):
    cluster.create_topic("events", 2, 1)
    produce(cluster, "events", 10, 2, timestamps=[1000 * i for i in range(10)])  # record i at i seconds
    consumer = new_consumer(cluster, "audit", "events")
    consume(consumer, 20)
    consumer.commit()
    consumer.close()
    groups = cluster.consumer_groups

    for when in ("1970-01-01T00:00:04", "1970-01-01T00:00:03.500Z", datetime(1970, 1, 1, 0, 0, 4),
                 datetime(1970, 1, 1, 1, 0, 4, tzinfo=timezone(timedelta(hours=1))), 3001, 4000):
        result = groups.reset_offsets("audit", "events", to_datetime=when)
        assert plan(result) == {("events", 0): 4, ("events", 1): 4}, when
        assert not result.warnings

    late = groups.reset_offsets("audit", "events", to_datetime=9001, execute=True)  # no record at/after it
    assert plan(late) == {("events", 0): 10, ("events", 1): 10}
    assert late.warnings == ["Warn: Partition 0 from topic events is empty. Falling back to latest known offset.",
                             "Warn: Partition 1 from topic events is empty. Falling back to latest known offset."]
    groups.reset_offsets("audit", "events:0", to_datetime=0, execute=True)
    assert committed(cluster, "audit") == {("events", 0): 0, ("events", 1): 10}

    # by_duration: records newer than "now minus the duration" (simulated now).
    cluster.advance(20_000 - cluster.now)
    now = cluster.now
    result = groups.reset_offsets("audit", "events", by_duration=timedelta(milliseconds=now - 7000))
    assert plan(result) == {("events", 0): 7, ("events", 1): 7}


def test_reset_and_alter_refused_while_the_group_is_active(cluster):
    cluster.create_topic("payments", 2, 1)
    produce(cluster, "payments", 5, 2)
    consumer = new_consumer(cluster, "ledger", "payments")
    consume(consumer, 6)
    consumer.commit()
    before = committed(cluster, "ledger")

    message = ("Assignments can only be reset if the group 'ledger' is inactive, but the current state is "
               "Stable.")
    for execute in (False, True):
        with pytest.raises(NonEmptyGroupError) as refused:
            cluster.consumer_groups.reset_offsets("ledger", "payments", to_earliest=True, execute=execute)
        assert message in str(refused.value)
    with pytest.raises(UnknownMemberIdError, match="group 'ledger' has active members"):
        cluster.admin().alter_consumer_group_offsets("ledger", {TopicPartition("payments", 0): 0})
    assert committed(cluster, "ledger") == before

    consumer.close()  # the group is empty now: the same reset goes through
    cluster.consumer_groups.reset_offsets("ledger", "payments", to_earliest=True, execute=True)
    assert committed(cluster, "ledger") == {("payments", 0): 0, ("payments", 1): 0}


def test_reset_offsets_rejects_bad_arguments(drained):
    groups = drained.consumer_groups
    with pytest.raises(IllegalArgumentError, match="exactly one strategy"):
        groups.reset_offsets("billing", "invoices")
    with pytest.raises(IllegalArgumentError, match=r"got \['to_earliest', 'to_offset'\]"):
        groups.reset_offsets("billing", "invoices", to_earliest=True, to_offset=3)
    with pytest.raises(IllegalArgumentError, match="One of the reset scopes"):
        groups.reset_offsets("billing", to_earliest=True)
    with pytest.raises(UnknownTopicOrPartitionError, match='The partitions "invoices-7" do not exist'):
        groups.reset_offsets("billing", "invoices:0,7", to_earliest=True)
    with pytest.raises(UnknownTopicOrPartitionError, match="topic 'nope' does not exist"):
        groups.reset_offsets("billing", "nope", to_earliest=True)
    with pytest.raises(IllegalArgumentError, match="Invalid partition 'x'"):
        groups.reset_offsets("billing", "invoices:x", to_earliest=True)
    with pytest.raises(IllegalArgumentError, match="to_datetime 'yesterday' is not an ISO 8601"):
        groups.reset_offsets("billing", "invoices", to_datetime="yesterday")
    with pytest.raises(IllegalArgumentError, match="to_offset must be an int"):
        groups.reset_offsets("billing", "invoices", to_offset="3")
    with pytest.raises(IllegalArgumentError, match="Cannot shift offset for partition invoices-0 since there is no "
                                                   "current committed offset"):
        groups.reset_offsets("fresh", "invoices", shift_by=1)
    with pytest.raises(InvalidGroupIdError):
        groups.reset_offsets("", "invoices", to_earliest=True)
    assert committed(drained, "billing") == {("invoices", 0): 10, ("invoices", 1): 10}


# --- --list, --delete, unknown groups ---------------------------------------------------------------------


def test_list_and_delete_groups(cluster):
    cluster.create_topic("clicks", 2, 1)
    produce(cluster, "clicks", 3, 2)
    active = new_consumer(cluster, "live", "clicks")
    consume(active, 6)
    active.commit()
    done = new_consumer(cluster, "finished", "clicks")
    consume(done, 6)
    done.commit()
    done.close()
    admin = cluster.admin()

    assert admin.list_consumer_groups() == [("finished", "consumer"), ("live", "consumer")]
    listing = cluster.consumer_groups.list_groups()
    assert listing.rows == [("finished", "Empty"), ("live", "Stable")] and listing.groups == ["finished", "live"]
    assert listing.table().splitlines() == ["GROUP                     STATE",
                                            "finished                  Empty",
                                            "live                      Stable"]
    assert cluster.consumer_groups.list_groups(states="stable").rows == [("live", "Stable")]
    assert [g["group_id"] for g in admin.list_groups(states_filter=["Empty"])] == ["finished"]  # kafka-python 3.0

    assert admin.delete_consumer_groups(["live"]) == [("live", NonEmptyGroupError)]
    with pytest.raises(NonEmptyGroupError, match="Group 'live' could not be deleted due to: NonEmptyGroupError: "
                                                 "The group is not empty."):
        cluster.consumer_groups.delete_groups("live")
    assert cluster.consumer_groups.delete_groups("finished") == \
        "Deletion of requested consumer groups ('finished') was successful."

    assert admin.list_consumer_groups() == [("live", "consumer")]
    assert admin.list_consumer_group_offsets("finished") == {}
    assert admin.describe_consumer_groups(["finished"])[0].state == "Dead"
    assert admin.delete_groups(["finished"]) == {"finished": "GroupIdNotFoundError"}  # kafka-python 3.0
    with pytest.raises(GroupIdNotFoundError, match="Consumer group 'finished' does not exist."):
        cluster.consumer_groups.describe_group("finished")

    active.close()
    assert admin.delete_consumer_groups(["live"]) == [("live", None)]
    assert admin.list_consumer_groups() == []


def test_unknown_group(cluster):
    cluster.create_topic("logs", 1, 1)
    groups = cluster.consumer_groups
    for view in (groups.describe_group, groups.describe_members, groups.describe_state):
        with pytest.raises(GroupIdNotFoundError, match="Consumer group 'ghost' does not exist."):
            view("ghost")
    (info,) = cluster.admin().describe_consumer_groups(["ghost"])
    assert (info.error_code, info.state, info.members) == (0, "Dead", [])  # what Kafka answers
    assert cluster.admin().list_consumer_group_offsets("ghost") == {}
    assert cluster.admin().list_consumer_group_offsets("ghost", partitions=[TopicPartition("logs", 0)]) == {
        TopicPartition("logs", 0): OffsetAndMetadata(-1, "", -1)}

    # Like Kafka, a group that does not exist yet may be given offsets: it then exists,
    # Empty, with no protocol type (no consumer ever joined it).
    groups.reset_offsets("ghost", "logs", to_latest=True, execute=True)
    assert cluster.admin().list_consumer_groups() == [("ghost", "")]
    assert groups.describe_state("ghost").state == "Empty"


# --- the admin client itself ------------------------------------------------------------------------------


def test_first_find_coordinator_creates_the_offsets_topic(cluster):
    admin = KafkaAdminClient(bootstrap_servers=cluster, client_id="ops")
    assert "__consumer_offsets" not in admin.list_topics()
    assert admin.list_consumer_group_offsets("anything") == {}  # FindCoordinator retried until it exists
    assert "__consumer_offsets" in admin.list_topics()
    (offsets_topic,) = admin.describe_topics(["__consumer_offsets"])
    assert offsets_topic["is_internal"] and len(offsets_topic["partitions"]) == 3
    assert admin.config["client_id"] == "ops"
    assert cluster.admin() is cluster.admin() and cluster.admin() is not admin
    command = ConsumerGroupCommand(cluster, request_timeout_ms=5000)  # its own admin client
    assert command.admin.config["request_timeout_ms"] == 5000 and command.list_groups().rows == []
    with pytest.raises(IllegalArgumentError, match="not both"):
        ConsumerGroupCommand(admin, request_timeout_ms=5000)


def test_configuration_errors_and_timeouts(cluster):
    with pytest.raises(KafkaConfigurationError, match="Unrecognized configs: \\['group_id'\\]"):
        KafkaAdminClient(bootstrap_servers=cluster, group_id="g")
    with pytest.raises(KafkaConfigurationError, match="bad bootstrap_servers entry 'localhost': expected host:port"):
        KafkaAdminClient(bootstrap_servers="localhost")  # a real address is host:port (tests/test_client_tcp.py)
    with pytest.raises(KafkaConfigurationError, match="request_timeout_ms must be an int >= 1"):
        KafkaAdminClient(bootstrap_servers=cluster, request_timeout_ms=0)
    with pytest.raises(IllegalArgumentError, match="write \\['g'\\]"):
        cluster.admin().describe_consumer_groups("g")

    admin = cluster.admin(request_timeout_ms=2000)
    cluster.partition([admin.node_id], cluster.broker_ids)
    start = cluster.now
    with pytest.raises(KafkaTimeoutError, match="ListGroups did not succeed within 2000 ms"):
        admin.list_consumer_groups()
    assert 2000 - 100 <= cluster.now - start <= 2000  # simulated time, not wall-clock time
    cluster.heal()
    assert admin.list_consumer_groups() == []
    admin.close()
    with pytest.raises(Exception, match="KafkaAdminClient is closed"):
        admin.list_consumer_groups()


def test_describe_follows_the_coordinator_when_its_broker_dies(cluster):
    cluster.create_topic("jobs", 2, 3)
    produce(cluster, "jobs", 4, 2)
    consumer = new_consumer(cluster, "workers", "jobs")
    consume(consumer, 8)
    consumer.commit()
    consumer.close()
    admin = cluster.admin()
    old = admin._coordinator_of("workers")
    assert cluster.consumer_groups.describe_state("workers").rows[0].coordinator_id == old

    cluster.kill(old)
    state = cluster.consumer_groups.describe_state("workers")  # NOT_COORDINATOR / refused -> find again
    assert state.rows[0].coordinator_id != old and state.state == "Empty"
    assert committed(cluster, "workers") == {("jobs", 0): 4, ("jobs", 1): 4}  # replayed from __consumer_offsets


def test_reset_then_restart_a_crashed_consumer_after_its_session_expired(cluster):
    cluster.create_topic("tasks", 2, 2)
    produce(cluster, "tasks", 10, 2)
    consumer = new_consumer(cluster, "runners", "tasks", session_timeout_ms=6000, heartbeat_interval_ms=2000)
    consume(consumer, 20)
    consumer.commit()
    cluster.kill_consumer(consumer)
    with pytest.raises(NonEmptyGroupError, match="the current state is Stable"):  # its session has not expired
        cluster.consumer_groups.reset_offsets("runners", "tasks", to_offset=3, execute=True)

    cluster.advance(6_100)  # the coordinator drops the silent member: the group is Empty
    assert cluster.consumer_groups.describe_state("runners").state == "Empty"
    cluster.consumer_groups.reset_offsets("runners", "tasks", to_offset=3, execute=True)
    cluster.restart_consumer(consumer)
    first = {}
    for _ in range(50):
        for tp, rs in consumer.poll(timeout_ms=100).items():
            first.setdefault(tp.partition, rs[0].offset)
        if len(first) == 2:
            break
    assert first == {0: 3, 1: 3}


def test_a_deleted_group_stays_deleted_after_coordinator_failover(cluster):
    cluster.create_topic("t", 1, 3)
    admin = cluster.admin()
    admin.alter_consumer_group_offsets("g", {TopicPartition("t", 0): 0})
    assert admin.delete_consumer_groups(["g"]) == [("g", None)]
    cluster.kill(admin._coordinator_of("g"))
    assert admin.describe_consumer_groups(["g"])[0].state == "Dead"  # is "Empty"
    assert admin.list_consumer_groups() == []  # is [("g", "")]
