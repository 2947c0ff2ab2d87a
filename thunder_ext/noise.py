"""Opt-in silencing of two upstream messages that every run prints and no user can act on.

Called by the project's own entry points (the CLI, the notebooks, the README's examples),
never on import: a library must not change its users' warning filters behind their back.
Each message is matched by its text and its issuing module; everything else still shows.
"""

from __future__ import annotations

import logging
import warnings


class _DropMessage(logging.Filter):
    """Drops one known upstream log message, by its start; every other record passes."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


_CUDA_HOME_FILTER = _DropMessage("No CUDA runtime is found")


def quiet_upstream_noise() -> None:
    """Hide ``transformer_engine module not found!`` and ``No CUDA runtime is found, using CUDA_HOME=...``.

    Call it before ``import thunder`` (``import thunder_ext`` does not import Thunder): the
    first is a warning Thunder issues while it is imported.
    """
    # thunder/executors/transformer_engineex.py warns at `import thunder` when the optional
    # transformer_engine package is absent.
    warnings.filterwarnings(
        "ignore",
        message="transformer_engine module not found",
        category=UserWarning,
        module=r"thunder\.executors\.transformer_engineex",
    )
    # torch/utils/cpp_extension.py logs (a logging WARNING, not a warning) at its import, which
    # ThunderFX triggers, whenever a CUDA_HOME exists but no CUDA device does.
    logger = logging.getLogger("torch.utils.cpp_extension")
    if _CUDA_HOME_FILTER not in logger.filters:
        logger.addFilter(_CUDA_HOME_FILTER)
