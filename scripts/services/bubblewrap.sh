#!/usr/bin/env bash
# Test service: Debian's `bubblewrap` (bwrap), for the sandbox tests
# (tests/services/sandbox.rs, sandbox_clis.rs). Nothing is started: the package is
# installed once, the probe sortie itself runs at load (`bwrap` starting a sandbox with
# new user, PID, IPC and UTS namespaces) is run here too, so a host that refuses
# unprivileged user namespaces fails here with bwrap's own words, and
#   bubblewrap.env   SORTIE_TEST_BWRAP=/usr/bin/bwrap
# is written to $SORTIE_TEST_SERVICES.
set -euo pipefail
: "${SORTIE_TEST_SERVICES:?set SORTIE_TEST_SERVICES to a directory (scripts/test does)}"
mkdir -p "$SORTIE_TEST_SERVICES"

if ! command -v bwrap >/dev/null; then
  echo "bubblewrap: installing Debian package bubblewrap"
  export DEBIAN_FRONTEND=noninteractive
  apt_opts=(-o DPkg::Lock::Timeout=600 -q)
  apt-get "${apt_opts[@]}" update >/dev/null
  apt-get "${apt_opts[@]}" install -y --no-install-recommends bubblewrap >/dev/null
fi
bwrap=$(command -v bwrap)
if ! out=$("$bwrap" --unshare-user --unshare-pid --unshare-ipc --unshare-uts --unshare-net \
  --die-with-parent --ro-bind / / --proc /proc --dev /dev -- true 2>&1); then
  echo "bubblewrap: $bwrap cannot start a sandbox on this host: $out" >&2
  echo "bubblewrap: unprivileged user namespaces may be off (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0)" >&2
  exit 1
fi
echo "SORTIE_TEST_BWRAP=$bwrap" > "$SORTIE_TEST_SERVICES/bubblewrap.env"
echo "bubblewrap: $("$bwrap" --version) at $bwrap"
