#!/usr/bin/env bash
# Worktrees per worker (issue "must-show"): what making and committing a git
# worktree per job costs okstra, on a repository of 10,000 files, against
# the same done by hand (`git worktree add` + `git commit`).
#
# usage: benches/worktree.sh [--jobs N] [--runs R] [--concurrency C] [--files F]
#   --jobs N          jobs (worktrees) per run (default 16)
#   --runs R          timed runs of each side; best and median reported (default 5)
#   --concurrency C   okstra's `--concurrency` and the by-hand side's
#                     parallelism (default 1: by hand one job after another;
#                     C > 1 runs C by-hand jobs at once, `xargs -P C`)
#   --files F         files in the repository (default 10000: 100 directories
#                     of F/100 files of about 300 bytes, one commit)
#   OKSTRA_BENCH_GITLOG=DIR  profile: in the timed runs every git call goes
#                     through a wrapper logging its start, duration and
#                     subcommand to DIR/<side>-<run>.log (the wrapper's cost
#                     is in the times then: they are not the figures)
#   OKSTRA_BIN=PATH   the okstra to time (default: the release build,
#                     ${CARGO_TARGET_DIR:-target}/release/okstra, built first;
#                     okstra-worker must lie beside it)
#
# Every job is a `command` implementer (`plannedPaths = ["src/**"]`) with
# `worktree = "git"` whose script edits one file in its worktree (its cwd)
# and writes its result to "$OKSTRA_RESULT_PATH". Three things are timed:
#
# - okstra, "bare": `confinement = "none"`, `mutationAudit = "none"`, so the
#   run is okstra's own bookkeeping plus its git: per job the branch and
#   worktree made at the planned base (update-ref, `git worktree add
#   --no-checkout`, `git reset --hard`: a 10,000-file checkout), then the
#   commit of what it changed with its trailers;
# - okstra, "audit": the same jobs with the default mutation audit
#   (`mutationAudit = "batch"`, still `confinement = "none"`), whose walks
#   take in every worktree of the stage (10,000 files each);
# - by hand: per job `git worktree add -b <branch> <path> HEAD`, the same
#   script run by `sh -c` in the worktree with the same variables, then
#   `git -C <path> add -A` and `git -C <path> commit -q` with the same five
#   trailers (`--trailer`), in the same repository.
#
# `okstra plan` is timed too (once per variant, as it runs before the
# copies are made), and reported beside, not in the ratio. Each timed run
# starts from a pristine copy of the planned repository (`cp -a`, at the
# same path, since the plan names the project root absolutely; the copy is
# synced and not timed), so no side pays for the other's worktrees, and the
# last run's tree is moved aside rather than deleted (see exec.sh on ext4's
# inode allocator). Rounds alternate the three. After every okstra run the
# script checks that it left N branches `okstra/<task>/<key>`, each exactly
# one commit past the base, carrying its Okstra-Dispatch-Id trailer, and
# every by-hand run that it left N branches of one commit: a run that did
# not is not timed, the script fails.
#
# The working trees go under $TMPDIR (each copy holds the repository, N
# worktrees of it, about 40 MB x (N + 1) on disk at the defaults). Each
# side's best and median wall time are reported, with its best CPU time
# (user + system of everything the timed run waited for), and the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=16 runs=5 conc=1 files=10000
while [ $# -gt 0 ]; do
  case $1 in
    --jobs) jobs=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --concurrency) conc=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [ -z "${OKSTRA_BIN:-}" ]; then
  cargo build --release --quiet
  bin=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/release/okstra
else
  bin=$OKSTRA_BIN
fi
[ -x "$bin" ] || { echo "no okstra at $bin" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The same git for every side: nobody's global config, hooks or identity.
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
gitlog=${OKSTRA_BENCH_GITLOG:-}
if [ -n "$gitlog" ]; then
  mkdir -p "$gitlog" "$work/gitlog-bin"
  gitlog=$(cd "$gitlog" && pwd)
  sed "s#@GIT@#$(command -v git)#" >"$work/gitlog-bin/git" <<'WRAP'
#!/bin/bash
t0=$(date +%s%N)
"@GIT@" "$@"
rc=$?
t1=$(date +%s%N)
args=(); skip=0
for a in "$@"; do
  if [ $skip = 1 ]; then skip=0; continue; fi
  case $a in -c|-C) skip=1; continue ;; --git-dir=*|--work-tree=*|-q|--end-of-options) continue ;; esac
  args+=("$a")
