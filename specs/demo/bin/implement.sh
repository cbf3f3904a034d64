#!/bin/sh
# A stand-in for an AI implementer: it reads its prompt on stdin and writes
# the files its write policy allows.
set -eu
cat >/dev/null
mkdir -p out "$(dirname "$OKSTRA_RESULT_PATH")"
echo "Hello from okstra, attempt $OKSTRA_ATTEMPT" > out/greeting.txt
printf '# Implementer\n\nWrote out/greeting.txt (worker %s).\n' "$OKSTRA_WORKER_KEY" > "$OKSTRA_RESULT_PATH"
echo "implementer: done"
