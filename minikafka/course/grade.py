"""Grade exercise notebooks: per exercise, by its name in the notebook, with points.

Theory of operation: a *reference* notebook says what is graded. Its `## Exercise N: title`
headings split it into exercises; each exercise's *checks* are its code cells tagged `check`
(those also tagged `hidden` exist only in solutions/, never in a student's copy) and its `exercise`
cells that have expected outputs. Points per exercise come from the notebook metadata
(`minikafka.points`, keyed "Exercise N"; 1 if absent). An exercise earns its points only when
every one of its checks passes, hidden ones included: replaying the visible expected outputs
earns nothing where an exercise has a hidden check.

`grade_notebook(reference, submission, ...)` builds the program to run: the reference's cells
with the submission's `exercise` cell sources put in (matched by cell id, else by position among
exercise cells), plus any code cells the student added (run where they were, never compared),
plus cells of the grader's own: after each exercise, a provenance check (the functions and
classes its solution defines must be defined in the notebook, not taken from the minikafka
package), where the package has its own implementation of the exercise (metadata
`minikafka.references`) a watch over the exercise's checks (watch.py: an audit hook installed by
the program's first cell, before any of the notebook's; the exercise fails if that
implementation's code, or a copy of it, runs inside the student's functions, so a wrapper keeping
a private reference earns nothing; its verdicts are signed, so a kernel can drop one but never
forge one), and at the end a canary (a random product the kernel
must print: a kernel that does not run the code it is sent, e.g. an input transformer replaying
outputs, is flagged). The program runs in a `Sandbox`
(sandbox.py) by `run_cells` (runner.py); outputs are judged by nbval's rules (compare.py), in this
process, from the kernel's messages.

Where an exercise defines one of Kafka's rules the package holds for its lecture (found from
``minikafka.rules.RULES``, not from a list kept by hand), the grader adds a *hidden property* per
rule (properties.py): after the student's code has run, it sends call cells one at a time, each
calling the student's function on one input drawn from the grading run's property seed (new per
run, never in any cell the kernel runs before its own call) and printing the answer as plain data;
the grader compares each answer with the rule's reference, run in its own process. A call that
runs the package's own implementation of the rule (a watch armed around that call only) fails it.
Lecture 09's exercises, which are not rules, are found the same way (``wire_properties.py``);
``api_versions`` is called with the address of a broker the grader serves meanwhile
(``grader_broker.py``: the runner tells it which call runs, the sandbox hands it a socket in the
kernel's network), and its verdict also reads what that broker received. Lecture 10's Spark
functions likewise (``capstone_properties.py``): each call runs the student's function on a drawn
fleet in the kernel's Spark session and prints the rows.

A failed hidden check is reported by the property it checks, in words (its first line,
`# Checks: ...`), and how the code failed it, never by its inputs, expected output or source
(`hidden_message`). Nor can they leave through a visible check that runs after one: the student's
function has seen a hidden input by then (and ``linecache`` holds the hidden cells' source), so
such a check's failure says how it failed and nothing the submission printed or raised
(`sealed_message`); `minikafka check`, which hides nothing from its student (the properties it
draws are no secret there), shows the rest.

The student's check (`minikafka check`) is the same code with the student's file as its own
reference: the expected outputs then come from each cell's `minikafka.expected` metadata, which
the exercise generator writes and which running and saving in Jupyter never changes. So saving
cannot make wrong code pass or right code fail, and the verdict on visible checks is the grader's.

It never modifies a submission or a reference, and never raises for one bad submission: invalid
JSON, a wrong notebook, a kernel that will not start become a Result with status "error".
"""

from __future__ import annotations

import ast
import copy
import itertools
import json
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import ast_guard, properties, watch
from . import ANOMALY_KINDS, BEGIN_MARKER, CHECK_TAG, END_MARKER, EXERCISE_TAG, GRADING_SEED_CALL, HIDDEN_TAG
from .compare import cell_options, load_sanitize, tester_report, verdict
from .exercises import (MarkerError, cell_tags, exercise_heading, notebook_points, read_notebook,
                        source_text, stub_source)
from .grader_broker import GraderBroker
from .runner import CellRun, run_cells
from .sandbox import Limits, Sandbox

# CPU seconds of the kernel and what it started (runner.py; the clock stops a cell after 10x as long),
# so a grade does not depend on the machine's load.
DEFAULT_CELL_TIMEOUT = 30.0   # per cell; a notebook may ask for more (minikafka.cell_timeout)
DEFAULT_BUDGET = 120.0        # per submission; likewise (minikafka.time_budget)
_USES_SPARK = re.compile(r"^\s*(?:from|import)\s+pyspark\b", re.MULTILINE)
_NBVAL_MARKER = re.compile(r"^(\s*)#+\s*((?:NBVAL|PYTEST_VALIDATE)_\w+)\s*$")


