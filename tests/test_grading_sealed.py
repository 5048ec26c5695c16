"""The sealed sandbox and the cheats that must earn 0 (issue 34, items 1, 4 and part of 6).

A submission's kernel must see the package as installed, the standard library and nothing else
of the repository or the folders beside it: no .git (whose history holds solutions/), no
exercises/, notebooks/, tests/fixtures/.../solutions/. `test_nothing_readable_from_a_submission_
holds_a_hidden_check_or_a_solution` walks / from inside a graded kernel and reads every file.

Then the cheats, each against the small fixture course (tests/fixtures/course) so each test is a
few seconds: reading the solutions from .git, notebooks/ or exercises/; SystemExit,
KeyboardInterrupt and os._exit in a check; replaying the visible expected outputs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from minikafka.course.grade import Settings
from minikafka.course.gradebook import feedback, grade_all
from minikafka.course.runner import run_cells
from minikafka.course.sandbox import Limits, Sandbox
from grading_helpers import GOOD_LOOKUP, GOOD_START, REFERENCES, ROOT, SAMPLE, SAMPLE_EXERCISE, SANITIZE, exercise

FAST = Settings(sanitize=SANITIZE, cell_timeout=10, budget=30)
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the sealed sandbox needs root")
PACKAGE = ROOT / "minikafka"


# -- what a submission can read -------------------------------------------------------------------

def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def markers() -> list[str]:
    """Strings that only a hidden check, a solution or a reference cell holds (never the package):
    each hidden cell's longest line (its code: a bare "# Grader only:" is quoted in prose, the
    issue tracker's included), and each long line of code between a solution's markers that the
    package's own source does not contain."""
    package = "\n".join(p.read_text(errors="replace") for p in PACKAGE.rglob("*.py"))
    found = set()
    for notebook in [*sorted((ROOT / "solutions").glob("*.ipynb")), SAMPLE]:
        for cell in _cells(notebook):
            tags = cell.get("metadata", {}).get("tags", [])
            lines = [line.strip() for line in _source(cell).split("\n")]
            if "hidden" in tags:
                found.add(max(lines, key=len))
            elif "exercise" in tags:
                inside = False
                for line in lines:
                    if line.startswith("### BEGIN SOLUTION") or line.startswith("### END SOLUTION"):
                        inside = line.startswith("### BEGIN")
                    elif inside and len(line) >= 30 and line not in package:
                        found.add(line)
    return sorted(found)


# Runs in the sandboxed kernel. Every name under / (bar the kernel's own /proc, /sys and /dev) is
# listed, and any .git fails; grep reads every readable file for the markers (fixed strings) and
# for a solution marker followed by a line break (a notebook's JSON "\n" or a real one: the
# package only names the marker in prose). Reading all of a machine's 20 GB is no unit test: grep
# reads every notebook, and every file of at most 2 MB written in the last 30 days (the course,
# its clones and copies, the venv; not the OS's and the package mirror's files, older).
WALK = r"""
import os, subprocess, json
MARKERS, REPO = {markers!r}, {repo!r}
readable, gits = 0, []
tops = [os.path.join("/", n) for n in sorted(os.listdir("/")) if n not in ("proc", "sys", "dev")]
for top in tops:
    for folder, dirs, files in os.walk(top):
        gits += [os.path.join(folder, n) for n in dirs + files if n == ".git"]
        readable += sum(os.access(os.path.join(folder, f), os.R_OK) for f in files)
with open("markers.txt", "w") as f:
    f.write("\n".join(MARKERS) + "\n")
listed = subprocess.run(["find", *tops, "-type", "f", "-readable", "(", "-name", "*.ipynb", "-o", "(",
                         "-size", "-2M", "-mtime", "-30", ")", ")", "!", "-path", os.path.abspath("markers.txt"),
                         "-print0"], capture_output=True).stdout
with open("files.txt", "wb") as f:
    f.write(listed)
def grep(*how):
    done = subprocess.run(["xargs", "-0", "-a", "files.txt", "grep", "-ls", *how], capture_output=True, text=True)
    return sorted(done.stdout.split())
git = subprocess.run(["git", "-c", "safe.directory=*", "-C", REPO, "show", "HEAD:tests/fixtures/course/solutions/99-sample.ipynb"],
                     capture_output=True, text=True)
print(json.dumps({{"readable": readable, "read": listed.count(b"\0"), "gits": gits,
                  "hits": grep("-F", "-f", "markers.txt"), "solutions": grep("-E", r"### BEGIN SOLUTION(\\n|$)"),
                  "git_show": git.returncode == 0 and "BEGIN SOLUTION" in git.stdout,
                  "repo": sorted(os.listdir(REPO)) if os.path.isdir(REPO) else None,
                  "beside": sorted(os.listdir(os.path.dirname(REPO))) if os.path.isdir(os.path.dirname(REPO)) else None}}))
"""


