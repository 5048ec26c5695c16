"""Hidden properties (issue 34, items 2 and 3): the grader's verdict, on inputs drawn per grading run.

The fast tests drive ``minikafka.course.properties`` without a kernel: every rule the package
holds has a generator, the draws depend on the grading seed only, and classic wrong rules are
caught on every seed tried. The graded test runs notebook 01 (its cluster and campaign checks
left out, for time) in the sandbox: a wrapper around the package's rule and a rule fitted to
every check the notebook shows (which both earned 10/10 before) fail the hidden property, the
solutions' exercises beside them pass theirs, and the messages never show an input.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from minikafka.course import properties
from minikafka.course.grade import Settings
from minikafka.course.gradebook import csv_rows, feedback, grade_all
from minikafka.rules import RULES

from grading_helpers import solved_submission  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SANITIZE = ROOT / "tests" / "nbval-sanitize.cfg"
SEEDS = range(1, 21)


def test_every_pure_rule_of_the_package_has_a_property():
    pure = {name for name, rule in RULES.items() if not rule.effects}
    assert pure == set(properties.DRAWS)
    # Found from the package, by the lecture: 08's truncation_offset is not 04's rule.
    assert properties.rules_of("04", ["truncation_offset", "end_offset_for"]) == ["truncation_offset"]
    assert properties.rules_of("08", ["truncation_offset", "metadata_truncation_offset"]) == \
        ["metadata_truncation_offset"]
    # 07's loops (rules with effects) have properties of their own: tests/test_grading_properties07.py
    assert properties.rules_of("07", ["no_record_lost", "decode_key"]) == ["no_record_lost", "decode_key"]
    from minikafka.course.grade import _lecture

    assert _lecture("04-replication-and-isr.ipynb") == "04" and _lecture("mine.ipynb") is None


def test_the_package_s_own_functions_are_found_from_its_source():
    # The helpers of an exercise that the package also has are watched in every call, no list kept.
    assert properties.package_specs(["to_positive", "partition_for_key", "moved_keys"]) == [
        "minikafka.partitioner:to_positive", "minikafka.partitioner:partition_for_key"]
    assert "minikafka.rules:end_offset_for" in properties.package_specs(["end_offset_for"])
    assert properties.package_specs(["grading_seed", "campaign_outcome"]) == []  # the course's own: not rules


def test_the_draws_are_the_seeds_alone():
    for name in properties.DRAWS:
        assert properties.draw(name, 7) == properties.draw(name, 7)
        assert properties.draw(name, 7) != properties.draw(name, 8), name
    with pytest.raises(KeyError, match="no hidden property for rule 'nope'"):
        properties.draw("nope", 1)


def _wrong_rules():
    """Classic mistakes, one or two per rule the statement names."""
    ref = {name: rule.reference for name, rule in RULES.items()}

    def hw_no_pending(hw, leader, leo, follower_leos, isr, pending):
        return ref["high_watermark"](hw, leader, leo, follower_leos, isr, None)

    def hw_backwards(hw, leader, leo, follower_leos, isr, pending):
        return ref["high_watermark"](-1, leader, leo, follower_leos, isr, pending)

    def abs_partition(key, n):
        return abs(ref["murmur2"](key)) % n

    def index_first(entries, offset, base):
        return entries[0] if entries else (base, 0)

    def roll_ge(segment, batch, config):
        if segment.size and segment.size + batch.size >= config.segment_bytes:
            return "segment.bytes"
        return ref["roll_reason"](segment, batch, config)

    def overflow_absolute(segment, batch, config):
        reason = ref["roll_reason"](segment, batch, config)
        if reason == "offset overflow" or (segment.size and reason is None and batch.last_offset > 2**31 - 1):
            return "offset overflow" if batch.last_offset > 2**31 - 1 else None
        return reason

    def vote_no_log(voter, request):
        return ref["grant_vote"](voter, request._replace(last_epoch=10**9))

    def elect_any_isr(replicas, isr, live, unclean):
        return next((b for b in isr if b in live), None if not unclean else next(
            (b for b in replicas if b in live), None))

    def unclean_first_live(replicas, isr, live, unclean):
        return next((r for r in replicas if r in live and (unclean or r in isr)), None)

    def retention_active(segments, now, ms, nbytes):
        deleted = ref["segments_to_delete"](segments, now, ms, -1)
        kept = [s for s in segments if s.base_offset not in {d[0] for d in deleted}]
        excess = sum(s.size for s in kept) - nbytes
        for s in kept:
            if nbytes < 0 or excess - s.size < 0:
                break
            excess -= s.size
            deleted.append((s.base_offset, "retention.bytes"))
        return deleted

    def batch_no_flush(batch_bytes, size, behind, waited, linger, flushing):
        return ref["batch_ready"](batch_bytes, size, behind, waited, linger, False)

    def check_no_wrap(state, pid, epoch, first, count):
        if pid in state and state[pid][0] == epoch and state[pid][1][-1][1] == 2**31 - 1 and first == 0:
            return "out of order"  # first == last + 1 without the 31-bit wrap
        return ref["check_batch"](state, pid, epoch, first, count)

    def range_unsorted(counts, subscriptions):
        out = {m: [] for m in subscriptions}
        for topic, n in counts.items():
            members = [m for m, t in subscriptions.items() if topic in t]
            for p in range(n if members else 0):
                out[members[p % len(members)]].append((topic, p))
        return out

    def truncation_leader_end(leader_epoch, leader_end, follower_epochs, leo, start):
        return leader_end

    def caught_up_now(last, fetch, previous):
        return fetch[0] if fetch[1] >= fetch[2] else last

    def decode_v0_only(data):
        value = ref["decode_key"](data)
        return value if value[0] == "offset" else ("group", data[2:].decode())

    return [("high_watermark", hw_no_pending), ("high_watermark", hw_backwards),
            ("elect_leader", unclean_first_live), ("partition_for_key", abs_partition), ("index_lookup", index_first),
            ("roll_reason", roll_ge), ("grant_vote", vote_no_log), ("elect_leader", elect_any_isr),
            ("segments_to_delete", retention_active), ("batch_ready", batch_no_flush),
            ("check_batch", check_no_wrap), ("range_assign", range_unsorted),
            ("truncation_offset", truncation_leader_end), ("metadata_truncation_offset", truncation_leader_end),
            ("last_caught_up", caught_up_now), ("decode_key", decode_v0_only)]


@pytest.mark.parametrize("name, wrong", _wrong_rules(), ids=lambda v: getattr(v, "__name__", v))
def test_a_wrong_rule_fails_its_property_on_every_seed(name, wrong):
    for seed in SEEDS:
        answers = [(args, properties.plain(wrong(*args))) for args in properties.draw(name, seed)]
        assert not all(properties.same(name, args, answer) for args, answer in answers), (name, seed)


def test_kafkas_rules_pass_and_answers_are_read_as_plain_data_only():
    for name in properties.DRAWS:
        for args in properties.draw(name, 3):
            assert properties.same(name, args, properties.plain(properties.expected(name, args)))
    from minikafka.course import watch

    key = watch.new_key()
    armed = watch.armed_text(["minikafka.partitioner:murmur2"], ["murmur2"], True)

    def line(said: str, answer: str, signed_with: bytes = key, signed_armed: str = armed) -> str:
        return "@n:" + repr(((said, watch.signature(signed_with, "@n:", said, answer, signed_armed)), answer))

    assert properties.parse("debug\n" + line("ok", "(1, b'x')") + "\n", "@n:", key, armed) == ("ok", (1, b"x"))
    assert properties.parse(line("ok", "Segment(1, 2)"), "@n:", key, armed) is None
    assert properties.parse("@n:__import__('os')", "@n:", key, armed) is None
    assert properties.parse("no nonce", "@n:", key, armed) is None
    # A verdict stands only as the hook signed it: for this nonce, this answer, with this grading's
    # key, on the watch armed as the grader asked (not over nothing, by a patched sys.audit).
    assert properties.parse(line("ok", "1", watch.new_key()), "@n:", key, armed) == (watch.UNSIGNED, 1)
    signed_for_1 = watch.signature(key, "@n:", "ok", "1", armed)
    assert properties.parse("@n:" + repr((("ok", signed_for_1), "2")), "@n:", key, armed) == (watch.UNSIGNED, 2)
    assert properties.parse("@n:(('ok',), '1')", "@n:", key, armed) == (watch.UNSIGNED, 1)
    nothing = watch.armed_text([], [], True)
    assert properties.parse(line("ok", "1", signed_armed=nothing), "@n:", key, armed) == (watch.UNSIGNED, 1)


@pytest.mark.notebooks
def test_an_endless_loop_costs_one_call_s_time_limit():
    from minikafka.course import watch
    from minikafka.course.grade import property_check
    from minikafka.course.runner import run_cells
    from minikafka.course.sandbox import Limits, Sandbox

    loop = "def murmur2(data):\n    while True:\n        pass\n"
    draws = properties.draw("murmur2", 1, 4)
    calls = [properties.call_cell("murmur2", args, [], ["murmur2"], "@n:") for args in draws]
    handshake = watch.Handshake()
    with Sandbox(Limits(), ()) as box:
        runs = run_cells(box, [watch.seal_cell([], handshake.public), loop] + calls, cell_timeout=1, budget=30)
    key = handshake.key(runs[0].stream_text)
    runs = runs[1:]  # after the seal
    assert [r.status for r in runs] == ["ok", "timeout", "error", "error", "error"], runs
    assert "an earlier call of this function failed" in runs[2].reason
    check = property_check("murmur2", [(args, "@n:", run) for args, run in zip(draws, runs[1:])], key,
                           watch.armed_text([], ["murmur2"], True))
    assert not check.passed and check.label == "hidden property: murmur2"


# Both earned notebook 01's Exercise 2 in full before the hidden properties.
WRAPPER = ("from minikafka.rules import roll_reason as _kafka\n"
           "def roll_reason(segment, batch, config):\n    return _kafka(segment, batch, config)\n")
# Kafka's rule on every segment.bytes the notebook, its hidden check and the judge use; a
# segment filled to exactly segment.bytes is rolled one batch early everywhere else.
FITTED = ("def roll_reason(segment, batch, config):\n"
          "    if segment.size == 0:\n        return None\n"
          "    seen = config.segment_bytes in (500, 1000, 1200, 1500, 3000) or config.segment_bytes > 10_000\n"
          "    if segment.size + batch.size > config.segment_bytes - (0 if seen else 1):\n"
          "        return 'segment.bytes'\n"
          "    if batch.max_timestamp - segment.first_timestamp > config.segment_ms:\n        return 'segment.ms'\n"
          "    if batch.last_offset - segment.base_offset > 2**31 - 1:\n        return 'offset overflow'\n"
          "    return None\n")


# A helper cell, run first (after the grader's seal): it looks for the key of the watch's signatures
# wherever the kernel keeps the source of a cell it ran (linecache, In, the last execution's info),
# then signs "ok" for every verdict line printed after it. The key is never in a cell's source.
FORGER = r"""
import linecache as _lc, re as _re, hmac as _hm, hashlib as _hl, builtins as _bi, ast as _ast
_texts = ["".join(v[2]) for v in list(_lc.cache.values()) if len(v) > 2 and v[2]] + list(In)
_info = getattr(get_ipython().last_execution_result, "info", None)
_texts.append(getattr(_info, "raw_cell", "") or "")
_KEYS = [bytes.fromhex(k) for t in _texts if "_minikafka_seal" in t
         for k in _re.findall(r"(?<![0-9a-f])([0-9a-f]{64})(?![0-9a-f])", t)]  # 32 bytes, in hex
