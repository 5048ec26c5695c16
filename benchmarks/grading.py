"""How long the sandboxed grader takes for a class: N copies of a correct submission per notebook.

Each copy is the solutions notebook with its solution markers removed (a correct student's work,
not flagged), in its own student folder; `grade_all` grades the folder with one job per core,
exactly as `minikafka grade FOLDER --jobs N` does (a fresh sandboxed kernel per submission; the
only thing submissions share is a read-only file, the Spark class archive of jvm_cache.py, built
before the clock starts). The wall time is scaled to a class of 200 only when fewer copies ran
(a smaller MINIKAFKA_BENCH_GRADING, stated in the row).

Sizes: MINIKAFKA_BENCH_GRADING="01-the-log:200,10-capstone-spark:200" (the default: a whole class
of each; the capstone's takes about 40 minutes of both cores); --quick grades 2 copies of 01 only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from benchmarks.common import REPO, Section, met

CLASS = 200
DEFAULT = "01-the-log:200,10-capstone-spark:200"
# The targets: a class of 200 in under 10 minutes, the Spark capstone in under 45.
TARGET_MINUTES = {"10-capstone-spark": 45.0}
OTHERS_MINUTES = 10.0


def sizes(quick: bool) -> list[tuple[str, int]]:
    spec = "01-the-log:2" if quick else os.environ.get("MINIKAFKA_BENCH_GRADING", DEFAULT)
    out = []
    for item in spec.split(","):
        name, _, count = item.strip().partition(":")
        out.append((name, int(count or CLASS)))
    return out


def student_copy(solution: Path) -> str:
    nb = json.loads(solution.read_text())
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        cell["source"] = "".join(line for line in source.splitlines(keepends=True)
                                 if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))
    return json.dumps(nb)


def run(scratch: Path, quick: bool, repeats: int) -> Section:
    from minikafka.course.grade import Settings
    from minikafka.course.gradebook import default_jobs, grade_all

    jobs = default_jobs()
    rows, targets = [], []
    for name, count in sizes(quick):
        folder = scratch / f"grading-{name}"
        text = student_copy(REPO / "solutions" / f"{name}.ipynb")
        if "pyspark" in text:
            from minikafka.course.jvm_cache import ensure_archive
            ensure_archive()  # once per machine (and per Java/PySpark upgrade), not per class
        for i in range(count):
            (folder / f"student{i:03d}").mkdir(parents=True)
            (folder / f"student{i:03d}" / f"{name}.ipynb").write_text(text)
        start = time.perf_counter()
        results = grade_all(folder, REPO / "solutions", Settings(sanitize=REPO / "tests" / "nbval-sanitize.cfg"),
                            jobs=jobs, progress=True)
        seconds = time.perf_counter() - start
        full = sum(r.status == "graded" and r.points == r.max_points for r in results)
        class_minutes = seconds / count * CLASS / 60
        target = TARGET_MINUTES.get(name, OTHERS_MINUTES)
        ok = full == count and class_minutes < target
        rows.append([f"`{name}`", str(count), str(jobs), f"{seconds:.0f}", f"{seconds / count:.2f}",
                     f"{class_minutes:.1f}" + ("" if count == CLASS else f" (scaled from {count})"),
                     f"{full} / {count}"])
        targets.append((f"200 submissions of `{name}` graded in < {target:g} min", f"{class_minutes:.1f} min",
                        met(ok)))
    return Section(
        name="grading",
        title="Grading: a class of submissions, sandboxed",
        method=["N copies of the solutions notebook (solution markers removed: a correct student's work) in "
                "N student folders, graded by `grade_all` as `minikafka grade FOLDER` does, one job per core: "
                "a fresh sandboxed kernel per submission (own user, namespaces, rlimits); nothing shared but a "
                "read-only file: the Spark class archive (`minikafka/course/jvm_cache.py`), built before timing.",
                "Wall time from the first kernel to the last result; `min / 200` scales it linearly to a class "
                "of 200 when fewer copies ran (stated in the row). `full marks` checks the grader's verdicts.",
                "Sizes: MINIKAFKA_BENCH_GRADING (default " + DEFAULT + ")."],
        columns=["notebook", "submissions", "jobs", "wall s", "s / submission", "min / 200", "full marks"],
        rows=rows, targets=targets)
