"""Hidden properties of lecture 07's application loops (exercises 1, 2 and 4): what the student's
loop does on the grader's stand-ins (``minikafka/course/standins.py``), judged by the guarantee
the exercise states. Kafka's recipes and the other right answers the exercises accept pass on
every seed; two plausible wrong loops per exercise fail, each with the message that names the
call and Kafka's rule; the seed alone decides the cases."""

from __future__ import annotations

import pytest

from minikafka.course import properties, standins
from minikafka.rules import RULES
from minikafka.topic import OffsetAndMetadata

SEEDS = range(1, 21)
EFFECTS = ("no_record_lost", "no_record_twice", "transactional_step", "count_reports")
ref = {name: rule.reference for name, rule in RULES.items()}


def answers(name, functions, seed):
    """(case, what the functions did) for every case drawn for ``name`` on ``seed``."""
    return [(case, properties.plain(standins.act(name, case, functions))) for case in properties.draw(name, seed)]


def first_failure(name, functions, seed):
    for case, did in answers(name, functions, seed):
        why = properties.judge(name, case, did)
        if why is not None:
            return why
    return None


# --- right answers: Kafka's recipes, and the other ways the exercises accept -----------------------

def lost_commit_each(consumer, process):  # at-least-once, committing after every record
    for tp, records in consumer.poll(timeout_ms=1000).items():
        for record in records:
            process(record)
            consumer.commit({tp: OffsetAndMetadata(record.offset + 1, "", -1)})
    consumer.commit()


def idempotent_sink_assigned(consumer, partitions, db):
    pass


def idempotent_count(consumer, records, db):  # an idempotent effect, Kafka's offsets committed after
    for record in records:
        seen = ("seen", record.partition, record.offset)
        if db.get(seen) is None:
            count = ("count", record.key)
            db.transaction({count: db.get(count, 0) + 1, seen: True})
    consumer.commit()


def step_per_record(consumer, producer, transform):  # one transaction per record
    for tp, records in consumer.poll(timeout_ms=1000).items():
        for record in records:
            producer.begin_transaction()
            producer.send("out", transform(record), partition=record.partition)
            producer.send_offsets_to_transaction({tp: record.offset + 1}, consumer.group_metadata())
            producer.commit_transaction()


RIGHT = [
    ("no_record_lost", {"no_record_lost": ref["no_record_lost"]}),
    ("no_record_lost", {"no_record_lost": lost_commit_each}),
    ("no_record_twice", {"no_record_twice": ref["no_record_twice"]}),
    ("count_reports", {"count_reports": ref["count_reports"], "on_assigned": ref["on_assigned"]}),
    ("count_reports", {"count_reports": idempotent_count, "on_assigned": idempotent_sink_assigned}),
    ("transactional_step", {"transactional_step": ref["transactional_step"]}),
    ("transactional_step", {"transactional_step": step_per_record}),
]


@pytest.mark.parametrize("name, functions", RIGHT,
                         ids=[f"{n}-{f[n].__name__}" for n, f in RIGHT])
def test_kafkas_recipes_and_the_other_right_answers_pass_on_every_seed(name, functions):
    for seed in SEEDS:
        assert first_failure(name, functions, seed) is None, (name, seed)


# --- wrong loops: two per exercise ------------------------------------------------------------------

def lost_commit_first(consumer, process):  # at-most-once where at-least-once was asked
    batch = consumer.poll(timeout_ms=1000)
    consumer.commit()
    for records in batch.values():
        for record in records:
            process(record)


def lost_off_by_one(consumer, process):  # commits the last record, not the next one to read
    last = {}
    for tp, records in consumer.poll(timeout_ms=1000).items():
        for record in records:
            process(record)
            last[tp] = record.offset
    if last:
        consumer.commit({tp: offset for tp, offset in last.items()})


def twice_commit_after(consumer, process):  # at-least-once where at-most-once was asked
    batch = consumer.poll(timeout_ms=1000)
    for records in batch.values():
        for record in records:
            process(record)
    consumer.commit()


def twice_swallows_crash(consumer, process):  # catches the crash and goes on
    batch = consumer.poll(timeout_ms=1000)
    consumer.commit()
    for records in batch.values():
        for record in records:
            try:
                process(record)
            except BaseException:
                pass


def assigned_ignores_sink(consumer, partitions, db):  # starts where Kafka says: nothing committed
    pass


def count_then_commit(consumer, records, db):  # at-least-once into the sink: recounts after a crash
    for record in records:
        count = ("count", record.key)
        db.transaction({count: db.get(count, 0) + 1})
    consumer.commit()


