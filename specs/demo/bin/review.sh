#!/bin/sh
# A flaky stand-in: the first attempt "forgets" its result and exits 0,
# which okstra answers with one retry (docs/exec.md#retries).
set -eu
cat >/dev/null
if [ "$OKSTRA_ATTEMPT" = 1 ]; then
  echo "reviewer: attempt 1 exits without writing its result"
  exit 0
fi
mkdir -p "$(dirname "$OKSTRA_RESULT_PATH")"
printf '# Reviewer\n\nBoth results are present (attempt %s).\n' "$OKSTRA_ATTEMPT" > "$OKSTRA_RESULT_PATH"
echo "reviewer: wrote the result on attempt $OKSTRA_ATTEMPT"