@dataclass
class Check:
    label: str                 # "check 2", "hidden check 1", "your own code"
    cell_id: str | None
    hidden: bool = False
    passed: bool = False
    message: str = ""
    # A failed visible check's fault-campaign verdict, as the student's code printed it
    # (compare.tester_report): in their check and feedback, not in the gradebook's one line.
    detail: str = ""


@dataclass
class Exercise:
    name: str                  # the heading: "Exercise 1: murmur2"
    points: float
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)

    @property
    def earned(self) -> float:
        return self.points if self.passed else 0.0


@dataclass
class Result:
    student: str
    submission: str                    # the path as shown
    notebook: str | None = None        # the reference's file name
    exercises: list[Exercise] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    status: str = "graded"             # graded | flagged | error
    error: str | None = None           # why it could not be graded, or why it was flagged
    seed: int | None = None            # the hidden checks' campaign seed (replay: grade --seed)
    property_seed: int | None = None   # the hidden properties' draws (properties.py); never sent to the kernel

    @property
    def points(self) -> float:
        return 0.0 if self.status != "graded" else sum(e.earned for e in self.exercises)

    @property
    def max_points(self) -> float:
        return sum(e.points for e in self.exercises)

    def as_dict(self) -> dict:
        return {"student": self.student, "submission": self.submission, "notebook": self.notebook,
                "status": self.status, "error": self.error, "notes": self.notes, "seed": self.seed,
                "property_seed": self.property_seed,
                "points": self.points, "max_points": self.max_points,
                "exercises": [{"name": e.name, "points": e.earned if self.status == "graded" else 0.0,
                               "max_points": e.points,
                               "checks": [vars(c) for c in e.checks]} for e in self.exercises]}


class NotGradable(ValueError):
    """A submission that cannot be graded at all (the message says why, for the student)."""


# -- reading what to grade ----------------------------------------------------------------------

def _code(nb) -> list[dict]:
    return [cell for cell in nb["cells"] if cell["cell_type"] == "code"]


def expected_outputs(cell, from_metadata: bool) -> list | None:
    """The outputs a check cell must produce; None if the cell is not compared."""
    if from_metadata:
        meta = cell.get("metadata", {}).get("minikafka", {})
        return meta.get("expected") if isinstance(meta, dict) else None
    return cell.get("outputs", [])


def is_check(cell, from_metadata: bool) -> bool:
    tags = cell_tags(cell)
    if cell["cell_type"] != "code":
        return False
    if CHECK_TAG in tags:
        return True
    # An exercise cell that only defines code prints nothing to compare: its checks grade it.
    return EXERCISE_TAG in tags and bool(expected_outputs(cell, from_metadata))


def plan(reference, from_metadata: bool = False) -> list[tuple[Exercise, list[dict]]]:
    """The exercises of a reference notebook, each with its check cells, in notebook order."""
    points = notebook_points(reference)
    exercises: list[tuple[Exercise, list[dict]]] = []
    current = None
    for cell in reference["cells"]:
        if cell["cell_type"] == "markdown":
            heading = exercise_heading(source_text(cell))
            if heading:
                key, name = heading
                current = (Exercise(name, points.get(key, 1)), [])
                exercises.append(current)
            elif re.match(r"^#{1,3}\s", source_text(cell)):
                current = None  # "## Done" and the like end the last exercise
        elif current is not None and is_check(cell, from_metadata):
            current[1].append(cell)
        elif is_check(cell, from_metadata):
            raise MarkerError(f"check cell {cell.get('id')!r} is not under an '## Exercise N: ...' heading")
    return exercises


def _neutralize_markers(student: str, reference: str) -> tuple[str, bool]:
    allowed = {m.group(2) for line in reference.split("\n") if (m := _NBVAL_MARKER.match(line))}
    lines, changed = [], False
    for line in student.split("\n"):
        match = _NBVAL_MARKER.match(line)
        if match and match.group(2) not in allowed:
            line, changed = f"{match.group(1)}# ({match.group(2)} removed by the grader)", True
        lines.append(line)
    return "\n".join(lines), changed


def _normalized(source: str) -> list[str]:
    return [line.strip() for line in source.split("\n")
            if line.strip() and not line.strip().startswith("#")]