@pytest.mark.notebooks
@ROOT_ONLY
def test_nothing_readable_from_a_submission_holds_a_hidden_check_or_a_solution():
    found = markers()
    assert len(found) > 50
    host = subprocess.run(["grep", "-rlsF", "-e", found[0], "-e", found[-1], str(ROOT / "solutions"),
                           str(REFERENCES)], capture_output=True, text=True).stdout.split()
    assert host  # the markers are real: the host finds them
    # The hidden paths are the grader's (grade_all): the references and the class's folder.
    with Sandbox(Limits(), hide=(ROOT / "solutions",)) as box:
        [run] = run_cells(box, [WALK.format(markers=found, repo=str(ROOT))], cell_timeout=600, budget=600)
    assert run.status == "ok", run.reason
    seen = json.loads("".join(o.get("text", "") for o in run.outputs if o.get("output_type") == "stream"))
    assert seen["readable"] > 1000 and seen["read"] > 1000  # the standard library and the venv are there
    assert seen["hits"] == [] and seen["solutions"] == [] and seen["gits"] == [], seen
    assert not seen["git_show"]
    assert set(seen["repo"]) <= {"minikafka", ".venv"}, seen["repo"]  # the package and its venv only
    assert seen["beside"] == [ROOT.name], seen["beside"]  # nothing beside the repository


@ROOT_ONLY
def test_the_package_is_read_only_and_imports_inside_the_sandbox():
    probe = ("import minikafka, minikafka.course, os\n"
             "print(os.path.dirname(minikafka.__file__) == {pkg!r})\n"
             "try:\n    open(os.path.join({pkg!r}, 'pwned.py'), 'w')\n    print('written')\n"
             "except OSError as exc:\n    print(type(exc).__name__)\n").format(pkg=str(PACKAGE))
    with Sandbox(Limits()) as box:
        [run] = run_cells(box, [probe], cell_timeout=60, budget=60)
    assert run.status == "ok", run.reason
    assert "".join(o.get("text", "") for o in run.outputs).split() == ["True", "OSError"]
    assert not (PACKAGE / "pwned.py").exists()


# -- feedback that teaches without leaking ---------------------------------------------------------

def _hidden_cells():
    for notebook in [*sorted((ROOT / "solutions").glob("*.ipynb")), SAMPLE]:
        for cell in _cells(notebook):
            if "hidden" in cell.get("metadata", {}).get("tags", []):
                yield notebook.name, cell


def test_every_hidden_check_says_what_it_checks_in_words():
    from minikafka.course.grade import checked_property

    cells = list(_hidden_cells())
    assert len(cells) > 50
    unsaid = [(name, cell["id"]) for name, cell in cells if checked_property(cell) is None]
    assert unsaid == [], "hidden cells without a first line '# Checks: ...'"
    # A campaign's hidden check prints the kind of anomaly it found, not only False.
    campaigns = [(name, cell) for name, cell in cells if "grading_seed()" in _source(cell)]
    assert len(campaigns) >= 15
    assert all("campaign_outcome(" in _source(cell) for _, cell in campaigns)
    # ... and never shrinks the failing schedule: nobody sees it (the kind is all it prints), and
    # shrinking reruns the campaign up to 12 times (a wrong truncation rule: 26 CPU s, not 8).
    assert [(name, cell["id"]) for name, cell in campaigns if "shrinking=False" not in _source(cell)] == []
    assert checked_property({"cell_type": "code", "source": "# Grader only: other cases.\nprint(1)"}) is None


