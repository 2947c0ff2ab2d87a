"""The gallery: in-place programs covering every failure class of ``docs/design.md``.

Each :class:`Program` builds a fresh ``(fn, args, state)`` on every call, so that runs
never share mutated tensors or module buffers.  ``state`` holds extra tensors whose final
values are compared too (a module's running stats).

``hazard`` names the failure class of ``docs/design.md`` the program exercises ("2+4": both,
no number: no failure class, a case plain Thunder already gets right); ``plain_fails`` says whether
plain Thunder 0.2.6 gets it wrong with the default executors under dataflow fusion (the
configuration where the classes reproduce), as measured by ``tests/test_catalogue.py``.
``refused`` programs are the constructs the transform refuses with a documented error.
``reference`` is, for a program eager PyTorch itself refuses (its version counter is stricter,
see docs/limits.md), a mutation-free function with the values the program
computes; the tests compare against it instead of against eager.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from thunder_ext.errors import InputAliasError


@dataclass(frozen=True)
class Program:
    name: str
    build: Callable[[], tuple[Callable, tuple, dict]]
    hazard: str
    grad: bool = False
    plain_fails: bool = False
    refused: bool = False
    reference: Callable | None = None
    # Refused under ThunderFX only, with this error: a detached tensor Dynamo hands to a subgraph
    # as an input, which Thunder merges into the tensor it came from (InputAliasError,
    # input_aliases.py).
    thunderfx_refused: type[Exception] | None = None

    def refused_in(self, entry: str) -> bool:
        """The transform refuses this program when compiled through ``entry`` (jit or thunderfx)."""
        return self.refused or (entry == "thunderfx" and self.thunderfx_refused is not None)


def _t(*shape, grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape).requires_grad_(grad)


# -- class 1: dead in-place ops, and live mutations the return must see ---------------------


def dead_intermediate(x):
    y = x * 2
    y.mul_(3)  # nobody reads y again
    return x.sin()


def dead_view_of_intermediate(x):
    y = x * 2
    y[0].add_(1)  # a view of a dead intermediate
    return x.cos()


def write_view_of_input(x, w):
    v = x[0]
    v.mul_(2)  # live: it mutates the input's storage
    return w.sin()


def mutate_input(x, w):
    x.add_(w)
    return w * 2


def tanh_four_reads(a):
    a.tanh_()
    return a * a * a * a


# -- class 2/3: RAW and WAR with the other access on a longer chain --------------------------


def war_long_chain(x, w):
    z = w.sin().cos().tanh().sin()
    a = x * z  # reads x ...
    x.add_(1)  # ... before this write
    return a


def raw_long_chain(x, w):
    y = x * 1
    z = w.sin().cos().tanh().sin()
    y.add_(z)  # long chain into the write
    return y.exp(), x.cos()


def waw_two_writers(x, w):
    y = x * 1
    y.copy_(w.sin().cos().tanh())  # long chain
    y.copy_(x.exp())  # must land last
    return y + 0


def view_before_write(x):
    y = x * 2
    v = y[1:]  # view created before the write
    y.mul_(3)
    return v + 1


def view_after_write(x):
    y = x * 2
    y.mul_(3)
    v = y[1:]  # view created after the write
    v.add_(1)
    return y.sum(0), v * 2


def batch_norm_running_stats(x, rm, rv):
    before = rm.cos()  # read before the update
    y = F.batch_norm(x, rm, rv, training=True)
    return y, before, rm.sin(), rv * 2  # read after the update


def batch_norm_grad(x, w, b, rm, rv):
    y = F.batch_norm(x, rm, rv, w, b, training=True)
    return y.tanh(), rm + 0


def _bn_module_twice():
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(3)

    def module_applied_twice(x):
        return bn(bn(x).sin())

    return module_applied_twice, (_t(4, 3, grad=True),), {"bn": bn}


class _SinInplace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        y = x * 1
        y.sin_()
        return y

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        y = g * x
        y.cos_()
        return y


def autograd_function_inplace(x):
    return _SinInplace.apply(x) * x


def copy_into_intermediate(x, w):
    y = torch.zeros_like(x)
    y.copy_(w.exp())
    return y * x


def index_copy_cache(cache, k, idx):
    cache.index_copy_(0, idx, k)
    return cache.sum(1)


def setitem_on_view(x):
    y = x * 2
    v = y[1:]
    v[0] = 5.0
    return y.sum(), v * 1


def loop_inplace(x):
    y = x.exp()
    acc = x * 0
    for _ in range(20):
        y.add_(1)
        acc = acc + y
    return acc


def loop_reference(x):
    # With grad, eager refuses loop_inplace (exp saved its result, then it was written).
    y = x.exp()
    acc = x * 0
    for _ in range(20):
        y = y + 1
        acc = acc + y
    return acc


# -- classes 5 and 6 on private storage: functional, so gradients are eager's -----------------


def grad_through_view(x):
    y = x * 2
    v = y[0]  # a view read after a write to its base
    y.mul_(3)
    return v


def write_through_view_grad(x, w):
    y = x * 2
    y[1:].mul_(w)  # a write through a view of an intermediate
    v = y[:, 0]  # a view made after the write
    return y.sin(), v * 1


def write_saved_for_backward(x):
    y = x * 2
    s = y.sin()  # sin saves y for its backward
    y.mul_(3)
    return s, y


# -- shapes from real code: writes to inputs and buffers, then reads (issue 9) ----------------
# Each was refused once although plain Thunder gets it right; each must match eager.


def rotary_cache_refresh(x, cos_buf, sin_buf, inv_freq):
    """A rotary embedding refreshing its cos/sin buffers through a slice, then reading them."""
    T = x.shape[0]
    f = torch.outer(torch.arange(T, dtype=x.dtype, device=x.device), inv_freq)
    cos_buf[:T].copy_(f.cos())
    sin_buf[:T].copy_(f.sin())
    rot = torch.cat((-x[:, 2:], x[:, :2]), dim=-1)
    return x * cos_buf[:T] + rot * sin_buf[:T]


def strided_input_scale(x, w):
    """A strided view of an input scaled in place; the matmul reads (and its backward saves) the new x."""
    x.view(-1)[::2].mul_(2)
    return x @ w


def input_scaled_then_read_twice(x, w):
    """An input scaled in place, then read by two ops whose backward saves both results.

    Under ``torch_compile_ex`` with grad, plain Thunder's rematerialization recomputes the
    saved ``sin`` in the backward region from ``x``, write included: ``x`` ends up scaled
    twice and ``w``'s gradient is wrong.  The transform's remat pins keep the write in one
    region (``thunder_ext/remat_guard.py``)."""
    x.mul_(2)
    return x.sin() * w + x.cos() * w


def power_iteration(x, w, u, v):
    """Spectral norm: the power iteration updates its u/v buffers without grad, then sigma reads them."""
    with torch.no_grad():
        t = w.t() @ u
        v.copy_(t / t.norm())
        s = w @ v
        u.copy_(s / s.norm())
    # sum(dim=0) keeps sigma 1-D: Thunder's VJP fails to broadcast a 0-d divisor derived from w.
    sigma = (u * (w @ v)).sum(dim=0)
    return x @ (w / sigma).t()


def weight_clip_through_detach(x, w):
    """A critic's weight clipping (WGAN), written on the parameter's detached alias, then the forward."""
    w.detach().clamp_(-0.5, 0.5)
    return (x @ w.t()).relu().sum(dim=0)


def batch_norm2d_read_stats(x, w, b, rm, rv):
    """BatchNorm2d's running mean read in the same forward (no gradient flows through it)."""
    y = F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1)
    return y + rm.view(1, 3, 1, 1)


