#!/usr/bin/env bash
# Install pyrnn_cl and an OpenCL runtime into a Python environment, chosen by ci/python-env.sh:
# $PYTHON, else the active virtualenv or conda environment, else the project's virtualenv .venv
# (PYRNN_CL_VENV) when it exists, else python3. Where that interpreter is externally managed
# (PEP 668: Debian's and Ubuntu's own Python) and no environment is active, it creates .venv
# (installing python3-venv with apt when needed) and installs there; ci/in-env and
# ci/run-tests.sh then find it with nothing activated. Safe to re-run.
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
# shellcheck source=ci/python-env.sh
. ci/python-env.sh

EXTRAS=${PYRNN_CL_EXTRAS:-test,torch,examples}
INTEL=${PYRNN_CL_INTEL:-auto}
APT_PACKAGES="pocl-opencl-icd ocl-icd-opencl-dev clinfo oclgrind"
export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1

say() { printf '\n==> %s\n' "$*"; }

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# apt_install PKG...: apt-get install the packages that are missing, as root or with
# password-less sudo. Status 1 (and a note) when that is not possible or apt-get fails.
apt_install() {
  command -v apt-get >/dev/null 2>&1 && command -v dpkg-query >/dev/null 2>&1 || return 1
  local missing="" pkg sudo=""
  for pkg in "$@"; do installed "$pkg" || missing="$missing $pkg"; done
  if [ -z "$missing" ]; then
    say "apt: $* already installed"
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; fi
  fi
  if [ "$(id -u)" -ne 0 ] && [ -z "$sudo" ]; then
    echo "note: not root and no password-less sudo: skipping apt-get ($missing)" >&2
    return 1
  fi
  say "apt-get install$missing"
  # shellcheck disable=SC2086
  if ! { $sudo apt-get update -qq &&
         DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing; }; then
    echo "warning: apt-get failed; continuing with what is installed" >&2
    return 1
  fi
}

# -- 1. OpenCL runtime ---------------------------------------------------------------------------
# shellcheck disable=SC2086
apt_install $APT_PACKAGES || true
if command -v dpkg-query >/dev/null 2>&1 && installed pocl-opencl-icd; then
  say "OpenCL runtime: Debian's PoCL (pocl-opencl-icd)"
else
  say "OpenCL runtime: pip's PoCL wheel (pocl-binary-distribution, extra 'pocl')"
  EXTRAS="$EXTRAS,pocl"
fi

# -- 2. Python packages --------------------------------------------------------------------------
if python_externally_managed; then
  # PEP 668: pip may not install into this Python. A project virtualenv instead; Debian ships
  # venv's ensurepip separately (python3-venv, or python3.X-venv for that interpreter).
  say "$PYTHON is externally managed (PEP 668): creating the virtualenv $PYRNN_CL_VENV"
  if ! "$PYTHON" -m venv "$PYRNN_CL_VENV" >/dev/null 2>&1; then
    rm -rf "$PYRNN_CL_VENV"
    pyver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    apt_install python3-venv "python$pyver-venv" || true
    if ! "$PYTHON" -m venv "$PYRNN_CL_VENV"; then
      echo "install.sh: could not create a virtualenv with $PYTHON (install python3-venv," \
           "or activate a virtualenv of your own and re-run)" >&2
      exit 1
    fi
  fi
  PYTHON=$(cd "$PYRNN_CL_VENV/bin" && pwd)/python
  PYRNN_CL_ENV_BIN=$(dirname "$PYTHON")
fi
say "Python: $PYTHON ($("$PYTHON" -c 'import sys; print(sys.version.split()[0])'))"
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
if [ -n "$PYRNN_CL_ENV_BIN" ] && [ "$(command -v pyrnn-cl || true)" != "$PYRNN_CL_ENV_BIN/pyrnn-cl" ]; then
  echo "note: $PYRNN_CL_ENV_BIN is not first on PATH: run the tools through ci/in-env" \
       "(\`ci/in-env pyrnn-cl selftest\`), or \`. $PYRNN_CL_ENV_BIN/activate\` for a virtualenv" >&2
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
