#!/usr/bin/env python3
"""Random crash harness for `okstra exec` (docs/exec.md#crash-safety-and-resume).

Runs a two-stage plan of N command jobs (random short durations, one job
that needs a retry) and kills exec at a random instant: SIGKILL to exec
alone, or to exec and every process it started (the whole tree at once, as
a machine crash or `kill -9 -1` would). Then runs `okstra exec` again until
it exits 0, and checks after every trial:

- the run completed (every job `completed` in team-state),
- no attempt started twice (each worker logs `key attempt` when it starts),
- no lost rows (every dispatch in the events log has its team-state row),
- every JSON-lines file is whole and team-state parses.

It also stops exec the polite ways (`--signal-trials`, alternating): Ctrl-C
(SIGINT to exec's process group, as a terminal sends it; the wrappers are in
groups of their own) and SIGTERM to exec alone. There exec must exit within
the stop grace (1 s here) plus `--stop-slack` seconds, leave none of the
processes it started running, and the resumes must complete the run with
the same invariants.

The workers note their starts in a scratch directory outside the project.
Under the default confinement (Landlock, where the kernel offers it) only a
debug build lets them write there (`OKSTRA_TEST_ALSO_WRITABLE`, ignored by a
release build), so: `--okstra target/debug/okstra` (the default when it
exists), or a release build with `--confinement none`. The clean run checks
that every start was noted, so a harness that cannot see double starts
refuses to run instead of passing.

usage: benches/crash.py [--trials-per-mode 200] [--signal-trials 20]
       [--jobs 30] [--seconds 900] [--okstra BIN] [--confinement MODE]
       [--keep DIR] [--seed N] [--mode exec|tree|int|term] [--delay S]

`--mode` runs one kind of trial only, and `--delay` fixes the instant of the
kill or signal (seconds after exec started) instead of drawing it: with
`--seed` this replays a failing trial's conditions (the timing of a loaded
machine never replays exactly). A failing trial's directory (project, plan,
run state, logs, the workers' start notes) is kept under `--keep` (default:
a directory beside the work directory), with a REPRO file saying how it was
made.

Prints a summary; exits 1 if any trial broke an invariant.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def children_of(pid):
    """Every descendant of pid, from /proc."""
    parent = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            parent[int(name)] = int(rest[1])
        except (OSError, IndexError, ValueError):
            pass
    out, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out.extend(kids)
        frontier.extend(kids)
    return out


def make_project(root, scratch, jobs, confinement):
    os.makedirs(f"{root}/run", exist_ok=True)
    os.makedirs(f"{root}/prompts", exist_ok=True)
    manifest = {
        "taskKey": "CRASH-1",
        "teamStatePath": "run/team-state.json",
        "activeRunContextPath": "run/context.json",
        "recommendedWorkers": [],
        "terminalBackend": "cli-wrapper",
        "leadRuntime": "claude",
        "workflow": {"currentPhase": "implement"},
    }
    with open(f"{root}/run/run-manifest.json", "w") as f:
        json.dump(manifest, f)
    lines = [
        "[defaults]",
        'provider = "command"',
        'role = "analyst"',
        f'confinement = "{confinement}"',
        # A debug build's wrapper also lets a confined worker write here
        # (src/confine.rs); a release build ignores it.
        f'env = {{ SCRATCH = "{scratch}", OKSTRA_TEST_ALSO_WRITABLE = "{scratch}" }}',
        "",
    ]
    rnd = random.Random(7)
    half = jobs // 2
    for stage, keys in (("one", range(half)), ("two", range(half, jobs))):
        lines += ["[[stages]]", f'name = "{stage}"', ""]
        for n in keys:
            key = f"w{n}"
            with open(f"{root}/prompts/{key}.md", "w") as f:
                f.write("# work\n")
            nap = rnd.choice(["0", "0.01", "0.05", "0.1", "0.2"])
            body = f'sleep {nap}; mkdir -p results; echo done > "$OKSTRA_RESULT_PATH"'
            if n == 0:
                # The first attempt leaves its result out: one retry.
                body = (
                    'if [ "$OKSTRA_ATTEMPT" -ge 2 ] || [ -e "$SCRATCH/retried" ]; '
                    f'then {body}; else touch "$SCRATCH/retried"; fi'
                )
            script = f'echo "$OKSTRA_WORKER_KEY $OKSTRA_ATTEMPT" >> "$SCRATCH/starts"; {body}'
            lines += [
                "[[stages.workers]]",
                f'workerId = "{key}"',
                f'promptPath = "prompts/{key}.md"',
                f'resultPath = "results/{key}.md"',
                f"command = [\"sh\", \"-c\", '''{script}''']",
                "",
            ]
    with open(f"{root}/spec.toml", "w") as f:
        f.write("\n".join(lines))


def check(root, scratch, jobs):
    """The invariants after a completed run; a list of what broke."""
    broke = []
    try:
        with open(f"{scratch}/starts") as f:
            starts = f.read().split("\n")[:-1]
    except OSError:
        starts = []
    if len(set(starts)) != len(starts):
        dup = sorted({s for s in starts if starts.count(s) > 1})
        broke.append(f"attempt started twice: {dup}")
    events = []
    for name in ("lead-events.jsonl", "errors.jsonl"):
        path = f"{root}/run/{name}"
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f.read().split("\n")[:-1]:
                try:
                    v = json.loads(line)
                except ValueError:
                    broke.append(f"torn line in {name}: {line[:80]!r}")
                    continue
                if name == "lead-events.jsonl":
                    events.append(v)
    try:
        with open(f"{root}/run/team-state.json") as f:
            team = json.load(f)
    except (OSError, ValueError) as e:
        return broke + [f"team-state unreadable: {e}"]
    done = {w["workerId"] for w in team.get("workers", []) if w.get("status") == "completed"}
    missing = [f"w{n}" for n in range(jobs) if f"w{n}" not in done]
    if missing:
        broke.append(f"not completed in team-state: {missing[:5]}")
    # A completed job started at least once: if its start is not noted, the
    # harness is blind to double starts.
    noted = {s.split(" ")[0] for s in starts}
    unseen = sorted(done - noted)
    if unseen:
        broke.append(f"starts not noted (is the scratch directory writable?): {unseen[:5]}")
    rows = {(r.get("workerKey"), r.get("attempt")) for r in team.get("workerDispatches", [])}
    for e in events:
        if e.get("type") == "worker-dispatched" and (e["workerKey"], e["attempt"]) not in rows:
            broke.append(f"lost row: {e['workerKey']} attempt {e['attempt']}")
    return broke


# How every exec of a trial is run; main adds `--concurrency`.
EXEC = ["exec", "plan.json"]


def run_exec(okstra, root, env, session=False):
    return subprocess.Popen(
        [okstra, *EXEC],
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        # Ctrl-C trials: exec leads a process group of its own, as the
        # foreground job of a terminal does.
        start_new_session=session,
    )


def start_time(pid):
    """When pid started (clock ticks since boot), to tell it from a reuse."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def still_running(procs):
    """Which of these (pid, start time) still run (zombies do not count)."""
    out = []
    for pid, started in procs:
        try:
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if rest[0] != "Z" and int(rest[19]) == started:
            out.append(pid)
    return out


