"""Pictures of a trace's data-flow graph: what dataflow fusion sees, barriers and missing edges included.

Dataflow fusion orders bound symbols by data edges only, so the picture that explains its
bugs is the data-flow graph: one node per bound symbol, one edge per proxy passed from its
producer to a consumer.  :func:`trace_graph` builds that graph as a ``networkx.DiGraph``
(the model, tested on its own) and :func:`draw_trace` renders it with matplotlib in a
layered top-to-bottom layout (longest path over data edges), so neither graphviz nor a
system package is needed.

What is marked:

* node ``kind``: ``op``, ``write`` (the bsym writes a tensor argument), ``dead_write``
  (a write nobody reads, or one the pass's report says it removed), ``barrier``
  (``update_aliases``) and ``return``; nodes placed after the return carry
  ``after_return=True`` (plain Thunder's "return not last" crash);
* edge ``kind``: ``data``, ``barrier`` (into or out of a barrier, the order barriers add)
  and ``missing`` (a pair :func:`thunder_ext.checker.verify` says must be ordered but has
  no path between them; ``hazard`` says RAW, WAR, WAW or stale-input).

Fusion regions are opened up (their subsymbols keep their data edges, as in the checker)
and ``del`` is skipped: neither moves data.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thunder.core.prims import PrimIDs
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx

from thunder_ext.alias_analysis import input_names
from thunder_ext.checker import flatten_with_regions, verify
from thunder_ext.op_kinds import effect_of, is_barrier, is_return
from thunder_ext.validation import require_bool, require_trace

if TYPE_CHECKING:
    import networkx as nx
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from thunder_ext.barriers import BarrierReport
    from thunder_ext.integration import StageReports

NODE_KINDS = ("op", "write", "dead_write", "barrier", "return")
EDGE_KINDS = ("data", "barrier", "missing")
SAVE_FORMATS = (".png", ".svg", ".pdf")

# Fill colours per node kind, and line styles per edge kind; one palette for the
# figure and its legend.
_NODE_STYLE = {
    "op": dict(facecolor="#eef2f7", edgecolor="#5b6b7f"),
    "write": dict(facecolor="#ffe3b3", edgecolor="#c77700"),
    "dead_write": dict(facecolor="#d9d9d9", edgecolor="#555555"),
    "barrier": dict(facecolor="#d6f0d6", edgecolor="#1f8a3b"),
    "return": dict(facecolor="#dcd3f5", edgecolor="#5a3fb0"),
}
_EDGE_STYLE = {
    "data": dict(color="#8794a6", linestyle="-", linewidth=1.0),
    "barrier": dict(color="#1f8a3b", linestyle="-", linewidth=2.0),
    "missing": dict(color="#d62728", linestyle="--", linewidth=1.8),
}
_AFTER_RETURN_COLOR = "#d62728"


def _dead_writes_of(report: object, function: str) -> list[BoundSymbol]:
    """The dead writes a report names: a BarrierReport's, or a StageReports' from both stages."""
    from thunder_ext.barriers import BarrierReport
    from thunder_ext.integration import StageReports

    if report is None:
        return []
    if isinstance(report, BarrierReport):
        return list(report.dead_writes)
    if isinstance(report, StageReports):
        # Dead writes are removed before autodiff; the fusion stage rarely finds more.
        return [b for r in (report.before_autodiff, report.fusion_stage) if r is not None for b in r.dead_writes]
    raise TypeError(
        f"{function}(report=...) takes one StageReports from thunder_ext.last_reports(jf) or a BarrierReport "
        f"(e.g. thunder_ext.last_reports(jf)[0].fusion_stage), not {type(report).__name__}"
    )


def _label(bsym: BoundSymbol) -> str:
    """``out = symbol``, short: the first output only, with an ellipsis for more."""
    if is_return(bsym):
        return "return"
    if bsym.sym.id == PrimIDs.UNPACK_TRIVIAL:
        return f"{bsym.flat_proxy_outs[0].name} (input)" if bsym.flat_proxy_outs else "input"
    outs = [p.name for p in bsym.flat_proxy_outs]
    name = bsym.sym.name
    if not outs:
        return name
    return f"{outs[0]}{', …' if len(outs) > 1 else ''} = {name}"


def _barrier_hazards(bsym: BoundSymbol) -> list[str]:
    """The hazard kinds a thunder_ext barrier's comment names (``thunder_ext: WAR: ...; RAW: ...``)."""
    header = getattr(bsym, "header", "") or ""
    header = header if isinstance(header, str) else "\n".join(header)
    if "thunder_ext:" not in header:
        return []
    body = header.split("thunder_ext:", 1)[1]
    kinds = [part.strip().split(":", 1)[0] for part in body.split(";")]
    # "nvFuser: write to non-input ..." is shortened to its first word
    return list(dict.fromkeys(k.split()[0] for k in kinds if k))


