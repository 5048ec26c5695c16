"""What the Kafka command-line tools share: bootstrap checks, client properties, errors, retries.

Theory of operation
-------------------
Each tool (``topics``, ``console-producer``, ``console-consumer``, ``consumer-groups``) is a
protocol client built on kafka-python, so it works against minikafka's broker processes and
against a real Kafka alike. This module holds the parts they have in common:

- ``run_tool(body, args, prefix)`` runs a tool's body and turns every failure into Kafka's
  one-line report on stderr (``Error while executing topic command : ...`` for ``topics``,
  ``Error: ...`` for the others) and exit code 1; a traceback is never the answer to bad input
  or a refused connection. Usage mistakes the parser cannot see (``--offset`` without
  ``--partition``) go through ``usage_error`` and exit 2, as argparse's own do.
- ``check_reachable(servers)`` opens a TCP connection to each bootstrap address before any
  client is made: kafka-python would otherwise retry a refused connection for 30 s and then
  say only "Unable to bootstrap"; here "nothing listens on 127.0.0.1:9092" comes at once.
- ``client_configs(props, PRODUCER_PROPERTIES, "producer")`` maps Kafka's dotted config names
  (``linger.ms``, ``enable.idempotence``) to kafka-python's keyword arguments (``linger_ms``,
  ``enable_idempotence``), converting each value from its text. A name kafka-python has no
  equivalent for, or a typo, is refused with the list of names that work, rather than passed
  on to fail later (or, worse, be ignored).
- ``retrying(call)`` repeats a call that failed with a retriable error (the group coordinator
  not known yet, ``__consumer_offsets`` being created): Kafka's own admin client retries
  those until its timeout, kafka-python 3.0's raises them at once.
- ``quiet_kafka_logs()``: kafka-python logs every dropped connection at ERROR; the tools
  report failures themselves, once, so its loggers are silenced while a tool runs (and
  restored after, for callers of ``minikafka.cli.main`` in a notebook or a test).

kafka-python is imported lazily (it is in the ``course`` and ``dev`` extras, not a core
dependency): ``minikafka --help`` works without it, and a tool run without it says how to
install it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from minikafka.clients.bootstrap import parse_addresses

BOOTSTRAP_TIMEOUT_MS = 10_000  # the brokers accept connections but say nothing: give up after this
RETRY_TIMEOUT_S = 30.0  # how long retrying() keeps trying (Kafka's default.api.timeout.ms is 60 s)
RETRY_BACKOFF_S = 0.2


class ToolError(Exception):
    """A failure the tool reports as one line (its message) and exit code 1."""


class UsageError(Exception):
    """Flags that do not go together; reported like argparse's own errors (exit 2)."""


# --- running a tool ------------------------------------------------------------------------------------


def need_kafka_python() -> None:
    try:
        import kafka  # noqa: F401
    except ImportError:
        raise ToolError("the Kafka tools are protocol clients built on kafka-python, which is not installed: "
                        "pip install 'kafka-python==3.0.12' (or the course extra: pip install -e '.[course]')"
                        ) from None


@contextlib.contextmanager
def quiet_kafka_logs() -> Iterator[None]:
    logger = logging.getLogger("kafka")  # its modules' loggers (kafka.net.*, ...) inherit this level
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def describe_error(exc: BaseException) -> str:
    """A kafka-python exception as one readable line: its class and what went wrong, without
    the request and response reprs kafka-python puts in its messages."""
    name = type(exc).__name__
    text = str(exc.args[0]) if exc.args else ""
    if "Request '" in text or "failed with response" in text or len(text) > 300:
        text = getattr(exc, "description", "") or ""
    text = one_line(text)
    prefix = f"[Error {getattr(exc, 'errno', '')}] {name}: "
    if text.startswith(prefix):
        text = text[len(prefix):]
    if not text:
        text = one_line(getattr(exc, "description", "") or "")
    return f"{name}: {text}" if text else name


