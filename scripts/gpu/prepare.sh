#!/usr/bin/env bash
# Prepare .gpu/: everything a lent GPU machine (Python 3.12, torch 2.11+cu130, no package
# index, no nvFuser) needs to run Thunder main with nvFuser. Run here, on the CPU machine,
# from the repository root; then name ".gpu" in the device call's `carry` and run
# scripts/gpu/setup.sh (or scripts/gpu/checks.sh) there.
#
#   .gpu/nvfuser_bridge.tar.xz, .gpu/bridge_setup.sh
#                        the workplace's nvfuser-bridge (shared/nvfuser-bridge/): the only
#                        nvFuser wheel for cp312 + CUDA 13 (nvfuser-cu130-torch210) patched to
#                        load on torch 2.11, and the script that unpacks it and smoke-tests it
#   .gpu/*.whl           Thunder main (0.2.7.dev0, not on the index) and the dependencies the
#                        image lacks: looseversion==1.3.0, optree, dill, expecttest (all cp312)
#
# Idempotent: a file already in .gpu/ is kept; delete .gpu/ to start over.
# Environment: NVFUSER_BRIDGE=dir overrides the search for the bridge, THUNDER_MAIN_WHEEL=path
# the search for the Thunder main wheel; PYTHON (default python3) is the interpreter whose pip
# downloads.
set -euo pipefail

cd "$(git rev-parse --show-toplevel)"
PY=${PYTHON:-python3}
OUT=.gpu
mkdir -p "$OUT"

# pip's cross-platform download: cp312 wheels for manylinux x86-64, whatever this machine is.
pip_download() {
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 "$@"
}

# 1. nvFuser through the bridge.
if [[ ! -s $OUT/nvfuser_bridge.tar.xz ]]; then
    bridge=${NVFUSER_BRIDGE:-}
    if [[ -z $bridge ]]; then
        for d in ../shared/nvfuser-bridge /work/shared/nvfuser-bridge shared/nvfuser-bridge; do
            [[ -s $d/nvfuser_bridge.tar.xz ]] && { bridge=$d; break; }
        done
    fi
    [[ -n $bridge ]] || { echo "no nvfuser-bridge: set NVFUSER_BRIDGE" >&2; exit 1; }
    (cd "$bridge" && sha256sum -c nvfuser_bridge.sha256 >/dev/null) || { echo "$bridge: checksum mismatch" >&2; exit 1; }
    cp "$bridge/setup.sh" "$OUT/bridge_setup.sh"
    cp "$bridge/nvfuser_bridge.tar.xz" "$OUT/nvfuser_bridge.tar.xz"
fi

# 2. Thunder main: the wheel the index does not have.
if ! ls "$OUT"/lightning_thunder-*.whl >/dev/null 2>&1; then
    wheel=${THUNDER_MAIN_WHEEL:-}
    if [[ -z $wheel ]]; then
        for d in ../shared/wheels /work/shared/wheels shared/wheels; do
            wheel=$(ls "$d"/lightning_thunder-*.whl 2>/dev/null | head -1 || true)
            [[ -n $wheel ]] && break
        done
    fi
    [[ -n $wheel && -f $wheel ]] || { echo "no Thunder main wheel: set THUNDER_MAIN_WHEEL" >&2; exit 1; }
    cp "$wheel" "$OUT/"
fi

# 3. Thunder main's dependencies that the GPU image does not carry.
for spec in looseversion==1.3.0 optree dill expecttest; do
    name=${spec%%=*}
    ls "$OUT"/"$name"-*.whl >/dev/null 2>&1 || pip_download -d "$OUT" "$spec"
done

# The device tool refuses a working tree over 64 MiB; leave room for the repository itself.
size=$(du -sb "$OUT" | cut -f1)
echo "$OUT: $(( size / 1024 / 1024 )) MiB ($size bytes)"
ls -l "$OUT"
if (( size > 56 * 1024 * 1024 )); then
    echo "warning: $OUT is over 56 MiB; with the repository it may exceed the 64 MiB a call carries" >&2
fi
