"""The schema registry (subjects, versions, ids, compatibility) and the Avro serializers in Confluent's wire format."""
from __future__ import annotations

import copy
import doctest
import io
import itertools

import fastavro
import pytest

from minikafka import Cluster, KafkaConsumer, KafkaProducer
from minikafka.datasets import TRUCK_POSITION_SCHEMA, encode_report, truck_positions
from minikafka.schema_registry import (AvroDeserializer, AvroSerializer, IncompatibleSchemaError, SchemaRegistry,
                                       SchemaRegistryError, SerializationError, frame, registry, unframe)

SUBJECT = "trucks_gps-value"
FLEET = list(truck_positions(trucks=10, count=200))


def evolved(schema=TRUCK_POSITION_SCHEMA, add=(), rename=None, retype=None, drop=None):
    "A copy of `schema` with fields added, one renamed {old: new}, retyped {name: type} or dropped."
    s = copy.deepcopy(schema)
    for field in s["fields"]:
        if rename and field["name"] in rename:
            field["name"] = rename[field["name"]]
        if retype and field["name"] in retype:
            field["type"] = retype[field["name"]]
    s["fields"] = [f for f in s["fields"] if f["name"] != drop] + list(add)
    return s


FUEL_WITH_DEFAULT = {"name": "fuel_pct", "type": ["null", "double"], "default": None}
V2 = evolved(add=[FUEL_WITH_DEFAULT])
RENAMED = evolved(V2, rename={"speed_kmh": "speed_ms"})
NO_DEFAULT = evolved(V2, add=[{"name": "driver_id", "type": "string"}])
RETYPED = evolved(V2, retype={"heading_deg": "string"})


def test_doctests():
    assert doctest.testmod(registry).failed == 0


# -- subjects, versions, ids ------------------------------------------------------------------------

def test_a_schema_registered_again_keeps_its_id_and_adds_no_version():
    r = SchemaRegistry()
    assert r.register(SUBJECT, TRUCK_POSITION_SCHEMA) == 1
    assert r.register(SUBJECT, copy.deepcopy(TRUCK_POSITION_SCHEMA)) == 1
    assert r.versions(SUBJECT) == [1]
    assert r.register(SUBJECT, V2) == 2
    assert r.versions(SUBJECT) == [1, 2]
    assert r.latest(SUBJECT).schema_id == 2 and r.get_version(SUBJECT, 1).schema == r.schema(1)


def test_ids_are_global_across_subjects():
    r = SchemaRegistry()
    assert r.register("a-value", TRUCK_POSITION_SCHEMA) == 1
    assert r.register("b-value", V2) == 2
    assert r.register("c-value", TRUCK_POSITION_SCHEMA) == 1        # the same schema: the same id
    assert r.get_version("c-value", 1).version == 1
    assert r.subjects() == ["a-value", "b-value", "c-value"]


# -- the wire format ------------------------------------------------------------------------------

def test_wire_format_is_magic_byte_then_big_endian_id_then_the_avro_body():
    r = SchemaRegistry()
    r.register("other-value", {"type": "record", "name": "X", "fields": [{"name": "x", "type": "int"}]})
    serialize = AvroSerializer(r, TRUCK_POSITION_SCHEMA, SUBJECT)
    value = serialize(FLEET[0])
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(TRUCK_POSITION_SCHEMA), FLEET[0])
    assert value == b"\x00\x00\x00\x00\x02" + body.getvalue()
    assert frame(258, b"xy") == b"\x00\x00\x00\x01\x02xy"
    assert unframe(b"\x00\x00\x00\x01\x02xy") == (258, b"xy")


def test_truck_reports_round_trip_in_53_bytes_where_json_takes_over_110():
    r = SchemaRegistry()
    serialize, deserialize = AvroSerializer(r, TRUCK_POSITION_SCHEMA, SUBJECT), AvroDeserializer(r)
    for report in FLEET:
        value = serialize(report)
        # 5 (header) + 10 (truck id) + 6 (timestamp, a varint) + 4 doubles of 8
        assert len(value) == 53
        assert len(encode_report(report)[1]) > 110
        assert deserialize(value) == report


@pytest.mark.parametrize("data, says", [
    (b"\x00\x00\x01", "at least 5 bytes"),
    (b'{"truck_id": "truck-001"}', "unknown magic byte 123"),
    ("text", "is bytes, not str"),
])
def test_a_value_not_in_the_wire_format_is_refused(data, says):
    with pytest.raises(SerializationError, match=says):
        unframe(data)


