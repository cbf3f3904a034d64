//! The run's egress proxy (docs/confinement.md#network): started with the
//! first attempt whose worker is confined to its provider's network, a door
//! opened for each such attempt as it starts and closed as it settles,
//! whose record goes on the dispatch row and into the events log.

use super::Runner;
use crate::confine;
use crate::egress::job::Here;
use crate::egress::{Door, Egress, Limits, Proxy};
use crate::plan::Job;
use std::collections::HashMap;
use std::io;

/// The proxy, once started, and the doors of the attempts still running.
#[derive(Default)]
pub(super) struct Doors {
    proxy: Option<Proxy>,
    open: HashMap<(usize, u64), Door>,
}

impl Runner<'_> {
    /// The port of the door of attempt `attempt` of job `i`, opened now,
    /// where its worker will be confined here to its provider's network;
    /// `None` where it will not (unconfined, another network, a kernel
    /// that cannot, a Slurm node that could not reach the door).
    pub(super) fn open_door(
        &mut self,
        i: usize,
        job: &Job,
        attempt: u64,
    ) -> io::Result<Option<u16>> {
        let offer = self.offer.get_or_init(confine::offer);
        let allow = match crate::egress::job::here(job, offer) {
            Here::Door(allow) => {
                allow.map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?
            }
            _ => return Ok(None),
        };
        let proxy = match &mut self.doors.proxy {
            Some(proxy) => proxy,
            slot => slot.insert(Proxy::start(Limits::default())?),
        };
        let door = proxy.open(allow)?;
        let port = door.port();
        self.doors.open.insert((i, attempt), door);
        Ok(Some(port))
    }

    /// Close the door of attempt `attempt` of job `i`, if it has one: what
    /// passed through it.
    pub(super) fn close_door(&mut self, i: usize, attempt: u64) -> Option<Egress> {
        self.doors.open.remove(&(i, attempt)).map(Door::close)
    }
}
