"""Random in-place programs for property-based differential testing (hypothesis).

:func:`programs` is a hypothesis strategy of straight-line PyTorch functions, generated as
*source code*: a :class:`Program` prints as the Python it runs, so a failing example shrinks
to a small program that reads like a bug report.  The source is compiled with ``compile()``
under a ``<fuzz-N>`` file name and registered in :mod:`linecache`, so Thunder's traces and
tracebacks show its lines.

**Vocabulary.**  Every float input is a ``(4, 3)`` tensor (``a``, ``b``, ``c``), each with
its own ``requires_grad``, and one in four laid out transposed (strides ``(1, 4)``: eager's
``reshape``, ``flatten`` and ``contiguous`` copy it where they view a contiguous one, and a
compiled function must answer every layout of its calls); optional running stats ``rm``/``rv`` of shape ``(3,)`` (never
requiring grad), and ``idx = tensor([1, 0])`` when ``index_copy_`` or ``index_add_`` is used.  Statements:

* functional elementwise ops: ``sin cos tanh sigmoid neg exp`` and ``+ - *`` with a tensor
  of the same shape or a small constant;
* their in-place twins: ``sin_ cos_ tanh_ neg_ exp_ clamp_``, ``add_ sub_ mul_``, ``+=``, and
  ``F.relu(t, inplace=True)`` (an untagged in-place composite);
* views, slices and reshapes: ``t[0]``, ``t[1:]``, ``t[:2]``, ``t[:, 1]``, ``t.view(-1)``,
  ``t.view(2, 6)``, ``t.reshape(3, 4)``, ``t.t()``, ``t.unsqueeze(0)``, the strided ``t[::2]``,
  the expanded ``t.expand(2, *t.shape)`` (read, never written: eager refuses writes to
  overlapping memory), ``t.diagonal()`` (autodiff makes it a gather) and ``t.split(2)[1]``
  (an output of a multi-output view, which eager refuses after a write into its storage);
  also ``t.narrow(1, 1, 2)``, ``t.transpose(0, 1)``, ``t.select(1, 0)`` and ``t[:, ::2]``; and
  two views Thunder registers automatically without knowing they are views: ``t.ravel()`` and
  ``torch.linalg.diagonal(t)``; ops that are views or copies by the strides of their input:
  ``t.flatten()``, ``t.reshape(-1)``, ``t.contiguous()`` (of a ``t`` that is not contiguous),
  and ``t.view_as(t)``; and ``t.detach()``, the storage without the history (a write through it
  is a no-grad write);
* ops that hand back their input itself: ``t.contiguous()`` (of a contiguous ``t``),
  ``t.to(torch.float32)``, ``t.float()``, ``t.type_as(t)``, ``F.dropout`` with ``p=0`` or in
  eval mode, and two that Thunder registers automatically: ``torch.positive(t)`` and
  ``F.alpha_dropout`` with ``p=0`` or in eval mode;
* ``t @ s.t()`` (a backward that saves both operands);
* writes: ``copy_``, ``index_copy_(0, idx, s)``, setitem ``t[0] = s`` / ``t[1:] = c``,
  ``div_ addcmul_ addcdiv_ masked_fill_ zero_ abs_ square_ index_add_``, and ``F.silu`` and
  ``F.leaky_relu`` with ``inplace=True``;
* ``F.batch_norm(t, rm, rv, training=True)`` on a 2-D tensor (updates ``rm``/``rv``), and
  module-buffer updates written by hand, under ``torch.no_grad()`` as modules do,
  ``rm.mul_(0.9).add_(t.mean(0), alpha=0.1)``;
* reductions: ``sum``/``mean`` along a dim.

Reads at random points, writes to inputs and to their views, and dead writes (an
intermediate mutated and never read again) all come from drawing statements over every
live name.  Writes to (views of) leaf inputs that require grad, which eager refuses, are
allowed in one program out of four.  An input that requires grad is a non-leaf (``leaf * 1``,
what a model hands a submodule) half of the time: eager lets the program write to it (class 9),
and the harness retains and compares its gradient.  Shapes are tracked so that every statement type-checks;
``view`` is only drawn on contiguous tensors and ``copy_`` only between equal shapes.  A
bound on magnitudes is tracked per storage so that values stay finite (``exp`` only on
small values, products capped).  The function returns a tuple of one to three names.

**Verdict rule** (:func:`judge`).  Each program runs through :func:`~thunder_ext.testing.compare.differential`
with ``thunder.jit``, default executors and ``InplaceBarrierTransform(check=True)``, under
``fusion_type`` ``consecutive`` and ``dataflow``, once with the inputs' ``requires_grad``
as generated (when any input requires grad) and once with none.  A cell passes when:

* the compiled run matches eager exactly as ``compare`` compares (outputs, final inputs,
  gradients), and :func:`~thunder_ext.checker.verify` finds no violation in its final and
  fusion-stage traces; or
* the transform refuses with a documented :class:`~thunder_ext.errors.InplaceOrderingError`
  (a :class:`~thunder_ext.checker.TraceInvariantError` is the checker catching a bug: a
  failure), whether or not eager raised, *and* plain Thunder (``consecutive``, the cell's
  executors) does not match eager on it: a refusal where plain Thunder is right is a
  regression (``needless-refusal``).  The one exception is class 9 in a cell with grad
  (:data:`ALLOWED_REFUSALS_UNDER_GRAD`), which the soak counts apart.  Eager raising and the
  compiled run returning numbers is a failure; or
* eager raises, and the compiled run raises an error of the same type; or
* the difference is one of the documented exceptions (docs/limits.md,
  :mod:`thunder_ext.testing.differences`): eager's stricter version counter, eager's refusal
  of a write whose source overlaps its destination, Thunder's ``view`` as a reshape where
  eager's stride check refuses, ``None`` where eager's gradient is all zeros, zeros where eager's
  is ``None`` (a written input's adopted history nothing reads), and the retained gradient of a
  written non-leaf input; or
* the difference is float rounding: eager run on the same values in float64 agrees with the
  compiled run as closely as the comparison asks, where eager's float32 does not (the soak
  counts these apart).

A crash (any other exception) is a failure, even where plain Thunder crashes the same way:
for a user it is still a failed call.  The only exemptions are the Thunder limitations
that docs/limits.md documents with their exact errors (:data:`DOCUMENTED_CRASHES`): such a cell is *out of
scope*, unless plain Thunder through the same entry and executors answers the program (then the
transform brought the limit on, and the cell is a crash).  A failing cell's detail still says
what plain Thunder (no transform, ``consecutive``, the cell's executors) does with the program.  A program all of whose cells are out of scope
is rejected by the test.

:func:`soak` judges many programs without stopping at the first failure and groups the
failures by :meth:`Cell.signature`; :func:`reduce` deletes lines from a failing program
while it keeps failing the same way (``scripts/soak.py --shrink``).
"""

