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
#   bench.log, bench.json scripts/bench_gpu.py: plain Thunder, the transform, torch.compile,
#                    interleaved; the final traces of each in bench-traces/
#   findings.log     tests/test_gpu.py -k soak_findings: the CUDA soak's programs (fixed, fixed
#                    on the CPU's traces only, and the strict xfails of the open ones)
#   kv.log           scripts/kv_cache.py --device cuda: the decode step's time and peak memory
#   diag.txt         scripts/gpu/diagnose.sh on .gpu/programs.txt (plain against transform, traces)
#   probe.log        .gpu/probe.py, a throwaway script of the moment (only when named)
# STEPS picks the steps, in order (default: findings nvfuser cuda soak bench kv; diagnose is
# only run when named).  Caps (seconds): CAP_<STEP>; JOBS: pytest-xdist workers.
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
for s in ${STEPS:-findings nvfuser cuda soak bench kv}; do
    case $s in
    findings) step findings "${CAP_FINDINGS:-90}" python3 -m pytest -p no:cacheprovider -q -rfExX "${xdist[@]}" \
        tests/test_gpu.py -k soak_findings ;;
    nvfuser) step nvfuser "${CAP_NVFUSER:-120}" python3 -m pytest -p no:cacheprovider -q -rfE "${xdist[@]}" \
        tests/test_gpu.py -k test_gallery_on_nvfuser ;;
    cuda) step cuda "${CAP_CUDA:-150}" python3 -m pytest -p no:cacheprovider -q -rfE "${xdist[@]}" \
        tests/test_gpu.py -k test_gallery_on_cuda ;;
    soak) step soak "${CAP_SOAK:-120}" python3 scripts/soak.py --device cuda --rotate --jobs "$jobs" \
        --seed "${SOAK_SEED:-32000}" --examples 20000 --executors both --time-limit "$(( ${CAP_SOAK:-120} - 40 ))" \
        --json "$out/soak.json" ;;
    bench) step bench "${CAP_BENCH:-120}" python3 scripts/bench_gpu.py --iters "${BENCH_ITERS:-100}" --warmup 10 --rounds 5 \
        --json "$out/bench.json" --traces "$out/bench-traces" ;;
    probe) step probe "${CAP_PROBE:-40}" python3 .gpu/probe.py ;;
    kv) step kv "${CAP_KV:-90}" python3 scripts/kv_cache.py --device cuda --calls 50 --executors default torch_compile ;;
    diagnose) step diagnose "${CAP_DIAGNOSE:-150}" env CAP="$(( ${CAP_DIAGNOSE:-150} - 20 ))" bash scripts/gpu/diagnose.sh ;;
    *) echo "checks.sh: no step '$s'" >&2 ;;
    esac
done
exit 0
