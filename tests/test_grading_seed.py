"""The hidden checks' seed when the grader is not given one (``grade.default_seed``)."""

from __future__ import annotations

import pytest

from minikafka.course.grade import SEED_ENV, default_seed


def test_without_the_variable_every_grading_draws_a_new_seed(monkeypatch):
    monkeypatch.delenv(SEED_ENV, raising=False)
    seeds = {default_seed() for _ in range(20)}
    assert len(seeds) > 1 and all(1 <= s < 2**31 for s in seeds)


def test_the_variable_fixes_the_seed_and_a_wrong_value_is_named(monkeypatch):
    monkeypatch.setenv(SEED_ENV, "4242")
    assert default_seed() == 4242
    monkeypatch.setenv(SEED_ENV, "tomorrow")
    with pytest.raises(ValueError, match="MINIKAFKA_GRADING_SEED='tomorrow' is not a seed"):
        default_seed()
