#!/usr/bin/env bash
# Planning memory benchmark (issue 13): the peak RSS of `okstra plan` on a
# minified JSON spec made of nothing but errors (benches/gen_error_spec.py),
# at 1 MB and at 10 MB; and (docs/exec.md: inputs are digested as they are
# read) on the demo with a 1 GiB sparse prompt, under MAX_PROMPT_MIB
# (default 50) resident.
#
# usage: benches/plan_memory.sh [size_mb]    (default 10)
#   MAX_RATIO   peak RSS / spec size allowed at the larger size (default 10,
#               the target of issue 13; see benches/README.md)
#   MAX_GROWTH  peak RSS growth allowed from 1 MB to size_mb, relative to
#               the growth of the input (default 1.0: no worse than linear)
#
# Fails (exit 1) when either bound is broken, or when okstra does not refuse
# the spec with exit 2 and one diagnostic per problem.
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-10}
max_ratio=${MAX_RATIO:-10}
max_growth=${MAX_GROWTH:-1.0}
cargo build --release --quiet
bin=$PWD/target/release/okstra
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time): apt-get install time" >&2; exit 1; }

# Peak RSS in KiB of `okstra plan` in project $1; its diagnostics counted
# into $1/errors.txt.
peak_kib() {
  local dir=$1 status=0
  (cd "$dir" && /usr/bin/time -v "$bin" plan spec.json --manifest run/run-manifest.json \
    --out plan.json 2>"$dir/time.txt" >/dev/null) || status=$?
  if [ "$status" -ne 2 ]; then
    echo "okstra plan exited $status on the error spec, expected 2 (refused)" >&2
    tail -5 "$dir/time.txt" >&2
    exit 1
  fi
  grep -c '^error\[' "$dir/time.txt" >"$dir/errors.txt" || true
  sed -n 's/.*Maximum resident set size (kbytes): //p' "$dir/time.txt"
}

printf '%-8s %-12s %-10s %-12s %s\n' "spec" "bytes" "problems" "peak RSS" "RSS / spec"
declare -A rss bytes
for mb in 1 "$size"; do
  dir=$work/$mb
  python3 benches/gen_error_spec.py "$dir" "$mb" >/dev/null
  bytes[$mb]=$(stat -c %s "$dir/spec.json")
  rss[$mb]=$(peak_kib "$dir")
  problems=$(cat "$dir/errors.txt")
  printf '%-8s %-12s %-10s %-12s %s\n' "${mb} MB" "${bytes[$mb]}" "$problems" \
    "$((rss[$mb] / 1024)) MiB" "$(python3 -c "print(f'{${rss[$mb]} * 1024 / ${bytes[$mb]}:.1f}x')")"
  if [ "$problems" -lt $(( bytes[$mb] / 200 )) ]; then
    echo "only $problems problems reported for ${bytes[$mb]} bytes of errors" >&2
    exit 1
  fi
done

# A prompt of 1 GiB (sparse: no disk spent), in the demo project.
big=$work/big-prompt
cp -r specs/demo "$big"
truncate -s 1G "$big/prompts/implement.md"
(cd "$big" && /usr/bin/time -v "$bin" plan pipeline.toml --manifest run-manifest.json \
  --out plan.json >/dev/null 2>"$big/time.txt")
prompt_kib=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$big/time.txt")
max_prompt=${MAX_PROMPT_MIB:-50}
echo "a 1 GiB prompt: peak RSS $((prompt_kib / 1024)) MiB (bound ${max_prompt} MiB)"
[ "$prompt_kib" -le $((max_prompt * 1024)) ] || exit 1

python3 - "${bytes[1]}" "${rss[1]}" "${bytes[$size]}" "${rss[$size]}" "$max_ratio" "$max_growth" <<'PY'
import sys
b1, r1, b2, r2 = (int(x) for x in sys.argv[1:5])
max_ratio, max_growth = float(sys.argv[5]), float(sys.argv[6])
ratio = r2 * 1024 / b2
growth = (r2 / r1) / (b2 / b1)
print(f"peak RSS is {ratio:.1f}x the spec (bound {max_ratio:g}x); "
      f"{b2 / b1:.1f}x the input cost {r2 / r1:.1f}x the memory (growth {growth:.2f}, bound {max_growth:g})")
ok = ratio <= max_ratio and growth <= max_growth
sys.exit(0 if ok else 1)
PY
