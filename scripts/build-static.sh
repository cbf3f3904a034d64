#!/usr/bin/env bash
# Build okstra as one static executable for Linux with glibc: no dynamic
# loader, no shared libraries, position-dependent. Every job starts the
# binary once more as `okstra worker`, and each shared library a process
# loads costs it a start-up of its own (the loader maps and relocates libc,
# libm and libgcc_s before `main`); benches/README.md measures both builds.
#
# usage: scripts/build-static.sh [cargo build options...]
# Prints the binary's path, ${CARGO_TARGET_DIR:-target}/<host>/release/okstra.
set -euo pipefail
cd "$(dirname "$0")/.."
host=$(rustc -vV | sed -n 's/^host: //p')
case "$host" in
  *-linux-gnu*) ;;
  *)
    echo "build-static: this builds static glibc executables, for *-linux-gnu hosts; this host is $host" >&2
    echo "hint: use cargo build --release" >&2
    exit 2
    ;;
esac
# With --target, RUSTFLAGS reach only the target's crates: build scripts and
# proc macros stay ordinary (a proc macro cannot be built crt-static).
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static -C relocation-model=static" \
  cargo build --release --target "$host" "$@" >&2
bin="${CARGO_TARGET_DIR:-target}/$host/release/okstra"
if readelf -l "$bin" | grep -q 'INTERP'; then
  echo "build-static: $bin still names a dynamic loader; the static link did not happen" >&2
  exit 1
fi
"$bin" --version >/dev/null
echo "$bin"
