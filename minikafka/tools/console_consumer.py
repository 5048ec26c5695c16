"""``minikafka console-consumer``: ``kafka-console-consumer.sh`` over the Kafka protocol.

Theory of operation
-------------------
A kafka-python ``KafkaConsumer`` that prints each record's value on its own line (and, with
``--property print.key=true`` and friends, its key, timestamp, partition, offset, headers in
Kafka's ``DefaultMessageFormatter`` layout) until one of: ``--max-messages N`` records were
printed; no record came for ``--timeout-ms`` ms; Ctrl-C or SIGTERM. Then it closes the consumer
(which commits what it printed, if auto-commit is on) and prints ``Processed a total of N
messages`` on stderr, as Kafka's tool does; exit code 0 in each case, as Kafka's.

Which records, and which group:

- ``--topic T`` (or ``--include REGEX``, the whole name must match) subscribes as a member of
  a consumer group: ``--group G``, or else, as Kafka's tool does, a generated
  ``console-consumer-<random 0..99999>`` group with ``enable.auto.commit=false`` (an
  anonymous reader's offsets are not meant to be reused, so it commits none; the group
  still shows in ``consumer-groups --list`` while it runs). It starts at the group's
  committed offsets; where there are none, at the end, or at the beginning with
  ``--from-beginning`` (which sets ``auto.offset.reset=earliest``, nothing more: a group
  that has committed offsets resumes from them).
- ``--partition P [--offset earliest|latest|N]`` reads one partition by assignment, no group
  membership (and no group at all unless ``--group`` is given, to commit to): a generated
  group would never be used, since the consumer seeks to ``--offset`` itself (default
  latest, or earliest with ``--from-beginning``).

Consumer settings use Kafka's names (``--consumer-property``, ``--consumer.config``), mapped
to kafka-python's keyword arguments by ``minikafka.tools.common.CONSUMER_PROPERTIES``.
Keys and values are printed as UTF-8 text (invalid bytes replaced), null as ``null``.
"""

from __future__ import annotations

import argparse
import random
import re
import signal
import sys
import threading
from typing import Any

from .common import (
    CONSUMER_PROPERTIES,
    ToolError,
    UsageError,
    add_bootstrap,
    check_reachable,
    client_configs,
    make_client,
    merged_properties,
    parse_properties,
    run_tool,
)

ERROR_PREFIX = "Error: "
# DefaultMessageFormatter's --property names and defaults.
FORMATTER_DEFAULTS = {
    "print.timestamp": "false", "print.key": "false", "print.offset": "false", "print.partition": "false",
    "print.headers": "false", "print.value": "true", "key.separator": "\t", "line.separator": "\n",
    "headers.separator": ",", "null.literal": "null",
}
_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "console-consumer", help="kafka-console-consumer: print a topic's records",
        description="kafka-console-consumer.sh over the Kafka protocol: print the records of a topic, "
        "one value per line.")
    add_bootstrap(p)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--topic", help="the topic to consume")
    source.add_argument("--include", "--whitelist", dest="include", metavar="REGEX",
                        help="consume every topic whose whole name matches REGEX")
    p.add_argument("--group", help="the consumer group (default: a generated console-consumer-<n>)")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the earliest offset where the group has no committed offset")
    p.add_argument("--max-messages", type=int, metavar="N", help="exit after N records (default: never)")
    p.add_argument("--timeout-ms", type=int, metavar="MS",
                   help="exit when no record has come for MS milliseconds (default: never)")
    p.add_argument("--partition", type=int, metavar="P", help="read only this partition (no group membership)")
    p.add_argument("--offset", default=None, metavar="OFFSET",
                   help="with --partition: earliest, latest or an offset >= 0 (default: latest)")
    p.add_argument("--property", action="append", metavar="KEY=VALUE",
                   help="output format: print.key, print.value, print.timestamp, print.partition, print.offset, "
                   "print.headers, key.separator, line.separator, headers.separator, null.literal; repeatable")
    p.add_argument("--consumer-property", action="append", metavar="KEY=VALUE",
                   help="a consumer config, Kafka's name (auto.offset.reset, max.poll.records, ...); repeatable")
    p.add_argument("--consumer.config", dest="consumer_config", metavar="FILE",
                   help="a properties file of consumer configs (--consumer-property wins over it)")
    p.add_argument("--isolation-level", choices=["read_uncommitted", "read_committed"],
                   help="read_committed skips records of aborted transactions (default: read_uncommitted)")
    p.set_defaults(run=run, _parser=p)


def run(args: argparse.Namespace) -> int:
    return run_tool(_run, args, ERROR_PREFIX)


class Formatter:
    """Kafka's ``DefaultMessageFormatter``: timestamp, partition, offset, headers, key, value,
    each followed by ``key.separator`` if another field follows, the last by ``line.separator``."""

    def __init__(self, props: dict[str, str]) -> None:
        unknown = sorted(set(props) - set(FORMATTER_DEFAULTS))
        if unknown:
            raise ToolError(f"unknown --property {unknown[0]!r}; the console consumer's are: "
                            f"{', '.join(FORMATTER_DEFAULTS)}")
        merged = {**FORMATTER_DEFAULTS, **props}
        flags = {}
        for name, value in merged.items():
            if name.startswith("print."):
                if value.strip().lower() not in ("true", "false"):
                    raise ToolError(f"--property {name}={value!r}: expected true or false")
                flags[name] = value.strip().lower() == "true"
        self.fields = [f for f in ("timestamp", "partition", "offset", "headers", "key", "value")
                       if flags[f"print.{f}"]]
        self.key_separator = merged["key.separator"]
        self.line_separator = merged["line.separator"]
        self.headers_separator = merged["headers.separator"]
        self.null = merged["null.literal"]

    def _text(self, data: bytes | None) -> str:
        return self.null if data is None else data.decode("utf-8", "replace")

    def _field(self, name: str, record: Any) -> str:
        if name == "timestamp":
            kind = _TIMESTAMP_TYPES.get(record.timestamp_type)
            return f"{kind}:{record.timestamp}" if kind else "NO_TIMESTAMP"
        if name == "partition":
            return f"Partition:{record.partition}"
        if name == "offset":
            return f"Offset:{record.offset}"
        if name == "headers":
            if not record.headers:
                return "NO_HEADERS"
            return self.headers_separator.join(f"{k}:{self._text(v)}" for k, v in record.headers)
        return self._text(record.key if name == "key" else record.value)

    def format(self, record: Any) -> str:
        if not self.fields:
            return ""
        cells = [self._field(name, record) for name in self.fields]
        return self.key_separator.join(cells) + self.line_separator


