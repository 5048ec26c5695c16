"""The simulated world and `minikafka check` without the Unix-only calls (a stand-in for Windows).

Each test runs a script in a *stand-in interpreter*: a virtual environment made here whose only
site-packages holds a .pth file that adds this project's virtualenv and then imports
tests/windows_standin.py, which takes away from minikafka what Windows' CPython lacks (os.pread,
os.writev, os.fork, os.getuid, ..., fcntl, pwd, resource, SIGSTOP/SIGCONT, pass_fds, opening a
directory; see that file for the list and for what cannot be imitated on Linux). Every Python the
stand-in starts is one too, so the kernel that `minikafka check` runs the notebook in has them
taken away as well.

What must hold there, as on a student's Windows laptop: `import minikafka`, `Cluster(brokers=3)`
with a topic, acks=all, a broker killed and restarted and everything read back; the dashboard
built and clicked headless; `launch()` refused in one line that names WSL2, before any process
starts; `minikafka check` of a filled exercise notebook giving PASS, with one line saying that its
isolation is weaker here and why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STANDIN = Path(__file__).with_name("windows_standin.py")


@pytest.fixture(scope="module")
def standin(tmp_path_factory) -> Path:
    """The stand-in interpreter's executable."""
    home = tmp_path_factory.mktemp("windows-standin")
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(home)
    [site] = [Path(p) for p in (home / "lib").glob("python*/site-packages")] or \
        [home / "Lib" / "site-packages"]
    (site / "_minikafka_windows_standin.py").write_text(STANDIN.read_text())
    real = sysconfig.get_paths()["purelib"]  # this virtualenv's: minikafka and every dependency
    (site / "00-minikafka-windows-standin.pth").write_text(
        f"import site; site.addsitedir({real!r})\nimport _minikafka_windows_standin\n")
    python = home / "bin" / "python"
    return python if python.exists() else home / "Scripts" / "python.exe"


