#!/bin/sh
# A stand-in for an AI verifier: checks the implementer's output.
set -eu
cat >/dev/null
mkdir -p "$(dirname "$OKSTRA_RESULT_PATH")"
if grep -q Hello out/greeting.txt; then verdict=pass; else verdict=fail; fi
printf '# Verifier\n\nverdict: %s\n' "$verdict" > "$OKSTRA_RESULT_PATH"
echo "verifier: $verdict"
