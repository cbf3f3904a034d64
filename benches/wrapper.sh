#!/usr/bin/env bash
# Wrapper start-up benchmark: N wrappers run one after another, each wrapping
# `true`, against N plain runs of `true`; the difference is what the wrapper
# itself costs a job (exec, start-up, the status sidecar, spawning and
# reaping the child, exit).
#
# usage: benches/wrapper.sh [BIN...]
#   BIN: an okstra binary (run as `BIN worker ...`) or an okstra-worker
#   binary (run as `BIN ...`); default: target/release/okstra-worker and
#   target/release/okstra (built first).
#   OKSTRA_BENCH_WRAPPERS=400   wrappers per run
#   OKSTRA_BENCH_ROUNDS=5       rounds; the best run of each binary counts
#   OKSTRA_BENCH_CONFINED=1     also run each binary confining its child with
#                               Landlock (`--confinement auto --confine-dir
#                               results`, as exec's default `confinement =
#                               "auto"` does), as rows of their own; 0 skips
#                               them, as does a kernel without Landlock
#
# Rounds alternate the binaries, so drift on a shared machine hits all alike.
# The project lives under $TMPDIR; each wrapper has a prompt of its own, and
# the status sidecars are removed between runs (outside the clock), as exec
# removes a stale one before it starts a wrapper.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${OKSTRA_BENCH_WRAPPERS:-400}
rounds=${OKSTRA_BENCH_ROUNDS:-5}
confined=${OKSTRA_BENCH_CONFINED:-1}
if [ $# -eq 0 ]; then
  cargo build --release --quiet
  set -- "$PWD/target/release/okstra-worker" "$PWD/target/release/okstra"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/prompts" "$work/results"
for i in $(seq "$n"); do echo "prompt $i" >"$work/prompts/w$i.md"; done
true_bin=$(type -P true)

# Whether the wrapper BIN confines a child here (its status sidecar says
# what it applied).
confines() {
  local head=("$1")
  case "$1" in *okstra-worker) ;; *) head+=(worker) ;; esac
  "${head[@]}" --project-root "$work" --provider command --prompt prompts/w1.md \
    --result results/w1.md --worker-result results/w1.md --worker-key w1 \
    --confinement auto --confine-dir results -- "$true_bin" >/dev/null 2>&1 </dev/null || return 1
  grep -q '"confinement": "landlock' "$work/prompts/w1.md.status.json"
}
if [ "$confined" = 1 ] && ! confines "$1"; then
  echo "no Landlock confinement here: the confined rows are skipped" >&2
  confined=0
fi
if [ "$confined" = 1 ]; then
  for bin in "$@"; do set -- "$@" "$bin+confined"; done
fi

# run BIN -> "wall_us cpu_us" for n wrappers (BIN empty: n plain runs of
# true; BIN+confined: BIN confining its child); cpu is user + system time of
# everything the loop started.
run() {
  local bin=$1 head=() confine=() i t
  case "$bin" in
    *+confined) bin=${bin%+confined}; confine=(--confinement auto --confine-dir results) ;;
  esac
  case "$bin" in
    "") ;;
    *okstra-worker) head=("$bin") ;;
    *) head=("$bin" worker) ;;
  esac
  rm -f "$work"/prompts/*.status.json
  sync
  local TIMEFORMAT='%3R %3U %3S'
  t=$( { time {
    if [ -z "$bin" ]; then
      for i in $(seq "$n"); do "$true_bin"; done
    else
      for i in $(seq "$n"); do
        "${head[@]}" --project-root "$work" --provider command \
          --prompt "prompts/w$i.md" --result "results/w$i.md" \
          --worker-result "results/w$i.md" --worker-key "w$i" \
          --attempt 1 --dispatch-id "inv-w$i:attempt-1" "${confine[@]}" -- "$true_bin" \
          >/dev/null 2>&1 </dev/null
      done
    fi
  } ; } 2>&1 )
  if [ -n "$bin" ]; then
    local got
    got=$(find "$work/prompts" -name '*.status.json' | wc -l)
    [ "$got" -eq "$n" ] || { echo "$bin left $got of $n status sidecars" >&2; exit 1; }
  fi
  awk '{ printf "%d %d\n", $1 * 1e6, ($2 + $3) * 1e6 }' <<<"$t"
}

declare -A wall cpu
labels=("" "$@")
for _ in $(seq "$rounds"); do
  for bin in "${labels[@]}"; do
    read -r w c < <(run "$bin")
    key=${bin:-true}
    if [ -z "${wall[$key]:-}" ] || [ "$w" -lt "${wall[$key]}" ]; then wall[$key]=$w; fi
    if [ -z "${cpu[$key]:-}" ] || [ "$c" -lt "${cpu[$key]}" ]; then cpu[$key]=$c; fi
  done
done
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $n in sequence, best of $rounds rounds (wall and CPU each)"
echo
ms() { echo "scale=3; $1 / $n / 1000" | bc -l | sed 's/^\./0./'; }
printf '| %s | wall per run | minus `true` | CPU per run | minus `true` |\n' "binary"
printf '| --- | ---: | ---: | ---: | ---: |\n'
printf '| %s | %s ms | - | %s ms | - |\n' "true alone" "$(ms "${wall[true]}")" "$(ms "${cpu[true]}")"
for bin in "$@"; do
  printf '| %s | %s ms | %s ms | %s ms | %s ms |\n' "$bin" \
    "$(ms "${wall[$bin]}")" "$(ms $(( ${wall[$bin]} - ${wall[true]} )))" \
    "$(ms "${cpu[$bin]}")" "$(ms $(( ${cpu[$bin]} - ${cpu[true]} )))"
done