def build_program(reference, submission) -> tuple[list[tuple[str, dict | None]], list[str], str | None]:
    """(sources to run, each with its reference cell or None for a student's helper cell), notes,
    and why the submission is flagged (None if it is not). Neither argument is modified.
    """
    ref_ids = {cell.get("id") for cell in reference["cells"]}
    theirs = [c for c in _code(submission) if EXERCISE_TAG in cell_tags(c)]
    by_id = {cell["id"]: cell for cell in _code(submission) if "id" in cell}
    ref_exercise_ids = {c.get("id") for c in _code(reference) if EXERCISE_TAG in cell_tags(c)}
    if by_id and not (set(by_id) & ref_exercise_ids):
        raise NotGradable("none of its cells belong to this exercise notebook: is it the right "
                          "notebook (or was it rebuilt from scratch)?")
    # Cells the student added, placed after the nearest cell before them that the reference has.
    helpers: dict[str | None, list[str]] = {}
    anchor = None
    for cell in submission["cells"]:
        if cell.get("id") in ref_ids:
            anchor = cell["id"]
        elif cell["cell_type"] == "code" and EXERCISE_TAG not in cell_tags(cell) \
                and source_text(cell).strip():
            helpers.setdefault(anchor, []).append(source_text(cell))
    notes, flagged = [], None
    program: list[tuple[str, dict | None]] = [(s, None) for s in helpers.get(None, [])]
    number = 0
    for cell in reference["cells"]:
        if cell["cell_type"] == "code":
            source = source_text(cell)
            if EXERCISE_TAG in cell_tags(cell):
                number += 1
                solution = source
                if cell.get("id") in by_id:
                    source = source_text(by_id[cell["id"]])
                elif number <= len(theirs):
                    source = source_text(theirs[number - 1])
                    why = "the submission has no cell ids" if not by_id else f"no cell with id {cell.get('id')!r}"
                    notes.append(f"exercise cell {number}: matched by position ({why})")
                else:
                    source = stub_source(solution, f"exercise cell {number}")
                    notes.append(f"exercise cell {number}: not found in the submission, graded as untouched")
                # The markers only exist in solutions/: a student's copy never has them. Equal
                # code without them is only noted (a two-line exercise may well be written alike).
                if BEGIN_MARKER in source or END_MARKER in source:
                    flagged = f"exercise cell {number} is copied from the solutions notebook (it has its markers)"
                elif BEGIN_MARKER in solution and _normalized(source) == _normalized(solution):
                    notes.append(f"exercise cell {number} is the reference solution, verbatim")
                source, changed = _neutralize_markers(source, solution)
                if changed:
                    notes.append(f"exercise cell {number}: nbval markers removed from the student's code")
            program.append((source, cell))
        if cell.get("id") in helpers and helpers[cell.get("id")]:
            program += [(s, None) for s in helpers.pop(cell.get("id"))]
            notes.append(f"your code cell(s) after {cell.get('id')!r} were run too (never compared)")
    return program, notes, flagged


