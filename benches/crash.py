#!/usr/bin/env python3
"""Random crash harness for `okstra exec` (SPEC §5.8).

Runs a two-stage plan of N command jobs (random short durations, one job
that needs a retry) and kills exec at a random instant: SIGKILL to exec
alone, or to exec and every process it started (the whole tree at once, as
a machine crash or `kill -9 -1` would). Then runs `okstra exec` again until
it exits 0, and checks after every trial:

- the run completed (every job `completed` in team-state),
- no attempt started twice (each worker logs `key attempt` when it starts),
- no lost rows (every dispatch in the events log has its team-state row),
- every JSON-lines file is whole and team-state parses.

usage: benches/crash.py [--trials-per-mode 200] [--jobs 30] [--seconds 900]
       [--okstra target/release/okstra]

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


def make_project(root, scratch, jobs):
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
        f'env = {{ SCRATCH = "{scratch}" }}',
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
    rows = {(r.get("workerKey"), r.get("attempt")) for r in team.get("workerDispatches", [])}
    for e in events:
        if e.get("type") == "worker-dispatched" and (e["workerKey"], e["attempt"]) not in rows:
            broke.append(f"lost row: {e['workerKey']} attempt {e['attempt']}")
    return broke


def run_exec(okstra, root, env):
    return subprocess.Popen(
        [okstra, "exec", "plan.json"],
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def trial(okstra, pristine, base, jobs, mode, clean_time, rnd, env):
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
    proc = run_exec(okstra, root, env)
    time.sleep(rnd.uniform(0, clean_time * 1.1))
    if mode == "exec":
        victims = [proc.pid]
    else:
        victims = [proc.pid] + children_of(proc.pid)
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    killed = proc.returncode == -signal.SIGKILL
    resumes = 0
    while True:
        resumes += 1
        p = subprocess.run([okstra, "exec", "plan.json"], cwd=root, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
        if p.returncode == 0:
            break
        if resumes >= 5:
            table = [l for l in p.stdout.decode().split("\n") if "completed" not in l]
            return killed, resumes, [f"no completion after {resumes} resumes: exit {p.returncode}: "
                                     + " | ".join(table)[-600:]]
    return killed, resumes, check(root, scratch, jobs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials-per-mode", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=900)
    ap.add_argument("--okstra", default="target/release/okstra")
    args = ap.parse_args()
    okstra = os.path.abspath(args.okstra)
    work = tempfile.mkdtemp(prefix="okstra-crash-")
    env = dict(os.environ, OKSTRA_STOP_GRACE_SECONDS="1")
    env.pop("OKSTRA_FAULT_AT", None)
    # Every trial copies the pristine project to the same place and plans
    # it there; its workers note their starts in the same scratch path.
    base = os.path.join(work, "t")
    pristine = os.path.join(work, "pristine")
    make_project(pristine, os.path.join(base, "s"), args.jobs)
    # A clean run, to learn how long one takes.
    shutil.copytree(pristine, os.path.join(base, "p"))
    os.makedirs(os.path.join(base, "s"))
    subprocess.run([okstra, "plan", "spec.toml", "--manifest", "run/run-manifest.json", "--out", "plan.json"],
                   cwd=os.path.join(base, "p"), env=env, stdout=subprocess.DEVNULL, check=True)
    t0 = time.time()
    subprocess.run([okstra, "exec", "plan.json"], cwd=os.path.join(base, "p"), env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    clean = time.time() - t0
    broke_clean = check(os.path.join(base, "p"), os.path.join(base, "s"), args.jobs)
    if broke_clean:
        print("the clean run already breaks an invariant:", broke_clean)
        return 1
    rnd = random.Random(int(os.environ.get("OKSTRA_CRASH_SEED", "1")))
    deadline = time.time() + args.seconds
    stats = {m: {"trials": 0, "killed": 0, "resumes": 0, "broken": 0} for m in ("exec", "tree")}
    failures = []
    for i in range(args.trials_per_mode * 2):
        if time.time() > deadline:
            break
        mode = "exec" if i % 2 == 0 else "tree"
        killed, resumes, broke = trial(okstra, pristine, base, args.jobs, mode, clean, rnd, env)
        s = stats[mode]
        s["trials"] += 1
        s["killed"] += int(killed)
        s["resumes"] += resumes
        if broke:
            s["broken"] += 1
            failures.append((mode, i, broke))
    shutil.rmtree(work, ignore_errors=True)
    print(f"okstra crash harness: {args.jobs} jobs in 2 stages (one retry), a clean run takes {clean:.2f} s")
    print("| killed | trials | SIGKILLs landed mid-run | resumes to completion | runs completed | double starts / lost rows / torn files |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for mode, label in (("exec", "exec alone"), ("tree", "exec and every process it started")):
        s = stats[mode]
        done = s["trials"] - s["broken"]
        print(f"| {label} | {s['trials']} | {s['killed']} | {s['resumes'] / max(1, s['trials']):.2f} avg | "
              f"{done} ({100 * done / max(1, s['trials']):.0f}%) | {s['broken']} |")
    for mode, i, broke in failures[:10]:
        print(f"trial {i} ({mode}): {broke}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
