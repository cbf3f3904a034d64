//! What a door keeps while it is open: for each destination, counters the
//! connection threads add to as bytes pass, and the refusals in order
//! (docs/confinement.md#network).

use super::{Destination, Egress, Refusal};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// One destination's counters, shared by the threads relaying to it.
#[derive(Debug, Default)]
pub(super) struct Counters {
    connections: AtomicU64,
    pub(super) bytes_out: AtomicU64,
    pub(super) bytes_in: AtomicU64,
}

/// A door's record, filled in by its connection threads.
#[derive(Debug, Default)]
pub(super) struct Record {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// By (host, port, allowed): the sort order of [`Egress::destinations`].
    destinations: BTreeMap<(String, u16, bool), Arc<Counters>>,
    refusals: Vec<Refusal>,
    refusals_dropped: u64,
}

impl Record {
    /// Counts one connection to `host:port`, let through or not, and gives
    /// the counters its bytes are added to.
    pub(super) fn connection(&self, host: &str, port: u16, allowed: bool) -> Arc<Counters> {
        let mut inner = self.lock();
        let counters = inner
            .destinations
            .entry((host.to_string(), port, allowed))
            .or_default()
            .clone();
        counters.connections.fetch_add(1, Ordering::Relaxed);
        counters
    }

    /// Keeps a refusal (only counts it past [`Egress::REFUSALS_KEPT`]).
    pub(super) fn refusal(&self, host: &str, port: u16, reason: String) {
        let mut inner = self.lock();
        if inner.refusals.len() < Egress::REFUSALS_KEPT {
            inner.refusals.push(Refusal {
                host: host.to_string(),
                port,
                reason,
            });
        } else {
            inner.refusals_dropped += 1;
        }
    }

    /// A refused request: a connection not let through, and its refusal.
    pub(super) fn refused(&self, host: &str, port: u16, reason: String) {
        self.connection(host, port, false);
        self.refusal(host, port, reason);
    }

    /// The record as it stands.
    pub(super) fn snapshot(&self) -> Egress {
        let inner = self.lock();
        let destinations = inner
            .destinations
            .iter()
            .map(|((host, port, allowed), c)| Destination {
                host: host.clone(),
                port: *port,
                allowed: *allowed,
                connections: c.connections.load(Ordering::Relaxed),
                bytes_out: c.bytes_out.load(Ordering::Relaxed),
                bytes_in: c.bytes_in.load(Ordering::Relaxed),
            })
            .collect();
        Egress {
            destinations,
            refusals: inner.refusals.clone(),
            refusals_dropped: inner.refusals_dropped,
        }
    }

    /// A thread that panicked while holding the lock left counters that
    /// are still counters: carry on with them.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_are_sorted_and_counted() {
        let r = Record::default();
        let a = r.connection("b.test", 443, true);
        a.bytes_out.fetch_add(10, Ordering::Relaxed);
        let again = r.connection("b.test", 443, true);
        again.bytes_in.fetch_add(7, Ordering::Relaxed);
        r.connection("a.test", 8080, true);
        r.connection("a.test", 80, true);
        r.refused("b.test", 443, "not in this worker's allow list".into());
        let e = r.snapshot();
        let keys: Vec<_> = e
            .destinations
            .iter()
            .map(|d| (d.host.as_str(), d.port, d.allowed, d.connections))
            .collect();
        assert_eq!(
            keys,
            [
                ("a.test", 80, true, 1),
                ("a.test", 8080, true, 1),
                ("b.test", 443, false, 1),
                ("b.test", 443, true, 2),
            ]
        );
        assert_eq!(
            (e.destinations[3].bytes_out, e.destinations[3].bytes_in),
            (10, 7)
        );
        assert_eq!(e.refusals.len(), 1);
        assert_eq!(e.refusals_dropped, 0);
    }

    #[test]
    fn refusals_past_the_cap_are_only_counted() {
        let r = Record::default();
        for i in 0..Egress::REFUSALS_KEPT + 5 {
            r.refused("x.test", 443, format!("refusal {i}"));
        }
        let e = r.snapshot();
        assert_eq!(e.refusals.len(), Egress::REFUSALS_KEPT);
        assert_eq!(e.refusals[0].reason, "refusal 0");
        assert_eq!(e.refusals_dropped, 5);
        assert_eq!(
            e.destinations[0].connections,
            Egress::REFUSALS_KEPT as u64 + 5
        );
    }

    #[test]
    fn destinations_and_refusals_are_camel_case_json() {
        let d = Destination {
            host: "a.test".into(),
            port: 443,
            allowed: true,
            connections: 2,
            bytes_out: 3,
            bytes_in: 4,
        };
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"host": "a.test", "port": 443, "allowed": true,
                "connections": 2, "bytesOut": 3, "bytesIn": 4})
        );
        assert_eq!(serde_json::from_value::<Destination>(json).unwrap(), d);
        let r = Refusal {
            host: "b.test".into(),
            port: 80,
            reason: "why".into(),
        };
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({"host": "b.test", "port": 80, "reason": "why"})
        );
    }
}
