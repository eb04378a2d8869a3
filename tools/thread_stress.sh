#!/usr/bin/env bash
# Runs tests/test_threads.py many times in fresh processes under a CPU load, once per variant of
# tools/thread_diag.py, and counts the runs that crash (a developer's tool: the shared-queue
# thread test crashed twice with a segmentation fault under the load of a full test run on
# NVIDIA's OpenCL, never alone; docs/benchmarks.md, "The H100 after the CPU sessions").
#
#   bash tools/thread_stress.sh [RUNS] [VARIANT ...]     (default 10 runs; variants: "" = none,
#                                                          build, kernel, reads, or comma lists)
# Environment: LOAD (busy processes beside the test, default: the number of CPUs), CLEAR_CACHE=1
# (delete pyopencl's invoker cache, ~/.cache/pytools, before each run).
set -u
cd "$(dirname "$0")/.."
runs=${1:-10}; shift || true
variants=("$@"); [ ${#variants[@]} -gt 0 ] || variants=("" build kernel reads)
load=${LOAD:-$(nproc)}
pids=()
for _ in $(seq "$load"); do python3 -c "while True: pass" & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
export PYTHONPATH="$PWD/tools${PYTHONPATH:+:$PYTHONPATH}"
for v in "${variants[@]}"; do
  crashed=0; failed=0
  for i in $(seq "$runs"); do
    [ "${CLEAR_CACHE:-0}" = 1 ] && rm -rf ~/.cache/pytools
    out=$(THREAD_DIAG="$v" python3 -X faulthandler -m pytest -q -p no:cacheprovider -p no:xdist \
          -p thread_diag tests/test_threads.py 2>&1); rc=$?
    if grep -q "Fatal Python error" <<<"$out" || [ $rc -ge 128 ]; then crashed=$((crashed + 1))
      echo "--- variant '${v:-none}' run $i crashed:"; grep -A12 "Fatal Python error" <<<"$out" | head -40
    elif [ $rc -ne 0 ]; then failed=$((failed + 1)); tail -3 <<<"$out"; fi
  done
  echo "variant '${v:-none}': $crashed of $runs runs crashed, $failed failed otherwise (load $load)"
done
