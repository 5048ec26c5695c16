"""Hidden properties of exercises whose functions are not rules: lecture 09's wire protocol.

Theory of operation
-------------------
``properties.py`` finds an exercise's property by the name of a function its solution defines:
one of Kafka's rules (``minikafka.rules.RULES``), or, for an exercise the package has no seam
for, one of ``EXERCISES`` here, keyed by the function's name and its lecture. Lecture 09 asks for
three such functions: ``parse_request(frame)``, ``api_versions(address, correlation_id,
client_id, api_version=0)`` and ``predict(records, num_partitions, next_offsets)``. Each entry
says, as a rule does, its statement, how to draw the ``i``-th case (the cases the exercise names
in turn, random values around them), the answer the package gives (computed here, in the grader's
process), and the package's own code that must not run inside the student's function:

- ``parse_request``: frames kafka-python builds (Metadata v4-v8 with their bodies, Metadata
  v9-v12, ApiVersions v0-v4 and FindCoordinator/ListGroups, whose headers only are read; client
  ids null, empty, ASCII, multi-byte UTF-8 and longer than 255 bytes; correlation ids at the
  int32 bounds) and the frames the exercise says to refuse (a size that does not match, a
  Metadata body cut short or with bytes after it). The answer is what ``minikafka.wire.codec``
  reads from the frame (``codec_view``), or "raises ValueError".
- ``api_versions``: the call gets the address of a broker of the grader's own
  (``grader_broker.py``), which answers with ranges and an error code drawn here (error 35 for a
  version newer than the drawn ApiVersions range, as the exercise says), some answers in two
  pieces. The judge checks the one request the broker received (api key, version, correlation
  id, client id, an empty body; read by the package's decoder) and that the answer equals what
  was served. The kernel never sees the ranges before the student's code reads them.
- ``predict``: keyed records and records sent to an explicit partition, one partition or many,
  offsets not starting at 0, the same key again. The answer is the package's partitioner's
  (``DefaultPartitioner``) and offsets counted per partition. The exercise's keys are bytes: a
  null key without a partition goes to the sticky partition, which no one can predict, so the
  exercise leaves it out and so do the draws.

The package's code a student's function must not run is found from the package, not listed by
hand: every top-level function and class of the modules that implement the exercise (the wire
codecs, the client runtime; the partitioner's classes), read from their source. What the
exercise gives stays allowed: ``partition_for_key`` (and the murmur2 under it), which 09's setup
imports for ``predict``.

Not reached: kafka-python's own protocol classes (the codec's layouts come from them) are not
the package's, so a ``parse_request`` that decodes with ``MetadataRequest.decode`` is not caught
by the watch; its answers must still be the codec's, refusals included.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import random
import struct
from dataclasses import dataclass
from typing import Any, Callable

# --- parse_request -------------------------------------------------------------------------------

_CLIENT_IDS = ("none", "empty", "ascii", "utf8", "long")


def _client_id(rng: random.Random, kind: str) -> str | None:
    if kind == "none":
        return None
    if kind == "empty":
        return ""
    if kind == "ascii":
        return "".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789-_.", k=rng.randrange(1, 40)))
    if kind == "utf8":  # characters of 2, 3 and 4 bytes: the length is in bytes
        return "".join(rng.choices("truck-é\u00fc\u30c8\u30e9\U0001f69a", k=rng.randrange(1, 20)))
    return "".join(rng.choices("ab\u00e9\u30c8", k=rng.randrange(200, 400)))  # over 255 bytes


def _correlation_id(rng: random.Random) -> int:
    return rng.choice([0, 2**31 - 1, -1, -2**31, rng.randrange(1, 2**31)])


def frame_of(request: Any, version: int, correlation_id: int, client_id: str | None) -> bytes:
    """A whole request frame, as kafka-python frames it (the notebook's ``frame_of``)."""
    from kafka.protocol.parser import KafkaProtocol

    parser = KafkaProtocol(client_id=client_id)
    request.API_VERSION = version
    parser.send_request(request, correlation_id=correlation_id)
    return bytes(parser.send_bytes())


def _metadata(rng: random.Random, version: int, correlation_id: int, client_id: str | None) -> bytes:
    from kafka.protocol.metadata import MetadataRequest

    topics = rng.choice([None, [], [f"t{k}" for k in range(rng.randrange(1, 40))],
                         ["trucks_gps", "__consumer_offsets", "a.b-c_d"]])
    return frame_of(MetadataRequest(
        topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=rng.random() < 0.5,
        include_cluster_authorized_operations=rng.random() < 0.5,
        include_topic_authorized_operations=rng.random() < 0.5), version, correlation_id, client_id)


def _other(rng: random.Random, correlation_id: int, client_id: str | None) -> bytes:
    from kafka.protocol.admin import ListGroupsRequest
    from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest

    kind = rng.randrange(3)
    if kind == 0:  # v3 and v4 are flexible: tagged fields after the client id
        return frame_of(ApiVersionsRequest(client_software_name="exercise", client_software_version="1"),
                        rng.randrange(0, 5), correlation_id, client_id)
    if kind == 1:
        return frame_of(FindCoordinatorRequest(key=rng.choice(["g", "my-group", "billing"]), key_type=0),
                        rng.randrange(0, 3), correlation_id, client_id)
    return frame_of(ListGroupsRequest(), rng.randrange(0, 3), correlation_id, client_id)


def _parse_request(rng: random.Random, i: int) -> tuple:
    """Cases in turn: Metadata v4-v7 (each version), v8 or v9-v12 (header only), another API,
    a size that does not match, a Metadata body cut short, bytes after it; client ids of every
    kind (``i`` modulo 5)."""
    case = i % 6
    correlation_id, client_id = _correlation_id(rng), _client_id(rng, _CLIENT_IDS[i % 5])
    if case == 0:
        return (_metadata(rng, 4 + (i // 6) % 5, correlation_id, client_id),)
    if case == 1:  # v8's two more booleans and the flexible versions in turn
        return (_metadata(rng, 8 if (i // 6) % 2 else rng.randrange(9, 13), correlation_id, client_id),)
    if case == 2:
        return (_other(rng, correlation_id, client_id),)
    if case == 3:
        frame = (_metadata(rng, rng.randrange(4, 9), correlation_id, client_id) if rng.random() < 0.5
                 else _other(rng, correlation_id, client_id))
        size = len(frame) - 4 + rng.choice([-2, -1, 1, 2, 1000])
        return (struct.pack(">i", size) + frame[4:],)
    frame = _metadata(rng, rng.randrange(4, 9), correlation_id, client_id)
    header = 14 + (len(client_id.encode()) if client_id is not None else 0)
    if case == 4:  # cut inside the body, the size saying so
        body = frame[header:]
        frame = frame[:header] + body[:rng.randrange(0, len(body))]
    else:
        frame += bytes(rng.randrange(0, 256) for _ in range(rng.randrange(1, 4)))
    return (struct.pack(">i", len(frame) - 4) + frame[4:],)


def codec_view(frame: bytes) -> dict:
    """What minikafka's codec reads from a whole frame, in parse_request's shape (the notebook's
    ``codec_view``). Raises ``codec.FrameError`` for a frame the codec refuses."""
    from minikafka.wire import codec

    decoded = codec.decode_request(frame[4:])
    view = {"size": len(frame) - 4, "api_key": decoded.api_key, "api_version": decoded.api_version,
            "correlation_id": decoded.correlation_id, "client_id": decoded.client_id}
    if decoded.api_key == codec.METADATA and 4 <= decoded.api_version <= 8:
        topics = decoded.message.topics
        view["topics"] = None if topics is None else list(topics)
        request = decoded.kafka_request
        view["allow_auto_topic_creation"] = bool(request.allow_auto_topic_creation)
        if decoded.api_version >= 8:
            view["include_cluster_authorized_operations"] = bool(request.include_cluster_authorized_operations)
            view["include_topic_authorized_operations"] = bool(request.include_topic_authorized_operations)
    return view


REFUSED = ("raised", "ValueError")


def _parse_request_expected(args: tuple) -> tuple:
    """("returned", the codec's view) or ("raised", "ValueError"), as the call cell prints."""
    from minikafka.wire import codec

    (frame,) = args
    (size,) = struct.unpack_from(">i", frame, 0)
    if size != len(frame) - 4:
        return REFUSED
    try:
        return ("returned", codec_view(frame))
    except codec.FrameError:
        return REFUSED


def _parse_request_judge(args: tuple, theirs: Any) -> str | None:
    want = _plain(_parse_request_expected(args))
    if theirs == want:
        return None
    if want == REFUSED:
        return ("it returned an answer for a frame the exercise says to refuse (a size that does not "
                "match the bytes after it, a Metadata body cut short or with bytes after it): raise ValueError")
    if theirs == REFUSED:
        return "it raised ValueError for a well-formed frame"
    return ("its answer differs from what minikafka's codec reads in one of the drawn frames (the "
            "header's fields, the client id, or a Metadata v4-v8 body)")


# --- api_versions ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ApiVersionsCase:
    """One call: what the call sends (correlation id, client id, version; ``default``: the
    version left to the function's default) and what the grader's broker answers (``answer``:
    error code and {api key: (min, max)}; ``split``: in two pieces)."""

    correlation_id: int
    client_id: str | None
    api_version: int
    default: bool
    answer: tuple[int, dict[int, tuple[int, int]]]
    split: bool


def _ranges(rng: random.Random, n: int) -> dict[int, tuple[int, int]]:
    keys = rng.sample(range(0, 100), min(n, 100)) + rng.sample(range(100, 32768), max(0, n - 100))
    out = {}
    for key in keys:
        low = rng.choice([0, 0, rng.randrange(0, 20)])
        out[key] = (low, low + rng.choice([0, rng.randrange(0, 20), rng.randrange(0, 300)]))
    return out


def _api_versions(rng: random.Random, i: int) -> ApiVersionsCase:
    """Cases in turn: version 0 (given or left to the default), a version newer than the broker's
    (error 35, the same v0 layout); no API, one, a few, hundreds; every fourth answer split."""
    newer = i % 3 == 2
    version = rng.randrange(4, 40) if newer else 0
    ranges = _ranges(rng, (0, 1, rng.randrange(2, 40), rng.randrange(100, 400))[i % 4])
    if newer or (ranges and rng.random() < 0.8):  # ApiVersions itself, below the version asked beyond it
        ranges[18] = (0, rng.randrange(0, 4))
    return ApiVersionsCase(_correlation_id(rng) if i % 5 else rng.choice([0, 2**31 - 1]),
                           _client_id(rng, _CLIENT_IDS[(i + 1) % 5]), version, not newer and i % 2 == 0,
                           (35 if newer else 0, ranges), i % 4 == 1)


def _api_versions_args(case: ApiVersionsCase, address: tuple[str, int]) -> tuple:
    base = (address, case.correlation_id, case.client_id)
    return base if case.default else base + (case.api_version,)


def _api_versions_expected(case: ApiVersionsCase) -> dict:
    error, ranges = case.answer
    return {"correlation_id": case.correlation_id, "error_code": error, "api_keys": dict(ranges)}


def _request_problem(case: ApiVersionsCase, connections: list) -> str | None:
    """What is wrong with what the grader's broker received for this call; None if it is one
    ApiVersions request with the call's fields, read by minikafka's codec."""
    from minikafka.wire import codec

    if not connections:
        return "it did not connect to the address it was given (a (host, port) pair)"
    if len(connections) > 1:
        return "it opened more than one connection in one call; the exercise opens one, sends one request, reads its answer"
    (conn,) = connections
    if not conn.frames:
        return ("the broker received no whole request frame: an int32 size counting the bytes after it, "
                "then the header")
    if len(conn.frames) > 1:
        return "it sent more than one request on its connection; the exercise sends one"
    frame = conn.frames[0]
    try:
        decoded = codec.decode_request(frame[4:])
    except codec.FrameError:
        return ("the broker could not read its request as a request header (int16 api key, int16 version, "
                "int32 correlation id, then the client id as an int16 length in bytes and UTF-8)")
    if decoded.api_key != codec.API_VERSIONS:
        return "its request's api key is not ApiVersions' (18)"
    if decoded.api_version != case.api_version:
        return "its request's api version is not the one it was given (0 when none is given)"
    if decoded.correlation_id != case.correlation_id:
        return "its request's correlation id is not the one it was given"
    if decoded.client_id != case.client_id:
        return "its request's client id is not the one it was given (None is a null string: length -1)"
    if len(frame) != 14 + (0 if case.client_id is None else len(case.client_id.encode())):
        return "its request has bytes after the client id: ApiVersions' body is empty here"
    return None


def _api_versions_judge(served: tuple, theirs: Any) -> str | None:
    case, connections = served
    problem = _request_problem(case, connections)
    if problem:
        return problem
    want = _plain(_api_versions_expected(case))
    if not isinstance(theirs, dict) or set(theirs) != set(want):
        return 'its answer is not a dict with the keys "correlation_id", "error_code" and "api_keys"'
    for key, words in (("correlation_id", "the correlation id"), ("error_code", "the error code"),
                       ("api_keys", "the API ranges ({api_key: (min_version, max_version)})")):
        if theirs[key] != want[key]:
            return (f"{words} it returned differ from what the grader's broker sent (read the answer's "
                    f"size, then the whole answer: recv may return less)")
    return None


# --- predict --------------------------------------------------------------------------------------

def _predict(rng: random.Random, i: int) -> tuple:
    """Cases in turn: one partition, two, a few, many; no record every fifth call; keys repeated
    (a partition's offsets go on), explicit partitions; offsets from 0, small, past 2**32."""
    n = (1, 2, rng.randrange(3, 11), rng.randrange(11, 200))[i % 4]
    pool = [rng.randbytes(rng.randrange(0, 20)) for _ in range(rng.randrange(1, 8))]
    count = 0 if i % 5 == 4 else rng.randrange(1, 60)
    records = [(rng.choice(pool), rng.randrange(n) if rng.random() < 0.25 else None) for _ in range(count)]
    offsets = {p: rng.choice([0, rng.randrange(1, 1000), 2**32 + rng.randrange(10**6)]) for p in range(n)}
    if n == 1:  # one partition: from 0 and from further on in turn
        offsets[0] = rng.choice([rng.randrange(1, 1000), 2**32 + rng.randrange(10**6)]) if (i // 4) % 2 else 0
    return records, n, offsets


def _predict_expected(args: tuple) -> list[tuple[int, int]]:
    """Where the package's producer sends each record (its ``DefaultPartitioner``) and the offset
    the partition's leader gives it: the next of that partition."""
    from minikafka.partitioner import DefaultPartitioner

    records, n, next_offsets = args
    partitioner, offsets, out = DefaultPartitioner(), dict(next_offsets), []
    for key, partition in records:
        p = partitioner.partition("fleet", key, n) if partition is None else partition
        out.append((p, offsets[p]))
        offsets[p] += 1
    return out


def _predict_judge(args: tuple, theirs: Any) -> str | None:
    if theirs == _plain(_predict_expected(args)):
        return None
    return ("its (partition, offset) pairs differ from where the package's producer and brokers put the "
            "drawn records (murmur2 of the key unless a partition is given; each partition's offsets "
            "counting on from next_offsets, in the order of the sends)")


# --- the table ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExerciseProperty:
    """The property of an exercise function the package has no rule for."""

    lecture: str
    statement: str
    draw: Callable[[random.Random, int], Any]
    judge: Callable[[Any, Any], str | None]   # (case, or (case, what the broker received); answer)
    modules: tuple[str, ...]                  # the package's modules implementing it (all forbidden)
    classes_only: bool = False                # forbid their classes only (their functions are given)
    refusals: bool = False                    # ValueError is an answer ("raised", "ValueError")
    served: Callable[[Any, tuple[str, int]], tuple] | None = None  # call args with the broker's address
    calls: int | None = None                  # drawn calls per grading (None: properties.CALLS)
    kernel: str | None = None                 # the call in the kernel, setting _mk_r (None: name(*_mk_args))
    forbid: Callable[[], tuple[str, ...]] | None = None  # the package's code it must not run (None: modules')


EXERCISES: dict[str, ExerciseProperty] = {
    "parse_request": ExerciseProperty(
        "09", "it reads a request frame's header (size, api key, version, correlation id, a nullable "
        "client id) of any API and version, a Metadata v4-v8 body, and refuses a frame whose size "
        "does not match or whose Metadata body is cut short or followed by bytes (ValueError)",
        _parse_request, _parse_request_judge,
        ("minikafka.wire.codec", "minikafka.wire.client_codec"), refusals=True),
    "api_versions": ExerciseProperty(
        "09", "it sends one ApiVersions request with the given correlation id, client id and version "
        "on a fresh connection, and returns the broker's answer (correlation id, error code, every "
        "API's range) read whole from the v0 layout",
        _api_versions, _api_versions_judge,
        ("minikafka.wire.codec", "minikafka.wire.client_codec", "minikafka.wire.client_runtime"),
        served=_api_versions_args),
    "predict": ExerciseProperty(
        "09", "it gives each record's partition (murmur2 of the key, or the partition given) and "
        "offset (its partition's next, from next_offsets) for any keys, partitions and offsets",
        _predict, _predict_judge, ("minikafka.partitioner",), classes_only=True),
}


def expected(name: str, case: Any) -> Any:
    """The answer the package gives on ``case``, as plain data (``api_versions``: what was served)."""
    if name == "parse_request":
        return _plain(_parse_request_expected(case))
    if name == "api_versions":
        return _plain(_api_versions_expected(case))
    return _plain(_predict_expected(case))


@functools.lru_cache(maxsize=None)
def module_specs(module: str, classes_only: bool = False) -> tuple[str, ...]:
    """"module:name" for every top-level function and class of ``module``, read from its source
    (not imported)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return ()
    with open(spec.origin, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    kinds = (ast.ClassDef,) if classes_only else (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return tuple(f"{module}:{node.name}" for node in tree.body if isinstance(node, kinds))


def forbidden(prop: ExerciseProperty) -> list[str]:
    """The package's code that must not run inside the exercise's function."""
    if prop.forbid is not None:
        return list(prop.forbid())
    return [s for module in prop.modules for s in module_specs(module, prop.classes_only)]


def _plain(value: Any) -> Any:
    """``properties.plain`` (imported here: ``properties`` imports this module)."""
    from minikafka.course.properties import plain

    return plain(value)