def defined_names(source: str) -> list[str]:
    """Top-level functions and classes a (solution) cell defines."""
    try:
        tree = ast_guard.parse(source)
    except SyntaxError:
        return []
    return [node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def _provenance_cell(names: list[str]) -> tuple[str, list]:
    # A name taken from the package (murmur2 = minikafka.murmur2) has the package's __module__.
    code = ("print(sorted((_n, getattr(globals().get(_n), '__module__', None) == '__main__') "
            f"for _n in {names!r}))")
    text = repr(sorted((n, True) for n in names)) + "\n"
    return code, [{"output_type": "stream", "name": "stdout", "text": text}]


def references(reference) -> dict[str, list[str]]:
    """{"Exercise N": ["module:qualname", ...]}: the package's own implementations of each
    exercise (notebook metadata `minikafka.references`), which the student's code must not run."""
    refs = reference.get("metadata", {}).get("minikafka", {}).get("references", {})
    if not isinstance(refs, dict) or not all(
            isinstance(v, list) and all(isinstance(x, str) and ":" in x for x in v) for v in refs.values()):
        raise MarkerError("notebook metadata minikafka.references must map 'Exercise N' to a list of "
                          "'module:qualname' strings")
    return refs


def _watch_cells(specs: list[str], names: list[str], nonce: str) -> tuple[str, str]:
    """(arm cell, verdict cell) of the watch over one of an exercise's checks (watch.py): a run of
    the package's implementation ``specs`` with one of ``names`` on the stack is a hit."""
    return watch.arm_source(specs, names), watch.verdict_cell(nonce)


def _needs_watch(check: str, names: list[str], proven: list[str]) -> bool:
    """Whether the watch is armed around a check of an exercise that defines ``names``, ``proven``
    those with a hidden property. A property's drawn calls are watched strictly (every frame: the
    package's implementation must not run at all), and an exercise is all or nothing, so a check
    that calls only proven functions needs no watch of its own: a function that runs the package
    fails its property. Any other check is watched: one naming a function without a property, or
    none of the exercise's names (what it reaches is not known from its source). The watch's trace
    doubles the time of the code it watches (CPython 3.11 runs every instruction on its tracing
    path while a trace function is set), which for a check that runs a cluster or a fault
    campaign on the student's rule is seconds."""
    named = {n for n in names if re.search(rf"\b{re.escape(n)}\b", check)}
    return not named or not named <= set(proven)


# -- grading ------------------------------------------------------------------------------------

@dataclass
class Settings:
    sanitize: Path | None = None
    cell_timeout: float | None = None   # None: the notebook's, else DEFAULT_CELL_TIMEOUT
    budget: float | None = None
    hide: tuple[Path, ...] = ()         # paths the sandbox must not see
    seed: int | None = None             # the hidden checks' campaign seed; None: a new one per grading
    # The hidden properties' seed; None: a new one per grading. Not the campaign's: that one is in
    # the hidden cells' source the kernel runs, so the draws could be computed from it.
    property_seed: int | None = None


SEED_ENV = "MINIKAFKA_GRADING_SEED"


def default_seed() -> int:
    """The hidden checks' seed when ``--seed`` is not given: ``$MINIKAFKA_GRADING_SEED`` if set (a
    test suite's, so its gradings are the same run after run), else a new random one, which the
    submission cannot know."""
    value = os.environ.get(SEED_ENV)
    if value is None:
        return random.SystemRandom().randrange(1, 2**31)
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{SEED_ENV}={value!r} is not a seed: give an integer, or unset it "
                         f"for a new random seed per grading") from None


def grade_notebook(reference, submission, settings: Settings, *, from_metadata: bool = False,
                   result: Result) -> Result:
    """Grade one parsed submission against one parsed reference; fills and returns `result`."""
    meta = reference.get("metadata", {}).get("minikafka", {})
    cell_timeout = settings.cell_timeout or meta.get("cell_timeout", DEFAULT_CELL_TIMEOUT)
    budget = settings.budget or meta.get("time_budget", DEFAULT_BUDGET)
    limits = Limits.from_metadata(meta.get("limits", {}))
    planned = plan(reference, from_metadata)
    result.exercises = [exercise for exercise, _ in planned]
    program, result.notes, flagged = build_program(reference, submission)
    result.seed = settings.seed if settings.seed is not None else default_seed()
    result.property_seed = settings.property_seed if settings.property_seed is not None else default_seed()
    broker = GraderBroker()  # binds only if a property asks a broker (api_versions)
    handshake = watch.Handshake()  # the watch's signatures' key, this grading's only
    steps = _with_grader_cells(reference, planned, program, lecture=_lecture(result.notebook),
                               seed=result.property_seed, broker=broker, public=handshake.public)
    steps = [(_seeded(source, result.seed) if cell is not None and HIDDEN_TAG in cell_tags(cell) else source,
              cell, extra) for source, cell, extra in steps]
    slots = [extra[2][4] if extra and isinstance(extra[2], tuple) and extra[2][0] == "call" else None
             for _, _, extra in steps]
    with broker, Sandbox(limits, settings.hide, env=_kernel_env(reference),
                         listen_port=broker.port if broker.bound else None) as box:
        if broker.bound:
            broker.adopt(box.listener)
            if box.listens.startswith("none"):
                result.notes.append(f"the grader could not serve its broker to the kernel ({box.listens}): "
                                    f"the properties that ask it fail")
            broker.start()
        runs = run_cells(box, [source for source, _, _ in steps], cell_timeout=cell_timeout, budget=budget,
                         before=(lambda i: broker.serve(slots[i])) if broker.bound else None,
                         unrecorded={i for i, (_, _, own) in enumerate(steps) if own is not None})
    sealed = [run for (_, _, own), run in zip(steps, runs) if own is not None and own[2] == "seal"]
    key = handshake.key(sealed[0].stream_text) if sealed and sealed[0].status == "ok" else None
    if sealed and key is None:  # the grader's own cell, run before any of the notebook's
        raise RuntimeError(f"the grader's watch could not start in the kernel: {sealed[0].reason or 'no key'}")
    cheated = _judge(planned, steps, runs, load_sanitize(settings.sanitize), from_metadata, broker, key=key or b"")
    flagged = flagged or cheated
    # Name the exercise where time ran out or the kernel died, whichever cell it was in.
    where = _sections(reference)
    for status, words in (("timeout", "timed out in"), ("died", "the kernel died in")):
        names = [where[id(cell)] for (_, cell, _), run in zip(steps, runs)
                 if run.status == status and cell is not None and where.get(id(cell))]
        if names:
            result.notes.append(f"{words}: " + ", ".join(dict.fromkeys(names)))
    if flagged:
        result.status, result.error = "flagged", flagged
    return result


