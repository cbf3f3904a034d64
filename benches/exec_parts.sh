#!/usr/bin/env bash
# Where okstra exec's per-job time goes: the jobs of benches/exec.sh, run
# five ways side by side, so that each difference is one part's cost.
#
#   xargs -P2 sh                   the job alone (exec.sh's baseline)
#   xargs -P2 okstra-worker        + the wrapper (start-up, status sidecar,
#                                    spawning and reaping the job), unconfined
#   xargs -P2 okstra-worker auto   + Landlock in the wrapper (a thread that
#                                    restricts itself and starts the job, the
#                                    private TMPDIR)
#   okstra exec -c2 (none)         + the executor (dispatch record and its
#                                    fdatasync, the gate, settling, events,
#                                    team-state), unconfined
#   okstra exec -c2 (auto)         the default: all of it
#
# The wrappers under xargs get exactly the argv exec gives them (from the
# plan), but no `--gated` (xargs has no byte to release them with) and no log
# handed over. Wall time and CPU time (user + system of everything started,
# from GNU time) per job, best of the runs each, the variants alternating in
# every round. It also times the fdatasync exec pays per launch batch on the
# critical path (a 200-byte append and fdatasync, 200 times, on the same
# file system).
#
# usage: benches/exec_parts.sh [runs]   (default 5)
#   OKSTRA_BENCH_JOBS=1000   jobs
#   OKSTRA_BENCH_BASELINE=BIN  also run the okstra-worker and okstra exec
#                            variants with another okstra build (BIN, its
#                            okstra-worker beside it), in the same rounds
# Trees go under $TMPDIR, as in benches/exec.sh (see "Where to run it").
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
n=${OKSTRA_BENCH_JOBS:-1000}
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time): apt-get install time" >&2; exit 1; }
cargo build --release --quiet
bin=$PWD/target/release/okstra
worker=$PWD/target/release/okstra-worker
baseline=${OKSTRA_BENCH_BASELINE:-}
if [ -n "$baseline" ]; then
  base_worker=$(dirname "$baseline")/okstra-worker
  [ -x "$baseline" ] && [ -x "$base_worker" ] || { echo "$baseline and an okstra-worker beside it are needed" >&2; exit 1; }
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for v in none auto; do
  python3 benches/gen_exec_fixture.py "$n" "$work/$v" --confinement "$v" >/dev/null
  (cd "$work/$v" && "$bin" plan spec.toml --manifest run/run-manifest.json --out plan.json >/dev/null)
  # Each job's wrapper arguments as the plan has them (after `okstra
  # worker`), NUL-separated; every job has the same number of them.
  python3 - "$work/$v/plan.json" "$worker" "$work/$v.args" "$work/$v.count" <<'PY'
import json, sys
plan, worker, out, count = sys.argv[1:]
jobs = [j for s in json.load(open(plan))["stages"] for j in s["jobs"]]
argvs = [j["command"][2:] for j in jobs]
assert len({len(a) for a in argvs}) == 1
with open(out, "wb") as f:
    for a in argvs:
        f.write(b"".join(x.encode() + b"\0" for x in a))
open(count, "w").write(str(len(argvs[0])))
PY
  cp -a "$work/$v" "$work/$v.pristine"
done

set_aside() { # NAME: moved out of the way, deleted at the end (see exec.sh)
  [ -e "$work/$1" ] || return 0
  mkdir -p "$work/trash"
  mv "$work/$1" "$(mktemp -d "$work/trash/$1.XXXXXX")/"
}
fresh() { set_aside "$1"; cp -a "$work/$1.pristine" "$work/$1"; sync; }
check() { # NAME WHAT
  local got
  got=$(find "$work/$1/results" -name 'w*.md' | wc -l)
  [ "$got" -eq "$n" ] || { echo "$2 left $got of $n results; the run is not valid" >&2; exit 1; }
}

# timed NAME CMD... -> "wall_us cpu_us" of CMD run in $work/NAME.
timed() {
  local name=$1; shift
  fresh "$name"
  (cd "$work/$name" && /usr/bin/time -f '%e %U %S' -o "$work/time.txt" "$@" >/dev/null 2>"$work/err.txt") || {
    echo "failed: $*" >&2; tail -5 "$work/err.txt" >&2; exit 1; }
  check "$name" "$*"
  awk '{ printf "%d %d\n", $1 * 1e6, ($2 + $3) * 1e6 }' "$work/time.txt"
}