def step_commits_consumer(consumer, producer, transform):  # offsets outside the transaction
    batch = consumer.poll(timeout_ms=1000)
    if not batch:
        return
    producer.begin_transaction()
    for records in batch.values():
        for record in records:
            producer.send("out", transform(record), partition=record.partition)
    producer.commit_transaction()
    consumer.commit()


def step_off_by_one(consumer, producer, transform):  # the transaction carries the last offset, not the next
    batch = consumer.poll(timeout_ms=1000)
    if not batch:
        return
    producer.begin_transaction()
    for records in batch.values():
        for record in records:
            producer.send("out", transform(record), partition=record.partition)
    producer.send_offsets_to_transaction({tp: rs[-1].offset for tp, rs in batch.items()}, "upper")
    producer.commit_transaction()


WRONG = [
    ("no_record_lost", {"no_record_lost": lost_commit_first},
     "it called commit with an offset past a record it had not processed yet"),
    ("no_record_lost", {"no_record_lost": lost_off_by_one}, "its progress was not committed"),
    ("no_record_twice", {"no_record_twice": twice_commit_after},
     "it called process(record) on a record whose offset it had not committed yet"),
    ("no_record_twice", {"no_record_twice": twice_swallows_crash},
     "its calls of process(record) differ from Kafka's loop"),
    ("count_reports", {"count_reports": ref["count_reports"], "on_assigned": assigned_ignores_sink},
     "a report was counted twice"),
    ("count_reports", {"count_reports": count_then_commit, "on_assigned": ref["on_assigned"]},
     "a report was counted twice"),
    ("transactional_step", {"transactional_step": step_commits_consumer}, "it called consumer.commit"),
    ("transactional_step", {"transactional_step": step_off_by_one},
     "the outputs its committed transactions hold and the offsets committed with them disagree"),
]


@pytest.mark.parametrize("name, functions, said", WRONG,
                         ids=[f"{n}-{'-'.join(f.__name__ for f in fs.values())}" for n, fs, _ in WRONG])
def test_a_wrong_loop_fails_its_property_on_every_seed_naming_the_call(name, functions, said):
    for seed in SEEDS:
        why = first_failure(name, functions, seed)
        assert why is not None and said in why, (seed, why)


def test_the_cases_are_the_seeds_alone_and_cover_every_crash_place():
    for name in EFFECTS:
        assert properties.draw(name, 7) == properties.draw(name, 7)
        assert properties.draw(name, 7) != properties.draw(name, 8), name
    cases = properties.draw("no_record_lost", 3)
    assert {c[2] is None for c in cases} == {True, False}        # crashes and clean iterations
    assert any(sum(e - s for s, e in c[0].values()) == 0 for c in cases)  # an empty poll
    sink = properties.draw("count_reports", 3)
    assert {c[3] for c in sink} == {True, False} and any(c[4] for c in sink)  # before/after, a rebalance


def test_rules_with_effects_have_properties_found_from_the_package():
    # Every rule with effects is judged by a property: its own, or one it runs in (WITH).
    effects = {name for name, rule in RULES.items() if rule.effects}
    assert effects == set(properties.ACTS) | {w for ws in properties.WITH.values() for w in ws}
    assert set(properties.ACTS) == set(standins.ACTS)
    assert properties.rules_of("07", ["no_record_lost", "no_record_twice"]) == ["no_record_lost", "no_record_twice"]
    # count_reports's property runs the exercise's on_assigned: one property for the pair.
    assert properties.rules_of("07", ["on_assigned", "count_reports"]) == ["count_reports"]
    assert properties.rules_of("07", ["count_reports"]) == []


def test_the_messages_never_show_a_case():
    wrong = {"no_record_lost": lost_commit_first}
    for case, did in answers("no_record_lost", wrong, 5):
        why = properties.judge("no_record_lost", case, did)
        if why:
            assert not any(str(v) in why for p, (s, e) in case[0].items() for v in (s, e) if v > 9)
    with pytest.raises(ValueError):
        properties.judge("no_record_lost", properties.draw("no_record_lost", 1)[0], "not a log")


