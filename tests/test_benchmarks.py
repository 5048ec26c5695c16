"""`make bench` must keep working: its quick mode runs every storage benchmark end to end.

Only that it runs and reports is checked here; the figures themselves live in
benchmarks/RESULTS.md (speed is never asserted in tests).
"""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_quick_benchmarks_write_a_report(tmp_path):
    out = tmp_path / "RESULTS.md"
    subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out)],
        cwd=REPO, check=True, capture_output=True, timeout=300,
    )
    report = out.read_text()
    for heading in ("## Targets", "append", "read", "recovery", "| CPU |"):
        assert heading in report, heading
    assert "append at 16 KiB batches >= 0.5 of raw" in report
