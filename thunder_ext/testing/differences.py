"""The documented differences from eager (docs/limits.md): when a compiled run that does not
match eager PyTorch still computed the program.

A differential run (:mod:`thunder_ext.testing.compare`) calls a run ``wrong`` when any output,
final input, state or gradient differs from eager's.  A few differences are not ordering bugs
but documented behaviour of Thunder or of the transform; each function here recognises one, and
only by checking what the difference leaves equal (a wrong history or a stale read changes
that too).  :func:`documented_difference` names the one that applies.  The fuzzer's verdict and
the doctor (:func:`thunder_ext.check`) share them.
"""

from __future__ import annotations

import traceback

import torch

from thunder_ext.testing.compare import Builder, Outcome, Verdict, _assert_same, _clone, clone_args, execute

_MULTI_OUTPUT_VIEW_REFUSED = "This view is the output of a function that returns multiple views"


def _raised_in_backward(e: BaseException | None) -> bool:
    """``e`` came out of autograd's backward (the forward ran to its end)."""
    tb = e.__traceback__ if e is not None else None
    return tb is not None and any(f.name == "backward" for f in traceback.extract_tb(tb))


def _eager_stricter(build: Builder, v) -> bool:
    """The documented exception to the verdict rule (docs/limits.md).

    Eager's autograd refuses a backward when a tensor it saved was modified in place (its
    version counter moved).  Thunder's decompositions save functional results instead (the
    output of ``relu`` before ``copy_``), and its batch_norm backward never reads the running
    stats, so the compiled run differentiates the values as they were before the write.
    Accepted only for that exact eager error, and only if the forward values (outputs and
    final inputs, computed by eager without autograd) match; ``tests/test_fuzz_regressions.py``
    checks the gradients of two such programs against mutation-free references.  A saved
    tensor that is one output of a multi-output view (``split``, ``unbind``) raises another
    message when its base was written ("Output 1 of SplitBackward0 is a view and its base ...
    has been modified inplace"), for the same reason: accepted too, but only where eager raised
    it in the backward (in the forward, it is a read of that view after the write, which the
    transform refuses as eager does).
    """
    if v.outcome is None:
        return False
    message = str(v.eager_error)
    if "modified by an inplace operation" not in message and not (
        _MULTI_OUTPUT_VIEW_REFUSED in message and _raised_in_backward(v.eager_error)
    ):
        return False
    torch.manual_seed(0)
    fn, args, state = build()
    # Detached inputs: no autograd at all (under no_grad alone, a returned input that requires
    # grad would still ask for a backward).
    forward = execute(fn, [_clone(a).detach() if isinstance(a, torch.Tensor) else a for a in args], state)
    if forward.error is not None:
        return False
    try:
        torch.testing.assert_close(v.outcome.outputs, forward.outputs)
        torch.testing.assert_close(v.outcome.inputs, forward.inputs)
        # Right after the call too: a write moved into the backward looks right once it has run.
        if v.outcome.after_call:
            torch.testing.assert_close(v.outcome.after_call, forward.inputs)
    except AssertionError:
        return False
    return True