def trial(okstra, pristine, base, jobs, mode, delay, env, stop_limit):
    """One trial; (landed, resumes, broken invariants, stop seconds)."""
    root = os.path.join(base, "p")
    scratch = os.path.join(base, "s")
    shutil.rmtree(base, ignore_errors=True)
    shutil.copytree(pristine, root, symlinks=True)
    os.makedirs(scratch)
    # Planned in place: the plan records its project root.
    subprocess.run(
        [okstra, "plan", "spec.toml", "--manifest", "run/run-manifest.json", "--out", "plan.json"],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
    )
    broke = []
    stopped_in = None
    proc = run_exec(okstra, root, env, session=(mode == "int"))
    time.sleep(delay)
    if mode in ("exec", "tree"):
        victims = [proc.pid] + (children_of(proc.pid) if mode == "tree" else [])
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        landed = proc.returncode == -signal.SIGKILL
    else:
        started = [(p, start_time(p)) for p in children_of(proc.pid)]
        t0 = time.time()
        try:
            if mode == "int":
                os.killpg(proc.pid, signal.SIGINT)
            else:
                os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=stop_limit)
            stopped_in = time.time() - t0
        except subprocess.TimeoutExpired:
            broke.append(f"exec still running {stop_limit:.1f} s after SIG{'INT' if mode == 'int' else 'TERM'}")
            for pid in [proc.pid] + children_of(proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait()
        # 130: stopped by its handler; killed by the signal itself: it came
        # before exec installed its handler; 0: the run had finished.
        landed = proc.returncode != 0
        left = still_running([(p, t) for p, t in started if t is not None])
        if left:
            broke.append(f"processes exec started still run after it exited: {left}")
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if proc.returncode not in (0, 130, -signal.SIGINT, -signal.SIGTERM):
            err = proc.stderr.read().decode(errors="replace")[-300:]
            broke.append(f"exec exited {proc.returncode} after the signal: {err!r}")
    proc.stderr.close()
    resumes = 0
    while True:
        resumes += 1
        p = subprocess.run([okstra, *EXEC], cwd=root, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
        with open(os.path.join(base, "resumes.log"), "ab") as f:
            f.write(f"--- resume {resumes}: exit {p.returncode}\n".encode() + p.stderr)
        if p.returncode == 0:
            break
        if resumes >= 5:
            rows = [l for l in p.stdout.decode().split("\n") if l.strip() and "completed" not in l]
            # The jobs that failed say why; the not-run ones of later stages only follow.
            table = [l for l in rows if "not-run" not in l] or rows
            # The other invariants still hold or not in what it left.
            return landed, resumes, broke + [f"no completion after {resumes} resumes: exit {p.returncode}: "
                                             + " | ".join(table)[-600:]] + [
                b for b in check(root, scratch, jobs) if not b.startswith("not completed")], stopped_in
    return landed, resumes, broke + check(root, scratch, jobs), stopped_in


MODES = {
    "exec": "SIGKILL to exec alone",
    "tree": "SIGKILL to exec and every process it started",
    "int": "Ctrl-C (SIGINT to exec's process group)",
    "term": "SIGTERM to exec",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials-per-mode", type=int, default=200)
    ap.add_argument("--signal-trials", type=int, default=20,
                    help="Ctrl-C and SIGTERM trials, half each (after the kills)")
    ap.add_argument("--jobs", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=900)
    ap.add_argument("--concurrency", type=int, default=4,
                    help="exec's --concurrency (0: unbounded); below the stage's "
                         "jobs, attempts also wait recorded at their gates")
    target = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target")
    debug = os.path.join(target, "debug", "okstra")
    default_bin = os.path.relpath(debug if os.path.exists(debug) else os.path.join(target, "release", "okstra"))
    ap.add_argument("--okstra", default=default_bin)
    ap.add_argument("--confinement", default="auto", choices=["auto", "required", "none"])
    ap.add_argument("--keep", help="where failing trials' directories are kept")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("OKSTRA_CRASH_SEED", "1")))
    ap.add_argument("--mode", choices=sorted(MODES), help="run only this kind of trial")
    ap.add_argument("--delay", type=float, help="kill or signal this many seconds after exec starts")
    ap.add_argument("--stop-slack", type=float, default=5.0,
                    help="seconds beyond the 1 s grace exec may take to stop after a signal")
    args = ap.parse_args()
    if args.concurrency > 0:
        EXEC.extend(["--concurrency", str(args.concurrency)])
    okstra = os.path.abspath(args.okstra)
    work = tempfile.mkdtemp(prefix="okstra-crash-")
    keep = os.path.abspath(args.keep) if args.keep else work + "-failures"
    env = dict(os.environ, OKSTRA_STOP_GRACE_SECONDS="1")
    env.pop("OKSTRA_FAULT_AT", None)
    # Every trial copies the pristine project to the same place and plans
    # it there; its workers note their starts in the same scratch path.
    base = os.path.join(work, "t")
    pristine = os.path.join(work, "pristine")
    make_project(pristine, os.path.join(base, "s"), args.jobs, args.confinement)
    # A clean run, to learn how long one takes.
    shutil.copytree(pristine, os.path.join(base, "p"))
    os.makedirs(os.path.join(base, "s"))
    subprocess.run([okstra, "plan", "spec.toml", "--manifest", "run/run-manifest.json", "--out", "plan.json"],
                   cwd=os.path.join(base, "p"), env=env, stdout=subprocess.DEVNULL, check=True)
    t0 = time.time()
    subprocess.run([okstra, *EXEC], cwd=os.path.join(base, "p"), env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    clean = time.time() - t0
    broke_clean = check(os.path.join(base, "p"), os.path.join(base, "s"), args.jobs)
    try:
        with open(os.path.join(base, "s", "starts")) as f:
            noted = len(f.read().split("\n")) - 1
    except OSError:
        noted = 0
    if noted != args.jobs + 1:
        broke_clean.append(f"{noted} starts noted, expected {args.jobs + 1} (every job once, w0 twice)")
    if broke_clean:
        print("the clean run already breaks an invariant:", broke_clean)
        print("(a release build under confinement cannot note starts: use a debug build or --confinement none)")
        print(f"its directory: {base}")
        return 1
    rnd = random.Random(args.seed)
    deadline = time.time() + args.seconds
    stats = {m: {"trials": 0, "landed": 0, "resumes": 0, "broken": 0, "stops": []} for m in MODES}
    plan = []
    for i in range(args.trials_per_mode * 2):
        plan.append("exec" if i % 2 == 0 else "tree")
    for i in range(args.signal_trials):
        plan.append("int" if i % 2 == 0 else "term")
    if args.mode:
        plan = [args.mode] * (args.trials_per_mode if args.mode in ("exec", "tree") else args.signal_trials)
    failures = []
    cut = 0
    for i, mode in enumerate(plan):
        if time.time() > deadline:
            cut = len(plan) - i
            break
        # Drawn for every trial, used or not, so that trial i's instant
        # depends only on the seed.
        drawn = rnd.uniform(0, clean * 1.1)
        delay = args.delay if args.delay is not None else drawn
        landed, resumes, broke, stopped_in = trial(okstra, pristine, base, args.jobs, mode, delay, env,
                                                   1 + args.stop_slack)
        s = stats[mode]
        s["trials"] += 1
        s["landed"] += int(landed)
        s["resumes"] += resumes
        if stopped_in is not None and landed:
            s["stops"].append(stopped_in)
        if broke:
            s["broken"] += 1
            kept = os.path.join(keep, f"trial-{i}-{mode}")
            os.makedirs(keep, exist_ok=True)
            shutil.copytree(base, kept, symlinks=True)
            repro = (f"benches/crash.py --okstra {args.okstra} --confinement {args.confinement} "
                     f"--jobs {args.jobs} --seed {args.seed} --mode {mode} --delay {delay:.4f} "
                     f"--trials-per-mode 1 --signal-trials 1")
            with open(os.path.join(kept, "REPRO"), "w") as f:
                f.write(f"trial {i} ({MODES[mode]}), {delay:.4f} s after exec started "
                        f"(a clean run took {clean:.2f} s)\n{repro}\nbroke: {broke}\n"
                        f"The project was planned at {base}/p: move this directory's p and s back "
                        f"to {base} before running okstra in it.\n")
            failures.append((mode, i, delay, broke, kept))
    if failures:
        print(f"failing trials kept under {keep}; the work directory {work} is removed")
    shutil.rmtree(work, ignore_errors=True)
    print(f"okstra crash harness: {args.okstra}, confinement {args.confinement}, {args.jobs} jobs in 2 stages "
          f"(one retry), exec --concurrency {args.concurrency or 'unbounded'}, "
          f"a clean run takes {clean:.2f} s, seed {args.seed}")
    print("| stopped by | trials | landed mid-run | resumes to completion | runs completed | broken invariants | exec stopped within |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for mode, label in MODES.items():
        s = stats[mode]
        if not s["trials"]:
            continue
        done = s["trials"] - s["broken"]
        stops = f"{max(s['stops']):.2f} s max" if s["stops"] else "-"
        print(f"| {label} | {s['trials']} | {s['landed']} | {s['resumes'] / max(1, s['trials']):.2f} avg | "
              f"{done} ({100 * done / max(1, s['trials']):.0f}%) | {s['broken']} | {stops} |")
    if cut:
        print(f"{cut} trials not run: the --seconds {args.seconds:g} budget ran out")
    for mode, i, delay, broke, kept in failures[:10]:
        print(f"trial {i} ({mode}, {delay:.4f} s): {broke}\n  kept: {kept}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