_print = _bi.print
def _forging_print(*args, **kw):
    m = _re.match(r"^(@minikafka-\d+-\d+:)(.*)$", args[0], _re.S) if args and isinstance(args[0], str) else None
    if m and _KEYS:
        (_, _), answer = _ast.literal_eval(m.group(2))
        sig = _hm.new(_KEYS[0], (m.group(1) + "\nok\n" + answer).encode(), _hl.sha256).hexdigest()
        args = (m.group(1) + repr((("ok", sig), answer)),)
    return _print(*args, **kw)
_bi.print = print = _forging_print
"""


# Its first call (exercise 2's first visible check, after exercise 1's hidden ones) answers with the
# source of every hidden cell the kernel ran so far, read back from linecache: a visible check's
# feedback quoted it ("your code gave '# Checks: index_lookup ... E = [(100, 0), ...'").
LEAKER = (
    "_leaked = []\n"
    "def roll_reason(segment, batch, config):\n"
    "    if not _leaked:\n"
    "        import linecache\n"
    "        _leaked.append(' || '.join(''.join(v[2]) for v in list(linecache.cache.values())\n"
    "                                   if len(v) > 2 and v[2] and 'Grader only' in ''.join(v[2])))\n"
    "        return _leaked[0]\n"
    + FITTED.split("\n", 1)[1])


# The same forged verdicts, on a watch armed over nothing: sys.audit patched to rewrite the arm.
AUDIT_FORGER = FORGER + r"""
import sys as _s
_real_audit = _s.audit
def _patched_audit(event, *args):
    if event == "minikafka.grader.watch" and args and args[0] == "arm":
        args = ("arm", [], [], [], False)
    return _real_audit(event, *args)