done
[ -z "${OKSTRA_BENCH_GITLOG_FILE:-}" ] || echo "$t0 $(( (t1 - t0) / 1000 )) ${args[*]:0:2}" >>"$OKSTRA_BENCH_GITLOG_FILE"
exit $rc
WRAP
  chmod +x "$work/gitlog-bin/git"
  export PATH=$work/gitlog-bin:$PATH
fi
task=bench-task
now_ns() { date +%s%N; }
# The CPU time (user + system, in clock ticks) of every child this shell
# has waited for, into the variable $1: read in place, since a command
# substitution would be a shell of its own.
cpu_ticks() { local st; read -ra st </proc/$BASHPID/stat; printf -v "$1" %d $(( st[15] + st[16] )); }
ticks_ms=$(( 1000 / $(getconf CLK_TCK) ))

# The worker's script: one file of the checkout edited in its cwd, and the
# result written where okstra (or the by-hand loop) says.
# shellcheck disable=SC2016
script='set -eu
printf "edited by %s\n" "$OKSTRA_WORKER_KEY" >> src/d00/f00.txt
mkdir -p "$(dirname "$OKSTRA_RESULT_PATH")"
echo done > "$OKSTRA_RESULT_PATH"'

# fixture NAME AUDIT: the repository (files, spec, prompts, manifest, one
# commit), planned; kept as NAME.pristine. AUDIT: none or batch.
fixture() {
  local name=$1 audit=$2 dir=$work/$1 i key per
  mkdir -p "$dir/run" "$dir/prompts"
  per=$(( files / 100 ))
  python3 - "$dir/src" "$per" <<'PY'
import os, sys
root, per = sys.argv[1], int(sys.argv[2])
line = "lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod\n"
for d in range(100):
    sub = os.path.join(root, f"d{d:02}")
    os.makedirs(sub)
    for f in range(per):
        with open(os.path.join(sub, f"f{f:02}.txt"), "w") as out:
            out.write(f"d{d:02}/f{f:02}\n" + line * 4)
PY
  cat >"$dir/run/run-manifest.json" <<EOF
{"taskKey": "$task", "teamStatePath": "run/team-state.json", "terminalBackend": "cli-wrapper",
 "workflow": {"currentPhase": "implementation"}, "recommendedWorkers": ["claude", "codex"]}
EOF
  {
    printf '[defaults]\nprovider = "command"\nrole = "implementer"\nworktree = "git"\n'
    printf 'confinement = "none"\nmutationAudit = "%s"\nplannedPaths = ["src/**"]\n\n' "$audit"
    printf '[[stages]]\nname = "edit"\n\n'
    for i in $(seq -w 1 "$jobs"); do
      key=w$i
      printf '# work\n' >"$dir/prompts/$key.md"
      printf '[[stages.workers]]\nworkerId = "%s"\npromptPath = "prompts/%s.md"\n' "$key" "$key"
      printf 'resultPath = "results/%s.md"\n' "$key"
      printf "command = [\"sh\", \"-c\", '''\n%s''']\n\n" "$script"
    done
  } >"$dir/spec.toml"
  printf 'results/\nrun/*\n!run/run-manifest.json\nplan.json\n.okstra/\nprompts/*.log\nprompts/*.status.json\n' >"$dir/.gitignore"
  git -C "$dir" init -q -b main
  git -C "$dir" add -A
  # 10,000 loose objects would start a detached `git gc --auto` under the
  # copies: pack them now, as a repository of that size would be.
  git -C "$dir" -c gc.auto=0 -c user.name=user -c user.email=user@example.com commit -q -m "the project"
  git -C "$dir" gc -q
  local t0 t1
  t0=$(now_ns)
  (cd "$dir" && "$bin" plan spec.toml --manifest run/run-manifest.json --out plan.json >/dev/null) || {
    echo "okstra plan failed on $name" >&2; exit 1; }
  t1=$(now_ns)
  plan_ms[$name]=$(( (t1 - t0) / 1000000 ))
  cp -a "$dir" "$dir.pristine"
}

