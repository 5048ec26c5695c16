"""The code tour: a lecture shows the package's own source, read when the cell runs.

Theory of operation
-------------------
A lecture that explains a mechanism ends the explanation with the code that implements it:
``show_source(Partition.maybe_increment_high_watermark)``. The source is read from the package
with ``inspect`` each time the cell runs, so it can never drift from what the cluster runs: a
pasted copy would. The cell's output is a ``SourceView``: in Jupyter, the code highlighted by
Pygments (which Jupyter itself uses) under a header naming the file and first line
(``minikafka/broker/partition.py:254``); as plain text, the same header and code.

The header's path is relative to the folder that holds the ``minikafka`` package, so it reads the
same on every machine (a student opens that file in their editor). Line numbers move when the
package is edited: the notebooks' tests (nbval) blank them (``tests/nbval-sanitize.cfg``) but
compare the code itself, so a lecture whose function changed fails until it is re-executed.

``show_source(obj, lines=(first, last))`` shows a part of a long function: ``first`` and
``last`` count from the function's ``def`` line (1), inclusive, so a lecture can point at the
three lines that matter without a copy.
"""

from __future__ import annotations

import html
import inspect
from dataclasses import dataclass
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class SourceView:
    """Source code of one package object, with where it lives: shown highlighted in Jupyter."""

    qualname: str
    path: str
    first_line: int
    code: str

    @property
    def where(self) -> str:
        """``minikafka/storage/log.py:123``: the file, from the package's folder, and first line."""
        return f"{self.path}:{self.first_line}"

    def __repr__(self) -> str:
        return f"# {self.where}  {self.qualname}\n{self.code}"

    def _repr_html_(self) -> str:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer

        body = highlight(self.code, PythonLexer(), HtmlFormatter(noclasses=True, nobackground=True))
        header = (f'<div style="font-family:monospace;font-size:90%;color:#555">'
                  f"{html.escape(self.where)} &middot; <b>{html.escape(self.qualname)}</b></div>")
        return header + body


def show_source(obj, lines: tuple[int, int] | None = None) -> SourceView:
    """The package's source of ``obj`` (a function, method, class or module of ``minikafka``),
    as a ``SourceView`` a notebook cell shows. ``lines=(first, last)`` keeps only those lines,
    counted from the object's first line (1), inclusive."""
    target = inspect.unwrap(obj.fget if isinstance(obj, property) else obj)
    try:
        source_lines, first = inspect.getsourcelines(target)
        filename = inspect.getsourcefile(target)
    except (TypeError, OSError) as e:
        raise TypeError(f"show_source: no Python source for {obj!r} ({e})") from None
    path = Path(filename).resolve()
    if not path.is_relative_to(_PACKAGE):
        raise ValueError(f"show_source: {obj!r} is not part of the minikafka package ({path})") from None
    shown = path.relative_to(_PACKAGE.parent).as_posix()
    first = max(first, 1)  # a module's source starts at line 0 in inspect's count
    if lines is not None:
        lo, hi = lines
        if not (1 <= lo <= hi <= len(source_lines)):
            raise ValueError(f"show_source: lines={lines!r} outside 1..{len(source_lines)} of "
                             f"{getattr(target, '__qualname__', target)!r}")
        source_lines = source_lines[lo - 1:hi]
        first += lo - 1
    qualname = getattr(target, "__qualname__", getattr(target, "__name__", repr(target)))
    module = getattr(target, "__module__", None) or getattr(target, "__name__", "")
    if inspect.ismodule(target):
        qualname = target.__name__
    elif module:
        qualname = f"{module}.{qualname}"
    return SourceView(qualname, shown, first, "".join(source_lines).rstrip("\n"))
