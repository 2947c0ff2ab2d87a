"""In-place ops whose source shares elements with what they write (thunder_ext.overlap).

Eager reads such a source as its kernel goes, so the answer depends on the kernel's visiting
order; Thunder reads it first.  The transform refuses those ops, except a plain ``copy_``,
whose storage stays in place, where Thunder's ``copy_`` reads as eager's does (a ``setitem_``
with a basic key and without gradients is written as that ``copy_``, into the view its key
selects), and an ``index_copy_`` or ``index_add_`` without gradients, which is written one
index entry at a time, in eager's order (thunder_ext.index_order).  Disjoint views of one tensor, and a source
at the same positions (``a.add_(a)``), are not refused.  Each program is judged against eager
and plain Thunder by the fuzzer's verdict rule.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from thunder_ext.testing.fuzzing import CONFIGS, judge_function

CELLS = (*CONFIGS, *(replace(c, executors="torch_compile") for c in CONFIGS))
FX_CELLS = tuple(replace(c, entry="thunderfx") for c in CELLS)
IDX = (1, 0)


def _a(grad: bool) -> torch.Tensor:
    return torch.randn(4, 3)


def index_copy_from_a_strided_view_it_overwrites(a):
    """The soak's finding (seed 13000, --rotate): row 2 is written, then read as ``t0[1]``."""
    t0 = a[::2]
    a[0] = 2.0
    t0.tanh_()
    t1 = a[1:]
    t1.index_copy_(0, torch.tensor(IDX), t0)
    return (a.sum(1),)


def index_add_from_a_strided_view(a):
    a[1:].index_add_(0, torch.tensor(IDX), a[::2])
    return (a * 2,)


def add_from_columns_shifted_by_one(a):
    a[:, 1:].add_(a[:, :2])  # neither is dense: eager's overlap check cannot see it, and runs
    return (a,)


def setitem_from_columns_shifted_by_one(a):
    a[:, 1:] = a[:, :2]  # eager reads column 1 after writing it: plain Thunder, reading first, is wrong
    return (a,)


def setitem_of_a_strided_column_into_a_row_of_a_reshape(a):
    """Soak seed 46000: the source's element 0 is the row's element 1; eager's kernel reads it
    first, so plain Thunder is right, and a refusal was needless."""
    with torch.no_grad():
        t0 = a[:, 1]
        t2 = a.reshape(3, 4)
        t2[0] = t0
    return (a,)


def setitem_from_the_diagonally_shifted_block_then_read(a):
    a[1:, :2] = a[:3, 1:]  # read as it goes, then read whole by the sum
    return (a.sum(0), a[0] * 2)


def index_copy_from_columns_shifted_by_one(a):
    a[:, 1:].index_copy_(0, torch.tensor(IDX), a[:2, :2])  # one entry's row overlaps a row at other positions
    return (a,)


def scatter_from_a_strided_view(a):
    a[1:].scatter_(0, torch.tensor([[1, 0, 1], [0, 1, 0]]), a[::2])  # not split: no documented order
    return (a,)


REFUSED = [
    add_from_columns_shifted_by_one,
    index_copy_from_columns_shifted_by_one,
    scatter_from_a_strided_view,
]


def index_copy_between_disjoint_rows(a):
    a[:2].index_copy_(0, torch.tensor(IDX), a[2:])
    return (a,)


def add_of_itself(a):
    a.add_(a)
    return (a.sum(0),)


def add_between_disjoint_rows(a):
    a[:2].add_(a[2:])
    return (a,)


def copy_from_columns_shifted_by_one(a):
    a[:, 1:].copy_(a[:, :2])  # kept in place: Thunder's copy_ reads as eager's does
    return (a.sin(),)


def setitem_between_disjoint_rows(a):
    a[0:2] = a[2:]
    return (a,)


def lerp_between_two_reshapes_of_one_view(a):
    t0 = a.view(-1)
    t1 = t0.reshape(3, 4)  # ltorch.reshape(t0, 3, 4): torch.reshape takes no varargs, Tensor.reshape does
    t3 = t0.reshape(3, 4)
    with torch.no_grad():
        t3.lerp_(t1, 0.1)  # the same elements at the same positions (soak seed 14000)
    return (a.sin(),)