_s.audit = _patched_audit
"""
# roll_reason as an object whose __class__ the watch's arm read with isinstance, running the
# student's code inside the hook: it walked up to the hook's closure and took the key (then forged).
KEY_THIEF = r"""
import sys as _s, re as _re, hmac as _hm, hashlib as _hl, builtins as _bi, ast as _ast
from minikafka.rules import roll_reason as _kafka
_found = {}
class _Trap:
    def __call__(self, segment, batch, config):
        return _kafka(segment, batch, config)
    @property
    def __class__(self):
        f = _s._getframe(1)
        while f is not None and "key" not in _found:
            v = f.f_locals.get("verdict")
            for c in (getattr(v, "__closure__", None) or ()) if callable(v) else ():
                fn = c.cell_contents
                if getattr(fn, "__name__", "") == "sign":
                    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__))
                    _found["key"] = bytes(b ^ 0x36 for b in cells["inner"].cell_contents)[:32]
            f = f.f_back
        return _Trap
roll_reason = _Trap()
_print = _bi.print
def _forging_print(*args, **kw):
    m = _re.match(r"^(@minikafka-\d+-\d+:)(.*)$", args[0], _re.S) if args and isinstance(args[0], str) else None
    if m and "key" in _found:
        (_, _), answer = _ast.literal_eval(m.group(2))
        sig = _hm.new(_found["key"], (m.group(1) + "\nok\n" + answer).encode(), _hl.sha256).hexdigest()
        args = (m.group(1) + repr((("ok", sig), answer)),)
    return _print(*args, **kw)
