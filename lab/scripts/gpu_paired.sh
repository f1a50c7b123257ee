#!/usr/bin/env bash
# One device command = one machine: calibrate it and run validation cases on it, so the cases are
# simulated on the profile of the machine they ran on (machines of one kind differ:
# lab/scripts/bench_repeatability.py). Run from the repository root on the GPU host with .gpuhost/ in
# the tree (../shared/gpu-host/prepare.sh):
#   NAME=h200x2-d CASES="c-tinyllama-z3cpu-bd ..." STEPS=14 BUDGET_S=420 OUT=... bash lab/scripts/gpu_paired.sh
# Time: ~1 min of JIT builds (three in parallel), ~1.5 min of calibration without the aio sweep
# and GEMM curve (taken from $BASE; set NVME=1 to measure the drive too), then the cases inside
# BUDGET_S (most important first: the budget cuts the tail).
# DS=1 also measures DeepSpeed's host costs (calibrate_ds.py: 8 configurations x 2 depths, ~4 min
# on an H200 host). CALIBRATE=0 skips the calibration: for a second command on the same, still
# warm machine (machine.txt in both outputs names the host and GPU UUID, to check it). GEMM=1 also
# measures the GEMM curve (~20 s); the `layer` benchmark (real decoder layers, ~1 min) always runs.
# A case named k times in CASES runs k times, each in its own process (NAME, NAME.p2, ...: the
# process-to-process spread on one machine, lab/scripts/bench_repeatability.py).
# PLAN=FILE takes the cases from FILE instead of lab/plan.yaml (e.g. lab/advice/cases.yaml).
# CAL_SWEEP="ds_variants=zero2_offload,zero2_offload_gas2" adds --sweep points to the calibration
# (with DS=1: only those DeepSpeed host-cost configurations, ~1 min each pair of depths).
# CAL_SKIP=a,b replaces the --skip list (e.g. a second command that measures only DeepSpeed's host
# costs: merge the two raw records' results and rebuild with `tierlab calibrate --from-raw`).
# Leaves in $OUT (at most 8 files come back): $NAME-raw.json (every calibration point: rebuild
# the profile with `tierlab calibrate --from-raw`), calibrate.log, validate-session.log and
# validation.tar.gz (every measurement directory, re-packed after each case).
set -eo pipefail
export TIERLAB_PROFILES=${TIERLAB_PROFILES:-$PWD/lab/profiles}   # the test machines, by name
: "${OUT:?set OUT to the output folder}" "${NAME:?set NAME to the profile name}" "${CASES:?set CASES}"
BASE=${BASE:-h200x2-b}
[ -f .gpuhost/install.sh ] && source .gpuhost/install.sh
t0=$(date +%s)
{ hostname; nvidia-smi -L 2>/dev/null; date -u +%FT%TZ; } > "$OUT/machine.txt"
pids=()
for op in AsyncIOBuilder CPUAdamBuilder FusedAdamBuilder; do
  python3 -c "from deepspeed.ops.op_builder import $op as B; B().load(verbose=False)" \
    >"/tmp/jit-$op.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { tail -20 /tmp/jit-*.log; exit 1; }; done
echo "JIT builds: $(( $(date +%s) - t0 )) s"
skips=aio
[ "${DS:-0}" = 1 ] || skips+=,deepspeed
[ "${GEMM:-0}" = 1 ] || skips+=,gemm
nvme=()
if [ "${NVME:-0}" = 1 ]; then
  skips=${skips#aio}
  mkdir -p /var/tmp/tierlab-cal
  nvme=(--nvme-path /var/tmp/tierlab-cal --sweep aio_file_size=512MiB --sweep aio_block_sizes=1MiB
        --sweep aio_queue_depths=8,32 --sweep aio_parallelism=1)
fi
skips=${CAL_SKIP:-${skips#,}}
skip=()
[ -n "$skips" ] && skip=(--skip "$skips")
[ "${DS:-0}" = 1 ] && skip+=(--host-costs)     # DeepSpeed's host costs are measured only when asked
mkdir -p /tmp/cal/systems
[ "${CALIBRATE:-1}" = 1 ] && { python3 -m tierlab.cli calibrate --name "$NAME" --hardware "$BASE" "${skip[@]}" "${nvme[@]}" \
  --out "/tmp/cal/systems/$NAME.yaml" --raw "$OUT/$NAME-raw.json" --sweep repeats=2 \
  ${CAL_SWEEP:+--sweep "$CAL_SWEEP"} \
  >"$OUT/calibrate.log" 2>&1 || { tail -30 "$OUT/calibrate.log"; exit 1; }
tail -n 3 "$OUT/calibrate.log"; }
rm -rf /var/tmp/tierlab-cal
left=$(( ${BUDGET_S:-420} - ($(date +%s) - t0) ))
echo "calibrated at $(( $(date +%s) - t0 )) s; cases get ${left} s"
# shellcheck disable=SC2086
python3 lab/scripts/gpu_validate.py --out "$OUT" --hardware "$BASE" --budget "$left" \
  --case-timeout "${CASE_TIMEOUT:-120}" ${STEPS:+--steps $STEPS} ${PLAN:+--plan $PLAN} --only $CASES
grep -E "^(==|--)|steady step" "$OUT/validate-session.log" | tail -40 || true
echo "total: $(( $(date +%s) - t0 )) s"
