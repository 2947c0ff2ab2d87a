"""Shared test configuration: markers, hypothesis profiles, CUDA/nvFuser skips."""

from __future__ import annotations

import os
import warnings

warnings.filterwarnings("ignore", message="transformer_engine module not found")

try:
    from hypothesis import HealthCheck, settings

    # CI: a fixed, seeded budget.  Soak: THUNDER_EXT_HYPOTHESIS_PROFILE=soak pytest tests/test_fuzz.py
    settings.register_profile(
        "ci",
        max_examples=int(os.environ.get("THUNDER_EXT_FUZZ_EXAMPLES", "40")),
        derandomize=True,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    settings.register_profile(
        "soak",
        max_examples=int(os.environ.get("THUNDER_EXT_FUZZ_EXAMPLES", "2000")),
        derandomize=False,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    settings.load_profile(os.environ.get("THUNDER_EXT_HYPOTHESIS_PROFILE", "ci"))
except ImportError:  # hypothesis is in the test extra; without it only the fuzz tests skip
    pass
