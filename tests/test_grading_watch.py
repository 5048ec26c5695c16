"""The grader's watch against the cheats that beat it (issue 34, items 2 and 6): each earns 0.

The watch (``minikafka/course/watch.py``) is an audit hook installed before the notebook's first
cell. Before it, a submission beat the watch from inside its own function: by saving the trace
function, switching tracing off and putting it back, or by emptying the watch's ``forbidden``
set, which it reached through ``globals()``. The reference here is a small notebook of lecture 02
(``murmur2``, with the package's own as its reference and a hidden property), so a class of eight
grades in seconds. Every cheat below delegates to ``minikafka.partitioner.murmur2`` and so gives
Kafka's answers: only the watch can fail it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from grading_helpers import ROOT, SANITIZE
from minikafka.course.grade import Settings
from minikafka.course.gradebook import feedback, grade_all

NAME = "02-watch"


def _solution() -> str:
    nb = json.loads((ROOT / "solutions" / "02-topics-and-partitions.ipynb").read_text())
    [cell] = [c for c in nb["cells"] if c.get("id") == "ex1"]
    return "".join(line for line in cell["source"] if "### " not in line)


def _cell(cell_id: str, source: str, tags: list[str] | None = None) -> dict:
    return {"cell_type": "code", "id": cell_id, "metadata": {"tags": tags or []}, "execution_count": None,
            "outputs": [], "source": source}


def reference() -> dict:
    return {"nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                         "minikafka": {"points": {"Exercise 1": 3},
                                       "references": {"Exercise 1": ["minikafka.partitioner:murmur2"]}}},
            "cells": [_cell("setup", "from minikafka import partitioner as minikafka\n"),
                      {"cell_type": "markdown", "id": "ex1-md", "metadata": {}, "source": "## Exercise 1: murmur2\n"},
                      _cell("ex1", _solution().replace("    \"Kafka", "    ### BEGIN SOLUTION\n    \"Kafka", 1)
                            + "    ### END SOLUTION\n", ["exercise"]),
                      {**_cell("check", "print(murmur2(b'21'), murmur2(b'abc'))\n", ["check"]),
                       "outputs": [{"output_type": "stream", "name": "stdout", "text": "-973932308 479470107\n"}]}]}


# Each one's murmur2 answers with the package's own murmur2.
_M = "import sys\nfrom minikafka import partitioner as _library\n_m = _library.murmur2\n"
CHEATS = {
    # Issue 34's first: save the grader's trace function, switch tracing off, put it back.
    "saved trace": _M + ("def murmur2(data):\n    saved = sys.gettrace()\n    try:\n        sys.settrace(None)\n"
                         "    except RuntimeError:\n        pass\n    try:\n        return _m(data)\n"
                         "    finally:\n        try:\n            sys.settrace(saved)\n"
                         "        except RuntimeError:\n            pass\n"),
    # Issue 34's second: empty the watch's forbidden set, found in globals() (the old watch's home).
    "emptied globals": _M + ("def murmur2(data):\n    for value in list(globals().values()):\n"
                             "        if hasattr(value, 'forbidden'):\n            value.forbidden.clear()\n"
                             "    return _m(data)\n"),
    # ... or through the trace function itself: its object, or its closure's cells.
    "emptied trace": _M + ("def murmur2(data):\n    trace = sys.gettrace()\n"
                           "    for cell in getattr(trace, '__closure__', None) or ():\n"
                           "        try:\n            cell.cell_contents = type(cell.cell_contents)()\n"
                           "        except Exception:\n            pass\n"
                           "    owner = getattr(trace, '__self__', None)\n"
                           "    if owner is not None:\n        owner.forbidden.clear()\n"
                           "    return _m(data)\n"),
    # The watch's state, looked for among every object of the kernel.
    "gc walk": _M + ("import gc\ndef murmur2(data):\n    try:\n"
                     "        for obj in gc.get_objects():\n"
                     "            if isinstance(obj, dict) and 'forbidden' in obj:\n                obj['forbidden'].clear()\n"
                     "    except RuntimeError:\n        pass\n    return _m(data)\n"),
    # The package's function swapped before the grader reads it, the original kept.
    "patched package": _M + "_library.murmur2 = lambda data: 0\ndef murmur2(data):\n    return _m(data)\n",
    # A function that asks for the watch's verdict itself, then delegates.
    "early verdict": _M + ("def murmur2(data):\n    sys.audit('minikafka.grader.watch', 'verdict', [], '', '')\n"
                           "    return _m(data)\n"),
    # The refusal's traceback, walked to the frame that raised it, whose globals and locals are
    # changed before trying again.
    "refusal's frame": _M + ("def murmur2(data):\n    try:\n        sys.settrace(None)\n"
                             "    except RuntimeError as exc:\n        tb = exc.__traceback__\n"
                             "        while tb.tb_next is not None:\n            tb = tb.tb_next\n"
                             "        frame = tb.tb_frame\n"
                             "        frame.f_globals.update(id=lambda x: 0, frozenset=set)\n"
                             "        for name, value in frame.f_locals.items():\n"
                             "            if isinstance(value, (set, dict, list)):\n                value.clear()\n"
                             "        try:\n            sys.settrace(None)\n        except RuntimeError:\n            pass\n"
                             "    return _m(data)\n"),
    # An interrupt of its own, hoping it lands inside the watch and shows its frame.
    "own interrupt": _M + ("import os, signal\ndef murmur2(data):\n    try:\n"
                           "        os.kill(os.getpid(), signal.SIGINT)\n        sum(len(str(i)) for i in range(10000))\n"
                           "    except KeyboardInterrupt as exc:\n        tb = exc.__traceback__\n"
                           "        while tb is not None:\n"
                           "            for value in list(tb.tb_frame.f_locals.values()):\n"
                           "                if isinstance(value, list):\n                    value.clear()\n"
                           "            tb = tb.tb_next\n"
                           "    return _m(data)\n"),
    # A profiler of its own (it would see the hook's frames), set before the watch is armed.
    "own profiler": _M + ("def _profile(frame, event, arg):\n    pass\n"
                          "try:\n    sys.setprofile(_profile)\nexcept RuntimeError:\n    pass\n"
                          "def murmur2(data):\n    return _m(data)\n"),
    # An audit hook of its own, which would see each verdict and could rewrite it.
    "own audit hook": _M + ("def _hook(event, args):\n"
                            "    if event == 'minikafka.grader.watch' and args[0] == 'verdict' and args[1]:\n"
                            "        args[1][0] = 'ok'\n"
                            "sys.addaudithook(_hook)\n"
                            "def murmur2(data):\n    return _m(data)\n"),
    # An input transformer that makes the grader's call cells call the package's murmur2 in place
    # of the student's (whose own is wrong), and a print that turns any verdict into "ok".
    "rewritten calls": _M + ("import builtins\n"
                             "def murmur2(data):\n    return 0\n"
                             "def _rewrite(lines):\n"
                             "    return [line.replace('murmur2(*_mk_args)', '_m(*_mk_args)') for line in lines]\n"
                             "get_ipython().input_transformers_cleanup.append(_rewrite)\n"
                             "import ast\n_print = builtins.print\n"
                             "def _forge(*args, **kwargs):\n"
                             "    text = ' '.join(map(str, args))\n"
                             "    if text.startswith('@minikafka-'):\n"
                             "        nonce, _, said = text.partition(':')\n"
                             "        (verdict, *signature), answer = ast.literal_eval(said)\n"
                             "        text = nonce + ':' + repr((('ok', *signature), answer))\n"
                             "    _print(text, **kwargs)\n"
                             "builtins.print = _forge\n"),
}


@pytest.fixture(scope="module")
def graded():
    folder = Path(tempfile.mkdtemp(prefix="minikafka-watch-"))
    try:
        (folder / "ref").mkdir()
        ref = reference()
        (folder / "ref" / f"{NAME}.ipynb").write_text(json.dumps(ref))
        for student, source in {"right": _solution(), **CHEATS}.items():
            nb = json.loads(json.dumps(ref))
            nb["cells"][2]["source"] = source
            (folder / "class" / student).mkdir(parents=True)
            (folder / "class" / student / f"{NAME}.ipynb").write_text(json.dumps(nb))
        results = grade_all(folder / "class", folder / "ref", Settings(sanitize=SANITIZE, cell_timeout=20,
                                                                      budget=120), jobs=2)
    finally:
        shutil.rmtree(folder)
    return {r.student: r for r in results}


@pytest.mark.notebooks
def test_the_right_murmur2_earns_its_points(graded):
    result = graded["right"]
    assert result.points == 3, feedback(result)
    labels = [(c.label, c.passed) for c in result.exercises[0].checks]
    assert ("hidden property: murmur2", True) in labels and ("your own code", True) in labels, labels


@pytest.mark.notebooks
@pytest.mark.parametrize("student", sorted(CHEATS))
def test_a_cheat_on_the_watch_earns_nothing(graded, student):
    result = graded[student]
    assert result.exercises[0].earned == 0, feedback(result)
    failed = {c.label: c.message for c in result.exercises[0].checks if not c.passed}
    # The hidden property fails by the watch's verdict, never by an answer: the answers are Kafka's.
    assert "hidden property: murmur2" in failed, feedback(result)
    message = failed["hidden property: murmur2"]
    assert "answer differs" not in message, message
    assert any(words in message for words in (
        "the package's own implementation of the exercise ran",
        "the grader could not watch your code", "no signed verdict")), message


# The hook in a plain interpreter of its own (an audit hook cannot be removed: never in pytest's).
IN_A_PROCESS = r"""
import json, sys
from minikafka.course import watch
exec(compile(watch.seal_cell(["minikafka.partitioner:murmur2"], int(sys.argv[1])), "<seal>", "exec"))
from minikafka import partitioner
_m = partitioner.murmur2
partitioner.murmur2 = lambda data: 0  # patched after the seal read it: changes nothing it watches

