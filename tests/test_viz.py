"""minikafka.viz: the cluster picture's DOT source says what the cluster is doing, and says
it the same way every time."""

import shutil

import pytest

from minikafka import viz
from minikafka.clients.producer import KafkaProducer
from minikafka.cluster import Cluster
from minikafka.errors import IllegalArgumentError

CONFIG = {"replica.lag.time.max.ms": 2_000}


@pytest.fixture
def make_cluster(tmp_path):
    made = []

    def make(seed=7):
        c = Cluster(3, seed=seed, config=CONFIG, dir=tmp_path / f"cluster-{len(made)}")
        made.append(c)
        c.create_topic("t", partitions=3, replication_factor=3)
        return c

    yield make
    for c in made:
        c.close()


def write(c, n, partition=0):
    producer = KafkaProducer(bootstrap_servers=c, acks="all")
    for i in range(n):
        producer.send("t", value=f"v{i}".encode(), partition=partition).get(timeout=10)
    c.advance(1_000)  # followers learn the leader's HW on their next fetch


def node_line(source, name):
    """The whole statement (it spans lines: labels hold a newline) declaring node ``name``."""
    start = source.index(f'\t\t"{name}" [')
    return source[start:source.index("]", start) + 1].strip()


def test_roles_and_offsets(make_cluster):
    c = make_cluster()
    write(c, 5)
    src = c.diagram("t").source
    leader = c.partition_state("t", 0).leader
    followers = [b for b in c.partition_state("t", 0).replicas if b != leader]
    assert node_line(src, f"b{leader}/t/0") == (
        f'"b{leader}/t/0" [label="p0 L\nLEO 5  HW 5" color="#3182bd" fillcolor="#c6dbef" '
        'penwidth=2 style="filled,bold"]')
    for f in followers:
        assert node_line(src, f"b{f}/t/0") == (
            f'"b{f}/t/0" [label="p0 F\nLEO 5  HW 5" color="#3182bd" fillcolor=white style=filled]')
    # one leader per partition, replication arrows from it to each follower
    assert src.count(" L\n") == 3
    for f in followers:
        assert f'"b{leader}/t/0" -> "b{f}/t/0" [arrowsize=0.6 color="#3182bd" constraint=false]' in src
    assert "under-replicated: 0   offline: 0" in src
    assert "live brokers: 1, 2, 3" in src
    assert "faults" not in src


def test_dead_broker_then_new_leader(make_cluster):
    c = make_cluster()
    write(c, 3)
    old = c.partition_state("t", 0).leader
    c.kill(old)
    src = c.diagram("t").source
    assert f'label="broker {old}  dead" penwidth=2 style="filled,dashed"' in src
    assert node_line(src, f"b{old}/t/0") == (
        f'"b{old}/t/0" [label="p0\ndown" color="#969696" fontcolor="#969696" style=dashed]')
    # The controller has not noticed yet: it still counts the dead broker as live.
    assert "live brokers: 1, 2, 3" in src

    c.advance(12_000)  # > broker.session.timeout.ms
    new = c.partition_state("t", 0).leader
    assert new not in (old, -1)
    src = c.diagram("t").source
    assert f'"b{new}/t/0" [label="p0 L\nLEO 3  HW 3"' in src
    assert "under-replicated: 3   offline: 0" in src
    assert f"live brokers: {', '.join(str(b) for b in c.broker_ids if b != old)}" in src
    assert f'" -> "b{old}/t/0"' not in src  # no replication arrows to a dead broker


def test_out_of_isr_and_cut_links(make_cluster):
    c = make_cluster()
    write(c, 2)
    leader = c.partition_state("t", 0).leader
    lagging = next(b for b in c.broker_ids if b != leader)
    others = [b for b in c.broker_ids if b != lagging]
    c.partition([lagging], others)  # from the brokers, not from the controller
    c.advance(5_000)  # > replica.lag.time.max.ms: the leaders drop it from their ISRs
    assert lagging not in c.partition_state("t", 0).isr
    src = c.diagram("t").source
    line = node_line(src, f"b{lagging}/t/0")
    assert line.startswith(f'"b{lagging}/t/0" [label="p0 F  out of ISR\nLEO 2  HW ')
    assert 'style="filled,dashed"' in line and 'color="#e6550d"' in line
    assert f'"b{leader}/t/0" -> "b{lagging}/t/0" [arrowsize=0.6 color="#e6550d" constraint=false style=dashed]' in src
    for a, b in sorted((min(x, lagging), max(x, lagging)) for x in others):
        assert (f'lhead=cluster_broker_{b} ltail=cluster_broker_{a} penwidth=2 style=dashed]') in src
    assert src.count('label=cut') == 2
    c.heal()
    assert "label=cut" not in c.diagram("t").source


def test_stale_leader_and_controller_cut(make_cluster):
    c = make_cluster()
    leader = c.partition_state("t", 0).leader
    c.partition([leader], [b for b in c.broker_ids if b != leader] + ["controller"])
    c.advance(12_000)
    assert c.partition_state("t", 0).leader != leader
    src = c.diagram("t").source
    assert f'"b{leader}/t/0" [label="p0 L?  stale' in src
    assert (f'controller -> "b{leader}/t/0" [label=cut color="#cb181d" dir=none fontcolor="#cb181d" '
            f'lhead=cluster_broker_{leader} penwidth=2 style=dashed]') in src


def test_client_faults_go_in_a_note_and_all_topics_are_named(make_cluster):
    c = make_cluster()
    c.create_topic("u", partitions=1, replication_factor=1)
    c.slow(1, 2, 50)
    c.partition([1], [c.admin_id])
    src = c.diagram().source
    assert "topics t, u" in src
    assert 'label="t p0 ' in src
    assert 'label="u p0 L' in src
    assert f"1 <-/-> {c.admin_id}: partitioned" in src
    assert "1 -> 2: latency 50 ms, loss 0%" in src


def test_same_state_same_source(make_cluster):
    sources = []
    for _ in range(2):
        c = make_cluster(seed=3)
        write(c, 4, partition=1)
        c.kill(2)
        c.partition([1], [3])
        c.advance(12_000)
        sources.append(c.diagram().source)
        assert c.diagram().source == sources[-1]
    assert sources[0] == sources[1]
    assert "0x" not in sources[0]


def test_unknown_topic(make_cluster):
    c = make_cluster()
    with pytest.raises(IllegalArgumentError):
        c.diagram("nope")


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's dot program is not installed")
def test_render_svg_is_inline_html(make_cluster):
    svg = viz.render_svg(make_cluster().diagram("t"))
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert "<!--" not in svg and "<?xml" not in svg
    assert "broker 1" in svg
