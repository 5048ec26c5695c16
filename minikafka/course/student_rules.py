"""``my_rules("exercises/")``: a student's rules, gathered from their exercise notebooks.

Theory of operation
-------------------
Each rule of ``minikafka.rules.RULES`` is the exercise of one lecture (``Rule.lecture``: "04"
for ``high_watermark``), written as a function of the same name in a cell tagged ``exercise``
of that lecture's exercise notebook (``exercises/04-*.ipynb``). ``my_rules`` reads those
notebooks, not the student's kernel: for each notebook it makes a fresh namespace of its own
(named after the notebook, so that cloudpickle ships the functions by value to the processes
of ``launch(rules=...)``), runs there the imports and the function and class definitions of
the notebook's other code cells (the setup cell's ``bisect``, ``Voter``..., a helper the student
wrote in a cell of their own: what an exercise cell may use without defining it; never their
other statements, which build logs and clusters), then every exercise cell in order
(a rule may call a helper another exercise cell defines, as ``partition_for_key`` calls
``murmur2``). Then, rule by rule:

- **yours**: the lecture's notebook defines the function in an exercise cell, that cell ran,
  its body no longer holds the stub's ``raise NotImplementedError``, and it takes the rule's
  arguments (``rules.validate``);
- **reference (not written yet)**: the function is missing, or still the stub;
- **reference (your notebook raised X)**: running the exercise cell that defines it raised X
  (a ``SyntaxError``, a ``NameError`` at the top level...), or the function does not take the
  rule's arguments (then X says so).

The answer, ``MyRules``, is a mapping ``{rule name: the student's function}`` holding only the
rules that are theirs: ``Cluster(rules=mine)``, ``launch(rules=mine)`` and ``judge(mine)`` take
it as it is, and run Kafka's rule for every name it does not hold. Printed, it says which is
which (``MyRules.summary()``).

Running a student's code here runs it in this process, as their own kernel would: an exercise
cell that never finishes is stopped after ``CELL_BUDGET_S`` where the platform can interrupt
it (``minikafka.deadline.call_within``) and reported as raising.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Callable, Iterator

from minikafka.course import ast_guard
from minikafka.course.exercises import EXERCISE_TAG, cell_tags, read_notebook, source_text
from minikafka.errors import IllegalArgumentError
from minikafka.deadline import RuleTimeout, call_within
from minikafka.rules import RULES, validate

CELL_BUDGET_S = 10.0
YOURS = "yours"
NOT_WRITTEN = "reference (not written yet)"


def _raised(error: BaseException) -> str:
    return f"reference (your notebook raised {type(error).__name__}: {error})"


class MyRules(Mapping):
    """A student's rules (``{name: function}``, only those that are theirs) and, for every rule
    of ``RULES``, where it comes from (``origin``: "yours", "reference (not written yet)",
    "reference (your notebook raised ...)")."""

    def __init__(self, folder: Path, functions: dict[str, Callable], origin: dict[str, str]) -> None:
        self.folder = folder
        self._functions = functions
        self.origin = origin

    def __getitem__(self, name: str) -> Callable:
        return self._functions[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._functions)

    def __len__(self) -> int:
        return len(self._functions)

    def summary(self) -> str:
        """One line per rule: its lecture, its name, and whose it is."""
        width = max(map(len, self.origin))
        lines = [f"rules gathered from {self.folder}/: {len(self)} yours, {len(self.origin) - len(self)} Kafka's"]
        for name, origin in self.origin.items():
            lines.append(f"  {RULES[name].lecture}  {name:<{width}}  {origin}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython shows the summary
        printer.text(self.summary())


_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _definitions(tree: ast.Module) -> list[ast.Module]:
    """The top-level imports and definitions (functions, classes) of a cell, one module each."""
    return [ast.Module(body=[n], type_ignores=[]) for n in tree.body if isinstance(n, _DEFINITIONS)]


def _python(source: str) -> str:
    """A cell's source without IPython's line magics and shell escapes (``%time``, ``!ls``)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n"))


def _is_stub(function: ast.FunctionDef) -> bool:
    """Whether a function's body still raises NotImplementedError (the exercise's stub)."""
    for node in ast.walk(function):
        if isinstance(node, ast.Raise) and node.exc is not None:
            called = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(called, ast.Name) and called.id == "NotImplementedError":
                return True
    return False


