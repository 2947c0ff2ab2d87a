"""``python -m thunder_ext check``: the doctor (:func:`thunder_ext.check`) from the command line.

    python -m thunder_ext check path/to/file.py:function --input 4,3,float32,grad --input 3,float32
    python -m thunder_ext check package.module:function --input 8,int64

Each ``--input`` is one positional tensor argument, built from a seeded ``torch.Generator``
(``randn`` for floating dtypes, ``randint(0, 4)`` for integer ones, ``randint(0, 2)`` for bool).
Exit status 0 when the function is safe with the transform, 1 when it is not, 2 on a usage
error: bad arguments, a number of ``--input``s the function cannot take, or a function that
fails in eager PyTorch on these inputs (then the report is printed too).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
}

SPEC_HELP = (
    "one positional tensor argument, as comma-separated shape dims, then a dtype "
    f"({', '.join(DTYPES)}), then optionally the word 'grad' (requires_grad=True; floating dtypes only). "
    "Examples: '4,3,float32,grad', '3,float32', 'float64' (a 0-dim tensor), '8,int64'. Repeat for each argument"
)

EPILOG = """\
input specs:
  DIMS...,DTYPE[,grad]   e.g. 4,3,float32,grad   3,float32   float64 (0-dim)   8,int64
  dtypes: float32 float64 float16 bfloat16 int64 int32 bool

examples:
  python -m thunder_ext check my_model.py:step --input 4,3,float32,grad --input 3,float32
  python -m thunder_ext check mypkg.ops:update_cache --input 6,4,float32 --input 2,4,float32 --fusion-type dataflow