from __future__ import annotations

import itertools
import linecache
import math
import re
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from thunder_ext.testing.compare import Builder, Config, differential
from thunder_ext.testing.differences import documented_difference

BASE_SHAPE = (4, 3)
LIMIT = 100.0  # largest magnitude a value may reach
INPUT_BOUND = 5.0  # randn values, generously
CONSTANTS = (0.5, -0.5, 2.0, 1.5)
MAX_STATEMENTS = 10

CONFIGS = (
    Config(transform=True, fusion_type="consecutive", check=True),
    Config(transform=True, fusion_type="dataflow", check=True),
)
PLAIN_BASELINE = Config(transform=False, fusion_type="consecutive", check=False)

_counter = itertools.count()


# -- programs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Input:
    """One parameter of a generated function."""

    name: str
    kind: str  # 'x' (4, 3) float, 'rm' running mean, 'rv' running var, 'idx' index
    requires_grad: bool = False
    nonleaf: bool = False  # passed as ``leaf * 1``: eager allows writes to it
    transposed: bool = False  # 'x' only: strides (1, 4), not a view of anything

    def describe(self) -> str:
        what = {
            "x": "(4, 3)",
            "rm": "(3,) running mean",
            "rv": "(3,) running var",
            "idx": "tensor([1, 0])",
        }[self.kind]
        grad = " requires_grad (non-leaf)" if self.nonleaf else " requires_grad"
        layout = " transposed" if self.transposed else ""
        return f"{self.name} {what}{layout}" + (grad if self.requires_grad else "")

    def make(self, grad: bool, device: str = "cpu") -> torch.Tensor:
        if self.kind == "idx":
            return torch.tensor([1, 0], device=device)
        if self.kind == "rm":
            return torch.randn(3, device=device) * 0.1
        if self.kind == "rv":
            return torch.rand(3, device=device) + 0.5
        t = torch.randn(*BASE_SHAPE, device=device)
        if self.transposed:  # its own storage (no ``_base``), so only its strides differ
            t = torch.empty_strided(BASE_SHAPE, (1, BASE_SHAPE[0]), device=device).copy_(t)
        t = t.requires_grad_(grad and self.requires_grad)
        return t * 1 if t.requires_grad and self.nonleaf else t


@dataclass(eq=False)
class Program:
    """A generated function: its inputs, its body lines and the names it returns."""

    inputs: tuple[Input, ...]
    body: tuple[str, ...]
    returns: tuple[str, ...]
    _fn: Callable | None = field(default=None, repr=False)

    @property
    def source(self) -> str:
        header = "# inputs: " + ", ".join(i.describe() for i in self.inputs)
        params = ", ".join(i.name for i in self.inputs)
        lines = [header, f"def fuzz({params}):"]
        lines += [f"    {line}" for line in self.body]
        lines.append(f"    return ({', '.join(self.returns)},)")
        return "\n".join(lines) + "\n"

    @classmethod
    def from_source(cls, source: str) -> "Program":
        """The program whose :attr:`source` is ``source`` (a soak's JSON keeps programs as text)."""
        lines = source.strip().splitlines()
        kinds = {"(4, 3)": "x", "(3,) running mean": "rm", "(3,) running var": "rv", "tensor([1, 0])": "idx"}
        shapes = "|".join(re.escape(k) for k in kinds)
        inputs = [
            Input(m[1], kinds[m[2]], m[4] is not None, m[5] is not None, m[3] is not None)
            for m in re.finditer(rf"(\w+) ({shapes})( transposed)?( requires_grad)?( \(non-leaf\))?", lines[0])
        ]
        returns = lines[-1].strip().removeprefix("return (").removesuffix(",)").split(", ")
        return cls(tuple(inputs), tuple(line[4:] for line in lines[2:-1]), tuple(returns))

    def __str__(self) -> str:
        return self.source

    def __repr__(self) -> str:
        return "\n" + self.source

    def _repr_pretty_(self, printer, cycle) -> None:  # hypothesis' "Falsifying example" printer
        printer.text(repr(self))

    @property
    def has_grad_inputs(self) -> bool:
        return any(i.requires_grad for i in self.inputs)

    def function(self) -> Callable:
        """The program as a real Python function (compiled once)."""
        if self._fn is None:
            self._fn = compile_source(self.source, "fuzz")
        return self._fn

    def make_args(self, grad: bool, device: str = "cpu") -> tuple:
        return tuple(i.make(grad, device) for i in self.inputs)

    def builder(self, grad: bool, device: str = "cpu") -> Builder:
        """A :data:`~thunder_ext.testing.compare.Builder`; ``grad=False`` turns every ``requires_grad`` off.
        ``device``: where the inputs live (``"cuda"`` meets nvFuser, the default executors there)."""
        fn = self.function()
        return lambda: (fn, self.make_args(grad, device), {})


def compile_source(source: str, name: str) -> Callable:
    """Compile ``source`` under a fresh ``<fuzz-N>`` file name, registered in linecache."""
    filename = f"<fuzz-{next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict = {"torch": torch, "F": F}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


# -- the generator ---------------------------------------------------------------------------


@dataclass
class _Var:
    name: str
    shape: tuple[int, ...]
    root: str  # the storage this name views
    contiguous: bool = True  # as eager lays it out (:attr:`_Builder.layout` says)
    writable: bool = True  # False for expanded views (several elements share memory)


