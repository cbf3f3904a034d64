#!/usr/bin/env bash
# Provider state under concurrency (issue 28): what N agent CLIs started at
# once on one HOME leave of the user's state files, round after round,
# against the mock API of tests/real_clis (no credentials, no network): the
# baseline, started by hand. Then okstra's run of the same, 16 CLIs x 5
# rounds (tests/real_clis/concurrency.rs, which prints the same counts).
#
# usage: benches/provider_state.sh [rounds]     (default 5)
#   OKSTRA_BENCH_WORKERS=16           CLIs at once
#   OKSTRA_BENCH_CLIS="claude codex"  which CLIs
#   OKSTRA_BENCH_OKSTRA=0             leave okstra's run out
#
# Each CLI runs on two HOMEs in turn: `seeded`, the user's files of the
# concurrency test (a first run's ~/.claude.json, settings, codex's config
# and login), and `fresh`, empty, where each CLI's first run writes its own
# state. In each round the N CLIs start together in one project, each asked
# to write its own result; the mock holds each round's first requests until
# all N are in, so all N are running at once. The argv is okstra's for a
# job of that CLI (claude `-p ... --permission-mode acceptEdits`, codex
# `exec ... --sandbox workspace-write`). Counted after the rounds:
#   failed runs        exit status not 0, or the result not written
#   invalid files      state files (~/.claude.json, ~/.claude/, ~/.codex/,
#                      ~/.gemini/) that do not parse: JSON, JSON lines (each
#                      line), TOML, SQLite (integrity_check on a copy)
#   set-aside files    anywhere under HOME, named *corrupt*, *backup*, *.bak, *~
#   user's files       of the state files there before, changed or removed
#   files added        state files that were not there before
#
# Needs the agent CLIs (scripts/install-agent-clis.sh; found on PATH or in
# target/agent-clis) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
n=${OKSTRA_BENCH_WORKERS:-16}
clis=${OKSTRA_BENCH_CLIS:-claude codex}

export PATH="$PWD/target/agent-clis/node_modules/.bin:$PATH"
for cli in $clis; do
  command -v "$cli" >/dev/null || { echo "$cli is not on PATH (scripts/install-agent-clis.sh)" >&2; exit 1; }