exit status: 0 if the function is safe with InplaceBarrierTransform, 1 if it is not, 2 on a usage
error (bad arguments, the wrong number of --input for the function, or a function that raises in
eager PyTorch on these inputs).
"""


@dataclass(frozen=True)
class InputSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype
    grad: bool = False

    def make(self, gen: torch.Generator) -> torch.Tensor:
        if self.dtype.is_floating_point:
            t = torch.randn(self.shape, generator=gen, dtype=self.dtype)
        elif self.dtype == torch.bool:
            t = torch.randint(0, 2, self.shape, generator=gen).to(torch.bool)
        else:
            t = torch.randint(0, 4, self.shape, generator=gen, dtype=self.dtype)
        return t.requires_grad_(self.grad)


def parse_input_spec(text: str) -> InputSpec:
    """``'4,3,float32,grad'`` -> ``InputSpec((4, 3), torch.float32, grad=True)``."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(p == "" for p in parts):
        raise argparse.ArgumentTypeError(f"bad input spec {text!r}: empty field; expected DIMS...,DTYPE[,grad]")
    grad = parts[-1] == "grad"
    if grad:
        parts = parts[:-1]
    if not parts:
        raise argparse.ArgumentTypeError(f"bad input spec {text!r}: missing dtype; expected DIMS...,DTYPE[,grad]")
    *dims, dtype_name = parts
    dtype = DTYPES.get(dtype_name)
    if dtype is None:
        raise argparse.ArgumentTypeError(
            f"bad input spec {text!r}: unknown dtype {dtype_name!r} (expected one of: {', '.join(DTYPES)})"
        )
    shape = []
    for d in dims:
        try:
            n = int(d)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"bad input spec {text!r}: dimension {d!r} is not an integer"
            ) from None
        if n < 0:
            raise argparse.ArgumentTypeError(f"bad input spec {text!r}: dimension {n} is negative")
        shape.append(n)
    if grad and not dtype.is_floating_point:
        raise argparse.ArgumentTypeError(
            f"bad input spec {text!r}: 'grad' needs a floating dtype, not {dtype_name} "
            "(only floating-point tensors can require gradients)"
        )
    return InputSpec(tuple(shape), dtype, grad)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m thunder_ext check",
        description=(
            "Check one of your functions for in-place ordering hazards under Lightning Thunder. "
            "It runs the function eagerly, then compiled by plain Thunder and by Thunder with "
            "InplaceBarrierTransform, under each fusion type, on random inputs; compares outputs, the "
            "inputs' final state and gradients (for 'grad' inputs) with eager PyTorch; and lists the "
            "ordering violations found in each compiled run's traces."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "target",
        metavar="FILE.py:FUNCTION | MODULE:FUNCTION",
        help="the function to check: a path to a Python file or an importable module, a colon, and its name",
    )
    parser.add_argument(
        "--input", "-i", dest="inputs", action="append", type=parse_input_spec, default=[], metavar="SPEC",
        help=SPEC_HELP,
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the torch.Generator that draws the inputs (default 0)")
    parser.add_argument(
        "--fusion-type", dest="fusion_types", action="append", choices=("consecutive", "dataflow"),
        help="Thunder fusion type to try; repeat for several (default: both consecutive and dataflow)",
    )
    parser.add_argument(
        "--entry", dest="entries", action="append", choices=("jit", "thunderfx"),
        help="how to compile: thunder.jit and/or ThunderFX; repeat for several (default: jit)",
    )
    return parser


def load_function(target: str, parser: argparse.ArgumentParser):
    """Resolve ``file.py:function`` or ``module.name:function`` (errors go through ``parser.error``)."""
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name:
        parser.error(f"target {target!r} must look like path/to/file.py:function or module.name:function")
    is_file = where.endswith(".py") or os.sep in where or "/" in where or os.path.exists(where)
    if is_file:
        path = os.path.abspath(where)
        if not os.path.isfile(path):
            parser.error(f"file not found: {where}")
        mod_name = "_thunder_ext_check_" + "".join(c if c.isalnum() else "_" for c in path)
        spec = importlib.util.spec_from_file_location(mod_name, path)
        if spec is None or spec.loader is None:
            parser.error(f"cannot load {where} as a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module  # dataclasses, pickling and inspect look modules up here
        sys.path.insert(0, os.path.dirname(path))  # the file may import its siblings
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            parser.error(f"importing {where} failed: {type(e).__name__}: {e}")
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            parser.error(f"cannot import module {where!r}: {e}")
        except Exception as e:
            parser.error(f"importing module {where!r} failed: {type(e).__name__}: {e}")
    obj = module
    for part in name.split("."):
        if not hasattr(obj, part):
            parser.error(f"{where} has no function {name!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        parser.error(f"{where}:{name} is not callable")
    return obj


def check_main(argv: list[str]) -> int:
    """Entry point of ``python -m thunder_ext check``; returns the exit status."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    fn = load_function(ns.target, parser)
    check_arity(fn, ns.target, len(ns.inputs), parser)
    gen = torch.Generator().manual_seed(ns.seed)
    args = [spec.make(gen) for spec in ns.inputs]

    from thunder_ext.doctor import FUSION_TYPES, check

    fusion_types = tuple(dict.fromkeys(ns.fusion_types or FUSION_TYPES))
    entries = tuple(dict.fromkeys(ns.entries or ("jit",)))
    report = check(fn, *args, fusion_types=fusion_types, entries=entries)
    report.function = ns.target
    print(report)
    if report.status == "eager-error":
        # The user's function (or the inputs we drew for it) is at fault, not the transform.
        print(
            f"{parser.prog}: error: {ns.target} raises in eager PyTorch on these inputs "
            f"({type(report.eager_error).__name__}: {report.eager_error}); fix the function or its --input specs",
            file=sys.stderr,
        )
        return 2
    return 0 if report.safe else 1


def check_arity(fn, target: str, given: int, parser: argparse.ArgumentParser) -> None:
    """A usage error unless ``fn`` takes ``given`` positional tensors (one per ``--input``)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins without a signature: let the call decide
        return
    try:
        sig.bind(*range(given))
    except TypeError as e:
        params = [
            p.name for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]
        wants = f"{len(params)} tensor argument(s) ({', '.join(params)})" if params else "other arguments"
        parser.error(
            f"{target} takes {wants} but got {given} --input ({e}); "
            "pass one --input SPEC per tensor argument, e.g. --input 4,3,float32"
        )
