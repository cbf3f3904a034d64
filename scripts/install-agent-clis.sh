#!/usr/bin/env bash
# Install the real agent CLIs okstra drives (claude, codex, gemini) from the
# npm registry into a scratch directory, for the tests that run them
# (`tests/real_clis/argv.rs`, and `tests/real_clis/e2e.rs` against a mock API).
# About 800 MB, under a minute; `.ci/run` runs it.
#
#   scripts/install-agent-clis.sh [DIR]     # default: target/agent-clis
#   export PATH="$DIR/node_modules/.bin:$PATH"
#   cargo test --test real_clis -- --nocapture
#
# (tests/real_clis/e2e.rs also finds them in target/agent-clis without PATH.)
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-target/agent-clis}"
command -v npm >/dev/null || { echo "npm is required (Node.js 20 or later)" >&2; exit 1; }
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
[ -f "$dir/package.json" ] || echo '{"private": true}' > "$dir/package.json"
npm install --prefix "$dir" --no-audit --no-fund \
    @anthropic-ai/claude-code @openai/codex @google/gemini-cli
for cli in claude codex gemini; do
    printf '%s: %s\n' "$cli" "$("$dir/node_modules/.bin/$cli" --version 2>&1 | head -n 1)"
done
echo "add to PATH: export PATH=\"$dir/node_modules/.bin:\$PATH\""