# set_aside NAME: move the last run's tree out of the way.
set_aside() {
  mkdir -p "$work/trash"
  [ -e "$work/$1" ] || return 0
  mv "$work/$1" "$(mktemp -d "$work/trash/$1.XXXXXX")/"
}

fresh() { set_aside "$1"; cp -a "$work/$1.pristine" "$work/$1"; sync; }

# check_branches DIR PREFIX WHO [TRAILER]: N branches under PREFIX, each one
# commit past main; with TRAILER, each commit carries it.
check_branches() {
  local dir=$1 prefix=$2 who=$3 trailer=${4:-} base got b n
  base=$(git -C "$dir" rev-parse main)
  got=$(git -C "$dir" for-each-ref --format='%(refname)' "refs/heads/$prefix/" | wc -l)
  [ "$got" -eq "$jobs" ] || { echo "$who left $got branches under $prefix/, not $jobs" >&2; exit 1; }
  for b in $(git -C "$dir" for-each-ref --format='%(refname)' "refs/heads/$prefix/"); do
    n=$(git -C "$dir" rev-list --count "$base..$b")
    [ "$n" -eq 1 ] || { echo "$who: $b is $n commits past the base, not 1" >&2; exit 1; }
    if [ -n "$trailer" ] && [ -z "$(git -C "$dir" show -s --format="%(trailers:key=$trailer,valueonly)" "$b")" ]; then
      echo "$who: $b's commit has no $trailer trailer" >&2; exit 1
    fi
    git -C "$dir" diff --quiet "$base" "$b" -- src/d00/f00.txt && {
      echo "$who: $b does not hold the edit" >&2; exit 1; }
  done
  return 0
}

time_okstra() { # NAME -> "wall_us:cpu_ms"
  local name=$1 dir=$work/$1 t0 t1 c0 c1
  fresh "$name"
  cpu_ticks c0
  t0=$(now_ns)
  (cd "$dir" && OKSTRA_BENCH_GITLOG_FILE=${gitlog:+$gitlog/$name-$round.log} \
    "$bin" exec --concurrency "$conc" plan.json >/dev/null 2>"$work/$name.exec.log") || {
    echo "okstra exec failed on $name:" >&2; tail -5 "$work/$name.exec.log" >&2; exit 1; }
  t1=$(now_ns)
  cpu_ticks c1
  check_branches "$dir" "okstra/$task" "okstra ($name)" Okstra-Dispatch-Id
  echo "$(( (t1 - t0) / 1000 )):$(( (c1 - c0) * ticks_ms ))"
}

# hand_job DIR KEY DIGEST: one job by hand, as okstra does it.
hand_job() {
  local dir=$1 key=$2 digest=$3 wt=$1/.okstra/worktrees/$task/$2 branch=okstra/$task/$2
  git -C "$dir" worktree add -q -b "$branch" "$wt" HEAD
  (cd "$wt" && OKSTRA_WORKER_KEY=$key OKSTRA_RESULT_PATH=$dir/results/$key.md \
    OKSTRA_PROJECT_ROOT=$dir OKSTRA_WORKTREE=$wt sh -c "$script")
  git -C "$wt" add -A
  git -C "$wt" -c user.name=okstra -c user.email=okstra@localhost commit -q --no-verify \
    -m "okstra: $key (attempt 1)" \
    --trailer "Okstra-Task: $task" --trailer "Okstra-Plan-Digest: $digest" \
    --trailer "Okstra-Dispatch-Id: ${digest:7:16}/$key/attempt-1" \
    --trailer "Okstra-Model: command" --trailer "Okstra-Usage: not reported"
}
export -f hand_job
export script task