def _notebook_for(folder: Path, lecture: str) -> Path | None:
    found = sorted(folder.glob(f"{lecture}-*.ipynb"))
    return found[0] if found else None


def _gather(path: Path, wanted: list[str]) -> tuple[dict[str, Callable], dict[str, str]]:
    """Run one notebook's exercise cells in a namespace of its own; the rules of ``wanted`` it
    defines (yours) and where each of ``wanted`` comes from."""
    nb = read_notebook(path)
    namespace: dict = {"__name__": f"<{path.name}>", "__builtins__": __builtins__}
    cells = [(i, _python(source_text(c)), EXERCISE_TAG in cell_tags(c))
             for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    if not any(exercise for _, _, exercise in cells):  # notebooks/ (the lectures) named by mistake
        return {}, {name: f"reference ({path} has no exercise cells: a lecture? give the exercises folder)"
                    for name in wanted}
    for i, source, exercise in cells:  # what the exercise cells may use without defining it
        if exercise:
            continue
        try:
            statements = _definitions(ast_guard.parse(source))
        except SyntaxError:
            continue
        for statement in statements:
            try:
                exec(compile(statement, f"<{path.name} cell {i}>", "exec"), namespace)
            except Exception:  # a broken import or definition: the exercise cell that needs it says so
                pass
    defined: dict[str, ast.FunctionDef] = {}  # rule name -> its def in the last exercise cell that has one
    failed: dict[str, BaseException] = {}  # rule name -> what running its cell raised
    for i, source, exercise in cells:
        if not exercise:
            continue
        try:
            tree = ast_guard.parse(source, f"<{path.name} cell {i}>")
        except SyntaxError as e:
            names = [n for n in wanted if f"def {n}(" in source]
            failed.update({n: e for n in names})
            continue
        here = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted}
        try:
            call_within(CELL_BUDGET_S, exec, compile(tree, f"<{path.name} cell {i}>", "exec"), namespace)
        except RuleTimeout:
            failed.update({n: TimeoutError(f"the cell ran longer than {CELL_BUDGET_S} s") for n in here})
            continue
        except Exception as e:
            failed.update({n: e for n in here})
            continue
        for n, node in here.items():
            defined[n] = node
            failed.pop(n, None)
    functions, origin = {}, {}
    for name in wanted:
        if name in failed:
            origin[name] = _raised(failed[name])
        elif name not in defined or _is_stub(defined[name]) or not callable(namespace.get(name)):
            origin[name] = NOT_WRITTEN
        else:
            try:
                functions.update(validate({name: namespace[name]}))
                origin[name] = YOURS
            except IllegalArgumentError as e:
                origin[name] = _raised(e)
    return functions, origin


def my_rules(folder: str | Path = "exercises") -> MyRules:
    """A student's rules from the exercise notebooks in ``folder`` (01-08): each rule of
    ``RULES`` the student has written, and Kafka's for the others; print it to see which."""
    folder = Path(folder)
    if not folder.is_dir():
        raise IllegalArgumentError(f"my_rules({str(folder)!r}): no such folder; give the folder of your exercise "
                                   f"notebooks, e.g. my_rules('exercises/')")
    functions: dict[str, Callable] = {}
    origin: dict[str, str] = {}
    by_lecture: dict[str, list[str]] = {}
    for name, rule in RULES.items():
        by_lecture.setdefault(rule.lecture, []).append(name)
    for lecture, names in sorted(by_lecture.items()):
        path = _notebook_for(folder, lecture)
        if path is None:
            origin.update({n: f"reference (no {lecture}-*.ipynb in {folder})" for n in names})
            continue
        found, said = _gather(path, names)
        functions.update(found)
        origin.update(said)
    ordered = {name: origin[name] for name in sorted(origin, key=lambda n: (RULES[n].lecture, list(RULES).index(n)))}
    return MyRules(folder, functions, ordered)


if __name__ == "__main__":  # python -m minikafka.course.student_rules exercises/
    print(my_rules(sys.argv[1] if len(sys.argv) > 1 else "exercises").summary())
