#!/usr/bin/env python3
"""Gated wrapper benchmark: what confinement adds to an attempt's critical path.

exec starts each wrapper held (`--gated`, stdin a pipe), records and syncs
the dispatch, then releases it with one byte (docs/exec.md#crash-safety-and-resume). What the wrapper
does before the go overlaps exec's fdatasync; what it does after the go
delays the attempt. This script starts wrappers the same way, one at a time:
spawn held, wait GATE_US (standing in for exec's record and sync), release,
wait for the exit. Per run it takes the time from the go to the wrapper's
exit, and the CPU time of the wrapper and its child (wait4's rusage).

usage: benches/wrapper_gated.py [BIN...]
  BIN: okstra-worker binaries (default: target/release/okstra-worker, built
  first), each run unconfined (`--confinement none`) and confined
  (`--confinement auto --confine-dir results --tmp-dir ...`, as exec starts
  a confined job), the variants alternating run by run.
  OKSTRA_BENCH_WRAPPERS=400   runs of each variant
  OKSTRA_BENCH_GATE_US=2000   wait before the go, in microseconds
  OKSTRA_BENCH_GATED=0        start the wrappers ungated instead (stdin
                              /dev/null, as by hand): the time is then from
                              the spawn to the exit, all of the wrapper's

Figures are medians and means of the middle half (the machine is shared:
a mean of all is the load's). The project and the TMPDIRs live under
$TMPDIR (see benches/README.md, "Where to run it").
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

import confine_stats

ROOT = confine_stats.ROOT
n = int(os.environ.get("OKSTRA_BENCH_WRAPPERS", "400"))
gate = int(os.environ.get("OKSTRA_BENCH_GATE_US", "2000")) / 1e6
gated = os.environ.get("OKSTRA_BENCH_GATED", "1") != "0"
bins = confine_stats.binaries("okstra-worker")

work = tempfile.mkdtemp()
try:
    os.makedirs(os.path.join(work, "prompts"))
    os.makedirs(os.path.join(work, "results"))
    for i in range(n):
        with open(os.path.join(work, f"prompts/w{i}.md"), "w") as f:
            f.write(f"prompt {i}\n")
    # exec names each attempt's TMPDIR in <system temp>/okstra-<uid>.
    tmp_root = os.path.join(os.path.realpath(tempfile.gettempdir()), f"okstra-{os.geteuid()}")
    true_bin = shutil.which("true")

    def argv(bin_, mode, i, k):
        a = [bin_, "--project-root", work, "--provider", "command",
             "--prompt", f"prompts/w{i}.md", "--result", f"results/w{i}.md",
             "--worker-result", f"results/w{i}.md", "--worker-key", f"w{i}",
             "--attempt", "1", "--dispatch-id", f"inv-w{i}:attempt-1"]
        if gated:
            a.append("--gated")
        if mode == "auto":
            a += ["--confinement", "auto", "--confine-dir", "results",
                  "--tmp-dir", os.path.join(tmp_root, f"w{i}-v{k}-a1")]
        else:
            a += ["--confinement", "none"]
        return a + ["--", true_bin]

    variants = [(b, m) for b in bins for m in ("none", "auto")]
    res = {v: ([], []) for v in variants}
    devnull = os.open(os.devnull, os.O_RDWR)
    for i in range(n):
        order = list(enumerate(variants)) if i % 2 == 0 else list(enumerate(variants))[::-1]
        for k, v in order:
            status = os.path.join(work, f"prompts/w{i}.md.status.json")
            if os.path.exists(status):
                os.unlink(status)
            a = argv(v[0], v[1], i, k)
            if gated:
                r, w = os.pipe()
                pid = os.posix_spawn(a[0], a, os.environ, file_actions=[
                    (os.POSIX_SPAWN_DUP2, r, 0), (os.POSIX_SPAWN_DUP2, devnull, 1),
                    (os.POSIX_SPAWN_DUP2, devnull, 2), (os.POSIX_SPAWN_CLOSE, w)])
                os.close(r)
                time.sleep(gate)
                t0 = time.perf_counter_ns()
                os.write(w, b"\n")
            else:
                t0 = time.perf_counter_ns()
                pid = os.posix_spawn(a[0], a, os.environ, file_actions=[
                    (os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, devnull, 1),
                    (os.POSIX_SPAWN_DUP2, devnull, 2)])
            _, st, ru = os.wait4(pid, 0)
            go_to_exit = (time.perf_counter_ns() - t0) / 1000
            if gated:
                os.close(w)
            if os.waitstatus_to_exitcode(st) != 0:
                sys.exit(f"{v[0]} ({v[1]}) exited {os.waitstatus_to_exitcode(st)}")
            res[v][0].append((ru.ru_utime + ru.ru_stime) * 1e6)
            res[v][1].append(go_to_exit)
        if i == 0:
            with open(os.path.join(work, "prompts/w0.md.status.json")) as f:
                if '"confinement": "landlock' not in f.read():
                    sys.exit("no Landlock confinement here: nothing to compare")

    load = open("/proc/loadavg").read().split()[:3]
    how = f"released {gate * 1e6:.0f} us after the spawn" if gated else "ungated (times from the spawn)"
    print(f"machine: {os.cpu_count()} cores, load {' '.join(load)}; {n} runs of each, {how}; microseconds")
    print()
    confine_stats.tables("binary", ("CPU", "to exit"), bins, res, scale=1, digits=0)
finally:
    shutil.rmtree(work, ignore_errors=True)