def _rotary_build():
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 4).float() / 4))
    return rotary_cache_refresh, (_t(8, 4, grad=True), torch.zeros(16, 4), torch.zeros(16, 4), inv_freq), {}


def _power_iteration_build():
    u, v = torch.randn(5, 1), torch.randn(4, 1)
    return power_iteration, (_t(3, 4), _t(5, 4, grad=True), u / u.norm(), v / v.norm()), {}


def _bn2d_build():
    x = _t(4, 3, 2, 2, grad=True)
    return batch_norm2d_read_stats, (x, _t(3, grad=True), _t(3, grad=True), torch.zeros(3), torch.ones(3)), {}
def write_saved_for_backward_reference(x):
    y = x * 2
    s = y.sin()
    return s, y * 3


def mlp_inplace_activations(x, w1, b1, w2, b2, w3, b3, w4, b4, w5, b5):
    # Every in-place activation module writes to an activation the function made itself.
    h = torch.nn.ReLU(inplace=True)(F.linear(x, w1, b1))
    h = torch.nn.SiLU(inplace=True)(F.linear(h, w2, b2))
    h = torch.nn.LeakyReLU(0.1, inplace=True)(F.linear(h, w3, b3))
    h = torch.nn.Hardtanh(inplace=True)(F.linear(h, w4, b4))
    return F.linear(h, w5, b5)