def index_copy_reading_rows_it_wrote(a):
    """Entry 0 writes row 2 of ``a``, which entry 1 then reads as ``a[::2][1]``: plain Thunder
    reads it first, and is wrong."""
    a[1:].index_copy_(0, torch.tensor([1, 0]), a[::2])
    return (a,)


ANSWERED = [
    index_copy_from_a_strided_view_it_overwrites,
    index_add_from_a_strided_view,
    index_copy_reading_rows_it_wrote,
    lerp_between_two_reshapes_of_one_view,
    index_copy_between_disjoint_rows,
    add_of_itself,
    add_between_disjoint_rows,
    copy_from_columns_shifted_by_one,
    setitem_between_disjoint_rows,
    setitem_from_columns_shifted_by_one,
    setitem_of_a_strided_column_into_a_row_of_a_reshape,
    setitem_from_the_diagonally_shifted_block_then_read,
]


def private_copy_from_columns_shifted_by_one(a):
    t = a.cos()
    t[:, 1:].copy_(t[:, :2])  # kept in place, run by PyTorch's kernel (with Inductor's executor too)
    return (t + 1,)


def private_setitem_from_columns_shifted_by_one(a):
    t = a.cos()
    t[:, 1:] = t[:, :2]  # a copy_ into t[:, 1:]: kept in place as above
    return (t + 1,)


@pytest.mark.parametrize("fn", REFUSED, ids=lambda f: f.__name__)
def test_order_dependent_overlap_is_refused(fn):
    cells = judge_function(fn, lambda g: (_a(g),), grad_modes=(False,), configs=CELLS).cells
    assert cells and all(c.verdict == "ok" for c in cells), "\n".join(map(str, cells))
    assert all("OverlappingSourceError" in c.detail for c in cells), "\n".join(map(str, cells))


@pytest.mark.parametrize("fn", ANSWERED, ids=lambda f: f.__name__)
def test_disjoint_or_in_place_overlap_is_answered(fn):
    cells = judge_function(fn, lambda g: (_a(g),), grad_modes=(False,), configs=CELLS).cells
    assert cells and all(c.verdict == "ok" and c.status == "correct" for c in cells), "\n".join(map(str, cells))


@pytest.mark.parametrize("order", [(0, 1, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)])
def test_index_writes_are_split_in_eager_order(order):
    """Every order of three entries over a 5-row tensor, where plain Thunder is right or wrong."""

    def fn(a):
        a[1:].index_add_(0, torch.tensor(order), a[::2])
        a[1:].index_copy_(0, torch.tensor(order), a[::2] * 1 + a[::2])  # the source is a value: not split
        a[:, :2].t().index_copy_(1, torch.tensor(order), a[::2, :2].t())  # along dim 1 of transposed views
        return (a,)

    cells = judge_function(fn, lambda g: (torch.randn(5, 3),), grad_modes=(False,), configs=CELLS).cells
    assert cells and all(c.verdict == "ok" and c.status == "correct" for c in cells), "\n".join(map(str, cells))


@pytest.mark.parametrize(
    "fn", [index_copy_reading_rows_it_wrote, index_add_from_a_strided_view, setitem_of_a_strided_column_into_a_row_of_a_reshape]
)
def test_index_writes_are_split_through_thunderfx(fn):
    cells = judge_function(fn, lambda g: (_a(g),), grad_modes=(False,), configs=FX_CELLS).cells
    assert cells and all(c.verdict == "ok" and c.status == "correct" for c in cells), "\n".join(map(str, cells))


def _non_leaf(grad: bool) -> torch.Tensor:
    x = torch.randn(4, 3, requires_grad=grad)
    return x * 1 if grad else x


def setitem_from_columns_shifted_by_one_of_a_non_leaf(a):
    t = a * 1
    t[:, 1:] = t[:, :2]
    return (t,)


