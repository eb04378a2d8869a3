# Sourced by ci/install.sh, ci/run-tests.sh and ci/in-env: chooses the Python environment that the
# README's commands use, and sets PYTHON (its interpreter) and PYRNN_CL_ENV_BIN (the directory of
# its console scripts, empty when unknown). In order:
#   1. $PYTHON, when set;
#   2. the active virtualenv ($VIRTUAL_ENV) or conda environment ($CONDA_PREFIX);
#   3. the project's virtualenv, $PYRNN_CL_VENV (default .venv in the checkout), when it exists:
#      ci/install.sh creates it where the interpreter is externally managed (PEP 668: Debian's
#      and Ubuntu's own Python), so that the README's commands reach it with nothing activated;
#   4. python3 on PATH.
# The caller has changed to the checkout's root.

PYRNN_CL_VENV=${PYRNN_CL_VENV:-.venv}
PYRNN_CL_ENV_BIN=""
if [ -n "${PYTHON:-}" ]; then
  :
elif [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
  PYTHON="$VIRTUAL_ENV/bin/python"
elif [ -n "${CONDA_PREFIX:-}" ] && [ -x "$CONDA_PREFIX/bin/python" ]; then
  PYTHON="$CONDA_PREFIX/bin/python"
elif [ -x "$PYRNN_CL_VENV/bin/python" ]; then
  PYTHON="$PWD/$PYRNN_CL_VENV/bin/python"
  case "$PYRNN_CL_VENV" in /*) PYTHON="$PYRNN_CL_VENV/bin/python" ;; esac
else
  PYTHON=python3
fi
# Where pip puts this interpreter's console scripts (pyrnn-cl): its sysconfig "scripts" path.
PYRNN_CL_ENV_BIN=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))' \
                   2>/dev/null || true)

# True (status 0) when $PYTHON refuses pip installs outside a virtualenv (PEP 668's marker file
# in its standard library directory), and no environment of the user's is active.
python_externally_managed() {
  "$PYTHON" - <<'PY'
import os, sys, sysconfig
in_env = sys.prefix != getattr(sys, "base_prefix", sys.prefix) or os.environ.get("CONDA_PREFIX")
marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
sys.exit(0 if os.path.exists(marker) and not in_env else 1)
PY
}
