#!/usr/bin/env bash
# Executor benchmark (issue "okstra exec"): run the same N trivial jobs
# through `okstra exec --concurrency 2`, `xargs -P2` and GNU parallel
# (`-j2 --joblog`), side by side in one run, and report the per-job overhead.
#
# usage: benches/exec.sh [runs]      (default 3 runs of each; the best counts)
#   OKSTRA_BENCH_SIZES="1000 5000"   job counts (default)
#   OKSTRA_BENCH_BASELINE=BIN        also time another okstra build, side by
#                                    side in the same rounds (a change is
#                                    judged against its parent this way: on
#                                    a shared machine the table moves more
#                                    between runs than a change moves it);
#                                    with the confined variant, the baseline
#                                    runs it too
#   OKSTRA_BENCH_CONFINED=1          also time the same jobs confined by
#                                    Landlock (`confinement = "auto"`), side
#                                    by side with the unconfined ones (0 skips;
#                                    skipped where the kernel has no Landlock)
#   OKSTRA_BENCH_AUDIT_FILES=200     source files in the audit variant's tree
#                                    (0 skips the variant)
#   OKSTRA_BENCH_AUDIT_SIZES="100 200 400"  job counts of the audit variant:
#                                    okstra exec alone, the default
#                                    `mutationAudit = "batch"`; its settle
#                                    grows faster than linearly with the batch
#                                    (see benches/README.md), so it runs on
#                                    smaller batches
#
# Every job is `sh -c ': > "$1"'` on its own result file: okstra runs it as
# the job's command (under `okstra-worker`, so two execs per job), xargs and
# parallel run the identical command line once each. Every okstra run starts
# from a pristine copy of the planned project (a completed plan is not run
# again on resume, so state must not carry over), at the same path so the
# plan's absolute project root holds. Rounds alternate the tools so drift on a
# shared machine hits all three alike.
#
# Working trees go under $TMPDIR (see benches/README.md, "Where to run it":
# on a journal-less ext4 the figures depend on what was deleted in the last
# minutes). Needs GNU parallel; when it is missing the script installs it with
# `apt-get update && apt-get install -y parallel` (root, Debian/Ubuntu).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
sizes=${OKSTRA_BENCH_SIZES:-1000 5000}
audit_files=${OKSTRA_BENCH_AUDIT_FILES:-200}
audit_sizes=${OKSTRA_BENCH_AUDIT_SIZES:-100 200 400}
confined=${OKSTRA_BENCH_CONFINED:-1}

if ! parallel --version 2>/dev/null | grep -q 'GNU parallel'; then
  echo "GNU parallel is not installed: installing it (apt-get update && apt-get install -y parallel)" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq parallel >&2
  parallel --version | grep -q 'GNU parallel' || { echo "still no GNU parallel; giving up" >&2; exit 1; }
fi

cargo build --release --quiet
bin=$PWD/target/release/okstra
if [ "$confined" = 1 ] && ! "$bin" doctor --format json | grep -q 'landlock-abi'; then
  echo "this kernel offers no Landlock: the confined variant is skipped" >&2
  confined=0
