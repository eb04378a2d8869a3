#!/usr/bin/env bash
# Runs pyrnn_cl on a lent NVIDIA GPU machine (the developers' device tool; never CI). That
# machine has CUDA, PyTorch with cuDNN and NVIDIA's driver, but no pyopencl and no ICD file:
# pyopencl and its pure-Python needs travel as wheels in .whl/ (docs/platforms.md, "NVIDIA's
# OpenCL"), and the ICD file is written here, naming the driver's libnvidia-opencl.so.1
# wherever the image mounts it.
#
#   bash tools/gpu_session.sh STAGE...     (stages run in order; each logs to $OUT/STAGE.log)
#
# Stages: probe (driver, OpenCL platforms, `pyrnn-cl devices`), selftest, tests (the suite on
# the NVIDIA device, "not slow"), bench (GPU tier against cuDNN, JSON to $OUT), quick (three
# GPU-tier configurations), half (float16 storage against float32 in the same turns, small-batch
# GPU shapes: the 16-bit packs of REC_PACK16_BYTES), tune (pyrnn-cl tune on the GPU; the entry is copied to $OUT),
# benchtuned (the GPU tier again, tuned entry in use), times (device time per kernel,
# tools/kernel_times.py), script (any Python file: SCRIPT="path args", e.g.
# SCRIPT="tools/bridge_prepare_ab.py lstm:256x256x32x50 lstm:128x64x8x100" for the torch
# bridge with and without its prepared backward, not yet measured on a GPU), threadload
# (tests/test_threads.py again and again while the suite runs beside it: the load under which
# it crashed on NVIDIA; THREADLOAD_RUNS, THREADLOAD_VARIANTS: words, "none" for the library as
# it is, e.g. "none buildx", THREADLOAD_TIMEOUT), cmd (any shell
# command: CMD="...", CMD_TIMEOUT, 500 s). A tuning entry in
# .gpu/tuning/ (carried) is installed first.
# Environment: TEST_ARGS (pytest paths and arguments, default tests), TEST_MARK ("not slow"),
# TEST_WORKERS (8),
# TEST_TIMEOUT (420 s); BENCH_CONFIGS (comma list, default the tier), BENCH_TIMEOUT (540 s),
# BENCH_ARGS (more `pyrnn-cl bench` arguments, e.g. "--bridge": the torch bridge beside cuDNN);
# TUNE_BUDGET (240 s), TUNE_SLACK (120 s over the budget), TUNE_CONFIGS; TIMES_SHAPES;
# SCRIPT, SCRIPT_TIMEOUT (500 s); TAIL (log lines echoed per stage, 25); LIMIT_<stage> (seconds,
# any stage's time limit, so that a session sizes its stages to its device time).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
lib=$(ldconfig -p | awk '/libnvidia-opencl\.so\.1/ {print $NF; exit}')
[ -n "$lib" ] || lib=$(find / -xdev -name 'libnvidia-opencl.so.1' 2>/dev/null | head -1)
[ -n "$lib" ] || lib=$(find /usr/local/nvidia /usr/lib* -name 'libnvidia-opencl.so*' 2>/dev/null | head -1)
if [ -z "$lib" ]; then
  echo "no libnvidia-opencl on this machine"; exit 3
