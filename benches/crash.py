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
       [--worktrees] [--src-files 200]

`--mode` runs one kind of trial only, and `--delay` fixes the instant of the
kill or signal (seconds after exec started) instead of drawing it: with
`--seed` this replays a failing trial's conditions (the timing of a loaded
machine never replays exactly). A failing trial's directory (project, plan,
run state, logs, the workers' start notes) is kept under `--keep` (default:
a directory beside the work directory), with a REPRO file saying how it was
made.

`--worktrees` runs the same trials on worktree jobs (docs/worktrees.md):
the project is a git repository (a tracked `src/` of `--src-files` files,
committed with the spec, prompts and manifest; what the run writes
ignored), every job is an implementer with `worktree = "git"` that edits
`src/<key>.txt` and the tracked `src/shared.txt` in its worktree (its
working directory) and writes its result to `$OKSTRA_RESULT_PATH`, the job
that needs a retry edits its worktree on its failing attempt too, and a
third of the jobs say `worktreeKeep = false`. A kill of the whole tree now
also kills git mid-command (`git worktree add`, `reset --hard`, `add -A`,
`commit-tree`, `update-ref`): the summary counts the kills that landed
inside one, by subcommand, and the instants are drawn denser early in the
run (`clean * 1.1 * u**2`), where git makes the first stage's worktrees.
After every trial it also checks, with git (no user or system config):

- every job's branch `okstra/<task>/<key>` holds exactly one commit past
  the plan's `gitWorktree.base`, on it, whose `Okstra-Dispatch-Id` trailer
  is the completed attempt's and whose tree holds that attempt's edits
  (no duplicate commit, no lost one); its `worker-result-collected` event
  names that commit;
- every attempt that edited its worktree and did not complete (the failing
  attempt of the retried job; attempts a kill lost after their edit) is
  kept on `okstra-attempts/<task>/<key>/<N>`, a commit on the base with
  its dispatch id holding its edits, and no other attempt is kept;
- every attempt started from the base (each worker notes one that found
  its worktree dirty);
- `git worktree list --porcelain` shows no `prunable` or `locked` entry
  and no registration but the checkout's and the kept jobs' (each clean,
  on its branch's tip), `git worktree prune --dry-run -v` says nothing,
  and a `worktreeKeep = false` job's directory is gone;
- the user's checkout is as planned: `HEAD` (the file and its commit), the
  index byte for byte, the config, every tracked file, and `git status
  --porcelain` empty;
- no `*.lock` file is left anywhere under `.git`.

Prints a summary; exits 1 if any trial broke an invariant.
"""
import argparse
import hashlib
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


# git as the checks run it: the user's and the system's config kept out,
# and no optional lock taken (`git status` would refresh the index).
GIT_ENV = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "GIT_OPTIONAL_LOCKS": "0"}


def git(root, *args, check=True, data=None, stderr=False):
    """`git ARGS` in root; its stdout as bytes, with its stderr after it if
    asked (None when it failed and check is off)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_ENV)
    p = subprocess.run(["git", *args], cwd=root, env=env, input=data, capture_output=True)
    if p.returncode != 0:
        if check:
            raise RuntimeError(f"git {' '.join(args)}: {p.stderr.decode(errors='replace').strip()}")
        return None
    return p.stdout + p.stderr if stderr else p.stdout


# What a worktree job's worker does in its worktree (its working directory):
# note a start that did not find the worktree at the base, edit its own file
# and the shared one, note the edit, then write its result in the project.
WT_CHECK = ('{ test ! -e src/@KEY@.txt && test "$(cat src/shared.txt)" = base; } '
            '|| echo "$OKSTRA_WORKER_KEY $OKSTRA_ATTEMPT" >> "$SCRATCH/unclean"; ')
WT_EDIT = ("printf '@KEY@ attempt %s\\n' \"$OKSTRA_ATTEMPT\" > src/@KEY@.txt; "
           "printf 'edited by @KEY@\\n' > src/shared.txt; "
           'echo "$OKSTRA_WORKER_KEY $OKSTRA_ATTEMPT" >> "$SCRATCH/edits"; ')
WT_RESULT = 'mkdir -p "$(dirname "$OKSTRA_RESULT_PATH")"; echo done > "$OKSTRA_RESULT_PATH"'


