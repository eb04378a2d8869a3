#!/usr/bin/env bash
# The test command (README): the suite on every default-choosable OpenCL device (PoCL in CI),
# without the tests marked `slow` (CI must finish well inside 15 minutes on 2 cores). Fails on
# any test failure and, with PYRNN_CL_REQUIRE_DEVICE=1 (the default here), when no kernel ran on
# a device. Arguments replace the default `tests -m "not slow"` (`bash ci/run-tests.sh tests`
# runs everything). Uses the active Python ($PYTHON, default python3), where ci/install.sh
# installed the package.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
export PYRNN_CL_REQUIRE_DEVICE=${PYRNN_CL_REQUIRE_DEVICE:-1}

"$PYTHON" -m pyrnn_cl devices || true
if [ $# -eq 0 ]; then set -- tests -m "not slow"; fi
exec "$PYTHON" -m pytest --durations=15 "$@"
