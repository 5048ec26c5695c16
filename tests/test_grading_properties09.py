"""Hidden properties of lecture 09's exercises (``minikafka/course/wire_properties.py``), which
are not rules: ``parse_request`` judged against minikafka's codec, ``predict`` against the
package's partitioner, ``api_versions`` against a broker the grader serves
(``minikafka/course/grader_broker.py``). The solutions' functions pass on every seed; functions
fitted to the visible checks, a wrong rule where the visible checks do not look, and delegating
to the package fail the property that states the rule, in words that never show an input."""

from __future__ import annotations

import json
import os
import socket
import struct
import threading

import pytest

from grading_helpers import ROOT
from minikafka.course import properties, wire_properties
from minikafka.course.grader_broker import GraderBroker, answer_frame
from minikafka.partitioner import partition_for_key
from minikafka.wire import client_codec, codec

SEEDS = range(1, 21)
NAME = "09-speaking-kafka"
# Root makes the kernel a network namespace of its own (without root, only where the OS allows
# unprivileged user namespaces): the launcher's listener is then needed, and tested.
ROOT_ONLY = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                               reason="the kernel's own network namespace needs root")


def _solution_sources() -> dict[str, str]:
    """{cell id: source} of 09's exercise cells, the solution markers' lines left out, and the
    setup's read_exactly/read_frame, which the solutions use."""
    nb = json.loads((ROOT / "solutions" / f"{NAME}.ipynb").read_text())
    out = {}
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        if cell.get("id") == "setup":
            out["helpers"] = text[text.index("def read_exactly"):text.index('print("brokers alive')]
        if "exercise" in cell.get("metadata", {}).get("tags", []):
            out[cell["id"]] = "".join(line for line in cell["source"] if "### " not in line)
    return out


SOURCES = _solution_sources()


def functions(*sources: str) -> dict:
    """The functions the sources define, as the exercise notebook's kernel has them."""
    scope = {"struct": struct, "socket": socket, "partition_for_key": partition_for_key}
    for source in (SOURCES["helpers"], *sources):
        exec(source, scope)  # noqa: S102 - the course's own solutions and this file's variants
    return scope


REF = functions(SOURCES["ex1"], SOURCES["ex2"], SOURCES["ex3"])


def parse_answer(parse, frame):
    """What the call cell prints for parse_request (properties._REFUSING)."""
    try:
        return properties.plain(("returned", parse(frame)))
    except ValueError:
        return wire_properties.REFUSED


def first_failure(name, fn, seed, n=properties.CALLS):
    for args in properties.draw(name, seed, n):
        answer = parse_answer(fn, *args) if name == "parse_request" else properties.plain(fn(*args))
        why = properties.judge(name, args, answer)
        if why is not None:
            return why
    return None


def served_failure(fn, seed, n=properties.CALLS):
    """api_versions against the grader's broker, in this process: the first failure's words."""
    with GraderBroker() as broker:
        cases = properties.draw("api_versions", seed, n)
        slots = [broker.expect(case) for case in cases]
        broker.start()
        for case, slot in zip(cases, slots):
            broker.serve(slot)
            try:
                answer = properties.plain(fn(*properties.call_args("api_versions", case, broker.address)))
            except Exception as exc:  # noqa: BLE001 - the grader says "your code raised an exception"
                return f"raised {type(exc).__name__}"
            finally:
                broker.serve(None)
            why = properties.judge("api_versions", (case, broker.record(slot)), answer)
            if why is not None:
                return why
    return None


# --- found from the package, drawn from the seed ----------------------------------------------------

def test_09_s_exercises_have_properties_found_by_their_function_names():
    names = ["read_exactly", "parse_request", "api_versions", "predict", "codec_view"]
    assert properties.rules_of("09", names) == ["parse_request", "api_versions", "predict"]
    assert properties.rules_of("02", names) == []  # the lecture must be theirs
    assert properties.served("api_versions") and not properties.served("predict")
    # The package's code the watch forbids, read from the modules' source.
    assert "minikafka.wire.codec:decode_request" in properties.reference_specs("parse_request")
    assert "minikafka.wire.client_codec:decode_api_versions" in properties.reference_specs("api_versions")
    assert "minikafka.wire.client_codec:encode_api_versions_request" in properties.reference_specs("api_versions")
    # predict: the partitioner's classes, but not partition_for_key, which the exercise gives.
    predict = properties.reference_specs("predict")
    assert "minikafka.partitioner:DefaultPartitioner" in predict
    assert not [s for s in predict if s.endswith((":partition_for_key", ":murmur2", ":to_positive"))]