@pytest.mark.parametrize(
    "fn",
    [index_copy_from_a_strided_view_it_overwrites, index_add_from_a_strided_view, setitem_from_columns_shifted_by_one_of_a_non_leaf],
)
def test_index_write_with_gradients_is_split_with_eager_s_gradient(fn):
    """Eager's backward reads the source as it was before the op, its forward as the kernel goes:
    the op computed whole gives the history, the split without grad the values.  No cell is
    refused for the overlap any more (the index writes meet refusals of their own: a view read
    after the write, an input that requires grad written), and the ``setitem_`` is answered."""
    cells = judge_function(fn, lambda g: (_non_leaf(g),), grad_modes=(True,), configs=CELLS).cells
    assert cells and all(c.verdict == "ok" for c in cells), "\n".join(map(str, cells))
    assert not any("OverlappingSourceError" in c.detail for c in cells), "\n".join(map(str, cells))
    if fn is setitem_from_columns_shifted_by_one_of_a_non_leaf:
        assert all(c.status == "correct" for c in cells), "\n".join(map(str, cells))


def test_setitem_is_reported_and_runs_as_a_copy_into_its_view():
    import thunder

    from thunder_ext import InplaceBarrierTransform, last_reports

    jf = thunder.jit(setitem_from_columns_shifted_by_one, transforms=[InplaceBarrierTransform()])
    a = torch.randn(4, 3)
    expected = a.clone()
    setitem_from_columns_shifted_by_one(expected)
    jf(a)
    assert torch.equal(a, expected)
    split = last_reports(jf)[-1].overlaps.split
    assert len(split.split) == 1 and split.split[0].startswith("setitem_ of ") and "a view and a copy_" in split.split[0]
    final = str(thunder.last_traces(jf)[-1])
    assert "setitem" not in final and "copy_(" in final


def test_setitem_with_a_tensor_key_is_left_whole_and_refused():
    """A tensor key is advanced indexing: eager runs ``index_put_``, not a copy_ into a view."""
    import thunder

    from thunder_ext import InplaceBarrierTransform, OverlappingSourceError

    def fn(a):
        a[:, torch.tensor([1, 2])] = a[:, :2]
        return (a,)

    from thunder.executors.torch_compile import torch_compile_ex

    for executors in (None, [torch_compile_ex, *thunder.get_default_executors()]):  # Inductor's order was silently wrong
        jf = thunder.jit(fn, executors=executors, transforms=[InplaceBarrierTransform()])
        with pytest.raises(OverlappingSourceError, match="setitem_"):
            jf(torch.randn(4, 3))


def test_split_is_reported_and_each_entry_is_one_write():
    import thunder

    from thunder_ext import InplaceBarrierTransform, last_reports

    jf = thunder.jit(index_add_from_a_strided_view, transforms=[InplaceBarrierTransform()])
    a = torch.randn(4, 3)
    expected = a.clone()
    index_add_from_a_strided_view(expected)
    jf(a, )
    assert torch.equal(a, expected)
    split = last_reports(jf)[-1].overlaps.split
    assert split.split == [f"index_add_ of {split.split[0].split()[2]} into {len(IDX)} entries"]
    final = thunder.last_traces(jf)[-1]
    adds = [b for b in final.bound_symbols if "index_add" in str(b.sym.name)]
    assert len(adds) == len(IDX)


@pytest.mark.parametrize(
    "fn",
    [private_copy_from_columns_shifted_by_one, private_setitem_from_columns_shifted_by_one, setitem_from_columns_shifted_by_one],
    ids=lambda f: f.__name__,
)
def test_an_overlapping_copy_runs_by_eager_s_kernel_with_every_executor(fn):
    """``KEPT_IN_PLACE``: the copy stays in place and reads its source as eager's kernel does.
    Under ``torch_compile_ex`` it runs outside the Inductor region (``eager_copy_``): Inductor's
    own loop read old values where eager reads new ones (on an AVX2 machine; silently wrong)."""
    import thunder
    from thunder.executors.torch_compile import torch_compile_ex

    from thunder_ext import InplaceBarrierTransform

    cells = judge_function(fn, lambda g: (_a(g),), grad_modes=(False,), configs=(*CELLS, *FX_CELLS)).cells
    assert cells and all(c.verdict == "ok" and c.status == "correct" for c in cells), "\n".join(map(str, cells))
    jf = thunder.jit(fn, executors=[torch_compile_ex, *thunder.get_default_executors()], transforms=[InplaceBarrierTransform()])
    jf(torch.randn(4, 3))
    assert "eager_copy_(" in str(thunder.last_traces(jf)[-1])