done
cargo test --quiet --test real_clis --no-run
work=$(mktemp -d)
mock=
cleanup() {
  # The mock stops itself once its URL file is gone (even one written
  # after this began).
  if [ -n "$mock" ]; then
    while kill -0 "$mock" 2>/dev/null; do rm -f "$work/url"; sleep 0.1; done
  fi
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/project/out" "$work/tmp" "$work/logs" "$work/seed"
OKSTRA_MOCK_URL_FILE="$work/url" OKSTRA_MOCK_ROOT="$work/project" \
  OKSTRA_MOCK_TOGETHER="$n" OKSTRA_MOCK_SEED_HOME="$work/seed" \
  cargo test --quiet --test real_clis concurrency::mock_for_benches -- \
  --ignored --exact --nocapture >"$work/mock.log" 2>&1 &
mock=$!
for _ in $(seq 600); do [ -s "$work/url" ] && break; sleep 0.1; done
[ -s "$work/url" ] || { echo "the mock did not start:" >&2; cat "$work/mock.log" >&2; exit 1; }
url=$(cat "$work/url")

# `snapshot HOME` prints the state files' digests as JSON; `count HOME
# BEFORE` prints the counts against such a snapshot.
state() {
  python3 - "$@" <<'EOF'
import hashlib, json, os, shutil, sqlite3, sys, tempfile, tomllib
cmd, home = sys.argv[1], sys.argv[2]

def files():
    out = []
    for d in (".claude", ".codex", ".gemini"):
        for root, _, names in os.walk(os.path.join(home, d)):
            out += [os.path.join(root, n) for n in names]
    if os.path.isfile(os.path.join(home, ".claude.json")):
        out.append(os.path.join(home, ".claude.json"))
    return sorted(out)

def digest(p):
    with open(p, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()

def valid(p):
    try:
        if p.endswith(".json"):
            json.load(open(p))
        elif p.endswith(".jsonl"):
            for line in open(p):
                if line.strip():
                    json.loads(line)
        elif p.endswith(".toml"):
            tomllib.load(open(p, "rb"))
        elif p.endswith((".sqlite", ".db")):
            # On a copy (with its journal): checking must not write the user's.
            with tempfile.TemporaryDirectory() as t:
                for side in ("", "-wal", "-shm"):
                    if os.path.exists(p + side):
                        shutil.copy(p + side, os.path.join(t, "db" + side))
                c = sqlite3.connect(os.path.join(t, "db"))
                ok = c.execute("pragma integrity_check").fetchone()[0] == "ok"
                c.close()
                return ok
        return True
    except Exception:
        return False

now = {os.path.relpath(p, home): digest(p) for p in files()}
if cmd == "snapshot":
    print(json.dumps(now))
    sys.exit()
before = json.load(open(sys.argv[3]))
invalid = [p for p in now if not valid(os.path.join(home, p))]
aside = []
for root, _, names in os.walk(home):
    for name in names:
        low = name.lower()
        if "corrupt" in low or "backup" in low or low.endswith((".bak", "~")):
            aside.append(os.path.relpath(os.path.join(root, name), home))
changed = [p for p in before if now.get(p) != before[p]]
added = [p for p in now if p not in before]
print(f"invalid state files {len(invalid)}, set-aside files {len(aside)}, "
      f"user's files changed {len(changed)}/{len(before)}, files added {len(added)}")
for what, ps in (("invalid", invalid), ("set aside", aside), ("changed", changed)):
    for p in sorted(ps)[:5]:
        print(f"    {what}: {p}")
EOF
}

# One CLI of a round: `key` its result's name.
start() {
  local cli=$1 home=$2 key=$3
  local prompt="Write out/$key.md with your file-writing tool."
  local env=(env -i PATH="$PATH" HOME="$home" TMPDIR="$work/tmp")
  case $cli in
    claude)
      "${env[@]}" ANTHROPIC_BASE_URL="$url" ANTHROPIC_API_KEY=mock-key \
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
        claude -p --model claude-sonnet-4-5 --output-format stream-json --verbose \
        --permission-mode acceptEdits -- "$prompt" </dev/null ;;
    codex)
      "${env[@]}" MOCK_KEY=mock-key \
        codex exec -m gpt-5 -C "$work/project" --sandbox workspace-write --json --skip-git-repo-check \
        -c model_provider=mock \
        -c "model_providers.mock={name=\"mock\",base_url=\"$url/v1\",env_key=\"MOCK_KEY\",wire_api=\"responses\"}" \
        - <<<"$prompt" ;;
  esac >"$work/logs/$key.out" 2>"$work/logs/$key.err"
}

echo "$n CLIs at once on one HOME, started by hand, $rounds rounds ($(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg))"
for cli in $clis; do
  echo "$cli: $("$cli" --version 2>/dev/null | head -1)"
  for kind in seeded fresh; do
    home="$work/home-$cli-$kind"
    mkdir -p "$home"
    if [ "$kind" = seeded ]; then cp -a "$work/seed/." "$home/"; fi
    state snapshot "$home" >"$work/before.json"
    failed=0
    t0=$(date +%s%N)
    for r in $(seq "$rounds"); do
      pids=()
      keys=()
      for w in $(seq -w 1 "$n"); do
        key="$cli-$kind-r${r}w$w"
        (cd "$work/project" && start "$cli" "$home" "$key") &
        pids+=($!)
        keys+=("$key")
      done
      for i in "${!pids[@]}"; do
        if ! wait "${pids[$i]}" || ! grep -q "own tool" "$work/project/out/${keys[$i]}.md" 2>/dev/null; then
          failed=$((failed + 1))
          [ "$failed" -gt 1 ] || { echo "    first failure, ${keys[$i]}:" >&2; tail -3 "$work/logs/${keys[$i]}.err" "$work/logs/${keys[$i]}.out" >&2; }
        fi
      done
    done
    t1=$(date +%s%N)
    printf '  by hand, %-6s HOME: %3d s: failed runs %d/%d, %s\n' "$kind" $(((t1 - t0) / 1000000000)) \
      "$failed" $((rounds * n)) "$(state count "$home" "$work/before.json")"
  done
done

if [ "${OKSTRA_BENCH_OKSTRA:-1}" != 0 ]; then
  echo "okstra exec, 16 CLIs x 5 rounds on the seeded HOME (tests/real_clis/concurrency.rs):"
  filter=()
  for cli in $clis; do filter+=("concurrency::sixteen_${cli}_workers"); done
  # The test fails while the user's files change: its counts are printed first.
  REQUIRE_AGENT_CLIS=1 cargo test --quiet --test real_clis -- "${filter[@]}" --nocapture --test-threads 1 2>/dev/null |
    grep '^okstra ' | sed 's/^/  /' || true
fi