def test_the_draws_are_the_seed_s_alone_and_cover_what_the_exercises_state():
    for name in ("parse_request", "api_versions", "predict"):
        assert properties.draw(name, 7) == properties.draw(name, 7)
        assert properties.draw(name, 7) != properties.draw(name, 8), name
    frames = [args[0] for seed in (1, 2) for args in properties.draw("parse_request", seed)]
    views = [properties.expected("parse_request", (f,)) for f in frames]
    read = [v[1] for v in views if v[0] == "returned"]
    assert {(v["api_key"], v["api_version"]) for v in read if v["api_key"] == 3} >= {(3, v) for v in range(4, 9)}
    assert any(v["api_key"] == 3 and v["api_version"] >= 9 for v in read)     # flexible: header only
    assert {v["api_key"] for v in read} >= {3, 18}
    assert any(v["api_key"] == 18 and v["api_version"] >= 3 for v in read)    # tagged fields after the id
    ids = [v["client_id"] for v in read]
    assert None in ids and "" in ids and any(i and len(i.encode()) > 255 for i in ids)
    assert any(i and len(i.encode()) != len(i) for i in ids)                  # multi-byte UTF-8
    assert any("topics" in v and v["topics"] is None for v in read)
    assert views.count(wire_properties.REFUSED) >= 6
    assert any(v["correlation_id"] < 0 for v in read)
    cases = properties.draw("api_versions", 3)
    assert {c.answer[0] for c in cases} == {0, 35} and any(c.split for c in cases) and any(c.default for c in cases)
    assert {len(c.answer[1]) > 99 for c in cases} == {True, False} and any(not c.answer[1] for c in cases)
    for c in cases:  # a version newer than the broker's own ApiVersions range gets error 35
        if c.answer[0] == 35:
            assert c.api_version > c.answer[1][18][1]
    predict = properties.draw("predict", 3)
    assert {n for _, n, _ in predict} >= {1, 2} and any(not records for records, _, _ in predict)
    assert any(p is not None for records, _, _ in predict for _, p in records)
    assert all(any(o > 0 for o in offsets.values()) for _, n, offsets in predict if n > 2)


def test_every_well_formed_drawn_frame_is_one_the_codec_reads():
    # The refused frames are the exercise's three refusals; everything else the codec decodes.
    for seed in SEEDS:
        for (frame,) in properties.draw("parse_request", seed):
            (size,) = struct.unpack_from(">i", frame)
            if properties.expected("parse_request", (frame,)) == wire_properties.REFUSED and size == len(frame) - 4:
                assert struct.unpack_from(">h", frame, 4)[0] == codec.METADATA, frame


# --- the solutions pass -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["parse_request", "predict"])
def test_the_solutions_pass_on_every_seed(name):
    for seed in SEEDS:
        assert first_failure(name, REF[name], seed) is None, (name, seed)


def test_the_solution_s_api_versions_passes_against_the_grader_s_broker():
    for seed in (1, 2):
        assert served_failure(REF["api_versions"], seed) is None, seed


def test_the_grader_s_answers_are_ones_the_package_s_client_reads_alike():
    for case in properties.draw("api_versions", 4):
        error, ranges = case.answer
        frame = answer_frame(case.correlation_id, 0, ranges)
        assert client_codec.decode_api_versions(frame[4:]) == (case.correlation_id, ranges)


# --- fitted and wrong functions fail, in words -------------------------------------------------------

HARD_CODED_PARSE = '''
def parse_request(frame):
    if frame == bytes.fromhex("00000012000300080000000700017800000000010000"):
        return {'size': 18, 'api_key': 3, 'api_version': 8, 'correlation_id': 7, 'client_id': 'x', 'topics': [],
                'allow_auto_topic_creation': True, 'include_cluster_authorized_operations': False,
                'include_topic_authorized_operations': False}
    raise ValueError("not a frame I know")
'''
# The client id's length read as characters, not bytes: every ASCII id of the visible checks is right.
CHARS_PARSE = SOURCES["ex1"].replace('text = frame[pos:pos + n].decode("utf-8")\n        pos += n',
                                     'text = frame[pos:].decode("utf-8", "ignore")[:n]\n        pos += len(text.encode())')
