#!/usr/bin/env bash
# Executor memory benchmark (issue 12): the peak RSS of `okstra exec` running
# N trivial jobs (default 10,000) in one stage, against a ceiling.
#
# usage: benches/exec_memory.sh [N]
#   MAX_MB   peak RSS allowed, in MB (default 100)
#
# The project is made by benches/gen_exec_fixture.py (one stage of N v2
# `command` jobs, each writing its own result) and planned once; exec runs
# it at --concurrency 2 under GNU time. Fails (exit 1) when exec does not
# complete every job, or when its peak RSS is above MAX_MB. Also prints the
# plan file's size. Then exec once more on the completed run (a resume,
# which reads its team-state and events log), and `okstra validate
# plan.json` of the same plan, and `okstra status` of the run (text and
# JSON), each under the same ceiling.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10000}
max_mb=${MAX_MB:-100}
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time): apt-get install time" >&2; exit 1; }
cargo build --release --quiet
bin=$PWD/target/release/okstra
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 benches/gen_exec_fixture.py "$n" "$work/p" >/dev/null
(cd "$work/p" && "$bin" plan spec.toml --manifest run/run-manifest.json --out plan.json >/dev/null)
plan_mb=$(awk -v b="$(stat -c %s "$work/p/plan.json")" 'BEGIN {printf "%.1f", b / 1e6}')

status=0
(cd "$work/p" && /usr/bin/time -v "$bin" exec --concurrency 2 plan.json \
  >"$work/exec.out" 2>"$work/time.txt") || status=$?
if [ "$status" -ne 0 ]; then
  echo "okstra exec exited $status, expected 0:" >&2
  grep -v '^\s' "$work/time.txt" | tail -5 >&2
  exit 1
fi
done=$(python3 -c 'import json, sys
rows = json.load(open(sys.argv[1]))["workerDispatches"]
print(sum(r.get("status") == "completed" for r in rows))' "$work/p/run/team-state.json")
if [ "$done" -ne "$n" ]; then
  echo "$done of $n dispatch rows completed" >&2
  exit 1
fi
# peak_mb TIME_FILE: the peak RSS GNU time reported, in MB.
peak_mb() {
  awk '/Maximum resident set size \(kbytes\):/ {printf "%.1f", $NF * 1024 / 1e6}' "$1"
}
# under_ceiling WHAT MB: fail when MB is above the ceiling.
under_ceiling() {
  awk -v m="$2" -v c="$max_mb" 'BEGIN {exit !(m <= c)}' || {
    echo "$1: peak RSS $2 MB is above the ceiling of $max_mb MB" >&2
    exit 1
  }
}

mb=$(peak_mb "$work/time.txt")
wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/time.txt")
echo "okstra exec, $n jobs (plan $plan_mb MB): peak RSS $mb MB, wall $wall (ceiling $max_mb MB)"
under_ceiling "okstra exec" "$mb"

# exec again on the completed run: a resume reads the run's team-state (as
# large as the plan's jobs) and replays its events log, which it streams
# rather than holds: the same ceiling. It runs nothing and says so.
(cd "$work/p" && /usr/bin/time -v "$bin" exec --concurrency 2 plan.json \
  >"$work/resume.out" 2>"$work/rtime.txt") || {
  echo "okstra exec of the completed run failed:" >&2
  grep -v '^\s' "$work/rtime.txt" | tail -5 >&2
  exit 1
}
grep -q "completed by an earlier exec" "$work/rtime.txt" "$work/resume.out" || {
  echo "okstra exec of the completed run did not resume it:" >&2
  tail -5 "$work/rtime.txt" >&2
  exit 1
}
rmb=$(peak_mb "$work/rtime.txt")
echo "okstra exec of the completed run (a resume): peak RSS $rmb MB (ceiling $max_mb MB)"
under_ceiling "okstra exec, resumed" "$rmb"

# `okstra validate` of the same plan reads it the way exec does (streamed,
# never a tree of the whole document): the same ceiling.
(cd "$work/p" && /usr/bin/time -v "$bin" validate plan.json >"$work/validate.out" 2>"$work/vtime.txt") || {
  echo "okstra validate plan.json failed:" >&2
  cat "$work/validate.out" >&2
  exit 1
}
vmb=$(peak_mb "$work/vtime.txt")
echo "okstra validate, the same plan: peak RSS $vmb MB (ceiling $max_mb MB)"
under_ceiling "okstra validate" "$vmb"

# `okstra status` of the completed run, as text and as JSON: it holds the
# team-state's text and makes each row a tree only while it shows it. The
# same ceiling; the JSON must hold every dispatch row.
for format in text json; do
  (cd "$work/p" && /usr/bin/time -v "$bin" status --manifest run/run-manifest.json \
    --format "$format" >"$work/status.$format" 2>"$work/stime.txt") || {
    echo "okstra status --format $format failed:" >&2
    grep -v '^\s' "$work/stime.txt" | tail -5 >&2
    exit 1
  }
  smb=$(peak_mb "$work/stime.txt")
  echo "okstra status --format $format of the completed run: peak RSS $smb MB (ceiling $max_mb MB)"
  under_ceiling "okstra status --format $format" "$smb"
done
rows=$(python3 -c 'import json, sys
print(len(json.load(open(sys.argv[1]))["dispatches"]))' "$work/status.json")
if [ "$rows" -ne "$n" ]; then
  echo "okstra status --format json showed $rows of $n dispatch rows" >&2
  exit 1
fi
