"""A real multi-process cluster on this machine: one OS process per broker and per controller.

Theory of operation
-------------------
``minikafka server`` runs one broker (``Broker`` in a ``NodeRuntime``) and ``minikafka
controller`` one voter of the metadata quorum (``QuorumController``); ``launch(brokers=3)``
starts three controllers (node ids 3000-3002) and N brokers as child processes of the Python
process that calls it, waits until every broker is registered, and returns a
``LocalCluster``: ``bootstrap_servers`` for any Kafka client, ``kill`` (SIGKILL: the process
dies at once, its connections are reset by the kernel, its log directory stays), ``restart``
(a new process on the same port and directory: it recovers its logs and rejoins),
``pause``/``resume`` (SIGSTOP/SIGCONT: alive but silent, as a long GC pause), and ``close``;
each takes any node id, a broker's or a controller's.

Why dedicated controllers, not combined broker+controller processes: a lecture kills a
controller and shows that no broker noticed, and kills a majority of the quorum and shows
that the data plane goes on while metadata changes fail; with combined processes every
controller kill would also kill a broker and blur both lessons (Kafka, too, recommends
dedicated controllers in production). ``minikafka server`` alone, without
``--controller-quorum-voters``, runs Kafka 4's quickstart shape instead: one process in
combined mode (``run_combined``). Every node keeps its state on disk, so restarting a whole
cluster on the same ``dir`` brings every topic and record back.

No process outlives the one that launched it: ``close()`` runs at exit, and each child also
holds a *lifeline*, the read end of a pipe whose only write end stays in the launching
process: when that process dies, however it dies (``os._exit``, SIGKILL), the kernel closes
the write end, the child reads end-of-file and exits. (A process the launcher forks without
exec, as multiprocessing's "fork" does, holds a copy of the write end until it exits too.)
``PR_SET_PDEATHSIG`` alone would not do: it fires when the *thread* that started the child
ends, so a cluster launched from a worker thread would die with the thread. It is added when
the launcher is its main thread, for a paused (SIGSTOPped) child, which cannot read its
lifeline but can be killed; and it is what a ``minikafka server --exit-with-parent`` started
by something else relies on (a watch on the parent's pid where prctl does not exist).

Listeners and the cluster secret: each broker listens for clients on ``ports[b]`` (the
bootstrap servers) and for the other nodes on ``inter_broker_ports[b]`` (registered with
the controller; followers fetch there); each controller only for the other nodes, on
``ports[c]`` (the voters' addresses). A client's private frame or replica Fetch on a client
port closes its connection. Every inter-node connection proves it knows the *cluster
secret*, made at each launch (``minikafka.wire.auth``): written to ``dir/cluster.secret``
(mode 0600) and handed to the children in ``MINIKAFKA_CLUSTER_SECRET``, never on a command
line; a restarted node gets the same one. A node started by hand is given it with
``--cluster-secret-file``; the lone ``minikafka server`` in combined mode makes its own.

A student's rules (``launch(rules={"high_watermark": my_fn})``, ``minikafka.rules``) are
pickled by value into ``dir/rules.pickle`` and every node process builds its ``Rules`` from
them as the simulated cluster does, guard included (``node_rules``); a rule that breaks stops
its node, which writes the rule's message to ``dir/broker-N.rule-error`` and its log, and
``check()`` (the health check) raises ``NodeStopped`` naming the node and the rule.

Settings are Kafka's names, given to every process (``config=`` or ``--override``): the
broker's and topics' defaults, and the socket server's (``NodeRuntime``):
``socket.request.max.bytes`` (a request frame larger than that closes its connection),
``queued.max.requests`` and ``queued.max.request.bytes`` (a connection holding that much
unanswered is not read from until it holds less; a client's connection is read one request
at a time anyway, as Kafka's; the second also bounds the memory all
connections' large frames may take while they are read: 4 x ``socket.request.max.bytes``
when it is -1); ``max.connections``, ``max.connections.per.ip`` and
``max.connections.per.ip.overrides`` (``host:count,...``), Kafka's connection quotas (see
``NodeRuntime``).

Everything binds 127.0.0.1 unless told otherwise. Log directories live under ``dir`` (a
temporary directory by default, removed by ``close()``), one per node, as in the
simulated ``Cluster``; next to them, each process's output (``out_file``: ``broker-1.out``,
``controller-3000.out``), where its warnings go, a closed connection's reason among them. A
process that fails to start is reported with the last lines it wrote there.

Ports are *reserved* for the cluster's lifetime: the launcher keeps a socket bound (not
listening) on every port it hands out, so no other bind(0) and no outgoing connection's
ephemeral port can take one between the choice and the child's bind, nor while a killed node
waits for ``restart``. A node binds its listener on the same address and port next to the
reservation, and a connection to a dead node's port is still refused (the reservation never
listens), as a client expects of a broker that is down. Two socket rules decide whether that
second bind is allowed:

- Linux lets a socket with ``SO_REUSEADDR`` bind a port that another ``SO_REUSEADDR``
  socket holds, as long as that one does not listen;
- BSD (macOS, FreeBSD) does not: there ``SO_REUSEADDR`` only overlooks connections on the
  port (TIME_WAIT), and a second socket may bind a port another socket holds only if *both*
  set ``SO_REUSEPORT`` (and, as on Linux, belong to the same user).

So the reservation sets ``SO_REUSEADDR`` and ``SO_REUSEPORT``, and a launched node sets both
on its listeners (the launcher tells it so in ``MINIKAFKA_PORTS_RESERVED``): one code path,
allowed by both rules, and exercised by every launch on Linux. Only a launched node does: a
``minikafka server`` started by hand sets ``SO_REUSEADDR`` alone, so a second server on a port
that one already listens on still fails with "address in use" instead of sharing the port
(with ``SO_REUSEPORT`` on both, Linux would balance connections between them). The same-user
rule keeps the students of a shared machine apart: one cannot bind a port another reserved.
Why not the other designs: handing each node an already-bound socket (``pass_fds``) leaves
the launcher holding a socket that listens once the node has called listen(), so a dead
node's port would accept connections that nobody answers; a node binding port 0 and
reporting it back could not get the same port back at ``restart``.
(``tests/test_bsd_ports.py`` runs a cluster under BSD's rule, emulated on Linux.)
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Mapping

from minikafka import platform, scratch
from minikafka.errors import IllegalArgumentError, KafkaTimeoutError
from minikafka.wire import auth, node_rules

log = logging.getLogger("minikafka.wire")

LOCALHOST = "127.0.0.1"
LIFELINE_ENV = "MINIKAFKA_LIFELINE_FD"  # the child's end of the launching process's lifeline
PORTS_RESERVED_ENV = "MINIKAFKA_PORTS_RESERVED"  # "1": the launcher holds this node's ports (SO_REUSEPORT)
HAS_REUSE_PORT = hasattr(socket, "SO_REUSEPORT")  # BSD, macOS, Linux; not Windows
MAIN_THREAD_ENV = "MINIKAFKA_LAUNCHED_FROM_MAIN_THREAD"  # "1": PR_SET_PDEATHSIG is safe too
# The socket server's settings (NodeRuntime's), not the node's:
SOCKET_REQUEST_MAX_BYTES = "socket.request.max.bytes"
QUEUED_MAX_REQUESTS = "queued.max.requests"
QUEUED_MAX_REQUEST_BYTES = "queued.max.request.bytes"
MAX_CONNECTIONS = "max.connections"
MAX_CONNECTIONS_PER_IP = "max.connections.per.ip"
MAX_CONNECTIONS_PER_IP_OVERRIDES = "max.connections.per.ip.overrides"


# --- inside a child process ---------------------------------------------------------------------------


def die_with_parent() -> None:
    """Exit when the process that launched this one dies: at end-of-file on the lifeline
    ``LocalCluster`` passes (``MINIKAFKA_LIFELINE_FD``), and by the kernel's
    ``PR_SET_PDEATHSIG`` (Linux) where that is safe: without a lifeline, or when the launcher
    started us from its main thread (then the signal also kills a paused, SIGSTOPped child,
    which cannot read its lifeline). Where prctl does not exist, and there is no lifeline,
    by polling the parent's pid."""
    lifeline = os.environ.pop(LIFELINE_ENV, None)
    from_main_thread = os.environ.pop(MAIN_THREAD_ENV, None) == "1"
    if lifeline is not None and lifeline.isdigit():
        fd = int(lifeline)

        def hold() -> None:
            try:
                while os.read(fd, 1):  # nobody writes: returns b"" once the launcher is gone
                    pass
            except OSError:
                pass
            os._exit(1)

        threading.Thread(target=hold, daemon=True, name="lifeline").start()
        if from_main_thread:
            _kill_me_with_parent()
        return
    if not _kill_me_with_parent():
        parent = os.getppid()

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def _kill_me_with_parent() -> bool:
    """Ask the kernel to SIGKILL this process when the thread that started it ends (Linux's
    ``PR_SET_PDEATHSIG``); False where that cannot be asked."""
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the parent died before we asked
        os._exit(1)
    return True


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise IllegalArgumentError(f"expected HOST:PORT, not {text!r}")
    return host or LOCALHOST, int(port)


