"""The command line, ``python -m thunder_ext`` (also installed as ``thunder-ext``).

Subcommands: ``gallery`` (the default), ``check`` (the doctor, :func:`thunder_ext.check`), and
the developer scripts of a source checkout (``bench``, ...).  Unknown subcommands and
arguments are usage errors (exit status 2) with a suggestion for a near miss; output into a
closed pipe ends quietly.

    python -m thunder_ext check path/to/file.py:function --input 4,3,float32,grad --input 3,float32
    python -m thunder_ext check package.module:function --input 8,int64

Each ``--input`` of ``check`` is one positional tensor argument, built from a seeded
``torch.Generator`` (``randn`` for floating dtypes, ``randint(0, 4)`` for integer ones,
``randint(0, 2)`` for bool).  Exit status 0 when the function is safe with the transform, 1
when it is not, 2 on a usage error: bad arguments, a number of ``--input``s the function
cannot take, or a function that fails in eager PyTorch on these inputs (then the report is
printed too).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import runpy
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path

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


PROG = "python -m thunder_ext"

TOP_DESCRIPTION = """\
thunder-ext: InplaceBarrierTransform makes in-place PyTorch code compile correctly under
Lightning Thunder's fusion_type="dataflow".

With no subcommand, runs the gallery.  THUNDER_EXT_LOGS=1 (or debug) logs what the transform
does: barriers with their reasons, dead writes removed, refusals.
"""

TOP_EPILOG = """\
examples:
  python -m thunder_ext                    the gallery, plain Thunder against the transform
  python -m thunder_ext check my.py:step --input 4,3,float32,grad --input 3,float32
  python -m thunder_ext check --help       the input specs and the exit status of check

