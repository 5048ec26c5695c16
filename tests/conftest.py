"""Shared pytest setup.

`pytest` runs nbval over notebooks/ and solutions/ (see [tool.pytest.ini_options]). Every nbval item
(one notebook cell) gets the `notebooks` marker here, so `pytest -m "not notebooks"` (make
test-fast) starts no kernel at all.
"""

import pytest


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m deselection sees the items
def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.notebooks)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report on the item (``item.rep_call``...), so that a fixture's teardown
    knows whether its test failed (tests/test_browser.py keeps a screenshot then)."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
