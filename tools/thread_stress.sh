#!/usr/bin/env bash
# Runs tests/test_threads.py many times in fresh processes under a load, once per variant of
# tools/thread_diag.py, and counts the runs that crash (a developer's tool: the shared-queue
# thread test crashed with a segmentation fault in a thread of NVIDIA's OpenCL driver while the
# rest of the suite ran beside it, never alone; docs/benchmarks.md, "The H200 after the CPU
# sessions").
#
#   bash tools/thread_stress.sh [--beside-suite] [RUNS] [VARIANT ...]
#
# RUNS: runs per variant (default 10), the variants taking turns run by run; VARIANT: "" or none
# (the library as it is), build, kernel, reads, buildx, serial, or comma lists (default: "" build
# kernel reads).
# --beside-suite: the load is the test suite (not slow, tests/test_threads.py left out, on the
# device of PYRNN_CL_TEST) in the background, and the runs stop when it ends; otherwise LOAD
# busy processes (default: the number of CPUs).
# Environment: LOAD, SUITE_WORKERS (test processes of the suite, default CPUs - 2),
# CLEAR_CACHE=1 (delete pyopencl's invoker cache, ~/.cache/pytools, before each run), OUT (a
# folder: the whole output of every crashed run goes to $OUT/crashes.log).
set -u
cd "$(dirname "$0")/.."
beside=0
if [ "${1:-}" = --beside-suite ]; then beside=1; shift; fi
runs=${1:-10}; shift || true
variants=("$@"); [ ${#variants[@]} -gt 0 ] || variants=("" build kernel reads)
out_dir=${OUT:-/tmp}
log=$out_dir/crashes.log
pids=()
if [ $beside = 1 ]; then
  workers=${SUITE_WORKERS:-$(( $(nproc) > 3 ? $(nproc) - 2 : 1 ))}
  python3 -m pytest -q -p no:cacheprovider tests -m "not slow" -n "$workers" \
    --deselect tests/test_threads.py > "$out_dir/suite_beside.log" 2>&1 &
  suite=$!; pids+=($suite)
  sleep 10                       # the suite's processes started and building
  load="the suite ($workers processes)"
else
  load=${LOAD:-$(nproc)}
  for _ in $(seq "$load"); do python3 -c "while True: pass" & pids+=($!); done
  load="$load busy processes"
fi
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
export PYTHONPATH="$PWD/tools${PYTHONPATH:+:$PYTHONPATH}"
declare -A crashed failed done_
for i in $(seq "$runs"); do
  for v in "${variants[@]}"; do
    [ $beside = 1 ] && ! kill -0 "$suite" 2>/dev/null && break 2
    [ "${CLEAR_CACHE:-0}" = 1 ] && rm -rf ~/.cache/pytools
    out=$(THREAD_DIAG="${v#none}" timeout 180 python3 -X faulthandler -m pytest -q -p no:cacheprovider \
          -p no:xdist -p thread_diag tests/test_threads.py 2>&1); rc=$?
    k=${v:-none}; done_[$k]=$(( ${done_[$k]:-0} + 1 ))
    if grep -q "Fatal Python error" <<<"$out" || [ $rc -ge 124 ]; then
      crashed[$k]=$(( ${crashed[$k]:-0} + 1 ))
      echo "--- variant '$k' run $i crashed or hung (status $rc):"
      grep -A12 "Fatal Python error" <<<"$out" | head -40
      { echo "##### variant '$k' run $i, status $rc"; echo "$out"; } >> "$log"
    elif [ $rc -ne 0 ]; then failed[$k]=$(( ${failed[$k]:-0} + 1 )); tail -3 <<<"$out"; fi
  done
done
for v in "${variants[@]}"; do
  k=${v:-none}
  echo "variant '$k': ${crashed[$k]:-0} of ${done_[$k]:-0} runs crashed or hung," \
       "${failed[$k]:-0} failed otherwise (load: $load)"
done
if [ $beside = 1 ]; then
  kill -0 "$suite" 2>/dev/null && echo "(the suite was still running)" || tail -3 "$out_dir/suite_beside.log"
fi