fi
baseline=${OKSTRA_BENCH_BASELINE:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

now_ns() { date +%s%N; }

# fixture N NAME [--audit FILES]: generate, plan, and keep a pristine copy.
# PLANNER (default: this build) plans it: the baseline runs a plan of its
# own making, since a plan of a newer format is refused by an older okstra.
fixture() {
  local n=$1 name=$2; shift 2
  python3 benches/gen_exec_fixture.py "$n" "$work/$name" "$@"
  (cd "$work/$name" && "${PLANNER:-$bin}" plan spec.toml --manifest run/run-manifest.json --out plan.json >/dev/null)
  cp -a "$work/$name" "$work/$name.pristine"
}

# set_aside NAME...: move trees out of the way, into $work/trash.
set_aside() {
  mkdir -p "$work/trash"
  local name dest
  for name in "$@"; do
    [ -e "$work/$name" ] || continue
    dest=$(mktemp -d "$work/trash/$name.XXXXXX") || { echo "cannot set $name aside (disk full?)" >&2; exit 1; }
    mv "$work/$name" "$dest/"
  done
}

# fresh NAME: the project as planned, nothing run yet, settled on disk. The
# last run's tree is moved aside, not deleted: on ext4 without a journal the
# inode allocator skips inodes freed in the last 30 s, one by one, so deleting
# a run's thousands of files just before the next timed run makes every file
# that run creates slower, a cost of the benchmark rather than of the tool
# timed (and it hits okstra, which writes a log and a status sidecar per job,
# three times as hard as xargs). The copy is synced so that its writeback does
# not land in the timed run. The moved trees go with $work at the end.
fresh() {
  set_aside "$1"
  cp -a "$work/$1.pristine" "$work/$1"
  sync
}

check_results() { # NAME N TOOL
  local got
  got=$(find "$work/$1/results" -name 'w*.md' | wc -l)
  if [ "$got" -ne "$2" ]; then
    echo "$3 left $got of $2 results in $1; the run is not valid" >&2
    exit 1
  fi
}

time_okstra() { # NAME N [BIN] -> us
  fresh "$1"
  local t0 t1 exe=${3:-$bin}
  t0=$(now_ns)
  (cd "$work/$1" && "$exe" exec --concurrency 2 plan.json >/dev/null 2>"$work/$1.exec.log") || {
    echo "okstra exec failed on $1:" >&2; tail -5 "$work/$1.exec.log" >&2; exit 1; }
  t1=$(now_ns)
  check_results "$1" "$2" okstra
  echo $(( (t1 - t0) / 1000 ))
}

time_xargs() { # NAME N -> us
  fresh "$1"
  local t0 t1
  t0=$(now_ns)
  (cd "$work/$1" && xargs -P2 -n1 sh -c ': > "$1"' sh <jobs.txt)
  t1=$(now_ns)
  check_results "$1" "$2" xargs
  echo $(( (t1 - t0) / 1000 ))
}

time_parallel() { # NAME N -> us
  fresh "$1"
  local t0 t1
  t0=$(now_ns)
  (cd "$work/$1" && parallel --will-cite -j2 --joblog "$work/$1.joblog" -q sh -c ': > "$1"' sh :::: jobs.txt)
  t1=$(now_ns)
  check_results "$1" "$2" parallel
  [ "$(($(wc -l <"$work/$1.joblog") - 1))" -eq "$2" ] || { echo "parallel's joblog is short" >&2; exit 1; }
  echo $(( (t1 - t0) / 1000 ))
}

min() { if [ -z "$1" ] || [ "$2" -lt "$1" ]; then echo "$2"; else echo "$1"; fi; }

# keep_best KEY TOOL NAME N [ARG]: run one timing and keep the best. The
# timing runs in a command substitution of its own, so that a failed run stops
# the script (set -e) instead of passing an empty time on.
keep_best() {
  local us key=$1 tool=$2; shift 2
  us=$("time_$tool" "$@")
  best[$key]=$(min "${best[$key]:-}" "$us")
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr)"
echo "okstra $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty'), $(xargs --version | head -1), $(parallel --will-cite --version | head -1)"
echo "okstra: cargo build --release (exec starts okstra-worker, beside it)${baseline:+; baseline: $baseline}"
echo "best of $runs runs each; per job = wall time / N; load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

declare -A best
for n in $sizes; do
  fixture "$n" "plain-$n"
  if [ "$confined" = 1 ]; then
    fixture "$n" "confined-$n" --confinement auto
  fi
  if [ -n "$baseline" ]; then
    PLANNER=$baseline fixture "$n" "base-plain-$n"
    if [ "$confined" = 1 ]; then
      PLANNER=$baseline fixture "$n" "base-confined-$n" --confinement auto
    fi
  fi
  for _ in $(seq "$runs"); do
    keep_best "okstra-$n" okstra "plain-$n" "$n"
    if [ "$confined" = 1 ]; then
      keep_best "confined-$n" okstra "confined-$n" "$n"
    fi
    if [ -n "$baseline" ]; then
      keep_best "baseline-$n" okstra "base-plain-$n" "$n" "$baseline"
      if [ "$confined" = 1 ]; then
        keep_best "baseline-confined-$n" okstra "base-confined-$n" "$n" "$baseline"
      fi
    fi
    keep_best "xargs-$n" xargs "plain-$n" "$n"
    keep_best "parallel-$n" parallel "plain-$n" "$n"
  done
  set_aside "plain-$n" "plain-$n.pristine" "confined-$n" "confined-$n.pristine" \
    "base-plain-$n" "base-plain-$n.pristine" "base-confined-$n" "base-confined-$n.pristine"
done
if [ "$audit_files" -gt 0 ]; then
  for n in $audit_sizes; do
    fixture "$n" "audit-$n" --audit "$audit_files"
    for _ in $(seq "$runs"); do
      keep_best "audit-$n" okstra "audit-$n" "$n"
    done
    set_aside "audit-$n" "audit-$n.pristine"
  done
fi

args=()
for n in $sizes; do
  args+=("$n" "${best[okstra-$n]}" "${best[confined-$n]:-0}" "${best[baseline-$n]:-0}" "${best[xargs-$n]}" "${best[parallel-$n]}" "${best[baseline-confined-$n]:-0}")
done
audit=()
if [ "$audit_files" -gt 0 ]; then
  for n in $audit_sizes; do audit+=("$n:${best[audit-$n]}"); done
fi
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
python3 - "$audit_files" "${audit[*]:-}" "${args[@]}" <<'PY'
import sys
audit_files, audit = int(sys.argv[1]), sys.argv[2].split()
rows = [sys.argv[i:i + 7] for i in range(3, len(sys.argv), 7)]
res = {}
# Each okstra variant: its label and its column in a row.
builds = [("okstra", 0)]
if all(int(r[2]) > 0 for r in rows):
    builds.append(("okstra confined", 1))
if all(int(r[3]) > 0 for r in rows):
    builds.append(("baseline", 2))
if all(int(r[6]) > 0 for r in rows):
    builds.append(("baseline confined", 5))
head = ["jobs"] + [f"{b} exec -c2" for b, _ in builds] + ["xargs -P2", "parallel -j2 --joblog"]
head += [f"{b} / xargs" for b, _ in builds] + [f"{b} / parallel" for b, _ in builds]
print("| " + " | ".join(head) + " |")
print("|" + " ---: |" * len(head))
for n, *us in rows:
    n = int(n)
    times = [int(u) / 1000 / n for u in us]  # ms per job: okstra, confined, baseline, xargs, parallel, baseline confined
    res[n] = times
    own = [times[i] for _, i in builds]
    xa, pa = times[3], times[4]
    cells = [f"{n:,}"] + [f"{t:.2f} ms" for t in own + [xa, pa]]
    cells += [f"{t / xa:.2f}x" for t in own] + [f"{t / pa:.2f}x" for t in own]
    print("| " + " | ".join(cells) + " |")
if audit:
    print()
    print(f"okstra exec -c2 with the default mutation audit ({audit_files} source files):")
    print()
    print("| jobs | wall | per job |")
    print("| ---: | ---: | ---: |")
    for item in audit:
        n, us = (int(x) for x in item.split(":"))
        print(f"| {n:,} | {us / 1e6:.2f} s | {us / 1000 / n:.2f} ms |")
confined = any(label == "okstra confined" for label, _ in builds)
if confined:
    print()
    print("okstra exec -c2, the same jobs unconfined (`none`) and confined by Landlock (`auto`), same rounds:")
    print()
    print("| jobs | none | auto (Landlock) | confinement adds |")
    print("| ---: | ---: | ---: | ---: |")
    for n, t in res.items():
        print(f"| {n:,} | {t[0]:.3f} ms | {t[1]:.3f} ms | {t[1] - t[0]:+.3f} ms |")
    if any(label == "baseline confined" for label, _ in builds):
        print()
        print("The baseline, the same way:")
        print()
        print("| jobs | none | auto (Landlock) | confinement adds |")
        print("| ---: | ---: | ---: | ---: |")
        for n, t in res.items():
            print(f"| {n:,} | {t[2]:.3f} ms | {t[5]:.3f} ms | {t[5] - t[2]:+.3f} ms |")
print()
for n, t in res.items():
    xa, pa = t[3], t[4]
    if confined:
        print(f"{n:,} jobs: confinement adds {t[1] - t[0]:+.3f} ms/job (target <= 0.2 ms: "
              f"{'met' if t[1] - t[0] <= 0.2 else 'MISSED'})")
    for name, i in builds:
        print(f"{n:,} jobs: {name} {t[i]:.2f} ms/job, {t[i] / xa:.2f}x xargs (target <= 4x: "
              f"{'met' if t[i] <= 4 * xa else 'MISSED'}), {t[i] / pa:.2f}x parallel (target < 0.5x: "
              f"{'met' if t[i] < 0.5 * pa else 'MISSED'})")
ns = sorted(res)
if len(ns) >= 2:
    a, b = ns[0], ns[-1]
    for name, i in builds + [("xargs", 3), ("parallel", 4)]:
        r = res[b][i] / res[a][i]
        extra = f" (target: linear, <= 1.25: {'met' if r <= 1.25 else 'MISSED'})" if i not in (3, 4) else ""
        print(f"{name}: per-job time at {b:,} / at {a:,} = {r:.2f}{extra}")
PY