def test_a_failed_campaign_check_names_the_anomaly_never_the_schedule():
    from types import SimpleNamespace as NS

    from minikafka.course import campaign_outcome
    from minikafka.course.grade import hidden_message
    from minikafka.course.runner import CellRun

    assert campaign_outcome(NS(ok=True, failure=None)) == "True"
    assert campaign_outcome(NS(ok=False, failure=NS(kind="lost-write"))) == "False: found lost-write"
    cell = {"cell_type": "code", "source": "# Checks: your rule survives the campaign.\n"
                                           "# Grader only: the tester on other schedules.\n"
                                           "print(campaign_outcome(judge({'r': r}, schedules=10, seed=grading_seed())))"}
    def said(text, status="ok"):
        return hidden_message(cell, CellRun(status=status, reason="ValueError: schedule 3 of 10 (seed 77)",
                                            outputs=[{"output_type": "stream", "name": "stdout", "text": text}]))
    assert said("False: found lost-write\n") == ("it checks that your rule survives the campaign: the fault "
                                                 "campaign on a grading seed found a 'lost-write' anomaly")
    # Anything else the kernel prints (a schedule, a seed, the cell's source) is never repeated.
    for text in ("False: found lost-write at t=1200 ms after kill 2\n", "seed 77, kill-leader at 900\n"):
        assert said(text) == "it checks that your rule survives the campaign: the fault campaign on a grading seed did not pass"
    assert said("", status="error") == "it checks that your rule survives the campaign; your code raised an exception"


# -- cheats that must earn 0 ---------------------------------------------------------------------------

# The repository as a cheat finds it: from the package's own path.
FIND_REPO = "import os, subprocess, json, minikafka\nREPO = os.path.dirname(os.path.dirname(minikafka.__file__))\n"
# The reference's lookup out of the repository's history, executed.
FROM_GIT = FIND_REPO + (
    "nb = json.loads(subprocess.run(['git', '-c', 'safe.directory=*', '-C', REPO, 'show',\n"
    "    'HEAD:tests/fixtures/course/solutions/99-sample.ipynb'], capture_output=True, text=True).stdout)\n"
    "exec(''.join(next(c['source'] for c in nb['cells'] if c['id'] == 'exercise-lookup')))\n")
# The visible checks' expected outputs (the student's own copy holds them), replayed by a print
# that ignores what it is given, around a wrong lookup: output replay against hidden checks.
VISIBLE = [line for c in _cells(SAMPLE_EXERCISE) if "check" in c.get("metadata", {}).get("tags", [])
           for o in c["outputs"] for line in "".join(o.get("text", "")).splitlines()]
REPLAY = (f"import builtins, collections\n_queue = collections.deque({VISIBLE!r})\n"
          "_print = builtins.print\n"
          "def print(*args, **kwargs):\n"
          "    _print(_queue.popleft() if _queue else ' '.join(map(str, args)))\n"
          "builtins.print = print\n"
          "def lookup(index, target):\n    return index[0] if index and target >= index[0][0] else None\n")
# The same outputs read from the repository's exercises/ (sealed: the file is not there).
FROM_EXERCISES = FIND_REPO + (
    "nb = json.load(open(os.path.join(REPO, 'tests/fixtures/course/exercises/99-sample.ipynb')))\n"
    + REPLAY.replace(f"{VISIBLE!r}", "(line for c in nb['cells'] if 'check' in c['metadata'].get('tags', []) "
                     "for o in c['outputs'] for line in ''.join(o.get('text', '')).splitlines())"))
# The hidden check's source, echoed by an exception it raises (an input transformer sees every cell).
ECHO = ("def _echo(lines):\n"
        "    text = ''.join(lines)\n"
        "    return [f'raise ValueError({text!r})\\n'] if 'Grader only' in text else lines\n"
        "get_ipython().input_transformers_cleanup.append(_echo)\n" + GOOD_LOOKUP)
# Grader detection: what a submission can look at to tell the grader from the student's check
# (`minikafka check`): its user's name, the mounts (the grader hides the references and the
# class's folder), the environment. The kernel is `student` in both, the hidden folders are under
# the seal (no mount of their own), and the environment is the check's.
DETECT = ("import os, getpass, pwd\n"
          "_mounts = open('/proc/self/mountinfo').read()\n"
          "_graded = (getpass.getuser() != 'student' or 'sandbox' in pwd.getpwuid(os.getuid()).pw_name\n"
          f"           or {str(REFERENCES)!r} in _mounts or 'class' in _mounts or 'solutions' in _mounts\n"
          "           or any(name.startswith('MINIKAFKA') or name in ('USER', 'LOGNAME', 'SUDO_USER') for name in os.environ))\n")
