#!/usr/bin/env bash
# Prepare .gpu/: everything a lent GPU machine (Python 3.12, torch 2.11+cu130, no package
# index, no nvFuser) needs to run Thunder main with nvFuser. Run here, on the CPU machine,
# from the repository root; then name ".gpu" in the device call's `carry` and run
# scripts/gpu/setup.sh there. Recipe: shared/docs/gpu-nvfuser.md.
#
#   .gpu/nvf.tar.xz      nvfuser-cu130-torch210 unpacked, minus its bundled libnvrtc/libcupti
#                        (the image has both; setup.sh links them) and C++ headers: a call
#                        carries at most 64 MiB and the wheel alone is 80 MB
#   .gpu/*.whl           Thunder main (0.2.7.dev0, not on the index) and the dependencies the
#                        image lacks: looseversion==1.3.0, optree, dill (all cp312)
#
# Idempotent: a file already in .gpu/ is kept; delete .gpu/ to start over.
# Environment: THUNDER_MAIN_WHEEL=path overrides the search for the Thunder main wheel;
# PYTHON (default python3) is the interpreter whose pip downloads.
set -euo pipefail

cd "$(git rev-parse --show-toplevel)"
PY=${PYTHON:-python3}
OUT=.gpu
NVF=nvfuser-cu130-torch210
mkdir -p "$OUT"

# pip's cross-platform download: cp312 wheels for manylinux x86-64, whatever this machine is.
pip_download() {
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        "$@"
}

# 1. nvFuser, slimmed.
if [[ ! -s $OUT/nvf.tar.xz ]]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    echo "downloading $NVF (about 80 MB)"
    pip_download -d "$work/w" "$NVF"
    whl=$(ls "$work"/w/nvfuser_cu130_torch210-*.whl)
    echo "got $(basename "$whl")"
    mkdir "$work/nvf"
    "$PY" -m zipfile -e "$whl" "$work/nvf"  # unzip may be missing; zipfile never is
    libs="$work/nvf/nvfuser_cu130_torch210.libs"
    # The libraries we drop are the ones setup.sh must link back; fail loudly if the layout changed.
    ls "$libs"/libnvrtc-*.so* "$libs"/libcupti-*.so* >/dev/null
    rm -f "$libs"/libnvrtc-*.so* "$libs"/libcupti-*.so* "$libs"/libnvrtc-builtins-*.so* 2>/dev/null || true
    rm -rf "$work"/nvf/nvfuser_common/include
    tar -cJf "$OUT/nvf.tar.xz.part" -C "$work/nvf" .
    mv "$OUT/nvf.tar.xz.part" "$OUT/nvf.tar.xz"  # no half-written archive survives an interrupt
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
for spec in looseversion==1.3.0 optree dill; do
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
