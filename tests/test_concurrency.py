"""One transform instance shared by threads that compile and call different functions.

ThunderFX shares one ``InplaceBarrierTransform`` across every subgraph it compiles, and
users share instances too.  Per-compilation state lives on Thunder's compile data
(``thunder_ext/integration.py``), never on the instance: each thread's results must match
eager, and each compilation's reports must only describe its own function.
"""

from __future__ import annotations

import inspect
import threading

import thunder
import torch

from thunder_ext import InplaceBarrierTransform, last_reports
from thunder_ext.testing.compare import _assert_same, clone_args, execute
from thunder_ext.testing.gallery import PROGRAMS

NAMES = [
    "dead_intermediate",
    "dead_view_of_intermediate",
    "write_view_of_input",
    "war_long_chain",
    "batch_norm_running_stats",
    "rotary_cache_refresh",
    "strided_input_scale",
    "loop_inplace",
]


def _lines(fn) -> tuple[str, range]:
    src, start = inspect.getsourcelines(fn)
    return inspect.getsourcefile(fn), range(start, start + len(src))


def test_threads_share_one_transform():
    shared = InplaceBarrierTransform(check=True)
    programs = [p for p in PROGRAMS if p.name in NAMES]
    assert len(programs) == 8
    start = threading.Barrier(len(programs))
    errors: dict[str, BaseException] = {}
    checked: list[str] = []  # programs whose reports named a source line (list.append is atomic)
    rng = threading.Lock()  # the global RNG: each program's inputs are drawn without interleaving

    def work(prog) -> None:
        try:
            with rng:
                torch.manual_seed(0)
                fn, args, state = prog.build()
                expected = execute(fn, clone_args(args), state)
                torch.manual_seed(0)
                fn, args, state = prog.build()
            start.wait()
            jf = thunder.jit(fn, fusion_type="dataflow", transforms=[shared])
            for _ in range(2):  # the second call hits the cache
                got = execute(jf, clone_args(args), state)
                assert got.error is None, got.error
                _assert_same(got, expected)
            filename, lines = _lines(fn)
            for rep in last_reports(jf):
                for stage in (rep.before_autodiff, rep.fusion_stage):
                    described = [r.before for r in stage.barriers] + list(stage.dead_writes)
                    described += list(stage.epilogue_writes.values())  # under the input's last write
                    for b in described:
                        if b.source_filename is not None and b.source_positions is not None:
                            where = (b.source_filename, b.source_positions.lineno)
                            assert where[0] == filename and where[1] in lines, f"{prog.name} got a report of {where}"
                            checked.append(prog.name)
        except BaseException as e:  # reported by the main thread
            errors[prog.name] = e

    threads = [threading.Thread(target=work, args=(p,)) for p in programs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    assert not errors, {k: repr(v) for k, v in errors.items()}
    assert len(set(checked)) >= 6, f"too few reports to check: {sorted(set(checked))}"
