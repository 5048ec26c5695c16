"""``minikafka topics``: ``kafka-topics.sh`` (create, list, describe, delete) over the Kafka protocol.

Theory of operation
-------------------
One action per run, as in Kafka: ``--create``, ``--list``, ``--describe``, ``--alter`` or ``--delete``. Each
is one or two admin requests through kafka-python's ``KafkaAdminClient``:

- ``--create --topic T [--partitions N] [--replication-factor R] [--config k=v ...]``:
  CreateTopics. Without ``--partitions``/``--replication-factor`` the broker's defaults
  (``num.partitions``, ``default.replication.factor``) apply, as with Kafka (CreateTopics v4
  sends -1). ``--replica-assignment 1:2,2:3`` names each partition's replicas instead
  (partition 0 on brokers 1 and 2, its preferred leader 1; partition 1 on 2 and 3), which the
  controller judges as Kafka's does. Prints ``Created topic T.``; with ``--if-not-exists`` an
  existing topic is not an error. A name with '.' or '_' gets Kafka's warning about metric-name collisions.
- ``--list``: Metadata for every topic; the names, sorted, one per line.
- ``--describe``: Metadata plus DescribeConfigs; for each topic Kafka's header line
  (``Topic: T<TAB>TopicId: ...<TAB>PartitionCount: 3<TAB>ReplicationFactor: 1<TAB>Configs:
  ...``) and one line per partition (``<TAB>Topic: T<TAB>Partition: 0<TAB>Leader: 1<TAB>
  Replicas: 1<TAB>Isr: 1``). ``Configs`` lists the values that are not the broker's
  defaults (what Kafka calls ``!isDefault``). ``TopicId`` appears only when the broker sends
  topic ids (Metadata v10+); minikafka's brokers answer Metadata v8, which has none, and
  Kafka's tool leaves the column out in that case too. ``--under-replicated-partitions``,
  ``--unavailable-partitions``, ``--under-min-isr-partitions`` and
  ``--at-min-isr-partitions`` print only the partitions that match, without header lines.
- ``--alter --topic T --partitions N``: CreatePartitions, T grows to N partitions in total
  (only ever more: Kafka's INVALID_PARTITIONS otherwise); prints nothing on success.
- ``--delete --topic T``: DeleteTopics; prints nothing on success (Kafka 3.x does not).

``--topic`` is a regular expression for ``--list``, ``--describe`` and ``--delete`` (Kafka's
rule: the whole name must match), a plain name for ``--create``. A topic that is not there is
the error ``Topic 'T' does not exist as expected`` unless ``--if-exists`` is given.

Failures print ``Error while executing topic command : <why>`` on stderr (Kafka's prefix) and
exit 1: an existing topic, an unknown one, a broker's refusal (its own message), no broker
reachable.
"""

from __future__ import annotations

import argparse
import base64
import re
from typing import Any

from .common import ToolError, UsageError, add_bootstrap, admin_client, one_line, parse_properties, run_tool

ERROR_PREFIX = "Error while executing topic command : "
COLLISION_WARNING = ("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') "
                     "could collide. To avoid issues it is best to use either, but not both.")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