def test_a_value_naming_an_unknown_schema_id_is_refused():
    r = SchemaRegistry()
    with pytest.raises(SchemaRegistryError, match="schema id 7 is not registered"):
        AvroDeserializer(r)(frame(7, b""))


# -- records that do not fit ----------------------------------------------------------------------

@pytest.mark.parametrize("record, says", [
    (dict(FLEET[0], speed_kmh="fast"), "TruckPosition.speed_kmh is <fast> of type <class 'str'> expected double"),
    ({k: v for k, v in FLEET[0].items() if k != "lat"}, "field 'lat' is missing"),
    (dict(FLEET[0], fuel=3.0), "field 'fuel' is not in schema"),
    ([1, 2], "is a dict of its fields, not list"),
])
def test_a_record_that_does_not_fit_the_schema_names_the_field(record, says):
    serialize = AvroSerializer(SchemaRegistry(), TRUCK_POSITION_SCHEMA, SUBJECT)
    with pytest.raises(SerializationError, match=f"does not fit schema minikafka.trucks.TruckPosition: .*{says}"):
        serialize(record)


def test_a_field_with_a_default_may_be_left_out():
    r = SchemaRegistry()
    assert AvroDeserializer(r)(AvroSerializer(r, V2, SUBJECT)(FLEET[0])) == dict(FLEET[0], fuel_pct=None)


@pytest.mark.parametrize("call, says", [
    (lambda r: r.register(SUBJECT, {"type": "record", "name": "X"}), "not a valid Avro schema"),
    (lambda r: r.register(SUBJECT, "{not json"), "must be JSON"),
    (lambda r: r.register("", TRUCK_POSITION_SCHEMA), "a subject is a non-empty str"),
    (lambda r: r.versions("nothing-value"), "subject 'nothing-value' has no schema"),
    (lambda r: r.set_compatibility("SIDEWAYS"), "compatibility must be one of BACKWARD"),
    (lambda r: r.schema("1"), "a schema id is an int"),
])
def test_bad_registry_input_says_what_was_wrong(call, says):
    with pytest.raises(SchemaRegistryError, match=says):
        call(SchemaRegistry())


def test_an_unknown_version_is_refused():
    r = SchemaRegistry()
    r.register(SUBJECT, TRUCK_POSITION_SCHEMA)
    with pytest.raises(SchemaRegistryError, match="has versions 1 to 1"):
        r.get_version(SUBJECT, 2)


# -- evolution --------------------------------------------------------------------------------------

def test_adding_a_field_with_a_default_keeps_old_and_new_consumers_reading():
    r = SchemaRegistry()
    v1_value = AvroSerializer(r, TRUCK_POSITION_SCHEMA, SUBJECT)(FLEET[0])
    v2_value = AvroSerializer(r, V2, SUBJECT)(dict(FLEET[1], fuel_pct=61.5))    # BACKWARD accepts it
    assert r.versions(SUBJECT) == [1, 2]
    new_consumer = AvroDeserializer(r, reader_schema=V2)
    old_consumer = AvroDeserializer(r, reader_schema=TRUCK_POSITION_SCHEMA)
    assert new_consumer(v1_value) == dict(FLEET[0], fuel_pct=None)         # the default fills the gap
    assert new_consumer(v2_value) == dict(FLEET[1], fuel_pct=61.5)
    assert old_consumer(v2_value) == FLEET[1]                              # the new field is skipped


@pytest.mark.parametrize("breaking, field, consumer_error", [
    (RENAMED, "speed_ms", "No default value for field speed_ms"),
    (NO_DEFAULT, "driver_id", "No default value for field driver_id"),
    (RETYPED, "heading_deg", "Schema mismatch"),
], ids=["rename", "add-without-default", "change-type"])
def test_backward_refuses_a_breaking_change_that_a_consumer_would_fail_on(breaking, field, consumer_error):
    r = SchemaRegistry()
    v2_value = AvroSerializer(r, V2, SUBJECT)(FLEET[0])
    with pytest.raises(SerializationError, match=consumer_error):          # what the consumer would get
        AvroDeserializer(r, reader_schema=breaking)(v2_value)
    with pytest.raises(IncompatibleSchemaError, match=f"compatibility BACKWARD.*{field}"):
        r.register(SUBJECT, breaking)
    assert r.versions(SUBJECT) == [1]
    refusal = r.check_compatibility(SUBJECT, breaking)
    assert len(refusal) == 1 and field in refusal[0]
    r.set_compatibility("NONE", SUBJECT)                                  # what a registry without checks lets through
    assert r.register(SUBJECT, breaking) == 2