def parse_config(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise IllegalArgumentError(f"expected key=value, not {item!r}")
        out[key.strip()] = value.strip()
    return out


def split_config(config: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, int]]:
    """The node's settings, and the socket server's (``NodeRuntime``'s keyword arguments),
    which ``BrokerConfig`` does not know: ``socket.request.max.bytes`` (Kafka's default,
    100 MiB), ``queued.max.requests`` (500) and ``queued.max.request.bytes`` (-1), the last
    two per connection here, the last also the pool for large frames being read (see
    ``NodeRuntime``)."""
    from minikafka.wire.runtime import DEFAULT_MAX_REQUEST_BYTES, DEFAULT_QUEUED_MAX_REQUESTS, NO_LIMIT

    node_config = dict(config or {})
    server = {}
    for key, kwarg, default, low in (
            (SOCKET_REQUEST_MAX_BYTES, "max_request_bytes", DEFAULT_MAX_REQUEST_BYTES, 1),
            (QUEUED_MAX_REQUESTS, "queued_max_requests", DEFAULT_QUEUED_MAX_REQUESTS, 1),
            (QUEUED_MAX_REQUEST_BYTES, "queued_max_request_bytes", -1, -1),
            (MAX_CONNECTIONS, "max_connections", NO_LIMIT, 0),
            (MAX_CONNECTIONS_PER_IP, "max_connections_per_ip", NO_LIMIT, 0)):
        raw = node_config.pop(key, default)
        try:
            value = int(raw)
        except (TypeError, ValueError):
            value = low - 1
        if value < low or (value == 0 and low != 0):
            raise IllegalArgumentError(f"{key} must be an integer >= {max(low, 1) if low else 0}"
                                       f"{' (or -1)' if low < 0 else ''}, not {raw!r}")
        server[kwarg] = value
    server["max_connections_per_ip_overrides"] = parse_ip_overrides(
        node_config.pop(MAX_CONNECTIONS_PER_IP_OVERRIDES, ""))
    return node_config, server