run_variant() {
  case $1 in
    xargs-sh) timed none xargs -P2 -n1 -a jobs.txt sh -c ': > "$1"' sh ;;
    xargs-worker-none) timed none xargs -0 -P2 -n "$(cat "$work/none.count")" -a "$work/none.args" "$worker" ;;
    xargs-worker-auto) timed auto xargs -0 -P2 -n "$(cat "$work/auto.count")" -a "$work/auto.args" "$worker" ;;
    exec-none) timed none "$bin" exec --concurrency 2 plan.json ;;
    exec-auto) timed auto "$bin" exec --concurrency 2 plan.json ;;
    base-xargs-worker-none) timed none xargs -0 -P2 -n "$(cat "$work/none.count")" -a "$work/none.args" "$base_worker" ;;
    base-xargs-worker-auto) timed auto xargs -0 -P2 -n "$(cat "$work/auto.count")" -a "$work/auto.args" "$base_worker" ;;
    base-exec-none) timed none "$baseline" exec --concurrency 2 plan.json ;;
    base-exec-auto) timed auto "$baseline" exec --concurrency 2 plan.json ;;
  esac
}

variants=(xargs-sh xargs-worker-none xargs-worker-auto exec-none exec-auto)
if [ -n "$baseline" ]; then
  variants+=(base-xargs-worker-none base-xargs-worker-auto base-exec-none base-exec-auto)
fi
declare -A wall cpu
for _ in $(seq "$runs"); do
  for v in "${variants[@]}"; do
    read -r w c < <(run_variant "$v")
    if [ -z "${wall[$v]:-}" ] || [ "$w" -lt "${wall[$v]}" ]; then wall[$v]=$w; fi
    if [ -z "${cpu[$v]:-}" ] || [ "$c" -lt "${cpu[$v]}" ]; then cpu[$v]=$c; fi
  done
done

sync_us=$(python3 - "$work" <<'PY'
import os, sys, time
path = os.path.join(sys.argv[1], "sync-probe")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
best, total, line = None, 0.0, b"x" * 199 + b"\n"
for _ in range(200):
    t0 = time.perf_counter()
    os.write(fd, line)
    os.fdatasync(fd)
    dt = time.perf_counter() - t0
    total += dt
    best = dt if best is None else min(best, dt)
os.close(fd)
print(f"{total / 200 * 1e6:.0f} {best * 1e6:.0f}")
PY
)

echo "machine: $(nproc) cores, $(uname -sr), load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$n jobs, best of $runs rounds each (wall and CPU separately); TMPDIR=${TMPDIR:-/tmp}${baseline:+; base- rows: $baseline}"
echo
ms() { awk -v us="$1" -v n="$n" 'BEGIN { printf "%.3f ms", us / n / 1000 }'; }
printf '| variant | wall per job | CPU per job |\n| --- | ---: | ---: |\n'
for v in "${variants[@]}"; do
  printf '| %s | %s | %s |\n' "$v" "$(ms "${wall[$v]}")" "$(ms "${cpu[$v]}")"
done
echo
part() { # LABEL A B
  printf '| %s | %s | %s |\n' "$1" "$(ms $(( wall[$3] - wall[$2] )))" "$(ms $(( cpu[$3] - cpu[$2] )))"
}
printf '| part | wall per job | CPU per job |\n| --- | ---: | ---: |\n'
part "the wrapper (unconfined)" xargs-sh xargs-worker-none
part "Landlock in the wrapper" xargs-worker-none xargs-worker-auto
part "the executor (unconfined)" xargs-worker-none exec-none
part "the executor (confined jobs)" xargs-worker-auto exec-auto
part "confinement, all told (exec auto - exec none)" exec-none exec-auto
if [ -n "$baseline" ]; then
  part "baseline: Landlock in the wrapper" base-xargs-worker-none base-xargs-worker-auto
  part "baseline: confinement, all told" base-exec-none base-exec-auto
fi
echo
read -r sm sb <<<"$sync_us"
echo "append + fdatasync on this file system: mean ${sm} us, best ${sb} us (200 calls)"
