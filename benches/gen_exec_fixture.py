#!/usr/bin/env python3
"""Generate a project of N trivial `command` jobs for the executor benchmark.

usage: gen_exec_fixture.py N DIR [--audit FILES] [--confinement MODE]

Builds on gen_plan_fixture.py (one stage of N v2 workers, `command`
provider), then makes every job trivial but complete: it writes its own
result file, `sh -c ': > "$OKSTRA_RESULT_PATH"'`, so each attempt settles
`completed` on the first try. Also writes DIR/jobs.txt, one result path a
line, for xargs and GNU parallel to run the same command on.

By default the jobs opt out of the mutation audit (`mutationAudit = "none"`).
With `--audit FILES` they keep the default (`batch`) and the project gets a
small tree of FILES source files in FILES/20 directories for exec to
snapshot and compare.

`--confinement MODE` sets the jobs' kernel confinement (`none`, `auto`,
`required`); without it they run unconfined (`none`), as before
confinement existed, so figures stay comparable across versions.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_plan_fixture  # noqa: E402

TRIVIAL = 'command = ["sh", "-c", ": > \\"$OKSTRA_RESULT_PATH\\""]\n'


def main():
    args = sys.argv[1:]
    audit_files = 0
    if "--audit" in args:
        i = args.index("--audit")
        audit_files = int(args[i + 1])
        del args[i:i + 2]
    confinement = "none"
    if "--confinement" in args:
        i = args.index("--confinement")
        confinement = args[i + 1]
        del args[i:i + 2]
    n, root = int(args[0]), args[1]
    sys.argv = [sys.argv[0], str(n), root]
    gen_plan_fixture.main()

    spec_path = os.path.join(root, "spec.toml")
    with open(spec_path) as f:
        spec = f.read()
    for old, new in (('command = ["true"]\n', TRIVIAL),
                     ('mutationAudit = "none"\n', "" if audit_files else 'mutationAudit = "none"\n')):
        assert spec.count(old) == 1, f"unexpected fixture spec: {old!r} not found once"
        spec = spec.replace(old, new)
    spec = spec.replace("[defaults]\n", f'[defaults]\nconfinement = "{confinement}"\n', 1)
    with open(spec_path, "w") as f:
        f.write(spec)

    os.makedirs(os.path.join(root, "results"), exist_ok=True)
    with open(os.path.join(root, "jobs.txt"), "w") as f:
        for i in range(n):
            f.write(f"results/w{i:05d}.md\n")

    dirs = max(audit_files // 20, 1)
    for i in range(audit_files):
        d = os.path.join(root, "src", f"d{i % dirs:03d}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:05d}.rs"), "w") as f:
            f.write(f"// file {i}\npub fn f{i}() -> u32 {{ {i} }}\n")


if __name__ == "__main__":
    main()
