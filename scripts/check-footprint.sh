#!/usr/bin/env bash
# The install footprint's ceilings (benches/README.md, "Install footprint"):
# after a plain `cargo build --release`, `okstra` is at most 20 MB and
# `okstra-worker` at most 5 MB. `.ci/run` calls this; so can anyone.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
fail=0
check() {
    local bin=$1 ceiling_mb=$2 size
    size=$(stat -c %s "target/release/$bin")
    printf '%-14s %6.1f MB (ceiling %s MB)\n' "$bin" "$(awk -v s="$size" 'BEGIN { print s / 1000000 }')" "$ceiling_mb"
    if [ "$size" -gt $((ceiling_mb * 1000000)) ]; then
        echo "$bin is over its ceiling: is debug info back in [profile.release]?" >&2
        fail=1
    fi
}
check okstra 20
check okstra-worker 5
exit "$fail"
