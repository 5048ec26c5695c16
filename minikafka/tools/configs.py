"""``minikafka configs``: ``kafka-configs.sh`` for topics (describe, alter) over the Kafka protocol.

Theory of operation
-------------------
- ``--describe --entity-type topics [--entity-name T]``: DescribeConfigs; for each topic
  Kafka's header ``Dynamic configs for topic T are:`` and one line per override
  (``  retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000}``);
  ``--all`` lists every config, defaults included. Without ``--entity-name``, every topic.
- ``--alter --entity-type topics --entity-name T --add-config k=v[,k=v...]
  --delete-config k[,k...]``: IncrementalAlterConfigs (SET and DELETE operations), which
  the brokers apply to the running logs at once. Prints ``Completed updating config for
  topic T.`` as Kafka does. A value holding commas goes in square brackets, Kafka's rule:
  ``--add-config cleanup.policy=[compact,delete]``.

``--entity-type brokers --entity-name N`` (or ``--entity-default``: every broker) ``--alter``
changes the dynamic broker configs, which here are the topics' defaults (``retention.ms``,
``segment.bytes``, ``min.insync.replicas``, ``cleanup.policy``, ... with the topic-level names):
Kafka's ``log.retention.ms`` is written ``retention.ms``. Prints ``Completed updating config
for broker N.`` (``default config for brokers in the cluster`` with ``--entity-default``).
``--describe`` of brokers is not offered (every other broker config is static: ``--override``
at start). ``--topic T`` is
accepted for ``--entity-type topics --entity-name T`` as Kafka 3 accepts it. Failures print
Kafka's ``Error while executing config command with args ...``-style one line and exit 1.
"""

from __future__ import annotations

import argparse
from typing import Any

from .common import ToolError, UsageError, add_bootstrap, admin_client, one_line, run_tool

ERROR_PREFIX = "Error while executing config command : "


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "configs", help="kafka-configs: describe and alter topic configs",
        description="kafka-configs.sh over the Kafka protocol: describe or alter a topic's configs "
        "(retention.ms, segment.bytes, min.insync.replicas, cleanup.policy, ...) on a running cluster.")
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="list the configs of the given entity")
    action.add_argument("--alter", action="store_true", help="change the configs of the given entity")
    p.add_argument("--entity-type", choices=["topics", "brokers"], metavar="TYPE",
                   help="topics, or brokers (--alter only: the topics' defaults, e.g. retention.ms)")
    p.add_argument("--entity-name", metavar="NAME",
                   help="the topic's name (all topics with --describe if left out), or a broker's id")
    p.add_argument("--entity-default", action="store_true",
                   help="with --entity-type brokers: the cluster-wide default of every broker")
    p.add_argument("--topic", metavar="TOPIC", help="short for --entity-type topics --entity-name TOPIC")
    p.add_argument("--add-config", metavar="K=V,K=V",
                   help="configs to set, comma separated; a value with commas in [brackets]: "
                   "cleanup.policy=[compact,delete]")
    p.add_argument("--delete-config", metavar="K,K", help="configs to remove (back to the broker's default)")
    p.add_argument("--all", action="store_true", help="with --describe: every config, defaults included")
    p.set_defaults(run=run, _parser=p)


def run(args: argparse.Namespace) -> int:
    return run_tool(_run, args, ERROR_PREFIX)


def _run(args: argparse.Namespace) -> int:
    if args.topic is not None:
        if args.entity_name is not None or args.entity_type not in (None, "topics"):
            raise UsageError("--topic cannot be combined with --entity-type/--entity-name")
        args.entity_type, args.entity_name = "topics", args.topic
    if args.entity_type is None:
        raise UsageError("--entity-type topics is required (or --topic T)")
    if args.entity_type == "brokers":
        if args.describe:
            raise ToolError("--describe of brokers is not offered here: a broker's static configs are the "
                            "--override values it started with; --alter changes the dynamic ones")
        if args.entity_default == (args.entity_name is not None):
            raise UsageError("--entity-type brokers needs --entity-name N (one broker) or --entity-default (all)")
    elif args.entity_default:
        raise UsageError("--entity-default goes with --entity-type brokers")
    if args.alter and args.entity_name is None and not args.entity_default:
        raise UsageError("--alter needs --entity-name (or --topic)")
    if args.alter and not (args.add_config or args.delete_config):
        raise UsageError("--alter needs --add-config and/or --delete-config")
    if args.describe and (args.add_config or args.delete_config):
        raise UsageError("--add-config and --delete-config can only be used with --alter")
    admin = admin_client(args.bootstrap_server)
    try:
        return alter(admin, args) if args.alter else describe(admin, args)
    finally:
        admin.close()