def trace_graph(trace: TraceCtx, *, report: "BarrierReport | StageReports | None" = None, missing: bool = True) -> "nx.DiGraph":
    """The data-flow graph of ``trace`` as a ``networkx.DiGraph`` (see the module docstring).

    Nodes are positions in program order (fusion regions opened, ``del`` skipped) with
    attributes ``kind``, ``label``, ``order``, ``region`` (the fusion region's name or None),
    ``after_return``, ``hazards`` (barriers: the kinds their comment names) and ``bsym``.
    ``report``: one ``StageReports`` from :func:`thunder_ext.last_reports` (both stages) or a
    :class:`~thunder_ext.barriers.BarrierReport`; its dead writes are marked, and those it
    removed from ``trace`` are added as nodes with ``removed=True``.
    ``missing``: add a ``missing`` edge for every ordering violation ``verify`` finds.
    Graph attributes: ``return_not_last`` and ``violations`` (every violation found).
    """
    import networkx as nx

    require_trace(trace, "trace_graph")
    reported_dead = _dead_writes_of(report, "trace_graph")
    require_bool(missing, "missing", "trace_graph")

    from thunder_ext.dead_writes import dead_inplace_ops

    flat = flatten_with_regions(trace.bound_symbols)
    bsyms = [b for b, _ in flat]
    node_of = {id(b): i for i, b in enumerate(bsyms)}

    dead = set(dead_inplace_ops(bsyms, input_names(trace)))
    for b in reported_dead:
        if id(b) in node_of:
            dead.add(node_of[id(b)])

    # The return is "not last" when a bsym other than del follows it at top level: that is
    # what makes Thunder's unwrap_return_value fail.
    top = [b for b in trace.bound_symbols if b.sym.id != PrimIDs.DEL]
    ret_top = next((k for k in range(len(top) - 1, -1, -1) if is_return(top[k])), None)
    return_not_last = ret_top is not None and ret_top != len(top) - 1
    ret_node = next((i for i in range(len(bsyms) - 1, -1, -1) if is_return(bsyms[i])), None)

    g = nx.DiGraph(return_not_last=return_not_last, violations=[])
    for i, (b, region) in enumerate(flat):
        if is_return(b):
            kind = "return"
        elif is_barrier(b):
            kind = "barrier"
        elif i in dead:
            kind = "dead_write"
        elif effect_of(b).writes:
            kind = "write"
        else:
            kind = "op"
        g.add_node(
            i,
            kind=kind,
            label=_label(b),
            order=i,
            region=region.sym.name if region is not None else None,
            after_return=ret_node is not None and i > ret_node,
            hazards=_barrier_hazards(b) if kind == "barrier" else [],
            removed=False,
            bsym=b,
        )

    # Data edges: a name is looked up first among its own region's outputs (a region may
    # recompute a value under a name used elsewhere), then trace-wide (first producer).
    producer: dict[str, int] = {}
    local: dict[int, dict[str, int]] = {}
    for i, (b, region) in enumerate(flat):
        scope = local.setdefault(id(region), {}) if region is not None else {}
        for p in b.flat_proxy_args:
            j = scope.get(p.name, producer.get(p.name))
            if j is None or j == i:
                continue
            kind = "barrier" if g.nodes[i]["kind"] == "barrier" or g.nodes[j]["kind"] == "barrier" else "data"
            names = g.edges[j, i]["proxies"] + [p.name] if g.has_edge(j, i) else [p.name]
            g.add_edge(j, i, kind=kind, proxies=list(dict.fromkeys(names)))
        for p in b.flat_proxy_outs:
            producer.setdefault(p.name, i)
            scope[p.name] = i

    # Writes the pass removed are not in its output: draw them apart, fed by what still exists.
    n = len(bsyms)
    for b in reported_dead:
        if id(b) in node_of:
            continue
        g.add_node(n, kind="dead_write", label=_label(b), order=n, region=None, after_return=False,
                   hazards=[], removed=True, bsym=b)
        for p in b.flat_proxy_args:
            if p.name in producer:
                g.add_edge(producer[p.name], n, kind="data", proxies=[p.name])
        n += 1

    if missing:
        violations = verify(trace)
        g.graph["violations"] = violations
        for v in violations:
            if v.second is None or id(v.first) not in node_of or id(v.second) not in node_of:
                continue  # dead-write and return-not-last are node markings, not edges
            if v.kind == "return-not-last":
                continue
            a, b = node_of[id(v.first)], node_of[id(v.second)]
            if g.has_edge(a, b) and g.edges[a, b]["kind"] == "missing":
                g.edges[a, b]["hazards"].append(v.kind)
            elif not g.has_edge(a, b):
                g.add_edge(a, b, kind="missing", hazards=[v.kind], proxies=[])
    return g