class _ViewAsReshape(torch.overrides.TorchFunctionMode):
    """``Tensor.view`` that falls back to ``reshape`` where eager's stride check refuses."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.view:
            try:
                return func(*args, **kwargs)
            except RuntimeError as e:
                if "view size is not compatible" not in str(e):
                    raise
                return args[0].reshape(*args[1:], **kwargs)
        return func(*args, **kwargs)


def _view_is_reshape(build: Builder, v) -> bool:
    """The documented exception for ``view`` (docs/limits.md).

    A fused region gives its outputs its own layout (Thunder's proxies carry no strides): where
    eager refuses ``view`` of a tensor whose strides do not allow it ("view size is not
    compatible with input tensor's size and stride", ``t2.cos().view(-1)`` with ``t2`` strided),
    the compiled function may compute the reshape (a ``view`` of a strided *input* raises in
    Thunder as in eager).  Accepted only for
    that exact eager error, and only when outputs, final inputs, state and gradients all match
    eager run with ``view`` falling back to ``reshape`` at the refused calls.
    """
    if "view size is not compatible" not in str(v.eager_error) or v.outcome is None:
        return False
    torch.manual_seed(0)
    fn, args, state = build()
    with _ViewAsReshape():
        reference = execute(fn, clone_args(args), state)
    if reference.error is not None:
        return False
    try:
        _assert_same(v.outcome, reference)
    except AssertionError:
        return False
    return True


def _grads_match_once_patched(v, patch) -> bool:
    """Outputs and final inputs matched (the verdict is about gradients only), and the gradients
    match eager's once ``patch(k, got, eager)`` stands for each compiled gradient ``got``."""
    eager = v.eager
    if not v.detail.startswith("gradients differ") or v.outcome is None or eager is None:
        return False
    if eager.error is not None or len(eager.grads) != len(v.outcome.grads):
        return False
    patched = [patch(k, g, e) for k, (g, e) in enumerate(zip(v.outcome.grads, eager.grads))]
    try:
        torch.testing.assert_close(patched, eager.grads)
    except AssertionError:
        return False
    return True


def _none_for_zero_grad(v) -> bool:
    """The documented exception for gradients (docs/limits.md).

    Thunder's autodiff gives ``None`` to an input whose only path to the outputs a later
    ``copy_`` overwrites; eager gives it a gradient of zeros.  Accepted only when the outputs
    and final inputs matched (``differential`` compares them before gradients) and the
    gradients match once each such ``None`` stands for the zeros eager computed.
    """
    return _grads_match_once_patched(
        v, lambda k, g, e: torch.zeros_like(e) if g is None and e is not None and not e.any() else g
    )


def _zeros_for_none_grad(v) -> bool:
    """The documented exception for an input written with a history nothing reads (docs/limits.md).

    The caller's tensor adopts the written value's history after the call, through one more
    output of Thunder's single backward node (:mod:`thunder_ext.input_histories`).  Where the
    caller never differentiates through that tensor and what the value is computed from reaches
    no output, that node gives it a gradient of zeros where eager leaves ``None``
    (``torch.compile`` the same).  Accepted only when the outputs and final inputs matched and
    the gradients match once each all-zero gradient where eager has ``None`` stands for it.
    """
    return _grads_match_once_patched(v, lambda k, g, e: None if e is None and g is not None and not g.any() else g)


def _retained_grad_of_written_input(v) -> bool:
    """The documented exception for a written non-leaf input's retained gradient (docs/limits.md).

    Eager's ``.grad`` of a non-leaf input that ``retain_grad()`` follows to its last version
    collects what outputs computed from that version send it.  Compiled, the caller's tensor
    adopts the written value's history after the call (:mod:`thunder_ext.input_histories`), and
    outputs computed inside reach the value, not the tensor's new version (``torch.compile`` the
    same).  Accepted only when outputs and inputs matched and every other gradient does: the
    leaves' and each input's gradient at the call, which a wrong history would change.
    """
    if v.outcome is None or v.eager is None:
        return False
    written = set(v.outcome.written_non_leaves) & set(v.eager.written_non_leaves)
    return bool(written) and _grads_match_once_patched(v, lambda k, g, e: e if k in written else g)


def _as_float64(x):
    """``x`` with its floating values in float64, keeping ``requires_grad`` and non-leafness."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        return x
    d = x.detach().double().requires_grad_(x.requires_grad)
    return d * 1 if x.grad_fn is not None else d


def _like(ref, got):
    """``ref`` (a float64 run) in the dtypes of ``got`` (the compiled run), tensor by tensor."""
    if isinstance(ref, torch.Tensor) and isinstance(got, torch.Tensor) and ref.dtype != got.dtype:
        return ref.to(got.dtype)
    if isinstance(ref, (list, tuple)) and isinstance(got, (list, tuple)) and len(ref) == len(got):
        return type(ref)(_like(r, g) for r, g in zip(ref, got))
    if isinstance(ref, dict) and isinstance(got, dict):
        return {k: _like(r, got.get(k)) for k, r in ref.items()}
    return ref


def _rounding_only(build: Builder, v) -> bool:
    """The compiled run differs from eager only by float32 rounding (docs/limits.md, soak 55000).

    A fused kernel rounds differently from eager's op-by-op float32 (Inductor folds ``exp``
    into a normalisation, for one), and an ill-conditioned program makes that difference larger
    than float32's tolerance.  The tiebreak is eager run on the same values in float64: a run
    within float32's tolerance of it computed the program, whatever eager's float32 rounding
    did.  An ordering bug reads another version of a tensor, which no rounding explains, so it
    stays far from the float64 run too.  Only for a run that returned (``v.outcome``) where
    eager returned as well.
    """
    got = v.outcome
    if got is None or v.eager_error is not None:
        return False
    torch.manual_seed(0)
    fn, args, state = build()
    reference = execute(fn, [_as_float64(a) for a in args], {k: _as_float64(t) for k, t in state.items()})
    if reference.error is not None:
        return False
    as_got = Outcome(
        outputs=_like(reference.outputs, got.outputs),
        inputs=_like(reference.inputs, got.inputs),
        state=_like(reference.state, got.state),
        grads=_like(reference.grads, got.grads),
        after_call=_like(reference.after_call, got.after_call),
        requires_grad=reference.requires_grad,
        plain_inputs_require_grad=reference.plain_inputs_require_grad,
    )
    try:
        _assert_same(got, as_got)
    except AssertionError:
        return False
    return True


def documented_difference(build: Builder, v: Verdict) -> str | None:
    """Why the ``wrong`` run ``v`` of ``build``'s program is a documented difference, or ``None``.

    The first three need eager to have raised (the compiled run answers where eager refuses), the
    others that it returned.
    """
    if v.status != "wrong":
        return None
    if v.eager_error is not None:
        if _eager_stricter(build, v):
            return "documented exception: eager's version counter refuses, forward values match"
        if "refer to a single memory location" in str(v.eager_error):
            # Eager refuses a write whose source overlaps its destination, which the transform
            # answers (thunder_ext.overlap refuses the overlaps it finds, and keeps a copy_ in
            # place); plain Thunder reads the source first, as if it were cloned.
            return "documented exception: eager refuses overlapping source and destination"
        if _view_is_reshape(build, v):
            return "documented exception: Thunder's view is a reshape where eager's stride check refuses"
        return None
    if _none_for_zero_grad(v):
        return "documented exception: None where eager's gradient is all zeros"
    if _zeros_for_none_grad(v):
        return "documented exception: zeros where eager's gradient is None (a written input's history nothing reads)"
    if _retained_grad_of_written_input(v):
        return "documented exception: a written non-leaf input's retained gradient misses outputs read inside"
    if _rounding_only(build, v):
        return "float rounding: eager in float64 agrees with the compiled run, not eager's float32"
    return None