MAX_REPLICATION_FACTOR = 32767  # a short on the wire


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "topics", help="kafka-topics: create, list, describe and delete topics",
        description="kafka-topics.sh over the Kafka protocol: create, list, describe or delete topics "
        "on minikafka's brokers or a real Kafka.")
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true", help="create a new topic")
    action.add_argument("--list", action="store_true", help="list all available topics")
    action.add_argument("--describe", action="store_true", help="list details for the given topics")
    action.add_argument("--delete", action="store_true", help="delete a topic")
    action.add_argument("--alter", action="store_true",
                        help="add partitions to a topic: --alter --topic T --partitions N (N: the new total)")
    p.add_argument("--topic", metavar="TOPIC",
                   help="the topic to create, describe or delete; a regular expression except with --create")
    p.add_argument("--partitions", type=int, metavar="N",
                   help="the number of partitions of the topic (default: the broker's num.partitions)")
    p.add_argument("--replication-factor", type=int, metavar="N",
                   help="the replication factor of each partition (default: the broker's "
                   "default.replication.factor)")
    p.add_argument("--replica-assignment", metavar="B:B,B:B",
                   help="explicit replicas per partition: partitions separated by ',', their brokers by ':' "
                   "(instead of --partitions and --replication-factor)")
    p.add_argument("--config", action="append", metavar="KEY=VALUE",
                   help="a topic config override (e.g. cleanup.policy=compact); repeatable")
    p.add_argument("--if-not-exists", action="store_true",
                   help="with --create: do nothing if the topic already exists")
    p.add_argument("--if-exists", action="store_true",
                   help="with --describe or --delete: do nothing if the topic does not exist")
    p.add_argument("--exclude-internal", action="store_true",
                   help="leave internal topics (__consumer_offsets) out of --list and --describe")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="with --describe: only partitions whose ISR is smaller than their replica set")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="with --describe: only partitions without a leader")
    p.add_argument("--under-min-isr-partitions", action="store_true",
                   help="with --describe: only partitions whose ISR is smaller than min.insync.replicas")
    p.add_argument("--at-min-isr-partitions", action="store_true",
                   help="with --describe: only partitions whose ISR is exactly min.insync.replicas")
    p.set_defaults(run=run, _parser=p)


def run(args: argparse.Namespace) -> int:
    return run_tool(_run, args, ERROR_PREFIX)


def _run(args: argparse.Namespace) -> int:
    _check_flags(args)
    admin = admin_client(args.bootstrap_server)
    try:
        if args.create:
            return create(admin, args)
        if args.list:
            return list_topics(admin, args)
        if args.describe:
            return describe(admin, args)
        if args.alter:
            return alter(admin, args)
        return delete(admin, args)
    finally:
        admin.close()


def _partition_filters(args: argparse.Namespace) -> bool:
    return (args.under_replicated_partitions or args.unavailable_partitions or args.under_min_isr_partitions
            or args.at_min_isr_partitions)


def _check_flags(args: argparse.Namespace) -> None:
    """Kafka's option checks (TopicCommandOptions.checkArgs), with its wording where it has one."""
    if (args.create or args.delete or args.alter) and not args.topic:
        raise UsageError(f"--{'create' if args.create else 'delete' if args.delete else 'alter'} needs --topic")
    if args.alter and args.partitions is None:
        raise UsageError("--alter needs --partitions: the new total number of partitions (configs: minikafka configs "
                         "--entity-type topics --entity-name T --alter --add-config k=v)")
    if not args.create:
        for flag, given in (("--partitions", args.partitions is not None and not args.alter),
                            ("--replication-factor", args.replication_factor is not None),
                            ("--replica-assignment", args.replica_assignment is not None),
                            ("--config", bool(args.config)), ("--if-not-exists", args.if_not_exists)):
            if given:
                raise UsageError(f"{flag} can only be used with --create")
    if args.create and args.if_exists:
        raise UsageError("--if-exists can only be used with --describe or --delete")
    if _partition_filters(args) and not args.describe:
        raise UsageError("the --*-partitions filters can only be used with --describe")
    if args.replica_assignment is not None and (args.partitions is not None or args.replication_factor is not None):
        raise UsageError("--replica-assignment can't be used with --partitions or --replication-factor")


# --- --create --------------------------------------------------------------------------------------------


def _replica_assignment(text: str) -> dict[int, list[int]]:
    """Kafka's ``--replica-assignment 1:2,2:3``: partition 0 on brokers 1 and 2, partition 1 on 2 and 3."""
    out: dict[int, list[int]] = {}
    for partition, replicas in enumerate(text.split(",")):
        try:
            brokers = [int(b) for b in replicas.split(":")]
        except ValueError:
            raise ToolError(f"--replica-assignment {text!r}: partition {partition}'s replicas {replicas!r} are not "
                            "broker ids separated by ':'") from None
        if len(set(brokers)) != len(brokers):
            raise ToolError(f"Partition replica lists may not contain duplicate entries: {replicas}")
        out[partition] = brokers
    if len({len(b) for b in out.values()}) > 1:
        raise ToolError(f"--replica-assignment {text!r}: every partition needs the same number of replicas")
    return out