def groupnorm_silu_block(x, gn_w, gn_b, conv_w, conv_b):
    h = torch.nn.SiLU(inplace=True)(F.group_norm(x, 2, gn_w, gn_b))
    h = F.conv2d(h, conv_w, conv_b, padding=1)
    h += x  # residual, in place into the conv output
    return h


def identity_ops_after_write(x, w):
    # Each op hands back its input unchanged (Thunder traces a shallow_copy, or contiguous), after an
    # in-place write whose backward needs the value from before it.
    h = x * w
    h.sin_()
    a = F.dropout(h, 0.0, training=False)
    b = F.dropout(h, 0.0, training=True)
    c = h.to(torch.float32)
    d = h.type_as(x)
    e = h.contiguous()
    return a + b * 2 + c * 3 + d * 4 + e * 5 + x


def diffusers_resnet_block(x, gn_w, gn_b, conv_w, conv_b):
    # A diffusers-style residual block in training mode: GroupNorm, in-place SiLU, a no-op dropout.
    h = F.group_norm(x, 2, gn_w, gn_b)
    h = F.silu(h, inplace=True)
    h = torch.nn.Dropout(p=0.0)(h)
    h = F.conv2d(h, conv_w, conv_b, padding=1)
    return x + h


# -- class 5 on observable storage: answered through values, the caller's tensor returned too


def grad_through_view_of_input(a, w):
    v = a[0]  # a view of an input that does not require grad
    a.mul_(w)  # gives the input history through w
    return v


def returned_input_written_with_grad(a, w):
    a.mul_(w)  # gives the input history through w
    return a  # the caller's tensor cannot carry that history: the output is the value, which does


def activation_written_in_place(h, w):
    """A submodule handed the caller's activation ``h``, no leaf (computed with grad, as after a
    graph break), scaling and activating it in place as eager allows (class 9, with grad)."""
    h.mul_(w)
    F.silu(h, inplace=True)
    return h  # the caller's h, carrying the writes' history


def _activation_build():
    return activation_written_in_place, (_t(4, 3, grad=True) * 1, _t(3, grad=True)), {}


def _plain(fn, *shapes, grad=False):
    def build():
        return fn, tuple(_t(*s, grad=grad) for s in shapes), {}

    return build


def _grad_inputs(fn, shapes_and_grad):
    def build():
        return fn, tuple(_t(*s, grad=g) for s, g in shapes_and_grad), {}

    return build


def _bn_build(grad):
    def build():
        x = _t(8, 3, grad=grad)
        rm, rv = torch.randn(3), torch.rand(3) + 0.5
        if grad:
            return batch_norm_grad, (x, _t(3, grad=True), _t(3, grad=True), rm, rv), {}
        return batch_norm_running_stats, (x, rm, rv), {}

    return build


def _module_build():
    fn, args, extra = _bn_module_twice()
    bn = extra["bn"]
    return fn, args, {"running_mean": bn.running_mean, "running_var": bn.running_var}


def _mlp_build():
    torch.manual_seed(0)
    dims = [(6, 8), (8, 8), (8, 8), (8, 8), (8, 2)]
    params = []
    for i, o in dims:
        params += [_t(o, i, grad=True), _t(o, grad=True)]
    return mlp_inplace_activations, (_t(5, 6), *params), {}


def _block_build():
    return groupnorm_silu_block, (_t(2, 4, 5, 5), _t(4, grad=True), _t(4, grad=True), _t(4, 4, 3, 3, grad=True),
                                  _t(4, grad=True)), {}


def _diffusers_build():
    return diffusers_resnet_block, (_t(2, 4, 5, 5, grad=True), _t(4, grad=True), _t(4, grad=True),
                                    _t(4, 4, 3, 3, grad=True), _t(4, grad=True)), {}


def _index_copy_build():
    return index_copy_cache, (torch.zeros(6, 4), _t(2, 4), torch.tensor([1, 4])), {}


