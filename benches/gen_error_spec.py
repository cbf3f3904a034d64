#!/usr/bin/env python3
"""Generate a project whose job spec is a minified JSON file full of errors,
for the planning memory benchmark (benches/plan_memory.sh).

usage: gen_error_spec.py DIR [SIZE_MB]   (default 10)

Writes DIR/run/run-manifest.json (v1), DIR/prompts/p.md and DIR/spec.json:
one line of JSON, about SIZE_MB megabytes, of worker entries that cycle
through the problems a careless or generated spec has:

- duplicates: the same workerId and resultPath again and again
  (identity/duplicate and rules/write-conflict for every copy);
- v2 entries with attempt 0 (identity/bad-attempt) or a boolean attempt;
- unknown keys, each with a long value (schema/violation, pointed at the key);
- wrong types (a number for role, a string for idleTimeoutSeconds);
- v1 entries carrying v2 fields (identity/mixed-versions);
- a missing prompt (input/missing) and a path escaping the root.

Every entry yields at least one diagnostic, so the file is as bad as a file
of its size can be: the case where memory once grew with (diagnostics x
line length).
"""
import json
import os
import sys


def entries():
    i = 0
    while True:
        i += 1
        kind = i % 8
        if kind == 0:
            yield {"workerId": "dup", "provider": "command", "role": "analyst",
                   "promptPath": "prompts/p.md", "resultPath": "results/dup.md", "command": ["true"]}
        elif kind == 1:
            yield {"schemaVersion": "2.0", "executionIdentityVersion": 2, "participantRef": f"p{i}",
                   "roleExecutionRef": f"re{i}", "executionLabel": f"L{i}", "dutyId": "analysis",
                   "invocationRef": f"inv{i}", "provider": "command", "assignmentRef": f"a/w{i}",
                   "attempt": 0, "role": "analyst", "promptPath": "prompts/p.md", "command": ["true"]}
        elif kind == 2:
            yield {"workerId": f"w{i}", "provider": "command", "role": "analyst",
                   "promptPath": "prompts/p.md", "resultPath": f"results/w{i}.md", "command": ["true"],
                   f"unknownKey{i}": "x" * 64}
        elif kind == 3:
            yield {"workerId": f"w{i}", "provider": "command", "role": 7, "promptPath": "prompts/p.md",
                   "resultPath": f"results/w{i}.md", "idleTimeoutSeconds": "soon", "command": ["true"]}
        elif kind == 4:
            yield {"workerId": f"w{i}", "participantRef": f"p{i}", "dutyId": "analysis",
                   "provider": "command", "role": "analyst", "promptPath": "prompts/p.md",
                   "command": ["true"]}
        elif kind == 5:
            yield {"workerId": f"w{i}", "provider": "command", "role": "analyst",
                   "promptPath": f"prompts/missing-{i}.md", "resultPath": f"../outside/w{i}.md",
                   "command": ["true"]}
        elif kind == 6:
            yield {"schemaVersion": "2.0", "executionIdentityVersion": 2, "participantRef": f"p{i}",
                   "roleExecutionRef": f"re{i}", "executionLabel": f"L{i}", "dutyId": "analysis",
                   "invocationRef": f"inv{i}", "provider": "command", "assignmentRef": f"a/w{i}",
                   "attempt": True, "role": "analyst", "promptPath": "prompts/p.md", "command": ["true"]}
        else:
            yield {"workerId": "dup", "provider": "command", "role": "analyst", "promptPath": "prompts/p.md",
                   "resultPath": "results/dup.md", "command": ["true"], "mutationAudit": "sometimes"}


def main():
    root = sys.argv[1]
    size = int(float(sys.argv[2] if len(sys.argv) > 2 else 10) * 1_000_000)
    os.makedirs(os.path.join(root, "run"), exist_ok=True)
    os.makedirs(os.path.join(root, "prompts"), exist_ok=True)
    with open(os.path.join(root, "prompts", "p.md"), "w") as f:
        f.write("# work\n")
    manifest = {"taskKey": "bench", "teamStatePath": "run/team-state.json",
                "terminalBackend": "cli-wrapper", "workflow": {"currentPhase": "analysis"},
                "recommendedWorkers": ["dup"]}
    with open(os.path.join(root, "run", "run-manifest.json"), "w") as f:
        json.dump(manifest, f)
    parts, total = [], len('{"workers":[]}')
    for e in entries():
        s = json.dumps(e, separators=(",", ":"))
        if total + len(s) + 1 > size:
            break
        parts.append(s)
        total += len(s) + 1
    with open(os.path.join(root, "spec.json"), "w") as f:
        f.write('{"workers":[' + ",".join(parts) + "]}")
    print(f"{len(parts)} workers, {total} bytes")


if __name__ == "__main__":
    main()