def right(data):
    return 42

def wrapper(data):
    return _m(data)

def switch_off(data):
    saved = sys.gettrace()
    try:
        sys.settrace(None)
    except RuntimeError:
        pass
    return _m(data)

def walk(data):
    import gc
    try:
        gc.get_objects()
    except RuntimeError:
        pass
    return 1

def nested(data):
    return (lambda: wrapper(data))()

said = {}
for f in (right, wrapper, switch_off, walk, nested):
    for strict in (True, False):
        sys.audit(watch.EVENT, "arm", ["minikafka.partitioner:murmur2"], [f.__name__], [f], strict)
        out, text = [], repr(f(b"abc"))
        sys.audit(watch.EVENT, "verdict", out, "@n:", text)
        said[f"{f.__name__} {strict}"] = [*out, text]
# Not armed: the package's own code runs freely, and a verdict says the watch was not armed.
out = []
sys.audit(watch.EVENT, "verdict", out, "@n:", repr(_m(b"abc")))
said["unarmed"] = out
print(json.dumps(said))
"""


def test_the_seal_watches_calls_refuses_what_would_switch_it_off_and_signs_its_verdicts():
    import subprocess
    import sys

    from minikafka.course import watch

    handshake = watch.Handshake()
    done = subprocess.run([sys.executable, "-c", IN_A_PROCESS, str(handshake.public)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    seal_line, rest = done.stdout.split("\n", 1)  # the seal's first words: the kernel's public number
    key = handshake.key(seal_line)
    assert key is not None and seal_line.startswith(watch.SEAL_MARK)
    said = json.loads(rest)
    ran = "runs minikafka's own code: minikafka.partitioner:murmur2"
    for strict in (True, False):
        verdicts = {name: said[f"{name} {strict}"][0] for name in ("right", "wrapper", "switch_off", "walk", "nested")}
        assert verdicts == {"right": "ok", "wrapper": ran, "switch_off": ran, "nested": ran,
                            "walk": "the grader's watch was tampered with: gc.get_objects was called"}, verdicts
        # Each verdict is signed for its nonce and the answer printed with it, with this key only.
        for name in verdicts:
            verdict, sig, answer = said[f"{name} {strict}"]
            armed = watch.armed_text(["minikafka.partitioner:murmur2"], [name], strict)
            assert sig == watch.signature(key, "@n:", verdict, answer, armed)
            assert sig != watch.signature(watch.new_key(), "@n:", verdict, answer, armed)
            assert sig != watch.signature(key, "@n:", verdict, answer, watch.armed_text([], [], strict))
    assert said["right True"][2] == "42" and said["wrapper True"][2] == "479470107"  # Kafka's murmur2(b"abc")
    assert said["unarmed"] == ["the grader's watch was not armed"]


def test_the_grader_arms_the_watch_around_each_check_that_calls_a_function_without_a_property():
    """A property's calls are watched strictly and an exercise is all or nothing, so a check that
    calls only functions with a property of their own runs untraced (a traced fault campaign takes
    twice as long); a check of a function without one, or of none of the exercise's names, is
    watched, and each watched check gets a verdict of its own."""
    from minikafka.course import watch
    from minikafka.course.grade import _needs_watch, _with_grader_cells, build_program, plan, source_text

    assert not _needs_watch("print(index_lookup([], 7, 0))", ["index_lookup", "find_batch"], ["index_lookup"])
    assert _needs_watch("print(find_batch(data, 0, 20))", ["index_lookup", "find_batch"], ["index_lookup"])
    assert _needs_watch("print(read_position(seg, 3))", ["index_lookup", "find_batch"], ["index_lookup"])
    assert _needs_watch("print(summary, index_lookup_v2)", ["index_lookup"], ["index_lookup"])  # names none of them

    reference = json.loads((ROOT / "solutions" / "01-the-log.ipynb").read_text())
    planned = plan(reference, True)
    program, _, _ = build_program(reference, reference)
    steps = _with_grader_cells(reference, planned, program, lecture="01", seed=1, public=watch.Handshake().public)
    armed = [steps[i + 1][1] for i, (_, _, own) in enumerate(steps) if own and own[2] == "arm"]
    verdicts = [own[2] for _, _, own in steps if own and isinstance(own[2], tuple) and own[2][0] == "watch"]
    # Exercise 1 (index_lookup has a property, find_batch none): its three checks of find_batch.
    assert [cell.get("id") for cell in armed] == [c.get("id") for c in planned[0][1]
                                                  if "find_batch" in source_text(c) or "read_position" in source_text(c)]
    assert len(armed) == 3 and all("Cluster(" not in source_text(c) and "judge(" not in source_text(c) for c in armed)
    # One verdict per watched check, right after it; only the last makes the exercise's Check.
    assert [last for _, _, last, _ in verdicts] == [False, False, True]
    for i, (_, _, own) in enumerate(steps):
        if own and own[2] == "arm":
            assert steps[i + 2][2][2][0] == "watch"
