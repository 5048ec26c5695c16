"""The seed sweep: every judge call of solutions/01-08, on Kafka's own rules, over many grading seeds.

Theory of operation
-------------------
The grader runs each hidden check with a fresh campaign seed (``grade._seeded`` rewrites
``grading_seed()``), so a judge that fails Kafka's own rule on *some* seed is a flaky test and an
unfair grade, found only when a student is unlucky. This sweep looks for such seeds before a student
does. It reads the notebooks the way the grader does:

- the judge calls are the ``judge({...}, schedules=N, seed=...)`` calls of the solutions' code cells
  (found with ``ast``: a call named ``judge`` whose first argument is a dict of rule names); those
  of cells tagged ``hidden`` are the grader's checks, the others are the notebooks' visible cells,
  which a student runs with the judge's default schedules. A call that judges a function not named
  after its rule (04's ``leader_end``, a wrong rule shown on purpose) is left out;
- the rules are the solutions' exercise cells, gathered by ``my_rules("solutions")`` exactly as a
  student who submitted the reference would have them gathered;
- each call runs with its own ``schedules=`` for seeds 1..S (hidden) or 1..V (visible), without
  shrinking (a verdict's first failing schedule is all a sweep needs). Seeds are the outer loop, so
  a sweep stopped early has given every call about as many seeds.

Every run is a line of JSON in ``--out`` (call, rules, schedules, seed, ok, seconds, and the verdict
when it failed); a sweep started again with the same ``--out`` skips what it holds. A failure is
printed with its verdict; the end prints one line per call: seeds tried, seeds failed.

    python -m benchmarks.seed_sweep [--seeds 1:201] [--visible-seeds 1:51] [--only 06:hidden-ex1-judge,04:hidden-ex1-judge]
                                    [--hidden-only | --visible-only] [--out seed-sweep.jsonl] [--list]

It is slow by design (a few hours for 200 seeds of every call on two cores): ``make seed-sweep``
runs it at low priority, in one process.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class JudgeCall:
    """One ``judge(...)`` call of a solution notebook."""

    notebook: str  # "06"
    cell: str  # the cell's id ("hidden-ex1-judge"): stable when cells are added or split around it
    hidden: bool
    rules: tuple[str, ...]
    schedules: int | None  # None: the judge's default

    @property
    def tag(self) -> str:
        return f"{self.notebook}:{self.cell}"


def _python(source: str) -> str:
    """A cell's source without IPython's magics and shell lines, which ``ast`` cannot read."""
    return "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))


def judge_calls(folder: Path = REPO / "solutions") -> list[JudgeCall]:
    """The judge calls of notebooks 01-08 in ``folder``, in notebook and cell order."""
    from minikafka.course.exercises import cell_tags, read_notebook, source_text
    from minikafka.rules import RULES

    calls = []
    for path in sorted(folder.glob("0[1-8]-*.ipynb")):
        for cell in read_notebook(path).cells:
            if cell.cell_type != "code":
                continue
            try:
                tree = ast.parse(_python(source_text(cell)))
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Dict):
                    continue
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
                given = node.args[0]
                keys = [k.value if isinstance(k, ast.Constant) else None for k in given.keys]
                if name != "judge" or not keys or not all(k in RULES for k in keys):
                    continue  # 06's own judge(num_partitions, ...) is the exercise's check, not the tester
                if any(not isinstance(v, ast.Name) or v.id != k for k, v in zip(keys, given.values)):
                    continue  # a wrong rule shown on purpose, not the reference
                schedules = next((ast.literal_eval(kw.value) for kw in node.keywords if kw.arg == "schedules"), None)
                calls.append(JudgeCall(path.name[:2], cell.get("id", ""), "hidden" in cell_tags(cell), tuple(sorted(keys)),
                                       schedules))
    return calls


def _span(text: str) -> range:
    first, end = (int(x) for x in text.split(":"))
    if not 0 < first < end:
        raise argparse.ArgumentTypeError(f"a seed range is FIRST:END with 0 < FIRST < END, not {text!r}")
    return range(first, end)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.seed_sweep", description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=_span, default=_span("1:201"), help="hidden checks' seeds, FIRST:END")
    parser.add_argument("--visible-seeds", type=_span, default=_span("1:51"), help="visible cells' seeds")
    parser.add_argument("--only", default="", help="calls to run, as NOTEBOOK:CELL-ID,... (see --list)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--hidden-only", action="store_true")
    which.add_argument("--visible-only", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("seed-sweep.jsonl"), help="JSON lines, one per run")
    parser.add_argument("--list", action="store_true", help="list the judge calls and stop")
    args = parser.parse_args(argv)

    calls = judge_calls()
    if args.list:
        for c in calls:
            print(f"{c.tag:28} {'hidden ' if c.hidden else 'visible'} schedules={c.schedules} {', '.join(c.rules)}")
        return 0
    only = {t for t in args.only.split(",") if t}
    unknown = only - {c.tag for c in calls}
    if unknown:
        parser.error(f"no judge call {', '.join(sorted(unknown))} in solutions/ (see --list)")
    calls = [c for c in calls if (not only or c.tag in only)
             and not (args.hidden_only and not c.hidden) and not (args.visible_only and c.hidden)]

    from minikafka.course import judge
    from minikafka.course.student_rules import my_rules

    mine = my_rules(REPO / "solutions")
    done: set[tuple[str, int]] = set()
    failed: dict[str, list[int]] = {c.tag: [] for c in calls}
    tried: dict[str, int] = {c.tag: 0 for c in calls}
    if args.out.exists():
        for line in args.out.read_text().splitlines():
            row = json.loads(line)
            if row["call"] in tried:
                done.add((row["call"], row["seed"]))
                tried[row["call"]] += 1
                if not row["ok"]:
                    failed[row["call"]].append(row["seed"])
    seeds_of = {c.tag: args.seeds if c.hidden else args.visible_seeds for c in calls}
    last = max((max(s) for s in seeds_of.values()), default=0)
    with args.out.open("a") as out:
        for seed in range(1, last + 1):
            for call in calls:
                if seed not in seeds_of[call.tag] or (call.tag, seed) in done:
                    continue
                started = time.monotonic()
                try:
                    verdict = judge({name: mine[name] for name in call.rules}, call.schedules, seed=seed,
                                    shrinking=False)
                    ok, text = verdict.ok, None if verdict.ok else str(verdict)
                except Exception:  # the judge itself broke: as much a failure as a wrong verdict
                    ok, text = False, "the judge raised:\n" + traceback.format_exc()
                row = {"call": call.tag, "hidden": call.hidden, "rules": list(call.rules),
                       "schedules": call.schedules, "seed": seed, "ok": ok,
                       "seconds": round(time.monotonic() - started, 2)}
                tried[call.tag] += 1
                if not ok:
                    row["verdict"] = text
                    failed[call.tag].append(seed)
                    print(f"FAILED {call.tag} ({', '.join(call.rules)}, schedules={call.schedules}) seed={seed}:\n"
                          f"{text}\n", flush=True)
                out.write(json.dumps(row) + "\n")
                out.flush()
    for call in calls:
        print(f"{call.tag:28} {'hidden ' if call.hidden else 'visible'} schedules={call.schedules!s:4} "
              f"{', '.join(call.rules):42} seeds tried {tried[call.tag]:4}, failed {len(failed[call.tag])}"
              + (f": {failed[call.tag]}" if failed[call.tag] else ""))
    return 1 if any(failed.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
