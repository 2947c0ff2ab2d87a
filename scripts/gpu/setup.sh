#!/usr/bin/env bash
# Set up a lent GPU machine (bare image: Python 3.12, torch 2.11+cu130, no index, no nvFuser)
# for Thunder main + nvFuser, from the .gpu/ that scripts/gpu/prepare.sh made (carry ".gpu").
# Run from the repository root, inside the same device call as what it sets up for:
#
#   scripts/gpu/setup.sh                      # set up, print the state, write $GPU_ENV
#   . "${GPU_ENV:-/tmp/gpu-env.sh}"           # then: PYTHONPATH, LD_LIBRARY_PATH for this shell
#   scripts/gpu/setup.sh CMD ARGS...          # or: set up, then run CMD with that environment
#
# Steps: the bridge's own setup (unpack nvFuser into $SITE, link the image's CUDA 13
# libraries, smoke-test a fusion: it prints NVFUSER_BRIDGE_SMOKE_OK); install the .gpu wheels
# (Thunder main and its missing dependencies) with --no-index --target $DEPS; install this
# project editable; print whether Thunder sees nvFuser, and the exact import error when it
# does not.  A failed smoke test is reported, not fatal: the CUDA runs without nvFuser are
# still worth having.  Idempotent: a second run redoes nothing that is done.
set -euo pipefail

cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
DEPS=${DEPS:-/tmp/deps}
GPU_ENV=${GPU_ENV:-/tmp/gpu-env.sh}

[[ -s .gpu/nvfuser_bridge.tar.xz ]] || { echo "no .gpu/nvfuser_bridge.tar.xz: run scripts/gpu/prepare.sh here first, carry .gpu" >&2; exit 1; }

# 1. nvFuser, through the bridge (writes $SITE/nvfuser_bridge_env.sh).
if ! SITE=$SITE PY=$PY bash .gpu/bridge_setup.sh .gpu/nvfuser_bridge.tar.xz; then
    echo "setup: the nvfuser bridge's setup or smoke test failed (above); going on without nvFuser" >&2
fi

# 2. Thunder main and looseversion/optree/dill/expecttest; the image's torch and other packages stay.
if [[ ! -d $DEPS/thunder ]]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$DEPS" .gpu/*.whl
fi

# 3. The environment: the bridge's (nvFuser and the CUDA 13 libraries), then the wheels.
{
    [[ -f $SITE/nvfuser_bridge_env.sh ]] && cat "$SITE/nvfuser_bridge_env.sh"
    echo "export PYTHONPATH=$DEPS\${PYTHONPATH:+:\$PYTHONPATH}"
} > "$GPU_ENV"
# shellcheck disable=SC1090
. "$GPU_ENV"

# 4. This project, editable (thunder_ext.transforms lives in transforms/, see docs/layout.md).
if ! "$PY" -c 'import thunder_ext.transforms' 2>/dev/null; then
    "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e .
fi

# 5. What we got.
"$PY" - <<'PYEOF'
import sys, traceback, warnings
warnings.filterwarnings("ignore", message="transformer_engine module not found")
import torch, thunder
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, thunder {thunder.__version__}, "
      f"cuda {torch.cuda.is_available()} ({torch.cuda.get_device_name() if torch.cuda.is_available() else '-'})")
try:
    import nvfuser_direct
    print(f"nvfuser_direct {getattr(nvfuser_direct, 'version', lambda: '?')()} imports")
except Exception as e:
    print("nvfuser_direct does NOT import:", "".join(traceback.format_exception_only(type(e), e)).strip())
from thunder.executors.nvfuserex import nvfuser_available
print(f"nvfuser_available() = {nvfuser_available()}")
PYEOF
echo "environment: . $GPU_ENV"

if (( $# )); then
    exec "$@"
fi