PROGRAMS: tuple[Program, ...] = (
    Program("dead_intermediate", _plain(dead_intermediate, (4, 3)), "1 dead write", plain_fails=True),
    Program("dead_view_of_intermediate", _plain(dead_view_of_intermediate, (4, 3)), "1 dead write", plain_fails=True),
    Program("write_view_of_input", _plain(write_view_of_input, (4, 3), (3,)), "1 live input write", plain_fails=True),
    Program("mutate_input", _plain(mutate_input, (4, 3), (4, 3)), "input mutation"),
    Program("tanh_four_reads", _plain(tanh_four_reads, (4, 3)), "input mutation"),
    Program("war_long_chain", _plain(war_long_chain, (4, 3), (4, 3)), "3 WAR", plain_fails=True),
    Program("raw_long_chain", _plain(raw_long_chain, (4, 3), (4, 3)), "2 RAW"),
    Program("waw_two_writers", _plain(waw_two_writers, (4, 3), (4, 3)), "WAW"),
    Program("view_before_write", _plain(view_before_write, (4, 3)), "view before write"),
    Program("view_after_write", _plain(view_after_write, (4, 3)), "view after write"),
    Program("batch_norm_running_stats", _bn_build(False), "2 composite write", plain_fails=True),
    Program("batch_norm_grad", _bn_build(True), "2+4 composite write", grad=True, plain_fails=True),
    Program("module_applied_twice", _module_build, "2 weight sharing", grad=True, plain_fails=True),
    Program(
        "autograd_function_inplace", _plain(autograd_function_inplace, (4, 3), grad=True), "4 exposed copy_", grad=True
    ),
    Program("copy_into_intermediate", _plain(copy_into_intermediate, (4, 3), (4, 3)), "copy_"),
    Program("index_copy_cache", _index_copy_build, "input cache"),
    Program("setitem_on_view", _plain(setitem_on_view, (4, 3)), "setitem"),
    Program("loop_inplace", _plain(loop_inplace, (4, 3)), "loop", reference=loop_reference),
    Program("grad_through_view", _plain(grad_through_view, (4, 3), grad=True), "5 private", grad=True,
            plain_fails=True),
    Program("write_through_view_grad", _grad_inputs(write_through_view_grad, [((4, 3), True), ((3,), True)]),
            "5 private", grad=True, plain_fails=True),
    Program(
        "write_saved_for_backward", _plain(write_saved_for_backward, (4, 3), grad=True), "6 private", grad=True,
        plain_fails=True, reference=write_saved_for_backward_reference,
    ),
    Program("mlp_inplace_activations", _mlp_build, "6 private", grad=True, plain_fails=True),
    Program("groupnorm_silu_block", _block_build, "6 private", grad=True, plain_fails=True),
    Program("identity_ops_after_write", _grad_inputs(identity_ops_after_write, [((4, 3), True), ((4, 3), True)]),
            "6 private, identity ops", grad=True, plain_fails=True),
    Program("diffusers_resnet_block", _diffusers_build, "6 private, identity op", grad=True, plain_fails=True),
    Program("war_long_chain_grad", _grad_inputs(war_long_chain, [((4, 3), False), ((4, 3), True)]), "6 refused", grad=True,
            refused=True),
    Program("grad_through_view_of_input", _grad_inputs(grad_through_view_of_input, [((4, 3), False), ((3,), True)]),
            "5 input, values", grad=True, plain_fails=True),
    Program("returned_input_written_with_grad",
            _grad_inputs(returned_input_written_with_grad, [((4, 3), False), ((3,), True)]), "5 input, returned value",
            grad=True, plain_fails=True),
    Program("rotary_cache_refresh", _rotary_build, "buffer slice write", grad=True),
    Program(
        "strided_input_scale", _grad_inputs(strided_input_scale, [((4, 4), False), ((4, 3), True)]),
        "strided input write", grad=True,
    ),
    Program(
        "input_scaled_then_read_twice", _grad_inputs(input_scaled_then_read_twice, [((4, 3), False), ((4, 3), True)]),
        "remat re-runs a write", grad=True,
    ),
    Program("power_iteration", _power_iteration_build, "buffer write, no grad", grad=True),
    Program("batch_norm2d_read_stats", _bn2d_build, "2 composite write, read", grad=True),
    Program("activation_written_in_place", _activation_build, "9 non-leaf input, history", grad=True,
            plain_fails=True),
    Program(
        "weight_clip_through_detach", _grad_inputs(weight_clip_through_detach, [((2, 3), False), ((4, 3), True)]),
        "write through detach", grad=True, plain_fails=True, thunderfx_refused=InputAliasError,
    ),
)


