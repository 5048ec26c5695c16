"""`make seed-sweep` (benchmarks/seed_sweep.py) finds the judge calls of solutions/ and runs them by seed."""

import json

from benchmarks.seed_sweep import judge_calls, main
from minikafka.rules import RULES


def test_the_sweep_finds_every_hidden_judge_call_with_its_schedules():
    calls = judge_calls()
    hidden = {c.tag: c for c in calls if c.hidden}
    # Every rule of lectures 01-08 has a hidden judge check (07's come in pairs).
    assert {r for c in hidden.values() for r in c.rules} == {n for n, r in RULES.items() if "01" <= r.lecture <= "08"}
    assert hidden["06:hidden-ex1-judge"].rules == ("range_assign",) and hidden["06:hidden-ex1-judge"].schedules == 4
    assert hidden["08:hidden-ex1-judge"].schedules == 30 and all(c.schedules for c in hidden.values())
    # The visible cells run with the judge's default; 04's wrong rule shown on purpose is not swept.
    assert all(c.schedules is None for c in calls if not c.hidden)
    assert [c.rules for c in calls if c.notebook == "04" and not c.hidden] == [
        ("high_watermark",), ("last_caught_up",), ("truncation_offset",)]


def test_the_sweep_writes_a_line_per_run_and_skips_what_it_holds(tmp_path, capsys):
    out = tmp_path / "sweep.jsonl"
    assert main(["--only", "02:hidden-ex1-run", "--seeds", "1:3", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["call"], r["seed"], r["ok"], r["schedules"]) for r in rows] == [("02:hidden-ex1-run", 1, True, 3), ("02:hidden-ex1-run", 2, True, 3)]
    assert main(["--only", "02:hidden-ex1-run", "--seeds", "1:3", "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 2  # nothing run again
    assert "seeds tried    2, failed 0" in capsys.readouterr().out
