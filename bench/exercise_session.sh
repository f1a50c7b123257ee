#!/usr/bin/env bash
# The exercise (issue 29) on one GPU host: `tierlab compare` at an 8 GiB GPU cap, each variant
# in its own process, the no-offload OOM kept as a row, plus an uncapped no-offload baseline.
#   PART=tiny: TinyLlama-1.1B, micro-batch 4, seq 1024: no offload (capped, uncapped), ZeRO-2 CPU,
#              ZeRO-3 CPU, ZeRO-3 NVMe
#   PART=3b:   Llama-3B (tied, vocab 128256), micro-batch 2, seq 1024: no offload (capped,
#              uncapped), ZeRO-2 CPU, ZeRO-3 CPU (its NVMe optimizer swap, 3.2e9 x 16 B = 51 GB,
#              does not fit the host's 64 GB disk beside the tree)
# Run from the repository root on the host with .gpuhost/ in the tree (../shared/gpu-host/prepare.sh):
#   OUT=... PART=tiny BUDGET_S=540 bash bench/exercise_session.sh
# Leaves in $OUT: session.log, machine.txt, $PART.tar.gz (compare.{csv,json,png} and every
# measurement directory, re-packed every 20 s so a cut-short command still returns data).
# The table with predictions: .venv/bin/python bench/exercise_table.py (from the committed runs).
set -u
: "${OUT:?set OUT}" "${PART:?set PART to tiny or 3b}"
export TIERLAB_PROFILES=${TIERLAB_PROFILES:-$PWD/lab/profiles}   # h200-host is a lab profile
BUDGET_S=${BUDGET_S:-540}
SWAP=${SWAP:-/var/tmp/tierlab-swap}
WORK=/tmp/exercise/$PART
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
mkdir -p "$OUT" "$WORK" "$SWAP"
exec > >(tee -a "$OUT/session.log") 2>&1
{ hostname; nvidia-smi -L; date -u +%FT%TZ; nproc; free -g; df -h /var/tmp; } > "$OUT/machine.txt" 2>&1
source .gpuhost/install.sh
python3 -c 'import tierlab' 2>/dev/null || \
  python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1 || \
  { echo "pip install -e . failed"; exit 1; }
python3 -c 'import torch, deepspeed, transformers; print("torch", torch.__version__, "deepspeed", deepspeed.__version__, "transformers", transformers.__version__, torch.cuda.get_device_name(0))'
pids=()
for op in AsyncIOBuilder CPUAdamBuilder FusedAdamBuilder; do
  python3 -c "from deepspeed.ops.op_builder import $op as B; B().load(verbose=False)" > "$WORK/jit-$op.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { tail -5 "$WORK"/jit-*.log; }; done
echo "JIT done at $(elapsed) s"
pack() { tar -czf "$OUT/.p.tgz" -C "$WORK" compare 2>/dev/null && mv -f "$OUT/.p.tgz" "$OUT/$PART.tar.gz"; }
( while sleep 20; do pack; done ) &
PACKER=$!
trap 'kill $PACKER 2>/dev/null; pack; rm -rf "$SWAP"' EXIT
if [ "$PART" = tiny ]; then
  ARGS=(-m tinyllama-1.1b --micro-batch 4 --seq 1024 --steps 8 --warmup-steps 2)
else
  ARGS=(-m llama-3b --micro-batch 2 --seq 1024 --steps 6 --warmup-steps 2
        --variants no-offload --variants zero2-cpu --variants zero3-cpu)
fi
LEFT=$(( BUDGET_S - $(elapsed) ))
echo "== compare ($PART) at $(elapsed) s, budget $LEFT s"
python3 -m tierlab.cli compare -H h200-host "${ARGS[@]}" --gpu-mem-cap 8GiB --uncapped-baseline \
  --swap-dir "$SWAP" --timeout 240 --budget "$LEFT" --out "$WORK/compare"
echo "== done at $(elapsed) s"
