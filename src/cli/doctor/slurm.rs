//! A plan's Slurm jobs (SPEC §10): the client commands, the controller,
//! every partition they name, and a probe job per partition that must see
//! the project root.

use super::{check, version_of, which, Check, Level, VERSION_TIMEOUT};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a probe job may take to run and end (it may have to wait for
/// a node), unless `OKSTRA_DOCTOR_PROBE_SECONDS` says otherwise.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// A plan's Slurm jobs need (SPEC §10): Slurm's client commands, a
/// controller that answers, every partition they name, and nodes that see
/// the project root where exec does (a probe job per partition writes a
/// file under it) and can run the wrapper.
pub fn checks(plan: &crate::plan::Plan, root: &Path) -> Vec<Check> {
    use crate::exec::backend::slurm;
    let jobs: Vec<(String, &crate::plan::Job)> = plan
        .stages
        .iter()
        .enumerate()
        .flat_map(|(si, s)| {
            s.jobs
                .iter()
                .enumerate()
                .map(move |(ji, j)| (format!("/stages/{si}/jobs/{ji}"), j))
        })
        .filter(|(_, j)| j.backend == crate::vocab::Backend::Slurm)
        .collect();
    if jobs.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let Some(sbatch) = which("sbatch") else {
        out.push(check(
            "slurm sbatch",
            Level::Fail,
            format!("`sbatch` is not on PATH, and {} job(s) of the plan run on Slurm", jobs.len()),
            "run okstra on a Slurm login node, or install Slurm's client commands (Debian: slurm-client)",
        ));
        return out;
    };
    match version_of(&sbatch, VERSION_TIMEOUT) {
        Ok(v) => out.push(check(
            "slurm sbatch",
            Level::Ok,
            format!("{} ({v})", sbatch.display()),
            "",
        )),
        Err(e) => {
            out.push(check(
                "slurm sbatch",
                Level::Fail,
                format!("{}: {e}", sbatch.display()),
                "check the Slurm client installation (SLURM_CONF, munge)",
            ));
            return out;
        }
    }
    let known = match slurm::partitions() {
        Ok(p) => p,
        Err(e) => {
            out.push(check(
                "slurm controller",
                Level::Fail,
                format!("the cluster does not answer: {e}"),
                "check that slurmctld runs and SLURM_CONF names its configuration (`scontrol ping`)",
            ));
            return out;
        }
    };
    let listing = known
        .iter()
        .map(|(n, d)| {
            if *d {
                format!("{n} (default)")
            } else {
                n.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    let default = known.iter().find(|(_, d)| *d).map(|(n, _)| n.clone());
    // Each distinct set of submission options is probed once.
    let mut probes: Vec<(String, crate::plan::SlurmOptions)> = Vec::new();
    let mut named: Vec<(String, Vec<String>)> = Vec::new();
    for (pointer, job) in &jobs {
        let options = job.slurm.clone().unwrap_or_default();
        let (partition, at) = match &options.partition {
            Some(p) => (Some(p.clone()), format!("{pointer}/slurm/partition")),
            None => (default.clone(), pointer.clone()),
        };
        let Some(partition) = partition else {
            out.push(check(
                "slurm partition",
                Level::Fail,
                format!("{} names no partition ({at}) and the cluster has no default one (partitions: {listing})", job.label()),
                "set slurm.partition in the spec, then plan again",
            ));
            continue;
        };
        let who = format!("{} ({at})", job.label());
        match named.iter_mut().find(|(p, _)| *p == partition) {
            Some((_, w)) => w.push(who),
            None => named.push((partition.clone(), vec![who])),
        }
        if known.iter().any(|(n, _)| *n == partition) {
            let probe_options = crate::plan::SlurmOptions {
                partition: Some(partition.clone()),
                account: options.account.clone(),
                ..Default::default()
            };
            if !probes.iter().any(|(_, o)| *o == probe_options) {
                probes.push((partition, probe_options));
            }
        }
    }
    for (partition, workers) in &named {
        let name = format!("slurm partition {partition}");
        if known.iter().any(|(n, _)| n == partition) {
            out.push(check(
                name,
                Level::Ok,
                format!("exists; used by {}", workers.join(", ")),
                "",
            ));
        } else {
            out.push(check(
                name,
                Level::Fail,
                format!("partition `{partition}` does not exist on this cluster (partitions: {listing}); named by {}", workers.join(", ")),
                "set slurm.partition in the spec to one of the cluster's partitions (`sinfo`), then plan again",
            ));
        }
    }
    let wrapper = match std::env::current_exe() {
        Ok(okstra) => crate::exec::backend::WorkerExe::beside(&okstra),
        Err(_) => crate::exec::backend::WorkerExe::subcommand(Path::new("okstra")),
    };
    let wrapper = PathBuf::from(
        wrapper
            .argv(&["okstra".into(), "worker".into()])
            .into_iter()
            .next()
            .unwrap_or_default(),
    );
    let timeout = std::env::var("OKSTRA_DOCTOR_PROBE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(PROBE_TIMEOUT, Duration::from_secs);
    for (partition, options) in &probes {
        let name = format!("slurm node sees the project ({partition})");
        out.push(match slurm::probe(root, &wrapper, options, timeout) {
            Ok(slurm::Probe::Shared { job, wrapper: true, took }) => check(
                name,
                Level::Ok,
                format!("probe job {job} wrote under {} and read back here in {:.1} s; the node can run {}", root.display(), took.as_secs_f64(), wrapper.display()),
                "",
            ),
            Ok(slurm::Probe::Shared { job, wrapper: false, .. }) => check(
                name,
                Level::Fail,
                format!("probe job {job} sees the project root, but not an executable {} on its node", wrapper.display()),
                "install okstra at the same path on every node (or on the shared filesystem)",
            ),
            Ok(slurm::Probe::NotShared { job, state }) => check(
                name,
                Level::Fail,
                format!("probe job {job} ended {state}, but the file it writes under {} never appeared here: the nodes do not share the project root", root.display()),
                "put the project on a filesystem every node mounts at the same path (NFS, Lustre, ...)",
            ),
            Ok(slurm::Probe::Unfinished { job, state }) => check(
                name,
                Level::Warn,
                format!("probe job {job} did not finish within {} s ({state}); cancelled, so whether nodes see the project is unknown", timeout.as_secs()),
                "run doctor again when the partition has room (OKSTRA_DOCTOR_PROBE_SECONDS waits longer)",
            ),
            Err(e) => check(name, Level::Fail, format!("cannot submit a probe job: {e}"), "run the same sbatch by hand to see what the cluster refuses"),
        });
    }
    out
}
