#!/usr/bin/env bash
# `okstra watch` at scale (issue "okstra watch"): the state a real
# `okstra exec` leaves after running N trivial jobs (benches/gen_exec_fixture.py,
# default 10,000), then
#   - `okstra watch --bench-redraws F`: the run read (events log and
#     team-state, once), then F frames of the 80×24 terminal view drawn into
#     memory, scrolling a page each (every frame sums the totals and reads
#     the log ends of the rows on screen, as a live redraw does): the time
#     per frame, which must stay at or under 100 ms;
#   - its maximum resident size (`/usr/bin/time -v`), under 100 MB;
#   - `okstra watch --once` (start-up, the whole run read, the plain table
#     of every job printed): wall time, for reference.
#
# usage: benches/watch.sh            OKSTRA_BENCH_JOBS=10000 OKSTRA_BENCH_FRAMES=200
# Working trees go under $TMPDIR. Exit 1 where a ceiling is crossed.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${OKSTRA_BENCH_JOBS:-10000}
frames=${OKSTRA_BENCH_FRAMES:-200}
cargo build --release --quiet
target=${CARGO_TARGET_DIR:-target}
bin=$PWD/$target/release/okstra
[ -x "$bin" ] || bin=$target/release/okstra
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 benches/gen_exec_fixture.py "$jobs" "$work/p" >/dev/null
cd "$work/p"
"$bin" plan spec.toml --manifest run/run-manifest.json --out plan.json >/dev/null
start=$(date +%s%N)
"$bin" exec plan.json --concurrency 2 >/dev/null 2>&1 || true
echo "exec of $jobs jobs: $(( ($(date +%s%N) - start) / 1000000 )) ms"
ls -l run/lead-events.jsonl run/team-state.json | awk '{printf "%s %.1f MB\n", $9, $5 / 1e6}'
/usr/bin/time -v "$bin" watch --manifest run/run-manifest.json --bench-redraws "$frames" \
  >"$work/out" 2>"$work/time"
cat "$work/out"
rss_kb=$(sed -n 's/^\s*Maximum resident set size (kbytes): //p' "$work/time")
echo "max RSS: $(awk -v k="$rss_kb" 'BEGIN { printf "%.1f", k / 1024 }') MB"
start=$(date +%s%N)
"$bin" watch --manifest run/run-manifest.json --once >"$work/once"
echo "watch --once: $(( ($(date +%s%N) - start) / 1000000 )) ms, $(wc -l <"$work/once") lines"
each=$(sed -n 's/.*: \([0-9.]*\) ms per frame.*/\1/p' "$work/out")
fail=0
awk -v e="$each" 'BEGIN { exit !(e > 100) }' && { echo "over 100 ms per frame" >&2; fail=1; }
[ "$rss_kb" -lt 102400 ] || { echo "over 100 MB resident" >&2; fail=1; }
exit "$fail"
