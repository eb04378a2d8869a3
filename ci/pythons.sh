#!/usr/bin/env bash
# ci/pythons.sh COMMAND [ARG...]: run COMMAND (e.g. `tox -e py39,py313`) with every CPython 3
# that pyenv has installed reachable as python3.X: their bin directories go at the end of PATH,
# so the interpreters in use stay first. (pyenv's shims answer only for the selected versions,
# and tox queries interpreters with a reduced environment, so PYENV_VERSION would not do.)
# Without pyenv, COMMAND runs as it is: the interpreters must be on PATH already.
set -euo pipefail
if command -v pyenv >/dev/null 2>&1; then
  root=$(pyenv root)
  for version in $(pyenv versions --bare --skip-aliases 2>/dev/null | grep -E '^3\.[0-9]+\.[0-9]+$'); do
    PATH="$PATH:$root/versions/$version/bin"
  done
  export PATH
fi
exec "$@"