def _lecture(notebook: str | None) -> str | None:
    """The lecture a notebook file is ("04-replication-and-isr.ipynb": "04"), None if its name
    does not say."""
    found = re.match(r"^(\d\d)-", notebook or "")
    return found.group(1) if found else None


def _seeded(source: str, seed: int) -> str:
    """A hidden check's source with its campaign seed chosen now: ``grading_seed()`` ->
    ``grading_seed(seed)`` (``minikafka.course.grading_seed``)."""
    return source.replace(GRADING_SEED_CALL, f"grading_seed({seed})")


def _kernel_env(reference) -> dict[str, str]:
    """Extra environment for the sandboxed kernel: a Spark notebook's JVM maps the shared,
    read-only class archive and starts with the flags for short runs (jvm_cache.py)."""
    if not any(_USES_SPARK.search(source_text(cell)) for cell in _code(reference)):
        return {}
    from .jvm_cache import java_options
    return {"JAVA_TOOL_OPTIONS": java_options()}


def _sections(reference) -> dict[int, str]:
    """{id(cell): name of the exercise whose heading it is under}, for the reference's code cells."""
    where, current = {}, None
    for cell in reference["cells"]:
        if cell["cell_type"] == "markdown":
            heading = exercise_heading(source_text(cell))
            if heading or re.match(r"^#{1,3}\s", source_text(cell)):
                current = heading[1] if heading else None
        elif current:
            where[id(cell)] = current
    return where


def _with_grader_cells(reference, planned, program, lecture: str | None = None, seed: int = 0,
                       broker: GraderBroker | None = None, *,
                       public: int) -> list[tuple[str, dict | None, tuple | None]]:
    """The program plus the grader's own cells: [(source, reference cell, (expected, exercise, kind))].

    After each exercise's last check comes its provenance check (run early, it cannot be dodged
    by killing the kernel later); where the package has its own implementation of the exercise
    (metadata `minikafka.references`), a watch is armed before each check that needs one
    (``_needs_watch``) and its verdict read right after it; then, where the exercise defines one
    of the package's rules of its lecture (``properties.rules_of``), one call cell per input
    drawn from ``seed`` (the hidden properties: the verdict is the grader's, see properties.py);
    at the very end the canary, a product of two random numbers that a kernel running the code it
    is sent must print. Where
    anything is watched, the program starts with the watch's seal (watch.py), which reads the
    package's code of every watched implementation before the notebook's first cell and signs
    each verdict with the key it agrees with the grader's ``public`` number (``watch.Handshake``);
    each verdict has a nonce of its own.
    """
    base = f"@minikafka-{random.SystemRandom().randrange(10**12, 10**13)}-"
    nonces = (f"{base}{n}:" for n in itertools.count())
    sealed: list[str] = []  # every watched implementation, for the seal
    refs = references(reference)
    after: dict[int, list[tuple[str, list, Exercise, str]]] = {}
    before: dict[int, list[tuple[str, list, Exercise, str]]] = {}
    for exercise, checks in planned:
        names = [n for cell in _exercise_cells_of(reference, exercise)
                 for n in defined_names(source_text(cell))]
        if names and checks:
            code, want = _provenance_cell(names)
            after.setdefault(id(checks[-1]), []).append((code, want, exercise, "provenance"))
            heading = exercise_heading("## " + exercise.name)
            specs = refs.get(heading[0], []) if heading else []
            rules = properties.rules_of(lecture, names)
            guarded = [c for c in checks if _needs_watch(source_text(c), names, rules)] if specs else []
            sealed += specs if guarded else []
            for check in guarded:
                nonce = next(nonces)
                arm, verdict = _watch_cells(specs, names, nonce)
                before.setdefault(id(check), []).append((arm, [], exercise, "arm"))
                after.setdefault(id(check), []).insert(
                    0, (verdict, [], exercise, ("watch", nonce, check is guarded[-1], watch.armed_text(specs, names))))
            for rule in rules:
                watched = list(dict.fromkeys(specs + properties.reference_specs(rule)
                                             + properties.package_specs(names)))
                sealed += watched
                for case in properties.draw(rule, seed):
                    slot = address = None
                    if properties.served(rule):  # the call asks the grader's broker, which answers case
                        if broker is None:
                            raise ValueError(f"the property of {rule} asks a broker: pass a GraderBroker")
                        slot, address = broker.expect(case), broker.address
                    args = properties.call_args(rule, case, address)
                    nonce = next(nonces)
                    call = properties.call_cell(rule, args, watched, names, nonce)
                    armed = watch.armed_text(watched, names, strict=True)  # as call_cell arms it
                    after[id(checks[-1])].append((call, [], exercise, ("call", rule, case, nonce, slot, armed)))
    steps: list[tuple[str, dict | None, tuple | None]] = []
    if sealed:
        steps.append((watch.seal_cell(sealed, public), None, ([], None, "seal")))
    for source, cell in program:
        for code, want, exercise, kind in before.get(id(cell), []) if cell is not None else []:
            steps.append((code, None, (want, exercise, kind)))
        steps.append((source, cell, None))
        for code, want, exercise, kind in after.get(id(cell), []) if cell is not None else []:
            steps.append((code, None, (want, exercise, kind)))
    rng = random.SystemRandom()
    a, b = rng.randrange(10**9, 10**10), rng.randrange(10**9, 10**10)
    steps.append((f"print({a} * {b})", None,
                  ([{"output_type": "stream", "name": "stdout", "text": f"{a * b}\n"}], None, "canary")))
    return steps


