"""The user's line for each bound symbol, where Thunder records a line the user never wrote.

Every message of the transform names a bsym and the line of user code that made it, and
``thunder.last_traces`` prints that line above each bsym.  Thunder records the line its
interpreter was executing when the bsym was made, and two kinds of record name code the user
cannot act on:

- ThunderFX compiles Dynamo's FX graphs, so the line is one of the graph module's generated
  ``forward`` (``<eval_with_key>.4:7``).  The FX node of that line carries the user's stack in
  ``node.meta["stack_trace"]``: its innermost frame is the line.
- Thunder (0.2.6 and ``main``) dispatches some torch functions and methods (``reshape``,
  ``add``, ``mul``, ``transpose``, ``exp``, ``neg``, ``reciprocal``, ``linear``, ``silu``)
  through a Python wrapper of its own and records the wrapper's line
  (``thunder/torch/experimental/dtensor_torch_and_prims.py:69``).  The user's line lies between
  those of the bsyms before and after it (under ``thunder.jit``, the compiled function's first or
  last line where no bsym precedes or follows).  It is the one line there that calls the op by name,
  where exactly one does and the run of such bsyms holds only one of that name; otherwise the
  record stays as Thunder made it (a wrong line would mislead more than Thunder's own).

:func:`attribute_user_lines` rewrites those records and nothing else.

Before (ThunderFX; ``f`` in ``model.py``, ``w = v.reshape(-1)`` on line 5)::

    # <eval_with_key>.4:5:        v = l_x_ * 2
    v = ltorch.mul(l_x_, 2)
    # .../thunder/torch/experimental/dtensor_torch_and_prims.py:69:   return single_device_symbol(...)
    w = ltorch.reshape(v, -1)

After::

    # model.py:4:     v = x * 2
    v = ltorch.mul(l_x_, 2)
    # model.py:5:     w = v.reshape(-1)
    w = ltorch.reshape(v, -1)

Invariant: only ``source_filename`` and ``source_positions`` change, and only to a line that
the evidence above names exactly; the bsyms' symbols, arguments, outputs and tags are Thunder's.
"""

from __future__ import annotations

import bisect
import inspect
import linecache
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import thunder
from thunder.core.codeutils import Positions
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace

_THUNDER_DIR = os.path.dirname(os.path.abspath(thunder.__file__)) + os.sep
_FX_FILE = re.compile(r"^<eval_with_key>\.\d+")
_STACK_FRAME = re.compile(r'File "([^"]+)", line (\d+)')

Location = tuple[str, int]  # (file, line)


@dataclass
class AttributionReport:
    from_fx: int = 0  # bsyms whose generated FX line became the user's
    from_thunder: int = 0  # bsyms whose line in Thunder's own code became the user's
    left: list[str] = field(default_factory=list)  # "w = reshape": records inside Thunder kept as they were

    def __bool__(self) -> bool:
        return bool(self.from_fx or self.from_thunder)


def recorded_in_thunder(filename: str | None) -> bool:
    """The record names a file of Thunder's own package: the op's dispatch, not the user's call."""
    return bool(filename) and os.path.abspath(filename).startswith(_THUNDER_DIR)


def _location(bsym: BoundSymbol) -> Location | None:
    pos = bsym.source_positions
    if bsym.source_filename is None or pos is None or pos.lineno is None:
        return None
    return bsym.source_filename, pos.lineno


def fx_line_resolver(graph_module) -> Callable[[Location], Location | None]:
    """Maps a line of ``graph_module``'s (or a submodule's) generated code to the innermost frame
    of its node's stack trace."""
    nodes_by_file: dict[str, tuple[dict, int, list]] = {}
    for module in graph_module.modules() if graph_module is not None else ():
        lineno_map = getattr(module, "_lineno_map", None)
        graph = getattr(module, "graph", None)
        forward = getattr(type(module), "forward", None)
        code = getattr(forward, "__code__", None)
        if lineno_map is None or graph is None or code is None:
            continue
        # The map counts lines from the generated ``def forward`` (torch 2.11 also records that
        # line as ``_prologue_start``; 2.9 does not).
        nodes_by_file[code.co_filename] = (lineno_map, code.co_firstlineno, list(graph.nodes))

    def resolve(loc: Location) -> Location | None:
        entry = nodes_by_file.get(loc[0])
        if entry is None:
            return None
        lineno_map, prologue_start, nodes = entry
        index = lineno_map.get(loc[1] - prologue_start)
        if index is None or not 0 <= index < len(nodes):
            return None
        frames = _STACK_FRAME.findall(nodes[index].meta.get("stack_trace") or "")
        return (frames[-1][0], int(frames[-1][1])) if frames else None

    return resolve