time_hand() { # NAME -> "wall_us:cpu_ms"
  local name=$1 dir=$work/$1 t0 t1 c0 c1 digest
  fresh "$name"
  digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["digest"])' "$dir/plan.json")
  cpu_ticks c0
  t0=$(now_ns)
  export OKSTRA_BENCH_GITLOG_FILE=${gitlog:+$gitlog/$name-$round.log}
  if [ "$conc" -le 1 ]; then
    for i in $(seq -w 1 "$jobs"); do hand_job "$dir" "w$i" "$digest"; done
  else
    seq -w 1 "$jobs" | sed 's/^/w/' | xargs -P "$conc" -I{} bash -c 'hand_job "$1" "$2" "$3"' _ "$dir" {} "$digest"
  fi
  t1=$(now_ns)
  cpu_ticks c1
  unset OKSTRA_BENCH_GITLOG_FILE
  check_branches "$dir" "okstra/$task" "by hand" Okstra-Dispatch-Id
  echo "$(( (t1 - t0) / 1000 )):$(( (c1 - c0) * ticks_ms ))"
}

declare -A plan_ms
declare -A times
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr)"
echo "okstra $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty') ($bin), $(git --version)"
echo "$jobs jobs, $files files, concurrency $conc, $runs runs each; load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

fixture bare none
fixture audit batch
# The by-hand side runs on the bare fixture's copy (its plan is only read
# for the digest in the trailers).
cp -a "$work/bare.pristine" "$work/hand.pristine"

for round in $(seq "$runs"); do
  times[bare]+="$(time_okstra bare) "
  times[hand]+="$(time_hand hand) "
  times[audit]+="$(time_okstra audit) "
  echo "run $round of $runs: done" >&2
done
set_aside bare; set_aside audit; set_aside hand
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

python3 - "$jobs" "$conc" "${plan_ms[bare]}" "${plan_ms[audit]}" "${times[bare]}" "${times[audit]}" "${times[hand]}" <<'PY'
import statistics, sys
jobs, conc, plan_bare, plan_audit = (int(x) for x in sys.argv[1:5])
def parse(arg):
    pairs = [x.split(":") for x in arg.split()]
    return [int(w) / 1e6 for w, _ in pairs], [int(c) / 1e3 for _, c in pairs]
(bare, bare_cpu), (audit, audit_cpu), (hand, hand_cpu) = (parse(a) for a in sys.argv[5:8])
by_hand = "by hand, one after another" if conc <= 1 else f"by hand, {conc} at once"
rows = [
    (f"okstra exec -c{conc}, no audit (`mutationAudit = \"none\"`)", bare, bare_cpu),
    (f"okstra exec -c{conc}, default audit (`batch`)", audit, audit_cpu),
    (by_hand, hand, hand_cpu),
]
hb, hm, hc = min(hand), statistics.median(hand), min(hand_cpu)
print(f"| {jobs} worktrees | best wall | median wall | best CPU | best / by hand | median / by hand | best CPU / by hand |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for label, t, c in rows:
    b, m, bc = min(t), statistics.median(t), min(c)
    print(f"| {label} | {b:.2f} s | {m:.2f} s | {bc:.2f} s | {b / hb:.2f}x | {m / hm:.2f}x | {bc / hc:.2f}x |")
print()
fmt = lambda xs: " ".join(f"{x:.2f}" for x in xs)
print(f"every run, wall (s): okstra no audit {fmt(bare)}; audit {fmt(audit)}; by hand {fmt(hand)}")
print(f"every run, CPU (s): okstra no audit {fmt(bare_cpu)}; audit {fmt(audit_cpu)}; by hand {fmt(hand_cpu)}")
print(f"okstra plan (not in the ratio): {plan_bare} ms (no audit), {plan_audit} ms (audit)")
r = min(bare) / hb
print(f"okstra / by hand, no audit, best wall: {r:.2f}x (target <= 1.2x: {'met' if r <= 1.2 else 'MISSED'})")
PY