def parse_ip_overrides(text: Any) -> dict[str, int]:
    """Kafka's ``max.connections.per.ip.overrides``: ``host:count,...`` (a host name is looked
    up once, here, as Kafka's ``InetAddress.getByName``), an address to its limit."""
    if isinstance(text, Mapping):
        text = ",".join(f"{host}:{count}" for host, count in text.items())
    out: dict[str, int] = {}
    for item in str(text or "").split(","):
        if not item.strip():
            continue
        host, sep, count = item.strip().rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise IllegalArgumentError(f"{MAX_CONNECTIONS_PER_IP_OVERRIDES}: expected HOST:COUNT "
                                       f"(e.g. 127.0.0.1:100), not {item.strip()!r}")
        try:
            address = socket.getaddrinfo(host.strip("[]"), None)[0][4][0]
        except OSError as e:
            raise IllegalArgumentError(f"{MAX_CONNECTIONS_PER_IP_OVERRIDES}: cannot resolve {host!r} ({e})") from None
        out[address] = int(count)
    return out


def parse_voters(text: str) -> dict[int, tuple[str, int]]:
    """Kafka's ``controller.quorum.voters``: ``3000@127.0.0.1:9093,3001@127.0.0.1:9094``."""
    voters: dict[int, tuple[str, int]] = {}
    for item in (text or "").split(","):
        node, sep, address = item.strip().partition("@")
        if not sep or not node.strip().lstrip("-").isdigit():
            raise IllegalArgumentError(f"expected ID@HOST:PORT (e.g. 3000@127.0.0.1:9093), not {item.strip()!r}")
        voters[int(node)] = parse_address(address)
    if not voters:
        raise IllegalArgumentError("controller.quorum.voters names no voter")
    return voters


def format_voters(voters: Mapping[int, tuple[str, int]]) -> str:
    return ",".join(f"{node}@{host}:{port}" for node, (host, port) in sorted(voters.items()))


def _serve(*runtimes) -> None:
    """Run one or more nodes (combined mode: a broker and a controller) on one event loop."""
    async def main() -> None:
        for runtime in runtimes:
            await runtime.start()
        await asyncio.gather(*(runtime.serve() for runtime in runtimes))

    from minikafka.wire.runtime import NodeHalted

    try:
        asyncio.run(main())
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: leave quietly
        pass
    except NodeHalted as e:  # it said why (logged); the process ends, as Kafka's Exit.halt(1)
        raise SystemExit(1) from e


