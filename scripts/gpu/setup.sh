#!/usr/bin/env bash
# Set up a lent GPU machine (bare image: Python 3.12, torch 2.11+cu130, no index, no nvFuser)
# for Thunder main + nvFuser, from the .gpu/ that scripts/gpu/prepare.sh made (carry ".gpu").
# Run from the repository root, inside the same device call as what it sets up for:
#
#   scripts/gpu/setup.sh                      # set up, print the state, write $GPU_ENV
#   . "${GPU_ENV:-/tmp/gpu-env.sh}"           # then: PYTHONPATH, LD_LIBRARY_PATH for this shell
#   scripts/gpu/setup.sh CMD ARGS...          # or: set up, then run CMD with that environment
#
# Steps: unpack nvFuser into $SITE; install the .gpu wheels (Thunder main and its missing
# dependencies) with --no-index --target $DEPS; link the image's libnvrtc/libcupti under the
# hashed names the nvFuser wheel bundled (prepare.sh dropped them to fit the 64 MiB a call
# carries); install this project editable; print whether Thunder sees nvFuser, and the exact
# import error when it does not.  A missing nvFuser is reported, not fatal: the CUDA runs
# without it are still worth having.  Idempotent: a second run redoes nothing that is done.
set -euo pipefail

cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
DEPS=${DEPS:-/tmp/deps}
GPU_ENV=${GPU_ENV:-/tmp/gpu-env.sh}
LIBS=$SITE/nvfuser_cu130_torch210.libs

[[ -s .gpu/nvf.tar.xz ]] || { echo "no .gpu/nvf.tar.xz: run scripts/gpu/prepare.sh here first, carry .gpu" >&2; exit 1; }

# 1. nvFuser.
if [[ ! -d $SITE/nvfuser_direct ]]; then
    mkdir -p "$SITE"
    tar -xJf .gpu/nvf.tar.xz -C "$SITE"
fi

# 2. Thunder main and looseversion/optree/dill; the image's torch and other packages stay.
if [[ ! -d $DEPS/thunder ]]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$DEPS" .gpu/*.whl
fi

# 3. The dropped libraries: every .libs file the wheel's RECORD lists that is not on disk.
# The hashed names come from the wheel itself, never from this script.
find_lib() {  # $1: soname glob; prefer the copy next to torch (what torch itself loads)
    local torch_site
    torch_site=$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
    { find "$torch_site/nvidia" -name "$1" 2>/dev/null; find /usr/local/cuda* /usr/lib /usr/local/lib -name "$1" 2>/dev/null; } \
        | grep -v builtins | head -1 || true  # nothing found: the caller says so
}
record=$(ls "$SITE"/nvfuser_cu130_torch210-*.dist-info/RECORD)
for rel in $(grep -o '^nvfuser_cu130_torch210\.libs/[^,]*' "$record"); do
    name=$(basename "$rel")
    [[ -e $LIBS/$name ]] && continue
    case $name in
        libnvrtc-*) target=$(find_lib 'libnvrtc.so.1[0-9]*') ;;
        libcupti-*) target=$(find_lib 'libcupti.so.*') ;;
        *) echo "setup: $name is missing and has no known stand-in" >&2; exit 1 ;;
    esac
    [[ -n $target ]] || { echo "setup: no stand-in for $name on this image" >&2; exit 1; }
    ln -sf "$target" "$LIBS/$name"
    echo "linked $name -> $target"
done
# Cross-check (informational): what the codegen library asks for, as the loader will see it.
if command -v readelf >/dev/null; then
    for so in "$SITE"/nvfuser_common/lib/libnvfuser_codegen.so; do
        for need in $(readelf -d "$so" | sed -n 's/.*NEEDED.*\[\(lib\(nvrtc\|cupti\|cudart\)-[^]]*\)\].*/\1/p'); do
            [[ -e $LIBS/$need ]] || echo "setup: warning: $(basename "$so") needs $need, not in $LIBS" >&2
        done
    done
fi

# 4. The environment: the wheels first; torch's lib dir because nvFuser's RPATH looks for it
# at ../../torch/lib, which is not where $SITE is.
torch_lib=$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
cat > "$GPU_ENV" <<ENV
export PYTHONPATH=$SITE:$DEPS\${PYTHONPATH:+:\$PYTHONPATH}
export LD_LIBRARY_PATH=$torch_lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
ENV
# shellcheck disable=SC1090
. "$GPU_ENV"

# 5. This project, editable (thunder_ext.transforms lives in transforms/, see docs/layout.md).
if ! "$PY" -c 'import thunder_ext.transforms' 2>/dev/null; then
    "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e .
fi

# 6. What we got.
"$PY" - <<'PYEOF'
import sys, traceback, warnings
warnings.filterwarnings("ignore", message="transformer_engine module not found")
import torch, thunder
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, thunder {thunder.__version__}, "
      f"cuda {torch.cuda.is_available()} ({torch.cuda.get_device_name() if torch.cuda.is_available() else '-'})")
try:
    import nvfuser_direct
    print(f"nvfuser_direct {getattr(nvfuser_direct, 'version', lambda: '?')()} imports")
except Exception as e:  # the first thing the recipe must find out: does it load on torch 2.11?
    print("nvfuser_direct does NOT import:", "".join(traceback.format_exception_only(type(e), e)).strip())
from thunder.executors.nvfuserex import nvfuser_available
print(f"nvfuser_available() = {nvfuser_available()}")
PYEOF
echo "environment: . $GPU_ENV"

if (( $# )); then
    exec "$@"
fi
