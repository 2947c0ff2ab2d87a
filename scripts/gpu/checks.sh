#!/usr/bin/env bash
# The device checks, as one command for one lent GPU machine (a machine stays warm 30 s, so
# set-up and every run go in one call).  From the repository root, after prepare.sh here:
#
#   device run (carry [".gpu"]):  bash scripts/gpu/checks.sh
#
# Each step has its own time cap, so the command always ends with every log written; what it
# writes goes to $OUT (the device tool's folder that comes back), else to ./gpu-out.
#   setup.log        the bridge's smoke test and what Thunder sees (scripts/gpu/setup.sh)
#   nvfuser.log      tests/test_gpu.py::test_gallery_on_nvfuser: the gallery with the transform
#                    on nvFuser, dataflow, thunder.jit and ThunderFX, against eager
#   cuda.log         tests/test_gpu.py::test_gallery_on_cuda: both fusion types, the default
#                    executors (nvFuser) and torch_compile_ex (Inductor's Triton)
#   soak.log, soak.json   the fuzzer's programs on CUDA (scripts/soak.py --device cuda)
#   bench.log, bench.json scripts/bench_gpu.py: plain Thunder, the transform, torch.compile
# Caps (seconds): CAP_NVFUSER, CAP_CUDA, CAP_SOAK, CAP_BENCH; JOBS: pytest-xdist workers.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-out}
mkdir -p "$out"
jobs=${JOBS:-12}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

bash scripts/gpu/setup.sh 2>&1 | tee "$out/setup.log"
# shellcheck disable=SC1090
. "${GPU_ENV:-/tmp/gpu-env.sh}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$out/setup.log"

xdist=()
python3 -c 'import xdist' 2>/dev/null && xdist=(-n "$jobs")
step() {  # step NAME CAP CMD...: run CMD for at most CAP seconds, its output in $out/NAME.log
    local name=$1 cap=$2; shift 2
    echo "== $name (cap ${cap}s): $*"
    local t0=$SECONDS
    timeout -k 10 "$cap" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    echo "== $name: exit $rc after $((SECONDS - t0)) s"
    tail -n 25 "$out/$name.log"
}
step nvfuser "${CAP_NVFUSER:-120}" python3 -m pytest -p no:cacheprovider -q -rfE "${xdist[@]}" \
    tests/test_gpu.py -k test_gallery_on_nvfuser
step cuda "${CAP_CUDA:-150}" python3 -m pytest -p no:cacheprovider -q -rfE "${xdist[@]}" \
    tests/test_gpu.py -k test_gallery_on_cuda
step soak "${CAP_SOAK:-120}" python3 scripts/soak.py --device cuda --rotate --jobs "$jobs" \
    --seed "${SOAK_SEED:-32000}" --examples 20000 --executors both --time-limit "$(( ${CAP_SOAK:-120} - 40 ))" \
    --json "$out/soak.json"
step bench "${CAP_BENCH:-90}" python3 scripts/bench_gpu.py --iters 50 --warmup 5 --json "$out/bench.json"
exit 0