def _start_offset(text: str | None, from_beginning: bool) -> str | int:
    if text is None:
        return "earliest" if from_beginning else "latest"
    low = text.strip().lower()
    if low in ("earliest", "latest"):
        return low
    if low.isdigit():
        return int(low)
    raise UsageError(f"--offset must be earliest, latest or a non-negative number, not {text!r}")


def consumer_configs(args: argparse.Namespace) -> dict[str, Any]:
    """kafka-python keyword arguments: the config file, --consumer-property, then the flags."""
    props = merged_properties(args.consumer_config, "--consumer.config", args.consumer_property,
                              "--consumer-property")
    groups = {g for g in (args.group, props.get("group.id")) if g}
    if len(groups) > 1:
        raise UsageError("The group ids provided in different places (directly using '--group', via "
                         "'--consumer-property', or via '--consumer.config') do not match. Detected group ids: "
                         + ", ".join(f"'{g}'" for g in sorted(groups)))
    reset = props.get("auto.offset.reset")
    if args.from_beginning:
        if reset is not None and reset.strip().lower() != "earliest":
            raise UsageError(f"Can't simultaneously specify --from-beginning and 'auto.offset.reset={reset}'")
        props["auto.offset.reset"] = "earliest"
    props.setdefault("auto.offset.reset", "latest")
    if args.isolation_level:
        props["isolation.level"] = args.isolation_level
    if groups:
        props["group.id"] = groups.pop()
    elif args.partition is None:  # with --partition: no group (see the module's docstring)
        props["group.id"] = f"console-consumer-{random.randrange(100_000)}"
        props.setdefault("enable.auto.commit", "false")  # Kafka's tool: its generated group commits nothing
    return client_configs(props, CONSUMER_PROPERTIES, "consumer")


def _run(args: argparse.Namespace) -> int:
    from kafka import KafkaConsumer, TopicPartition

    if args.partition is not None:
        if args.topic is None:
            raise UsageError("The topic is required when partition is specified.")
        if args.partition < 0:
            raise UsageError(f"--partition must be >= 0, not {args.partition}")
        if args.from_beginning and args.offset is not None:
            raise UsageError("Options from-beginning and offset cannot be specified together.")
    elif args.offset is not None:
        raise UsageError("The partition is required when offset is specified.")
    for flag, value in (("--max-messages", args.max_messages), ("--timeout-ms", args.timeout_ms)):
        if value is not None and value < 0:
            raise UsageError(f"{flag} must be >= 0, not {value}")
    if args.include is not None:
        try:
            re.compile(args.include)
        except re.error as exc:
            raise UsageError(f"--include {args.include!r} is not a valid regular expression: {exc}") from None
    start = _start_offset(args.offset, args.from_beginning) if args.partition is not None else None
    formatter = Formatter(parse_properties(args.property, "--property"))
    configs = consumer_configs(args)
    if args.timeout_ms is not None:
        configs["consumer_timeout_ms"] = args.timeout_ms
    check_reachable(args.bootstrap_server)
    consumer = make_client(KafkaConsumer, "consumer", bootstrap_servers=args.bootstrap_server, **configs)
    count = 0
    restore = _sigterm_as_interrupt()
    try:
        if args.partition is not None:
            tp = TopicPartition(args.topic, args.partition)
            consumer.assign([tp])
            if start == "earliest":
                consumer.seek_to_beginning(tp)
            elif start == "latest":
                consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, start)
        elif args.include is not None:
            consumer.subscribe(pattern=f"(?:{args.include})\\Z")  # kafka-python uses re.match: a prefix
        else:
            consumer.subscribe([args.topic])
        if args.max_messages == 0:
            return 0
        for record in consumer:
            sys.stdout.write(formatter.format(record))
            sys.stdout.flush()
            count += 1
            if args.max_messages is not None and count >= args.max_messages:
                break
        if (args.timeout_ms is not None and count == 0 and args.partition is None
                and not consumer.assignment()):
            # Silence would look like an empty topic: say the group never got its partitions.
            print(f"The consumer was still joining group '{configs['group_id']}' when --timeout-ms "
                  f"{args.timeout_ms} ran out: no partitions assigned yet, so nothing was read (a new group "
                  "waits group.initial.rebalance.delay.ms, 3000 ms in Kafka, before its first assignment); "
                  "try a longer --timeout-ms", file=sys.stderr)
    except KeyboardInterrupt:
        pass
    finally:
        restore()
        try:
            consumer.close()  # commits the printed records' offsets when auto-commit is on
        finally:
            print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def _sigterm_as_interrupt():
    """Let SIGTERM end the loop like Ctrl-C (Kafka's shutdown hook), so the consumer leaves its
    group and commits; returns the function that restores the previous handler."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    return lambda: signal.signal(signal.SIGTERM, previous)
