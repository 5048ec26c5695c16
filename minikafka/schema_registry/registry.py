"""A schema registry: subjects, versions, ids, and which new schema a subject accepts.

Theory of operation
-------------------
Confluent's Schema Registry, in miniature and in the caller's process (no HTTP, no clock, no I/O):

- A **subject** is a name under which a schema evolves. Confluent's default naming
  (``TopicNameStrategy``) gives a topic two: ``<topic>-key`` and ``<topic>-value``; the course's
  truck positions are under ``trucks_gps-value``.
- A subject holds **versions** 1, 2, 3, ...: each registration of a *new* schema adds one.
- Every distinct schema gets one **id**, global across subjects, from 1 upwards: the number a
  producer writes before each Avro value (``avro.py``). Registering a schema the registry already
  holds returns its id and adds no version (a producer that restarts registers again, harmlessly).
  Two schemas are the same when their JSON, keys sorted, is the same.
- Before adding a version the registry checks the new schema against the subject's existing ones
  under the subject's **compatibility** mode, and refuses it (``IncompatibleSchemaError``) if the
  check fails. The modes (Confluent's names; ``BACKWARD`` is the default):

  ===================== ============================================================ =============
  mode                  the check                                                     upgrade first
  ===================== ============================================================ =============
  BACKWARD              the new schema can read data written with the latest one     consumers
  BACKWARD_TRANSITIVE   ... with every earlier one                                    consumers
  FORWARD               the latest schema can read data written with the new one      producers
  FORWARD_TRANSITIVE    every earlier schema can read data written with the new one   producers
  FULL                  both BACKWARD and FORWARD                                    either
  FULL_TRANSITIVE       both, against every earlier one                               either
  NONE                  no check                                                      (all at once)
  ===================== ============================================================ =============

"Can read" is Avro's schema resolution: a reader schema reads data written with a writer schema
when every reader field is in the writer's schema (by name or alias) or has a default, every
shared field's type can be promoted (int -> long -> float -> double, string <-> bytes), and enums
and unions cover what the writer can write. The registry does not restate those rules: it asks
Apache Avro's own checker (``avro.compatibility``, the Python port of the Java
``SchemaCompatibility`` that Confluent's registry calls), and fastavro, which reads the values,
applies the same rules record by record (``tests/test_schema_registry.py`` checks they agree).

Never: I/O, a clock, or a schema that neither Avro library can parse.

What the real one adds: it is a service (a REST API on port 8081), it stores its schemas in a
compacted Kafka topic, ``_schemas``, and its clients cache ids, so a producer asks it once per
schema, not once per record. Subjects can also be soft-deleted, and schema types other than Avro
(Protobuf, JSON Schema) are checked by their own rules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import avro.errors
import avro.schema
import fastavro
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

__all__ = [
    "COMPATIBILITY_MODES",
    "DEFAULT_COMPATIBILITY",
    "IncompatibleSchemaError",
    "RegisteredSchema",
    "SchemaRegistry",
    "SchemaRegistryError",
]

# mode -> (new schema reads old data?, old schema reads new data?, against every version, not only the latest?)
COMPATIBILITY_MODES: dict[str, tuple[bool, bool, bool]] = {
    "BACKWARD": (True, False, False),
    "BACKWARD_TRANSITIVE": (True, False, True),
    "FORWARD": (False, True, False),
    "FORWARD_TRANSITIVE": (False, True, True),
    "FULL": (True, True, False),
    "FULL_TRANSITIVE": (True, True, True),
    "NONE": (False, False, False),
}
DEFAULT_COMPATIBILITY = "BACKWARD"

# Avro's incompatibility kinds, in words.
_KINDS = {
    "reader_field_missing_default_value": "the reader's field is not in the writer's schema and has no default",
    "type_mismatch": "the writer's type cannot be read as the reader's",
    "name_mismatch": "the named type has another name",
    "missing_enum_symbols": "the reader's enum lacks symbols the writer can write",
    "missing_union_branch": "the reader's union lacks a branch the writer can write",
    "fixed_size_mismatch": "the fixed type has another size",
}


class SchemaRegistryError(ValueError):
    """A subject, version, id, schema or mode the registry cannot work with (Confluent's client's name)."""


class IncompatibleSchemaError(SchemaRegistryError):
    """The subject's compatibility mode refuses the schema (HTTP 409 from Confluent's registry)."""


@dataclass(frozen=True)
class RegisteredSchema:
    "One version of a subject: what Confluent's ``GET /subjects/{subject}/versions/{version}`` returns."
    subject: str
    version: int
    schema_id: int
    schema: dict[str, Any]


def _canonical_text(schema: Any) -> str:
    "The schema as JSON with sorted keys: the registry's notion of 'the same schema'."
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise SchemaRegistryError(f"a schema given as a str must be JSON: {e}") from None
    if not isinstance(schema, dict):
        raise SchemaRegistryError(f"a schema is a dict (or its JSON text), not {schema!r}")
    try:
        text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise SchemaRegistryError(f"a schema must be plain JSON: {e}") from None
    try:
        avro.schema.parse(text)
        fastavro.parse_schema(json.loads(text))
    except (avro.errors.AvroException, fastavro.schema.SchemaParseException, ValueError, KeyError, TypeError) as e:
        raise SchemaRegistryError(f"not a valid Avro schema: {e}") from None
    return text


def _problems(reader_text: str, writer_text: str) -> list[str]:
    "Why data written with `writer_text` cannot be read with `reader_text`, by Avro's checker ([] if it can)."
    result = ReaderWriterCompatibilityChecker().get_compatibility(
        avro.schema.parse(reader_text), avro.schema.parse(writer_text))
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    kinds = sorted({_KINDS.get(k.value, k.value) for k in result.incompatibilities})
    where = sorted(result.locations - {"", "/"}) or sorted(result.locations)  # Avro adds the root to a record's own
    reader = json.loads(reader_text)
    fields = [_located(reader, w) for w in where]
    details = sorted(m for m in result.messages if f"field {m!r}" not in fields)
    return [f"{', '.join(fields)}: {'; '.join(kinds)}" + (f" ({'; '.join(details)})" if details else "")]


def _located(schema: Any, location: str) -> str:
    "The field that Avro's location in the reader's schema ('/fields/5/type') is in: \"field 'heading_deg'\"."
    node, previous, names = schema, None, []
    for step in [s for s in location.split("/") if s]:
        if isinstance(node, list) and step.isdigit() and int(step) < len(node):
            node = node[int(step)]
            if previous == "fields" and isinstance(node, dict) and "name" in node:
                names.append(str(node["name"]))
        elif isinstance(node, dict) and step in node:
            node = node[step]
        else:
            break
        previous = step
    return f"field {'.'.join(names)!r}" if names else location


class SchemaRegistry:
    """Subjects -> versions -> schema ids, with a compatibility check before each new version.

    >>> registry = SchemaRegistry()
    >>> v1 = {"type": "record", "name": "P", "fields": [{"name": "x", "type": "double"}]}
    >>> registry.register("points-value", v1)
    1
    >>> registry.register("points-value", v1)       # the same schema: the same id, no new version
    1
    >>> registry.versions("points-value")
    [1]
    """

    def __init__(self, compatibility: str = DEFAULT_COMPATIBILITY) -> None:
        self._default = self._check_mode(compatibility)
        self._modes: dict[str, str] = {}                  # subject -> its own mode, if set
        self._subjects: dict[str, list[RegisteredSchema]] = {}
        self._texts: dict[int, str] = {}                  # id -> canonical text
        self._ids: dict[str, int] = {}                    # canonical text -> id

    # -- configuration -------------------------------------------------------------------------

    @staticmethod
    def _check_mode(mode: object) -> str:
        if mode not in COMPATIBILITY_MODES:
            raise SchemaRegistryError(f"compatibility must be one of {', '.join(COMPATIBILITY_MODES)}, not {mode!r}")
        return mode  # type: ignore[return-value]

    def set_compatibility(self, mode: str, subject: str | None = None) -> None:
        "The mode of one subject, or (subject None) the registry's default (Confluent's PUT /config)."
        mode = self._check_mode(mode)
        if subject is None:
            self._default = mode
        else:
            self._modes[self._check_subject(subject)] = mode

    def compatibility(self, subject: str | None = None) -> str:
        "The mode that applies to `subject` (its own, else the default)."
        return self._modes.get(subject, self._default) if subject is not None else self._default

    # -- registering and checking ---------------------------------------------------------------

    @staticmethod
    def _check_subject(subject: object) -> str:
        if not isinstance(subject, str) or not subject:
            raise SchemaRegistryError(f"a subject is a non-empty str (such as 'trucks_gps-value'), not {subject!r}")
        return subject

    def check_compatibility(self, subject: str, schema: Any) -> list[str]:
        """Why `subject`'s mode would refuse `schema`: one line per earlier version that fails ([] = accepted)."""
        subject = self._check_subject(subject)
        return self._refusals(subject, _canonical_text(schema))

    def _refusals(self, subject: str, text: str) -> list[str]:
        mode = self.compatibility(subject)
        backward, forward, transitive = COMPATIBILITY_MODES[mode]
        versions = self._subjects.get(subject, [])
        against = versions if transitive else versions[-1:]
        found = []
        for old in against:
            old_text = self._texts[old.schema_id]
            if backward:
                found += [f"{mode}: the new schema cannot read version {old.version}'s data: {p}"
                          for p in _problems(text, old_text)]
            if forward:
                found += [f"{mode}: version {old.version} cannot read the new schema's data: {p}"
                          for p in _problems(old_text, text)]
        return found

    def register(self, subject: str, schema: Any) -> int:
        """The schema's id under `subject`: a new version if the schema is new to the subject and its
        compatibility mode accepts it; ``IncompatibleSchemaError`` (saying why) if not."""
        subject = self._check_subject(subject)
        text = _canonical_text(schema)
        versions = self._subjects.get(subject, [])
        for registered in versions:
            if self._texts[registered.schema_id] == text:
                return registered.schema_id
        refusals = self._refusals(subject, text)
        if refusals:
            raise IncompatibleSchemaError(
                f"subject {subject!r} refuses the schema (compatibility {self.compatibility(subject)}): "
                + " | ".join(refusals))
        schema_id = self._ids.get(text)
        if schema_id is None:
            schema_id = len(self._texts) + 1
            self._ids[text] = schema_id
            self._texts[schema_id] = text
        self._subjects[subject] = versions + [
            RegisteredSchema(subject, len(versions) + 1, schema_id, json.loads(text))]
        return schema_id

    # -- looking up ---------------------------------------------------------------------------

    def schema(self, schema_id: int) -> dict[str, Any]:
        "The schema with this id (what a consumer asks for when a value names it)."
        if isinstance(schema_id, bool) or not isinstance(schema_id, int):
            raise SchemaRegistryError(f"a schema id is an int, not {schema_id!r}")
        if schema_id not in self._texts:
            raise SchemaRegistryError(f"schema id {schema_id} is not registered (ids so far: 1 to {len(self._texts)})")
        return json.loads(self._texts[schema_id])

    def subjects(self) -> list[str]:
        return sorted(self._subjects)

    def versions(self, subject: str) -> list[int]:
        return [r.version for r in self._versions(subject)]

    def get_version(self, subject: str, version: int | str = "latest") -> RegisteredSchema:
        "One version of `subject` (1, 2, ... or 'latest')."
        versions = self._versions(subject)
        if version == "latest":
            return versions[-1]
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= len(versions):
            raise SchemaRegistryError(
                f"subject {subject!r} has versions 1 to {len(versions)} (or 'latest'), not {version!r}")
        return versions[version - 1]

    def latest(self, subject: str) -> RegisteredSchema:
        return self.get_version(subject, "latest")

    def _versions(self, subject: str) -> list[RegisteredSchema]:
        subject = self._check_subject(subject)
        if subject not in self._subjects:
            raise SchemaRegistryError(f"subject {subject!r} has no schema (subjects: {self.subjects()})")
        return self._subjects[subject]

    def __repr__(self) -> str:
        subjects = ", ".join(f"{s}: v{len(v)}" for s, v in sorted(self._subjects.items()))
        count = f"{len(self._texts)} schema{'' if len(self._texts) == 1 else 's'}"
        return f"SchemaRegistry({self._default}; {count}; {subjects or 'no subjects'})"
