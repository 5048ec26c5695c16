"""nbval's comparison rules, applied by the grader to outputs it collected itself.

Theory of operation: nbval stays the judge of "same output". Its `IPyNbCell.compare_outputs` is
called unbound on a small stand-in that carries what it reads (the skip list, the sanitize
patterns, no colours), so the rules are nbval's own: streams coalesced and keyed by name, widget
model ids, images, metadata and execution counts ignored, `regex:`/`replace:` sanitizing. Cell
options come from nbval's own parsers too: comment markers (`# NBVAL_IGNORE_OUTPUT`,
`# NBVAL_SKIP`, `# NBVAL_RAISES_EXCEPTION`) and tags (`raises-exception`, `nbval-skip`, ...).

`verdict(...)` turns one cell's run into (passed, message), the message in plain words:
what was expected and what the code gave. A message quotes at most EXCERPT characters of a line
(around its first difference) or of an exception's message, and says how many more there were: a
student's `return "x" * 50_000_000` must not become a 50 MB gradebook.
"""

from __future__ import annotations

import copy
import warnings
from collections import OrderedDict, defaultdict
from pathlib import Path

import nbformat

from nbval.plugin import (IPyNbCell, coalesce_streams, find_comment_markers, find_metadata_tags,
                          get_sanitize_patterns, nocolors)

from .runner import MAX_CELL_OUTPUT, shorten

# IPyNbFile's skip list (without nbdime): what nbval never compares.
SKIP_COMPARE = ('metadata', 'traceback', 'prompt_number', 'output_type', 'name', 'execution_count',
                'application/vnd.jupyter.widget-view+json', 'image/png', 'image/jpeg')


def load_sanitize(path: Path | None) -> OrderedDict:
    patterns = OrderedDict()
    if path is not None:
        patterns.update(get_sanitize_patterns(Path(path).read_text(encoding="utf-8")))
    return patterns


def cell_options(cell) -> dict:
    """nbval's options for a reference cell: check, check_exception, skip."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        options = defaultdict(bool, find_metadata_tags(cell.get("metadata", {})))
        options.update(dict(find_comment_markers(cell.get("source", ""))))
    options.setdefault("check", True)
    return options


class _Judge:
    """What IPyNbCell.compare_outputs reads from `self`, without a pytest session."""

    colors = nocolors
    sanitize = IPyNbCell.sanitize

    def __init__(self, patterns: OrderedDict):
        self.parent = type("P", (), {"skip_compare": SKIP_COMPARE, "sanitize_patterns": patterns})()
        self.comparison_traceback: list[str] = []
        self.difference: tuple[str, object, object] | None = None

    def format_output_compare(self, key, left, right):
        self.difference = (key, left, right)  # words are made by _explain, not pytest's repr


def _text(outputs) -> str:
    parts = []
    for out in outputs:
        if out.get("output_type") == "stream":
            parts.append(out["text"])
        elif out.get("output_type") == "error":
            parts.append(f"{out['ename']}: {out['evalue']}\n")
        else:
            data = out.get("data", {})
            parts.append((data.get("text/plain") or next(iter(data), "")) + "\n")
    return "".join(parts)


EXCERPT = 200  # characters of one line (or of an exception's message) that a verdict quotes
BEFORE = 40    # ... of them before the first difference
REASON = 2500  # of a run's reason (runner.py clips an error's value in it; a death adds the kernel's last words)


def excerpt(text: str, start: int = 0, limit: int = EXCERPT) -> str:
    """`text` quoted (repr), or at most `limit` characters of it from `start`, saying what is left out."""
    if len(text) <= limit:
        return repr(text)
    start = max(0, min(start, len(text) - limit))
    shown = repr(text[start:start + limit])
    before = f"(from character {start + 1}) " if start else ""
    after = len(text) - start - limit
    return f"{before}{shown}" + (f"... ({after} more characters)" if after else "")


def _first_difference(expected: str, got: str) -> str:
    want, have = expected.splitlines(), got.splitlines()
    for number, (a, b) in enumerate(zip(want, have), start=1):
        if a != b:
            at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            where = f"line {number}" if len(a) <= EXCERPT and len(b) <= EXCERPT else \
                f"line {number}, character {at + 1}"
            start = at - BEFORE
            return f"{where}: expected {excerpt(a, start)}, your code gave {excerpt(b, start)}"
    if len(want) > len(have):
        return (f"your output stops after {len(have)} line(s); line {len(have) + 1} should be "
                f"{excerpt(want[len(have)])}")
    if len(have) > len(want):
        return f"your output has more lines than expected, from line {len(want) + 1}: {excerpt(have[len(want)])}"
    return "the outputs differ in kind (e.g. printed text vs a displayed value)"


TESTER_FAILED = "FAILED: "  # how a fault campaign's failing verdict starts (minikafka.course.tester*)
REPORT_LINES = 40
REPORT_LINE_CHARS = 300  # of one line of that report


def tester_report(run) -> str:
    """The fault campaign's failing verdict that a check cell printed (the tester run on the
    student's own rule), from its ``FAILED: `` line on, at most REPORT_LINES lines; "" if none.
    A one-line difference cannot show what it holds: which node called the rule with what, what
    the rule returned, what Kafka's rule returns, and what a user of the cluster saw."""
    lines = _text(run.outputs).splitlines()
    for start, line in enumerate(lines):
        if line.startswith(TESTER_FAILED):
            block = [shorten(line, REPORT_LINE_CHARS) for line in lines[start:start + REPORT_LINES + 1]]
            if len(lines) - start > REPORT_LINES:
                block = block[:REPORT_LINES] + [f"(... {len(lines) - start - REPORT_LINES} more lines: run the cell to see them)"]
            return "\n".join(block)
    return ""


def verdict(run, options: dict, expected: list, patterns: OrderedDict) -> tuple[bool, str]:
    """(passed, message) for one check cell, by nbval's rules, against the `expected` outputs."""
    if options["skip"]:
        return True, "skipped (NBVAL_SKIP)"
    if run.status in ("timeout", "died", "not run"):
        return False, shorten(run.reason, REASON)
    expected = coalesce_streams([nbformat.from_dict(copy.deepcopy(o)) for o in expected])
    if run.status == "error" and not options["check_exception"]:
        return False, f"raised {shorten(run.reason, REASON)}"
    if not options["check"]:
        return True, "ran (its output is not compared)"
    judge = _Judge(patterns)
    if IPyNbCell.compare_outputs(judge, run.outputs, expected):
        return True, "output as expected"
    want, got = _text(expected), _text(run.outputs)
    cut = (f" (your output was cut at {MAX_CELL_OUTPUT} characters: the grader keeps no more of "
           "one cell's output)") if getattr(run, "truncated", False) else ""
    return False, f"output differs: {_first_difference(want, got)}{cut}"
