"""``minikafka console-producer``: ``kafka-console-producer.sh`` over the Kafka protocol.

Theory of operation
-------------------
Reads standard input line by line and sends one record per line to ``--topic`` with
kafka-python's ``KafkaProducer``; at end of input (Ctrl-D, or the end of a pipe) it flushes
and closes the producer, so every line has been acknowledged (or reported) before it exits.

A line becomes a record the way Kafka's ``LineMessageReader`` makes it, steered by
``--property``:

- ``parse.key=true``: the text before the first ``key.separator`` (default a tab) is the
  key, the rest the value; a line without the separator is an error naming its line number,
  unless ``ignore.error=true`` (then the whole line is the value and the key is null).
- ``parse.headers=true``: the line starts with headers ``k1:v1,k2:v2``, then
  ``headers.delimiter`` (default a tab), then key and value as above; ``headers.separator``
  (',') and ``headers.key.separator`` (':') split them.
- ``null.marker=X``: a key or value equal to X is sent as null (a tombstone, for a value).

Producer settings use Kafka's names: ``--producer-property acks=all`` (repeatable) and
``--producer.config FILE``, mapped to kafka-python's keyword arguments (``linger.ms`` is
``linger_ms``); a name kafka-python has no equivalent for is an error listing those that work
(``minikafka.tools.common.PRODUCER_PROPERTIES``). Kafka's shortcut flags (``--request-required-acks``,
``--compression-codec``, ``--batch-size``, ``--timeout``, ``--sync``) win over properties. As in
Kafka's tool, ``acks`` defaults to all and ``linger.ms`` to 1000 (``--timeout``) unless set.

Sends are asynchronous (``--sync`` waits for each acknowledgement); a failed send is reported
as Kafka's ``ErrorLoggingCallback`` reports it, one line on stderr, and makes the exit code 1.
Kafka prints a ``>`` prompt before each line; this one does so only when standard input is a
terminal, so piped runs keep stdout clean.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any, Iterator

from .common import (
    PRODUCER_PROPERTIES,
    ToolError,
    add_bootstrap,
    check_reachable,
    client_configs,
    describe_error,
    make_client,
    merged_properties,
    parse_properties,
    run_tool,
)

ERROR_PREFIX = "Error: "
# Kafka's console producer defaults (ConsoleProducer.scala), applied unless a property sets them.
CONSOLE_DEFAULTS = {"acks": "all", "linger.ms": "1000"}
# --property names LineMessageReader understands, with their defaults.
READER_DEFAULTS = {
    "parse.key": "false", "key.separator": "\t", "parse.headers": "false", "headers.delimiter": "\t",
    "headers.separator": ",", "headers.key.separator": ":", "ignore.error": "false", "null.marker": None,
}


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "console-producer", help="kafka-console-producer: send lines of stdin as records",
        description="kafka-console-producer.sh over the Kafka protocol: each line of standard input "
        "becomes one record of --topic.")
    add_bootstrap(p)
    p.add_argument("--topic", required=True, help="the topic to produce to")
    p.add_argument("--producer-property", action="append", metavar="KEY=VALUE",
                   help="a producer config, Kafka's name (acks=all, linger.ms=5, compression.type=lz4, "
                   "enable.idempotence=false, ...); repeatable")
    p.add_argument("--producer.config", dest="producer_config", metavar="FILE",
                   help="a properties file of producer configs (--producer-property wins over it)")
    p.add_argument("--property", action="append", metavar="KEY=VALUE",
                   help="how lines become records: parse.key, key.separator, parse.headers, headers.delimiter, "
                   "headers.separator, headers.key.separator, ignore.error, null.marker; repeatable")
    p.add_argument("--request-required-acks", metavar="ACKS", help="acks: all, -1, 0 or 1 (default: all)")
    p.add_argument("--compression-codec", nargs="?", const="gzip", metavar="CODEC",
                   help="none, gzip, snappy, lz4 or zstd (gzip if given without a value; default: none)")
    p.add_argument("--batch-size", metavar="BYTES", help="batch.size")
    p.add_argument("--timeout", metavar="MS", help="linger.ms: how long a batch waits for more lines (default: 1000)")
    p.add_argument("--sync", action="store_true", help="wait for each record's acknowledgement before the next")
    p.set_defaults(run=run, _parser=p)


def run(args: argparse.Namespace) -> int:
    return run_tool(_run, args, ERROR_PREFIX)


@dataclass
class LineReader:
    """Kafka's ``LineMessageReader``: one line of bytes -> (headers, key, value)."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    ignore_error: bool = False
    null_marker: bytes | None = None

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> "LineReader":
        unknown = sorted(set(props) - set(READER_DEFAULTS))
        if unknown:
            raise ToolError(f"unknown --property {unknown[0]!r}; the console producer's are: "
                            f"{', '.join(READER_DEFAULTS)}")
        merged = {**READER_DEFAULTS, **props}
        flags = {}
        for name in ("parse.key", "parse.headers", "ignore.error"):
            value = str(merged[name]).strip().lower()
            if value not in ("true", "false"):
                raise ToolError(f"--property {name}={merged[name]!r}: expected true or false")
            flags[name] = value == "true"
        for name in ("key.separator", "headers.delimiter", "headers.separator", "headers.key.separator"):
            if merged[name] == "":
                raise ToolError(f"--property {name} must not be empty")

        def raw(name: str) -> bytes:
            return merged[name].encode()

        return cls(flags["parse.key"], raw("key.separator"), flags["parse.headers"], raw("headers.delimiter"),
                   raw("headers.separator"), raw("headers.key.separator"), flags["ignore.error"],
                   None if merged["null.marker"] is None else merged["null.marker"].encode())

    def _null(self, data: bytes | None) -> bytes | None:
        return None if data is not None and data == self.null_marker else data

    def read(self, line: bytes, number: int) -> tuple[list[tuple[str, bytes | None]], bytes | None, bytes | None]:
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            head, sep, tail = rest.partition(self.headers_delimiter)
            if not sep:
                if not self.ignore_error:
                    raise ToolError(f"No headers delimiter found on line number {number}: '{_text(line)}'")
            else:
                rest = tail
                for item in (h for h in head.split(self.headers_separator) if h):
                    name, hsep, value = item.partition(self.headers_key_separator)
                    headers.append((name.decode("utf-8", "replace"), self._null(value) if hsep else None))
        key = None
        if self.parse_key:
            k, sep, v = rest.partition(self.key_separator)
            if sep:
                key, rest = self._null(k), v
            elif not self.ignore_error:
                raise ToolError(f"No key separator found on line number {number}: '{_text(line)}'")
        return headers, key, self._null(rest)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _stdin_lines() -> Iterator[bytes]:
    """Standard input's lines as bytes, without their line ends (\\n, \\r\\n or \\r), as Java's
    ``readLine`` gives them; a ``>`` prompt before each when a person is typing."""
    stream = sys.stdin
    prompt = _isatty(stream)
    binary = getattr(stream, "buffer", None)
    while True:
        if prompt:
            print(">", end="", flush=True)
        line = binary.readline() if binary is not None else stream.readline()
        if not line:
            return
        if isinstance(line, str):
            line = line.encode("utf-8", "surrogateescape")
        yield line.rstrip(b"\n").rstrip(b"\r") if line.endswith(b"\n") else line.rstrip(b"\r")


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def producer_configs(args: argparse.Namespace) -> dict[str, Any]:
    """kafka-python keyword arguments from --producer.config, --producer-property, the shortcut
    flags (which win) and the console producer's defaults (which apply only to what is unset)."""
    props = merged_properties(args.producer_config, "--producer.config", args.producer_property,
                              "--producer-property")
    for name, flag in (("acks", args.request_required_acks), ("compression.type", args.compression_codec),
                       ("batch.size", args.batch_size), ("linger.ms", args.timeout)):
        if flag is not None:
            props[name] = flag
    for name, value in CONSOLE_DEFAULTS.items():
        props.setdefault(name, value)
    return client_configs(props, PRODUCER_PROPERTIES, "producer")