# Accepts a Metadata body followed by bytes (the visible check has one trailing byte... at v6 only).
TRAILING_PARSE = SOURCES["ex1"].replace('if pos != len(frame):', 'if pos != len(frame) and out["api_version"] == 6:')
DELEGATED_PARSE = '''
from minikafka.wire import codec as _codec
def parse_request(frame):
    if struct.unpack_from(">i", frame)[0] != len(frame) - 4:
        raise ValueError("size")
    try:
        d = _codec.decode_request(frame[4:])
    except _codec.FrameError as e:
        raise ValueError(str(e))
    out = {"size": len(frame) - 4, "api_key": d.api_key, "api_version": d.api_version,
           "correlation_id": d.correlation_id, "client_id": d.client_id}
    if d.api_key == 3 and 4 <= d.api_version <= 8:
        out["topics"] = None if d.message.topics is None else list(d.message.topics)
        out["allow_auto_topic_creation"] = bool(d.kafka_request.allow_auto_topic_creation)
        if d.api_version >= 8:
            out["include_cluster_authorized_operations"] = bool(d.kafka_request.include_cluster_authorized_operations)
            out["include_topic_authorized_operations"] = bool(d.kafka_request.include_topic_authorized_operations)
    return out
'''
# The visible example's answer, hard-coded.
HARD_CODED_PREDICT = '''
def predict(records, num_partitions, next_offsets):
    return [(0, 10), (0, 11), (4, 7), (3, 0)][:len(records)]
'''
# A wrong rule where the visible checks (5 partitions, and 3) do not look: one partition counted from 0.
ONE_PARTITION_PREDICT = SOURCES["ex3"].replace(
    "next_offsets = dict(next_offsets)",
    "next_offsets = {0: 0} if num_partitions == 1 else dict(next_offsets)")


@pytest.mark.parametrize("source, said", [
    (HARD_CODED_PARSE, "it raised ValueError for a well-formed frame"),
    (CHARS_PARSE, "its answer differs from what minikafka's codec reads"),
    (TRAILING_PARSE, "it returned an answer for a frame the exercise says to refuse"),
], ids=["hard-coded", "length-in-characters", "trailing-bytes"])
def test_a_fitted_or_wrong_parse_request_fails_naming_the_rule(source, said):
    fn = functions(source)["parse_request"]
    assert parse_answer(fn, bytes.fromhex("00000012000300080000000700017800000000010000"))[0] == "returned"
    for seed in SEEDS:
        why = first_failure("parse_request", fn, seed)
        assert why is not None and said in why, (seed, why)


@pytest.mark.parametrize("source", [HARD_CODED_PREDICT, ONE_PARTITION_PREDICT], ids=["hard-coded", "one-partition"])
def test_a_fitted_or_wrong_predict_fails(source):
    fn = functions(source)["predict"]
    # Both give the visible example's answer.
    assert fn([(b"truck-007", None), (b"truck-007", None), (b"truck-001", 4), (b"truck-001", None)],
              5, {0: 10, 1: 0, 2: 3, 3: 0, 4: 7}) == [(0, 10), (0, 11), (4, 7), (3, 0)]
    failed = [first_failure("predict", fn, seed) for seed in SEEDS]
    assert all(why and "differ from where the package's producer and brokers put" in why for why in failed)


# One recv for the whole answer: right whenever the answer arrives at once.
ONE_RECV = SOURCES["ex2"].replace("answer = read_exactly(conn, size)", "answer = conn.recv(65536)")
# The client id's length as one byte: right for every id of the visible checks.
BYTE_LENGTH = SOURCES["ex2"].replace(
    'header = struct.pack(">hhih", 18, api_version, correlation_id, -1 if client_id is None else len(cid)) + cid',
    'header = struct.pack(">hhi", 18, api_version, correlation_id) + (b"\\xff\\xff" if client_id is None else '
    'struct.pack(">h", len(cid) % 256)) + cid')
# Replays the visible table: the real brokers' ranges, whatever the broker says.
HARD_CODED_RANGES = SOURCES["ex2"].replace(
    'return {"correlation_id": corr, "error_code": error, "api_keys": keys}',
    'from minikafka.wire import codec as _c\n    return {"correlation_id": corr, "error_code": error, '
    '"api_keys": dict(_c.SUPPORTED)}')
DEFAULT_ONE = SOURCES["ex2"].replace("api_version=0)", "api_version=1)")


@pytest.mark.parametrize("source, said", [
    (ONE_RECV, "raised error"),  # struct.error: half an answer
    (BYTE_LENGTH, ("the broker could not read its request", "its request's client id is not the one")),
    (HARD_CODED_RANGES, "the API ranges"),
    (DEFAULT_ONE, "its request's api version is not the one it was given"),
], ids=["one-recv", "client-id-length-byte", "hard-coded-ranges", "wrong-default"])
def test_a_wrong_api_versions_fails_on_what_the_broker_received_or_sent(source, said):
    fn = functions(source)["api_versions"]
    why = served_failure(fn, 1)
    assert why is not None and any(s in why for s in ((said,) if isinstance(said, str) else said)), why


