#!/usr/bin/env bash
# Device call: set up (scripts/gpu/setup.sh, no smoke test), then scripts/gpu/diagnose.py on
# every program of .gpu/programs.txt, with both executor sets, and on the gallery programs
# named in GALLERY, each in its own process, 14 at a time; one log, $OUT/diag.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
SMOKE=0 bash scripts/gpu/setup.sh >> "$out/setup.log" 2>&1; tail -3 "$out/setup.log"
. "${GPU_ENV:-/tmp/gpu-env.sh}"
n=$(python3 -c "print(len(open('.gpu/programs.txt').read().strip().split('\n\n')))")
tmp=$(mktemp -d)
{
    for g in ${GALLERY:-}; do echo "--gallery $g"; done
    for ((i = 0; i < n; i++)); do
        echo ".gpu/programs.txt --only $i"
        echo ".gpu/programs.txt --only $i --executors torch_compile"
    done
} | awk '{print NR" "$0}' | timeout -k 5 "${CAP:-200}" xargs -P 14 -L 1 bash -c \
    'k=$0; python3 scripts/gpu/diagnose.py "$@" > '"$tmp"'/$k.txt 2>&1'
for f in $(ls "$tmp" | sort -n); do cat "$tmp/$f"; done > "$out/diag.txt"
grep -E "^\[|^####" "$out/diag.txt"