def _run(args: argparse.Namespace) -> int:
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    configs = producer_configs(args)
    reader = LineReader.from_properties(parse_properties(args.property, "--property"))
    check_reachable(args.bootstrap_server)
    producer = make_client(KafkaProducer, "producer", bootstrap_servers=args.bootstrap_server, **configs)
    failures: list[str] = []

    def failed(key: bytes | None, value: bytes | None):
        def report(exc: BaseException) -> None:
            line = (f"Error when sending message to topic {args.topic} with key: "
                    f"{'null' if key is None else f'{len(key)} bytes'}, value: "
                    f"{'null' if value is None else f'{len(value)} bytes'} with error: {describe_error(exc)}")
            failures.append(line)
            print(line, file=sys.stderr)
        return report

    try:
        for number, line in enumerate(_stdin_lines(), 1):
            headers, key, value = reader.read(line, number)
            try:
                future = producer.send(args.topic, key=key, value=value, headers=headers or None)
            except KafkaTimeoutError:  # no metadata for the topic within max.block.ms
                waited = producer.config["max_block_ms"]
                raise ToolError(f"Topic {args.topic} not present in metadata after {waited} ms "
                                "(does it exist? `minikafka topics --list` shows the topics)") from None
            if args.sync:
                try:
                    future.get()
                except Exception as exc:  # the same report as an asynchronous failure
                    failed(key, value)(exc)
            else:
                future.add_errback(failed(key, value))
    except KeyboardInterrupt:  # Ctrl-C ends input too: what was read is still sent
        pass
    finally:
        try:
            producer.flush()
        finally:
            producer.close()
    return 1 if failures else 0
