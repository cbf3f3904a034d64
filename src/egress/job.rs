//! What a planned job's door in the egress proxy lets through
//! (docs/confinement.md#network).

use super::{Allow, RuleError};
use crate::plan::Job;
use crate::provider::hosts::{self, ApiHosts};

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