def run(python: Path, script: str, *args: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return subprocess.run([str(python), "-c", textwrap.dedent(script), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_stand_in_takes_the_unix_calls_away_from_minikafka(standin):
    """Without this the other tests would prove nothing: minikafka's code sees no os.pread, no
    os.writev, no os.fork, no fcntl, pwd or resource, no SIGSTOP, and a pass_fds Popen fails."""
    done = run(standin, """
        import json, os, signal, subprocess, sys
        import minikafka.platform as p
        seen = {
            "os.pread": p.pread is getattr(os, "pread", None),
            "os.writev": p.writev is getattr(os, "writev", None),
            "fcntl": p._fcntl is not None,
            "sandbox": p.sandbox_missing(),
            "real processes": p.real_processes_missing(),
            "SIGSTOP": hasattr(signal, "SIGSTOP"),
        }
        try:
            subprocess.Popen([sys.executable, "-c", "0"], pass_fds=(0,))
            seen["pass_fds"] = "accepted"
        except AssertionError as e:
            seen["pass_fds"] = str(e)
        try:
            p.fsync_dir(".")
            seen["fsync_dir"] = "nothing to sync"
        except OSError as e:
            seen["fsync_dir"] = repr(e)
        print(json.dumps(seen))
    """)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "os.pread": False, "os.writev": False, "fcntl": False,
        "sandbox": ["os.fork", "os.setsid", "os.getuid", "fcntl", "resource"],
        "real processes": "this OS has no SIGSTOP, SIGCONT", "SIGSTOP": False,
        "pass_fds": "pass_fds not supported on Windows.", "fsync_dir": "nothing to sync"}


def test_a_cluster_loses_nothing_across_a_broker_kill_without_unix_calls(standin, tmp_path):
    """What notebooks 00-08 do: a topic on 3 brokers, acks=all, a broker killed (and restarted, so
    it recovers its log from disk through the fallback read), every record read back."""
    done = run(standin, """
        import sys
        from minikafka import Cluster, KafkaConsumer, KafkaProducer
        cluster = Cluster(brokers=3, seed=7, dir=sys.argv[1])
        cluster.create_topic("trucks_gps", partitions=3, replication_factor=3, config={"min.insync.replicas": 2})
        producer = KafkaProducer(bootstrap_servers=cluster, acks="all", linger_ms=5)
        send = lambda i: producer.send("trucks_gps", key=b"truck-%d" % (i % 5), value=b"%d" % i)
        acked = [f.get(timeout=10) for f in [send(i) for i in range(30)]]
        cluster.kill(2)
        cluster.advance(ms=10_000)
        acked += [send(i).get(timeout=30) for i in range(30, 40)]
        cluster.restart(2)
        cluster.advance(ms=10_000)
        consumer = KafkaConsumer("trucks_gps", bootstrap_servers=cluster, group_id="g",
                                 auto_offset_reset="earliest", consumer_timeout_ms=5_000)
        print(len(acked), sorted(int(r.value) for r in consumer) == list(range(40)))
        print(cluster.describe("trucks_gps"))
    """, str(tmp_path / "cluster"))
    assert done.returncode == 0, done.stderr
    first, *table = done.stdout.splitlines()
    assert first == "40 True"
    assert all("Isr: 1,2,3" in line for line in table if "Partition:" in line), done.stdout


def test_scratch_folders_are_made_and_removed_and_nothing_is_swept_without_unix_locks(standin, tmp_path):
    """Without flock or msvcrt a lock holds within one process only, so it cannot tell a dead
    owner's folder from another process's live one: ``minikafka.scratch`` makes plain folders
    (no lock file), sweeps nothing (a folder marked as a dead owner's is left), and never fails."""
    dead = tmp_path / "minikafka-deadbeef"  # what a killed kernel leaves on Linux: a marked folder
    (dead / "broker-1").mkdir(parents=True)
    (dead / ".minikafka-owner.lock").write_text("minikafka-\n")
    done = run(standin, """
        import json, os, sys, tempfile
        tempfile.tempdir = sys.argv[1]
        from minikafka import Cluster, platform, scratch
        from minikafka.checker.campaign import _scratch_dir
        platform.ram_dir = lambda: sys.argv[1]
        cluster = Cluster(brokers=1)
        schedule = _scratch_dir()
        seen = {"process_locks": platform.process_locks(), "in": sorted(os.listdir(sys.argv[1])),
                "cluster": sorted(os.listdir(cluster.dir)), "schedule": os.listdir(schedule),
                "swept": scratch.sweep("minikafka-", sys.argv[1])}
        cluster.close()
        scratch.remove(schedule)
        seen["after"] = sorted(os.listdir(sys.argv[1]))
        print(json.dumps(seen))
    """, str(tmp_path))
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["process_locks"] is False and seen["swept"] == []
    assert len(seen["in"]) == 3 and "minikafka-deadbeef" in seen["in"]
    assert seen["cluster"] == ["broker-1", "controller-3000"] and seen["schedule"] == []
    assert seen["after"] == ["minikafka-deadbeef"]


def test_the_course_clients_speak_tcp_without_unix_calls(standin):
    """The client runtime (minikafka.wire.client_runtime) needs no Unix-only call: with all of
    them taken away, the course's admin client, producer and consumer use a cluster this test
    launched (on Linux: launch() itself needs pass_fds)."""
    from minikafka.wire.process import launch

    with launch(brokers=1, config={"group.initial.rebalance.delay.ms": 0,
                                   "offsets.topic.num.partitions": 1}) as cluster:
        done = run(standin, """
            import selectors
            import sys
            selectors.DefaultSelector = selectors.SelectSelector  # what Windows' CPython has
            from minikafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, NewTopic
            admin = KafkaAdminClient(bootstrap_servers=sys.argv[1])
            admin.create_topics([NewTopic("trucks_gps", 2, 1)])
            producer = KafkaProducer(bootstrap_servers=sys.argv[1], acks="all")
            offsets = [producer.send("trucks_gps", key=b"truck-7", value=b"%d" % i).get(timeout=10).offset
                       for i in range(5)]
            producer.close()
            consumer = KafkaConsumer("trucks_gps", bootstrap_servers=sys.argv[1], group_id="g",
                                     auto_offset_reset="earliest")
            values = []
            for _ in range(60):
                for records in consumer.poll(timeout_ms=1000).values():
                    values += [int(r.value) for r in records]
                if len(values) == 5:
                    break
            consumer.close()
            print(offsets, values)
        """, cluster.bootstrap_servers)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0, 1, 2, 3, 4] [0, 1, 2, 3, 4]"


def test_the_dashboard_builds_and_clicks_headless_without_unix_calls(standin):
    done = run(standin, """
        from minikafka import Cluster
        from minikafka.widgets import Dashboard, ProcessDashboard  # both import: no SIGSTOP needed for that
        c = Cluster(3, seed=7)
        c.create_topic("t", partitions=3, replication_factor=3)
        d = Dashboard(c, "t", rate_per_s=50)
        for _ in range(4):
            d.tick(500)
        leader = d.counters["leaders"][0]
        d.broker_buttons[leader].click()
        for _ in range(24):
            d.tick(500)
        print(d.counters["acknowledged"] > 0, c.alive(leader), "<svg" in d.diagram.value, repr(d))
        print(d._repr_mimebundle_()["text/plain"])
        d.close()
        c.close()
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["True False True Dashboard(topic='t', running=False, ticks=28)",
                                           "Live dashboard of 3 simulated brokers (topic t). It shows only while "
                                           "the kernel that made it runs: run the cells above, then this one, to "
                                           "see it and use its buttons."]


def test_launch_says_in_one_line_to_use_wsl2_before_starting_anything(standin, tmp_path):
    done = run(standin, """
        import os, subprocess, sys, tempfile
        started = []
        real = subprocess.Popen.__init__
        subprocess.Popen.__init__ = lambda self, *a, **k: started.append(a) or real(self, *a, **k)
        tempfile.tempdir = sys.argv[1]
        import minikafka
        try:
            minikafka.launch(brokers=3)
        except minikafka.platform.PlatformNotSupported as e:
            print(e._render_traceback_())
        print(started, os.listdir(sys.argv[1]))
    """, str(tmp_path))
    assert done.returncode == 0, done.stderr
    shown, nothing = done.stdout.splitlines()
    [line] = eval(shown)  # one line in a notebook, no traceback
    assert line.startswith("PlatformNotSupported: launch() and `minikafka cluster up` cannot run here")
    assert "WSL2" in line and "`wsl --install -d Ubuntu`" in line
    assert nothing == "[] []"  # no process started, no cluster folder made
    for command in (["server", "--log-dir", str(tmp_path / "b")],
                    ["controller", "--node-id", "3000", "--log-dir", str(tmp_path / "c"),
                     "--controller-quorum-voters", "3000@127.0.0.1:19093"],
                    ["cluster", "up", "--dir", str(tmp_path / "d")]):
        done = subprocess.run([str(standin), "-m", "minikafka.cli", *command], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 2 and done.stdout == ""
        [said] = done.stderr.splitlines()
        assert said.startswith(f"minikafka {' '.join(command[:2]) if command[0] == 'cluster' else command[0]}: ")
        assert "WSL2" in said
    assert os.listdir(tmp_path) == []


def fill(exercise: Path, solution: Path, out: Path) -> Path:
    """The exercise notebook with each `exercise` cell holding the solution's code (markers removed)."""
    nb = json.loads(exercise.read_text())
    solved = {c["id"]: "".join(c["source"]) for c in json.loads(solution.read_text())["cells"]}
    for cell in nb["cells"]:
        if "exercise" in cell.get("metadata", {}).get("tags", []):
            cell["source"] = "".join(line for line in solved[cell["id"]].splitlines(keepends=True) if "### " not in line)
    out.write_text(json.dumps(nb))
    return out


@pytest.mark.notebooks
def test_check_passes_a_filled_exercise_and_says_its_isolation_is_weaker(standin, tmp_path):
    notebook = fill(ROOT / "exercises" / "01-the-log.ipynb", ROOT / "solutions" / "01-the-log.ipynb",
                    tmp_path / "01-the-log.ipynb")
    done = subprocess.run([str(standin), "-m", "minikafka.cli", "check", str(notebook)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line.split("  ")[0] for line in done.stdout.splitlines()[:3]] == ["PASS"] * 3, done.stdout
    assert "3 of 3 exercises pass" in done.stdout
    [notice] = done.stderr.splitlines()
    assert notice.startswith("sandbox: weaker isolation on this OS (it lacks os.fork, os.setsid, os.getuid, "
                             "fcntl, resource): ")


@pytest.mark.notebooks
def test_the_checks_kernel_runs_without_the_unix_calls_too(standin):
    """The notebook runs in a stand-in kernel, started without the Unix launcher: what the student's
    code calls in minikafka takes the fallbacks there as well."""
    done = run(standin, """
        from minikafka.course.runner import run_cells
        from minikafka.course.sandbox import Sandbox
        with Sandbox() as box:
            [run] = run_cells(box, ["import os, minikafka.platform as p\\n"
                                    "print(os.environ.get('MINIKAFKA_WINDOWS_STANDIN'), p.pread.__module__, "
                                    "p.sandbox_missing(), os.getcwd() == os.environ['HOME'])"],
                              cell_timeout=30, budget=60)
            print(box.manager.transport, box.manager.launcher_argv)
        print(run.status, "".join(o.get("text", "") for o in run.outputs).strip())
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "tcp []", "ok 1 minikafka.platform ['os.fork', 'os.setsid', 'os.getuid', 'fcntl', 'resource'] True"]