def _layers(g: "nx.DiGraph") -> dict[int, int]:
    """Layer of each node: the longest path to it over data and barrier edges (missing ones may point back)."""
    import networkx as nx

    real = nx.DiGraph([(a, b) for a, b, k in g.edges(data="kind") if k != "missing"])
    real.add_nodes_from(g.nodes)
    if not nx.is_directed_acyclic_graph(real):  # cannot happen for a valid trace; fall back to program order
        return {v: g.nodes[v]["order"] for v in g.nodes}
    layer: dict[int, int] = {}
    for v in nx.topological_sort(real):
        layer[v] = max((layer[u] + 1 for u in real.predecessors(v)), default=0)
    # The return and removed writes go below everything else: the eye looks for them there.
    bottom = max(layer.values(), default=0)
    for v, data in g.nodes(data=True):
        if data["kind"] == "return":
            layer[v] = max(layer[v], bottom)
        if data["removed"]:
            layer[v] = bottom + 1
    return layer


def _routes(g: "nx.DiGraph", layer: dict[int, int]) -> dict[tuple[int, int], list[tuple[str, int, int]]]:
    """For each edge spanning more than one layer, one waypoint per layer it crosses.

    The waypoints take a slot in their row like a node (the classic layered layout's dummy
    nodes), so a long edge runs between boxes instead of through them.  A missing-order edge
    may point up; its waypoints go from its upper end to its lower end.
    """
    routes = {}
    for a, b in g.edges:
        top, bottom = sorted((layer[a], layer[b]))
        if bottom - top > 1:
            routes[(a, b)] = [("via", a, b, y) for y in range(top + 1, bottom)]
    return routes


def _positions(g: "nx.DiGraph") -> tuple[dict[Any, tuple[float, float]], dict[tuple[int, int], list[Any]]]:
    """Rows by layer; within a row, nodes and waypoints sorted by the mean x of what feeds them.

    Returns the positions of nodes and waypoints, and each long edge's waypoints, top to bottom.
    """
    layer = _layers(g)
    routes = _routes(g, layer)
    rows: dict[int, list[Any]] = {}
    feeds: dict[Any, list[Any]] = {}  # what pulls each node or waypoint sideways: the slot above it
    for v in sorted(g.nodes, key=lambda v: g.nodes[v]["order"]):
        rows.setdefault(layer[v], []).append(v)
    for (a, b), points in routes.items():
        upper = a if layer[a] <= layer[b] else b
        lower = b if upper == a else a
        chain = [upper, *points, lower]
        for above, here in zip(chain, chain[1:]):
            feeds.setdefault(here, []).append(above)
        for p in points:
            rows.setdefault(p[3], []).append(p)
    for a, b, kind in g.edges(data="kind"):
        if (a, b) not in routes and kind != "missing":
            feeds.setdefault(b, []).append(a)
    pos: dict[Any, tuple[float, float]] = {}
    for y in sorted(rows):
        row = rows[y]

        def pull(v: Any) -> float:
            xs = [pos[u][0] for u in feeds.get(v, ()) if u in pos]
            return sum(xs) / len(xs) if xs else float("inf")

        def order(v: Any) -> float:
            return g.nodes[v]["order"] if not isinstance(v, tuple) else -1

        row.sort(key=lambda v: (pull(v), order(v)))
        for k, v in enumerate(row):
            pos[v] = (k - (len(row) - 1) / 2, -y)
    return pos, {e: (pts if layer[e[0]] <= layer[e[1]] else pts[::-1]) for e, pts in routes.items()}