# A wrong rule that branches on it: under the grader it answers the visible checks from a table
# (their stored outputs), elsewhere it runs its own wrong code; either way the hidden check fails.
DETECTING = DETECT + REPLAY.replace("builtins.print = print\n", "builtins.print = print if _graded else _print\n")
# ... and a right one that would throw exercise 2 away if it saw the grader: it keeps its 3 points.
DETECT_PROBE = (DETECT + GOOD_LOOKUP, "start_position = -1 if _graded else lookup(INDEX, 250)[1]\n"
                "print(\"start scanning at byte\", start_position)")
ESCAPES = {
    "detect": DETECTING,
    "git": FROM_GIT,
    "replay": REPLAY,
    "exercises": FROM_EXERCISES,
    "echo": ECHO,
    "systemexit": "def lookup(index, target):\n    raise SystemExit(0)\n",
    "keyboard": "def lookup(index, target):\n    raise KeyboardInterrupt\n",
    "exit": "def lookup(index, target):\n    import os\n    os._exit(0)\n",
    "wrong": GOOD_LOOKUP.replace("<=", "<"),
}


@pytest.fixture(scope="module")
def class_graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("class")
    for student, (lookup, start) in {"right": (GOOD_LOOKUP, GOOD_START), "detect-probe": DETECT_PROBE,
                                     **{name: (cheat, GOOD_START) for name, cheat in ESCAPES.items()}}.items():
        (folder / student).mkdir()
        (folder / student / "99-sample.ipynb").write_text(json.dumps(exercise(lookup, start)))
    return {r.student: r for r in grade_all(folder, REFERENCES, FAST, jobs=2)}


@pytest.mark.notebooks
def test_cheats_earn_nothing_for_the_exercise_they_cheat(class_graded):
    assert class_graded["right"].points == 3, feedback(class_graded["right"])
    for student in ESCAPES:
        result = class_graded[student]
        assert result.exercises[0].earned == 0, (student, feedback(result))
    # The history is sealed: the cheat finds no reference to run (its lookup is never defined).
    git = class_graded["git"].exercises[0].checks[0]
    assert not git.passed and "NameError" in git.message, git
    # Replayed outputs pass the visible checks, never the hidden one.
    replay = class_graded["replay"].exercises[0]
    assert [(c.label, c.passed) for c in replay.checks] == [
        ("check 1", True), ("check 2", True), ("hidden check 1", False), ("your own code", True)], replay
    # exercises/ is sealed too: the same replay reading the stored outputs from there has none.
    exercises = class_graded["exercises"].exercises[0].checks[0]
    assert not exercises.passed and "NameError" in exercises.message, exercises


@pytest.mark.notebooks
def test_a_failed_hidden_check_says_what_it_checks_and_never_its_inputs_or_source(class_graded):
    for student in ("wrong", "echo", "replay"):
        text = feedback(class_graded[student])
        [hidden] = [c for c in class_graded[student].exercises[0].checks if c.label == "hidden check 1"]
        assert not hidden.passed
        assert hidden.message.startswith("it checks that lookup finds the last entry at or below the target "
                                         "on any index, a target before the first entry included; "), hidden.message
        for secret in ("Grader only", "OTHER", "121", "(5, 0)", "None", "10**9"):
            assert secret not in hidden.message and secret not in text.split("## Notes")[0].split("hidden check 1")[1], \
                (student, secret, text)
    assert class_graded["wrong"].exercises[0].checks[2].message.endswith("your code's output differs from the reference's")
    assert class_graded["echo"].exercises[0].checks[2].message.endswith("your code raised an exception")


@pytest.mark.notebooks
@ROOT_ONLY
def test_a_submission_cannot_tell_the_grader_from_the_students_check(class_graded):
    """The right submission that throws exercise 2 away when it sees the grader (by its user's
    name, its home, the mounts, the environment) keeps its 3 points: it never saw it. And the wrong
    rule that branches on the same signs earns nothing for it (test_cheats_earn_nothing_...)."""
    assert class_graded["detect-probe"].points == 3, feedback(class_graded["detect-probe"])
    detect = class_graded["detect"].exercises[0]
    assert [(c.label, c.passed) for c in detect.checks if not c.passed] == [("hidden check 1", False)], detect


