#!/usr/bin/env bash
# The real agent CLIs, pinned, for the preset tests against the scripted model server
# (tests/services/agent_clis.rs, agent_clis_acp.rs): Claude Code (@anthropic-ai/claude-code),
# Codex (@openai/codex), and the Agent Client Protocol agents Claude Code's ACP adapter
# (@zed-industries/claude-code-acp), Gemini CLI (@google/gemini-cli), Qwen Code
# (@qwen-code/qwen-code) and OpenCode (opencode-ai), versions in scripts/services/agent-clis/package.json and its lock file.
#
# Installs them once into scripts/services/agent-clis/node_modules (a cache reused across
# runs: reinstalled only when the lock file changes) and writes
#   $SORTIE_TEST_SERVICES/agent-clis.env   SORTIE_TEST_CLAUDE=/abs/path/claude
#                                          SORTIE_TEST_CODEX=/abs/path/codex
#                                          SORTIE_TEST_CLAUDE_ACP=/abs/path/claude-code-acp
#                                          SORTIE_TEST_GEMINI=/abs/path/gemini
#                                          SORTIE_TEST_QWEN=/abs/path/qwen
#                                          SORTIE_TEST_OPENCODE=/abs/path/opencode
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

# Installing downloads ~1.4 GB (native binaries mostly) again: only when the lock file changed
# since the last install. `npm install --no-save` rather than `npm ci`: the lock lists only
# this platform's optional binaries of opencode-ai and @qwen-code/qwen-code (the registry
# mirror here serves no others, so a lock made here cannot name them), and `npm ci` refuses a
# lock that lacks any; `install` takes the pinned versions from the lock and writes nothing.
stamp=$prefix/node_modules/.sortie-lock-sha256
want=$(sha256sum "$prefix/package-lock.json" | cut -d' ' -f1)
claude=$PWD/$prefix/node_modules/.bin/claude
codex=$PWD/$prefix/node_modules/.bin/codex
claude_acp=$PWD/$prefix/node_modules/.bin/claude-code-acp
gemini=$PWD/$prefix/node_modules/.bin/gemini
qwen=$PWD/$prefix/node_modules/.bin/qwen
opencode=$PWD/$prefix/node_modules/.bin/opencode
if [[ ! -x $claude || ! -x $codex || ! -x $claude_acp || ! -x $gemini || ! -x $qwen || ! -x $opencode || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  npm install --prefix "$prefix" --no-save --no-audit --no-fund --loglevel=error >"$log" 2>&1 || {
    cat "$log" >&2
    exit 1
  }
  echo "$want" >"$stamp"
fi

# Fail here, with the reason, rather than in every test. (claude-code-acp has no --version:
# it speaks ACP on stdio from the start.)
: >"$log"
for cli in "$claude" "$codex" "$gemini" "$qwen" "$opencode"; do
  "$cli" --version >>"$log" 2>&1 </dev/null || { echo "agent-clis.sh: $cli does not run:" >&2; cat "$log" >&2; exit 1; }
done

{
  echo "SORTIE_TEST_CLAUDE=$claude"
  echo "SORTIE_TEST_CODEX=$codex"
  echo "SORTIE_TEST_CLAUDE_ACP=$claude_acp"
  echo "SORTIE_TEST_GEMINI=$gemini"
  echo "SORTIE_TEST_QWEN=$qwen"
  echo "SORTIE_TEST_OPENCODE=$opencode"
} >"$SORTIE_TEST_SERVICES/agent-clis.env"
