#!/usr/bin/env bash
# The test command (README): the whole suite on every default-choosable OpenCL device (PoCL in
# CI). Fails on any test failure and, with PYRNN_CL_REQUIRE_DEVICE=1 (the default here), when no
# kernel ran on a device. Arguments go to pytest (default: tests). Uses the active Python
# environment ($PYTHON, default python3), where ci/install.sh installed the package.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
export PYRNN_CL_REQUIRE_DEVICE=${PYRNN_CL_REQUIRE_DEVICE:-1}

"$PYTHON" -m pyrnn_cl devices || true
if [ $# -eq 0 ]; then set -- tests; fi
exec "$PYTHON" -m pytest --durations=10 "$@"
