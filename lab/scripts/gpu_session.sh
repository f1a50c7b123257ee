#!/usr/bin/env bash
# One H200-host session for issue 4: `tierlab compare` for TinyLlama-1.1B at an 8 GiB GPU cap
# (micro-batch 4, seq 1024, 8 steps incl. 2 warm-up) plus an uncapped no-offload baseline.
#
# Run from the repository root on the host, after:
#   source .gpuhost/install.sh && pip install --no-index --no-deps --no-build-isolation -e .
#   bash lab/scripts/gpu_session.sh
# Writes under $OUT (at most 8 files come back): session.log, measurements.tar.gz (every
# measurement directory, re-packed every 20 s so a cut-short session still returns data),
# compare.csv, compare.json, compare.png.
# Time: ~1.5 min of JIT builds (three in parallel) + the variants inside BUDGET_S (default
# 480 s from the script's start); the last variant (ZeRO-3 NVMe, ~17.6 GB of optimizer swap per
# step) gets whatever is left and keeps its finished steps if cut short.
set -u
export TIERLAB_PROFILES=${TIERLAB_PROFILES:-$PWD/lab/profiles}   # the test machines, by name
: "${OUT:?set OUT to the output directory}"
BUDGET_S=${BUDGET_S:-480}
SWAP=${SWAP:-/var/tmp/tierlab-swap}
WORK=${WORK:-/tmp/tierlab-gpu-session}
T0=$(date +%s)
PY=${PYTHON:-python}
rm -rf "$WORK" && mkdir -p "$WORK" "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1

elapsed() { echo $(( $(date +%s) - T0 )); }
pack() { tar -czf "$OUT/.measurements.tgz" -C "$WORK" . 2>/dev/null \
         && mv -f "$OUT/.measurements.tgz" "$OUT/measurements.tar.gz"; }

echo "== host ($(date -u +%FT%TZ))"
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv || true
nproc; free -g; df -h /var/tmp /tmp
echo "TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-unset}"
$PY -c 'import torch, deepspeed, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "deepspeed", deepspeed.__version__, "transformers", transformers.__version__, "gpu", torch.cuda.get_device_name(0))'

( while sleep 20; do pack; done ) &
PACKER=$!
trap 'kill $PACKER 2>/dev/null; pack' EXIT

echo "== JIT builds (parallel) at $(elapsed) s"
pids=()
for op in AsyncIOBuilder CPUAdamBuilder FusedAdamBuilder; do
  $PY -c "import time; from deepspeed.ops.op_builder import $op as B; t=time.time(); B().load(); print('$op', round(time.time()-t, 1), 's')" \
    > "$WORK/jit-$op.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || echo "a JIT build failed (see jit-*.log)"; done
tail -n 1 "$WORK"/jit-*.log
echo "JIT done at $(elapsed) s"

COMMON=(-m "${MODEL:-tinyllama-1.1b}" --micro-batch "${MICRO_BATCH:-4}" --seq "${SEQ:-1024}" --swap-dir "$SWAP")
echo "== preflight (zero3-nvme at 8 GiB) at $(elapsed) s"
$PY -m tierlab.cli preflight "${COMMON[@]}" -c zero3-nvme --gpu-mem-cap 8GiB || true
$PY -m tierlab.cli preflight "${COMMON[@]}" -c no-offload --gpu-mem-cap 8GiB || true

LEFT=$(( BUDGET_S - $(elapsed) ))
echo "== compare at $(elapsed) s, budget ${LEFT} s"
$PY -m tierlab.cli compare "${COMMON[@]}" --steps "${STEPS:-8}" --warmup-steps 2 --gpu-mem-cap 8GiB \
    --uncapped-baseline --timeout 200 --budget "$LEFT" --out "$WORK/compare"
cp -f "$WORK"/compare/compare.{csv,json,png} "$OUT/" 2>/dev/null || true
for d in "$WORK"/compare/*/; do
  echo "-- $(basename "$d")"; head -c 600 "$d/summary.json" 2>/dev/null; echo
done
rm -rf "$SWAP/zero_stage_3"
echo "== done at $(elapsed) s"