# Pairs of (writer, reader) schemas of one field `x`: Avro's checker and fastavro's reader must agree.
FIELD_TYPES = ["int", "long", "double", "string", "bytes", ["null", "long"],
               {"type": "enum", "name": "E", "symbols": ["A", "B"]},
               {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}]
SAMPLES = {"int": [7], "long": [7], "double": [7.5], "string": ["s"], "bytes": [b"s"], "null": [None]}


def one_field(field_type):
    return {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}, {"name": "x", "type": field_type}]}


def samples(field_type):
    "A value of every branch of a union, every symbol of an enum: what a writer can write."
    if isinstance(field_type, list):
        return [v for branch in field_type for v in samples(branch)]
    if isinstance(field_type, dict):
        return list(field_type["symbols"])
    return SAMPLES[field_type]


def fastavro_reads(writer, reader, value):
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(writer), {"id": 1, "x": value})
    try:
        fastavro.schemaless_reader(io.BytesIO(body.getvalue()), fastavro.parse_schema(writer),
                                   fastavro.parse_schema(reader))
    except fastavro.read.SchemaResolutionError:
        return False
    return True


@pytest.mark.parametrize("writer_type, reader_type", list(itertools.product(FIELD_TYPES, repeat=2)))
def test_the_registry_check_agrees_with_fastavro_reading_the_data(writer_type, reader_type):
    writer, reader = one_field(writer_type), one_field(reader_type)
    problems = registry._problems(registry._canonical_text(reader), registry._canonical_text(writer))
    readable = all(fastavro_reads(writer, reader, value) for value in samples(writer_type))
    assert (problems == []) == readable, problems
    if problems and not isinstance(writer_type, list):   # (Avro locates a union writer's problem at the root)
        assert problems[0].startswith("field 'x': ")


def test_the_agreement_test_sees_both_verdicts():
    verdicts = {registry._problems(registry._canonical_text(one_field(r)), registry._canonical_text(one_field(w))) == []
                for w, r in itertools.product(FIELD_TYPES, repeat=2)}
    assert verdicts == {True, False}


# -- with the producer and the consumer -------------------------------------------------------------

def test_a_producer_and_a_consumer_exchange_avro_reports_and_a_breaking_schema_fails_at_send(tmp_path):
    r = SchemaRegistry()
    with Cluster(brokers=1, seed=3, dir=tmp_path) as c:
        c.create_topic("trucks_gps", partitions=2, replication_factor=1)
        producer = KafkaProducer(bootstrap_servers=c, key_serializer=str.encode,
                                 value_serializer=AvroSerializer(r, TRUCK_POSITION_SCHEMA, SUBJECT))
        for report in FLEET[:20]:
            producer.send("trucks_gps", key=report["truck_id"], value=report)
        producer.flush()
        breaking = KafkaProducer(bootstrap_servers=c, value_serializer=AvroSerializer(r, RENAMED, SUBJECT))
        with pytest.raises(IncompatibleSchemaError, match="speed_ms"):
            breaking.send("trucks_gps", value=dict(FLEET[0], speed_ms=1.0))
        consumer = KafkaConsumer("trucks_gps", bootstrap_servers=c, group_id="dispatch",
                                 auto_offset_reset="earliest", value_deserializer=AvroDeserializer(r, V2))
        got = []
        for _ in range(20):
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(rec.value for rec in records)
            if len(got) == 20:
                break
        assert sorted(got, key=lambda v: (v["timestamp_ms"], v["truck_id"])) == [
            dict(report, fuel_pct=None) for report in FLEET[:20]]
        for client in (producer, breaking, consumer):
            client.close()


def test_without_auto_register_the_serializer_uses_a_registered_schema_or_says_it_is_missing():
    r = SchemaRegistry()
    serialize = AvroSerializer(r, V2, SUBJECT, auto_register=False)
    with pytest.raises(SchemaRegistryError, match="subject 'trucks_gps-value' has no schema"):
        serialize(FLEET[0])
    r.register(SUBJECT, TRUCK_POSITION_SCHEMA)
    with pytest.raises(SchemaRegistryError, match="not registered under 'trucks_gps-value'"):
        serialize(FLEET[0])
    r.register(SUBJECT, V2)
    assert unframe(serialize(FLEET[0]))[0] == 2 and r.versions(SUBJECT) == [1, 2]


def test_a_truncated_avro_body_is_refused_with_its_schema_id():
    r = SchemaRegistry()
    value = AvroSerializer(r, TRUCK_POSITION_SCHEMA, SUBJECT)(FLEET[0])
    with pytest.raises(SerializationError, match="schema id 1 is not a valid Avro body"):
        AvroDeserializer(r)(value[:12])
