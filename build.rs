//! Link settings for the `okstra` binary.
//!
//! On Linux the binary is linked as a position-dependent executable. Every
//! job starts it once more as the worker wrapper, and as a PIE each start
//! has the dynamic loader apply some 21,000 relative relocations, which
//! copies about 90 pages of pointer tables: a third of the wrapper's start
//! (1.1 ms against 0.8 ms on the benchmark machine, see benches/README.md).
//! The shared libraries, heap and stack keep their address randomisation.
//!
//! A static build (`scripts/build-static.sh`: `crt-static` with the static
//! relocation model) is position-dependent already; there `-no-pie` would
//! contradict the static link, so it is left out.
fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let features = std::env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    let crt_static = features.split(',').any(|f| f == "crt-static");
    if os == "linux" && !crt_static {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
