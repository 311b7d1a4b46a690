#!/usr/bin/env bash
# The real agent CLIs, pinned, for the preset tests against the scripted model server
# (tests/services/agent_clis.rs, agent_clis_acp.rs): Claude Code (@anthropic-ai/claude-code),
# Codex (@openai/codex) and Claude Code's ACP adapter (@zed-industries/claude-code-acp),
# versions in scripts/services/agent-clis/package.json and its lock file.
#
# Installs them once into scripts/services/agent-clis/node_modules (a cache reused across
# runs: reinstalled only when the lock file changes) and writes
#   $SORTIE_TEST_SERVICES/agent-clis.env   SORTIE_TEST_CLAUDE=/abs/path/claude
#                                          SORTIE_TEST_CODEX=/abs/path/codex
#                                          SORTIE_TEST_CLAUDE_ACP=/abs/path/claude-code-acp
# Nothing is started: each test starts its own model server on 127.0.0.1 and points the
# CLIs at it, under a throwaway HOME / CODEX_HOME.
set -euo pipefail
cd "$(dirname "$0")/../.."

: "${SORTIE_TEST_SERVICES:?set SORTIE_TEST_SERVICES to a directory (scripts/test does)}"
mkdir -p "$SORTIE_TEST_SERVICES"
prefix=scripts/services/agent-clis
log=$SORTIE_TEST_SERVICES/agent-clis-install.log

if ! command -v npm >/dev/null; then
  echo "agent-clis.sh: installing nodejs and npm" >&2
  { apt-get update -qq && apt-get install -y -qq nodejs npm; } >"$log" 2>&1 || {
    cat "$log" >&2
    exit 1
  }
fi

# npm ci wipes node_modules and downloads ~650 MB of native binaries again: only when the
# lock file changed since the last install.
stamp=$prefix/node_modules/.sortie-lock-sha256
want=$(sha256sum "$prefix/package-lock.json" | cut -d' ' -f1)
claude=$PWD/$prefix/node_modules/.bin/claude
codex=$PWD/$prefix/node_modules/.bin/codex
claude_acp=$PWD/$prefix/node_modules/.bin/claude-code-acp
if [[ ! -x $claude || ! -x $codex || ! -x $claude_acp || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  npm ci --prefix "$prefix" --no-audit --no-fund --loglevel=error >"$log" 2>&1 || {
    cat "$log" >&2
    exit 1
  }
  echo "$want" >"$stamp"
fi

# Fail here, with the reason, rather than in every test.
"$claude" --version >"$log" 2>&1 || { echo "agent-clis.sh: $claude does not run:" >&2; cat "$log" >&2; exit 1; }
"$codex" --version >>"$log" 2>&1 || { echo "agent-clis.sh: $codex does not run:" >&2; cat "$log" >&2; exit 1; }

{
  echo "SORTIE_TEST_CLAUDE=$claude"
  echo "SORTIE_TEST_CODEX=$codex"
  echo "SORTIE_TEST_CLAUDE_ACP=$claude_acp"
} >"$SORTIE_TEST_SERVICES/agent-clis.env"