def _figure(width: float, height: float) -> "Figure":
    # Made through pyplot so that Jupyter's inline backend registers its display hook, then
    # closed at once so that pyplot neither keeps it nor shows it a second time.
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(width, height))
    plt.close(fig)
    return fig


def draw_trace(
    trace: TraceCtx,
    *,
    report: "BarrierReport | StageReports | None" = None,
    title: str | None = None,
    ax: "Axes | None" = None,
    missing: bool = True,
) -> "Figure":
    """Draw ``trace``'s data-flow graph (see :func:`trace_graph`) and return the matplotlib Figure.

    In a notebook the returned figure shows inline; from a script, use :func:`save_trace_graph`
    or ``fig.savefig(path)``.  ``ax``: draw into an existing matplotlib Axes (e.g. side by
    side with ``plt.subplots(1, 2)``) instead of a new figure.
    """
    require_trace(trace, "draw_trace")
    if title is not None and not isinstance(title, str):
        raise TypeError(f"draw_trace(title=...) takes a string or None, not {type(title).__name__}")
    from matplotlib.axes import Axes

    if ax is not None and not isinstance(ax, Axes):
        raise TypeError(f"draw_trace(ax=...) takes a matplotlib Axes or None, not {type(ax).__name__}")
    g = trace_graph(trace, report=report, missing=missing)
    pos, routes = _positions(g)

    own_figure = ax is None
    if ax is None:
        rows = {p[1] for p in pos.values()}
        width = max((sum(1 for p in pos.values() if p[1] == y) for y in rows), default=1)
        fig = _figure(max(6.0, 2.3 * width + 1.6), max(3.0, 0.75 * len(rows) + 1.6))
        ax = fig.add_subplot()
    fig = ax.figure
    ax.set_axis_off()
    xs = [p[0] for p in pos.values()] or [0.0]
    ys = [p[1] for p in pos.values()] or [0.0]
    ax.set_xlim(min(xs) - 0.7, max(xs) + 0.7)
    ax.set_ylim(min(ys) - 0.6, max(ys) + 0.6)

    # Nodes first (lower zorder): drawing a text updates its box, which the arrows are clipped to.
    boxes = {}
    for v, data in g.nodes(data=True):
        style = dict(_NODE_STYLE[data["kind"]])
        text = data["label"]
        if data["hazards"]:
            text += f"\n({', '.join(data['hazards'])})"
        if data["removed"]:
            text += "\n(dead, removed)"
        elif data["kind"] == "dead_write":
            text += "\n(dead: nothing reads it)"
        if data["region"]:
            text += f"\n[{data['region']}]"
        linestyle = "-"
        if data["after_return"]:
            text += "\nafter return!"
            style["edgecolor"] = _AFTER_RETURN_COLOR
            linestyle = "--"
        t = ax.text(
            *pos[v],
            text,
            ha="center",
            va="center",
            fontsize=8,
            family="monospace",
            zorder=3,  # above the edges: an edge never hides a label
            bbox=dict(boxstyle="round,pad=0.35", linewidth=1.6 if data["kind"] != "op" else 1.0, linestyle=linestyle, **style),
        )
        boxes[v] = t
    fig.draw_without_rendering()  # sizes the boxes before the arrows are clipped to them

    for a, b, data in g.edges(data=True):
        style = _EDGE_STYLE[data["kind"]]
        points = [pos[p] for p in routes.get((a, b), [])]
        chain = [pos[a], *points, pos[b]]
        # A missing-order edge that spans one layer is bent, so it does not hide a data edge.
        rad = 0.25 if data["kind"] == "missing" and not points else 0.0
        for k, (start, end) in enumerate(zip(chain, chain[1:])):
            last = k == len(chain) - 2
            ax.annotate(
                "",
                xy=end,
                xytext=start,
                zorder=2,
                arrowprops=dict(
                    arrowstyle="-|>" if last else "-",
                    mutation_scale=10,
                    patchA=boxes[a].get_bbox_patch() if k == 0 else None,
                    patchB=boxes[b].get_bbox_patch() if last else None,
                    shrinkA=2 if k == 0 else 0,
                    shrinkB=2 if last else 0,
                    connectionstyle=f"arc3,rad={rad}",
                    **style,
                ),
            )
        if data["kind"] == "missing":
            if points:
                mid = points[len(points) // 2]
                where = (mid[0] + 0.08, mid[1])
            else:
                where = _arc_middle(ax, pos[a], pos[b], rad)
            ax.text(*where, "missing order: " + ", ".join(data["hazards"]),
                    color=_EDGE_STYLE["missing"]["color"], fontsize=7, ha="left", va="center", zorder=4,
                    bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.85))

    _legend(ax, g)
    heading = title or ""
    if g.graph["return_not_last"]:
        heading += ("\n" if heading else "") + "return is not the last bound symbol"
    if heading:
        ax.set_title(heading, fontsize=10, color=_AFTER_RETURN_COLOR if not title else "black")
    if own_figure:
        # Keeps the legend (outside the axes, on the right) and the title inside the figure, so
        # fig.savefig(path) without bbox_inches="tight" cuts nothing off.
        fig.set_layout_engine("constrained")
    return fig


