#!/usr/bin/env bash
# The README's first command, verbatim, as a new user on a bare Debian/Ubuntu machine runs it:
# a fresh clone of this checkout's HEAD, nothing activated, PATH=/usr/sbin:/usr/bin:/sbin:/bin so
# that python3 is the distribution's own (externally managed, PEP 668) interpreter. The command is
# read from the README (the line of its "two commands" block that starts with
# `bash ci/install.sh`). Fails unless it exits 0, prints the selftest's summary and a loss per
# epoch, and writes loss.png. Run by .ci/run; needs /usr/bin/python3 (skipped, with a note,
# elsewhere). Kernel and pip caches are the user's ($HOME), as a user's second project would have.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x /usr/bin/python3 ]; then
  echo "first-contact: no /usr/bin/python3 on this machine; skipped" >&2
  exit 0
fi
command1=$(grep -m1 '^bash ci/install.sh' README.md)
workdir=$(mktemp -d "${TMPDIR:-/tmp}/pyrnn_cl-first-contact.XXXXXX")
trap 'rm -rf "$workdir"' EXIT
git clone -q "$PWD" "$workdir/clone"
git -C "$workdir/clone" checkout -q "$(git rev-parse HEAD)"
echo "==> first contact: in a fresh clone, with /usr/bin/python3 and nothing activated:"
echo "    $command1"
start=$(date +%s)
set +e
(cd "$workdir/clone" &&
 env -i HOME="$HOME" TERM="${TERM:-dumb}" LANG="${LANG:-C.UTF-8}" PATH=/usr/sbin:/usr/bin:/sbin:/bin \
   bash -c "$command1") > "$workdir/log" 2>&1
status=$?
set -e
tail -n 25 "$workdir/log"
fail() { echo "first-contact: $*" >&2; exit 1; }
[ "$status" -eq 0 ] || fail "the README's first command exited with $status"
grep -q "checks passed" "$workdir/log" || fail "no selftest summary in the output"
grep -q "^epoch" "$workdir/log" || fail "no loss per epoch in the output"
[ -s "$workdir/clone/loss.png" ] || fail "loss.png was not written"
if /usr/bin/python3 -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
  [ -x "$workdir/clone/.venv/bin/python" ] || fail "no project virtualenv (.venv) was created"
fi
echo "==> first contact: passed in $(( $(date +%s) - start )) s"