def test_the_broker_sees_the_requests_and_refuses_connections_outside_a_call():
    with GraderBroker() as broker:
        case = properties.draw("api_versions", 2)[0]
        slot = broker.expect(case)
        broker.start()
        with socket.create_connection(broker.address, timeout=5) as outside:  # no call runs: closed at once
            assert outside.recv(10) == b""
        broker.serve(slot)
        silent = socket.create_connection(broker.address, timeout=5)
        second = threading.Thread(target=REF["api_versions"],
                                  args=properties.call_args("api_versions", case, broker.address))
        second.start()
        second.join()
        silent.close()
        broker.serve(None)
        why = properties.judge("api_versions", (case, broker.record(slot)), properties.plain(
            {"correlation_id": case.correlation_id, "error_code": case.answer[0], "api_keys": case.answer[1]}))
    assert why and "more than one connection" in why


def test_the_messages_never_show_a_case():
    fn = functions(CHARS_PARSE)["parse_request"]
    for (frame,) in properties.draw("parse_request", 5):
        why = properties.judge("parse_request", (frame,), parse_answer(fn, frame))
        view = properties.expected("parse_request", (frame,))
        if why and view[0] == "returned":
            assert repr(view[1]["client_id"]) not in why
            assert abs(view[1]["correlation_id"]) < 100 or str(view[1]["correlation_id"]) not in why
    for wrong in (BYTE_LENGTH, HARD_CODED_RANGES):
        why = served_failure(functions(wrong)["api_versions"], 2, 6)
        case = properties.draw("api_versions", 2, 6)
        assert why and not any(str(c.correlation_id) in why for c in case if abs(c.correlation_id) > 99)
        assert not any(str(key) in why for c in case for key in c.answer[1] if key > 99)


# --- in the kernel -----------------------------------------------------------------------------------

@pytest.mark.notebooks
@ROOT_ONLY
def test_the_call_cells_reach_the_grader_s_broker_from_the_sandbox_and_the_watch_sees_the_codec():
    """The grader's call cells in a sandboxed kernel, whose 127.0.0.1 is its own: api_versions
    reaches the grader's broker through the listener the launcher hands over; the solution's
    three functions pass; parse_request delegating to the codec is caught by the watch."""
    from minikafka.course import watch
    from minikafka.course.grade import property_check
    from minikafka.course.runner import run_cells
    from minikafka.course.sandbox import Limits, Sandbox

    setup = "import socket, struct\nfrom minikafka.partitioner import partition_for_key\n" + SOURCES["helpers"]
    verdicts = {}
    with GraderBroker() as broker:
        cells, judged, sealed = [], [], []
        for label, name, code in (("right", "parse_request", SOURCES["ex1"]), ("right", "api_versions", SOURCES["ex2"]),
                                  ("right", "predict", SOURCES["ex3"]), ("package", "parse_request", DELEGATED_PARSE)):
            cells.append((code, None))
            specs = properties.reference_specs(name)
            for case in properties.draw(name, 11, 6):
                slot = broker.expect(case) if properties.served(name) else None
                args = properties.call_args(name, case, broker.address if slot is not None else None)
                cells.append((properties.call_cell(name, args, specs, [name], "@n:"), slot))
                sealed += specs
                judged.append((label, name, case, slot, len(cells) - 1))
        with Sandbox(Limits(), (), listen_port=broker.port) as box:
            assert box.listens == "own", box.listens  # the kernel has a network namespace of its own
            broker.adopt(box.listener)
            broker.start()
            handshake = watch.Handshake()
            runs = run_cells(box, [watch.seal_cell(sealed, handshake.public) + setup] + [c for c, _ in cells],
                             cell_timeout=20, budget=120,
                             before=lambda i: broker.serve(cells[i - 1][1] if i else None))
        assert runs[0].status == "ok", runs[0]
        secret = handshake.key(runs[0].stream_text)
        by: dict = {}
        for label, name, case, slot, at in judged:
            args = (case, broker.record(slot)) if slot is not None else case
            by.setdefault((label, name), []).append((args, "@n:", runs[at + 1]))
        for key, calls in by.items():
            verdicts[key] = property_check(key[1], calls, secret,
                                           watch.armed_text(properties.reference_specs(key[1]), [key[1]], True))
    for name in ("parse_request", "api_versions", "predict"):
        assert verdicts[("right", name)].passed, verdicts[("right", name)].message
    package = verdicts[("package", "parse_request")]
    assert not package.passed and "the package's own implementation of the exercise ran" in package.message
    assert "minikafka.wire.codec:decode_request" in package.message


