"""A notebook saves the state of the widgets it shows, and only theirs (minikafka.widget_state):
the lectures' scripted dashboards, stepped by hand and closed, leave nothing behind."""

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from minikafka import widget_state

ROOT = Path(__file__).resolve().parent.parent
# The lectures with a live dashboard (04, 06, 08 also step a hidden one by hand first).
LECTURES = ["04-replication-and-isr", "06-consumer-groups", "08-metadata-and-kraft", "09-speaking-kafka"]


def model(name, **state):
    return {"model_name": name, "model_module": "@jupyter-widgets/controls", "model_module_version": "2.0.0",
            "state": {"_model_name": name, **state}}


def notebook(models, shown):
    cells = [nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output(
        "display_data", data={widget_state.VIEW_KEY: {"version_major": 2, "version_minor": 0, "model_id": m},
                              "text/plain": "..."})]) for m in shown]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["widgets"] = {widget_state.STATE_KEY: {"state": models, "version_major": 2, "version_minor": 0}}
    return nb


def test_prune_keeps_what_is_shown_and_everything_it_references():
    models = {
        "box": model("VBoxModel", children=["IPY_MODEL_button", "IPY_MODEL_html"], layout="IPY_MODEL_l1"),
        "button": model("ButtonModel", style="IPY_MODEL_s1", layout="IPY_MODEL_l2"),
        "html": model("HTMLModel", layout="IPY_MODEL_l3"),
        "l1": model("LayoutModel"), "l2": model("LayoutModel"), "l3": model("LayoutModel"),
        "s1": model("ButtonStyleModel"),
        # a closed dashboard's: nothing shows them
        "old": model("VBoxModel", children=["IPY_MODEL_oldbutton"]), "oldbutton": model("ButtonModel"),
    }
    nb = notebook(models, shown=["box", "gone"])  # "gone": shown, but no state was saved for it
    assert widget_state.prune(nb) == 2
    assert set(widget_state.stored_models(nb)) == {"box", "button", "html", "l1", "l2", "l3", "s1"}
    assert widget_state.prune(nb) == 0  # nothing more to drop


def test_prune_with_nothing_shown_drops_the_widget_metadata():
    nb = notebook({"a": model("ButtonModel")}, shown=[])
    assert widget_state.prune(nb) == 1
    assert "widgets" not in nb.metadata
    assert widget_state.prune(nb) == 0


@pytest.mark.parametrize("name", LECTURES)
def test_a_lecture_saves_only_the_widgets_it_shows(name):
    """What lecture ``name`` stores is exactly what its shown widgets need: every shown
    model is there (a reload draws it, no "model not found"), and nothing else is."""
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    stored, shown = widget_state.stored_models(nb), widget_state.shown_models(nb)
    assert shown, "the lecture shows a dashboard"
    assert set(shown) <= set(stored), "a shown widget has no saved state"
    needed = widget_state.reachable_models(nb)
    dead = set(stored) - needed
    assert not dead, f"{len(dead)} of {len(stored)} saved widget models are shown by nothing"


@pytest.mark.notebooks
def test_nbconvert_execute_in_the_course_environment_prunes(tmp_path):
    """``make install`` configures nbconvert in .venv: a notebook re-executed there keeps
    the widget it shows, not the one it made and closed."""
    path = tmp_path / "t.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import ipywidgets as w\nhidden = w.Button(description='hidden')\nhidden.close()"),
        nbformat.v4.new_code_cell("w.Button(description='shown')"),
    ]), path)
    jupyter = Path(sys.prefix) / "bin" / "jupyter"
    subprocess.run([str(jupyter), "nbconvert", "--to", "notebook", "--execute", "--inplace",
                    "--ExecutePreprocessor.kernel_name=python3", str(path)], check=True, cwd=tmp_path,
                   capture_output=True, timeout=300)
    nb = nbformat.read(path, as_version=4)
    descriptions = [m["state"].get("description") for m in widget_state.stored_models(nb).values()]
    assert "shown" in descriptions and "hidden" not in descriptions, descriptions
    assert set(widget_state.stored_models(nb)) == widget_state.reachable_models(nb)