def _broker_runtime(broker_id: int, host: str, port: int, inter_broker_port: int, log_dir: str | Path,
                    voters: Mapping[int, tuple[str, int]], node_config: Mapping[str, Any], server: Mapping[str, int],
                    secret: bytes, rules: Any = None):
    from minikafka.broker.broker import Broker
    from minikafka.broker.config import BrokerConfig
    from minikafka.rules import REFERENCE
    from minikafka.wire.codec import SPLICED_RECORDS_BYTES
    from minikafka.wire.runtime import CLIENT_LISTENER, NodeRuntime, wall_clock_ms

    # Record sets the codec would splice into an answer uncopied are left in their segment
    # files, for the runtime to sendfile.
    broker = Broker(broker_id, log_dir, BrokerConfig(node_config), incarnation=wall_clock_ms(),
                    advertised=(host, port), inter_broker_port=inter_broker_port,
                    controllers=tuple(sorted(voters)), file_records_min_bytes=SPLICED_RECORDS_BYTES,
                    rules=REFERENCE if rules is None else rules)
    # Other brokers are reached on their inter-broker listeners, as registered.
    return NodeRuntime(broker, host, port, addresses=dict(voters),
                       context=lambda: broker_context(broker, host, port),
                       resolve=lambda node: broker.inter_broker_endpoints.get(node), **server,
                       listener=CLIENT_LISTENER, inter_node_port=inter_broker_port, secret=secret)


def _controller_runtime(node_id: int, host: str, port: int, log_dir: str | Path,
                        voters: Mapping[int, tuple[str, int]], node_config: Mapping[str, Any], server: Mapping[str, int],
                        secret: bytes, rules: Any = None):
    from minikafka.broker.config import BrokerConfig
    from minikafka.controller import QuorumController
    from minikafka.rules import REFERENCE
    from minikafka.wire.runtime import INTER_NODE_LISTENER, NodeRuntime

    controller = QuorumController(log_dir, BrokerConfig(node_config), node_id=node_id, voters=tuple(sorted(voters)),
                                  rules=REFERENCE if rules is None else rules)

    def resolve(node):  # brokers register their address; an unregistered one is answered on its connection
        reg = controller.image.brokers.get(node)
        return (reg.host, reg.inter_broker_port) if reg is not None and reg.host and reg.inter_broker_port else None

    # A controller has one listener, the controller listener: clients never reach it
    # (brokers forward what a client asks of the quorum, DescribeQuorum included).
    return NodeRuntime(controller, host, port, addresses={v: a for v, a in voters.items() if v != node_id},
                       resolve=resolve, **server, listener=INTER_NODE_LISTENER, secret=secret)


def _need_secret(secret: bytes | None, who: str) -> bytes:
    if secret is None:
        raise IllegalArgumentError(
            f"{who} of a multi-process cluster needs the cluster secret, to admit only the cluster's own "
            f"nodes on its inter-node listener: give --cluster-secret-file FILE (hex, as `minikafka cluster up` "
            f"writes it to DIR/{auth.SECRET_FILE}) or ${auth.SECRET_ENV}")
    return secret


def run_broker(broker_id: int, host: str, port: int, log_dir: str | Path, voters: Mapping[int, tuple[str, int]],
               config: Mapping[str, Any] | None = None, *, inter_broker_port: int | None = None,
               secret: bytes | None = None, rules: Any = None) -> None:
    """Serve one broker until killed (``minikafka server --controller-quorum-voters ...``):
    clients on ``port``, the other nodes on ``inter_broker_port`` (a free one if None; it is
    registered with the controller, so followers find it). ``rules``: the ``Rules`` it runs on
    (``node_rules``; Kafka's if None)."""
    node_config, server = split_config(config)
    server["reuse_port"] = ports_reserved_by_launcher()
    secret = _need_secret(secret, f"broker {broker_id}")
    inter = 0 if inter_broker_port is None else inter_broker_port  # 0: the runtime binds a free one
    _serve(_broker_runtime(broker_id, host, port, inter, log_dir, voters, node_config, server, secret, rules))