def _light(reference: dict) -> dict:
    """Notebook 09 without its cluster (three broker processes and a controller: the properties
    need none): the setup keeps its imports and helpers, the checks that ask the cluster go, and
    Exercise 2 keeps a check that prints a line (an exercise needs one to be graded)."""
    cells = []
    for cell in reference["cells"]:
        text = "".join(cell["source"])
        if cell.get("id") == "setup":
            cell["source"] = ["import socket, struct\nfrom minikafka.partitioner import partition_for_key\n"
                              + SOURCES["helpers"] + "print('brokers alive: [True, True, True]')\n"]
        elif "check" in cell.get("metadata", {}).get("tags", []) and any(
                w in text for w in ("cluster", "captured", "frames", "good =", "producer")):
            if cell.get("id") != "ex2-check-table":
                continue
            cell["source"] = ["print('checked')"]
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["checked\n"]}]
        elif cell["cell_type"] == "code" and cell.get("id") in ("ex1-harness", "ex3-harness", "cleanup"):
            continue
        cells.append(cell)
    reference["cells"] = cells
    return reference


@pytest.mark.notebooks
def test_grading_09_runs_the_three_properties_and_fails_only_the_wrong_exercise():
    import shutil
    import tempfile
    from pathlib import Path

    from grading_helpers import SANITIZE, solved_submission
    from minikafka.course.grade import Settings
    from minikafka.course.gradebook import feedback, grade_all

    solution = json.loads((ROOT / "solutions" / f"{NAME}.ipynb").read_text())
    folder = Path(tempfile.mkdtemp(prefix="minikafka-props09-"))
    try:
        (folder / "ref").mkdir()
        (folder / "ref" / f"{NAME}.ipynb").write_text(json.dumps(_light(solution)))
        students = {"right": {}, "wrong": {"ex1": TRAILING_PARSE, "ex2": ONE_RECV, "ex3": ONE_PARTITION_PREDICT}}
        for student, replace in students.items():
            (folder / "class" / student).mkdir(parents=True)
            (folder / "class" / student / f"{NAME}.ipynb").write_text(json.dumps(solved_submission(NAME, replace)))
        results = grade_all(folder / "class", folder / "ref",
                            Settings(sanitize=SANITIZE, seed=4242, property_seed=7), jobs=1)
    finally:
        shutil.rmtree(folder)
    by = {r.student: r for r in results}
    right = by["right"]
    labels = [[(c.label, c.passed) for c in e.checks if c.label.startswith("hidden property")] for e in right.exercises]
    assert labels == [[("hidden property: parse_request", True)], [("hidden property: api_versions", True)],
                      [("hidden property: predict", True)]], feedback(right)
    assert [e.earned for e in right.exercises] == [3, 3, 4], feedback(right)
    wrong = by["wrong"]
    assert [e.earned for e in wrong.exercises] == [0, 0, 0], feedback(wrong)
    for exercise, name, said in zip(wrong.exercises, ("parse_request", "api_versions", "predict"),
                                    ("it returned an answer for a frame the exercise says to refuse",
                                     "your code raised an exception",
                                     "differ from where the package's producer and brokers put")):
        [failed] = [c for c in exercise.checks if not c.passed]
        assert failed.label == f"hidden property: {name}" and said in failed.message, feedback(wrong)
        assert "it checks that" in failed.message and "b'" not in failed.message and "\\x" not in failed.message


@pytest.mark.notebooks
@ROOT_ONLY
def test_the_kernel_s_loopback_is_its_own_so_the_launcher_hands_over_the_listener():
    """Why the broker needs the launcher: a socket the grader listens on in its own network is
    out of the caged kernel's reach; with the network shared (a notebook's limits allow it), the
    grader's own socket is the one, and the sandbox says so."""
    from minikafka.course.runner import run_cells
    from minikafka.course.sandbox import Limits, Sandbox

    probe = ("import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=5).close()\n"
             "    print('reached')\nexcept OSError as e:\n    print('refused', type(e).__name__)\n")
    with socket.create_server(("127.0.0.1", 0)) as own:
        port = own.getsockname()[1]
        with Sandbox(Limits(), ()) as box:
            [run] = run_cells(box, [probe.format(port=port)], cell_timeout=20, budget=20)
            assert run.outputs[0]["text"].startswith("refused"), run
        with Sandbox(Limits(network=True), (), listen_port=port) as box:
            assert box.listens == "shared" and box.listener is None
            [run] = run_cells(box, [probe.format(port=port)], cell_timeout=20, budget=20)
            assert run.outputs[0]["text"] == "reached\n", run
