"""The code tour: lectures use the package's public API only, every `show_source` cell names code
that exists, and every `module:function` the lecturer's guide tells students to read resolves.

Theory of operation: these tests read the notebooks' code cells with ``ast`` and never run them
(nbval runs them, in ``make test``). They answer, in a second and with the notebook and cell
named, the questions nbval answers late or not at all: does a lecture reach into a private name
of the package (``cluster._active_controller()``)? Does a ``show_source(...)`` name a function that
a refactoring renamed? Does the guide send students to a file or function that is gone?
"""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

import pytest

from minikafka.course import show_source

ROOT = Path(__file__).resolve().parents[1]
LECTURES = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]-*.ipynb"))
GUIDE = ROOT / "notebooks" / "README.md"

# Underscore names that are public API of the standard library (namedtuple's), not the package's.
STDLIB_PUBLIC = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}


def code_cells(path: Path) -> list[tuple[int, str]]:
    """(cell index, source) of each code cell, IPython magics and shell lines blanked."""
    cells = []
    for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        if cell["cell_type"] == "code":
            lines = "".join(cell["source"]).splitlines()
            cells.append((i, "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in lines)))
    return cells


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(source: str) -> list[str]:
    """Each use of a private name of the package in ``source``: ``x._name`` (not on ``self`` or
    ``cls``, a class the cell defines itself), ``getattr(x, "_name")``, and imports of a private
    module or name of ``minikafka``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and is_private(node.attr) and node.attr not in STDLIB_PUBLIC:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and is_private(node.args[1].value)):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "minikafka":
            names = node.module.split(".") + [a.name for a in node.names]
            if any(is_private(n) for n in names):
                found.append(f"line {node.lineno}: from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "minikafka" and any(is_private(p) for p in parts):
                    found.append(f"line {node.lineno}: import {alias.name}")
    return found


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize(
    "path",
    LECTURES + SOLUTIONS,
    ids=rel)
def test_notebooks_use_the_public_api_only(path):
    problems = [f"cell {i}, {use}" for i, source in code_cells(path) for use in private_uses(source)]
    assert not problems, f"{rel(path)} uses private names of the package:\n  " + "\n  ".join(problems)


def test_the_private_name_check_catches_what_it_should_and_only_that():
    assert private_uses("cluster._active_controller()") == ["line 1: cluster._active_controller"]
    assert private_uses("from minikafka.course._launch import x") != []
    assert private_uses("from minikafka.cluster import _helper") != []
    assert private_uses("import minikafka.course._launch") != []
    assert private_uses("getattr(consumer, '_node')") != []
    assert private_uses("c = consumer.coordinator.events") == []
    assert private_uses("class A:\n    def f(self):\n        return self._x") == []
    assert private_uses("seg = seg._replace(size=1); t.__class__.__name__") == []


def show_source_calls(path: Path) -> list[tuple[int, ast.Call, str]]:
    return [(i, node, source) for i, source in code_cells(path) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "show_source"]


def notebook_imports(path: Path) -> dict:
    """The namespace the notebook's import statements build (its other code is not run)."""
    namespace: dict = {}
    for _, source in code_cells(path):
        for node in ast.parse(source).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                exec(compile(ast.Module([node], []), rel(path), "exec"), namespace)
    return namespace


TOURED = [p for p in LECTURES if p.name[:2] in ("01", "02", "04", "06", "08")]


@pytest.mark.parametrize("path", LECTURES, ids=rel)
def test_every_show_source_cell_of_a_lecture_names_package_code_that_exists(path):
    calls = show_source_calls(path)
    if path in TOURED:
        assert calls, f"{rel(path)} shows none of the package's code"
    namespace = notebook_imports(path)
    for i, call, source in calls:
        where = f"{rel(path)}, cell {i}: {ast.get_source_segment(source, call)}"
        target = call.args[0]
        assert isinstance(target, (ast.Name, ast.Attribute)), f"{where}: show a name, not an expression"
        try:
            obj = eval(compile(ast.Expression(target), where, "eval"), dict(namespace))  # names and attributes only
        except (NameError, AttributeError) as e:
            pytest.fail(f"{where}: {e}")
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
        view = show_source(obj, *[ast.literal_eval(a) for a in call.args[1:]], **kwargs)
        assert view.code.strip(), where


# The guide's "Read the code" lines name `minikafka/path/file.py:Qualified.name` (or just a file).
READ = re.compile(r"`(minikafka/[\w/]+\.py)(?::([\w.]+))?`")


def guide_sections() -> dict[str, str]:
    text = GUIDE.read_text(encoding="utf-8")
    parts = re.split(r"^## (\d\d) · ", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def read_the_code(section: str) -> str:
    found = re.search(r"^- \*\*Read the code:\*\*(.*?)(?=^- \*\*|^## |\Z)", section, flags=re.M | re.S)
    return found.group(1) if found else ""


def test_the_guide_tells_students_which_code_to_read_for_every_lecture():
    sections = guide_sections()
    assert sorted(sections) == [f"{n:02d}" for n in range(11)]
    for number, section in sections.items():
        assert READ.findall(read_the_code(section)), f"lecture {number}: no 'Read the code' line naming a file"


def test_every_file_and_function_the_guide_names_exists():
    named = [m for section in guide_sections().values() for m in READ.findall(read_the_code(section))]
    assert len(named) >= 11
    for file, qualname in named:
        assert (ROOT / file).is_file(), f"the guide names {file}, which does not exist"
        if qualname:
            obj = importlib.import_module(file[:-3].replace("/", "."))
            for part in qualname.split("."):
                assert hasattr(obj, part), f"the guide names {file}:{qualname}: no {part!r}"
                obj = getattr(obj, part)
            assert show_source(obj).path == file, f"{file}:{qualname} is defined elsewhere"