def make_project(root, scratch, jobs, confinement, worktrees=False, src_files=0):
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
    if worktrees:
        lines.insert(-1, 'worktree = "git"')
    rnd = random.Random(7)
    half = jobs // 2
    for stage, keys in (("one", range(half)), ("two", range(half, jobs))):
        lines += ["[[stages]]", f'name = "{stage}"', ""]
        for n in keys:
            key = f"w{n}"
            with open(f"{root}/prompts/{key}.md", "w") as f:
                f.write("# work\n")
            nap = rnd.choice(["0", "0.01", "0.05", "0.1", "0.2"])
            if worktrees:
                edit = WT_EDIT.replace("@KEY@", key)
                body = f"sleep {nap}; {edit}{WT_RESULT}"
                fail = f'{edit}echo "$OKSTRA_ATTEMPT" > "$SCRATCH/retried"'
            else:
                body = f'sleep {nap}; mkdir -p results; echo done > "$OKSTRA_RESULT_PATH"'
                fail = 'touch "$SCRATCH/retried"'
            if n == 0:
                # The first attempt leaves its result out (exits 0 without
                # it, after editing its worktree): one retry.
                body = (
                    'if [ "$OKSTRA_ATTEMPT" -ge 2 ] || [ -e "$SCRATCH/retried" ]; '
                    f'then {body}; else {fail}; fi'
                )
            script = 'echo "$OKSTRA_WORKER_KEY $OKSTRA_ATTEMPT" >> "$SCRATCH/starts"; '
            if worktrees:
                script += WT_CHECK.replace("@KEY@", key)
            script += body
            lines += [
                "[[stages.workers]]",
                f'workerId = "{key}"',
                f'promptPath = "prompts/{key}.md"',
                f'resultPath = "results/{key}.md"',
                f"command = [\"sh\", \"-c\", '''{script}''']",
            ]
            if worktrees:
                lines += ['role = "implementer"', 'plannedPaths = ["src/**"]']
                if n % 3 == 2:
                    lines.append("worktreeKeep = false")
            lines.append("")
    with open(f"{root}/spec.toml", "w") as f:
        f.write("\n".join(lines))
    if worktrees:
        os.makedirs(f"{root}/src")
        with open(f"{root}/src/shared.txt", "w") as f:
            f.write("base\n")
        for n in range(src_files):
            with open(f"{root}/src/f{n:04}.txt", "w") as f:
                f.write(f"file {n}\n" * 20)
        with open(f"{root}/.gitignore", "w") as f:
            f.write("results/\nrun/*\n!run/run-manifest.json\nplan.json\n.okstra/\n"
                    "prompts/*.log\nprompts/*.status.json\n")
        git(root, "init", "-q", "-b", "main")
        git(root, "add", "-A")
        git(root, "-c", "user.name=user", "-c", "user.email=user@example.com",
            "commit", "-q", "-m", "the project")


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


