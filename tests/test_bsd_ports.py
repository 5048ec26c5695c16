"""The real-process cluster's port reservation under BSD's socket rules (macOS), run on Linux.

``launch()`` keeps every port it hands out bound by a reservation socket, and each node binds
its listener next to that reservation (``minikafka.wire.process``'s header). Linux and BSD
disagree on when that second bind is allowed; macOS cannot run here, so
``tests/fixtures/bsd_sockets/sitecustomize.py`` makes every Python process started with that
folder on ``PYTHONPATH`` bind by BSD's rule (its header says how, and why it is never looser
than BSD). The first tests show the stand-in refuses what BSD refuses and allows what BSD
allows; the last runs a whole cluster under it: kafka-python produces and consumes, a broker
and a controller are killed and restarted on their reserved ports.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from minikafka.wire import process

pytest.importorskip("kafka")  # kafka-python==3.0.12 (the dev and course extras pin it)

from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402

from wire_helpers import poll_until, tolerant, wait_until  # noqa: E402

STAND_IN = Path(__file__).resolve().parent / "fixtures" / "bsd_sockets"

pytestmark = pytest.mark.skipif(not hasattr(socket, "SO_REUSEPORT") or not sys.platform.startswith("linux"),
                                reason="the BSD stand-in runs on Linux, whose SO_REUSEPORT rule it borrows")


def _stand_in():
    spec = importlib.util.spec_from_file_location("bsd_sockets", STAND_IN / "sitecustomize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bsd_rule(monkeypatch):
    """BSD's bind rule in this process and in every Python process it starts."""
    module = _stand_in()
    monkeypatch.setattr(socket.socket, "bind", module._bsd_bind)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(STAND_IN), os.environ.get("PYTHONPATH")])))
    return module


def _linux_style_reservation() -> socket.socket:
    """The reservation as minikafka made it before SO_REUSEPORT: bound, then SO_REUSEADDR."""
    s = socket.socket()
    s.bind((process.LOCALHOST, 0))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return s


def _server_socket(port: int, *, reuse_port: bool) -> socket.socket:
    """A listener bound as ``NodeRuntime``'s (asyncio's ``reuse_address=True``, and ``reuse_port``)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        s.bind((process.LOCALHOST, port))
        s.listen()
    except OSError:
        s.close()
        raise
    return s


def test_linux_lets_a_reuseaddr_server_bind_next_to_a_reservation_and_the_stand_in_does_not(bsd_rule):
    held = _linux_style_reservation()
    try:
        port = held.getsockname()[1]
        bsd_rule.uninstall()  # Linux's own rule: the design before this test's module relied on it
        _server_socket(port, reuse_port=False).close()
        bsd_rule.install()  # BSD's: refused, as macOS refuses it
        with pytest.raises(OSError) as refused:
            _server_socket(port, reuse_port=False)
        assert refused.value.errno == errno.EADDRINUSE
        with pytest.raises(OSError):  # SO_REUSEPORT on one side only is not enough either
            _server_socket(port, reuse_port=True)
    finally:
        held.close()


def test_under_the_stand_in_a_launched_node_binds_next_to_its_reservation_and_a_hand_started_one_does_not(bsd_rule):
    held = process.reserve_port()
    try:
        port = held.getsockname()[1]
        with _server_socket(port, reuse_port=True) as listener:  # as a launched node binds
            with socket.create_connection((process.LOCALHOST, port), timeout=5):
                pass
            with pytest.raises(OSError):  # a second server on a port already served: refused
                _server_socket(port, reuse_port=False)
        with pytest.raises(OSError):  # a hand-started server (no SO_REUSEPORT) next to a reservation
            _server_socket(port, reuse_port=False)
        with pytest.raises(OSError):  # the reservation still holds once the node is gone
            process.reserve_port(process.LOCALHOST, port)
        with pytest.raises(ConnectionRefusedError):  # and a dead node's port refuses clients
            socket.create_connection((process.LOCALHOST, port), timeout=5).close()
        assert listener.fileno() == -1
    finally:
        held.close()


def test_a_process_started_with_the_stand_in_binds_by_bsd_rule(bsd_rule):
    said = subprocess.run([sys.executable, "-c",
                           "import socket; print(getattr(socket.socket.bind, 'bsd_rule', False))"],
                          capture_output=True, text=True, timeout=60)
    assert said.stdout.strip() == "True", said.stderr


def test_a_launched_cluster_keeps_its_ports_under_bsd_rules(bsd_rule):
    """Every node binds next to its reservation, restarts on the same port, and in between
    nothing else can take the port (fails before SO_REUSEPORT: each node's bind is refused)."""
    topic = f"bsd-{uuid.uuid4().hex[:8]}"
    with process.launch(brokers=2, startup_timeout_s=60) as c:
        p = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all")
        p.send(topic, b"before").get(timeout=30)
        c.kill(2)
        for port in (c.ports[2], c.inter_broker_ports[2]):
            with pytest.raises(OSError):  # held for the restart, by BSD's rule too
                process.reserve_port(c.host, port).close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((c.host, c.ports[2]), timeout=5).close()
        c.restart(2)
        c.kill(3001)
        c.restart(3001)
        assert all(c.alive(n) for n in c.node_ids)
        wait_until(lambda: tolerant(lambda: p.send(topic, b"after").get(timeout=10)), 60, "a send after the restarts")
        p.close()
        consumer = KafkaConsumer(bootstrap_servers=f"{c.host}:{c.ports[2]}", group_id=None,  # the restarted one
                                 auto_offset_reset="earliest", enable_auto_commit=False)
        try:
            consumer.assign([TopicPartition(topic, 0)])
            got = poll_until(consumer, 2, timeout_s=60)
        finally:
            consumer.close()
        assert [r.value for r in got][:1] == [b"before"] and b"after" in [r.value for r in got]