def create(admin: Any, args: argparse.Namespace) -> int:
    import kafka.errors as Errors

    topic = args.topic
    if args.replication_factor is not None and not 1 <= args.replication_factor <= MAX_REPLICATION_FACTOR:
        raise ToolError(f"The replication factor must be between 1 and {MAX_REPLICATION_FACTOR} inclusive")
    if args.partitions is not None and args.partitions < 1:
        raise ToolError("The partitions must be greater than 0")
    try:
        configs = parse_properties(args.config, "--config")
    except UsageError:
        raise ToolError('Invalid topic config: all configs to be added must be in the format "key=val".') from None
    spec: dict[str, Any] = {"configs": configs}
    if args.replica_assignment is not None:
        spec["assignments"] = _replica_assignment(args.replica_assignment)
    else:
        spec["num_partitions"] = -1 if args.partitions is None else args.partitions
        spec["replication_factor"] = -1 if args.replication_factor is None else args.replication_factor
    if "." in topic or "_" in topic:
        print(COLLISION_WARNING)
    result = admin.create_topics({topic: spec}, raise_errors=False)
    for entry in result["topics"]:
        error = Errors.for_code(entry["error_code"])
        if error is Errors.NoError:
            continue
        if error is Errors.TopicAlreadyExistsError:
            if args.if_not_exists:
                return 0
            raise ToolError(f"Topic '{topic}' already exists.")
        raise ToolError(_broker_message(error, entry.get("error_message")))
    print(f"Created topic {topic}.")
    return 0


def _broker_message(error: Any, message: str | None) -> str:
    """A broker's refusal as Kafka's tool shows it: the broker's own message if it sent one
    (without a "[Error 17] INVALID_TOPIC_EXCEPTION:" prefix), else the error's description."""
    text = one_line(message or "")
    text = re.sub(r"^\[Error -?\d+\] [A-Z_]+: ", "", text)
    return text or f"{error.__name__}: {error.description}"


# --- --alter ----------------------------------------------------------------------------------------------


def alter(admin: Any, args: argparse.Namespace) -> int:
    """CreatePartitions: each topic ``--topic`` matches grows to ``--partitions`` in total.
    Prints nothing on success, as Kafka 3.x does. Partitions are only ever added; keys
    written before keep their partition, new records of a key may hash to another one."""
    import kafka.errors as Errors

    if args.partitions < 1:
        raise ToolError("The partitions must be greater than 0")
    for topic in _topics(admin, args, must_exist=True):
        if _is_internal(topic):
            raise ToolError(f"The number of partitions for the internal topic {topic['name']} cannot be changed")
        try:
            admin.create_partitions({topic["name"]: args.partitions})
        except Errors.BrokerResponseError as exc:
            raise ToolError(_broker_message(type(exc), str(exc.args[0]) if exc.args else None)) from None
    return 0


# --- --list, --describe, --delete ----------------------------------------------------------------------


def _topics(admin: Any, args: argparse.Namespace, *, must_exist: bool) -> list[dict]:
    """The topics ``--topic`` selects (all without it), sorted by name, as kafka-python's
    ``describe_topics`` describes them."""
    pattern = None
    if args.topic:
        try:
            pattern = re.compile(args.topic)
        except re.error as exc:
            raise ToolError(f"--topic {args.topic!r} is not a valid regular expression: {exc}") from None
    found = [t for t in admin.describe_topics() if t["error_code"] == 0]
    chosen = [t for t in found if (pattern is None or pattern.fullmatch(t["name"]))
              and not (args.exclude_internal and _is_internal(t))]
    if args.topic and not chosen and must_exist and not args.if_exists:
        raise ToolError(f"Topic '{args.topic}' does not exist as expected")
    return sorted(chosen, key=lambda t: t["name"])


