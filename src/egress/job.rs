//! What a planned job's network is on this machine, and what its door in
//! the egress proxy lets through (docs/confinement.md#network): the one
//! reading that exec (which opens the doors), the review and doctor share.

use super::{Allow, RuleError};
use crate::confine::{self, Offer};
use crate::plan::Job;
use crate::provider::hosts::{self, ApiHosts};
use crate::vocab::{Backend, NetworkMode};

/// A job's network on a machine offering [`Offer`].
#[derive(Debug)]
pub enum Here {
    /// Not confined here (or planned without `network`): nothing governed.
    Unconfined,
    /// `network = "open"`.
    Open,
    /// A confined network asked for with `auto` where the kernel cannot
    /// confine one (why): it runs open.
    OpenHere(String),
    /// A confined network `required` where the kernel cannot (why): exec
    /// refuses the job.
    Refused(String),
    /// `network = "none"`.
    None,
    /// `provider` on a Slurm node, which cannot reach exec's proxy: no door,
    /// so no network.
    NoDoor,
    /// Through a door letting through this (or why its list is unusable).
    Door(Result<Allow, RuleError>),
}

/// What `job`'s network is on a machine offering `offer`.
pub fn here(job: &Job, offer: &Offer) -> Here {
    let wanted = job.write_enforcement.confinement;
    let Some(network) = &job.network else {
        return Here::Unconfined;
    };
    if confine::decide(wanted, offer) != Ok(true) {
        return Here::Unconfined;
    }
    let mode = network.mode();
    match confine::decide_net(wanted, mode, offer) {
        Err(why) => Here::Refused(why),
        Ok(false) if mode == NetworkMode::Open => Here::Open,
        Ok(false) => Here::OpenHere(confine::net_unavailable(offer).unwrap_or_default()),
        Ok(true) if mode == NetworkMode::None => Here::None,
        Ok(true) if job.backend == Backend::Slurm => Here::NoDoor,
        Ok(true) => Here::Door(allow_of(job)),
    }
}

/// What a job's door lets through: its provider's API hosts and the spec's
/// `allow` list.
pub fn allow_of(job: &Job) -> Result<Allow, RuleError> {
    let var = |name: &str| {
        job.env
            .get(name)
            .cloned()
            .or_else(|| std::env::var(name).ok())
    };
    let mut allow = match hosts::api_hosts(job.provider, &job.provider_command, &var) {
        ApiHosts::BaseUrls(urls) => {
            let mut allow = Allow::default();
            for url in &urls {
                allow.push(Allow::from_base_url(url).unwrap_or_default());
            }
            allow
        }
        ApiHosts::Vendor(list) => {
            Allow::parse(&list.iter().map(|h| h.to_string()).collect::<Vec<_>>())?
        }
    };
    if let Some(network) = &job.network {
        allow.push(Allow::parse(network.allow())?);
    }
    Ok(allow)
}
