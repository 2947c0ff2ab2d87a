"""thunder_ext.graph: the data-flow graph model of a trace, its rendering, and its argument checks."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("matplotlib")
networkx = pytest.importorskip("networkx")

import thunder  # noqa: E402

import thunder_ext  # noqa: E402
from thunder_ext import InplaceBarrierTransform, draw_trace, save_trace_graph, trace_graph  # noqa: E402


def dead_inplace(x):
    y = x * 2
    y.mul_(3)  # nobody reads y again
    return x.sin()


def write_after_read(x, z):
    z = z.exp().sin().exp()
    a = x * z
    x.add_(1)
    return a


def _plain_trace(fn, *args):
    jf = thunder.jit(fn, fusion_type="dataflow")
    try:
        jf(*args)
    except AssertionError:
        pass  # the dead in-place op crashes after the trace is built
    return thunder.last_traces(jf)[-1]


def _fixed(fn, *args):
    jf = thunder.jit(fn, fusion_type="dataflow", transforms=[InplaceBarrierTransform()])
    jf(*args)
    return jf


def _kinds(g, what="nodes"):
    items = g.nodes(data="kind") if what == "nodes" else g.edges(data="kind")
    out: dict[str, int] = {}
    for *_, k in items:
        out[k] = out.get(k, 0) + 1
    return out


def _label(g, kind):
    return sorted(d["label"] for _, d in g.nodes(data=True) if d["kind"] == kind)


@pytest.fixture(scope="module")
def dead_plain():
    return _plain_trace(dead_inplace, torch.randn(4, 3))


@pytest.fixture(scope="module")
def war_plain():
    return _plain_trace(write_after_read, torch.randn(3), torch.randn(3))


@pytest.fixture(scope="module")
def war_fixed():
    return _fixed(write_after_read, torch.randn(3), torch.randn(3))


def test_dead_inplace_plain_graph(dead_plain):
    g = trace_graph(dead_plain)
    # x, mul, sin, Thunder's barrier, return, the dead mul_ as mul + copy_ (dels skipped)
    assert g.number_of_nodes() == 7
    assert g.graph["return_not_last"] is True
    assert _kinds(g) == {"op": 4, "barrier": 1, "return": 1, "dead_write": 1}
    assert _label(g, "dead_write")[0].endswith("= copy_")
    after = sorted(d["label"].split(" = ")[1] for _, d in g.nodes(data=True) if d["after_return"])
    assert after == ["copy_", "mul"]
    # x feeds mul, sin and the return; sin feeds the return; mul -> barrier -> mul, copy_; mul -> copy_
    assert _kinds(g, "edges") == {"data": 5, "barrier": 3}
    assert all(k != "missing" for *_, k in g.edges(data="kind"))


def test_dead_write_removed_by_the_pass_is_drawn_apart():
    jf = _fixed(dead_inplace, torch.randn(4, 3))
    trace = thunder_ext.fusion_stage_traces(jf)[0]
    plain = trace_graph(trace)
    assert "dead_write" not in _kinds(plain)
    assert plain.graph["return_not_last"] is False

    g = trace_graph(trace, report=thunder_ext.last_reports(jf)[0])
    removed = [d for _, d in g.nodes(data=True) if d["removed"]]
    assert [d["kind"] for d in removed] == ["dead_write"]
    assert "mul_" in removed[0]["label"]
    assert g.number_of_nodes() == plain.number_of_nodes() + 1


def test_write_after_read_plain_has_a_missing_edge(war_plain):
    g = trace_graph(war_plain)
    missing = [(a, b, d) for a, b, d in g.edges(data=True) if d["kind"] == "missing"]
    assert len(missing) == 1
    a, b, d = missing[0]
    # plain Thunder ran the write first (the read of x now sees x + 1), with no path either
    # way; the arrow and its label follow the program: the read, then the write (WAR)
    order = [g.nodes[v]["order"] for v in (a, b)]
    assert order[0] > order[1], "fusion emitted the write before the read"
    assert g.nodes[a]["label"].endswith("= mul")
    assert g.nodes[b]["kind"] == "write" and g.nodes[b]["label"].endswith("copy_")
    assert d["hazards"] == ["WAR"]
    real = trace_graph(war_plain, missing=False)
    assert not networkx.has_path(real, a, b) and not networkx.has_path(real, b, a)
    assert real.number_of_edges() == g.number_of_edges() - 1


def test_write_after_read_fixed_has_the_barrier(war_fixed):
    trace = thunder_ext.fusion_stage_traces(war_fixed)[0]
    g = trace_graph(trace, report=thunder_ext.last_reports(war_fixed)[0])
    assert g.graph["violations"] == []
    assert "missing" not in _kinds(g, "edges")
    barriers = [v for v, k in g.nodes(data="kind") if k == "barrier"]
    assert len(barriers) == 1
    (bar,) = barriers
    assert g.nodes[bar]["hazards"] == ["WAR"]
    # the barrier takes the read's output and feeds the write: read -> barrier -> write
    preds = {g.nodes[u]["label"].split(" = ")[-1] for u in g.predecessors(bar)}
    succs = {g.nodes[u]["kind"] for u in g.successors(bar)}
    assert "mul" in preds and succs == {"write"}
    assert all(g.edges[e]["kind"] == "barrier" for e in list(g.in_edges(bar)) + list(g.out_edges(bar)))
    assert _kinds(g)["return"] == 1


def test_draw_marks_what_the_model_says(war_plain):
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation

    fig = draw_trace(war_plain, title="plain Thunder")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    g = trace_graph(war_plain)
    texts = [t.get_text() for t in ax.texts]
    assert sum(1 for t in texts if t.startswith("missing order: WAR")) == 1
    segments = [t.arrow_patch for t in ax.texts if isinstance(t, Annotation) and t.arrow_patch is not None]
    # an edge is one or more segments (a long edge bends around the boxes); only its last has a head
    arrows = [p for p in segments if type(p.get_arrowstyle()).__name__ == "CurveFilledB"]
    assert len(arrows) == g.number_of_edges()
    dashed = [p for p in arrows if p.get_linestyle() in ("--", "dashed")]
    assert len(dashed) == 1
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"barrier", "write", "return", "missing order edge"} <= set(legend)
    assert ax.get_title() == "plain Thunder"


def test_draw_return_not_last(dead_plain):
    fig = draw_trace(dead_plain)
    ax = fig.axes[0]
    assert "return is not the last" in ax.get_title()
    assert sum("after return!" in t.get_text() for t in ax.texts) == 2


def test_draw_into_given_axes(dead_plain, war_plain):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2)
    try:
        assert draw_trace(dead_plain, ax=left) is fig
        assert draw_trace(war_plain, ax=right) is fig
    finally:
        plt.close(fig)


def test_save_png_and_svg(tmp_path, war_fixed):
    trace = thunder_ext.fusion_stage_traces(war_fixed)[0]
    png = save_trace_graph(trace, tmp_path / "g.png", title="fixed")
    svg = save_trace_graph(trace, str(tmp_path / "g.svg"))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert png.stat().st_size > 5000


def test_wrong_arguments(tmp_path, war_plain):
    with pytest.raises(TypeError, match=r"draw_trace\(\) takes a trace, not the function"):
        draw_trace(write_after_read)
    with pytest.raises(TypeError, match="takes one trace, not a list"):
        trace_graph([war_plain])
    with pytest.raises(TypeError, match=r"report=\.\.\.\) takes one StageReports"):
        draw_trace(war_plain, report="fusion stage")
    with pytest.raises(TypeError, match=r"title=\.\.\.\) takes a string"):
        draw_trace(war_plain, title=3)
    with pytest.raises(TypeError, match=r"ax=\.\.\.\) takes a matplotlib Axes"):
        draw_trace(war_plain, ax="left")
    with pytest.raises(TypeError, match="True or False"):
        trace_graph(war_plain, missing=1)
    with pytest.raises(TypeError, match="takes a file path"):
        save_trace_graph(war_plain, 42)
    with pytest.raises(ValueError, match="cannot tell the format"):
        save_trace_graph(war_plain, tmp_path / "g.jpeg2000")
    with pytest.raises(TypeError, match=r"save_trace_graph\(\) takes"):
        save_trace_graph(tmp_path / "g.png", war_plain)


def test_import_stays_light():
    import subprocess
    import sys

    code = "import sys, thunder_ext; print(any(m in sys.modules for m in ('matplotlib', 'networkx', 'thunder')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- what the picture looks like: nothing cut off, no edge through a label ------------------------


def _node_boxes(ax):
    from matplotlib.text import Annotation

    return [t.get_bbox_patch().get_window_extent() for t in ax.texts
            if not isinstance(t, Annotation) and t.get_bbox_patch() is not None
            and not t.get_text().startswith("missing order")]


def _edges_through_labels(fig) -> list[str]:
    """Straight arrow segments that cross a node's box other than the boxes they start or end in.

    Each segment runs between two node centres or waypoints (its drawn line is that curve,
    clipped to the end boxes): matplotlib's ``arc3``, a quadratic Bezier bent by ``rad``.
    """
    from matplotlib.path import Path
    from matplotlib.text import Annotation

    fig.draw_without_rendering()
    ax = fig.axes[0]
    boxes = _node_boxes(ax)
    crossings = []
    checked = 0
    for t in ax.texts:
        if not isinstance(t, Annotation) or t.arrow_patch is None:
            continue
        checked += 1
        ends = ax.transData.transform([t.xyann, t.xy])
        (x1, y1), (x2, y2) = ends
        rad = float(t.arrowprops["connectionstyle"].partition("rad=")[2] or 0.0)
        control = ((x1 + x2) / 2 + rad * (y2 - y1), (y1 + y2) / 2 - rad * (x2 - x1))
        chord = Path([ends[0], control, ends[1]], [Path.MOVETO, Path.CURVE3, Path.CURVE3])
        for box in boxes:
            if not any(box.contains(*e) for e in ends) and chord.intersects_bbox(box, filled=True):
                crossings.append(f"segment {ends.round().tolist()} crosses box {[round(v) for v in box.bounds]}")
    assert checked >= len(boxes)  # every edge was looked at
    return crossings


@pytest.mark.parametrize("which", ["war_plain", "war_fixed_stage", "dead_plain"])
def test_no_edge_crosses_a_label(which, request):
    if which == "war_fixed_stage":
        jf = request.getfixturevalue("war_fixed")
        fig = draw_trace(thunder_ext.fusion_stage_traces(jf)[0], report=thunder_ext.last_reports(jf)[0])
    else:
        fig = draw_trace(request.getfixturevalue(which), title="t")
    assert _edges_through_labels(fig) == []


def test_legend_and_title_survive_a_plain_savefig(tmp_path, war_plain):
    # draw_trace's docstring offers fig.savefig(path); without bbox_inches="tight" the legend,
    # outside the axes on the right, used to be cut ("barric", "returi")
    fig = draw_trace(war_plain, title="plain Thunder: nothing orders mul before copy_")
    fig.savefig(tmp_path / "g.png")
    fig.draw_without_rendering()  # the layout savefig used
    ax = fig.axes[0]
    figure_box = fig.bbox
    for artist in (ax.get_legend(), ax.title):
        box = artist.get_window_extent()
        assert figure_box.x0 <= box.x0 and box.x1 <= figure_box.x1, (artist, box, figure_box)
        assert figure_box.y0 <= box.y0 and box.y1 <= figure_box.y1, (artist, box, figure_box)
