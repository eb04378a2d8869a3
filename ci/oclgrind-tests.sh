#!/usr/bin/env bash
# Run the device tests on Oclgrind, the OpenCL device simulator, with its checkers on:
# out-of-bounds and invalid memory accesses (always on) and data races (OCLGRIND_DATA_RACES).
# Fails on a test failure AND on any Oclgrind report: a kernel error (invalid read/write, data
# race, uninitialised value, work-group divergence) or any "Oclgrind - " / "Oclgrind: " message.
# API-call checking (OCLGRIND_CHECK_API=1, `oclgrind --check-api`) is off by default: pyopencl's
# own probes (e.g. clCreateKernel for attribute look-ups on a Program) trip it; set it to 1 to
# see those reports (unknown-info-parameter queries are then filtered as benign).
#
#   bash ci/oclgrind-tests.sh                 # the tests marked `oclgrind` (tests/test_sanitize.py)
#   bash ci/oclgrind-tests.sh tests/test_gemm.py -k "NN and f32"
#   tox -e oclgrind [-- PYTEST ARGS]
#
# Oclgrind simulates every work-item (hundreds of times slower than PoCL): the whole non-slow
# suite took 14 minutes in November 2026 and grows. So the default is the tests marked
# `@pytest.mark.oclgrind` (small, representative kernel tests); while no test carries that mark
# it is `-m "not slow and not torch and not threads"` (`threads`: Oclgrind 21.10 aborts when
# several host threads enqueue kernels at once).
#
# How Oclgrind becomes visible (docs/platforms.md, "Oclgrind"): it ships an ICD library,
# liboclgrind-rt-icd.so (Debian: /usr/lib/oclgrind/, package `oclgrind`). We make a temporary
# vendors directory holding the system's ICDs plus one `oclgrind.icd` naming that library and
# point the ocl-icd loader at it with OCL_ICD_VENDORS (pyopencl's wheels bundle ocl-icd). Other
# devices stay visible, so tests that deliberately use the default device still run (on PoCL);
# tests using the `device` fixture (PYRNN_CL_TEST) or the default device (PYRNN_CL_DEVICE) run
# on Oclgrind. OCLGRIND_UNINITIALIZED=1 (uses of uninitialised values) is not usable with
# Oclgrind 21.10: its plugin stops at LLVM's `freeze` instruction ("OCLGRIND FATAL ERROR ...
# Unsupported instruction: freeze"), which aborts those kernels (this script reports it).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

lib=${OCLGRIND_ICD_LIB:-}
if [ -z "$lib" ]; then
  for candidate in /usr/lib/oclgrind/liboclgrind-rt-icd.so /usr/lib64/oclgrind/liboclgrind-rt-icd.so \
                   /usr/local/lib/liboclgrind-rt-icd.so /usr/lib/x86_64-linux-gnu/liboclgrind-rt-icd.so; do
    if [ -e "$candidate" ]; then lib=$candidate; break; fi
  done
fi
if [ -z "$lib" ]; then
  echo "oclgrind-tests: liboclgrind-rt-icd.so not found; install Oclgrind (apt-get install oclgrind)" \
       "or set OCLGRIND_ICD_LIB=/path/to/liboclgrind-rt-icd.so" >&2
  exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/pyrnn-cl-oclgrind.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/vendors"
