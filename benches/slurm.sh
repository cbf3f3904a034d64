#!/usr/bin/env bash
# Slurm benchmark (issue 16): the same N trivial jobs through okstra's Slurm
# backend (`okstra exec`, one held `sbatch` per job, recorded, released, one
# `squeue` per poll) and as one `sbatch --array` waited for by polling
# `squeue` every 0.1 s, side by side, alternating, on the same cluster.
#
# usage: benches/slurm.sh [runs]      (default 3 runs of each; best and median)
#   OKSTRA_BENCH_JOBS=200              job count
#
# Every job is `sh -c ': > "$1"'` on its own result file: okstra runs it as
# the job's command under `okstra-worker` (the wrapper, with its status
# sidecar and log), the array task runs the same command line directly.
# The jobs opt out of the mutation audit, as in benches/exec.sh, so what is
# timed is dispatching. Each okstra run starts from a pristine copy of the
# planned project, at the same path.
#
# Needs a cluster: $SLURM_CONF, or one this script starts (as root) with
# scripts/slurm-cluster.sh and stops again at the end. A cluster that
# scripts/slurm-cluster.sh finds already up (someone else's, in the same
# $OKSTRA_SLURM_DIR) is used but never stopped; to keep off a shared one,
# give this run a directory and ports of its own, e.g.
# `OKSTRA_SLURM_DIR=/tmp/my-slurm OKSTRA_SLURM_PORT=7817 benches/slurm.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
n=${OKSTRA_BENCH_JOBS:-200}

started_cluster=
if [ -z "${SLURM_CONF:-}" ] || ! sinfo -h >/dev/null 2>&1; then
  slurm_dir=${OKSTRA_SLURM_DIR:-/tmp/okstra-slurm}
  # `up` answers "already up" for a cluster it did not start now: `down`
  # at the end must not stop that one.
  if ! { [ -s "$slurm_dir/slurmctld.pid" ] && kill -0 "$(cat "$slurm_dir/slurmctld.pid")" 2>/dev/null; }; then
    started_cluster=1
  fi
  eval "$(scripts/slurm-cluster.sh up)"
fi

cargo build --release --quiet
bin=$PWD/target/release/okstra
work=$(mktemp -d)
cleanup() {
  rm -rf "$work"
  if [ -n "$started_cluster" ]; then scripts/slurm-cluster.sh down; fi
}
trap cleanup EXIT

now_ns() { date +%s%N; }

# Planned at the path every run uses (a plan names its absolute project
# root), then kept aside pristine.
python3 benches/gen_exec_fixture.py "$n" "$work/p" >/dev/null
sed -i 's/^\[defaults\]$/[defaults]\nbackend = "slurm"/' "$work/p/spec.toml"
(cd "$work/p" && "$bin" plan spec.toml --manifest run/run-manifest.json --out plan.json >/dev/null)
cp -a "$work/p" "$work/pristine"

cat >"$work/array.sh" <<'EOF'
#!/bin/sh
exec sh -c ': > "$1"' sh "results/w$(printf %05d "$SLURM_ARRAY_TASK_ID").md"
EOF

# okstra: exec the planned project; every job must complete.
run_okstra() {
  rm -rf "$work/p"
  cp -a "$work/pristine" "$work/p"
  sync
  local t0 t1
  t0=$(now_ns)
  (cd "$work/p" && "$bin" exec plan.json >/dev/null 2>"$work/okstra.err") || {
    echo "okstra exec failed:" >&2
    tail -20 "$work/okstra.err" >&2
    exit 1
  }
  t1=$(now_ns)
  [ "$(ls "$work/p/results" | wc -l)" -eq "$n" ] || { echo "okstra: not every result was written" >&2; exit 1; }
  # Every attempt must have gone through Slurm (a job id on its dispatch
  # record), not run on this machine: timing a local run here proves nothing.
  local via
  via=$(grep -c '"type":"worker-dispatched".*"slurmJobId"' "$work/p/run/lead-events.jsonl" || true)
  [ "$via" -eq "$n" ] || {
    echo "okstra: only $via of $n dispatches went through Slurm (the rest ran locally); the run is not valid" >&2
    exit 1
  }
  echo $(((t1 - t0) / 1000000))
}

# The array: one sbatch, then poll until no task is left.
run_array() {
  rm -rf "$work/a"
  mkdir -p "$work/a/results"
  sync
  local t0 t1 id
  t0=$(now_ns)
  id=$(sbatch --parsable --array=0-$((n - 1)) --chdir="$work/a" --output=/dev/null "$work/array.sh")
  while [ -n "$(squeue -h -j "$id" -o %i 2>/dev/null)" ]; do sleep 0.1; done
  t1=$(now_ns)
  [ "$(ls "$work/a/results" | wc -l)" -eq "$n" ] || { echo "array: not every result was written" >&2; exit 1; }
  echo $(((t1 - t0) / 1000000))
}

okstra_ms=()
array_ms=()
for r in $(seq "$runs"); do
  # Alternate which goes first, so drift on a shared machine hits both.
  if [ $((r % 2)) -eq 1 ]; then
    okstra_ms+=("$(run_okstra)")
    array_ms+=("$(run_array)")
  else
    array_ms+=("$(run_array)")
    okstra_ms+=("$(run_okstra)")
  fi
  echo "run $r: okstra ${okstra_ms[-1]} ms, array ${array_ms[-1]} ms" >&2
done

stats() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {printf "%d %d", a[1], a[int((NR+1)/2)]}'; }
read -r ob om <<<"$(stats "${okstra_ms[@]}")"
read -r ab am <<<"$(stats "${array_ms[@]}")"
echo
echo "$n trivial jobs on Slurm, $runs runs each (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
printf '%-34s %10s %10s\n' "" "best" "median"
printf '%-34s %8d ms %8d ms\n' "okstra exec (slurm backend)" "$ob" "$om"
printf '%-34s %8d ms %8d ms\n' "sbatch --array + squeue polling" "$ab" "$am"
awk -v o="$ob" -v a="$ab" -v om="$om" -v am="$am" 'BEGIN {printf "okstra / array: %.2fx best, %.2fx median\n", o / a, om / am}'
