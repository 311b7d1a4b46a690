#!/usr/bin/env bash
# Test service: Debian's `strace`, for the test that counts the /proc entries one run opens
# (tests/services/supervision_strace.rs, issue #53). Nothing is started: the package is
# installed once, strace is checked to trace a child on this host (ptrace may be refused
# in a container), and
#   strace.env   SORTIE_TEST_STRACE=/usr/bin/strace
# is written to $SORTIE_TEST_SERVICES.
set -euo pipefail
: "${SORTIE_TEST_SERVICES:?set SORTIE_TEST_SERVICES to a directory (scripts/test does)}"
mkdir -p "$SORTIE_TEST_SERVICES"

if ! command -v strace >/dev/null; then
  echo "strace: installing Debian package strace"
  export DEBIAN_FRONTEND=noninteractive
  apt_opts=(-o DPkg::Lock::Timeout=600 -q)
  apt-get "${apt_opts[@]}" update >/dev/null
  apt-get "${apt_opts[@]}" install -y --no-install-recommends strace >/dev/null
fi
strace=$(command -v strace)
if ! out=$("$strace" -f -e trace=openat -o /dev/null -- sh -c true 2>&1); then
  echo "strace: $strace cannot trace a process on this host: $out" >&2
  exit 1
fi
echo "SORTIE_TEST_STRACE=$strace" > "$SORTIE_TEST_SERVICES/strace.env"
echo "strace: $("$strace" -V | head -n 1) at $strace"