def test_refusal_names_the_op_the_source_and_the_line():
    import thunder

    from thunder_ext import InplaceBarrierTransform, OverlappingSourceError

    jf = thunder.jit(scatter_from_a_strided_view, transforms=[InplaceBarrierTransform()])
    with pytest.raises(OverlappingSourceError) as e:
        jf(torch.randn(4, 3))
    message = str(e.value)
    assert "scatter_" in message and ".clone()" in message
    assert "test_overlap.py" in message  # the user's source line


def test_report_counts_the_pairs_checked_and_shown_apart():
    import thunder

    from thunder_ext import InplaceBarrierTransform, last_reports

    jf = thunder.jit(index_copy_between_disjoint_rows, transforms=[InplaceBarrierTransform()])
    jf(torch.randn(4, 3))
    overlaps = last_reports(jf)[-1].overlaps
    assert (overlaps.checked, overlaps.disjoint, overlaps.refused) == (1, 1, [])


def test_index_write_eager_refuses_is_refused():
    """Both dense, memory meeting: eager's own overlap check raises, and so does the compiled
    function, at run time (``thunder_ext.overlap_guard``)."""
    import thunder

    from thunder_ext import InplaceBarrierTransform, OverlappingSourceError

    def fn(a):
        a.index_copy_(0, torch.tensor(IDX), a[:2])
        return (a,)

    with pytest.raises(RuntimeError, match="single memory location"):
        fn(torch.randn(4, 3))
    jf = thunder.jit(fn, transforms=[InplaceBarrierTransform()])
    with pytest.raises(OverlappingSourceError, match="Eager refuses it too"):
        jf(torch.randn(4, 3))


# -- eager's overlap check depends on the caller's strides (thunder_ext.overlap_guard) -------------


def index_copy_from_a_split_of_its_destination(b, idx):  # soak seed 94000, shortened
    t0 = b.split(2)[1]
    b.index_copy_(0, idx, t0)
    return (b * 1,)


def index_add_from_a_chunk_of_its_destination(b, idx):
    b.index_add_(0, idx, b.chunk(2)[1])
    return (b,)


def setitem_from_the_next_rows(b, idx):
    b[:3] = b[1:]
    return (b,)


def _contiguous_b(grad: bool) -> torch.Tensor:
    return torch.randn(4, 3)


def _transposed_b(grad: bool) -> torch.Tensor:
    return torch.randn(3, 4).t()


@pytest.mark.parametrize(
    "fn", [index_copy_from_a_split_of_its_destination, index_add_from_a_chunk_of_its_destination, setitem_from_the_next_rows]
)
@pytest.mark.parametrize("layout", [_contiguous_b, _transposed_b])
def test_eager_overlap_check_is_made_on_the_callers_strides(fn, layout):
    """Eager refuses these for a contiguous ``b`` (both dense, their memory meeting) and computes
    them for a transposed one (its check cannot tell).  Where it computes, the transform
    answers as eager (the index write split one entry at a time, in its kernel's order), where
    it used to refuse on the strides of a contiguous ``b``; where eager raises, so does it."""
    idx = torch.tensor([1, 0])
    make = lambda g: (layout(g), idx.clone())  # noqa: E731
    cells = judge_function(fn, make, configs=(*CELLS, *FX_CELLS), grad_modes=(False,)).cells
    assert cells and all(c.verdict == "ok" for c in cells), "\n".join(map(str, cells))
    if layout is _contiguous_b:
        assert all(c.status != "correct" for c in cells), "\n".join(map(str, cells))
    else:
        assert all(c.status == "correct" for c in cells), "\n".join(map(str, cells))


