"""Two students on one machine (a JupyterHub): each is a Unix user of their own, and at the
same moment each launches a 3-broker cluster, produces and consumes through it, and checks an
exercise with ``minikafka check``. Nothing collides: no port, no file in the shared /tmp, no
file one of them made that the other then needs to write. And what one student leaves in /tmp
(a stale file, a symlink) never becomes a file of the other's Spark session.

The students are made here with ``useradd`` and removed after (so: root only, Linux only).
Their commands run through ``tests/fixtures/hub_user.py``, which shares /tmp, the network and
the process table as a hub does, and only makes this machine's Python (under /root) reachable
to them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from minikafka.course import BEGIN_MARKER, END_MARKER

pytest.importorskip("kafka")  # kafka-python==3.0.12 (the dev and course extras pin it)

ROOT = Path(__file__).resolve().parents[1]
HUB_USER = ROOT / "tests" / "fixtures" / "hub_user.py"
LAUNCH_PY = ROOT / "minikafka" / "course" / "_launch.py"
SANITIZE = ROOT / "tests" / "nbval-sanitize.cfg"
NOTEBOOK = "01-the-log.ipynb"
NAMES = ("minikafka-hub-ada", "minikafka-hub-bo")


def _closed_to_others(path: Path) -> Path | None:
    """The first folder on the way to ``path`` that other users cannot enter, if any."""
    return next((folder for folder in [*reversed(path.parents), path] if not folder.stat().st_mode & 0o001), None)


pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0 or shutil.which("useradd") is None,
                       reason="two Unix users are made with useradd: needs root on Linux"),
    pytest.mark.skipif(any(_closed_to_others(p) for p in (ROOT, Path(sys.prefix))),
                       reason="the students need to reach the repository and its virtualenv (as on a hub, where "
                              "the course is installed for all): here a folder above them is closed to others"),
]


class Student:
    def __init__(self, name: str, home: Path, stash: Path) -> None:
        import pwd

        entry = pwd.getpwnam(name)
        self.name, self.uid, self.gid, self.home, self._stash = name, entry.pw_uid, entry.pw_gid, home, stash
        self._runs = 0

    def give(self, path: Path, text: str) -> Path:
        """A file of the student's own, in their home."""
        path = self.home / path
        path.write_text(text)
        os.chown(path, self.uid, self.gid)
        return path

    def run(self, *argv: str, **popen: object) -> subprocess.Popen:
        """``argv`` as this student, in their home, with a hub user's environment."""
        self._runs += 1
        stash = self._stash / f"{self.name}-{self._runs}"
        stash.mkdir(mode=0o700)
        env = {"HOME": str(self.home), "USER": self.name, "LOGNAME": self.name, "LANG": "C.UTF-8",
               "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
        if "JAVA_HOME" in os.environ:
            env["JAVA_HOME"] = os.environ["JAVA_HOME"]
        config = {"uid": self.uid, "gid": self.gid, "home": str(self.home), "env": env, "stash": str(stash),
                  "launch_py": str(LAUNCH_PY),
                  "expose": sorted({str(Path(sys.base_prefix).resolve()), str(Path(sys.executable).resolve().parent)})}
        return subprocess.Popen([sys.executable, "-I", "-S", str(HUB_USER), json.dumps(config), "--", *argv],
                                text=True, **popen)


def _remove_user(name: str) -> None:
    subprocess.run(["userdel", name], capture_output=True)  # and its group (made with --user-group)


@pytest.fixture(scope="module")
def students():
    base = Path(tempfile.mkdtemp(prefix="minikafka-hub-"))
    base.chmod(0o711)
    stash = base / "stash"
    stash.mkdir(mode=0o700)
    made = []
    try:
        for name in NAMES:
            _remove_user(name)  # left by an interrupted run
            home = base / name
            done = subprocess.run(["useradd", "--no-create-home", "--home-dir", str(home), "--user-group",
                                   "--shell", "/usr/sbin/nologin", name], capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
            made.append(name)
            home.mkdir(mode=0o700)
            student = Student(name, home, stash)
            os.chown(home, student.uid, student.gid)
        yield [Student(name, base / name, stash) for name in NAMES]
    finally:
        for name in made:
            _remove_user(name)
        shutil.rmtree(base, ignore_errors=True)


# A student's notebook cell, in short: a 3-broker cluster, the fleet's topic, a produce and a
# consume; the cluster stays up (both students' at once) until told to go on.
CLUSTER = r"""
import json, os, sys
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from minikafka import launch

me = os.environ["USER"]
with launch(brokers=3) as cluster:
    print(json.dumps({"ports": sorted([*cluster.ports.values(), *cluster.inter_broker_ports.values()]),
                      "dir": str(cluster.dir), "owner": os.stat(cluster.dir).st_uid}), flush=True)
    sys.stdin.readline()  # both clusters are up
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    for i in range(20):
        producer.send("trucks_gps", key=b"truck-%d" % (i % 5), value=f"{me}-{i}".encode())
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=None,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([TopicPartition("trucks_gps", 0)])
    values = []
    while len(values) < 20:
        for records in consumer.poll(timeout_ms=30_000).values():
            values.extend(r.value.decode() for r in records)
    consumer.close()
    print(json.dumps({"values": sorted(values)}), flush=True)
"""


# A helper cell of the student's own that leaves files in the machine's temporary folders: the
# check's kernel has folders of its own there (the sandbox's private /tmp, /var/tmp, /dev/shm),
# so nothing of it stays behind, as without root nothing did before.
LITTER = ("import os\nfor _folder in ('/tmp', '/var/tmp', '/dev/shm'):\n"
          "    if os.path.isdir(_folder):\n"
          "        open(os.path.join(_folder, 'litter-of-' + os.environ.get('USER', 'a-kernel')), 'w').write('x')\n")


def _solved(exercise: Path, solution: Path) -> str:
    """The exercise notebook with the reference's code in its exercise cells: a student's PASS
    (and a helper cell that litters the temporary folders)."""
    nb = json.loads(exercise.read_text())
    nb["cells"].insert(1, {"cell_type": "code", "execution_count": None, "id": "litter", "metadata": {},
                           "outputs": [], "source": LITTER})
    reference = {cell.get("id"): cell for cell in json.loads(solution.read_text())["cells"]}
    for cell in nb["cells"]:
        if "exercise" in cell.get("metadata", {}).get("tags", []):
            source = "".join(reference[cell["id"]]["source"])
            cell["source"] = "".join(line for line in source.splitlines(keepends=True)
                                     if line.strip() not in (BEGIN_MARKER, END_MARKER))
    return json.dumps(nb)


def _leftovers(uids: set[int]) -> list[str]:
    """What the students own at the top of the shared temporary folders."""
    found = []
    for folder in {Path(tempfile.gettempdir()), Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")}:
        for entry in folder.iterdir() if folder.is_dir() else ():
            try:
                if entry.lstat().st_uid in uids:
                    found.append(str(entry))
            except OSError:
                pass
    return sorted(found)


def test_two_students_launch_clusters_and_check_exercises_at_the_same_time(students):
    solved = _solved(ROOT / "exercises" / NOTEBOOK, ROOT / "solutions" / NOTEBOOK)
    uids = {s.uid for s in students}
    before = _leftovers(uids)  # (a user of an interrupted run may have had the same uid)
    clusters, checks = {}, {}
    try:
        for s in students:
            notebook = s.give(Path(NOTEBOOK), solved)
            checks[s.name] = s.run(sys.executable, "-m", "minikafka.cli", "check", str(notebook),
                                   "--sanitize", str(SANITIZE), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            clusters[s.name] = s.run(sys.executable, "-c", CLUSTER, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        up = {}
        for name, proc in clusters.items():
            line = proc.stdout.readline()
            assert line, f"{name}'s cluster did not start: {proc.communicate(timeout=60)[1]}"
            up[name] = json.loads(line)
        ada, bo = (up[name] for name in NAMES)
        assert not set(ada["ports"]) & set(bo["ports"]), up  # both up at once, no port shared
        assert len(ada["ports"]) == len(bo["ports"]) == 9  # 3 brokers x 2 listeners + 3 controllers
        assert ada["dir"] != bo["dir"]
        assert [ada["owner"], bo["owner"]] == [s.uid for s in students]
        for name, proc in clusters.items():
            proc.stdin.write("go on\n")
            proc.stdin.flush()
        for name, proc in clusters.items():
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, f"{name}: {err}"
            values = json.loads(out.strip().splitlines()[-1])["values"]
            assert values == sorted(f"{name}-{i}" for i in range(20))  # their own records, all of them
        for name, proc in checks.items():
            out, _ = proc.communicate(timeout=900)
            assert proc.returncode == 0 and "PASS" in out and "FAIL" not in out, f"{name}:\n{out}"
    finally:
        for proc in [*clusters.values(), *checks.values()]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert _leftovers(uids) == before  # nothing of theirs stays in /tmp


# Student bo's kernel, about to start Spark: it waits until told, then does what
# ``minikafka.spark.session()`` does with files before the JVM starts.
SPARK_FILES = r"""
import importlib, json, os, sys
session = importlib.import_module("minikafka.spark.session")  # the module (the package exports a function of that name)
print(os.getpid(), flush=True)
sys.stdin.readline()
python = session.worker_python()  # (makes the folder of the files, where there is one)
session._with_output_to(session.log_file, lambda: print("the JVM's chatter", flush=True))
folder = os.lstat(session.log_file.parent)
print(json.dumps({"folder": str(session.log_file.parent), "python": python,
                  "python_owner": os.lstat(python).st_uid, "log": open(session.log_file).read(),
                  "log_owner": os.lstat(session.log_file).st_uid, "folder_owner": folder.st_uid,
                  "folder_mode": folder.st_mode & 0o777}), flush=True)
"""

# Student ada, who knows bo's pid: what a stale file of one of ada's old kernels (that had that
# pid) looks like, and a symlink into bo's home where bo would write a file of that pid.
PLANT = r"""
import os, sys
pid, target = sys.argv[1], sys.argv[2]
with open(f"/tmp/minikafka-spark-{pid}.log", "w") as f:
    f.write("an old kernel of ada's\n")
os.symlink(target, f"/tmp/minikafka-spark-python-{pid}.tmp")
"""


def test_a_student_s_spark_files_are_their_own_whatever_another_left_in_tmp(students):
    pytest.importorskip("pyspark")
    ada, bo = students
    notes = bo.give(Path("notes.txt"), "bo's notes\n")
    planted: list[Path] = []
    kernel = bo.run(sys.executable, "-c", SPARK_FILES, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE)
    try:
        pid = kernel.stdout.readline().strip()
        assert pid.isdigit(), kernel.communicate(timeout=60)[1]
        planted = [Path(tempfile.gettempdir()) / f"minikafka-spark-{pid}.log",
                   Path(tempfile.gettempdir()) / f"minikafka-spark-python-{pid}.tmp"]
        plant = ada.run(sys.executable, "-c", PLANT, pid, str(notes), stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE)
        assert plant.wait(timeout=120) == 0, plant.communicate()[1]
        out, err = kernel.communicate("go on\n", timeout=300)
        assert kernel.returncode == 0, err  # before: PermissionError on ada's stale log
        said = json.loads(out.strip().splitlines()[-1])
        assert said["python_owner"] == said["log_owner"] == said["folder_owner"] == bo.uid
        assert said["folder_mode"] == 0o700
        assert said["log"] == "the JVM's chatter\n"
        assert notes.read_text() == "bo's notes\n"  # before: overwritten through ada's symlink
        assert not Path(said["folder"]).exists()  # gone with the process that made it
    finally:
        if kernel.poll() is None:
            kernel.kill()
            kernel.wait()
        for path in planted:
            path.unlink(missing_ok=True)
        for entry in Path(tempfile.gettempdir()).glob("minikafka-spark-*"):
            if entry.lstat().st_uid == bo.uid:  # the kernel's own folder, if it was killed
                shutil.rmtree(entry, ignore_errors=True)