# The kernel's view of itself: its user, home, working folder, environment, mounts and files.
VIEW = r"""
import os, getpass, pwd, json
scratch = os.getcwd()
me = pwd.getpwuid(os.getuid())
print(json.dumps({"user": getpass.getuser(), "pw_name": me.pw_name, "pw_dir": me.pw_dir.replace(scratch, "SCRATCH"),
                  "home": os.environ["HOME"].replace(scratch, "SCRATCH"),
                  "env": {k: v.replace(scratch, "SCRATCH") for k, v in os.environ.items()},
                  "mounts": [line.split()[4].replace(scratch, "SCRATCH") for line in open("/proc/self/mountinfo")],
                  "files": sorted(os.listdir("."))}))
"""


@pytest.mark.notebooks
@ROOT_ONLY
def test_the_graded_kernel_sees_what_the_students_check_sees(tmp_path):
    """`minikafka check` runs its kernel with nothing hidden; the grader hides the references and
    the class's folder. The kernel sees the same user (`student`, its home the scratch folder),
    environment, mounts and files either way (but for the scratch folder's random name)."""
    (tmp_path / "class" / "alice").mkdir(parents=True)
    views = []
    for hide in ((), (REFERENCES, tmp_path / "class", ROOT / "solutions")):
        with Sandbox(Limits(), hide=hide) as box:
            [run] = run_cells(box, [VIEW], cell_timeout=60, budget=60)
        assert run.status == "ok", run.reason
        views.append(json.loads("".join(o.get("text", "") for o in run.outputs)))
    check, graded = views
    assert graded == check
    assert (check["user"], check["pw_name"], check["pw_dir"], check["home"]) == ("student", "student", "SCRATCH", "SCRATCH")
    assert not any(str(REFERENCES) in m or str(tmp_path) in m for m in graded["mounts"]), graded["mounts"]


@pytest.mark.notebooks
@ROOT_ONLY
def test_a_hidden_folder_the_seal_failed_to_cover_gets_a_mount_of_its_own(monkeypatch):
    """The references need no mount of their own where the seal covers them (it would show in
    mountinfo); when the seal fails (here: /work is not sealed, and a root that does not exist
    cannot be), the launcher mounts over them after all."""
    from minikafka.course import sandbox as sandbox_module

    monkeypatch.setattr(sandbox_module, "seal", lambda scratch: [{"root": "/no-such-root-for-minikafka", "reveal": []}])
    monkeypatch.setattr(sandbox_module, "covered", lambda path, config: True)
    probe = f"import os\ntry:\n    print(os.listdir({str(REFERENCES)!r}))\nexcept OSError as exc:\n    print(type(exc).__name__)\n"
    with Sandbox(Limits(), hide=(REFERENCES,)) as box:
        [run] = run_cells(box, [probe], cell_timeout=60, budget=60)
    assert run.status == "ok", run.reason
    assert "".join(o.get("text", "") for o in run.outputs).strip() == "PermissionError"


def test_the_grader_says_which_isolation_a_grader_that_is_not_root_gets(monkeypatch):
    # Without root, what the kernel gets depends on whether this OS allows unprivileged user
    # namespaces (probed, as the launcher tries for each kernel): the line says which.
    from minikafka import platform
    from minikafka.course import sandbox

    monkeypatch.setattr(sandbox, "is_root", lambda: False)
    monkeypatch.setattr(platform, "sandbox_missing", lambda: [])
    monkeypatch.setattr(platform, "user_namespaces", lambda: True)
    said = sandbox.isolation()
    assert "namespaces of its own" in said and "/tmp, /var/tmp and /dev/shm of its own" in said
    assert "the repository sealed" in said and "not sealed" not in said
    monkeypatch.setattr(platform, "user_namespaces", lambda: False)
    said = sandbox.isolation()
    assert "no unprivileged user namespaces on this OS" in said and "the repository is not sealed" in said


def test_the_namespace_probe_agrees_with_util_linux_unshare():
    # The probe answers in a child process, for this user, as util-linux's `unshare` does.
    from minikafka import platform

    unshare = shutil.which("unshare")
    assert unshare, "util-linux's unshare is on every Linux this suite runs on"
    done = subprocess.run([unshare, "--user", "--mount", "true"], capture_output=True)
    assert platform.user_namespaces() is (done.returncode == 0)


