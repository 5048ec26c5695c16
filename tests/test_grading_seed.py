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


def _graded_settings(monkeypatch, tmp_path, capsys, *extra):
    """Run ``minikafka grade`` with the grading itself replaced: the Settings it would grade with,
    and what it printed on stderr."""
    from minikafka.cli import main
    from minikafka.course import gradebook

    seen = []
    monkeypatch.setattr(gradebook, "grade_all", lambda path, reference, settings, **kw: seen.append(settings) or [])
    (tmp_path / "class").mkdir()
    assert main(["grade", str(tmp_path / "class"), "--reference", str(tmp_path), "--quiet", "--json", *extra]) == 0
    return seen[0], capsys.readouterr().err


def test_grade_property_seed_replays_the_hidden_properties_draws(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv(SEED_ENV, raising=False)
    settings, err = _graded_settings(monkeypatch, tmp_path, capsys, "--property-seed", "77", "--seed", "5")
    assert (settings.property_seed, settings.seed) == (77, 5)
    assert "hidden properties' seed: 77 (replay their draws with --property-seed 77)" in err
    # Without it: a new seed per grading run, printed so that the run can be replayed.
    first, err = _graded_settings(monkeypatch, tmp_path / "a", capsys) if (tmp_path / "a").mkdir() is None else None
    assert f"--property-seed {first.property_seed})" in err
    monkeypatch.setenv(SEED_ENV, "4242")
    again, _ = _graded_settings(monkeypatch, tmp_path / "b", capsys) if (tmp_path / "b").mkdir() is None else None
    assert again.property_seed == 4242


def test_grade_help_names_the_property_seed(capsys):
    from minikafka.cli import main

    with pytest.raises(SystemExit):
        main(["grade", "--help"])
    assert "--property-seed N" in capsys.readouterr().out


def test_a_property_seed_that_is_not_a_number_is_refused(capsys):
    from minikafka.cli import main

    with pytest.raises(SystemExit):
        main(["grade", ".", "--property-seed", "tomorrow"])
    assert "--property-seed: invalid int value: 'tomorrow'" in capsys.readouterr().err
