"""The ``thunder_ext`` logger, and the ``THUNDER_EXT_LOGS`` environment variable that turns it on.

Like ``TORCH_LOGS``, the variable is read once, when this module is first imported (that is,
when the transform is first imported):

* ``THUNDER_EXT_LOGS=1`` (or ``info``): every barrier placed with its reasons, every dead
  in-place op removed, and every refusal with its reason, per stage, on stderr;
* ``THUNDER_EXT_LOGS=debug``: the same, plus the trace each stage produced.

Unset, ``0`` or empty: nothing is configured, and the logger behaves like any library
logger (configure ``logging.getLogger("thunder_ext")`` yourself if you prefer).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

ENV_VAR = "THUNDER_EXT_LOGS"
LEVELS = {"1": logging.INFO, "info": logging.INFO, "true": logging.INFO, "on": logging.INFO, "debug": logging.DEBUG}
OFF = ("", "0", "false", "off")

logger = logging.getLogger("thunder_ext")


def level_from_env(value: str | None) -> int | None:
    """The logging level ``value`` asks for; None for off.  Unknown values warn and count as off."""
    if value is None or value.strip().lower() in OFF:
        return None
    level = LEVELS.get(value.strip().lower())
    if level is None:
        warnings.warn(
            f"{ENV_VAR}={value!r} is not understood; use 1 (or info) or debug, or 0 to turn it off",
            UserWarning,
            stacklevel=2,
        )
    return level


def configure_from_env() -> None:
    level = level_from_env(os.environ.get(ENV_VAR))
    if level is None:
        return
    if not any(getattr(h, "_thunder_ext", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[thunder_ext %(levelname)s] %(message)s"))
        handler._thunder_ext = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(level)
    # Our handler prints it; a root handler the application set up would print it twice.
    logger.propagate = False


configure_from_env()


def log_report(stage: str, report, trace=None) -> None:
    """One line per barrier and dead write of a :class:`~thunder_ext.barriers.BarrierReport`."""
    if not logger.isEnabledFor(logging.INFO):
        return
    from thunder_ext.op_kinds import describe

    logger.info(
        "%s: %d barrier(s) placed, %d dead in-place op(s) removed, %d barrier(s) stripped (%.1f ms)",
        stage,
        len(report.barriers),
        len(report.dead_writes),
        report.stripped,
        report.seconds * 1e3,
    )
    for rec in report.barriers:
        logger.info("%s: barrier: %s", stage, "; ".join(dict.fromkeys(rec.reasons)) or f"before {describe(rec.before)}")
    for bsym in report.dead_writes:
        logger.info("%s: removed dead in-place op %s (nothing reads what it writes)", stage, describe(bsym))
    if trace is not None and logger.isEnabledFor(logging.DEBUG):
        logger.debug("%s: trace after the pass:\n%s", stage, trace)


def log_split(stage: str, report) -> None:
    """One line per index write split into one write per entry (thunder_ext.index_order)."""
    for what in report.split:
        logger.info("%s: split %s, in eager's order (its source overlaps its destination)", stage, what)
    for what in report.gradient_kept:
        logger.info("%s: %s computed whole first as well, for eager's gradient (the split runs without grad)", stage, what)


def log_removal(stage: str, report) -> None:
    """One line for a :class:`~thunder_ext.final_barriers.BarrierRemovalReport`."""
    if not logger.isEnabledFor(logging.INFO):
        return
    from thunder_ext.summaries import removal_report_headline

    logger.info("%s: %s", stage, removal_report_headline(report))


def log_refusal(stage: str, error: BaseException) -> None:
    logger.info("%s: refused with %s: %s", stage, type(error).__name__, error)
