#!/usr/bin/env bash
# Install pyrnn_cl and an OpenCL runtime into the active Python environment (a virtualenv if one
# is active, else the interpreter named by $PYTHON, default python3). Safe to re-run.
#
# 1. OpenCL runtime. With apt-get and root (or password-less sudo): Debian's PoCL CPU runtime,
#    the ICD loader, clinfo and Oclgrind (`pocl-opencl-icd ocl-icd-opencl-dev clinfo oclgrind`);
#    apt runs only for packages that are missing. Without Debian's PoCL: pip's PoCL wheel
#    (`pocl-binary-distribution`, the `pocl` extra). docs/platforms.md says why Debian's first.
# 2. `pip install -e ".[test,torch,examples]"` (PYRNN_CL_EXTRAS overrides the extras) and tox.
#    Then Intel's CPU OpenCL runtime, the `intel` extra (x86-64 only), as a second CPU
#    implementation: PYRNN_CL_INTEL=auto (default) warns and goes on if it cannot be installed,
#    1 (set by .ci/run) fails then and when pyrnn_cl does not list its device, 0 skips it.
# 3. Lists the OpenCL devices; fails if there is none.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
EXTRAS=${PYRNN_CL_EXTRAS:-test,torch,examples}
INTEL=${PYRNN_CL_INTEL:-auto}
APT_PACKAGES="pocl-opencl-icd ocl-icd-opencl-dev clinfo oclgrind"
export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1

say() { printf '\n==> %s\n' "$*"; }

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# -- 1. OpenCL runtime ---------------------------------------------------------------------------
if command -v apt-get >/dev/null 2>&1 && command -v dpkg-query >/dev/null 2>&1; then
  missing=""
  for pkg in $APT_PACKAGES; do installed "$pkg" || missing="$missing $pkg"; done
  if [ -z "$missing" ]; then
    say "apt: $APT_PACKAGES already installed"
  else
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
      if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; fi
    fi
    if [ "$(id -u)" -eq 0 ] || [ -n "$sudo" ]; then
      say "apt-get install$missing"
      # shellcheck disable=SC2086
      if ! { $sudo apt-get update -qq &&
             DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing; }; then
        echo "warning: apt-get failed; continuing with what is installed" >&2
      fi
    else
      echo "note: not root and no password-less sudo: skipping apt-get ($missing)" >&2
    fi
  fi
fi
if command -v dpkg-query >/dev/null 2>&1 && installed pocl-opencl-icd; then
  say "OpenCL runtime: Debian's PoCL (pocl-opencl-icd)"
else
  say "OpenCL runtime: pip's PoCL wheel (pocl-binary-distribution, extra 'pocl')"
  EXTRAS="$EXTRAS,pocl"
fi

# -- 2. Python packages --------------------------------------------------------------------------
say "$PYTHON -m pip install -e .[$EXTRAS]"
"$PYTHON" -m pip install -q -e ".[$EXTRAS]"
case "$INTEL" in
  0) ;;
  *)
    machine=$(uname -m)
    if [ "$machine" != x86_64 ] && [ "$INTEL" != 1 ]; then
      echo "note: Intel's CPU OpenCL runtime has wheels for x86-64 only; skipped on $machine" >&2
    else
      say "$PYTHON -m pip install -e .[intel] (Intel's CPU OpenCL runtime)"
      if ! "$PYTHON" -m pip install -q -e ".[intel]"; then
        if [ "$INTEL" = 1 ]; then
          echo "install.sh: PYRNN_CL_INTEL=1 and the intel extra failed to install" >&2
          exit 1
        fi
        echo "warning: the intel extra (Intel's CPU OpenCL runtime) failed to install;" \
             "continuing without it" >&2
      fi
    fi
    ;;
esac
if ! "$PYTHON" -m tox --version >/dev/null 2>&1; then
  say "$PYTHON -m pip install tox"
  "$PYTHON" -m pip install -q tox
fi
# pyenv finds new console scripts only after a rehash (`python -m pip` does not trigger one).
if command -v pyenv >/dev/null 2>&1; then pyenv rehash || true; fi
if ! command -v pyrnn-cl >/dev/null 2>&1; then
  echo "note: pyrnn-cl is not on PATH (pip's script directory is missing from it);" \
       "\`$PYTHON -m pyrnn_cl\` does the same" >&2
fi

# -- 3. What is there ----------------------------------------------------------------------------
if command -v clinfo >/dev/null 2>&1; then
  say "clinfo -l"
  clinfo -l || true
fi
say "pyrnn-cl devices"
"$PYTHON" -m pyrnn_cl devices
"$PYTHON" - <<'PY'
import sys
from pyrnn_cl.devices import INSTALL_HINT, list_devices
if not list_devices():
    sys.exit("install.sh: no OpenCL device is visible. " + INSTALL_HINT)
PY
if [ "$INTEL" = 1 ]; then
  "$PYTHON" - <<'PY'
import sys
from pyrnn_cl.devices import list_devices, runtimes
found = [i for i in list_devices() if i.platform_name == "Intel(R) OpenCL" and i.type == "cpu"]
state = runtimes.registration()
if not found:
    sys.exit("install.sh: PYRNN_CL_INTEL=1 but pyrnn_cl lists no Intel(R) OpenCL CPU device "
             f"(registration: {state.state if state else None}: {state.detail if state else ''})")
print(f"Intel's CPU runtime: {found[0].describe()} ({state.state}: {state.detail})")
PY
fi