# -- the memory set (scripts/memory.py, tests/test_reinplace.py): in-place ops on intermediates --


def relu_on_matmul(a, b):
    y = a @ b
    y.relu_()
    return y


def residual(x, w):
    out = x @ w
    out += x
    return out


def inplace_softmax(x):
    y = x * 1
    y.sub_(y.amax(-1, keepdim=True))
    y.exp_()
    y.div_(y.sum(-1, keepdim=True))
    return y


def ema_reads(*tensors):
    """An EMA over parameters (shadows first, then parameters): each shadow is read (its sum),
    then updated in place.  Used by ``scripts/bench_calls.py`` and ``tests/test_final_barriers.py``."""
    n = len(tensors) // 2
    sums = []
    for e, p in zip(tensors[:n], tensors[n:]):
        sums.append(e.sum())
        e.mul_(0.9).add_(p, alpha=0.1)
    return sums


def reference_outcome(prog: Program, build: Callable | None = None):
    """For a program eager refuses (stricter version counter), its mutation-free reference run on
    the inputs ``build`` (default ``prog.build``) makes, seeded as ``differential`` seeds them."""
    from thunder_ext.testing.compare import clone_args, execute

    if prog.reference is None:
        return None
    torch.manual_seed(0)
    _, args, state = (build or prog.build)()
    return execute(prog.reference, clone_args(args), state)


def by_name(name: str) -> Program:
    for p in PROGRAMS:
        if p.name == name:
            return p
    raise KeyError(name)


# -- class 7: inputs that alias each other ---------------------------------------------------
#
# Each builder passes the same storage twice.  Thunder ``main`` keeps two arguments whose
# element counts differ as separate proxies in one alias group; 0.2.6 substitutes one for
# the other and fails to reshape (see docs/limits.md, class 7 and tests/test_input_aliases.py).


def alias_write_view_read_base(a, b):
    b.add_(1)  # b is a view of a
    return a * 2


def alias_write_base_read_view(a, b):
    a.mul_(2)
    return b + 1


def alias_same_tensor(a, b):
    a.add_(1)  # a and b are the same tensor
    return b * 3


def alias_write_view_grad_elsewhere(a, b, w):
    b.add_(1)
    return a * w  # the gradient flows to w only, through the mutated base


def alias_write_grad_into_view(a, b, w):
    b.add_(w)  # a gradient flows into a's storage through b
    return a * 2


def alias_disjoint_rows(a, b):
    a.add_(1)  # a and b are different rows of one tensor
    return b * 2


def _aliased(fn, base_shape, view, *extra_grad_shapes, base=torch.zeros):
    def build():
        x = base(*base_shape)
        return fn, (x, view(x), *(_t(*s, grad=True) for s in extra_grad_shapes)), {}

    return build


INPUT_ALIAS_PROGRAMS: tuple[Program, ...] = (
    Program("alias_scalar_view", _aliased(alias_write_view_read_base, (3, 4), lambda x: x[0, 0]), "7 input alias"),
    Program("alias_row_view", _aliased(alias_write_view_read_base, (3, 4), lambda x: x[1]), "7 input alias"),
    Program(
        "alias_column_view",
        _aliased(alias_write_base_read_view, (3, 4), lambda x: x[:, 1], base=torch.randn),
        "7 input alias",
    ),
    Program("alias_same_tensor", _aliased(alias_same_tensor, (3, 4), lambda x: x), "7 input alias"),
    Program(
        "alias_view_grad_elsewhere",
        _aliased(alias_write_view_grad_elsewhere, (3, 4), lambda x: x[0, 0], (3, 4)),
        "7 input alias",
        grad=True,
    ),
    Program(
        "alias_grad_into_view",
        _aliased(alias_write_grad_into_view, (3, 4), lambda x: x[1], (4,)),
        "5 input alias",
        grad=True,
        refused=True,
    ),
    Program(
        "alias_disjoint_rows",
        lambda: (alias_disjoint_rows, (lambda x: (x[0], x[1]))(torch.zeros(2, 4)), {}),
        "7 input alias substituted",
        plain_fails=True,
        refused=True,
    ),
)