def watch_message(said: str) -> str:
    """A watch's verdict (watch.py), in words for the student: what the watch saw, no accusation."""
    if said.startswith("runs minikafka's own code"):
        return (f"the package's own implementation of the exercise ran while your code was checked "
                f"({said.split(': ', 1)[-1]}); the exercise asks for code of your own")
    if said == watch.UNSIGNED:
        return ("the grader's watch gave no signed verdict: the line it prints was changed or not printed "
                "(print, stdout or the cell replaced?)")
    return f"the grader could not watch your code: {said}"


def _judge(planned, steps, runs, patterns, from_metadata: bool, broker: GraderBroker | None = None, *,
           key: bytes) -> str | None:
    """Fill each exercise's checks from the runs; returns why to flag the submission, or None."""
    by_cell = {id(cell): run for (_, cell, _), run in zip(steps, runs) if cell is not None}
    # The student's own check (`check_file`, expectations from metadata) hides nothing from its student.
    late = set() if from_metadata else _after_a_hidden_input(steps)  # step indices
    after_hidden = {id(cell) for i, (_, cell, _) in enumerate(steps) if i in late and cell is not None}
    for exercise, cells in planned:
        visible = hidden = 0
        for cell in cells:
            is_hidden = HIDDEN_TAG in cell_tags(cell)
            hidden += is_hidden
            visible += not is_hidden
            label = f"hidden check {hidden}" if is_hidden else \
                ("your cell's output" if EXERCISE_TAG in cell_tags(cell) else f"check {visible}")
            run = by_cell.get(id(cell), CellRun(reason="not run"))
            passed, message = verdict(run, cell_options(cell), expected_outputs(cell, from_metadata) or [],
                                      patterns)
            if is_hidden and not passed:
                message = hidden_message(cell, run)
            elif not passed and id(cell) in after_hidden and run.status not in ("timeout", "not run"):
                message = sealed_message(run)
            elif not passed and id(cell) in after_hidden:  # a timeout's reason: the grader's words
                message = _unmeasured(message)
            detail = "" if passed or is_hidden or id(cell) in after_hidden else tester_report(run)
            exercise.checks.append(Check(label, cell.get("id"), is_hidden, passed, message, detail))
    flagged = None
    grader_options = {"check": True, "skip": False, "check_exception": False}
    calls: dict[tuple[int, str], tuple[Exercise, list]] = {}
    watched: dict[int, str | None] = {}  # each watched exercise's first failed verdict, or None
    for index, ((_, _, own), run) in enumerate(zip(steps, runs)):
        if own is None:
            continue
        want, exercise, kind = own
        if index in late and run.status in ("error", "died", "timeout"):  # (the grader's own cell: see sealed_message)
            run.reason = _quiet(run)
        if kind == "seal":  # (its key, or why it failed, was read in grade_notebook)
            continue
        if isinstance(kind, tuple) and kind[0] == "watch":  # a verdict per check, one Check per exercise
            if run.status != "ok":
                failed = run.reason
            else:
                said = watch.read(run.stream_text, kind[1], key, kind[3])
                seen = said[0] if said else watch.UNSIGNED
                failed = None if seen == "ok" else watch_message(seen)
            first_failure = watched.get(id(exercise)) or failed
            watched[id(exercise)] = first_failure
            if kind[2]:  # the exercise's last watched check
                exercise.checks.append(Check("your own code", None, True, first_failure is None,
                                             first_failure or "does not run the package's implementation"))
            continue
        if isinstance(kind, tuple):
            _, rule, args, nonce, slot, armed = kind
            if slot is not None:  # judged with what the grader's broker received in that call
                args = (args, broker.record(slot))
            calls.setdefault((id(exercise), rule), (exercise, [], armed))[1].append((args, nonce, run))
            continue
        passed, message = verdict(run, grader_options, want, patterns)
        if kind == "provenance":
            exercise.checks.append(Check("your own code", None, True, passed,
                                         "defined in the notebook" if passed else
                                         "its functions must be defined in the notebook, not taken "
                                         "from the minikafka package" if run.status == "ok" else message))
        elif kind == "arm":
            if run.status != "ok":
                exercise.checks.append(Check("your own code", None, True, False,
                                             f"the grader could not watch your code: {run.reason}"))
        elif not passed and run.status == "ok":
            flagged = ("the kernel did not run the grader's code as sent (an input transformer or "
                       "a patched kernel?)")
    for (_, rule), (exercise, runs_of_rule, armed) in calls.items():
        exercise.checks.append(property_check(rule, runs_of_rule, key, armed))
    return flagged


