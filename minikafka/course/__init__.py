"""The course loop: solutions/ -> exercises/ -> a student's work -> a score.

Three folders hold the course. `notebooks/` are the lectures. `solutions/NN-name.ipynb` are short
exercise notebooks with the reference code, committed with executed outputs. `exercises/` is
generated from `solutions/` by `exercises.py`: every region between `### BEGIN SOLUTION` and
`### END SOLUTION` in a cell tagged `exercise` becomes a stub that raises NotImplementedError, and
the stored outputs stay, so nbval compares the student's code against the reference outputs.

`grade.py` scores submissions: it copies only the student's exercise cells into a copy of the
reference notebook and runs nbval on that copy, so outputs a student saved never count.

Cell tags are the contract between the notebooks and this package:

- `exercise`: a code cell with solution regions; graded on its own outputs too.
- `check`: a code cell that prints or asserts exercise results, with deterministic output.
- `hidden`: (with `check`) a check only the grader runs: it stays in solutions/ and is dropped from
  exercises/ and from a release.

Notebook metadata `minikafka`: `points` ({"Exercise 1": 3, ...}, shown in the exercise headings),
and optionally `time_budget`, `cell_timeout` (CPU seconds, runner.py) and `limits` (sandbox.Limits) for grading,
and `references` ({"Exercise 1": ["minikafka.partitioner:murmur2"], ...}: the package's own
implementation of an exercise, which the grader fails the exercise for running inside the
student's functions).
`judge(rules, schedules=N, seed=S)` (`tester.py`) is the tester: a fault campaign on a cluster
whose brokers run a student's rules (`minikafka.rules`), with a verdict a notebook shows. A hidden
check runs it with `seed=grading_seed()`: the grader picks that seed when it grades, and prints
`campaign_outcome(verdict)` (True, or the kind of anomaly found).
A hidden check's first line says in words what it checks (`# Checks: ...`): a failed hidden check
is reported by that line alone, never by its inputs, its expected output or its source.
`my_rules("exercises/")` (`student_rules.py`) gathers a student's rules from their exercise notebooks, for
`Cluster(rules=...)`, `launch(rules=...)` and `judge`.
`show_source(obj)` (`source.py`) is the code tour: a lecture shows the package's own code, read
when the cell runs, with its file and line.
Exercise notebooks carry, in each checked cell's metadata `minikafka.expected`, the outputs it
must produce: `minikafka check` compares against those, which saving in Jupyter never changes.
"""

EXERCISE_TAG = "exercise"
GRADING_SEED = 2024  # the seed of the hidden checks' committed outputs (solutions/ under nbval)
GRADING_SEED_CALL = "grading_seed()"
CHECK_TAG = "check"
HIDDEN_TAG = "hidden"
BEGIN_MARKER = "### BEGIN SOLUTION"
END_MARKER = "### END SOLUTION"


def grading_seed(seed: int = GRADING_SEED) -> int:
    """The seed of a hidden check's campaign: ``judge(rules, seed=grading_seed())``. In solutions/
    it is ``GRADING_SEED``; the grader rewrites the call in the hidden cells it runs to
    ``grading_seed(N)`` with N chosen when it grades (``grade.py``), so a rule cannot be fitted to
    the schedules of a seed the student could know."""
    return seed


# Every kind of anomaly the testers report (``Finding.kind`` of tester*.py, the checker's
# ``ANOMALIES``, the metadata quorum's violations): the only words a hidden campaign's outcome may
# carry into a student's feedback. The grader quotes a kind only from this set (``grade.py``): a
# free word would be a channel out of the sealed run (a red team printed the hidden checks'
# source as one). A kind missing here is reported as "did not pass", never leaked.
ANOMALY_KINDS = frozenset((
    # checker.analysis.ANOMALIES, tester.py (the calm phase, the quorum, liveness)
    "lost-write", "duplicate", "inconsistent-offsets", "nonmonotonic-poll", "poll-skip", "stuck",
    "isr-shrank-while-healthy", "unacknowledged-while-healthy", "metadata-quorum", "rule-error",
    # tester_log
    "gap", "wrong-record", "segment-too-big", "segment-never-rolled", "replica-gap", "key-split",
    "deleted-early", "kept-past-retention",
    # tester_cluster
    "unavailable", "leader-order", "placement-leaders", "placement-followers",
    # tester_producer
    "unacknowledged", "reordered", "late", "tiny-batches", "flush-waited",
    # tester_groups
    "two-owners", "not-subscribed", "order-dependent", "needless-moves", "unassigned", "unbalanced",
    "consumed-twice", "never-consumed",
    # tester_delivery
    "lost", "processed-again", "processed-twice", "counted-twice", "aborted-visible", "not-atomic",
    "offsets-behind", "offsets-lost",
    # tester_raft (checker.raft's violations)
    "two-leaders", "double-vote", "committed-changed", "committed-lost", "assertion", "delivery-order",
    "no-convergence",
))


def campaign_outcome(verdict) -> str:
    """What a hidden check prints for a fault campaign's verdict: ``True``, or ``False: found
    <kind>`` with the kind of anomaly (``lost-write``, ``stuck``, ``rule-error``, ...) and nothing
    of the schedule. The grader tells the student that kind, never the schedule (``grade.py``), so
    a hidden cell calls ``judge(..., shrinking=False)``: shrinking a schedule nobody sees reruns
    the campaign up to 12 times (for a wrong truncation rule, 26 CPU s instead of 8)."""
    if verdict.ok:
        return "True"
    kind = getattr(getattr(verdict, "failure", None), "kind", None)
    return f"False: found {kind if kind in ANOMALY_KINDS else 'an anomaly'}"


def __getattr__(name: str):
    """``minikafka.course.judge``: the tester (``tester.py``), imported when first asked for (it
    brings the simulated cluster and the checker, which the grader's own modules never need)."""
    if name in ("judge", "Verdict"):
        from minikafka.course import tester

        return getattr(tester, name)
    if name in ("show_source", "SourceView"):
        from minikafka.course import source

        return getattr(source, name)
    if name in ("my_rules", "MyRules"):
        from minikafka.course import student_rules

        return getattr(student_rules, name)
    raise AttributeError(f"module 'minikafka.course' has no attribute {name!r}")