def _calls(name: str, line: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\s*\(", line.split("#", 1)[0]) is not None


def function_span(fn) -> tuple[str, int, int] | None:
    """(file, first line, last line) of the function ``thunder.jit`` compiles (a module's
    ``forward``), or None: where no record precedes (or follows) a run, its lines bound it."""
    fn = getattr(fn, "forward", fn)
    try:
        lines, first = inspect.getsourcelines(inspect.unwrap(fn))
        return inspect.getsourcefile(fn) or "", first, first + len(lines) - 1
    except (TypeError, OSError):
        return None


def _line_between(
    before: Location | None, after: Location | None, name: str, same_named: int, span: tuple[str, int, int] | None = None
) -> Location | None:
    """The one line from ``before`` to ``after`` (one file; the compiled function's ``span``
    where one of them is missing) that calls ``name``, if exactly one does and the run being
    attributed holds one bsym of that name."""
    if same_named != 1 or (before is None and after is None):
        return None
    filename = (before or after)[0]
    if before is not None and after is not None and (before[0] != after[0] or before[1] > after[1]):
        return None
    lines = linecache.getlines(filename)
    within = span is not None and os.path.abspath(span[0]) == os.path.abspath(filename)
    first = before[1] if before is not None else (span[1] if within else 1)
    last = after[1] if after is not None else (span[2] if within else len(lines))
    hits = [n for n in range(first, min(last, len(lines)) + 1) if _calls(name, lines[n - 1])]
    return (filename, hits[0]) if len(hits) == 1 else None


def _moved(bsym: BoundSymbol, old: Location, new: Location) -> BoundSymbol:
    """``bsym`` recorded at ``new``, with every subsymbol recorded where ``bsym`` was."""
    subs = [_moved(s, old, new) if _location(s) == old else s for s in bsym.subsymbols]
    return bsym.from_bsym(
        source_filename=new[0], source_positions=Positions(new[1], new[1], None, None), subsymbols=subs
    )


def attribute_user_lines(
    trace: TraceCtx, graph_module=None, span: tuple[str, int, int] | None = None
) -> tuple[TraceCtx, AttributionReport]:
    """``trace`` with each bsym recorded at the user's line where Thunder recorded a generated FX
    line or one of its own (see the module docstring); ``trace`` itself when nothing changes.  The
    input trace is never mutated.  ``graph_module``: the FX graph ThunderFX compiles, if any;
    ``span``: the compiled function's lines (:func:`function_span`), if known."""
    start = time.perf_counter()
    report = AttributionReport()
    bsyms: Sequence[BoundSymbol] = trace.bound_symbols
    locs: list[Location | None] = [_location(b) for b in bsyms]

    # Phase 1: records inside Thunder, from the nearest records outside it (still raw records).
    # Barriers and unpacks record no line; they neither anchor nor break a run.
    anchors = [j for j, loc in enumerate(locs) if loc is not None and not recorded_in_thunder(loc[0])]
    runs: dict[tuple[int | None, int | None], list[int]] = {}
    for j, bsym in enumerate(bsyms):
        if recorded_in_thunder(bsym.source_filename):
            k = bisect.bisect_left(anchors, j)
            runs.setdefault((anchors[k - 1] if k else None, anchors[k] if k < len(anchors) else None), []).append(j)
    resolved: dict[int, Location] = {}
    for (before, after), run in runs.items():
        names = [bsyms[j].sym.name for j in run]
        for j in run:
            line = _line_between(
                locs[before] if before is not None else None,
                locs[after] if after is not None else None,
                bsyms[j].sym.name,
                names.count(bsyms[j].sym.name),
                span,
            )
            if line is not None:
                resolved[j] = line
            else:
                outs = [o.name for o in bsyms[j].flat_proxy_outs]
                report.left.append(f"{outs[0] + ' = ' if outs else ''}{bsyms[j].sym.name}")

    # Phase 2: generated FX lines, the ones phase 1 found included, to the user's.
    from_fx = fx_line_resolver(graph_module)
    out: list[BoundSymbol] = []
    for j, bsym in enumerate(bsyms):
        old, new = locs[j], resolved.get(j, locs[j])
        if new is not None and _FX_FILE.match(new[0]):
            user = from_fx(new)
            if user is not None:
                report.from_fx += 1
                new = user
        if old is not None and new is not None and new != old:
            report.from_thunder += j in resolved
            bsym = _moved(bsym, old, new)
        out.append(bsym)
    if not report:
        return trace, report
    result = from_trace(trace)
    result.bound_symbols = out
    result.set_provenance(
        TraceProvenance(
            f"thunder_ext user lines ({report.from_fx} from FX nodes, {report.from_thunder} from Thunder's dispatch,"
            f" took {(time.perf_counter() - start) * 1e3:.1f} ms)"
        )
    )
    return result, report
