"""How long each notebook in notebooks/ takes to execute, top to bottom."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from tqdm import tqdm

from benchmarks.common import REPO, Section, met

NOTEBOOKS = REPO / "notebooks"
TARGET_SECONDS = 30.0
# The capstone starts a Spark session (5-10 s), warms Spark's Python workers and runs a live
# feed in real time (stops, restarts, a broker failover): its budget is a class period's aside.
TARGETS = {"10-capstone-spark.ipynb": 120.0}
CELL_TIMEOUT = 600


def execute(path: Path) -> tuple[float, str, int]:
    """(seconds, status, code cells) for one notebook run in its own directory (a copy)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    cells = sum(c.cell_type == "code" for c in nb.cells)
    client = NotebookClient(
        nb, kernel_name="python3", timeout=CELL_TIMEOUT, resources={"metadata": {"path": str(path.parent)}}
    )
    start = time.perf_counter()
    try:
        client.execute()
        status = "ok"
    except CellExecutionError as e:
        status = "error: " + (str(e).strip().splitlines() or ["?"])[-1][:120]
    except (CellTimeoutError, DeadKernelError) as e:
        status = f"{type(e).__name__}: {str(e).strip()[:120]}"
    return time.perf_counter() - start, status, cells


def run(scratch: Path, quick: bool, repeats: int) -> Section:
    found = sorted(NOTEBOOKS.glob("*.ipynb"))
    rows, targets = [], []
    if found:
        # Execute a copy of the folder: the committed notebooks (and their outputs) are
        # never written to, and files a notebook creates land in the scratch directory.
        copy = scratch / "notebooks"
        shutil.copytree(NOTEBOOKS, copy, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        for nb in tqdm(found, desc="notebooks", unit="notebook", leave=False):
            seconds, status, cells = execute(copy / nb.name)
            target = TARGETS.get(nb.name, TARGET_SECONDS)
            ok = status == "ok" and seconds < target
            rows.append([f"`{nb.name}`", str(cells), f"{seconds:.1f}", status.replace("|", "\\|"),
                         f"< {target:g} s: {met(ok)}"])
            targets.append((f"`{nb.name}` executes in < {target:g} s", f"{seconds:.1f} s", met(ok)))
        shutil.rmtree(copy)
    else:
        rows.append(["(no notebooks in notebooks/ yet)", "", "", "", "n/a"])
    return Section(
        name="notebooks",
        title="4. Notebook execution time",
        method=[
            "Every `notebooks/*.ipynb`, executed top to bottom with nbclient (kernel `python3`, "
            f"{CELL_TIMEOUT} s per cell) in a scratch copy of the folder, so the committed outputs are "
            "untouched. The time includes starting the kernel. One run each (not repeated).",
            f"A notebook meets the target if it runs without error in < {TARGET_SECONDS:g} s "
            + "".join(f"({name}: < {t:g} s, a Spark session and a live feed in real time)" for name, t in TARGETS.items())
            + ".",
        ],
        columns=["Notebook", "Code cells", "Seconds", "Status", "Target"],
        rows=rows,
        targets=targets,
    )
