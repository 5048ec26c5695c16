"""The suite's scheduler (tests/conftest.py): which tests stay together in one worker, and the
order units start in. Quick: no worker is started, the units are read from fixture modules."""

from types import SimpleNamespace

import pytest

import conftest
from conftest import unit_of

TWO = "tests/fixtures/scheduling/test_two_classes.py"
ONE = "tests/fixtures/scheduling/test_one_class.py"


def test_tests_sharing_one_long_lived_fixture_are_one_unit_named_by_their_module():
    assert unit_of(f"{ONE}::test_first") == unit_of(f"{ONE}::test_second") == ONE
    assert unit_of(f"{ONE}::test_alone") == f"{ONE}::test_alone"


def test_each_long_lived_fixture_of_a_module_makes_a_unit_of_its_own():
    # cluster, reached directly and through admin: one unit; graded_02's tests, parameters and all: another
    assert unit_of(f"{TWO}::test_produce") == unit_of(f"{TWO}::test_describe") == f"{TWO}::cluster"
    assert unit_of(f"{TWO}::test_grade[correct]") == unit_of(f"{TWO}::test_grade[cheat]") == f"{TWO}::graded_02"
    assert unit_of(f"{TWO}::test_alone") == f"{TWO}::test_alone"


def test_a_notebook_is_one_unit():
    assert unit_of("notebooks/04-replication-and-isr.ipynb::Cell 3") == "notebooks/04-replication-and-isr.ipynb"


@pytest.mark.skipif(conftest.LoadScopeScheduling is None, reason="pytest-xdist is not installed")
def test_a_unit_the_durations_do_not_name_is_estimated_from_its_tests_then_its_module():
    seconds = {ONE: 30.0, f"{TWO}::test_produce": 4.0, f"{TWO}::test_describe": 2.0, TWO: 50.0,
               "notebooks/05-producers-and-acks.ipynb": 27.0}
    queue = {f"{TWO}::cluster": {f"{TWO}::test_produce": False, f"{TWO}::test_describe": False},
             f"{TWO}::graded_02": {f"{TWO}::test_grade[correct]": False, f"{TWO}::test_grade[cheat]": False},
             f"{TWO}::test_alone": {f"{TWO}::test_alone": False},
             ONE: {f"{ONE}::test_first": False, f"{ONE}::test_second": False},
             "notebooks/05-producers-and-acks.ipynb": {"notebooks/05-producers-and-acks.ipynb::Cell 0": False}}
    scheduler = SimpleNamespace(seconds=seconds, workqueue=queue)
    estimate = {unit: conftest.UnitScheduling.estimate(scheduler, unit) for unit in queue}
    assert estimate == {f"{TWO}::cluster": 6.0,       # its tests' seconds, recorded one by one
                        f"{TWO}::graded_02": 50.0,    # the module's, recorded as one unit
                        f"{TWO}::test_alone": 0.0,    # a single test unknown: short, not its module's
                        ONE: 30.0, "notebooks/05-producers-and-acks.ipynb": 27.0}