def run_controller(node_id: int, host: str, port: int, log_dir: str | Path, voters: Mapping[int, tuple[str, int]],
                   config: Mapping[str, Any] | None = None, *, secret: bytes | None = None, rules: Any = None) -> None:
    """Serve one controller (a voter of the metadata quorum) until killed (``minikafka controller``);
    ``rules`` as for ``run_broker``."""
    node_config, server = split_config(config)
    server["reuse_port"] = ports_reserved_by_launcher()
    if node_id not in voters:
        raise IllegalArgumentError(f"controller {node_id} is not one of the voters {sorted(voters)}")
    secret = _need_secret(secret, f"controller {node_id}")
    _serve(_controller_runtime(node_id, host, port, log_dir, voters, node_config, server, secret, rules))


def run_combined(broker_id: int, host: str, port: int, controller_port: int, log_dir: str | Path,
                 config: Mapping[str, Any] | None = None, *, secret: bytes | None = None, rules: Any = None,
                 controller_rules: Any = None) -> None:
    """Kafka's combined mode (``process.roles=broker,controller``): one process, a broker on
    ``port`` and the only voter of a one-node metadata quorum on ``controller_port``. The
    controller keeps the metadata log in ``log_dir/controller``; the broker its copy and its
    partitions in ``log_dir``: the same command on the same directory brings everything back.
    The broker's inter-broker listener takes a free port; the cluster secret is made here
    (a new one per run: both nodes live in this process) unless given."""
    from minikafka.messages import CONTROLLER_ID

    node_config, server = split_config(config)
    server["reuse_port"] = ports_reserved_by_launcher()
    secret = auth.generate() if secret is None else secret
    voters = {CONTROLLER_ID: (host, controller_port)}
    controller = _controller_runtime(CONTROLLER_ID, host, controller_port, Path(log_dir) / "controller", voters,
                                     node_config, server, secret, controller_rules)
    broker = _broker_runtime(broker_id, host, port, 0, log_dir, voters, node_config, server, secret, rules)
    _serve(controller, broker)


def broker_context(broker, host: str, port: int) -> dict:
    """What the codec needs to describe the cluster to a client: every live broker's address."""
    endpoints = dict(broker.endpoints)
    endpoints.setdefault(broker.broker_id, (host, port))
    return {"brokers": endpoints, "cluster_id": "minikafka", "broker_id": broker.broker_id}


# --- in the parent: LocalCluster --------------------------------------------------------------------------