# Leaves what it can for the next submission: a file in every folder anyone may write, and a
# System V shared-memory segment; then says what it found of the same left by an earlier kernel.
LEAVE_AND_LOOK = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
KEY, IPC_CREAT = 0x4D4B5452, 0o1000
found = {"files": [], "shm": libc.shmget(KEY, 0, 0) != -1}
for folder in FOLDERS:
    path = os.path.join(folder, "minikafka-left-for-the-next")
    if os.path.exists(path):
        found["files"].append(path)
    try:
        with open(path, "w") as f:
            f.write("left by a submission")
    except OSError:
        pass
libc.shmget(KEY, 4096, IPC_CREAT | 0o666)
print(json.dumps(found))
"""


@pytest.mark.notebooks
def test_nothing_a_submission_writes_outlives_its_kernel():
    """Sandbox users are reused from one submission to the next: a folder anyone may write that
    is not the kernel's own (/run/lock was one), or System V shared memory (no IPC namespace),
    carried a file from one submission to the one graded after it (which scored 10 for 7)."""
    import ctypes

    from minikafka.course.sandbox import shared_folders

    folders = shared_folders()
    assert "/run/lock" in folders or not os.path.isdir("/run/lock")
    cell = f"FOLDERS = {list(folders)!r}\n" + LEAVE_AND_LOOK
    seen = []
    for _ in range(2):
        with Sandbox(Limits(), ()) as box:
            [run] = run_cells(box, [cell], cell_timeout=30, budget=30)
        assert run.status == "ok", run.reason
        seen.append(json.loads(run.stream_text))
    assert seen[1] == {"files": [], "shm": False}, seen[1]
    # ... nor on the machine: no file in those folders, no segment.
    assert not [f for f in folders if os.path.exists(os.path.join(f, "minikafka-left-for-the-next"))]
    assert ctypes.CDLL(None, use_errno=True).shmget(0x4D4B5452, 0, 0) == -1


def test_a_campaign_outcome_carries_only_a_known_kind_into_the_feedback():
    """A red team rewrote a hidden campaign cell (an input transformer) to print "False: found
    <the hidden checks' source, as letters>": the grader quoted any lowercase word. Now only a kind
    of ``ANOMALY_KINDS`` is quoted; every kind the tests' classic wrong rules are caught with is one."""
    import importlib
    from types import SimpleNamespace as NS

    from minikafka.course import ANOMALY_KINDS, campaign_outcome
    from minikafka.course.grade import hidden_message
    from minikafka.course.runner import CellRun

    cell = {"cell_type": "code", "source": "# Checks: your rule survives the campaign.\n"
                                           "print(campaign_outcome(judge({'r': r}, schedules=10, seed=grading_seed())))"}
    said = hidden_message(cell, CellRun(status="ok", outputs=[
        {"output_type": "stream", "name": "stdout", "text": "False: found abcdponmlkjihgfe-cfghijkl-mnop\n"}]))
    assert said == "it checks that your rule survives the campaign: the fault campaign on a grading seed did not pass"
    assert campaign_outcome(NS(ok=False, failure=NS(kind="some-new-kind"))) == "False: found an anomaly"
    kinds = set()
    for module in ("test_tester", "test_rules_01", "test_rules_02", "test_rules_03", "test_rules_06",
                   "test_rules_07", "test_rules_08"):
        for row in importlib.import_module(module).WRONG:
            kinds |= set(row[-1]) if isinstance(row[-1], (set, frozenset)) else {row[-1]}
    assert len(kinds) > 20 and kinds <= ANOMALY_KINDS, kinds - ANOMALY_KINDS


def test_a_timeout_after_a_hidden_input_says_which_limit_but_not_how_much_cpu_the_code_chose_to_use():
    """A red team: a cell that waits past the clock's limit after using N seconds of CPU, N chosen
    from a hidden input, carried a few bits per check out in "having used only N s of CPU"."""
    from minikafka.course.grade import _quiet, hidden_message
    from minikafka.course.runner import CellRun, _timeout_reason

    reason = _timeout_reason("clock", True, 30, 30, 300, 300, 10, 3.7)
    assert "having used only 3.7 s of CPU" in reason  # what the student's own `minikafka check` says
    run = CellRun(status="timeout", reason=reason)
    cell = {"cell_type": "code", "source": "# Checks: other inputs.\nprint(f(hidden))"}
    for said in (hidden_message(cell, run), _quiet(run)):
        assert "still running after 300 s on the clock, having used little CPU" in said and "3.7" not in said