given=${OCL_ICD_VENDORS:-/etc/OpenCL/vendors}   # a directory, an .icd file or a driver .so
if [ -d "$given" ]; then
  for icd in "$given"/*.icd; do
    if [ -e "$icd" ]; then cp "$icd" "$work/vendors/"; fi
  done
elif [ -f "$given" ]; then
  case "$given" in
    *.icd) cp "$given" "$work/vendors/" ;;
    *) echo "$given" > "$work/vendors/given.icd" ;;
  esac
fi
echo "$lib" > "$work/vendors/oclgrind.icd"

export OCL_ICD_VENDORS="$work/vendors"
export PYRNN_CL_DEVICE=oclgrind PYRNN_CL_TEST=oclgrind
export OCLGRIND_CHECK_API=${OCLGRIND_CHECK_API:-0}
export OCLGRIND_DATA_RACES=${OCLGRIND_DATA_RACES:-1}
export OCLGRIND_LOG="$work/kernel-errors.log"     # kernel errors (OOB, races, ...) go here
export PYRNN_CL_REQUIRE_DEVICE=${PYRNN_CL_REQUIRE_DEVICE:-1}
export PYRNN_CL_CACHE_DIR=${PYRNN_CL_CACHE_DIR:-$work/cache}

if [ $# -eq 0 ]; then
  if "$PYTHON" -m pytest -q --collect-only -m oclgrind tests >/dev/null 2>&1; then
    set -- tests -m oclgrind
  else  # exit status 5: no test is marked `oclgrind` yet
    set -- tests -m "not slow and not torch and not threads"
  fi
  echo "oclgrind-tests: pytest $*"
fi
# Oclgrind simulates on one core per process: with pytest-xdist the tests run in a process per
# core (OCLGRIND_WORKERS, default auto; 0 = one process), each writing its kernel error log to
# $OCLGRIND_LOG.<worker> (tests/conftest.py), all of which are read below.
workers=${OCLGRIND_WORKERS:-auto}
if [ "$workers" != 0 ] && "$PYTHON" -c "import xdist" 2>/dev/null; then
  set -- "$@" -n "$workers"
fi
status=0
# API errors are printed on stderr: --capture=sys lets them through pytest, tee keeps a copy.
"$PYTHON" -m pytest --capture=sys "$@" 2> >(tee "$work/stderr.log" >&2) || status=$?
wait  # for tee
cat "$OCLGRIND_LOG".* >> "$OCLGRIND_LOG" 2>/dev/null || true   # the workers' logs, if any

fail=0
# Kernel errors go to $OCLGRIND_LOG; stderr is scanned too (kernel errors end up there when the
# log file cannot be used, API errors and "Oclgrind: ..." messages always do).
if "$PYTHON" - "$OCLGRIND_LOG" "$work/stderr.log" <<'PY'
import os, re, sys
KERNEL = re.compile(r"^(Invalid (read|write)\b.*|.*[Dd]ata race at .*|Uninitiali[sz]ed .*|"
                    r"Work-group divergence.*|Index \(\d+\) exceeds static array size.*|"
                    r".*Oclgrind: .*|OCLGRIND FATAL ERROR.*)$", re.M)
texts = [open(p, errors="replace").read() if os.path.exists(p) else "" for p in sys.argv[1:]]
log, err = texts
kernel = KERNEL.findall(log) + KERNEL.findall(err)
# API errors ("Oclgrind - OpenCL runtime error detected" + tab-indented details). With
# OCLGRIND_CHECK_API=1, info queries for parameters an OpenCL 1.2 device does not know (pyopencl
# and DeviceInfo probe them and handle the error) are benign; every other report is a bug.
blocks = re.findall(r"Oclgrind - [^\n]*\n((?:\t.*\n?)*)", err)
# Likewise pyopencl's attribute look-ups on a Program (hasattr(prog, "_source")) try
# clCreateKernel with that name and handle the failure.
bad = [b for b in blocks
       if not (re.search(r"Function: clGet\w*Info\b", b)
               and "CL_INVALID_VALUE" in b and "'param_name'" in b)
       and not (re.search(r"Function: clCreateKernel\b", b)
                and re.search(r"Kernel '_\w*' not found", b))]
print(f"oclgrind-tests: {len(kernel)} kernel error reports, {len(blocks)} API error reports "
      f"({len(blocks) - len(bad)} benign probes of pyopencl)")
for line in [k[0] for k in kernel][:20]:
    print("  kernel: " + line)
if log.strip():     # (also what no pattern above knows: it fails the run too)
    print("==== Oclgrind kernel error log (first 200 lines):")
    print("\n".join(log.splitlines()[:200]))
for b in bad[:20]:
    print("---\n" + b.rstrip())
sys.exit(1 if kernel or bad or log.strip() else 0)
PY
then :; else fail=1; fi

if [ "$fail" -ne 0 ] && [ "$status" -eq 0 ]; then status=1; fi
exit "$status"