Each subcommand has its own --help.
"""

# Developer scripts a source checkout holds next to the package (not installed with a wheel):
# subcommand -> (file under scripts/, one line of help).
SCRIPTS: dict[str, tuple[str, str]] = {
    "bench": ("bench.py", "barriers, fusion regions and compile time against plain Thunder"),
    "bench-gpu": ("bench_gpu.py", "time per call on six in-place programs, plain Thunder, the transform, Inductor"),
    "memory": ("memory.py", "Thunder's peak-memory estimate, plain against the transform"),
    "soak": ("soak.py", "random in-place programs through the fuzzer's verdict rule"),
    "verify-gallery": ("verify_gallery.py", "what the checker reports on the gallery's final traces"),
}
SCRIPTS_DIR = Path(__file__).resolve().parent.parent / "scripts"


class Parser(argparse.ArgumentParser):
    """argparse, with a suggestion for a near miss in its usage errors."""

    def error(self, message: str) -> None:  # type: ignore[override]
        words = message.split(": ", 1)[-1].split()
        if message.startswith("unrecognized arguments") and words:
            near = get_close_matches(words[0], _option_names(self), n=1)
            if near:
                message += f" (did you mean {near[0]}?)"
        super().error(message)


def _option_names(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string of ``parser`` and of its subcommands' parsers (argparse reports a
    subcommand's unknown argument from the top-level parser)."""
    names = []
    for action in parser._actions:
        names.extend(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                names.extend(_option_names(sub))
    return list(dict.fromkeys(names))


def command_error(parser: argparse.ArgumentParser, word: str, commands: Sequence[str]) -> None:
    """The usage error for an unknown subcommand, with the nearest one."""
    near = get_close_matches(word, commands, n=1, cutoff=0.6)
    hint = f"; did you mean '{near[0]}'?" if near else ""
    parser.error(f"unknown subcommand '{word}'{hint} (choose from {', '.join(commands)})")


def build_main_parser() -> tuple[argparse.ArgumentParser, list[str]]:
    """The top-level parser and its subcommand names."""
    parser = Parser(prog=PROG, description=TOP_DESCRIPTION, epilog=TOP_EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", title="subcommands", metavar="SUBCOMMAND", parser_class=Parser)
    gallery = sub.add_parser(
        "gallery", help="each failure class under plain Thunder and with the transform, against eager (default)",
        description="Every gallery program, compiled by plain Thunder and with the transform under "
                    "fusion_type='dataflow', compared with eager PyTorch. Exit status 1 if any program is "
                    "wrong or crashes with the transform.",
    )
    gallery.add_argument("--entry", choices=("jit", "thunderfx"), default="jit", help="how to compile (default jit)")
    gallery.add_argument("--executors", choices=("default", "torch_compile"), default="default",
                         help="Thunder's default executors, or torch_compile_ex only (default: default)")
    build_parser(sub.add_parser("check", help="check one of your functions against eager PyTorch, with and without the transform"))
    for name, (script, what) in SCRIPTS.items():
        p = sub.add_parser(name, help=f"{what} (scripts/{script}, source checkout only; its own --help)",
                           add_help=False, prefix_chars="\0")
        p.add_argument("script_args", nargs=argparse.REMAINDER)
    return parser, ["gallery", "check", *SCRIPTS]


def run_script(name: str, args: list[str]) -> int:
    """Run a developer script of the source checkout as ``python -m thunder_ext NAME ARGS``."""
    script = SCRIPTS_DIR / SCRIPTS[name][0]
    if not script.is_file():
        print(f"{PROG} {name}: error: {script.name} is a developer script of the source checkout and is not "
              "installed with the package; run it from a clone (pip install -e .)", file=sys.stderr)
        return 2
    saved = sys.argv
    sys.argv = [f"{PROG} {name}", *args]
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = saved
    return 0


def dispatch(argv: list[str], gallery: Callable[[str, str], int]) -> int:
    """Parse ``argv`` and run the subcommand; ``gallery(entry, executors)`` runs the gallery."""
    parser, commands = build_main_parser()
    if argv and not argv[0].startswith("-") and argv[0] not in commands:
        command_error(parser, argv[0], commands)
    if not argv:
        argv = ["gallery"]
    ns = parser.parse_args(argv)
    if ns.command == "check":
        return check_main(argv[1:])
    if ns.command in SCRIPTS:
        return run_script(ns.command, ns.script_args)
    if ns.command is None:  # options without a subcommand, e.g. --help is handled by argparse
        parser.error("give a subcommand, or none for the gallery")
    return gallery(ns.entry, ns.executors)


def main(argv: list[str] | None, gallery: Callable[[str, str], int]) -> int:
    """Run the CLI; output into a closed pipe (``| head``) ends quietly."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        rc = dispatch(argv, gallery)
        sys.stdout.flush()
        return rc
    except BrokenPipeError:
        # The reader went away: send what is left to /dev/null, so that the interpreter's own
        # flush at exit does not raise a second time.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # as a program killed by SIGPIPE: 128 + 13


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The ``check`` subcommand's parser (standalone when ``parser`` is None)."""
    parser = parser if parser is not None else Parser(prog=f"{PROG} check")
    parser.description = (
        "Check one of your functions for in-place ordering hazards under Lightning Thunder. "
        "It runs the function eagerly, then compiled by plain Thunder and by Thunder with "
        "InplaceBarrierTransform, under each fusion type, on random inputs; compares outputs, the "
        "inputs' final state and gradients (for 'grad' inputs) with eager PyTorch; and lists the "
        "ordering violations found in each compiled run's traces."
    )
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    _add_check_arguments(parser)
    return parser


def _add_check_arguments(parser: argparse.ArgumentParser) -> None:
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
    parser.add_argument(
        "--executors", dest="executors", action="append", choices=("default", "torch_compile"),
        help="Thunder's default executors and/or torch_compile_ex only; repeat for several (default: default)",
    )


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

    report = check(
        fn, *args,
        fusion_type=ns.fusion_types or FUSION_TYPES,
        entry=ns.entries or "jit",
        executors=ns.executors or "default",
    )
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