def test_one_compiled_function_answers_one_layout_and_refuses_the_other():
    """The check runs on each call: the same compiled function (Thunder's cache does not key on
    strides) refuses the contiguous call after answering the transposed one."""
    import thunder

    from thunder_ext import InplaceBarrierTransform, OverlappingSourceError, last_reports

    fn = index_copy_from_a_split_of_its_destination
    jf = thunder.jit(fn, transforms=[InplaceBarrierTransform()])
    b, idx = torch.randn(3, 4).t(), torch.tensor([1, 0])
    expected, eager_b = fn(b.clone().t().contiguous().t(), idx)[0], b.clone().t().contiguous().t()
    fn(eager_b, idx)
    got = jf(b, idx)[0]
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    torch.testing.assert_close(b, eager_b, rtol=0, atol=0)
    assert last_reports(jf)[-1].overlaps.split.guarded, "the split is not reported as guarded"
    c = torch.randn(4, 3)
    with pytest.raises(RuntimeError, match="single memory location"):
        fn(c.clone(), idx)
    with pytest.raises(OverlappingSourceError, match="Eager refuses it too"):
        jf(c, idx)


@pytest.mark.parametrize("partial_only", [False, True])
def test_overlap_status_is_eagers(partial_only):
    """The guard's model of eager's ``get_overlap_status``, against eager's own check on real
    tensors of one storage: ``index_copy_`` refuses any overlap, ``copy_`` a partial one."""
    from thunder_ext.overlap_guard import _REFUSED, overlap_status

    checked = raised = 0
    for stride, offset in [((3, 1), 0), ((1, 4), 0), ((6, 2), 0), ((3, 1), 9)]:
        t = torch.arange(24.0).as_strided((4, 3), stride, offset)
        dst = t[:2]
        for src in (t[1:3], t[2:4], t[:2], t[::2], t[1:][::2]):
            try:
                if partial_only:
                    dst.copy_(src)
                else:
                    dst.index_copy_(0, torch.tensor([0, 1]), src)
                eager = False
            except RuntimeError as e:
                assert "single memory location" in str(e), e
                eager = True
            checked += 1
            raised += eager
            assert (overlap_status(dst, src) in _REFUSED[partial_only]) == eager, (stride, offset, src.stride())
    assert 0 < raised < checked


def add_from_the_previous_rows_of_an_input(b):
    b[1:].add_(b[:-1])
    return (b,)


def add_from_the_previous_rows_of_a_new_tensor(b):
    t = torch.zeros(4, 3) + 1  # laid out by the factory: contiguous whatever the caller's strides
    t[1:].add_(t[:-1])
    return (t + b,)


def test_a_refusal_claims_eagers_own_only_for_the_strides_eager_refuses():
    """Both refused (no compiled order is an elementwise kernel's); eager refuses the first only
    for a contiguous ``b``, and computes it for a transposed one, as the message says."""
    import thunder

    from thunder_ext import InplaceBarrierTransform, OverlappingSourceError

    with pytest.raises(RuntimeError, match="single memory location"):
        add_from_the_previous_rows_of_an_input(torch.randn(4, 3))
    add_from_the_previous_rows_of_an_input(torch.randn(3, 4).t())  # eager computes
    for fn, qualified in ((add_from_the_previous_rows_of_an_input, True), (add_from_the_previous_rows_of_a_new_tensor, False)):
        jf = thunder.jit(fn, transforms=[InplaceBarrierTransform()])
        with pytest.raises(OverlappingSourceError, match="Eager refuses it too") as e:
            jf(torch.randn(3, 4).t())
        assert ("as for contiguous inputs" in str(e.value)) == qualified, str(e.value)


def index_copy_without_grad_from_a_split(b, idx, w):
    with torch.no_grad():
        b.index_copy_(0, idx, b.split(2)[1])
    return (b * w,)


def test_the_run_time_overlap_check_with_gradients_around_it():
    """``b`` requires grad, written under no-grad: the check reads a tensor autodiff tracks, and
    the split answers with eager's values and gradients (``torch_compile_ex`` too)."""
    make = lambda g: (torch.randn(3, 4).t().requires_grad_(g), torch.tensor([1, 0]), torch.randn(4, 3, requires_grad=g))  # noqa: E731
    cells = judge_function(index_copy_without_grad_from_a_split, make, configs=CELLS, grad_modes=(True,)).cells
    assert cells and all(c.verdict == "ok" and c.status == "correct" for c in cells), "\n".join(map(str, cells))
