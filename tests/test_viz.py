"""minikafka.viz: the cluster picture's DOT source says what the cluster is doing, and says
it the same way every time."""

import shutil

import pytest

from minikafka import viz
from minikafka.clients.consumer import KafkaConsumer
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


def svg_px(svg):
    """(width, height) in CSS px of a graphviz SVG, whose size is in points (96/72 px each)."""
    import re

    w, h = re.search(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"', svg).groups()
    return float(w) * 96 / 72, float(h) * 96 / 72


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's dot program is not installed")
def test_ten_partitions_on_three_brokers_fit_a_projector(tmp_path):
    """Lecture 03's picture (ten partitions, three replicas each, three brokers), healthy and
    with a broker dead, fits the 853x480 CSS px a 1280x720 projector shows at 150% zoom:
    each broker's ten replicas stand in a grid, not a column 1,100 px tall."""
    with Cluster(3, seed=7, dir=tmp_path) as c:
        c.create_topic("trucks_gps", partitions=10, replication_factor=3)
        c.advance(1_000)
        healthy = c.diagram("trucks_gps")
        c.kill(2)
        c.advance(12_000)
        dead = c.diagram("trucks_gps")
    for dot in (healthy, dead):
        width, height = svg_px(viz.render_svg(dot))
        assert width <= 853 and height <= 480, (width, height)
    # Five rows of two per broker: p0 and p1 side by side, p2 under p0.
    assert '"b1/trucks_gps/0" -> "b1/trucks_gps/1" [style=invis]' in healthy.source
    assert '"b1/trucks_gps/0" -> "b1/trucks_gps/2" [style=invis]' in healthy.source


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's dot program is not installed")
def test_a_notebook_shows_the_diagram_scaled_to_its_cell(make_cluster):
    """In a notebook the diagram is HTML: its SVG in an <img> (a data URL, which survives
    JupyterLab's sanitizer) at most as wide as the cell; the DOT source is unchanged."""
    import base64
    import re

    import graphviz

    dot = make_cluster().diagram("t")
    assert isinstance(dot, graphviz.Digraph)
    bundle = dot._repr_mimebundle_()
    assert list(bundle) == ["text/html"]
    img = bundle["text/html"]
    assert img.startswith("<img ") and "max-width:100%" in img and "height:auto" in img
    data = re.search(r'src="data:image/svg\+xml;base64,([^"]+)"', img).group(1)
    assert base64.b64decode(data).decode() == viz.render_svg(dot)
    # Asked for SVG only (nbconvert to a format without HTML), it is graphviz's SVG.
    assert list(dot._repr_mimebundle_(include=["image/svg+xml"])) == ["image/svg+xml"]

    # A notebook's own picture, made with graphviz, shows the same way through fit().
    own = graphviz.Digraph(graph_attr={"rankdir": "LR"}, node_attr={"shape": "box"})
    own.edge("producer", "broker")
    fitted = viz.fit(own)
    assert fitted.source == own.source
    assert list(fitted._repr_mimebundle_()) == ["text/html"]


# --- consumer groups on the diagram -----------------------------------------------------------------------

# Small and quick: three __consumer_offsets partitions, no initial rebalance delay.
GROUP_CONFIG = {**CONFIG, "offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0}
FAST = {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 2_000, "auto_offset_reset": "earliest"}


@pytest.fixture
def make_group(tmp_path):
    """A cluster with topic t (``partitions``, RF 2), ``i + 1`` records in partition i, and
    ``consumers`` consumers of group g that have read them all and committed."""
    made = []

    def make(consumers, partitions, seed=7):
        c = Cluster(3, seed=seed, config=GROUP_CONFIG, dir=tmp_path / f"cluster-{len(made)}")
        made.append(c)
        c.create_topic("t", partitions=partitions, replication_factor=2)
        group = [KafkaConsumer("t", bootstrap_servers=c, group_id="g", **FAST) for _ in range(consumers)]
        producer = KafkaProducer(bootstrap_servers=c, acks="all")
        for p in range(partitions):
            for i in range(p + 1):
                producer.send("t", value=f"v{i}".encode(), partition=p).get(timeout=10)
        settle(c, group, records=partitions * (partitions + 1) // 2)
        for consumer in group:
            consumer.commit()
        return c, group

    yield make
    for c in made:
        c.close()


def settle(c, group, records=None, rounds=60):
    """Poll every live consumer until the group is stable on its coordinator, each live
    consumer has taken its part of that generation and (if given) ``records`` have been
    read in all."""
    read = 0
    for _ in range(rounds):
        for consumer in group:
            if consumer.alive:
                read += sum(len(rs) for rs in consumer.poll(timeout_ms=100).values())
        on_broker = viz.snapshot(c, "t", group="g").group
        nodes = [consumer._node.coordinator for consumer in group if consumer.alive]
        if on_broker.state == "Stable" and (records is None or read >= records) and all(
                co.state == "STABLE" and co.pending_assignment is None and co.generation == on_broker.generation
                for co in nodes):
            return
    raise AssertionError("the group did not settle")


def group_node_line(source, name):
    return node_line(source, f"group/g/{name}")


def leader(c, p):
    return c.partition_state("t", p).leader


def test_two_consumers_on_four_partitions(make_group):
    c, (a, b) = make_group(2, 4)
    assert (a.node_id, b.node_id) == ("consumer-2", "consumer-3")
    gen = a._node.coordinator.generation
    lead = "consumer-2" if a._node.coordinator.member_id == a._node.coordinator.leader_id else "consumer-3"
    coordinator = c.world.nodes[a.node_id].coordinator.coordinator
    src = c.diagram("t", group="g").source
    assert src == viz.cluster_diagram(c, "t", group="g").source

    # The range assignor: members sorted by id, consumer-2 first.
    for name, colour in (("consumer-2", "#1b9e77"), ("consumer-3", "#d95f02")):
        role = "  leader" if name == lead else ""
        assert group_node_line(src, name) == (
            f'"group/g/{name}" [label="{name}\ngen {gen}{role}\nlag 0" color="{colour}" fillcolor=white '
            'penwidth=2 shape=box style="filled,bold"]')
    for name, colour, parts in (("consumer-2", "#1b9e77", (0, 1)), ("consumer-3", "#d95f02", (2, 3))):
        for p in parts:  # p + 1 records in partition p, all read
            assert (f'"group/g/{name}" -> "b{leader(c, p)}/t/{p}" [label="pos {p + 1}  lag 0" color="{colour}" '
                    f'constraint=false fontcolor="{colour}"]') in src
    assert src.count('"group/g/') == 2 + 4 + 3  # two nodes, four arrows, under three brokers
    assert (f'label="group g   coordinator: broker {coordinator}   Stable, generation {gen}\n'
            '2 consumers   committed lag 0" labelloc=b style=rounded') in src
    assert "not read by anyone" not in src
    # Under the brokers: an invisible edge from each broker's lowest replica.
    assert src.count('-> "group/g/consumer-2" [style=invis]') == 3

    # Five more records in p0, not polled yet: consumer-2 lags by five.
    producer = KafkaProducer(bootstrap_servers=c, acks="all")
    for i in range(5):
        producer.send("t", value=b"late", partition=0).get(timeout=10)
    src = c.diagram("t", group="g").source
    assert f'"group/g/consumer-2" -> "b{leader(c, 0)}/t/0" [label="pos 1  lag 5"' in src
    assert "\nlag 5" in group_node_line(src, "consumer-2")
    assert "2 consumers   committed lag 5" in src
    view = viz.snapshot(c, "t", group="g").group
    assert view.assignment() == {"consumer-2": [0, 1], "consumer-3": [2, 3]}
    assert [cv.lag for cv in view.consumers] == [5, 0]


def test_eight_consumers_on_six_partitions_two_idle(make_group):
    c, group = make_group(8, 6)
    names = [consumer.node_id for consumer in group]
    assert names == [f"consumer-{i}" for i in range(2, 10)]
    gen = group[0]._node.coordinator.generation
    src = c.diagram("t", group="g").source
    for i, name in enumerate(names[:6]):  # one partition each, in member id order
        assert src.count(f'"group/g/{name}" -> ') == 1
        assert f'"group/g/{name}" -> "b{leader(c, i)}/t/{i}" [label="pos {i + 1}  lag 0"' in src
    for name in names[6:]:  # greyed out, no arrows
        assert group_node_line(src, name) == (
            f'"group/g/{name}" [label="{name}\ngen {gen}\nidle: no partition" color="#969696" '
            'fillcolor="#f0f0f0" fontcolor="#969696" shape=box style=filled]')
        assert f'"group/g/{name}" -> ' not in src
    assert "8 consumers   2 idle   committed lag 0" in src
    assert [cv.idle for cv in viz.snapshot(c, "t", group="g").group.consumers] == [False] * 6 + [True] * 2

    # The group alone: consumers above the partitions, arrows that rank them.
    g = viz.group_diagram(c, "g").source
    assert g == viz.group_diagram(c, "g", "t").source
    for i in range(6):
        assert f'"t/{i}" [label="p{i}\nleader {leader(c, i)}  HW {i + 1}"' in g
        assert (f'"group/g/{names[i]}" -> "t/{i}" [label="pos {i + 1}  lag 0" color=') in g
    assert "constraint=false" not in g
    assert 'idle: no partition" color="#969696"' in g and "labelloc=t" in g


def test_a_killed_consumer_is_dead_and_holds_its_partitions_until_the_session_timeout(make_group):
    c, (a, b) = make_group(2, 4)
    c.kill_consumer(a)
    src = c.diagram("t", group="g").source
    assert group_node_line(src, "consumer-2") == (
        '"group/g/consumer-2" [label="consumer-2\ndead\nstill a member: no session timeout yet" '
        'color="#cb181d" fillcolor="#d9d9d9" fontcolor="#969696" penwidth=2 shape=box style="filled,dashed"]')
    for p in (0, 1):  # the coordinator still counts it: nobody reads p0, p1
        assert (f'"group/g/consumer-2" -> "b{leader(c, p)}/t/{p}" [label=held color="#cb181d" constraint=false '
                'fontcolor="#cb181d" style=dashed]') in src
    assert "1 consumer   1 dead   committed lag 0\nnot read by anyone: p0, p1" in src

    t0 = c.now
    while c.now - t0 < 6_000 + 2_000:  # the survivor heartbeats on; the dead one's session expires
        b.poll(timeout_ms=500)
    settle(c, [a, b])
    src = c.diagram("t", group="g").source
    assert group_node_line(src, "consumer-2").startswith('"group/g/consumer-2" [label="consumer-2\ndead" ')
    assert "label=held" not in src and "not read by anyone" not in src
    for p in range(4):
        assert f'"group/g/consumer-3" -> "b{leader(c, p)}/t/{p}" [label="pos {p + 1}  lag 0"' in src
    assert viz.snapshot(c, "t", group="g").group.assignment() == {"consumer-3": [0, 1, 2, 3]}


def test_same_group_state_same_source(make_group):
    sources = []
    for _ in range(2):
        c, group = make_group(3, 4, seed=5)
        c.kill_consumer(group[1])
        c.advance(1_000)
        sources.append(c.diagram("t", group="g").source + viz.group_diagram(c, "g").source)
    assert sources[0] == sources[1]
    assert "0x" not in sources[0] and "consumer-3-" not in sources[0]  # no member ids (uuids)


def test_a_group_without_consumers(make_cluster):
    c = make_cluster()
    src = c.diagram("t", group="nobody").source
    assert '"group/nobody/none" [label="no consumers"' in src
    assert ('label="group nobody   coordinator: none\n0 consumers   committed lag ?\n'
            'not read by anyone: p0, p1, p2"') in src
    # graphviz would read "a:b" in an edge as node a, port b
    src = c.diagram("t", group="app:v2").source
    assert '"group/app%3Av2/none" [label="no consumers"' in src and 'label="group app:v2 ' in src
