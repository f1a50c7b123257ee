#!/usr/bin/env bash
# Issue 33 item 7: real PyTorch FSDP2 CPU-offload runs (tierlab run --engine fsdp2-offload) and the
# host micro-benchmark the simulator's FSDP2 schedule needs (torch's CPU AdamW step, with
# provenance), on one GPU host. Run from the repository root on the GPU host, after
#   source .gpuhost/install.sh && python3 -m pip install -q --no-index --no-deps \
#     --no-build-isolation -e . && export TIERLAB_PROFILES=$PWD/lab/profiles
#   OUT=... bash lab/scripts/gpu_fsdp2.sh
# Time: ~30 s of AdamW benchmark, then the cases in order of importance, each cut at CASE_TIMEOUT
# (110 s), none started past BUDGET_S (250 s): about 6 min in all. No DeepSpeed op is built (FSDP2 needs none).
# ONLY="name ..." runs only those cases (a second command on another machine).
# Leaves in $OUT (at most 8 files come back): machine.txt, adamw.json (+ adamw.log), session.log
# and fsdp2.tar.gz (every measurement folder, re-packed after each case).
set -o pipefail
: "${OUT:?set OUT to the output folder}"
export TIERLAB_PROFILES=${TIERLAB_PROFILES:-$PWD/lab/profiles}
HW=${HW:-h200-host}
t0=$(date +%s)
{ hostname; nvidia-smi -L 2>/dev/null; nproc; free -b | head -2; date -u +%FT%TZ
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda,
  "transformers", transformers.__version__)'; } > "$OUT/machine.txt" 2>&1
python3 -m tierlab.runner.fsdp2_bench --out "$OUT/adamw.json" --models tinyllama-1.1b --repeats 3 \
  > "$OUT/adamw.log" 2>&1 || tail -20 "$OUT/adamw.log"
cat "$OUT/adamw.log" | tail -4
mkdir -p /tmp/fsdp2-runs
# name | tierlab run options (the DeepSpeed cases' names of lab/plan.yaml, with f2off / f2)
CASES=(
  "f-tinyllama-f2off|--engine fsdp2-offload --model tinyllama-1.1b --micro-batch 4 --seq 1024"
  "f-tinyllama-f2off-mb8|--engine fsdp2-offload --model tinyllama-1.1b --micro-batch 8 --seq 1024"
  "f-tinyllama-f2off-bd|--engine fsdp2-offload --model tinyllama-1.1b --micro-batch 4 --seq 1024 --breakdown"
  "f-0.5b-f2off-s2048|--engine fsdp2-offload --model llama-0.5b --micro-batch 2 --seq 2048"
  "f-tinyllama-f2|--engine fsdp2 --model tinyllama-1.1b --micro-batch 4 --seq 1024"
  "f-tinyllama-f2off-8g|--engine fsdp2-offload --model tinyllama-1.1b --micro-batch 4 --seq 1024 --gpu-mem-cap 8GiB"
)
for c in "${CASES[@]}"; do
  name=${c%%|*}; opts=${c#*|}
  [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]] && continue
  el=$(( $(date +%s) - t0 ))
  [ "$el" -gt "${BUDGET_S:-250}" ] && { echo "-- $name: skipped, budget spent at ${el} s" | tee -a "$OUT/session.log"; continue; }
  echo "== $name ($opts) at ${el} s" | tee -a "$OUT/session.log"
  # shellcheck disable=SC2086
  timeout -s INT "${CASE_TIMEOUT:-110}" python3 -m tierlab.cli run $opts --hardware "$HW" \
    --ds-config no-offload --steps "${STEPS:-8}" --warmup-steps 2 --out "/tmp/fsdp2-runs/$name" \
    --no-progress --overwrite >> "$OUT/session.log" 2>&1
  echo "-- $name: exit $?" | tee -a "$OUT/session.log"
  grep -E "^(ok|failed|interrupted)|steady step" "$OUT/session.log" | tail -2
  tar -czf "$OUT/fsdp2.tar.gz" -C /tmp fsdp2-runs
done
echo "total: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/session.log"
