//! A worker's request to its door in the egress proxy: the head as the
//! proxy parses it, where it goes, the allow list's verdict, and a plain
//! request's head as rewritten for its server (`okstra::egress::check_request`
//! panics where an invariant fails).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let allow = [
        "api.example.com".to_string(),
        "*.example.org:8443".to_string(),
        "127.0.0.1:9".to_string(),
        "[::1]".to_string(),
    ];
    okstra::egress::check_request(data, &allow);
});