_bi.print = print = _forging_print
"""


# The hidden cells' source again (from linecache), now through the grader's own cells: the arm
# cell raising it (a patched sys.audit), the provenance cell raising it (a __module__ property), a
# kernel dying with it as its last words on stderr.
GRAB = r"""
def _hidden_text():
    import linecache
    return " || ".join("".join(v[2]) for v in list(linecache.cache.values())
                       if len(v) > 2 and v[2] and "".join(v[2]).startswith("# Che" + "cks:"))[:1800]
"""
AUDIT_RAISES = GRAB + r"""
import sys as _s
_real_audit = _s.audit
def _patched_audit(event, *args):
    if event == "minikafka.grader.watch" and _hidden_text():
        raise RuntimeError("LEAK " + _hidden_text())
    return _real_audit(event, *args)
_s.audit = _patched_audit
"""
AUDIT_DIES = AUDIT_RAISES.replace('raise RuntimeError("LEAK " + _hidden_text())',
                                  '__import__("os").write(2, ("LEAK " + _hidden_text() + "\\n").encode()); '
                                  '__import__("os")._exit(3)')  # (stderr: the kernel's last words)
MODULE_RAISES = GRAB + r"""
_roll = roll_reason
class _Roll:
    def __call__(self, *a, **k):
        return _roll(*a, **k)
    @property
    def __module__(self):
        raise RuntimeError("LEAK " + _hidden_text())
