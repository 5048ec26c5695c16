"""``minikafka cluster up`` and ``launch`` where a first hour trips on them: the top-level
names, a missing ``--dir``, ports already in use, and a ``--help`` that explains every flag.

Only the missing-directory test starts processes (one controller, one broker); the others
are refused before anything is spawned.
"""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

import minikafka
from minikafka.errors import IllegalArgumentError
from minikafka.wire import process

from wire_helpers import children_of, kill_all


def test_launch_and_cluster_are_importable_from_the_top_level():
    assert minikafka.launch is process.launch
    assert minikafka.LocalCluster is process.LocalCluster
    from minikafka import Cluster, launch  # noqa: F401  (the names the wire issue promised)

    assert "launch" in dir(minikafka) and "Cluster" in dir(minikafka)


@pytest.fixture
def busy_port():
    """A port something listens on, whose next three ports (the rest of a 1-broker,
    1-controller cluster at that base port) are held free for the test: on a busy machine a
    neighbour may be in use by another connection, and the refusal would then name two ports."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            port = s.getsockname()[1]
            held = []
            try:
                held = [process.reserve_port("127.0.0.1", port + i) for i in (1, 2, 3)]
            except (OSError, OverflowError):
                pass
            else:
                yield port
                return
            finally:
                for h in held:
                    h.close()
    pytest.fail("no port with three free neighbours found in 100 tries")


def test_local_cluster_refuses_ports_in_use_before_spawning_anything(busy_port, tmp_path):
    with pytest.raises(IllegalArgumentError, match=rf"port {busy_port} on 127.0.0.1 is already in use"):
        process.LocalCluster(1, controllers=1, base_port=busy_port, dir=tmp_path / "never")
    assert not (tmp_path / "never").exists()  # refused before anything was made


def test_cluster_up_refuses_ports_in_use_with_one_clear_line(busy_port):
    proc = subprocess.run([sys.executable, "-m", "minikafka.cli", "cluster", "up", "--brokers", "1",
                           "--controllers", "1", "--base-port", str(busy_port)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stdout == ""  # no bootstrap servers printed for a cluster that is not there
    assert proc.stderr.startswith(f"minikafka cluster up: port {busy_port} on 127.0.0.1 is already in use")
    assert "Traceback" not in proc.stderr


def test_a_server_on_a_port_in_use_says_so_in_one_line(busy_port, tmp_path):
    """Kafka's default port, 9092, may be another server's (on a shared machine, another
    user's): the second one says which port to change, with no traceback."""
    proc = subprocess.run([sys.executable, "-m", "minikafka.cli", "server", "--port", str(busy_port),
                           "--log-dir", str(tmp_path / "data")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("minikafka server: error while attempting to bind on address")
    assert f"{busy_port}" in last and "address already in use" in last and "--port, --controller-port" in last
    assert "Traceback" not in proc.stderr


def test_cluster_up_help_documents_every_flag():
    out = subprocess.run([sys.executable, "-m", "minikafka.cli", "cluster", "up", "--help"],
                         capture_output=True, text=True, timeout=60).stdout
    for flag, words in [("--brokers", "broker processes"), ("--controllers", "metadata quorum"),
                        ("--base-port", "in use"), ("--dir", "created if missing"),
                        ("--host", "binds and advertises"), ("--override", "num.partitions")]:
        assert flag in out and words in " ".join(out.split()), flag


def test_cluster_up_creates_a_missing_dir(tmp_path):
    target = tmp_path / "not" / "yet" / "there"
    proc = subprocess.Popen([sys.executable, "-m", "minikafka.cli", "cluster", "up", "--brokers", "1",
                             "--controllers", "1", "--dir", str(target)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    children = []
    try:
        first = proc.stdout.readline()
        assert first.startswith("bootstrap servers: "), proc.stderr.read() if proc.poll() is not None else first
        children = children_of(proc.pid)
        assert target.is_dir() and any(target.iterdir())
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        assert target.is_dir()  # a directory the user named is kept
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_all(children)
        proc.wait()
