#!/usr/bin/env bash
# Calibrate the H200 host into a profile: run from the project's root on the device machine, with
# .gpuhost/ (../shared/gpu-host/prepare.sh) in the tree. About 2.5 minutes on a fresh host: ~1 min
# JIT-building DeepSpeed's async_io and cpu_adam ops (in parallel here), ~1.5 min measuring.
# Leaves in $OUT (3 files): h200-host.yaml (system), h200-host-raw.json (every point),
# h200-host-profiles.tar (hardware/{systems,gpus,cpus,nvme}/h200-host.yaml: `tar -xf ... -C profiles/`).
set -eo pipefail
export TIERLAB_PROFILES=${TIERLAB_PROFILES:-$PWD/lab/profiles}   # the test machines, by name
: "${OUT:?set OUT to the output folder}"
[ -f .gpuhost/install.sh ] && source .gpuhost/install.sh
python3 -c 'import tierlab' 2>/dev/null || pip install -q --no-index --no-deps --no-build-isolation -e . >/tmp/tierlab-pip.log 2>&1
t0=$(date +%s)
# the first load of each op JIT-compiles (async_io ~55 s, cpu_adam ~40 s): build both at once
python3 -c 'from deepspeed.ops.op_builder import AsyncIOBuilder as B; B().load(verbose=False)' >/tmp/jit-aio.log 2>&1 &
a=$!
python3 -c 'from deepspeed.ops.op_builder import CPUAdamBuilder as B; B().load(verbose=False)' >/tmp/jit-adam.log 2>&1 &
b=$!
wait $a || { tail -20 /tmp/jit-aio.log; exit 1; }
wait $b || { tail -20 /tmp/jit-adam.log; exit 1; }
echo "JIT builds: $(( $(date +%s) - t0 )) s"
mkdir -p /var/tmp/tierlab-cal
# sweep: PCIe 64 KiB-1 GiB (8 sizes); GEMMs of 7 model profiles x 512/2048/8192 tokens, bf16+fp16;
# DeepSpeedCPUAdam and torch Adam at 1/2/4/8/16 threads on 64 Mi params; aio on a 512 MiB file:
# block 128K/1M/8M x qd 4/32/128 x intra_op 1/4/16 (27 settings, write + read, 2 reps each).
NAME=${NAME:-h200-host}
BASE=${BASE:-h200-host}
python3 -m tierlab.cli calibrate --name "$NAME" --hardware "$BASE" --nvme-path /var/tmp/tierlab-cal \
  --out "$OUT/$NAME.yaml" --raw "$OUT/$NAME-raw.json" \
  --sweep repeats=2 --sweep aio_file_size=512MiB --sweep aio_block_sizes=128KiB,1MiB,8MiB \
  --sweep aio_queue_depths=4,32,128 --sweep aio_parallelism=1,4,16
echo "total: $(( $(date +%s) - t0 )) s"
python3 -c "import json; d=json.load(open('$OUT/$NAME-raw.json')); print('elapsed per benchmark (s):', d['elapsed_s'])"
# one tar laid out as profiles/hardware/, then drop the loose part files (fewer files come back)
stage=$(mktemp -d)
mkdir -p "$stage/hardware/systems"
cp "$OUT/$NAME.yaml" "$stage/hardware/systems/"
for part in gpus cpus nvme; do
  if [ -f "$OUT/$part/$NAME.yaml" ]; then
    mkdir -p "$stage/hardware/$part" && mv "$OUT/$part/$NAME.yaml" "$stage/hardware/$part/"
    rmdir "$OUT/$part" 2>/dev/null || true
  fi
done
tar -C "$stage" -cf "$OUT/$NAME-profiles.tar" hardware
tar -tf "$OUT/$NAME-profiles.tar"
cat "$OUT/$NAME.yaml"
rm -rf "$stage" /var/tmp/tierlab-cal
