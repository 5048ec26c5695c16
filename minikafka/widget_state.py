"""A notebook's saved widget state, kept to the widgets it shows.

Theory of operation
-------------------
A notebook saves its widgets' state in ``metadata.widgets``, so that a reload (or a page
made from the notebook) can draw the widgets its outputs show without a kernel. JupyterLab
saves only the widgets still open, but ``jupyter nbconvert --execute`` (nbclient) saves
every widget the kernel ever made, closed ones too: a lecture that steps a dashboard it
never shows, then closes it, stored it all the same (lecture 04: 162 models where the
dashboard it shows has 80). That state is dead weight, and a reload has to make sense of
models nothing shows.

``prune(nb)`` keeps the models an output shows (``application/vnd.jupyter.widget-view+json``)
and every model those reference, however deep (a child, a layout, a style: the string
``"IPY_MODEL_<id>"`` in a model's state), and drops the rest. A shown model is never
dropped; a model absent from the state stays absent (there is nothing to keep).

``PruneWidgetState`` is the same as an nbconvert preprocessor: ``make install`` puts it
after the executor in the course's environment (``.venv/etc/jupyter``), so re-executing a
lecture with ``jupyter nbconvert --execute`` saves only what the lecture shows. It never
touches outputs or sources.
"""

from __future__ import annotations

from typing import Any, Iterator

STATE_KEY = "application/vnd.jupyter.widget-state+json"
VIEW_KEY = "application/vnd.jupyter.widget-view+json"
_REF = "IPY_MODEL_"


def stored_models(nb: Any) -> dict[str, Any]:
    """``{model id: saved model}`` of notebook ``nb`` (a dict or an ``nbformat`` node)."""
    return dict(nb.get("metadata", {}).get("widgets", {}).get(STATE_KEY, {}).get("state", {}))


def shown_models(nb: Any) -> list[str]:
    """The model ids the notebook's outputs show, in order, each once."""
    seen: dict[str, None] = {}
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            view = output.get("data", {}).get(VIEW_KEY)
            if view and view.get("model_id"):
                seen.setdefault(view["model_id"], None)
    return list(seen)


def _references(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        if value.startswith(_REF):
            yield value[len(_REF):]
    elif isinstance(value, dict):
        for v in value.values():
            yield from _references(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _references(v)


def reachable_models(nb: Any) -> set[str]:
    """The stored models that a shown widget needs: those shown and, transitively, every
    model their state references."""
    models = stored_models(nb)
    keep: set[str] = set()
    todo = [m for m in shown_models(nb) if m in models]
    while todo:
        model_id = todo.pop()
        if model_id in keep:
            continue
        keep.add(model_id)
        todo.extend(r for r in _references(models[model_id].get("state", {})) if r in models and r not in keep)
    return keep


def prune(nb: Any) -> int:
    """Drop from ``nb``'s saved widget state every model no shown widget needs; returns how
    many were dropped. No saved state left: ``metadata.widgets`` goes too."""
    models = stored_models(nb)
    if not models:
        return 0
    keep = reachable_models(nb)
    dropped = len(models) - len(keep)
    if dropped:
        if keep:
            state = nb["metadata"]["widgets"][STATE_KEY]["state"]
            for model_id in set(state) - keep:
                del state[model_id]
        else:
            del nb["metadata"]["widgets"]
    return dropped


try:  # nbconvert is a course dependency, not a core one
    from nbconvert.preprocessors import Preprocessor
except ImportError:  # pragma: no cover - the core installed alone
    Preprocessor = None

if Preprocessor is not None:

    class PruneWidgetState(Preprocessor):
        """``prune`` as an nbconvert preprocessor (after ``ExecutePreprocessor``)."""

        def preprocess(self, nb, resources):
            dropped = prune(nb)
            if dropped:
                self.log.info("dropped %d widget models that no output shows", dropped)
            return nb, resources
