#!/usr/bin/env bash
# The test command (README): the suite on every default-choosable OpenCL device (PoCL in CI),
# without the tests marked `slow`, one pytest-xdist worker per CPU (CI must finish well inside
# 15 minutes on 2 cores; kernel builds dominate a cold run and one build uses one core). Fails on
# any test failure and, with PYRNN_CL_REQUIRE_DEVICE=1 (the default here), when no kernel ran on
# a device. Arguments replace the default `tests -m "not slow" -n auto` (`bash ci/run-tests.sh
# tests` runs everything, in one process). Uses the Python environment ci/install.sh installed
# into (ci/python-env.sh: $PYTHON, the active virtualenv or conda environment, the project's
# .venv, else python3), with nothing to activate.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/python-env.sh
. ci/python-env.sh
export PYRNN_CL_REQUIRE_DEVICE=${PYRNN_CL_REQUIRE_DEVICE:-1}

"$PYTHON" -m pyrnn_cl devices || true
if [ $# -eq 0 ]; then
  set -- tests -m "not slow"
  if "$PYTHON" -c "import xdist" 2>/dev/null; then set -- "$@" -n auto; fi
fi
exec "$PYTHON" -m pytest --durations=15 "$@"