def property_check(rule: str, calls: list[tuple[tuple, str, CellRun]], key: bytes, armed: str) -> Check:
    """The grader's verdict on one hidden property: every call's answer equals the answer of the
    package's reference, computed here, on the drawn inputs. The message names the property in
    words and how the code failed it, never an input or an expected value."""
    what = (f"it checks that {rule} follows Kafka's rule on inputs drawn for this grading: "
            f"{properties.statement(rule)}")
    for args, nonce, run in calls:
        if run.status != "ok":
            how = {"error": "your code raised an exception",
                   "died": "the kernel died while it ran (os._exit, a crash or a resource limit)"}.get(
                       run.status, run.reason)
            return Check(f"hidden property: {rule}", None, True, False, f"{what}; {how}")
        said = properties.parse(run.stream_text, nonce, key, armed)
        if said is None:
            return Check(f"hidden property: {rule}", None, True, False,
                         f"{what}; your function's answer is not plain data (numbers, strings, bytes, "
                         f"None, tuples, lists, dicts)")
        seen, answer = said
        if seen != "ok":
            return Check(f"hidden property: {rule}", None, True, False, f"{what}; {watch_message(seen)}")
        try:
            wrong = properties.judge(rule, args, answer)
        except Exception:  # noqa: BLE001 - an answer of the wrong shape is a wrong answer
            wrong = "your code's answer differs from the rule's on one of the drawn inputs"
        if wrong is not None:
            return Check(f"hidden property: {rule}", None, True, False, f"{what}; {wrong}")
    return Check(f"hidden property: {rule}", None, True, True, f"{len(calls)} drawn inputs, all right")


CHECKS_PREFIX = "# Checks:"
_ANOMALY = re.compile(r"^False: found ([a-z]+(?:-[a-z]+){0,4})$")


def checked_property(cell) -> str | None:
    """What a hidden check checks, in words: its first line, ``# Checks: ...``; None without one."""
    first = source_text(cell).split("\n", 1)[0].strip()
    if not first.startswith(CHECKS_PREFIX):
        return None
    return first[len(CHECKS_PREFIX):].strip().rstrip(".") or None


def hidden_message(cell, run: CellRun) -> str:
    """Why a hidden check failed, in words that teach without leaking: the property it checks
    (its ``# Checks:`` line) and how the code failed it (its output differs, it raised, it timed
    out, the kernel died), never its inputs, its expected output, its source or the submission's
    output or error message (which can echo the source: an input transformer sees every cell). A
    fault campaign's check says the kind of anomaly found (``campaign_outcome``), never the schedule."""
    said = checked_property(cell)
    what = f"it checks that {said}" if said else "it checks what the visible checks do not show"
    if GRADING_SEED_CALL in source_text(cell):
        text = run.stream_text.strip()
        found = _ANOMALY.match(text) if run.status == "ok" else None
        if found and found.group(1) in ANOMALY_KINDS:  # a known word, never free text the kernel chose
            return f"{what}: the fault campaign on a grading seed found a '{found.group(1)}' anomaly"
        if run.status == "ok":
            return f"{what}: the fault campaign on a grading seed did not pass"
    how = {"error": "your code raised an exception",
           "died": "the kernel died while it ran (os._exit, a crash or a resource limit)",
           "ok": "your code's output differs from the reference's"}.get(run.status, _unmeasured(run.reason))
    return f"{what}; {how}"


