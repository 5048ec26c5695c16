"""Schemas for the bytes in a topic: a small schema registry and Avro serializers, as Confluent's work.

To Kafka a value is only bytes. A **schema** says what those bytes hold: the fields of a record, the
type of each, and what to assume when one is missing (a *default*). **Avro** is a serialization
format that writes a record's values in the schema's field order with no field names at all, so its
bytes mean nothing without the schema they were written with. A **schema registry** keeps those
schemas, so a producer can send, with each value, only a 4-byte number that names its schema.

- ``registry.py``: ``SchemaRegistry``: subjects, versions, ids and the compatibility check.
- ``avro.py``: ``AvroSerializer`` and ``AvroDeserializer`` (Confluent's wire format) for the
  producer's ``value_serializer`` and the consumer's ``value_deserializer``.

Neither does I/O or reads a clock: the registry here lives in the notebook's process, where
Confluent's is an HTTP service (``registry.py`` says what that changes and what it does not).
"""

from minikafka.schema_registry.avro import (MAGIC_BYTE, AvroDeserializer, AvroSerializer,
                                            SerializationError, frame, unframe)
from minikafka.schema_registry.registry import (COMPATIBILITY_MODES, IncompatibleSchemaError,
                                                RegisteredSchema, SchemaRegistry, SchemaRegistryError)

__all__ = [
    "COMPATIBILITY_MODES",
    "MAGIC_BYTE",
    "AvroDeserializer",
    "AvroSerializer",
    "IncompatibleSchemaError",
    "RegisteredSchema",
    "SchemaRegistry",
    "SchemaRegistryError",
    "SerializationError",
    "frame",
    "unframe",
]