fi
mkdir -p /tmp/icd && echo "$lib" > /tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd
export PYRNN_CL_DEVICE=${PYRNN_CL_DEVICE:-nvidia}
# a tuning entry brought along (.gpu/tuning/*.json, from an earlier machine's `tune` stage)
if ls .gpu/tuning/*.json >/dev/null 2>&1; then
  mkdir -p ~/.cache/pyrnn_cl/tuning && cp .gpu/tuning/*.json ~/.cache/pyrnn_cl/tuning/
fi

stage() {  # stage NAME TIMEOUT COMMAND...  (LIMIT_<NAME>, e.g. LIMIT_half=90, overrides TIMEOUT)
  local name=$1 limit=$2 override="LIMIT_$1"; shift 2
  limit=${!override:-$limit}
  echo "=== $name ($(date +%T), limit ${limit}s)"
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "=== $name rc=$rc"
  tail -n "${TAIL:-25}" "$OUT/$name.log"
}

for s in "$@"; do
  case $s in
    probe)
      stage probe 120 bash -c 'echo lib='"$lib"'; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv;
        nproc; lscpu | grep "Model name"; python3 -c "import torch; print(torch.__version__, torch.backends.cudnn.version())";
        python3 -m pyrnn_cl devices' ;;
    selftest)
      stage selftest 150 python3 -m pyrnn_cl selftest --device nvidia ;;
    tests)
      # shellcheck disable=SC2086
      PYRNN_CL_TEST=nvidia stage tests "${TEST_TIMEOUT:-420}" python3 -m pytest -q -p no:cacheprovider \
        ${TEST_ARGS:-tests} -m "${TEST_MARK:-not slow}" -n "${TEST_WORKERS:-8}" --maxfail=50 ;;
    bench)
      # shellcheck disable=SC2086
      stage bench "${BENCH_TIMEOUT:-540}" python3 -m pyrnn_cl bench --tier gpu --torch-device cuda --no-progress \
        ${BENCH_CONFIGS:+--configs $BENCH_CONFIGS} --repeat 5 --json "$OUT/bench.json" ${BENCH_ARGS:-} ;;
    quick)
      stage quick 150 python3 -m pyrnn_cl bench --torch-device cuda --no-progress \
        --configs gpu-lstm-512x16,gpu-lstm-1024x32,gpu-gru-512x32 --json "$OUT/quick.json" ;;
    half)
      stage half 300 python3 -m pyrnn_cl bench --dtype float16 --no-torch --no-progress \
        --configs gpu-lstm-512x16,gpu-lstm-1024x32,gpu-inf-1024x1,gpu-gru-512x32 --repeat 5 \
        --json "$OUT/half.json" ;;
    tune)
      stage tune $(( ${TUNE_BUDGET:-240} + ${TUNE_SLACK:-120} )) python3 -m pyrnn_cl tune --no-progress \
        --budget "${TUNE_BUDGET:-240}" ${TUNE_CONFIGS:+--configs $TUNE_CONFIGS}
      cp ~/.cache/pyrnn_cl/tuning/*.json "$OUT/" 2>/dev/null ;;
    benchtuned)
      stage benchtuned 540 python3 -m pyrnn_cl bench --tier gpu --torch-device cuda --no-progress \
        ${BENCH_CONFIGS:+--configs $BENCH_CONFIGS} --repeat 5 --json "$OUT/benchtuned.json" ;;
    times)
      stage times 300 python3 tools/kernel_times.py --repeat 5 \
        ${TIMES_SHAPES:-lstm:512x512x16x25 lstm:1024x1024x32x25 lstm:1024x1x32x25 gru:512x512x32x1} ;;
    threadload)  # tests/test_threads.py in fresh processes while the suite runs beside it
      read -ra variants <<< "${THREADLOAD_VARIANTS:-}"     # (default: none, the library as it is)
      [ ${#variants[@]} -gt 0 ] || variants=("")
      PYRNN_CL_TEST=nvidia stage threadload "${THREADLOAD_TIMEOUT:-300}" bash tools/thread_stress.sh \
        --beside-suite "${THREADLOAD_RUNS:-15}" "${variants[@]}" ;;
    cmd)      # any shell command with the set-up above: CMD="..."
      stage cmd "${CMD_TIMEOUT:-500}" bash -c "$CMD" ;;
    script)   # any Python file with the set-up above: SCRIPT="path args"
      # shellcheck disable=SC2086
      stage script "${SCRIPT_TIMEOUT:-500}" python3 $SCRIPT ;;
    *) echo "unknown stage $s"; exit 2 ;;
  esac
done