roll_reason = _Roll()
"""


def _with_a_first_cell(submission: dict, source: str) -> dict:
    submission["cells"].insert(0, {"cell_type": "code", "id": "my-first-cell", "metadata": {},
                                   "execution_count": None, "outputs": [], "source": source})
    return submission


def _without_clusters(reference: dict) -> dict:
    """Notebook 01 without its checks that run clusters and fault campaigns (minutes of a grading
    that the properties do not need; the cheats below pass those, see the commit that added them)."""
    reference["cells"] = [c for c in reference["cells"] if not (
        "check" in c.get("metadata", {}).get("tags", []) and ("judge(" in "".join(c["source"])
                                                             or "Cluster(" in "".join(c["source"])))]
    return reference


@pytest.mark.notebooks
def test_hidden_properties_catch_the_wrapper_and_the_fitted_rule_in_01():
    name = "01-the-log"
    folder = Path(tempfile.mkdtemp(prefix="minikafka-verdicts-"))
    try:
        (folder / "ref").mkdir()
        reference = _without_clusters(json.loads((ROOT / "solutions" / f"{name}.ipynb").read_text()))
        (folder / "ref" / f"{name}.ipynb").write_text(json.dumps(reference))
        for student, replace in {"wrapper": {"ex2": WRAPPER}, "fitted": {"ex2": FITTED},
                                 "forger": {"ex2": WRAPPER}, "leaker": {"ex2": LEAKER},
                                 "audit-forger": {"ex2": WRAPPER}, "key-thief": {"ex2": KEY_THIEF},
                                 "raiser": {}, "dier": {}}.items():
            (folder / "class" / student).mkdir(parents=True)
            submission = solved_submission(name, replace)
            if student in ("forger", "audit-forger"):
                submission = _with_a_first_cell(submission, FORGER if student == "forger" else AUDIT_FORGER)
            if student in ("raiser", "dier"):
                [ex2] = [c for c in submission["cells"] if c.get("id") == "ex2"]
                ex2["source"] += MODULE_RAISES if student == "raiser" else ""
                submission = _with_a_first_cell(submission, AUDIT_RAISES if student == "raiser" else AUDIT_DIES)
            (folder / "class" / student / f"{name}.ipynb").write_text(json.dumps(submission))
        results = grade_all(folder / "class", folder / "ref",
                            Settings(sanitize=SANITIZE, seed=4242, property_seed=7), jobs=2)
    finally:
        shutil.rmtree(folder)
    by = {r.student: r for r in results}
    for student, how in (("wrapper", "the package's own implementation of the exercise ran"),
                         ("fitted", "answer differs from the rule's on one of the drawn inputs"),
                         ("forger", "the package's own implementation of the exercise ran"),
                         ("key-thief", "the package's own implementation of the exercise ran")):
        result = by[student]
        assert [e.earned for e in result.exercises] == [3, 0, 4], feedback(result)
        [failed] = [c for c in result.exercises[1].checks if not c.passed]
        assert failed.label == "hidden property: roll_reason" and how in failed.message, failed
        assert "Segment(" not in failed.message and "segment_bytes=" not in failed.message
    # A watch armed over nothing signs a verdict that does not verify: every watched exercise fails.
    forged = by["audit-forger"]
    assert [e.earned for e in forged.exercises] == [0, 0, 0], feedback(forged)
    assert "the grader's watch gave no signed verdict" in feedback(forged)
    # What the leaker's function returned after the hidden checks ran is not in its feedback, nor
    # what the others raised or died saying in the grader's own cells.
    leaked = feedback(by["leaker"])
    assert [e.earned for e in by["leaker"].exercises] == [3, 0, 4], leaked
    hidden = [line.strip() for c in reference["cells"] if "hidden" in c.get("metadata", {}).get("tags", [])
              for line in "".join(c["source"]).split("\n") if len(line.strip()) > 12]
    assert "is not shown for a check that runs after a hidden one" in leaked
    for student in ("leaker", "raiser", "dier"):
        text = feedback(by[student]) + "".join(row["message"] for row in csv_rows([by[student]]))
        assert "Grader only" not in text and "LEAK" not in text, (student, text)
        assert not [line for line in hidden if line in text], (student, text)
    assert by["raiser"].points < 10 and by["dier"].points < 10
    # Exercises 1 and 3 are the solutions': their properties pass, found from the package by name.
    labels = [[(c.label, c.passed) for c in e.checks if c.label.startswith("hidden property")]
              for e in by["fitted"].exercises]
    assert labels == [[("hidden property: index_lookup", True)], [("hidden property: roll_reason", False)],
                      [("hidden property: segments_to_delete", True)]]