def _is_internal(topic: dict) -> bool:
    return bool(topic.get("is_internal")) or topic["name"] in INTERNAL_TOPICS


def list_topics(admin: Any, args: argparse.Namespace) -> int:
    for topic in _topics(admin, args, must_exist=False):
        print(topic["name"])
    return 0


def _topic_id(topic: dict) -> str | None:
    """Kafka's text for a topic id (URL-safe base64 of its 16 bytes), or None for none/zero."""
    raw = topic.get("topic_id")
    if raw is None:
        return None
    data = getattr(raw, "bytes", raw)
    if not isinstance(data, (bytes, bytearray)) or not any(data):
        return None
    return base64.urlsafe_b64encode(bytes(data)).rstrip(b"=").decode()


def _configs(admin: Any, names: list[str]) -> dict[str, dict[str, dict]]:
    """Every config of each topic, as DescribeConfigs returns them (with their source)."""
    from kafka.admin import ConfigResource, ConfigResourceType

    if not names:
        return {}
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n) for n in names],
                                       config_filter="all")
    return described.get("topic", {})


def describe(admin: Any, args: argparse.Namespace) -> int:
    topics = _topics(admin, args, must_exist=True)
    configs = _configs(admin, [t["name"] for t in topics])
    only_partitions = _partition_filters(args)
    for topic in topics:
        name = topic["name"]
        entries = configs.get(name, {})
        partitions = sorted(topic["partitions"], key=lambda p: p["partition_index"])
        if not only_partitions:
            shown = ",".join(f"{k}={c['value']}" for k, c in entries.items()
                             if c.get("config_source") != "DEFAULT_CONFIG" and c.get("value") is not None)
            rf = len(partitions[0]["replica_nodes"]) if partitions else 0
            topic_id = _topic_id(topic)
            print(f"Topic: {name}" + (f"\tTopicId: {topic_id}" if topic_id else "")
                  + f"\tPartitionCount: {len(partitions)}\tReplicationFactor: {rf}\tConfigs: {shown}")
        try:
            min_isr = int(entries.get("min.insync.replicas", {}).get("value") or 1)
        except ValueError:
            min_isr = 1
        for p in partitions:
            isr, replicas, leader = p["isr_nodes"], p["replica_nodes"], p["leader_id"]
            if only_partitions and not (
                    (args.under_replicated_partitions and len(isr) < len(replicas))
                    or (args.unavailable_partitions and leader < 0)
                    or (args.under_min_isr_partitions and len(isr) < min_isr)
                    or (args.at_min_isr_partitions and len(isr) == min_isr)):
                continue
            print(f"\tTopic: {name}\tPartition: {p['partition_index']}"
                  f"\tLeader: {leader if leader >= 0 else 'none'}"
                  f"\tReplicas: {','.join(map(str, replicas))}\tIsr: {','.join(map(str, isr))}")
    return 0


def delete(admin: Any, args: argparse.Namespace) -> int:
    import kafka.errors as Errors

    topics = _topics(admin, args, must_exist=True)
    for topic in topics:
        if _is_internal(topic):
            raise ToolError(f"Topic {topic['name']} is a kafka internal topic and is not allowed to be marked "
                            "for deletion.")
    if not topics:
        return 0
    result = admin.delete_topics([t["name"] for t in topics], raise_errors=False)
    for entry in result["topics"]:
        error = Errors.for_code(entry["error_code"])
        if error is Errors.UnknownTopicOrPartitionError and args.if_exists:
            continue  # deleted meanwhile
        if error is not Errors.NoError:
            raise ToolError(_broker_message(error, entry.get("error_message"))
                            if entry.get("error_message") else
                            f"Topic '{entry['name']}' could not be deleted: {error.__name__}: {error.description}")
    return 0
