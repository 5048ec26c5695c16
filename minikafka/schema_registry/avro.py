"""Avro values in Confluent's wire format: the serializer a producer uses, the deserializer a consumer uses.

Theory of operation
-------------------
**Avro** writes a record as its field values one after the other, in the schema's order, with no
field names, no separators and no types: a string is its length then its UTF-8 bytes, an int or a
long a variable-length zig-zag number (small numbers take one byte), a double 8 bytes. Reading the
bytes back needs the *writer's* schema, the one they were written with.

Confluent's **wire format** puts the writer's schema id (``registry.py``) before each value::

    byte 0      magic byte, 0 (the format's version)
    bytes 1-4   the schema id, a 4-byte big-endian int
    bytes 5-    the Avro body

``AvroSerializer(registry, schema, subject)`` is a ``value_serializer``: on its first call it
registers ``schema`` under ``subject`` (so the subject's compatibility check runs *before* any
record is written), then it checks each record against the schema and writes the 5 bytes and the
body. ``AvroDeserializer(registry, reader_schema=None)`` is a ``value_deserializer``: it reads the
id, fetches that writer's schema, and decodes the body; given a ``reader_schema`` (the schema the
consumer's code was written for) it *resolves* the writer's data to it, Avro's rules: fields the
reader lacks are skipped, fields the writer lacks take the reader's default, or fail without one.

Both look schemas up once per id and keep them (as Confluent's clients cache them). The encoding is
fastavro's (``schemaless_writer``/``schemaless_reader``: the body without Avro's file header).

Never: a record that does not fit the schema written anyway (the error names the field), or a value
without the magic byte read as Avro.
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import fastavro
from fastavro.validation import ValidationError, validate

from minikafka.schema_registry.registry import SchemaRegistry, SchemaRegistryError

__all__ = ["MAGIC_BYTE", "AvroDeserializer", "AvroSerializer", "SerializationError", "frame", "unframe"]

MAGIC_BYTE = 0
_HEADER = struct.Struct(">bI")  # magic byte, schema id


class SerializationError(ValueError):
    """A value that cannot be written or read with its schema (Kafka's SerializationException)."""


def frame(schema_id: int, body: bytes) -> bytes:
    "Confluent's wire format: magic byte 0, the schema id in 4 bytes big-endian, then the Avro body."
    if isinstance(schema_id, bool) or not isinstance(schema_id, int) or not 0 <= schema_id < 2 ** 32:
        raise SerializationError(f"a schema id is an int from 0 to 2**32 - 1, not {schema_id!r}")
    return _HEADER.pack(MAGIC_BYTE, schema_id) + bytes(body)


def unframe(data: bytes) -> tuple[int, bytes]:
    "(schema id, Avro body) of a value in Confluent's wire format."
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise SerializationError(f"a value in Confluent's wire format is bytes, not {type(data).__name__}")
    data = bytes(data)
    if len(data) < _HEADER.size:
        raise SerializationError(f"a value in Confluent's wire format has at least 5 bytes, not {len(data)}: {data!r}")
    magic, schema_id = _HEADER.unpack_from(data)
    if magic != MAGIC_BYTE:
        raise SerializationError(
            f"unknown magic byte {magic} (Confluent's wire format starts with 0): not a schema registry "
            f"value (JSON written without a schema starts with {ord('{')}, '{{')")
    return schema_id, data[_HEADER.size:]


def _field_problems(record: Any, schema: dict[str, Any]) -> list[str]:
    "What keeps `record` from fitting the record `schema`, field by field ([] if it fits)."
    name = schema["name"]
    if not isinstance(record, dict):
        return [f"a {name} is a dict of its fields, not {type(record).__name__} {record!r}"]
    fields = {f["name"]: f for f in schema["fields"]}
    problems = [f"field {f!r} is missing (and {name} gives it no default)"
                for f, spec in fields.items() if f not in record and "default" not in spec]
    problems += [f"field {f!r} is not in schema {name} (fields: {', '.join(fields)})"
                 for f in record if f not in fields]
    if not problems:
        try:
            validate(record, schema, raise_errors=True)
        except ValidationError as e:
            problems += json.loads(e.args[0]) if e.args and isinstance(e.args[0], str) else [str(e)]
    return problems


class AvroSerializer:
    """A ``value_serializer``: a record (a dict) -> Confluent's wire format, its schema registered under `subject`.

    `subject` is ``"<topic>-value"`` for the topic's values (Confluent's TopicNameStrategy). With
    ``auto_register=False`` the schema must already be registered (as a producer in production
    often runs: schemas registered by a deployment step, not by the application).
    """

    def __init__(self, registry: SchemaRegistry, schema: dict[str, Any], subject: str,
                 auto_register: bool = True) -> None:
        if not isinstance(registry, SchemaRegistry):
            raise TypeError(f"registry must be a SchemaRegistry, not {registry!r}")
        if not isinstance(schema, dict) or schema.get("type") != "record":
            raise SchemaRegistryError(f"AvroSerializer writes records: its schema is an Avro record schema, not {schema!r}")
        registry._check_subject(subject)
        self.registry, self.subject, self.auto_register = registry, subject, auto_register
        self.schema = schema
        self._parsed = fastavro.parse_schema(schema)
        self.schema_id: int | None = None   # known after the first call

    def _id(self) -> int:
        if self.schema_id is None:
            if self.auto_register:
                self.schema_id = self.registry.register(self.subject, self.schema)
            else:
                for version in self.registry.versions(self.subject):
                    registered = self.registry.get_version(self.subject, version)
                    if registered.schema == json.loads(json.dumps(self.schema, sort_keys=True)):
                        self.schema_id = registered.schema_id
                        break
                else:
                    raise SchemaRegistryError(
                        f"the schema is not registered under {self.subject!r} (auto_register=False)")
        return self.schema_id

    def __call__(self, record: Any) -> bytes:
        schema_id = self._id()
        problems = _field_problems(record, self._parsed)
        if problems:
            raise SerializationError(f"the record does not fit schema {self._parsed['name']}: " + "; ".join(problems))
        body = io.BytesIO()
        fastavro.schemaless_writer(body, self._parsed, record)
        return frame(schema_id, body.getvalue())

    def __repr__(self) -> str:
        return f"AvroSerializer({self.subject!r}, {self.schema.get('name')}, schema id {self.schema_id})"


class AvroDeserializer:
    """A ``value_deserializer``: Confluent's wire format -> a record (a dict).

    Without `reader_schema` a record comes back as it was written (the writer's fields). With one,
    the writer's data is resolved to it by Avro's rules; when it cannot be, ``SerializationError``
    says which writer schema, which reader schema, and why.
    """

    def __init__(self, registry: SchemaRegistry, reader_schema: dict[str, Any] | None = None) -> None:
        if not isinstance(registry, SchemaRegistry):
            raise TypeError(f"registry must be a SchemaRegistry, not {registry!r}")
        self.registry = registry
        self.reader_schema = reader_schema
        self._reader = fastavro.parse_schema(reader_schema) if reader_schema is not None else None
        self._writers: dict[int, dict[str, Any]] = {}   # schema id -> parsed writer's schema

    def __call__(self, data: bytes) -> dict[str, Any]:
        schema_id, body = unframe(data)
        writer = self._writers.get(schema_id)
        if writer is None:
            writer = self._writers[schema_id] = fastavro.parse_schema(self.registry.schema(schema_id))
        try:
            return fastavro.schemaless_reader(io.BytesIO(body), writer, self._reader)
        except fastavro.read.SchemaResolutionError as e:
            raise SerializationError(
                f"cannot read a value written with schema id {schema_id} as {self._reader['name']}: {e}") from e
        except (EOFError, ValueError, IndexError, UnicodeDecodeError) as e:
            raise SerializationError(f"a value with schema id {schema_id} is not a valid Avro body for it: {e!r}") from e

    def __repr__(self) -> str:
        reader = self.reader_schema.get("name") if self.reader_schema else "the writer's schema"
        return f"AvroDeserializer(reads as {reader})"
