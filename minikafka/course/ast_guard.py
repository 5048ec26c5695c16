"""One lock around turning source into Python AST objects, for the grader's threads.

The grader grades a class in threads (``gradebook``, ``--jobs``), and each thread parses code:
the cells it copies (``grade.defined_names``), the answers a student's function printed
(``properties.parse``), the package's source (``properties``). On CPython 3.11 two threads
building AST objects at the same moment can fail with ``SystemError: AST constructor recursion
depth mismatch`` (seen here: the correct submission of a class "could not be graded"). Every
``ast.parse`` and ``ast.literal_eval`` of the course goes through this module, one at a time;
parsing a cell takes microseconds, so the lock costs nothing a grade would notice.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    with _LOCK:
        return ast.parse(source, filename)


def literal_eval(text: str) -> Any:
    with _LOCK:
        return ast.literal_eval(text)