class _Builder:
    """Mutable generation state: live names, shapes, storage bounds and emitted lines."""

    def __init__(self, draw, inputs: list[Input], *, leaf_writes: bool) -> None:
        self.draw = draw
        # eager refuses in-place writes to (views of) leaves that require grad; drawn rarely
        self.protected = set() if leaf_writes else {i.name for i in inputs if i.requires_grad and not i.nonleaf}
        self.inputs = inputs
        self.vars: list[_Var] = []
        self.bound: dict[str, float] = {}
        self.lines: list[str] = []
        self.count = 0
        # Each name's eager layout, from running its expression on zeros: strides decide whether
        # ``view`` is legal and whether ``reshape``/``flatten``/``contiguous`` copy, and a
        # transposed input makes its computed values transposed too.
        self.layout: dict[str, torch.Tensor] = {}
        for i in inputs:
            shape = BASE_SHAPE if i.kind == "x" else (3,)
            self.layout[i.name] = i.make(False).zero_()
            self.vars.append(_Var(i.name, shape, i.name, contiguous=self.layout[i.name].is_contiguous()))
            self.bound[i.name] = {"x": INPUT_BOUND, "rm": 1.0, "rv": 2.0}[i.kind]

    # helpers

    def b(self, v: _Var) -> float:
        return self.bound[v.root]

    def pick(self, pred: Callable[[_Var], bool] = lambda v: True) -> _Var | None:
        cands = [v for v in self.vars if pred(v)]
        return self.draw(st.sampled_from(cands)) if cands else None

    def new(
        self, expr: str, shape: tuple[int, ...], bound: float, *, root: str | None = None, writable=True
    ) -> None:
        name = f"t{self.count}"
        self.count += 1
        self.lines.append(f"{name} = {expr}")
        r = root if root is not None else name
        self.layout[name] = t = self.eager_layout(expr)
        assert tuple(t.shape) == shape, (expr, t.shape, shape)  # the generator's own shape tracking
        self.vars.append(_Var(name, shape, r, t.is_contiguous(), writable))
        if root is None:
            self.bound[name] = bound

    def eager_layout(self, expr: str) -> torch.Tensor:
        """``expr`` run by eager on the names' zero-filled stand-ins (only its strides are used)."""
        with torch.no_grad():
            return eval(expr, {"torch": torch, "F": F}, dict(self.layout))

    def target(self, pred: Callable[[_Var], bool] = lambda v: True) -> _Var | None:
        """A name to write to."""
        return self.pick(lambda v: v.root not in self.protected and v.writable and pred(v))

    def write(self, v: _Var, line: str, value_bound: float) -> None:
        self.lines.append(line)
        self.bound[v.root] = max(self.bound[v.root], value_bound)

    def input_named(self, kind: str) -> Input | None:
        return next((i for i in self.inputs if i.kind == kind), None)

    def need_idx(self) -> str:
        i = self.input_named("idx")
        if i is None:
            i = Input("idx", "idx")
            self.inputs.append(i)
            self.layout[i.name] = i.make(False)
        return i.name

    # statements: each returns False when nothing in scope fits

    def unary(self) -> bool:
        op = self.draw(st.sampled_from(("sin", "cos", "tanh", "sigmoid", "neg", "exp")))
        v = self.pick((lambda v: self.b(v) <= 3.0) if op == "exp" else (lambda v: True))
        if v is None:
            return False
        bound = {"neg": self.b(v), "exp": math.exp(self.b(v))}.get(op, 1.0)
        self.new(f"{v.name}.{op}()", v.shape, bound)
        return True

    def binary(self) -> bool:
        op = self.draw(st.sampled_from(("+", "*", "-")))
        v = self.pick()
        other, ob = self.operand(v)
        bound = self.b(v) * ob if op == "*" else self.b(v) + ob
        if bound > LIMIT:
            return False
        self.new(f"{v.name} {op} {other}", v.shape, bound)
        return True

    def operand(self, v: _Var) -> tuple[str, float]:
        """A same-shape tensor or a constant, and its bound."""
        w = self.pick(lambda w: w.shape == v.shape) if self.draw(st.booleans()) else None
        if w is None:
            c = self.draw(st.sampled_from(CONSTANTS))
            return repr(c), abs(c)
        return w.name, self.b(w)

    def view(self) -> bool:
        kinds = (
            "[0]", "[1:]", "[:2]", "[:, 1]", "view(-1)", "view(2, 6)", "reshape(3, 4)", "t()", "unsqueeze(0)",
            "[::2]", "expand", "diagonal()", "split(2)[1]", "narrow(1, 1, 2)", "transpose(0, 1)", "select(1, 0)",
            "[:, ::2]", "ravel()", "linalg.diagonal", "flatten()", "reshape(-1)", "contiguous()", "view_as",
            "detach()",
        )
        kind = self.draw(st.sampled_from(kinds))
        v = self.pick(lambda v: _view_shape(kind, v) is not None)
        if v is None:
            return False
        shape = _view_shape(kind, v)
        if kind == "expand":
            self.new(f"{v.name}.expand{shape}", shape, 0.0, root=v.root, writable=False)
            return True
        expr = f"{v.name}{kind}" if kind.startswith("[") else f"{v.name}.{kind}"
        if kind == "linalg.diagonal":
            expr = f"torch.linalg.diagonal({v.name})"
        if kind == "view_as":
            expr = f"{v.name}.view_as({v.name})"
        out, base = self.eager_layout(expr), self.layout[v.name]
        if out.untyped_storage().data_ptr() != base.untyped_storage().data_ptr():
            # reshape, ravel, flatten or contiguous copied: eager's strides of v make it a new storage
            self.new(expr, shape, self.b(v))
        else:
            self.new(expr, shape, 0.0, root=v.root)
        return True

    def reduce(self) -> bool:
        v = self.pick(lambda v: len(v.shape) == 2)
        if v is None:
            return False
        op = self.draw(st.sampled_from(("sum", "mean")))
        dim = self.draw(st.integers(0, 1))
        bound = self.b(v) * (v.shape[dim] if op == "sum" else 1)
        if bound > LIMIT:
            return False
        shape = tuple(s for d, s in enumerate(v.shape) if d != dim)
        self.new(f"{v.name}.{op}({dim})", shape, bound)
        return True

    def inplace_unary(self) -> bool:
        op = self.draw(st.sampled_from(("sin_", "cos_", "tanh_", "clamp_(-1.0, 1.0)", "neg_", "exp_", "relu")))
        v = self.target((lambda v: self.b(v) <= 3.0) if op == "exp_" else (lambda v: True))
        if v is None:
            return False
        bound = {"neg_": self.b(v), "exp_": math.exp(self.b(v)), "relu": self.b(v)}.get(op, 1.0)
        line = f"F.relu({v.name}, inplace=True)" if op == "relu" else f"{v.name}.{op}"
        line += "" if op == "relu" or op.endswith(")") else "()"
        self.write(v, line, bound)
        return True

    def inplace_binary(self) -> bool:
        op = self.draw(st.sampled_from(("add_", "mul_", "sub_", "+=")))
        v = self.target()
        if v is None:
            return False
        other, ob = self.operand(v)
        bound = self.b(v) * ob if op == "mul_" else self.b(v) + ob
        if bound > LIMIT:
            return False
        line = f"{v.name} += {other}" if op == "+=" else f"{v.name}.{op}({other})"
        self.write(v, line, bound)
        return True

    def copy(self) -> bool:
        v = self.target()
        w = self.pick(lambda w: w.shape == v.shape and w.name != v.name) if v is not None else None
        if w is None:
            return False
        self.write(v, f"{v.name}.copy_({w.name})", self.b(w))
        return True

    def setitem(self) -> bool:
        v = self.target(lambda v: len(v.shape) >= 1 and v.shape[0] >= 2)
        if v is None:
            return False
        where = self.draw(st.sampled_from(("[0]", "[1:]")))
        w = self.pick(lambda w: w.shape == v.shape[1:]) if self.draw(st.booleans()) else None
        if w is None:
            c = self.draw(st.sampled_from(CONSTANTS))
            self.write(v, f"{v.name}{where} = {c!r}", abs(c))
        else:
            self.write(v, f"{v.name}{where} = {w.name}", self.b(w))
        return True

    def index_copy(self) -> bool:
        v = self.target(lambda v: len(v.shape) >= 1 and v.shape[0] >= 2)
        if v is None:
            return False
        w = self.pick(lambda w: w.shape == (2, *v.shape[1:]))
        if w is None:
            return False
        self.write(v, f"{v.name}.index_copy_(0, {self.need_idx()}, {w.name})", self.b(w))
        return True

    def batch_norm(self) -> bool:
        rm, rv = self.input_named("rm"), self.input_named("rv")
        if rm is None or rv is None:
            return False
        v = self.pick(lambda v: v.shape == BASE_SHAPE and self.b(v) <= 7.0)
        if v is None:
            return False
        self.bound["rm"] = max(self.bound["rm"], self.b(v))
        self.bound["rv"] = max(self.bound["rv"], 2 * self.b(v) ** 2)
        self.new(f"F.batch_norm({v.name}, rm, rv, training=True, momentum=0.1)", BASE_SHAPE, 2.0)
        return True

    def buffer_update(self) -> bool:
        """A running statistic updated by hand, as modules do with their buffers."""
        buf = self.draw(st.sampled_from(("rm", "rv")))
        if self.input_named(buf) is None:
            return False
        v = self.pick(lambda v: v.shape == BASE_SHAPE)
        if v is None:
            return False
        # Modules update their buffers without grad (eager's batch_norm refuses stats that carry one).
        self.lines.append(f"with torch.no_grad(): {buf}.mul_(0.9).add_({v.name}.mean(0), alpha=0.1)")
        self.bound[buf] = max(self.bound[buf], self.b(v))  # a convex mix of the two
        return True

    def no_grad_write(self) -> bool:
        """A write under ``torch.no_grad()`` (an EMA-style update), into any writable name: eager
        allows it on a leaf that requires grad too, and later reads keep the tensor's history."""
        v = self.pick(lambda v: v.writable)
        if v is None:
            return False
        op = self.draw(st.sampled_from(("mul_", "add_", "lerp_")))
        other, ob = self.operand(v)
        if op == "lerp_":
            w = self.pick(lambda w: w.shape == v.shape and w.name != v.name)
            if w is None:
                return False
            line, bound = f"{v.name}.lerp_({w.name}, 0.1)", max(self.b(v), self.b(w))
        else:
            line, bound = f"{v.name}.{op}({other})", self.b(v) * ob if op == "mul_" else self.b(v) + ob
        if bound > LIMIT:
            return False
        self.write(v, f"with torch.no_grad(): {line}", bound)
        return True

    def identity(self) -> bool:
        """An op that hands back its input itself (a no-op ``to``, ``dropout`` or ``alpha_dropout``
        with ``p=0`` or in eval mode, ``contiguous`` of a contiguous tensor, ``torch.positive``):
        the result aliases the input whole."""
        form = self.draw(st.sampled_from(("contiguous()", "to(torch.float32)", "float()", "type_as", "dropout", "positive", "alpha_dropout")))
        v = self.pick((lambda v: v.contiguous) if form == "contiguous()" else (lambda v: True))
        if v is None:
            return False
        if form == "type_as":
            expr = f"{v.name}.type_as({v.name})"
        elif form in ("dropout", "alpha_dropout"):
            expr = f"F.{form}({v.name}, {self.draw(st.sampled_from(('0.0', '0.0, True', '0.5, False')))})"
        elif form == "positive":
            expr = f"torch.positive({v.name})"
        else:
            expr = f"{v.name}.{form}"
        self.new(expr, v.shape, 0.0, root=v.root, writable=v.writable)
        return True

    def matmul(self) -> bool:
        """``v @ w.t()``: a backward that saves both operands, as a linear layer's does."""
        v = self.pick(lambda v: len(v.shape) == 2)
        w = self.pick(lambda w: w.shape == v.shape) if v is not None else None
        if w is None:
            return False
        bound = self.b(v) * self.b(w) * v.shape[1]
        if bound > LIMIT:
            return False
        self.new(f"{v.name} @ {w.name}.t()", (v.shape[0], v.shape[0]), bound)
        return True

    def inplace_other(self) -> bool:
        """In-place ops beyond the elementwise twins: other arities, masks, fills, ``index_add_``."""
        op = self.draw(st.sampled_from(
            ("div_", "addcmul_", "addcdiv_", "masked_fill_", "zero_", "abs_", "square_", "silu", "leaky_relu", "index_add_")
        ))
        v = self.target((lambda v: len(v.shape) >= 1 and v.shape[0] >= 2) if op == "index_add_" else (lambda v: True))
        if v is None:
            return False
        b = self.b(v)
        c = self.draw(st.sampled_from(CONSTANTS))
        if op in ("div_", "masked_fill_", "zero_", "abs_", "square_", "silu", "leaky_relu"):
            line, bound = {
                "div_": (f"{v.name}.div_({c!r})", b / abs(c)),
                "masked_fill_": (f"{v.name}.masked_fill_({v.name} > 0, {c!r})", max(b, abs(c))),
                "zero_": (f"{v.name}.zero_()", 0.0),
                "abs_": (f"{v.name}.abs_()", b),
                "silu": (f"F.silu({v.name}, inplace=True)", max(b, 0.3)),
                "leaky_relu": (f"F.leaky_relu({v.name}, 0.1, inplace=True)", b),
                "square_": (f"{v.name}.square_()", b * b),
            }[op]
        else:
            w = self.pick(lambda w: w.shape == ((2, *v.shape[1:]) if op == "index_add_" else v.shape))
            if w is None:
                return False
            if op == "addcmul_":
                line, bound = f"{v.name}.addcmul_({w.name}, {w.name}, value={c!r})", b + abs(c) * self.b(w) ** 2
            elif op == "addcdiv_":
                line, bound = f"{v.name}.addcdiv_({w.name}, {w.name}.abs() + 1, value={c!r})", b + abs(c) * self.b(w)
            else:
                line, bound = f"{v.name}.index_add_(0, {self.need_idx()}, {w.name})", b + self.b(w)
        if bound > LIMIT:
            return False
        self.write(v, line, bound)
        return True

    STATEMENTS = (
        "identity",
        "matmul",
        "inplace_other",
        "unary",
        "binary",
        "inplace_unary",
        "inplace_binary",
        "view",
        "reduce",
        "copy",
        "setitem",
        "index_copy",
        "batch_norm",
        "buffer_update",
        "no_grad_write",
    )