def free_port(host: str = LOCALHOST) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_ports(n: int, host: str = LOCALHOST) -> list[int]:
    """``n`` free ports, all different: ``free_port`` twice in a row may name the same port while
    nothing has bound it yet (a CI run's Spark master UI and a worker UI once did)."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_port(host)
        if port not in ports:
            ports.append(port)
    return ports


def reserve_port(host: str = LOCALHOST, port: int = 0) -> socket.socket:
    """A socket bound to ``port`` (a free one if 0) that never listens: while it is open, the
    kernel hands that port to no other bind(0) and to no outgoing connection, while a server
    of the same user binding it with SO_REUSEADDR and SO_REUSEPORT (as launched nodes do,
    see the module's header) still can. Bound before the options are set, so that bind(0)
    picks a port nobody else holds, and a given port only if nobody holds it."""
    s = socket.socket()
    try:
        s.bind((host, port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if HAS_REUSE_PORT:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    except OSError:
        s.close()
        raise
    return s


def ports_reserved_by_launcher() -> bool:
    """Whether this process's ports are held by its launcher's reservations (``reserve_port``),
    so that its listeners must set SO_REUSEPORT to bind next to them (BSD's rule)."""
    return os.environ.pop(PORTS_RESERVED_ENV, None) == "1" and HAS_REUSE_PORT


def port_in_use(host: str, port: int) -> bool:
    """Whether something already listens on (host, port): bound as our servers bind (with
    SO_REUSEADDR, so a port in TIME_WAIT from a cluster just stopped still counts as free)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def wait_for_port(host: str, port: int, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise KafkaTimeoutError(f"the process for {host}:{port} exited with code {proc.returncode}")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise KafkaTimeoutError(f"nothing listens on {host}:{port} after {timeout_s} s")


class LocalCluster:
    """A metadata quorum of controller processes and N broker processes on this machine (see ``launch``)."""

    def __init__(self, brokers: int = 3, *, controllers: int = 3, base_port: int | None = None,
                 host: str = LOCALHOST, dir: str | Path | None = None, config: Mapping[str, Any] | None = None,
                 startup_timeout_s: float = 60.0, rules: Mapping[str, Any] | None = None) -> None:
        from minikafka.messages import controller_ids
        from minikafka.rules import validate as validate_rules

        platform.require_real_processes("launch() and `minikafka cluster up`")  # before anything starts
        if not isinstance(brokers, int) or brokers < 1:
            raise IllegalArgumentError(f"a cluster needs at least 1 broker, not {brokers!r}")
        if not isinstance(controllers, int) or controllers < 1:
            raise IllegalArgumentError(f"a cluster needs at least 1 controller, not {controllers!r}")
        self.rules = validate_rules(rules)  # {rule name: the student's function}; {}: Kafka's
        shipped = node_rules.pickled(self.rules, launched_at_ms=time.time_ns() // 1_000_000)  # before anything is held
        self.host = host
        self.config = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in (config or {}).items()}
        self.broker_ids = list(range(1, brokers + 1))
        self.controller_ids = list(controller_ids(controllers))
        # ports: each broker's client listener and each controller's controller listener;
        # inter_broker_ports: each broker's inter-broker listener (followers fetch there).
        self._reserved: list[socket.socket] = []
        if base_port is None:
            def take() -> int:
                self._reserved.append(reserve_port(host))
                return self._reserved[-1].getsockname()[1]

            self.ports = {n: take() for n in self.broker_ids + self.controller_ids}
            self.inter_broker_ports = {b: take() for b in self.broker_ids}
        else:
            self.ports = {b: base_port + b - 1 for b in self.broker_ids}
            self.ports.update({c: base_port + brokers + i for i, c in enumerate(self.controller_ids)})
            after = base_port + brokers + controllers
            self.inter_broker_ports = {b: after + b - 1 for b in self.broker_ids}
            # Checked before spawning: a process that dies of EADDRINUSE would leave the
            # bootstrap servers pointing at whatever else listens there (another cluster?).
            every = sorted([*self.ports.values(), *self.inter_broker_ports.values()])
            busy = [port for port in every if port_in_use(host, port)]
            if busy:
                raise IllegalArgumentError(
                    f"port{'s' if len(busy) > 1 else ''} {', '.join(map(str, busy))} on {host} "
                    f"{'are' if len(busy) > 1 else 'is'} already in use (another cluster still running?): "
                    f"stop it, or choose another base port (this cluster needs {base_port}-{every[-1]})")
            try:
                for port in every:
                    self._reserved.append(reserve_port(host, port))
            except OSError as e:  # taken between the check and now
                self._release_ports()
                raise IllegalArgumentError(f"a port of {base_port}-{every[-1]} on {host} is held by another process "
                                           f"(another cluster starting?) ({e}): choose another base port") from None
        self._own_dir = dir is None
        # Its own folder (which holds the secret and the pickled rules) is marked as this
        # process's (minikafka.scratch): the next launch() removes it if this one is killed.
        self.dir = scratch.make("minikafka-wire-") if dir is None else Path(dir)
        self.dir.mkdir(parents=True, exist_ok=True)  # a new --dir is made, as Kafka makes log.dirs
        self.startup_timeout_s = startup_timeout_s
        # The cluster secret: new for every launch (every process starts with it; a restarted
        # one is handed the same), in the environment of the children, and in DIR/cluster.secret
        # (mode 0600) for a node started by hand to join.
        self._secret = auth.generate()
        self.secret_file = auth.save(self._secret, self.dir)
        # The student's rules, pickled once for every node, restarts included (node_rules.py).
        self.rules_file = node_rules.save(shipped, self.dir)
        self._procs: dict[Any, subprocess.Popen] = {}
        self._closed = False
        # The lifeline: children inherit only the read end; the write end (not inheritable,
        # as os.pipe makes it) lives and dies with this process.
        self._lifeline_read, self._lifeline_write = os.pipe()
        atexit.register(self.close)
        try:
            for node in self.controller_ids + self.broker_ids:  # all at once: each takes a while to import
                self._spawn(node)
            for node in self.controller_ids + self.broker_ids:
                self._wait_listening(node)
            self.wait_until_ready()
        except BaseException as e:  # one failed to start: stop the ones that did, say what the dead ones wrote
            said = self._last_words()
            stopped = self._stopped_by_rules()
            self.close()
            if stopped and not isinstance(e, node_rules.NodeStopped):
                raise stopped[0] from None
            if isinstance(e, KafkaTimeoutError) and said:
                raise KafkaTimeoutError("\n".join([str(e), said])) from None
            raise

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.host}:{self.ports[b]}" for b in self.broker_ids)

    @property
    def voters(self) -> dict[int, tuple[str, int]]:
        """``controller.quorum.voters``: each controller's id and address."""
        return {c: (self.host, self.ports[c]) for c in self.controller_ids}

    @property
    def node_ids(self) -> list[int]:
        return self.broker_ids + self.controller_ids

    def _command(self, who: int) -> list[str]:
        base = [sys.executable, "-m", "minikafka.cli"]
        extra = [arg for k, v in sorted(self.config.items()) for arg in ("--override", f"{k}={v}")]
        voters = ["--controller-quorum-voters", format_voters(self.voters)]
        rules = [] if self.rules_file is None else ["--rules-file", str(self.rules_file)]
        if who in self.controller_ids:
            return base + ["controller", "--node-id", str(who), "--host", self.host, "--port", str(self.ports[who]),
                           "--log-dir", str(self.dir / f"controller-{who}"), *voters, *extra, "--exit-with-parent",
                           *rules]
        return base + ["server", "--broker-id", str(who), "--host", self.host, "--port", str(self.ports[who]),
                       "--inter-broker-port", str(self.inter_broker_ports[who]), "--log-dir", str(self.dir / f"broker-{who}"), *voters, *extra, "--exit-with-parent",
                       *rules]

    def out_file(self, who: Any) -> Path:
        """Where a process's stdout and stderr go (its log: warnings, closed connections)."""
        who = self._node(who)
        return self.dir / (f"controller-{who}.out" if who in self.controller_ids else f"broker-{who}.out")

    def _start(self, who: int) -> None:
        self._spawn(who)
        self._wait_listening(who)

    def _error_file(self, who: int) -> Path:
        return node_rules.error_file(self.dir, who, controller=who in self.controller_ids)

    def stopped_by_rule(self, who: Any) -> "node_rules.NodeStopped | None":
        """Why a node stopped, if a student's rule stopped it (``launch(rules=...)``): a
        ``NodeStopped`` carrying the rule's message, as the node wrote it; else None."""
        who = self._node(who)
        if who not in self._procs or self.alive(who):
            return None
        return node_rules.read_stopped(self._error_file(who), who)

    def _stopped_by_rules(self) -> list:
        return [e for e in (self.stopped_by_rule(n) for n in self._procs) if e is not None]

    def check(self) -> None:
        """The health check: raise ``NodeStopped`` (the node, the rule, the rule's message) if a
        student's rule stopped a node; nothing if none did (a node killed on purpose is no
        failure)."""
        stopped = self._stopped_by_rules()
        if stopped:
            raise stopped[0]

    def _spawn(self, who: int) -> None:
        self._error_file(who).unlink(missing_ok=True)  # a restarted node starts with a clean slate
        out = open(self.out_file(who), "ab")
        env = {**os.environ, LIFELINE_ENV: str(self._lifeline_read), auth.SECRET_ENV: self._secret.hex(),
               PORTS_RESERVED_ENV: "1",
               MAIN_THREAD_ENV: "1" if threading.current_thread() is threading.main_thread() else "0"}
        proc = subprocess.Popen(self._command(who), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=False,
                                pass_fds=(self._lifeline_read,), env=env)
        out.close()
        self._procs[who] = proc

    def _wait_listening(self, who: int) -> None:
        try:
            wait_for_port(self.host, self.ports[who], self.startup_timeout_s, self._procs[who])
        except KafkaTimeoutError as e:  # say why: the rule that stopped it, or the last lines it wrote
            self.check()
            raise KafkaTimeoutError("\n".join([str(e), *self._tail(who)])) from None

    def _tail(self, who: int, lines: int = 5) -> list[str]:
        try:
            return self.out_file(who).read_text(errors="replace").strip().splitlines()[-lines:]
        except OSError:
            return []

    def _last_words(self) -> str:
        """What each process that has exited wrote last (read before ``close`` removes them)."""
        said = []
        for who, proc in self._procs.items():
            if proc.poll() is not None:
                name = self.out_file(who).name
                said.append(f"{name} (exit code {proc.returncode}):")
                said.extend(f"  {line}" for line in self._tail(who, 10))
        return "\n".join(said)

    def _release_ports(self) -> None:
        for s in self._reserved:
            s.close()
        self._reserved = []

    def wait_until_ready(self, timeout_s: float | None = None) -> None:
        """Wait until every running broker is registered and unfenced: each one's Metadata
        lists all the running brokers, at the addresses they listen on now (so a topic with
        RF = N can be created at once, and no client is sent to where a broker of an earlier
        run on the same ``dir`` listened)."""
        from minikafka.wire.admin_probe import live_endpoints

        deadline = time.monotonic() + (self.startup_timeout_s if timeout_s is None else timeout_s)
        want = {b: (self.host, self.ports[b]) for b in self.broker_ids if self.alive(b)}
        seen: dict[int, dict | None] = {}
        while time.monotonic() < deadline:
            seen = {b: live_endpoints(self.host, self.ports[b]) for b in want}
            if all(v == want for v in seen.values()):
                return
            dead = [b for b in want if not self.alive(b)]
            self.check()  # a student's rule stopped a node (a controller too): say which, and why
            if dead:  # it will never register: say so now, with what it wrote
                raise KafkaTimeoutError(f"broker {dead[0]} exited with code {self._proc(dead[0]).returncode} "
                                        f"before it registered:\n" + "\n".join(self._tail(dead[0], 10)))
            time.sleep(0.05)
        raise KafkaTimeoutError(f"the brokers did not all register with the controller quorum within "
                                f"{timeout_s or self.startup_timeout_s} s (each broker's view of the live brokers: "
                                f"{seen}); see the *.out files in {self.dir}")

    def _node(self, who: Any) -> int:
        if who == "controller":  # the name of the single controller before KRaft
            return self.controller_ids[0]
        if who not in self.broker_ids and who not in self.controller_ids:
            raise IllegalArgumentError(f"no node {who!r}; brokers are {self.broker_ids}, "
                                       f"controllers {self.controller_ids}")
        return who

    def _proc(self, who: Any) -> subprocess.Popen:
        return self._procs[self._node(who)]

    def pid(self, who: Any) -> int:
        """The OS process id of a broker or a controller."""
        return self._proc(who).pid

    def alive(self, who: Any) -> bool:
        return self._proc(who).poll() is None

    def kill(self, who: Any) -> None:
        """SIGKILL a broker's or a controller's process (its log directory stays, for ``restart``)."""
        proc = self._proc(who)
        if proc.poll() is not None:
            raise IllegalArgumentError(f"node {who} is not running")
        platform.resume(proc)  # a paused process must be able to die
        proc.kill()
        proc.wait()

    def restart(self, who: Any) -> None:
        """Start a killed broker or controller again: same port, same log directory. A broker's
        restart returns once it is back in the cluster (it has caught up with the metadata log
        and been unfenced: its own Metadata lists it), so that it counts at once, e.g. for a
        new topic's replication factor; or after ``startup_timeout_s`` if the controller quorum
        cannot unfence it (no majority), with a warning."""
        from minikafka.wire.admin_probe import live_brokers

        if self.alive(who):
            raise IllegalArgumentError(f"node {who} is running; kill it first")
        node = self._node(who)
        self._start(node)
        if node in self.broker_ids:
            deadline = time.monotonic() + self.startup_timeout_s
            while node not in (live_brokers(self.host, self.ports[node]) or []):
                self.check()
                if time.monotonic() > deadline or not self.alive(node):
                    log.warning("broker %s restarted but is not unfenced after %s s", node, self.startup_timeout_s)
                    return
                time.sleep(0.05)

    def pause(self, who: Any) -> None:
        """SIGSTOP: the process is alive but does nothing (no heartbeats, no answers)."""
        platform.pause(self._proc(who))

    def resume(self, who: Any) -> None:
        platform.resume(self._proc(who))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for proc in self._procs.values():
            if proc.poll() is None:
                platform.resume(proc)
                proc.kill()
        for proc in self._procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self._release_ports()
        for fd in (self._lifeline_read, self._lifeline_write):
            try:
                os.close(fd)
            except OSError:
                pass
        if self._own_dir:
            scratch.remove(self.dir)
        try:
            atexit.unregister(self.close)
        except Exception:
            pass

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        alive = [b for b in self.broker_ids if self.alive(b)]
        controllers = [c for c in self.controller_ids if self.alive(c)]
        return (f"LocalCluster(bootstrap_servers={self.bootstrap_servers!r}, alive={alive}, "
                f"controllers={controllers})")


def launch(brokers: int = 3, **kwargs: Any) -> LocalCluster:
    """Start a local multi-process cluster, a 3-voter controller quorum and ``brokers``
    brokers: ``with minikafka.launch(brokers=3) as cluster: ...``; returns once every broker
    is registered. ``rules={"high_watermark": my_fn, ...}`` runs every broker and controller
    process on a student's rules, under the simulated cluster's guard (``node_rules``): a rule
    that breaks stops its node, and ``cluster.check()`` raises ``NodeStopped`` saying why."""
    return LocalCluster(brokers, **kwargs)