def _arc_middle(ax: "Axes", a: tuple[float, float], b: tuple[float, float], rad: float) -> tuple[float, float]:
    """The middle of matplotlib's ``arc3`` curve from a to b, in data coordinates (arc3 bends in display space)."""
    to_display = ax.transData
    (x1, y1), (x2, y2) = to_display.transform([a, b])
    dx, dy = x2 - x1, y2 - y1
    # quadratic Bezier at t=1/2: half way from the chord's middle to the control point
    mx, my = (x1 + x2) / 2 + rad * dy / 2, (y1 + y2) / 2 - rad * dx / 2
    return tuple(to_display.inverted().transform((mx, my)))


def _legend(ax: "Axes", g: "nx.DiGraph") -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    node_kinds = [k for k in NODE_KINDS if any(d == k for _, d in g.nodes(data="kind"))]
    edge_kinds = [k for k in EDGE_KINDS if any(d == k for _, _, d in g.edges(data="kind"))]
    names = {"dead_write": "dead write", "missing": "missing order"}
    handles: list[Any] = [
        Patch(label=names.get(k, k), **{s: v for s, v in _NODE_STYLE[k].items()}) for k in node_kinds
    ]
    handles += [Line2D([], [], label=f"{names.get(k, k)} edge", **_EDGE_STYLE[k]) for k in edge_kinds]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)


def save_trace_graph(trace: TraceCtx, path: str | os.PathLike, **kwargs: Any) -> Path:
    """Draw ``trace`` (keyword arguments as :func:`draw_trace`) and save it; the format is the suffix (.png, .svg, .pdf)."""
    require_trace(trace, "save_trace_graph")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"save_trace_graph(trace, path) takes a file path (str or Path), not {type(path).__name__}")
    path = Path(path)
    if path.suffix.lower() not in SAVE_FORMATS:
        raise ValueError(f"save_trace_graph(): cannot tell the format from {path.name!r}; end it with one of {SAVE_FORMATS}")
    if "ax" in kwargs:
        raise TypeError("save_trace_graph() draws its own figure; to save an Axes you drew into, call its figure's savefig")
    fig = draw_trace(trace, **kwargs)
    fig.savefig(path, bbox_inches="tight", dpi=120)
    return path