def parse_add_config(text: str) -> dict[str, str]:
    """Kafka's ``--add-config`` syntax: ``k1=v1,k2=[v2a,v2b]``."""
    out: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        eq = text.find("=", i)
        if eq < 0:
            raise ToolError(f"--add-config {text!r}: {text[i:]!r} is not KEY=VALUE")
        key = text[i:eq].strip()
        if not key:
            raise ToolError(f"--add-config {text!r}: a config has no name")
        if eq + 1 < n and text[eq + 1] == "[":
            end = text.find("]", eq + 1)
            if end < 0:
                raise ToolError(f"--add-config {text!r}: '[' without its ']'")
            value, i = text[eq + 2:end], end + 1
            if i < n and text[i] != ",":
                raise ToolError(f"--add-config {text!r}: expected ',' after ']'")
            i += 1
        else:
            comma = text.find(",", eq + 1)
            comma = n if comma < 0 else comma
            value, i = text[eq + 1:comma], comma + 1
        out[key] = value.strip()
    return out


def alter(admin: Any, args: argparse.Namespace) -> int:
    from kafka.admin import ConfigResource, ConfigResourceType

    if args.entity_type == "brokers":
        name = "" if args.entity_default else args.entity_name
        rtype, what = ConfigResourceType.BROKER, ("default config for brokers in the cluster" if args.entity_default
                                                  else f"config for broker {name}")
    else:
        name, rtype, what = args.entity_name, ConfigResourceType.TOPIC, f"config for topic {args.entity_name}"
        if name not in admin.list_topics():
            raise ToolError(f"The topic '{name}' does not exist.")
    changes: dict[str, Any] = {k: ("SET", v) for k, v in parse_add_config(args.add_config or "").items()}
    for key in filter(None, (k.strip() for k in (args.delete_config or "").split(","))):
        if key in changes:
            raise ToolError(f"{key} is both added and deleted")
        changes[key] = ("DELETE", None)
    resource = ConfigResource(rtype, name, changes)
    if name == "":
        # kafka-python's alter_configs wants a broker id; Kafka's cluster-wide default is the
        # empty name, sent to any broker (which forwards it to the controller).
        request = admin._alter_configs_request([resource], False, True)
        response = admin._manager.run(admin._manager.send, request)
        result = admin._alter_configs_process_responses(response.responses)
    else:
        result = admin.alter_configs([resource], raise_on_unknown=False, incremental=True)
    outcome = next((v.get(name, "OK") for v in result.values() if isinstance(v, dict)), "OK")
    if outcome != "OK":
        raise ToolError(one_line(str(outcome)))
    print(f"Completed updating {what}.")
    return 0


def describe(admin: Any, args: argparse.Namespace) -> int:
    from kafka.admin import ConfigResource, ConfigResourceType

    topics = [args.entity_name] if args.entity_name else sorted(t for t in admin.list_topics())
    if args.entity_name and args.entity_name not in admin.list_topics():
        raise ToolError(f"The topic '{args.entity_name}' does not exist.")
    result = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in topics],
                                    config_filter="all")
    for topic in topics:
        entries = result.get("topic", {}).get(topic, {})
        shown = {k: e for k, e in sorted(entries.items())
                 if args.all or e.get("config_source") not in ("DEFAULT_CONFIG", None)}
        print(f"{'All' if args.all else 'Dynamic'} configs for topic {topic} are:")
        for key, entry in shown.items():
            source = entry.get("config_source") or "DEFAULT_CONFIG"
            print(f"  {key}={entry.get('value')} sensitive={str(bool(entry.get('is_sensitive'))).lower()} "
                  f"synonyms={{{source}:{key}={entry.get('value')}}}")
    return 0