def _after_a_hidden_input(steps) -> set[int]:
    """The indices of the steps that run after the first hidden check or property call: by then
    the kernel has held a hidden input, and a student's function may have kept it (it is called
    with it; ``linecache`` and ``In`` hold the hidden cells' source). What such a step printed or
    raised (a check's output, an exception's message, a dying kernel's last words, in the
    notebook's cells and the grader's own alike) must not reach the student's feedback, or it
    could carry the hidden checks out."""
    seen, after = False, set()
    for index, (_, cell, own) in enumerate(steps):
        if seen:
            after.add(index)
        if cell is not None:
            seen = seen or HIDDEN_TAG in cell_tags(cell)
        elif own is not None and isinstance(own[2], tuple) and own[2][0] == "call":
            seen = True
    return after


def _unmeasured(text: str) -> str:
    """A timeout's reason without the one figure the submission chose: how much CPU a cell that
    waited had used (a few bits a check, out of a run that holds hidden inputs)."""
    return re.sub(r"having used only [0-9.]+ s of CPU", "having used little CPU", text)


def _quiet(run: CellRun) -> str:
    """How a cell failed, in the grader's words only (no exception message, no last words, no
    figure of the submission's)."""
    return {"error": "an exception (what it said is not shown for a cell that runs after a hidden check)",
            "died": "the kernel died while it ran (os._exit, a crash or a resource limit)"}.get(
                run.status, _unmeasured(run.reason))


def sealed_message(run: CellRun) -> str:
    """Why a visible check that ran after a hidden input failed, without a word the submission
    chose: its output, its exception's name and message, and a dying kernel's last lines stay out
    (``_after_a_hidden_input``); ``minikafka check``, which hides nothing from its student, shows them."""
    how = {"error": "your code raised an exception",
           "died": "the kernel died while it ran (os._exit, a crash or a resource limit)",
           }.get(run.status, "your code's output differs from the expected output")
    return (f"{how}. What your code printed or raised is not shown for a check that runs after a "
            f"hidden one: `minikafka check` on your notebook shows it")


def _exercise_cells_of(reference, exercise: Exercise) -> list[dict]:
    """The `exercise` cells under the heading of `exercise`."""
    cells, inside = [], False
    for cell in reference["cells"]:
        if cell["cell_type"] == "markdown":
            heading = exercise_heading(source_text(cell))
            if heading:
                inside = heading[1] == exercise.name
            elif re.match(r"^#{1,3}\s", source_text(cell)):
                inside = False
        elif inside and EXERCISE_TAG in cell_tags(cell):
            cells.append(cell)
    return cells


def read_submission(path: Path):
    try:
        return read_notebook(path)
    except json.JSONDecodeError as exc:
        raise NotGradable(f"not a notebook: invalid JSON ({exc.msg} at line {exc.lineno}); "
                          "was it saved completely?") from None
    except UnicodeDecodeError:
        raise NotGradable("not a notebook: the file is not UTF-8 text") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise NotGradable(f"not a notebook: {exc}") from None


def grade_file(path: Path, reference_path: Path, settings: Settings, *, student: str,
               shown_as: str) -> Result:
    result = Result(student=student, submission=shown_as, notebook=reference_path.name)
    try:
        reference = read_notebook(reference_path)
        result.exercises = [e for e, _ in plan(reference)]
        submission = read_submission(path)
        if not isinstance(submission.get("cells"), list):
            raise NotGradable("not a notebook: it has no cells")
        return grade_notebook(reference, submission, settings, result=result)
    except (NotGradable, MarkerError) as exc:
        result.status, result.error = "error", str(exc)
    except Exception as exc:  # noqa: BLE001 - one broken submission must not stop a class
        result.status, result.error = "error", f"could not be graded: {type(exc).__name__}: {exc}"
    for exercise in result.exercises:
        exercise.checks = [Check("grading", None, False, False, result.error)]
    return result


def check_file(path: Path, settings: Settings) -> Result:
    """The student's self-check: the file graded against its own stored expectations."""
    result = Result(student="you", submission=str(path), notebook=path.name)
    nb = read_submission(path)
    reference = copy.deepcopy(nb)
    if not any(expected_outputs(c, True) is not None for c in _code(reference) if CHECK_TAG in cell_tags(c)):
        raise NotGradable(f"{path} holds no expected outputs (cell metadata minikafka.expected): "
                          "is it an exercise notebook from exercises/? Get a fresh copy.")
    return grade_notebook(reference, nb, settings, from_metadata=True, result=result)