@pytest.mark.notebooks
def test_the_call_cells_run_the_student_s_loop_on_the_stand_ins_in_the_kernel():
    """The grader's call cells in a sandboxed kernel: the at-least-once recipe passes, a loop that
    commits first fails, and delegating to the package's recipe is caught by the watch."""
    import inspect

    from minikafka.course import watch
    from minikafka.course.grade import property_check
    from minikafka.course.runner import run_cells
    from minikafka.course.sandbox import Limits, Sandbox

    draws = properties.draw("no_record_lost", 11, 6)
    specs = [properties.reference_spec("no_record_lost")]
    verdicts = {}
    for label, code in (("right", inspect.getsource(lost_commit_each)),
                        ("wrong", inspect.getsource(lost_commit_first)),
                        ("package", "from minikafka.recipes import no_record_lost\n")):
        code = code.replace(getattr(lost_commit_each if label == "right" else lost_commit_first, "__name__"),
                            "no_record_lost") if label != "package" else code
        calls = [properties.call_cell("no_record_lost", case, specs, ["no_record_lost"], "@n:")
                 for case in draws]
        handshake = watch.Handshake()
        seal = watch.seal_cell(specs, handshake.public)
        with Sandbox(Limits(), ()) as box:
            runs = run_cells(box, [seal + "from minikafka.topic import OffsetAndMetadata\n" + code] + calls,
                             cell_timeout=10, budget=60)
        assert runs[0].status == "ok", runs[0]
        key = handshake.key(runs[0].stream_text)
        verdicts[label] = property_check("no_record_lost", [(c, "@n:", r) for c, r in zip(draws, runs[1:])], key,
                                         watch.armed_text(specs, ["no_record_lost"], True))
    assert verdicts["right"].passed, verdicts["right"].message
    assert not verdicts["wrong"].passed
    assert "it called commit with an offset past a record it had not processed yet" in verdicts["wrong"].message
    assert not verdicts["package"].passed
    assert "the package's own implementation of the exercise ran" in verdicts["package"].message


def _light(reference: dict) -> dict:
    """Notebook 07 with each check that runs a cluster or a campaign replaced by a check that prints
    a line (the properties do not need them: minutes of grading; the hidden ones, with their
    campaign seed, are the campaign's, tested elsewhere)."""
    for cell in reference["cells"]:
        text = "".join(cell["source"])
        if "check" in cell.get("metadata", {}).get("tags", []) and any(
                w in text for w in ("judge(", "Cluster(", "run_step(", "run_sink(", "run_job(", "records")):
            cell["metadata"]["tags"] = ["check"]
            cell["source"] = ["print('checked')"]
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["checked\n"]}]
    return reference


@pytest.mark.notebooks
def test_grading_07_runs_the_loops_properties_and_fails_only_the_wrong_exercise():
    import inspect
    import json
    import shutil
    import tempfile
    from pathlib import Path

    from grading_helpers import ROOT, SANITIZE, solved_submission
    from minikafka.course.grade import Settings
    from minikafka.course.gradebook import feedback, grade_all

    name = "07-offsets-and-delivery"
    solution = json.loads((ROOT / "solutions" / f"{name}.ipynb").read_text())
    ex_cells = [c["id"] for c in solution["cells"] if "exercise" in c.get("metadata", {}).get("tags", [])]
    # Exercise 1 with the at-most-once loop written for no_record_lost too: its visible checks show
    # crashes on five schedules (cut here), its property catches the commit before the effect.
    wrong_1 = (inspect.getsource(lost_commit_first).replace("lost_commit_first", "no_record_lost")
               + "\n\n" + inspect.getsource(lost_commit_first).replace("lost_commit_first", "no_record_twice"))
    folder = Path(tempfile.mkdtemp(prefix="minikafka-props07-"))
    try:
        (folder / "ref").mkdir()
        light = _light(solution)
        (folder / "ref" / f"{name}.ipynb").write_text(json.dumps(light))
        for student, replace in {"right": {}, "wrong": {ex_cells[0]: wrong_1}}.items():
            (folder / "class" / student).mkdir(parents=True)
            (folder / "class" / student / f"{name}.ipynb").write_text(json.dumps(solved_submission(name, replace)))
        results = grade_all(folder / "class", folder / "ref",
                            Settings(sanitize=SANITIZE, seed=4242, property_seed=7), jobs=1)
    finally:
        shutil.rmtree(folder)
    by = {r.student: r for r in results}
    labels = [[(c.label, c.passed) for c in e.checks if c.label.startswith("hidden property")]
              for e in by["right"].exercises]
    assert labels == [[("hidden property: no_record_lost", True), ("hidden property: no_record_twice", True)],
                      [("hidden property: count_reports", True)], [("hidden property: decode_key", True)],
                      [("hidden property: transactional_step", True)]], feedback(by["right"])
    wrong = by["wrong"]
    [failed] = [c for c in wrong.exercises[0].checks if not c.passed]
    assert failed.label == "hidden property: no_record_lost", feedback(wrong)
    assert "it called commit with an offset past a record it had not processed yet" in failed.message
    assert [e.earned for e in wrong.exercises][1:] == [e.earned for e in by["right"].exercises][1:]
