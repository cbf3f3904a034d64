#!/usr/bin/env bash
# Planning benchmark (issue "okstra plan"): generate v2 projects of 1,000 and
# 10,000 workers with their metadata and time `okstra plan` on each.
# usage: benches/plan.sh [runs]   (default 5 runs each; the best is reported)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
cargo build --release --quiet
bin=$PWD/target/release/okstra
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

best_ms() { # dir
  local best=""
  for _ in $(seq "$runs"); do
    local t0 t1 ms
    t0=$(date +%s%N)
    (cd "$1" && "$bin" plan spec.toml --manifest run/run-manifest.json --out plan.json >/dev/null)
    t1=$(date +%s%N)
    ms=$(( (t1 - t0) / 1000000 ))
    if [ -z "$best" ] || [ "$ms" -lt "$best" ]; then best=$ms; fi
  done
  echo "$best"
}

printf '%-8s %-10s %s\n' workers "best (ms)" "plan size"
declare -A results
for n in 1000 10000; do
  python3 benches/gen_plan_fixture.py "$n" "$work/$n"
  ms=$(best_ms "$work/$n")
  results[$n]=$ms
  printf '%-8s %-10s %s\n' "$n" "$ms" "$(du -h "$work/$n/plan.json" | cut -f1)"
done
python3 - "${results[1000]}" "${results[10000]}" <<'PY'
import sys
a, b = (max(int(x), 1) for x in sys.argv[1:])
print(f"10x workers cost {b / a:.1f}x the time (target: at most 12x); 10,000 workers: {b} ms (target: < 1000 ms)")
PY
