"""The code tour's `show_source`: the package's own code, read when called, with file and line."""

import inspect

import pytest

from minikafka.broker.partition import Partition
from minikafka.course import show_source
from minikafka import rules


def test_shows_the_code_the_package_runs_with_its_file_and_line():
    view = show_source(Partition.maybe_increment_high_watermark)
    lines, first = inspect.getsourcelines(Partition.maybe_increment_high_watermark)
    assert view.path == "minikafka/broker/partition.py"
    assert view.first_line == first
    assert view.code == "".join(lines).rstrip("\n")
    assert repr(view).startswith(f"# minikafka/broker/partition.py:{first}  "
                                 "minikafka.broker.partition.Partition.maybe_increment_high_watermark\n")
    html = view._repr_html_()
    assert f"minikafka/broker/partition.py:{first}" in html and "maybe_increment_high_watermark" in html


def test_a_slice_counts_from_the_def_line():
    whole = show_source(rules.high_watermark)
    part = show_source(rules.high_watermark, lines=(2, 3))
    assert part.first_line == whole.first_line + 1
    assert part.code.splitlines() == whole.code.splitlines()[1:3]


def test_bad_input_names_what_was_wrong():
    with pytest.raises(ValueError, match=r"lines=\(5, 2\) outside"):
        show_source(rules.high_watermark, lines=(5, 2))
    with pytest.raises(ValueError, match="not part of the minikafka package"):
        show_source(pytest.raises)
    with pytest.raises(TypeError, match="no Python source"):
        show_source(len)
