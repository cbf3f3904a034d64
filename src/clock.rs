//! The wall clock, read and written one way: every timestamp okstra records
//! is UTC in RFC 3339, and every duration on the wire is whole
//! milliseconds.
//!
//! Timeouts, idleness and elapsed times are measured with the monotonic
//! [`std::time::Instant`] where they are taken, never from here: a wall
//! clock that steps must not stop a worker or stretch a grace period.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, with whole seconds: `2026-11-30T01:02:03Z` (records, rows, events).
pub fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// Now, with milliseconds: `2026-11-30T01:02:03.456Z` (the wrapper's
/// status sidecar, rewritten every heartbeat).
pub fn now_millis() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// The timestamp stamped on a new plan: `SOURCE_DATE_EPOCH` when it holds
/// whole seconds since the epoch (for reproducible output), else now.
pub fn plan_created_at() -> String {
    created_at(std::env::var("SOURCE_DATE_EPOCH").ok().as_deref())
}

fn created_at(source_date_epoch: Option<&str>) -> String {
    let time = source_date_epoch
        .and_then(|s| s.parse::<u64>().ok())
        .map(|secs| UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap_or_else(SystemTime::now);
    humantime::format_rfc3339_seconds(time).to_string()
}

/// Nanoseconds since the epoch, now (0 on a clock set before it).
pub fn unix_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// A duration as whole milliseconds on the wire (saturating: a `u64` of
/// milliseconds is half a billion years).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_rfc3339_in_seconds_or_milliseconds() {
        let s = now();
        assert_eq!(s.len(), 20, "{s}");
        assert!(s.ends_with('Z') && s.as_bytes()[10] == b'T', "{s}");
        assert!(humantime::parse_rfc3339(&s).is_ok(), "{s}");
        let ms = now_millis();
        assert_eq!(ms.len(), 24, "{ms}");
        assert!(ms.ends_with('Z') && ms.as_bytes()[19] == b'.', "{ms}");
    }

    #[test]
    fn a_plan_is_stamped_with_source_date_epoch_when_it_reads() {
        assert_eq!(created_at(Some("0")), "1970-01-01T00:00:00Z");
        assert_eq!(created_at(Some("1767225600")), "2026-01-01T00:00:00Z");
        // Not whole seconds: now, as without it.
        for unread in [Some("soon"), Some("-1"), Some("1.5"), None] {
            let stamp = created_at(unread);
            assert!(stamp.as_str() > "2026", "{unread:?}: {stamp}");
        }
    }

    #[test]
    fn durations_go_out_in_whole_milliseconds() {
        assert_eq!(millis(Duration::from_micros(1_999)), 1);
        assert_eq!(millis(Duration::from_secs(90)), 90_000);
        assert_eq!(millis(Duration::MAX), u64::MAX, "saturates");
        assert!(unix_nanos() > 1_700_000_000 * 1_000_000_000);
    }
}
