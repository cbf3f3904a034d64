#!/usr/bin/env python3
"""Generate a v2 project of N workers for the planning benchmark.

usage: gen_plan_fixture.py N DIR

Writes DIR/run/run-manifest.json (N role executions, participants, one model),
DIR/prompts/wNNNNN.md with their .meta.json, and DIR/spec.toml (one stage of
N v2 workers, `command` provider). Digests are computed the way okstra
computes them: sha256 of RFC 8785 canonical JSON, which for these documents
(ASCII keys, string values) is json.dumps with sorted keys and no spaces.
"""
import hashlib
import json
import os
import sys


def canonical(v):
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def main():
    n, root = int(sys.argv[1]), sys.argv[2]
    os.makedirs(os.path.join(root, "run"), exist_ok=True)
    os.makedirs(os.path.join(root, "prompts"), exist_ok=True)
    binding = {"runner": "cli-wrapper", "resolvedExecutionValue": "model-a"}
    model = {"provider": "claude", "modelId": "model-a", "versionKind": "pinned", "channelFamily": "model"}
    digest = "sha256:" + hashlib.sha256(canonical({"binding": binding, "model": model}).encode()).hexdigest()
    executions, participants, spec = [], [], ['[defaults]\nprovider = "command"\nschemaVersion = "2.0"\n'
                                              'executionIdentityVersion = 2\nmodelExecutionValue = "model-a"\n'
                                              'role = "analyst"\ndutyId = "analysis"\nattempt = 1\n'
                                              'command = ["true"]\nmutationAudit = "none"\n']
    for i in range(n):
        w = f"w{i:05d}"
        executions.append({"roleExecutionRef": f"re-{w}", "participantRef": f"p-{w}", "executionLabel": w,
                           "role": "analyst", "provider": "command", "modelRef": "m1", "binding": binding,
                           "modelSpecDigest": digest})
        participants.append({"participantRef": f"p-{w}"})
        prompt = f"prompts/{w}.md"
        with open(os.path.join(root, prompt), "w") as f:
            f.write(f"# analysis {i}\n\nAnalyse part {i}.\n")
        meta = {"schemaVersion": "2.0", "executionIdentityVersion": 2, "invocationId": f"inv-{w}",
                "invocationRef": f"inv-{w}", "audience": "analysis", "assignmentRef": f"initial/{w}",
                "dispatchKind": "initial", "participantRef": f"p-{w}", "roleExecutionRef": f"re-{w}",
                "executionLabel": w, "dutyId": "analysis", "attempt": 1, "prompt": {"path": prompt},
                "digests": {k: "sha256:" + "0" * 64 for k in
                            ("catalogDigest", "assignmentDigest", "dutyDigest", "instructionDigest", "promptDigest")},
                "modelAssignment": {"modelExecutionValue": "model-a", "hostModelValue": None}}
        with open(os.path.join(root, prompt + ".meta.json"), "w") as f:
            json.dump(meta, f)
        spec.append(f'\n[[workers]]\nparticipantRef = "p-{w}"\nroleExecutionRef = "re-{w}"\n'
                    f'executionLabel = "{w}"\ninvocationRef = "inv-{w}"\nassignmentRef = "initial/{w}"\n'
                    f'promptPath = "{prompt}"\nresultPath = "results/{w}.md"\n')
    manifest = {"taskKey": "bench", "teamStatePath": "run/team-state.json", "schemaVersion": "2.0",
                "executionIdentityVersion": 2, "terminalBackend": "cli-wrapper",
                "roleExecutions": executions, "participantAssignments": participants, "models": {"m1": model}}
    with open(os.path.join(root, "run", "run-manifest.json"), "w") as f:
        json.dump(manifest, f)
    with open(os.path.join(root, "spec.toml"), "w") as f:
        f.write("".join(spec))


if __name__ == "__main__":
    main()
