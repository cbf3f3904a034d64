#!/usr/bin/env python3
"""What confinement adds per job to `okstra exec`, by many short runs.

benches/exec.sh times whole runs of 1,000 jobs and keeps the best of a
few; on a shared two-core machine one run's wall time moves by more than
confinement costs (issue 14's budget is 0.2 ms a job), so the best of five
says little. This script takes many shorter runs instead: the jobs of
exec.sh (benches/gen_exec_fixture.py), planned once with `confinement =
"none"` and once with `"auto"`, run by `okstra exec --concurrency 2` from a
fresh copy each time, the variants alternating run by run, and reports the
median and the mean of the middle half of each variant's wall time and CPU
time per job (CPU: user + system of exec and everything it started and
reaped, from wait4), and what confinement adds to each.

usage: benches/confine_cost.py [BIN...]
  BIN: okstra binaries, each with its okstra-worker beside it (default:
  target/release/okstra, built first)
  OKSTRA_BENCH_JOBS=200    jobs per run
  OKSTRA_BENCH_RUNS=30     runs of each variant

Trees go under $TMPDIR (see benches/README.md, "Where to run it"); each
run's tree is moved aside and deleted at the end.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

import confine_stats

ROOT = confine_stats.ROOT
n = int(os.environ.get("OKSTRA_BENCH_JOBS", "200"))
runs = int(os.environ.get("OKSTRA_BENCH_RUNS", "30"))
bins = confine_stats.binaries("okstra")

work = tempfile.mkdtemp()
try:
    for mode in ("none", "auto"):
        # Planned where it runs (the plan holds the absolute project root),
        # then kept aside pristine.
        tree = os.path.join(work, mode)
        subprocess.run([sys.executable, os.path.join(ROOT, "benches/gen_exec_fixture.py"),
                        str(n), tree, "--confinement", mode], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([bins[0], "plan", "spec.toml", "--manifest", "run/run-manifest.json",
                        "--out", "plan.json"], cwd=tree, check=True, stdout=subprocess.DEVNULL)
        os.rename(tree, os.path.join(work, f"{mode}.pristine"))
    trash = os.path.join(work, "trash")
    os.makedirs(trash)
    variants = [(b, m) for b in bins for m in ("none", "auto")]
    res = {v: ([], []) for v in variants}
    for r in range(runs):
        order = variants if r % 2 == 0 else variants[::-1]
        for k, (b, mode) in enumerate(order):
            tree = os.path.join(work, mode)
            if os.path.exists(tree):
                os.rename(tree, os.path.join(trash, f"{mode}-{r}-{k}"))
            shutil.copytree(os.path.join(work, f"{mode}.pristine"), tree, symlinks=True)
            os.sync()
            argv = [b, "exec", "--concurrency", "2", "plan.json"]
            t0 = time.perf_counter_ns()
            proc = subprocess.Popen(argv, cwd=tree, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, st, ru = os.wait4(proc.pid, 0)
            wall = (time.perf_counter_ns() - t0) / 1000
            proc.returncode = os.waitstatus_to_exitcode(st)
            if proc.returncode != 0:
                sys.exit(f"{b} exec ({mode}) exited {proc.returncode} in {tree}")
            done = len(os.listdir(os.path.join(tree, "results")))
            if done < n:
                sys.exit(f"{b} exec ({mode}) left {done} of {n} results")
            res[(b, mode)][0].append(wall / n)
            res[(b, mode)][1].append((ru.ru_utime + ru.ru_stime) * 1e6 / n)

    load = open("/proc/loadavg").read().split()[:3]
    print(f"machine: {os.cpu_count()} cores, load at the end {' '.join(load)}; {n} jobs a run, "
          f"{runs} runs of each variant; TMPDIR={tempfile.gettempdir()}; ms per job")
    print()
    confine_stats.tables("okstra", ("wall", "CPU"), bins, res, scale=1000, digits=3)
finally:
    shutil.rmtree(work, ignore_errors=True)