def _view_shape(kind: str, v: _Var) -> tuple[int, ...] | None:
    """The shape of ``v`` viewed as ``kind``, or None when it does not apply (``view`` needs a
    contiguous ``v``, and ``contiguous()`` of a contiguous one is an identity op, drawn there)."""
    s, n = v.shape, len(v.shape)
    if kind == "[0]":
        return s[1:] if n >= 1 and s[0] >= 1 else None
    if kind == "[1:]":
        return (s[0] - 1, *s[1:]) if n >= 1 and s[0] >= 2 else None
    if kind == "[:2]":
        return (2, *s[1:]) if n >= 1 and s[0] >= 3 else None
    if kind == "[:, 1]":
        return (s[0],) if n == 2 and s[1] >= 2 else None
    if kind == "view(-1)":
        return (math.prod(s),) if v.contiguous and n >= 2 else None
    if kind == "view(2, 6)":
        return (2, 6) if v.contiguous and math.prod(s) == 12 and s != (2, 6) else None
    if kind == "reshape(3, 4)":
        return (3, 4) if math.prod(s) == 12 and s != (3, 4) else None
    if kind == "t()":
        return (s[1], s[0]) if n == 2 else None
    if kind == "unsqueeze(0)":
        return (1, *s) if n <= 2 else None
    if kind == "[::2]":
        return ((s[0] + 1) // 2, *s[1:]) if n >= 1 and s[0] >= 3 else None
    if kind == "expand":
        return (2, *s) if n <= 2 else None
    if kind == "diagonal()":
        return (min(s),) if n == 2 else None
    if kind == "narrow(1, 1, 2)":
        return (s[0], 2) if n == 2 and s[1] >= 3 else None
    if kind == "transpose(0, 1)":
        return (s[1], s[0]) if n == 2 else None
    if kind == "select(1, 0)":
        return (s[0],) if n == 2 else None
    if kind == "[:, ::2]":
        return (s[0], (s[1] + 1) // 2) if n == 2 and s[1] >= 2 else None
    if kind == "ravel()":
        return (math.prod(s),) if n >= 2 else None
    if kind in ("flatten()", "reshape(-1)"):
        return (math.prod(s),) if n >= 1 else None
    if kind == "contiguous()":  # of a contiguous tensor it is the tensor itself: an identity op, drawn there
        return s if not v.contiguous else None
    if kind in ("view_as", "detach()"):
        return s
    if kind == "linalg.diagonal":
        return (min(s),) if n == 2 else None
    if kind == "split(2)[1]":
        return (min(2, s[0] - 2), *s[1:]) if n >= 1 and s[0] >= 3 else None
    raise ValueError(kind)


@st.composite
def programs(draw, max_statements: int = MAX_STATEMENTS) -> Program:
    """Hypothesis strategy: a random straight-line in-place :class:`Program`."""
    n_inputs = draw(st.integers(1, 3))
    inputs = []
    for name in "abc"[:n_inputs]:
        grad = draw(st.booleans())
        nonleaf = grad and draw(st.booleans())
        inputs.append(Input(name, "x", grad, nonleaf=nonleaf, transposed=draw(st.integers(0, 3)) == 0))
    if draw(st.booleans()):
        inputs += [Input("rm", "rm"), Input("rv", "rv")]
    g = _Builder(draw, inputs, leaf_writes=draw(st.integers(0, 3)) == 3)
    for _ in range(draw(st.integers(1, max_statements))):
        kind = draw(st.sampled_from(_Builder.STATEMENTS))
        getattr(g, kind)()
    names = [v.name for v in g.vars]
    # later names first: shrinking then prefers returning what the body computed
    returns = draw(st.lists(st.sampled_from(names[::-1]), min_size=1, max_size=3, unique=True))
    return Program(_used_inputs(g.inputs, [*g.lines, *returns]), tuple(g.lines), tuple(returns))


def _used_inputs(inputs: list[Input], lines: list[str]) -> tuple[Input, ...]:
    """Inputs the program mentions, and those that require grad (their grad, None, is compared)."""
    words = {w for line in lines for w in re.findall(r"\w+", line)}
    return tuple(i for i in inputs if i.name in words or i.requires_grad)


# -- the verdict ---------------------------------------------------------------------------


class FuzzFailure(AssertionError):
    """A cell broke the verdict rule.  Subclasses let hypothesis tell distinct bugs apart."""


class WrongResult(FuzzFailure):
    """Compiled numbers differ from eager's."""


class MissedRefusal(FuzzFailure):
    """Eager raised, the compiled run returned numbers."""


class CheckerCaught(FuzzFailure):
    """``check=True`` raised TraceInvariantError: the pass produced an invalid trace."""


class CompiledCrash(FuzzFailure):
    """The compiled run crashed, and plain Thunder does not crash the same way."""


class TraceViolation(FuzzFailure):
    """A correct run whose final or fusion-stage trace fails :func:`verify`."""


class NeedlessRefusal(FuzzFailure):
    """The transform refused a program that plain Thunder (same executors) answers as eager does."""


FAILURE_KINDS: dict[str, type[FuzzFailure]] = {
    "wrong": WrongResult,
    "missed-refusal": MissedRefusal,
    "checker": CheckerCaught,
    "crash": CompiledCrash,
    "violation": TraceViolation,
    "needless-refusal": NeedlessRefusal,
}

# The one refusal allowed where plain Thunder is right: a write with grad enabled to an input
# that requires grad (class 9), whose autograd history the caller's tensor cannot receive.
ALLOWED_REFUSALS_UNDER_GRAD = ("GradInputWriteError",)


@dataclass
class Cell:
    """The outcome of one (config, grad mode) run."""

    config: Config
    grad: bool
    status: str  # differential's status
    detail: str
    verdict: str  # 'ok', 'out-of-scope' or a FAILURE_KINDS key
    plain: str | None = None  # plain Thunder's status in this cell, where it was asked (refusals, crashes)

    @property
    def failed(self) -> bool:
        return self.verdict in FAILURE_KINDS

    def label(self) -> str:
        executors = "" if self.config.executors == "default" else f"{self.config.executors}/"
        return f"{executors}{self.config.fusion_type}/{'grad' if self.grad else 'no-grad'}"

    def signature(self) -> str:
        """A short key that groups failures of the same kind (names and numbers erased)."""
        detail = re.sub(r"`[^`]*`", "_", self.detail)
        detail = re.sub(r"\d+(\.\d+)?", "N", detail)[:120]
        return f"{self.verdict}: {detail}"

    def __str__(self) -> str:
        return f"{self.label()}: {self.status} -> {self.verdict}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class Judgement:
    cells: list[Cell]

    @property
    def failures(self) -> list[Cell]:
        return [c for c in self.cells if c.failed]

    @property
    def out_of_scope(self) -> bool:
        """Every cell hit a Thunder limitation: nothing was tested."""
        return all(c.verdict == "out-of-scope" for c in self.cells)

    def raise_first_failure(self) -> None:
        if self.failures:
            c = self.failures[0]
            others = "".join(f"\n  also {o}" for o in self.failures[1:])
            raise FAILURE_KINDS[c.verdict](f"{c}{others}")


def _error_chain(e: BaseException | None) -> list[BaseException]:
    out, seen = [], set()
    while e is not None and id(e) not in seen:
        out.append(e)
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return out


def _is_checker_error(e: BaseException | None) -> bool:
    from thunder_ext.checker import TraceInvariantError

    return any(isinstance(x, TraceInvariantError) for x in _error_chain(e))


def trace_violations(compiled) -> list[str]:
    """Violations that :func:`verify` finds in the final (before barrier removal) and fusion-stage traces of ``compiled``."""
    from thunder_ext.checker import verify
    from thunder_ext.integration import collect_final_traces, collect_fusion_stage_traces

    traces = [t for fw, bw in collect_final_traces(compiled, with_barriers=True) for t in (fw, bw) if t is not None]
    traces += collect_fusion_stage_traces(compiled)
    return [str(v) for t in traces for v in verify(t)]


def _where(e: BaseException | None) -> str:
    """``file:line in function`` of the innermost frame of ``e``'s traceback."""
    tb = e.__traceback__ if e is not None else None
    if tb is None:
        return "?"
    frame = traceback.extract_tb(tb)[-1]
    path = frame.filename.split("site-packages/")[-1].split("/work/main/")[-1]
    return f"{path}:{frame.lineno} in {frame.name}"


def _violation_kinds(e: BaseException | None) -> str:
    kinds = re.findall(r"^\s*\[([\w-]+)\]", str(e), flags=re.M)
    return ", ".join(sorted(set(kinds)))


# Thunder limitations docs/limits.md documents, by the exact error each raises.
# Nothing else is exempt from the verdict, whatever plain Thunder does.
DOCUMENTED_CRASHES: dict[str, str] = {
    "class 7: Thunder 0.2.6 substitutes aliasing inputs": r"Attempting to reshape .* is different from the number of elements",
    "class 8: Thunder's alias pass inside autograd.Function": r"Detected a cycle while swapping",
    "torch_compile_ex: Inductor's C++ code generation": r"CppCompileError",
    # No gradient rule for prims.index_add in Thunder 0.2.6, with or without the transform.
    "Thunder's autodiff: no gradient rule for index_add": r"Failed to find a gradient transform for bound symbol .*prims\.index_add",
    # Thunder's generic ``*_vjp`` (a backward taken from PyTorch: ``narrow``, ``norm``, ``var``)
    # inside a region: Dynamo cannot wrap optree's metadata, with or without the transform.
    "torch_compile_ex: Thunder's vjp taken from PyTorch": r"does not know how to wrap <class 'optree\.registry\.DictMetaData'>",
    # PyTorch's meta function lays out batch_norm's output like a transposed input, eager's kernel
    # contiguously: a ``view`` eager allows fails in Dynamo's fake run, plain torch.compile too.
    "Dynamo's fake tensors: strides unlike eager's (batch_norm)": (
        r"^ValueError: Cannot view a tensor with shape .* and strides .* as a tensor with shape .*"
        r" at torch/_refs/__init__\.py:\d+ in _reshape_view_helper"
    ),
    # An output eager computes without grad (running stats, copied into a tensor that carries
    # one) gets a grad_fn from Thunder, whose backward then fails on a bare assert.
    "Thunder's backward on an output eager does not differentiate": (
        r"^AssertionError: *at thunder/executors/torch_autograd\.py:\d+ in backward$"
    ),
}


def documented_crash(error: BaseException | None) -> str | None:
    """The documented limit ``error`` (or an exception in its chain) is an instance of, if any.

    Each exception is matched as its message, and as ``Type: first line at file:line in function``
    (a bare ``assert`` has no message, only a place).
    """
    texts = []
    for e in _error_chain(error):
        first = (str(e).strip().splitlines() or [""])[0]
        texts += [str(e), f"{type(e).__name__}: {first} at {_where(e)}"]
    return next(
        (name for name, pattern in DOCUMENTED_CRASHES.items() if any(re.search(pattern, t, re.M) for t in texts)),
        None,
    )


def _same_error(compiled: BaseException | None, eager: BaseException) -> bool:
    """The compiled run raised an error of eager's type somewhere in its chain.

    The wording may differ (eager: "a view of a leaf Variable ...", Thunder's runtime: "a leaf
    Variable ..."): the program is invalid, and the user gets an error either way.  Dynamo
    (``torch_compile_ex``) re-raises an error it saw the traced code raise as
    ``Observed<Type>`` (``ObservedRuntimeError``): that is eager's error too.
    """
    names = {type(eager).__name__, f"Observed{type(eager).__name__}"}
    return any(type(e) is type(eager) or type(e).__name__ in names for e in _error_chain(compiled))


def judge_cell(build: Builder, config: Config, grad: bool, baseline: Callable[..., object]) -> Cell:
    """Classify one run by the verdict rule; ``baseline(entry="jit")`` is plain Thunder's verdict (lazy)."""
    v = differential(build, config)
    error = v.outcome.error if v.outcome is not None else None

    def cell(verdict: str, detail: str = v.detail, plain: str | None = None) -> Cell:
        return Cell(config, grad, v.status, detail, verdict, plain)

    if v.status == "correct":
        violations = trace_violations(v.outcome.compiled)
        return cell("violation", violations[0][:300]) if violations else cell("ok")
    if v.status == "refused":
        if _is_checker_error(error):
            stage = re.search(r"on the ([\w ()-]+?):", str(error))
            return cell("checker", f"{_violation_kinds(error)} on the {stage.group(1) if stage else '?'}")
        if grad and any(type(e).__name__ in ALLOWED_REFUSALS_UNDER_GRAD for e in _error_chain(error)):
            return cell("ok")
        plain = baseline()
        if plain.status == "correct":
            return cell("needless-refusal", f"{v.detail} [plain thunder: correct]", plain.status)
        return cell("ok", plain=plain.status)
    if v.status == "wrong":
        reason = documented_difference(build, v)
        if reason is not None:
            return cell("ok", reason)
        return cell("missed-refusal" if v.eager_error is not None else "wrong")
    if v.eager_error is not None and _same_error(error, v.eager_error):
        return cell("ok", "raises as eager does")
    documented = documented_crash(error)
    if documented is not None:
        # A limit of Thunder's or PyTorch's hits plain Thunder too; where plain Thunder answers,
        # the transform's trace brought it on (``b.copy_(a); b.view(-1)`` made ``clone(a)``,
        # laid out like a transposed ``a``: soak seed 103000).
        same_entry = baseline(entry=config.entry)
        if same_entry.status != "correct":
            return cell("out-of-scope", f"documented limit: {documented}", same_entry.status)
        return cell("crash", f"{v.detail} at {_where(error)} [documented limit {documented!r}, "
                    f"but plain thunder via {config.entry}: correct]", same_entry.status)
    plain = baseline()
    return cell("crash", f"{v.detail} at {_where(error)} [plain thunder: {plain.status}]", plain.status)


def judge_builders(builders: Mapping[bool, Builder], configs: Sequence[Config] = CONFIGS) -> Judgement:
    """Judge every config in every grad mode; ``builders`` maps grad mode to a builder.

    The plain-Thunder baseline of a cell uses the cell's executors (an Inductor crash is
    ``torch_compile_ex``'s, not the default executors').
    """
    cells = []
    for grad, build in builders.items():
        plain: dict[tuple[str, str], object] = {}

        def baseline(executors: str, entry: str = "jit", build=build, plain=plain):
            if (executors, entry) not in plain:
                plain[executors, entry] = differential(build, replace(PLAIN_BASELINE, executors=executors, entry=entry))
            return plain[executors, entry]

        cells += [judge_cell(build, c, grad, partial(baseline, c.executors)) for c in configs]
    return Judgement(cells)


def judge(
    program: Program, configs: Sequence[Config] = CONFIGS, *, cell: int | None = None, device: str = "cpu"
) -> Judgement:
    """The verdict rule over ``program``: with grad (as generated) when any input wants it, and without.

    ``cell`` judges one cell only: ``configs[cell % len(configs)]``, with grad when
    ``cell // len(configs)`` is odd and the program has inputs that want it (a soak that
    rotates through the cells covers each of them in turn, at a fraction of the cost).
    ``device``: where the inputs live (``"cuda"`` meets nvFuser).
    """
    modes = (False, True) if program.has_grad_inputs else (False,)
    if cell is not None:
        grad = program.has_grad_inputs and (cell // len(configs)) % 2 == 1
        return judge_builders({grad: program.builder(grad, device)}, (configs[cell % len(configs)],))
    return judge_builders({g: program.builder(g, device) for g in modes}, configs)


def judge_function(
    fn: Callable, make_args: Callable[[bool], tuple], *, grad_modes=(False, True), configs: Sequence[Config] = CONFIGS
) -> Judgement:
    """The verdict rule over a hand-written function (regression tests).

    ``make_args(grad)`` returns fresh inputs; with ``grad=False`` none may require grad.
    """
    return judge_builders({g: (lambda g=g: (fn, make_args(g), {})) for g in grad_modes}, configs)


# -- the soak ------------------------------------------------------------------------------


@dataclass
class SoakResult:
    ran: int = 0  # programs judged
    with_grad: int = 0  # of which some input requires grad
    out_of_scope: int = 0
    cells: dict[str, int] = field(default_factory=dict)  # verdict -> count
    # correct / refused: <error class> / wrong / crash, and for cells judged ok although the run
    # did not match: "raises as eager does" / "documented exception"
    statuses: dict[str, int] = field(default_factory=dict)
    failures: dict[str, list[Program]] = field(default_factory=dict)  # signature -> programs
    cells_of: dict[str, set[str]] = field(default_factory=dict)  # signature -> cell labels

    def record(self, program: Program, j: Judgement) -> None:
        self.ran += 1
        self.with_grad += program.has_grad_inputs
        self.out_of_scope += j.out_of_scope
        for c in j.cells:
            self.cells[c.verdict] = self.cells.get(c.verdict, 0) + 1
            key = f"refused: {c.detail.split(':')[0]}" if c.status == "refused" else c.status
            if c.status == "refused" and c.plain is None:
                key += " (class 9 under grad)" if c.verdict == "ok" else ""
            elif c.status == "refused":
                key += f" (plain thunder: {c.plain})"
            if c.verdict == "ok" and c.status in ("wrong", "crash"):
                # Not a failure: eager raises too, or a documented exception (see judge_cell).
                key = "raises as eager does" if c.status == "crash" else "documented exception"
                if c.detail.startswith("float rounding"):
                    key = "float rounding (eager in float64 agrees)"
            self.statuses[key] = self.statuses.get(key, 0) + 1
        for c in j.failures:
            progs = self.failures.setdefault(c.signature(), [])
            if not progs or progs[-1] is not program:
                progs.append(program)
            self.cells_of.setdefault(c.signature(), set()).add(c.label())

    @property
    def failed_programs(self) -> int:
        return len({id(p) for ps in self.failures.values() for p in ps})

    def smallest(self, signature: str) -> Program:
        return min(self.failures[signature], key=lambda p: (len(p.body), len(p.source)))

    def summary(self) -> dict:
        """Plain data (JSON): the counts, and per failure signature its program count, cells and smallest program."""
        return {
            "ran": self.ran,
            "with_grad": self.with_grad,
            "out_of_scope": self.out_of_scope,
            "cells": dict(self.cells),
            "statuses": dict(self.statuses),
            "failures": {
                sig: {"programs": len(progs), "cells": sorted(self.cells_of[sig]), "smallest": self.smallest(sig).source}
                for sig, progs in self.failures.items()
            },
        }


def merge_summaries(summaries: Sequence[dict]) -> dict:
    """Add up :meth:`SoakResult.summary` dicts from soaks of different seeds (``scripts/soak.py --jobs``)."""
    total: dict = {"ran": 0, "with_grad": 0, "out_of_scope": 0, "cells": {}, "statuses": {}, "failures": {}}
    for s in summaries:
        for key in ("ran", "with_grad", "out_of_scope"):
            total[key] += s[key]
        for key in ("cells", "statuses"):
            for k, v in s[key].items():
                total[key][k] = total[key].get(k, 0) + v
        for sig, f in s["failures"].items():
            t = total["failures"].setdefault(sig, {"programs": 0, "cells": [], "smallest": f["smallest"]})
            t["programs"] += f["programs"]
            t["cells"] = sorted(set(t["cells"]) | set(f["cells"]))
            if len(f["smallest"]) < len(t["smallest"]):
                t["smallest"] = f["smallest"]
    return total


def soak(
    max_examples: int,
    *,
    seed: int | None = None,
    on_program: Callable | None = None,
    configs: Sequence[Config] = CONFIGS,
    time_limit: float | None = None,
    rotate: bool = False,
    device: str = "cpu",
) -> SoakResult:
    """Judge ``max_examples`` random programs under ``configs`` without stopping at failures; group them by signature.

    ``time_limit`` (seconds) ends the soak early, after the program in flight, with what it has
    judged so far: a soak on a machine lent for minutes must return its counts, not be killed.
    ``rotate`` judges each program in one cell, the next program in the next cell (``judge``'s
    ``cell``): many more programs per minute, each cell still judged on every 2·len(configs)-th.
    ``device``: where the programs' inputs live (``"cuda"``: nvFuser's cells on a GPU).
    """
    import time

    from hypothesis import HealthCheck, Phase, given, reject, settings
    from hypothesis import seed as hseed

    result = SoakResult()
    stop_at = None if time_limit is None else time.monotonic() + time_limit

    class _TimeUp(Exception):
        pass

    @settings(
        max_examples=max_examples,
        derandomize=False,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(programs())
    def run(program: Program) -> None:
        if stop_at is not None and time.monotonic() > stop_at:
            raise _TimeUp
        j = judge(program, configs, cell=result.ran if rotate else None, device=device)
        result.record(program, j)
        if on_program is not None:
            on_program(result, program, j)
        if j.out_of_scope:
            reject()

    if seed is not None:
        run = hseed(seed)(run)
    try:
        run()
    except _TimeUp:
        pass
    except BaseException as e:  # hypothesis may wrap the stop in a group
        if not (stop_at is not None and time.monotonic() > stop_at and _only_time_up(e, _TimeUp)):
            raise
    return result


def _only_time_up(error: BaseException, kind: type) -> bool:
    if isinstance(error, kind):
        return True
    inner = getattr(error, "exceptions", None)
    return bool(inner) and all(_only_time_up(e, kind) for e in inner)


def fails_with(signature: str, configs: Sequence[Config] = CONFIGS, device: str = "cpu") -> Callable[[Program], bool]:
    """A predicate: some cell of the program's judgement under ``configs`` fails with ``signature``."""
    return lambda p: any(c.signature() == signature for c in judge(p, configs, device=device).failures)


def reduce(program: Program, still_fails: Callable[[Program], bool]) -> Program:
    """Greedily delete body lines, returns, ``requires_grad`` flags and inputs while ``still_fails``.

    A complement to hypothesis' shrinking that starts from a given program (the soak's).
    """
    def variants(p: Program):
        for k in reversed(range(len(p.body))):
            yield Program(p.inputs, p.body[:k] + p.body[k + 1 :], p.returns)
        if len(p.returns) > 1:
            for k in range(len(p.returns)):
                yield Program(p.inputs, p.body, p.returns[:k] + p.returns[k + 1 :])
        for k, i in enumerate(p.inputs):
            if i.requires_grad:
                flipped = Input(i.name, i.kind, False)
                yield Program(p.inputs[:k] + (flipped,) + p.inputs[k + 1 :], p.body, p.returns)
        used = _used_inputs(list(p.inputs), [*p.body, *p.returns])
        if len(used) < len(p.inputs):
            yield Program(used, p.body, p.returns)

    current, progress = program, True
    while progress:
        progress = False
        for candidate in variants(current):
            if still_fails(candidate):
                current, progress = candidate, True
                break
    return current
