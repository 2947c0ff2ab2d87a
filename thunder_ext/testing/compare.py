"""Differential runs: a function in eager PyTorch against the same function compiled by Thunder.

Used by the main job's gallery, by :func:`thunder_ext.check`, by the test suite and by the
fuzzer.  A run compares, exactly as ``torch.testing.assert_close`` does:

* every output;
* the state of every input (inputs are mutated too) and of extra state such as a module's
  buffers, both right after the call and after the backward;
* the gradients of every input that requires grad, for a fixed seeded cotangent;
* that every output eager hands back with autograd history has it (a zero gradient lost with
  the history is invisible to the comparison of gradients, not to the caller's ``backward``).

A compiled run is classified as ``correct``, ``wrong`` (silent wrong numbers), ``crash``
(any exception we do not document) or ``refused`` (one of thunder-ext's documented
errors).  When eager itself raises, the compiled run must raise too: ``refused`` then
counts as agreement, and returning numbers is ``wrong``.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from thunder_ext.errors import InplaceOrderingError

Builder = Callable[[], tuple[Callable, tuple, dict]]


@dataclass(frozen=True)
class Config:
    """One cell of the test matrix."""

    transform: bool = True
    fusion_type: str = "dataflow"
    executors: str = "default"  # 'default' or 'torch_compile'
    entry: str = "jit"  # 'jit' or 'thunderfx'
    check: bool = True

    def __str__(self) -> str:
        t = "transform" if self.transform else "plain"
        return f"{t}-{self.fusion_type}-{self.executors}-{self.entry}"


@dataclass
class Outcome:
    """What one run produced, or the exception it raised."""

    outputs: Any = None
    inputs: list = field(default_factory=list)
    state: dict = field(default_factory=dict)
    grads: list = field(default_factory=list)
    # Inputs and state right after the call, before any backward: a write deferred into the
    # backward would otherwise look right once the backward has run.
    after_call: list = field(default_factory=list)
    # Per flat output: whether it requires grad.  Eager's ``b.copy_(a); return b`` hands back a
    # ``b`` with history; an output that lost it fails the caller's ``backward`` even where
    # the gradient it would carry is zero (so comparing gradients cannot see it).
    requires_grad: list = field(default_factory=list)
    # Per input that did not require grad at the call: whether it does after it (it got a value
    # with a gradient in place).  Both directions matter: a caller's ``backward`` from it raises
    # in eager where it has no history, and misses a gradient where it lost one.
    plain_inputs_require_grad: list = field(default_factory=list)
    error: BaseException | None = None
    compiled: Any = None
    # Positions in ``grads`` of the ``retain_grad`` of non-leaf inputs the call wrote in place
    # (see fuzzing's documented exception for them).
    written_non_leaves: list = field(default_factory=list)


@dataclass
class Verdict:
    status: str  # 'correct', 'wrong', 'crash', 'refused'
    detail: str = ""
    eager_error: BaseException | None = None
    outcome: Outcome | None = None
    eager: Outcome | None = None  # the eager run it was compared with, when the compiled run returned

    @property
    def ok(self) -> bool:
        """The compiled run agrees with eager: same numbers, or both refuse."""
        if self.eager_error is not None:
            return self.status == "refused"
        return self.status == "correct"


def _clone(x):
    if isinstance(x, torch.Tensor):
        c = x.detach().clone().requires_grad_(x.requires_grad)
        # A non-leaf input stays one: eager allows writes to it (class 9), not to a leaf.
        return c * 1 if x.grad_fn is not None else c
    return x


def clone_args(args: Sequence) -> list:
    """Fresh copies of ``args`` that keep the aliasing between them.

    Tensors that share a storage (``f(x, x[0])``, class 7) are rebuilt as views of one
    cloned storage with their own sizes, strides and offsets; every other tensor is cloned
    on its own.
    """

    def key(a):
        return a.untyped_storage().data_ptr() if isinstance(a, torch.Tensor) and a.layout is torch.strided else None

    counts: dict = {}
    for a in args:
        if key(a) is not None:
            counts[key(a)] = counts.get(key(a), 0) + 1
    storages: dict = {}
    out = []
    for a in args:
        k = key(a)
        if k is None or counts[k] == 1:
            out.append(_clone(a))
            continue
        if k not in storages:
            storages[k] = a.untyped_storage().clone()
        view = torch.empty(0, dtype=a.dtype, device=a.device)
        view.set_(storages[k], a.storage_offset(), a.size(), a.stride())
        out.append(view.requires_grad_(a.requires_grad))
    return out


def _flat_tensors(x) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_flatten

    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def _cotangent_loss(outputs) -> torch.Tensor | None:
    gen = torch.Generator().manual_seed(1234)
    terms = []
    for o in _flat_tensors(outputs):
        if o.is_floating_point():
            # One cotangent per output position, drawn whether or not the output needs grad:
            # Thunder and eager may disagree on requires_grad of an output that no input reaches.
            c = torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device)
            if o.requires_grad:
                terms.append((o * c).sum())
    return sum(terms) if terms else None


def _total(received: list):
    """The gradients a hook received, summed (None when none came, or only None)."""
    grads = [g for g in received if g is not None]
    return sum(grads[1:], grads[0]) if grads else None


def execute(fn: Callable, args: Sequence, state: dict) -> Outcome:
    """Call ``fn`` on ``args`` and record outputs, final inputs, state and grads."""
    out = Outcome()
    # Gradients are compared for the inputs that require grad *before* the call: an in-place
    # copy from a differentiable tensor gives an input autograd history in eager only.
    grad_mode = torch.is_grad_enabled()
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    # A non-leaf input (``leaf * 1``) stands for a tensor the caller's graph made: what reaches
    # the caller's leaves is the gradient of its value *at the call*, which a hook registered
    # now receives even after in-place writes (``retain_grad`` follows them to the last version,
    # which is compared too: the caller may differentiate through that one later).
    at_call: list[list] = []
    non_leaves = [a for a in leaves if a.grad_fn is not None]
    versions = [a._version for a in non_leaves]
    plain = [a for a in args if isinstance(a, torch.Tensor) and not a.requires_grad and not a.is_inference()]
    plain_versions = [a._version for a in plain]
    for a in non_leaves:
        a.retain_grad()
        received: list = []
        a.register_hook(received.append)
        at_call.append(received)
    try:
        outputs = fn(*args)
        out.after_call = [
            a.detach().clone() if isinstance(a, torch.Tensor) else a for a in (*args, *state.values())
        ]
        # The caller may differentiate through its own tensors after the call: an input written
        # in place carries the write's history in eager (a non-leaf's, or a plain tensor's that
        # got a value with a gradient), so every written input joins the loss, after the outputs
        # (whose cotangents stay the same).  Not the others: their term would hide the
        # difference between a None and a zero gradient that the outputs give them.
        written = [a for a, v in zip(non_leaves, versions) if a._version != v]
        written_plain = [a for a, v in zip(plain, plain_versions) if a._version != v]
        out.written_non_leaves = [k for k, a in enumerate(leaves) if any(a is w for w in written)]
        loss = _cotangent_loss((outputs, written, written_plain))
        if loss is not None and leaves:
            loss.backward()
        out.requires_grad = [t.requires_grad for t in _flat_tensors(outputs)]
        out.plain_inputs_require_grad = [a.requires_grad for a in plain]
        out.outputs = torch.utils._pytree.tree_map(lambda t: t.detach() if isinstance(t, torch.Tensor) else t, outputs)
        out.grads = [a.grad for a in leaves] + [_total(r) for r in at_call]
    except Exception as e:  # the verdict classifies it
        out.error = e
    finally:
        # A ThunderFX piece that fails after an earlier one turned grad off leaves it off (plain
        # Thunder's do); the next cell must not run without grad.
        torch.set_grad_enabled(grad_mode)
    out.inputs = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    out.state = {k: v.detach().clone() for k, v in state.items()}
    return out


def compile_fn(fn: Callable, config: Config, *, transforms_extra: Sequence = ()):
    """``fn`` compiled as ``config`` says."""
    import thunder

    from thunder_ext.transforms import InplaceBarrierTransform

    transforms = [InplaceBarrierTransform(check=config.check)] if config.transform else []
    transforms += list(transforms_extra)
    kwargs: dict = {"transforms": transforms, "fusion_type": config.fusion_type}
    if config.executors == "torch_compile":
        from thunder.executors.torch_compile import torch_compile_ex

        kwargs["executors"] = [torch_compile_ex]
    if config.entry == "thunderfx":
        from thunder.dynamo import thunderfx

        # Dynamo caches compiled frames per code object and silently falls back to eager
        # past its recompile limit; a fresh cache keeps every run a real ThunderFX run.
        torch._dynamo.reset()
        return thunderfx(fn, **kwargs)
    return thunder.jit(fn, **kwargs)


def _assert_same(got: Outcome, exp: Outcome) -> None:
    torch.testing.assert_close(got.outputs, exp.outputs, msg=lambda m: f"outputs differ: {m}")
    torch.testing.assert_close(got.after_call, exp.after_call, msg=lambda m: f"input state after the call differs: {m}")
    torch.testing.assert_close(got.inputs, exp.inputs, msg=lambda m: f"final input state differs: {m}")
    torch.testing.assert_close(got.state, exp.state, msg=lambda m: f"final module state differs: {m}")
    torch.testing.assert_close(got.grads, exp.grads, msg=lambda m: f"gradients differ: {m}")
    # One direction only: Thunder may give history to an output eager computes without grad
    # (an output no input that requires grad reaches), which no caller's backward can notice.
    lost = [i for i, (g, e) in enumerate(zip(got.requires_grad, exp.requires_grad)) if e and not g]
    if lost:
        raise AssertionError(f"outputs differ: output {lost[0]} requires grad in eager, not compiled (no autograd history)")
    if got.plain_inputs_require_grad != exp.plain_inputs_require_grad:
        raise AssertionError(
            "final input state differs: which inputs that did not require grad do after the call: "
            f"{got.plain_inputs_require_grad} compiled, {exp.plain_inputs_require_grad} in eager"
        )


def _one_line(e: BaseException) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}"


def differential(build: Builder, config: Config, *, eager: Outcome | None = None) -> Verdict:
    """Run ``build()``'s program eagerly and compiled, and classify the compiled run."""
    torch.manual_seed(0)
    fn, args, state = build()
    if eager is None:
        eager = execute(fn, clone_args(args), state)
    torch.manual_seed(0)
    fn, args, state = build()
    try:
        compiled = compile_fn(fn, config)
    except Exception as e:  # a compile-time failure is a crash
        return Verdict("crash", _one_line(e), eager.error)
    got = execute(compiled, clone_args(args), state)
    got.compiled = compiled
    if got.error is None and config.entry == "thunderfx" and not compiled._backend.subgraph_infos:
        got.error = RuntimeError("ThunderFX compiled no subgraph: the function ran in eager")
    if got.error is not None:
        status = "refused" if _is_refusal(got.error) else "crash"
        return Verdict(status, _one_line(got.error), eager.error, got)
    if eager.error is not None:
        return Verdict("wrong", f"eager raised {_one_line(eager.error)}; compiled returned numbers", eager.error, got)
    try:
        _assert_same(got, eager)
    except AssertionError as e:
        return Verdict("wrong", " ".join(str(e).split()), None, got, eager)
    return Verdict("correct", "", None, got, eager)


def error_in_chain(e: BaseException | None, cls: type) -> BaseException | None:
    """The first exception of type ``cls`` in ``e``'s cause/context chain (ThunderFX wraps errors)."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, cls):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def _is_refusal(e: BaseException) -> bool:
    return error_in_chain(e, InplaceOrderingError) is not None


def format_exception(e: BaseException) -> str:
    return "".join(traceback.format_exception(type(e), e, e.__traceback__))
