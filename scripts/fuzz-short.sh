#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets/) briefly on its corpus: about
# FUZZ_SECONDS in all (default 90 s; with start-up, under two minutes),
# split evenly.
# Fails on the first crash, panic, hang (> 60 s on one input) or
# out-of-memory; libFuzzer leaves the input under fuzz/artifacts/<target>/.
#
# Needs the nightly toolchain (cargo fuzz builds with sanitizer flags) and
# cargo-fuzz; both are installed when missing. The first build of the
# targets takes minutes; later runs reuse fuzz/target.
#
# New inputs found go to a scratch directory, not into fuzz/corpus: the
# committed corpus changes only when someone minimises and commits it
# (`cargo +nightly fuzz cmin <target>`).
set -euo pipefail
cd "$(dirname "$0")/.."
total=${FUZZ_SECONDS:-90}

if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal
fi
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

targets=$(cargo +nightly fuzz list)
count=$(wc -w <<<"$targets")
per=$(( total / count ))
(( per >= 1 )) || per=1
cargo +nightly fuzz build -O

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for t in $targets; do
  mkdir -p "$scratch/$t"
  echo "fuzz $t for ${per}s"
  # Corpus dirs: the scratch one first (libFuzzer writes new inputs to the
  # first), then the committed one, read only.
  if ! cargo +nightly fuzz run -O "$t" "$scratch/$t" "fuzz/corpus/$t" -- \
      -max_total_time="$per" -timeout=60 -rss_limit_mb=4096 \
      >"$scratch/$t.log" 2>&1; then
    echo "fuzz target $t failed:" >&2
    grep -E 'panicked|ERROR|SUMMARY|Test unit written|artifact_prefix' "$scratch/$t.log" >&2 || tail -40 "$scratch/$t.log" >&2
    exit 1
  fi
  grep -E '^Done [0-9]+ runs' "$scratch/$t.log" || true
done
echo "fuzz: $count targets, no crash"