def checkout_state(root):
    """What of the user's checkout no worktree job may touch: `HEAD` (the
    file and its commit), the index and config byte for byte, the status,
    and every tracked file."""
    def digest(rel):
        with open(os.path.join(root, rel), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    state = {
        "HEAD file": digest(".git/HEAD"),
        "HEAD commit": git(root, "rev-parse", "HEAD").decode().strip(),
        ".git/index": digest(".git/index"),
        ".git/config": digest(".git/config"),
        "git status": git(root, "status", "--porcelain=v1", "--untracked-files=all").decode(),
    }
    for rel in git(root, "ls-files", "-z").decode().split("\0")[:-1]:
        state[rel] = digest(rel)
    return state


def notes(scratch, name):
    """The `key attempt` pairs a worker noted in scratch/name."""
    try:
        with open(f"{scratch}/{name}") as f:
            return {(k, int(n)) for k, n in (line.split(" ") for line in f.read().split("\n")[:-1])}
    except OSError:
        return set()


def worktree_list(root):
    """`git worktree list --porcelain`, one dict per entry."""
    out = []
    for block in git(root, "worktree", "list", "--porcelain").decode().split("\n\n"):
        entry = {}
        for line in block.split("\n"):
            if line:
                name, _, value = line.partition(" ")
                entry[name] = value
        if entry:
            out.append(entry)
    return out


def check_git(root, scratch, before):
    """The invariants of a completed run's worktree jobs (see the docstring);
    a list of what broke."""
    broke = []
    with open(f"{root}/plan.json") as f:
        plan = json.load(f)
    digest = plan["digest"].removeprefix("sha256:")[:16]
    jobs = [j for s in plan["stages"] for j in s["jobs"] if j.get("gitWorktree")]
    task = plan["run"]["taskKey"]
    completed = {}
    with open(f"{root}/run/lead-events.jsonl") as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("type") == "worker-result-collected" and e.get("status") == "completed":
                completed.setdefault(e["workerKey"], []).append(e)
    refs = {}
    for line in git(root, "for-each-ref", "--format=%(refname) %(objectname)").decode().split("\n"):
        if line:
            name, sha = line.split(" ")
            refs[name] = sha
    started, edited = notes(scratch, "starts"), notes(scratch, "edits")
    unclean = notes(scratch, "unclean")
    if unclean:
        broke.append(f"attempts started in a worktree not at the base: {sorted(unclean)[:5]}")
    attempts_prefix = f"refs/heads/okstra-attempts/{task}/"
    kept = {}
    for name, sha in refs.items():
        if name.startswith(attempts_prefix):
            key, _, n = name[len(attempts_prefix):].rpartition("/")
            kept.setdefault(key, {})[int(n) if n.isdigit() else n] = sha
    # Every blob the checks read, in one `git cat-file --batch`.
    wanted = []

    def commit_of(sha):
        """(parents, Okstra-Dispatch-Id) of a commit."""
        out = git(root, "show", "-s", "--format=%P%x1f%(trailers:key=Okstra-Dispatch-Id,valueonly,separator=%x2c)",
                  sha).decode().strip()
        parents, _, ids = out.partition("\x1f")
        return parents.split(), ids.strip()

    listed = worktree_list(root)
    registered = {os.path.realpath(e["worktree"]): e for e in listed}
    for e in listed:
        for mark in ("prunable", "locked"):
            if mark in e:
                broke.append(f"worktree {e['worktree']} is {mark}: {e[mark]!r}")
    expected_regs = {os.path.realpath(root)}
    for job in jobs:
        key, g = job["key"], job["gitWorktree"]
        base, branch = g["base"], g["branch"]
        path = os.path.realpath(os.path.join(root, job["worktreePath"]))
        done = completed.get(key, [])
        if not done:
            broke.append(f"{key}: no completed worker-result-collected event")
            continue
        c = done[-1]["attempt"]
        tip = refs.get(f"refs/heads/{branch}")
        if tip is None:
            broke.append(f"{key}: lost commit: no branch {branch}")
            continue
        commits = git(root, "rev-list", f"{base}..{tip}").decode().split()
        if len(commits) != 1:
            broke.append(f"{key}: {len(commits)} commits past the base on {branch}, not 1"
                         + (" (duplicate commits)" if len(commits) > 1 else " (lost commit)"))
        parents, ids = commit_of(tip)
        if parents != [base]:
            broke.append(f"{key}: the tip of {branch} is not on the base: parents {parents}")
        if ids != f"{digest}/{key}/attempt-{c}":
            broke.append(f"{key}: Okstra-Dispatch-Id {ids!r} on its tip, not attempt {c}'s")
        wanted.append((f"{key}: the tip", f"{tip}:src/{key}.txt", f"{key} attempt {c}\n"))
        wanted.append((f"{key}: the tip", f"{tip}:src/shared.txt", f"edited by {key}\n"))
        named = {e.get("worktree", {}).get("commit") for e in done}
        if named != {tip}:
            broke.append(f"{key}: worker-result-collected names {sorted(map(str, named))}, the branch tip is {tip}")
        # Kept attempts: every one an attempt that started and did not
        # complete, on the base with its dispatch id; every such attempt
        # that edited its worktree kept.
        mine = kept.pop(key, {})
        for n, sha in sorted(mine.items(), key=str):
            if not isinstance(n, int) or n == c or (key, n) not in started:
                broke.append(f"{key}: kept attempt {n} is not an attempt that started and did not complete")
                continue
            parents, ids = commit_of(sha)
            if parents != [base] or ids != f"{digest}/{key}/attempt-{n}":
                broke.append(f"{key}: kept attempt {n} has parents {parents}, dispatch id {ids!r}")
            if (key, n) in edited:
                wanted.append((f"{key}: kept attempt {n}", f"{sha}:src/{key}.txt", f"{key} attempt {n}\n"))
                wanted.append((f"{key}: kept attempt {n}", f"{sha}:src/shared.txt", f"edited by {key}\n"))
        for k, n in sorted(edited):
            if k == key and n != c and n not in mine:
                broke.append(f"{key}: attempt {n} edited its worktree, did not complete, and is not kept")
        if g["keep"]:
            expected_regs.add(path)
            e = registered.get(path)
            if e is None or not os.path.isdir(path):
                broke.append(f"{key}: its kept worktree {'is not registered' if e is None else 'is gone'}")
            elif e.get("HEAD") != tip or e.get("branch") != f"refs/heads/{branch}":
                broke.append(f"{key}: its worktree is at {e.get('HEAD')} on {e.get('branch')}, not {tip}")
            else:
                dirty = git(path, "status", "--porcelain=v1", check=False)
                if dirty:
                    broke.append(f"{key}: its worktree is not clean: {dirty.decode()[:120]!r}")
        elif os.path.lexists(path) or path in registered:
            broke.append(f"{key}: worktreeKeep = false, but its worktree is "
                         + ("registered" if path in registered else "still there"))
    for key, mine in kept.items():
        broke.append(f"attempts kept of no job: {key} {sorted(mine, key=str)}")
    stale = sorted(set(registered) - expected_regs)
    if stale:
        broke.append(f"worktree registrations of no kept job: {stale[:3]}")
    # What `git worktree list` does not show: a registration without a
    # `gitdir` (a `git worktree add` killed early), which `git worktree
    # prune` leaves alone while it is locked "initializing".
    admins = set()
    for e in listed[1:]:
        try:
            with open(os.path.join(e["worktree"], ".git")) as f:
                admins.add(os.path.realpath(f.read().strip().removeprefix("gitdir: ")))
        except OSError:
            pass
    regdir = os.path.join(root, ".git", "worktrees")
    unlisted = sorted(n for n in (os.listdir(regdir) if os.path.isdir(regdir) else [])
                      if os.path.realpath(os.path.join(regdir, n)) not in admins)
    if unlisted:
        broke.append(f"registrations git does not list: .git/worktrees/{unlisted[:3]}")
    # It says what it would prune on stderr.
    dry = git(root, "worktree", "prune", "--dry-run", "-v", check=False, stderr=True)
    if dry is None or dry.strip():
        broke.append(f"git worktree prune --dry-run -v: {dry!r}")
    if wanted:
        out = git(root, "cat-file", "--batch", data="".join(f"{o}\n" for _, o, _ in wanted).encode())
        for what, obj, text in wanted:
            header, _, out = out.partition(b"\n")
            if header.endswith(b" missing"):
                broke.append(f"{what} does not hold {obj.split(':')[1]}")
                continue
            size = int(header.split()[2])
            blob, out = out[:size], out[size + 1:]
            if blob.decode(errors="replace") != text:
                broke.append(f"{what}: {obj.split(':')[1]} holds {blob[:60]!r}, not {text!r}")
    after = checkout_state(root)
    moved = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if moved:
        broke.append(f"the user's checkout changed: {moved[:5]}"
                     + (f" (status {after['git status'][:120]!r})" if "git status" in moved else ""))
    locks = [os.path.relpath(os.path.join(d, n), root)
             for d, _, names in os.walk(f"{root}/.git") for n in names if n.endswith(".lock")]
    if locks:
        broke.append(f"git lock files left: {sorted(locks)[:5]}")
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


def git_running(pids):
    """The subcommands (`worktree add`, `reset`, ...) of the git processes
    among pids."""
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != "git":
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")[1:]
        except OSError:
            continue
        while argv and (argv[0] == "-c" or argv[0].startswith("--git-dir=") or argv[0].startswith("--work-tree=")):
            argv = argv[2:] if argv[0] == "-c" else argv[1:]
        if argv:
            out.append(" ".join(argv[:2]) if argv[0] == "worktree" else argv[0])
    return out


def trial(okstra, pristine, base, jobs, mode, delay, env, stop_limit, worktrees=False):
    """One trial; (landed, resumes, broken invariants, stop seconds, the git
    subcommands running when exec was killed)."""
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
    # What the user's checkout is once planned: no run may change it.
    before = checkout_state(root) if worktrees else None
    broke = []
    stopped_in = None
    in_git = []
    proc = run_exec(okstra, root, env, session=(mode == "int"))
    time.sleep(delay)
    if mode in ("exec", "tree"):
        kids = children_of(proc.pid) if mode == "tree" or worktrees else []
        # A kill of exec alone leaves its git running, orphaned.
        in_git = git_running(kids) if worktrees else []
        victims = [proc.pid] + (kids if mode == "tree" else [])
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        landed = proc.returncode == -signal.SIGKILL
    else:
        started = [(p, start_time(p)) for p in children_of(proc.pid)]
        in_git = git_running([p for p, _ in started]) if worktrees else []
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
                b for b in check(root, scratch, jobs) if not b.startswith("not completed")], stopped_in, in_git
    broke += check(root, scratch, jobs)
    if worktrees:
        broke += check_git(root, scratch, before)
    return landed, resumes, broke, stopped_in, in_git


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
    ap.add_argument("--worktrees", action="store_true",
                    help='worktree jobs (worktree = "git") in a git repository, and the git checks')
    ap.add_argument("--src-files", type=int, default=100,
                    help="tracked files under src/ besides src/shared.txt (--worktrees): "
                         "more make each checkout, reset and `git add -A` longer")
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
    make_project(pristine, os.path.join(base, "s"), args.jobs, args.confinement, args.worktrees, args.src_files)
    # A clean run, to learn how long one takes.
    shutil.copytree(pristine, os.path.join(base, "p"), symlinks=True)
    os.makedirs(os.path.join(base, "s"))
    subprocess.run([okstra, "plan", "spec.toml", "--manifest", "run/run-manifest.json", "--out", "plan.json"],
                   cwd=os.path.join(base, "p"), env=env, stdout=subprocess.DEVNULL, check=True)
    before = checkout_state(os.path.join(base, "p")) if args.worktrees else None
    t0 = time.time()
    subprocess.run([okstra, *EXEC], cwd=os.path.join(base, "p"), env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    clean = time.time() - t0
    broke_clean = check(os.path.join(base, "p"), os.path.join(base, "s"), args.jobs)
    if args.worktrees:
        broke_clean += check_git(os.path.join(base, "p"), os.path.join(base, "s"), before)
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
    stats = {m: {"trials": 0, "landed": 0, "resumes": 0, "broken": 0, "stops": [], "in_git": 0, "git": {}}
             for m in MODES}
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
        if args.worktrees:
            # Denser early: the first stage's worktrees are made there.
            drawn = clean * 1.1 * rnd.random() ** 2
        else:
            drawn = rnd.uniform(0, clean * 1.1)
        delay = args.delay if args.delay is not None else drawn
        landed, resumes, broke, stopped_in, in_git = trial(okstra, pristine, base, args.jobs, mode, delay, env,
                                                           1 + args.stop_slack, args.worktrees)
        s = stats[mode]
        s["in_git"] += int(bool(in_git))
        for sub in in_git:
            s["git"][sub] = s["git"].get(sub, 0) + 1
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
                     f"--trials-per-mode 1 --signal-trials 1"
                     + (f" --worktrees --src-files {args.src_files}" if args.worktrees else ""))
            with open(os.path.join(kept, "REPRO"), "w") as f:
                f.write(f"trial {i} ({MODES[mode]}), {delay:.4f} s after exec started "
                        f"(a clean run took {clean:.2f} s)\n{repro}\nbroke: {broke}\n"
                        f"The project was planned at {base}/p: move this directory's p and s back "
                        f"to {base} before running okstra in it.\n")
            failures.append((mode, i, delay, broke, kept))
    if failures:
        print(f"failing trials kept under {keep}; the work directory {work} is removed")
    shutil.rmtree(work, ignore_errors=True)
    kind = (f"worktree jobs ({args.src_files + 1} files in src/, a third worktreeKeep = false)"
            if args.worktrees else "jobs")
    print(f"okstra crash harness: {args.okstra}, confinement {args.confinement}, {args.jobs} {kind} in 2 stages "
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
    if args.worktrees:
        print("\n| stopped by | trials with git running at the instant | git commands running then, by subcommand |")
        print("| --- | ---: | --- |")
        for mode, label in MODES.items():
            s = stats[mode]
            if s["trials"]:
                subs = ", ".join(f"{k} {v}" for k, v in sorted(s["git"].items(), key=lambda kv: (-kv[1], kv[0])))
                print(f"| {label} | {s['in_git']} | {subs or '-'} |")
    if cut:
        print(f"{cut} trials not run: the --seconds {args.seconds:g} budget ran out")
    for mode, i, delay, broke, kept in failures[:10]:
        print(f"trial {i} ({mode}, {delay:.4f} s): {broke}\n  kept: {kept}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
