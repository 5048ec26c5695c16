"""The course's text stands on its own: links resolve, each lecture leads to the next, no lecture
cites documents the students do not have, and the lecturer's guide matches the exercise sets.

Reads the notebooks' sources only (no kernel), so it runs in a second.
"""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LECTURES = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]-*.ipynb"))
STUDENT_FACING = LECTURES + SOLUTIONS + sorted((ROOT / "exercises").glob("[0-9][0-9]-*.ipynb"))
GUIDE = ROOT / "notebooks" / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def cells(path, kind=None):
    return [("".join(c["source"]), c) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if kind is None or c["cell_type"] == kind]


def local_links(text):
    return [t.split("#")[0] for t in LINK.findall(text)
            if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_there_are_eleven_lectures_each_with_a_solutions_notebook():
    assert [p.name for p in LECTURES] == [p.name for p in SOLUTIONS]
    assert len(LECTURES) == 11


@pytest.mark.parametrize("path", STUDENT_FACING + [ROOT / "README.md", GUIDE], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_local_link_resolves(path):
    texts = [path.read_text(encoding="utf-8")] if path.suffix == ".md" else [t for t, _ in cells(path, "markdown")]
    broken = [target for text in texts for target in local_links(text) if not (path.parent / target).exists()]
    assert broken == []


@pytest.mark.parametrize("lecture", LECTURES[:-1], ids=lambda p: p.stem)
def test_each_lecture_ends_with_a_link_to_the_next(lecture):
    following = LECTURES[LECTURES.index(lecture) + 1].name
    last_markdown = cells(lecture, "markdown")[-1][0]
    assert following in local_links(last_markdown), f"{lecture.name} does not end with a link to {following}"


# What the team called "the seeds" (the older lecture notes the course was written from) is no
# document a student has. Random seeds ("seed=7", "the failing schedules' seeds") are fine.
LECTURE_NOTES = re.compile(r"\bthe seeds\b|\bseeds'|\bseed's\b|course's seeds|from the seeds", re.IGNORECASE)


@pytest.mark.parametrize("path", STUDENT_FACING + [ROOT / "README.md", GUIDE], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_text_cites_the_seeds(path):
    texts = [path.read_text(encoding="utf-8")] if path.suffix == ".md" else [t for t, _ in cells(path)]
    found = [m.group(0) for text in texts for m in LECTURE_NOTES.finditer(text)]
    assert found == []


def guide_sections():
    "The guide's text per notebook number ('00' ... '10')."
    parts = re.split(r"^## (\d\d) · ", GUIDE.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def test_the_guide_has_a_section_per_lecture_with_its_classes_and_exercise_file():
    sections = guide_sections()
    assert sorted(sections) == [p.name[:2] for p in LECTURES]
    for lecture in LECTURES:
        text = sections[lecture.name[:2]]
        assert "**Class" in text and "**Live:**" in text and "**Reading:**" in text, lecture.name
        assert f"`exercises/{lecture.name}`" in text, lecture.name


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.stem)
def test_the_guide_lists_each_exercise_with_its_title_and_points(solution):
    nb = json.loads(solution.read_text(encoding="utf-8"))
    points = nb["metadata"]["minikafka"]["points"]
    titles = dict(re.findall(r"^## (Exercise \d+): (.+)$", "\n".join(t for t, _ in cells(solution, "markdown")),
                             flags=re.MULTILINE))
    assert sorted(titles) == sorted(points)
    text = " ".join(guide_sections()[solution.name[:2]].split())      # one line, single spaces
    for exercise, title in titles.items():
        assert f"{exercise}: {title} ({points[exercise]}" in text, f"{solution.name}: {exercise}"


def test_the_readme_counts_the_rules_the_package_holds():
    from minikafka.rules import RULES

    said = re.findall(r"`minikafka\.rules\.RULES`: (\d+) rules", (ROOT / "README.md").read_text(encoding="utf-8"))
    assert said == [str(len(RULES))], f"README.md says {said} rules; minikafka.rules.RULES holds {len(RULES)}"