def run_tool(body: Callable[[Any], int], args: Any, prefix: str) -> int:
    """Run ``body(args)``; report a failure as ``prefix + message`` on stderr, exit code 1."""
    stop = resolve_bootstrap(args)
    if stop is not None:
        return stop
    try:
        need_kafka_python()
        with quiet_kafka_logs():
            return body(args)
    except UsageError as exc:
        args._parser.error(str(exc))  # exits 2, with the subcommand's usage line
    except ToolError as exc:
        print(f"{prefix}{one_line(str(exc))}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `minikafka console-consumer ... | head`: the reader left
        _silence_stdout()
        return 0
    except Exception as exc:  # a kafka-python error we did not translate: still one line
        import kafka.errors

        if not isinstance(exc, (kafka.errors.KafkaError, OSError)):
            raise  # a bug of ours: keep its traceback
        print(f"{prefix}{describe_error(exc)}", file=sys.stderr)
        return 1
    return 1


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's own flush at exit does not raise again."""
    import os

    with contextlib.suppress(Exception):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def make_client(cls: Any, role: str, **configs: Any) -> Any:
    """``cls(**configs)`` (a kafka-python client); a configuration it refuses is a ToolError."""
    import kafka.errors

    try:
        return cls(**configs)
    except (kafka.errors.KafkaConfigurationError, ValueError, AssertionError, TypeError) as exc:
        raise ToolError(f"kafka-python's {role} refused its configuration: {one_line(str(exc)) or type(exc).__name__}"
                        ) from None
    except kafka.errors.KafkaTimeoutError as exc:
        raise ToolError(f"no Kafka broker answered at {configs.get('bootstrap_servers')} "
                        f"({describe_error(exc)})") from None


# --- bootstrap servers ---------------------------------------------------------------------------------


def parse_bootstrap(text: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` as a list of addresses; a missing or bad port is an error
    naming the entry."""
    try:
        return parse_addresses(str(text).split(","), "--bootstrap-server")
    except ValueError as exc:
        raise ToolError(str(exc)) from None


def check_reachable(bootstrap: str, timeout_s: float | None = None) -> str:
    """Return ``bootstrap`` if at least one of its addresses accepts a TCP connection (within
    ``timeout_s``, default the runtime's ``CONNECT_TIMEOUT_S``), else raise ToolError naming
    each address and why it failed."""
    from minikafka.wire.client_runtime import CONNECT_TIMEOUT_S, unreachable  # the runtime owns sockets

    failures = unreachable(parse_bootstrap(bootstrap), CONNECT_TIMEOUT_S if timeout_s is None else timeout_s)
    if failures:
        raise ToolError(f"no broker reachable at {', '.join(failures)}; is the cluster up "
                        "(`minikafka cluster up` prints its bootstrap servers)?")
    return bootstrap


def admin_client(bootstrap: str):
    """A kafka-python ``KafkaAdminClient`` on a reachable cluster."""
    from kafka import KafkaAdminClient

    check_reachable(bootstrap)
    return make_client(KafkaAdminClient, "admin client", bootstrap_servers=bootstrap, client_id="minikafka-tools",
                       bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS)


def retrying(call: Callable[[], Any], what: str, timeout_s: float = RETRY_TIMEOUT_S) -> Any:
    """``call()``, repeated while it fails with a retriable Kafka error, for up to ``timeout_s``."""
    import kafka.errors as Errors

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except (Errors.CoordinatorNotAvailableError, Errors.NotCoordinatorError,
                Errors.CoordinatorLoadInProgressError, Errors.LeaderNotAvailableError,
                Errors.NotLeaderForPartitionError, Errors.RequestTimedOutError) as exc:
            if time.monotonic() >= deadline:
                raise ToolError(f"{what} did not succeed within {timeout_s:g} s: {describe_error(exc)}") from None
            time.sleep(RETRY_BACKOFF_S)


# --- key=value properties ---------------------------------------------------------------------------


def parse_properties(items: list[str] | None, flag: str) -> dict[str, str]:
    """``["k=v", ...]`` (a repeatable flag's values) as a dict; ``flag`` names the flag in errors."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag} expects KEY=VALUE, not {item!r}")
        out[key.strip()] = value
    return out


def read_properties_file(path: str, flag: str) -> dict[str, str]:
    """A Java .properties file (``key=value`` or ``key: value`` lines; ``#`` and ``!`` comments),
    as ``--producer.config``, ``--consumer.config`` and ``--command-config`` take."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ToolError(f"cannot read {flag} file {path}: {exc.strerror or exc}") from None
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise ToolError(f"{flag} file {path}, line {number}: expected key=value, not {line!r}")
        out[line[:cut].strip()] = line[cut + 1:].strip()
    return out


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low not in ("true", "false"):
        raise ValueError("expected true or false")
    return low == "true"


def _int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("expected an integer") from None


def _str(text: str) -> str:
    return text.strip()


def _acks(text: str) -> Any:
    low = text.strip().lower()
    if low in ("all", "-1"):
        return "all"
    if low in ("0", "1"):
        return int(low)
    raise ValueError("expected all, -1, 0 or 1")


def _compression(text: str) -> str | None:
    low = text.strip().lower()
    if low not in ("none", "gzip", "snappy", "lz4", "zstd"):
        raise ValueError("expected none, gzip, snappy, lz4 or zstd")
    return None if low == "none" else low


def _one_of(*choices: str) -> Callable[[str], str]:
    def convert(text: str) -> str:
        low = text.strip().lower()
        if low not in choices:
            raise ValueError(f"expected {' or '.join(choices)}")
        return low
    return convert


def _assignors(text: str) -> tuple:
    """Kafka's assignor class names (or kafka-python's short names), comma separated."""
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    known = {"range": RangePartitionAssignor, "rangeassignor": RangePartitionAssignor,
             "roundrobin": RoundRobinPartitionAssignor, "roundrobinassignor": RoundRobinPartitionAssignor,
             "sticky": StickyPartitionAssignor, "stickyassignor": StickyPartitionAssignor,
             "cooperative-sticky": CooperativeStickyAssignor,
             "cooperativestickyassignor": CooperativeStickyAssignor}
    out = []
    for name in (n.strip() for n in text.split(",") if n.strip()):
        short = name.rsplit(".", 1)[-1].lower()  # org.apache.kafka.clients.consumer.RangeAssignor
        if short not in known:
            raise ValueError("expected RangeAssignor, RoundRobinAssignor, StickyAssignor or "
                             "CooperativeStickyAssignor (Kafka's class names) or range, roundrobin, sticky, "
                             "cooperative-sticky")
        out.append(known[short])
    if not out:
        raise ValueError("expected at least one assignor")
    return tuple(out)


# Kafka's client config names -> (kafka-python's keyword, how to read the value). Only what
# kafka-python's clients have an equivalent for; security settings are left out on purpose
# (minikafka speaks PLAINTEXT only, and Kafka's ssl.* names do not map one to one).
_COMMON = {
    "client.id": ("client_id", _str),
    "request.timeout.ms": ("request_timeout_ms", _int),
    "retry.backoff.ms": ("retry_backoff_ms", _int),
    "reconnect.backoff.ms": ("reconnect_backoff_ms", _int),
    "reconnect.backoff.max.ms": ("reconnect_backoff_max_ms", _int),
    "metadata.max.age.ms": ("metadata_max_age_ms", _int),
    "connections.max.idle.ms": ("connections_max_idle_ms", _int),
    "max.in.flight.requests.per.connection": ("max_in_flight_requests_per_connection", _int),
    "send.buffer.bytes": ("send_buffer_bytes", _int),
    "receive.buffer.bytes": ("receive_buffer_bytes", _int),
}
PRODUCER_PROPERTIES: dict[str, tuple[str, Callable[[str], Any]]] = {
    **_COMMON,
    "acks": ("acks", _acks),
    "batch.size": ("batch_size", _int),
    "compression.type": ("compression_type", _compression),
    "delivery.timeout.ms": ("delivery_timeout_ms", _int),
    "enable.idempotence": ("enable_idempotence", _bool),
    "linger.ms": ("linger_ms", _int),
    "max.block.ms": ("max_block_ms", _int),
    "max.request.size": ("max_request_size", _int),
    "retries": ("retries", _int),
}
CONSUMER_PROPERTIES: dict[str, tuple[str, Callable[[str], Any]]] = {
    **_COMMON,
    "group.id": ("group_id", _str),
    "group.instance.id": ("group_instance_id", _str),
    "client.rack": ("client_rack", _str),
    "auto.offset.reset": ("auto_offset_reset", _one_of("earliest", "latest", "none")),
    "enable.auto.commit": ("enable_auto_commit", _bool),
    "auto.commit.interval.ms": ("auto_commit_interval_ms", _int),
    "fetch.min.bytes": ("fetch_min_bytes", _int),
    "fetch.max.bytes": ("fetch_max_bytes", _int),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", _int),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", _int),
    "max.poll.records": ("max_poll_records", _int),
    "max.poll.interval.ms": ("max_poll_interval_ms", _int),
    "session.timeout.ms": ("session_timeout_ms", _int),
    "heartbeat.interval.ms": ("heartbeat_interval_ms", _int),
    "isolation.level": ("isolation_level", _one_of("read_uncommitted", "read_committed")),
    "check.crcs": ("check_crcs", _bool),
    "exclude.internal.topics": ("exclude_internal_topics", _bool),
    "allow.auto.create.topics": ("allow_auto_create_topics", _bool),
    "partition.assignment.strategy": ("partition_assignment_strategy", _assignors),
}
# Kafka names the console tools decide themselves; giving them is an error that says why.
_FIXED = {
    "key.serializer": "the console producer sends each line's bytes as they are (UTF-8)",
    "value.serializer": "the console producer sends each line's bytes as they are (UTF-8)",
    "key.deserializer": "the console consumer prints keys and values as UTF-8 text",
    "value.deserializer": "the console consumer prints keys and values as UTF-8 text",
}


def client_configs(props: Mapping[str, str], table: Mapping[str, tuple[str, Callable[[str], Any]]],
                   role: str) -> dict[str, Any]:
    """Kafka-named ``props`` as kafka-python keyword arguments; ``role`` ("producer" or
    "consumer") names the client in errors. ``bootstrap.servers`` is dropped: the
    ``--bootstrap-server`` flag wins, as in Kafka's tools."""
    out: dict[str, Any] = {}
    for name, text in props.items():
        if name == "bootstrap.servers":
            continue
        if name in _FIXED:
            raise ToolError(f"{role} property {name!r} cannot be set: {_FIXED[name]}")
        if name not in table:
            raise ToolError(f"unknown {role} property {name!r} (a Kafka {role} config that kafka-python has "
                            f"no equivalent for, or a typo); supported: {', '.join(sorted(table))}")
        keyword, convert = table[name]
        try:
            out[keyword] = convert(text)
        except ValueError as exc:
            raise ToolError(f"{role} property {name}={text!r}: {exc}") from None
    return out


def merged_properties(config_file: str | None, file_flag: str, items: list[str] | None,
                      items_flag: str) -> dict[str, str]:
    """A config file's properties, overridden by repeated ``KEY=VALUE`` flags (Kafka's order)."""
    props = read_properties_file(config_file, file_flag) if config_file else {}
    props.update(parse_properties(items, items_flag))
    return props


def add_bootstrap(p: argparse.ArgumentParser) -> None:
    """``--bootstrap-server`` (required: checked by ``resolve_bootstrap``, so that the old
    spellings below get their own answer first), ``--broker-list`` (its deprecated alias) and
    ``--zookeeper`` (gone from Kafka: answered with what to type instead)."""
    p.add_argument("--bootstrap-server", metavar="HOST:PORT",
                   help="REQUIRED: the brokers to connect to: HOST:PORT[,HOST:PORT...] "
                   "(`minikafka cluster up` prints them)")
    p.add_argument("--broker-list", metavar="HOST:PORT",
                   help="DEPRECATED, use --bootstrap-server instead; ignored if --bootstrap-server is specified")
    p.add_argument("--zookeeper", metavar="HOST:PORT",
                   help="REMOVED (Kafka 4.0; deprecated since 2.x): brokers and their controllers hold the "
                   "metadata, not ZooKeeper; use --bootstrap-server")


BROKER_LIST_NOTICE = ("Warning: --broker-list is deprecated and will be removed in a future release; "
                      "use --bootstrap-server instead.")
DEFAULT_BROKER = "127.0.0.1:9092"


def zookeeper_answer(tool: str, argv: list[str]) -> str:
    """One line for a command written for ZooKeeper-era Kafka: what replaced ``--zookeeper``
    and the same command with ``--bootstrap-server`` (the ZooKeeper host, Kafka's port 9092)."""
    out, host, skip = [], "127.0.0.1", False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg == "--zookeeper" or arg.startswith("--zookeeper="):
            value = arg.split("=", 1)[1] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            skip = "=" not in arg
            host = value.split(",")[0].rsplit(":", 1)[0].split("/")[0] or host
            out += ["--bootstrap-server", f"{host}:9092"]
        else:
            out.append(arg)
    command = " ".join(["minikafka", *out]) if out and out[0] == tool else f"minikafka {tool} " + " ".join(out)
    return (f"--zookeeper is not a recognized option: since Kafka 3.0 the tools talk to the brokers, which "
            f"(with their KRaft controllers) hold the metadata ZooKeeper used to; type instead: {command}")


def resolve_bootstrap(args: Any) -> int | None:
    """Settle ``args.bootstrap_server`` from the flags a user may have typed; an exit code if
    the tool must stop (``--zookeeper``: 1, as Kafka's tools exit on an unknown option)."""
    tool = getattr(args, "command", None) or getattr(args._parser, "prog", "").split()[-1]
    if getattr(args, "zookeeper", None) is not None:
        argv = list(getattr(args, "_argv", None) or sys.argv[1:])
        print(zookeeper_answer(tool, argv), file=sys.stderr)
        return 1
    if getattr(args, "broker_list", None) is not None:
        print(BROKER_LIST_NOTICE, file=sys.stderr)
        if args.bootstrap_server is None:
            args.bootstrap_server = args.broker_list
    if args.bootstrap_server is None:
        args._parser.error("the following arguments are required: --bootstrap-server")
    return None
