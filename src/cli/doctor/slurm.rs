//! A plan's Slurm jobs (docs/slurm.md#running-on-slurm): the client commands,
//! the controller, every partition they name, and a probe job per partition
//! that must see the project root.

use super::{check, version_of, which, Check, Level, VERSION_TIMEOUT};
use okstra::exec::backend::slurm::{self, Probe};
use okstra::plan::{Plan, SlurmOptions};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a probe job may take to run and end (it may have to wait for
/// a node), unless `OKSTRA_DOCTOR_PROBE_SECONDS` says otherwise.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// A plan's Slurm jobs need (docs/slurm.md#running-on-slurm): Slurm's client
/// commands, a controller that answers, every partition they name, and nodes
/// that see the project root where exec does (a probe job per partition writes
/// a file under it) and can run the wrapper.
///
/// Each step stands on the one before: without working client commands
/// the controller cannot be asked, and without its list of partitions
/// there is nothing to check the jobs' partitions against or to probe; so
/// a failure of either ends the checks.
pub fn checks(plan: &Plan, root: &Path) -> Vec<Check> {
    let jobs = slurm_jobs(plan);
    if jobs.is_empty() {
        return Vec::new();
    }
    let sbatch = sbatch(jobs.len());
    if sbatch.status != Level::Ok {
        return vec![sbatch];
    }
    let mut out = vec![sbatch];
    let cluster = match controller() {
        Ok(cluster) => cluster,
        Err(failed) => {
            out.push(failed);
            return out;
        }
    };
    let placement = place(&jobs, &cluster);
    out.extend(placement.unplaced);
    for (partition, workers) in &placement.named {
        out.push(partition_check(&cluster, partition, workers));
    }
    out.extend(probe_checks(root, &placement.probes));
    out
}

/// A job of the plan that runs on Slurm, as these checks see it.
struct SlurmJob<'a> {
    /// Where the plan holds the job (`/stages/0/jobs/1`), for messages.
    pointer: String,
    label: &'a str,
    /// Its submission options (none given: the cluster's defaults).
    options: SlurmOptions,
}

/// The plan's Slurm jobs, in plan order, each with its pointer into the
/// whole plan (the other jobs keep their indexes).
fn slurm_jobs(plan: &Plan) -> Vec<SlurmJob<'_>> {
    plan.stages
        .iter()
        .enumerate()
        .flat_map(|(si, s)| {
            s.jobs
                .iter()
                .enumerate()
                .map(move |(ji, j)| (format!("/stages/{si}/jobs/{ji}"), j))
        })
        .filter(|(_, j)| j.backend == okstra::vocab::Backend::Slurm)
        .map(|(pointer, j)| SlurmJob {
            pointer,
            label: j.label(),
            options: j.slurm.clone().unwrap_or_default(),
        })
        .collect()
}

/// Slurm's client commands: `sbatch` on PATH, answering `--version`. Any
/// status but ok ends the checks.
fn sbatch(jobs: usize) -> Check {
    let Some(sbatch) = which("sbatch") else {
        return check(
            "slurm sbatch",
            Level::Fail,
            format!("`sbatch` is not on PATH, and {jobs} job(s) of the plan run on Slurm"),
            "run okstra on a Slurm login node, or install Slurm's client commands (Debian: slurm-client)",
        );
    };
    match version_of(&sbatch, VERSION_TIMEOUT) {
        Ok(v) => check(
            "slurm sbatch",
            Level::Ok,
            format!("{} ({v})", sbatch.display()),
            "",
        ),
        Err(e) => check(
            "slurm sbatch",
            Level::Fail,
            format!("{}: {e}", sbatch.display()),
            "check the Slurm client installation (SLURM_CONF, munge)",
        ),
    }
}

/// The cluster's partitions, as its controller lists them; or the failed
/// check saying it does not answer.
fn controller() -> Result<Partitions, Check> {
    slurm::partitions().map(Partitions).map_err(|e| {
        check(
            "slurm controller",
            Level::Fail,
            format!("the cluster does not answer: {e}"),
            "check that slurmctld runs and SLURM_CONF names its configuration (`scontrol ping`)",
        )
    })
}

/// The cluster's partitions in `sinfo`'s order, each with whether it is
/// the default one.
struct Partitions(Vec<(String, bool)>);

impl Partitions {
    fn has(&self, partition: &str) -> bool {
        self.0.iter().any(|(n, _)| n == partition)
    }

    /// Where a job that names no partition runs.
    fn default_one(&self) -> Option<&str> {
        self.0.iter().find(|(_, d)| *d).map(|(n, _)| n.as_str())
    }

    /// Every partition, for a message: `debug (default), big`.
    fn listing(&self) -> String {
        self.0
            .iter()
            .map(|(n, d)| {
                if *d {
                    format!("{n} (default)")
                } else {
                    n.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Where a plan's Slurm jobs would run, told from their options and the
/// cluster's list of partitions alone.
#[derive(Default)]
struct Placement {
    /// A failed check for each job that names no partition on a cluster
    /// with no default one, in plan order.
    unplaced: Vec<Check>,
    /// Each partition the jobs run in, in the order first named, with the
    /// jobs that run there (`label (pointer)`).
    named: Vec<(String, Vec<String>)>,
    /// The probe jobs to submit: the partition and account of jobs whose
    /// partition exists, each distinct pair once.
    probes: Vec<(String, SlurmOptions)>,
}

/// Each job's partition, in plan order: who runs where, and what to probe.
fn place(jobs: &[SlurmJob], cluster: &Partitions) -> Placement {
    let mut placement = Placement::default();
    for job in jobs {
        let (partition, at) = match partition_of(job, cluster) {
            Ok(found) => found,
            Err(unplaced) => {
                placement.unplaced.push(unplaced);
                continue;
            }
        };
        let who = format!("{} ({at})", job.label);
        match placement.named.iter_mut().find(|(p, _)| *p == partition) {
            Some((_, w)) => w.push(who),
            None => placement.named.push((partition.clone(), vec![who])),
        }
        if cluster.has(&partition) {
            let probe = SlurmOptions {
                partition: Some(partition.clone()),
                account: job.options.account.clone(),
                ..Default::default()
            };
            if !placement.probes.iter().any(|(_, o)| *o == probe) {
                placement.probes.push((partition, probe));
            }
        }
    }
    placement
}

/// The partition a job runs in (its own, else the cluster's default) and
/// the pointer that says so; or, where neither names one, the failed
/// check saying so.
fn partition_of(job: &SlurmJob, cluster: &Partitions) -> Result<(String, String), Check> {
    match (&job.options.partition, cluster.default_one()) {
        (Some(p), _) => Ok((p.clone(), format!("{}/slurm/partition", job.pointer))),
        (None, Some(default)) => Ok((default.to_string(), job.pointer.clone())),
        (None, None) => Err(check(
            "slurm partition",
            Level::Fail,
            format!(
                "{} names no partition ({}) and the cluster has no default one (partitions: {})",
                job.label,
                job.pointer,
                cluster.listing()
            ),
            "set slurm.partition in the spec, then plan again",
        )),
    }
}

/// Whether a partition the jobs run in exists, naming the jobs either way.
fn partition_check(cluster: &Partitions, partition: &str, workers: &[String]) -> Check {
    let name = format!("slurm partition {partition}");
    if cluster.has(partition) {
        check(
            name,
            Level::Ok,
            format!("exists; used by {}", workers.join(", ")),
            "",
        )
    } else {
        check(
            name,
            Level::Fail,
            format!("partition `{partition}` does not exist on this cluster (partitions: {}); named by {}", cluster.listing(), workers.join(", ")),
            "set slurm.partition in the spec to one of the cluster's partitions (`sinfo`), then plan again",
        )
    }
}

/// Submit each probe job in turn, waiting for it to end, and say what it
/// found.
fn probe_checks(root: &Path, probes: &[(String, SlurmOptions)]) -> Vec<Check> {
    let wrapper = wrapper();
    let timeout = probe_timeout(std::env::var("OKSTRA_DOCTOR_PROBE_SECONDS").ok().as_deref());
    probes
        .iter()
        .map(|(partition, options)| {
            let found = slurm::probe(root, &wrapper, options, timeout);
            probe_check(partition, found, root, &wrapper, timeout)
        })
        .collect()
}

/// The program a Slurm job of exec's starts (the first word of the
/// wrapper's command line, found as `okstra exec` finds it), which a probe
/// job checks its node can run.
fn wrapper() -> PathBuf {
    let wrapper = match std::env::current_exe() {
        Ok(okstra) => okstra::exec::backend::WorkerExe::beside(&okstra),
        Err(_) => okstra::exec::backend::WorkerExe::subcommand(Path::new("okstra")),
    };
    PathBuf::from(
        wrapper
            .argv(&["okstra".into(), "worker".into()])
            .into_iter()
            .next()
            .unwrap_or_default(),
    )
}

/// How long to wait for a probe job: `OKSTRA_DOCTOR_PROBE_SECONDS` where
/// it is a whole number of seconds, else `PROBE_TIMEOUT`.
fn probe_timeout(seconds: Option<&str>) -> Duration {
    seconds
        .and_then(|s| s.parse().ok())
        .map_or(PROBE_TIMEOUT, Duration::from_secs)
}

/// What a probe job in `partition` found: a node that sees the project
/// root and can run the wrapper is ok; one that cannot, or a job that
/// cannot be submitted, fails; a job that did not end in time leaves it
/// unknown, which is worth a warning only.
fn probe_check(
    partition: &str,
    found: Result<Probe, String>,
    root: &Path,
    wrapper: &Path,
    timeout: Duration,
) -> Check {
    let name = format!("slurm node sees the project ({partition})");
    match found {
        Ok(Probe::Shared { job, wrapper: true, took }) => check(
            name,
            Level::Ok,
            format!("probe job {job} wrote under {} and read back here in {:.1} s; the node can run {}", root.display(), took.as_secs_f64(), wrapper.display()),
            "",
        ),
        Ok(Probe::Shared { job, wrapper: false, .. }) => check(
            name,
            Level::Fail,
            format!("probe job {job} sees the project root, but not an executable {} on its node", wrapper.display()),
            "install okstra at the same path on every node (or on the shared filesystem)",
        ),
        Ok(Probe::NotShared { job, state }) => check(
            name,
            Level::Fail,
            format!("probe job {job} ended {state}, but the file it writes under {} never appeared here: the nodes do not share the project root", root.display()),
            "put the project on a filesystem every node mounts at the same path (NFS, Lustre, ...)",
        ),
        Ok(Probe::Unfinished { job, state }) => check(
            name,
            Level::Warn,
            format!("probe job {job} did not finish within {} s ({state}); cancelled, so whether nodes see the project is unknown", timeout.as_secs()),
            "run doctor again when the partition has room (OKSTRA_DOCTOR_PROBE_SECONDS waits longer)",
        ),
        Err(e) => check(name, Level::Fail, format!("cannot submit a probe job: {e}"), "run the same sbatch by hand to see what the cluster refuses"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn cluster(partitions: &[(&str, bool)]) -> Partitions {
        Partitions(
            partitions
                .iter()
                .map(|(n, d)| (n.to_string(), *d))
                .collect(),
        )
    }

    /// A Slurm job at `pointer` with a time limit, which no probe copies.
    fn job<'a>(
        pointer: &str,
        label: &'a str,
        partition: Option<&str>,
        account: Option<&str>,
    ) -> SlurmJob<'a> {
        let options = SlurmOptions {
            partition: partition.map(Into::into),
            account: account.map(Into::into),
            time_limit: Some("5".into()),
            ..Default::default()
        };
        SlurmJob {
            pointer: pointer.into(),
            label,
            options,
        }
    }

    /// The partitions named and who names each, as plain strings.
    fn named(placement: &Placement) -> Vec<(&str, Vec<&str>)> {
        let named = placement.named.iter();
        named
            .map(|(p, w)| (p.as_str(), w.iter().map(String::as_str).collect()))
            .collect()
    }

    fn plan_job(worker: &str, backend: &str, slurm: Option<Value>) -> Value {
        let mut j = json!({
            "key": worker, "identity": {"version": "1", "workerId": worker}, "provider": "command",
            "backend": backend, "role": "analyst", "dispatchKind": "initial", "round": 1,
            "promptPath": "p.md", "resultPath": "r.md", "workerResultPath": "r.md", "completionPaths": ["r.md"],
            "command": [], "providerCommand": [], "takesSessionId": false, "idleTimeoutSeconds": 600,
            "livenessMode": "wrapper-status", "writePolicy": {"role": "analyst", "allow": [], "digest": ""},
            "writeEnforcement": {"mutationAudit": "none"}
        });
        if let Some(s) = slurm {
            j["slurm"] = s;
        }
        j
    }

    #[test]
    fn slurm_jobs_keep_their_place_in_the_whole_plan() {
        let plan: Plan = serde_json::from_value(json!({
            "formatVersion": 2, "okstraVersion": "0", "createdAt": "t", "projectRoot": "/p",
            "run": {"taskKey": "t", "manifestPath": "m", "teamStatePath": "ts", "leadEventsPath": "e",
                    "errorLogPath": "x", "terminalBackend": "cli-wrapper", "mode": "spec"},
            "inputs": [], "policy": {"maxAttempts": 2},
            "stages": [
                {"name": "a", "jobs": [plan_job("here", "cli-wrapper", None), plan_job("s1", "slurm", Some(json!({"partition": "big"})))]},
                {"name": "b", "jobs": [plan_job("s2", "slurm", None)]}
            ]
        }))
        .unwrap();
        let jobs = slurm_jobs(&plan);
        let seen: Vec<_> = jobs
            .iter()
            .map(|j| (j.pointer.as_str(), j.label, j.options.partition.as_deref()))
            .collect();
        assert_eq!(
            seen,
            [
                ("/stages/0/jobs/1", "s1", Some("big")),
                ("/stages/1/jobs/0", "s2", None)
            ]
        );
    }

    #[test]
    fn jobs_go_to_their_partition_or_the_default_and_each_probe_is_submitted_once() {
        let jobs = [
            job("/stages/0/jobs/0", "a", None, None),
            job("/stages/0/jobs/1", "b", Some("big"), None),
            job("/stages/0/jobs/2", "c", Some("big"), Some("lab")),
            job("/stages/1/jobs/0", "d", Some("big"), Some("lab")),
            job("/stages/1/jobs/1", "e", Some("nope"), None),
            job("/stages/1/jobs/2", "f", Some("debug"), None),
        ];
        let placement = place(&jobs, &cluster(&[("debug", true), ("big", false)]));
        assert!(placement.unplaced.is_empty());
        assert_eq!(
            named(&placement),
            [
                (
                    "debug",
                    vec![
                        "a (/stages/0/jobs/0)",
                        "f (/stages/1/jobs/2/slurm/partition)"
                    ]
                ),
                (
                    "big",
                    vec![
                        "b (/stages/0/jobs/1/slurm/partition)",
                        "c (/stages/0/jobs/2/slurm/partition)",
                        "d (/stages/1/jobs/0/slurm/partition)"
                    ]
                ),
                ("nope", vec!["e (/stages/1/jobs/1/slurm/partition)"]),
            ]
        );
        // A probe asks for the partition and account alone (not the jobs'
        // time limit), and none goes to a partition that does not exist.
        let probe = |p: &str, account: Option<&str>| {
            let options = SlurmOptions {
                partition: Some(p.into()),
                account: account.map(Into::into),
                ..Default::default()
            };
            (p.to_string(), options)
        };
        assert_eq!(
            placement.probes,
            [
                probe("debug", None),
                probe("big", None),
                probe("big", Some("lab"))
            ]
        );
    }

    #[test]
    fn a_job_without_a_partition_fails_only_where_the_cluster_has_no_default() {
        let jobs = [
            job("/stages/0/jobs/0", "a", None, None),
            job("/stages/0/jobs/1", "b", Some("big"), None),
        ];
        let placement = place(&jobs, &cluster(&[("big", false), ("small", false)]));
        let [unplaced] = &placement.unplaced[..] else {
            panic!("one unplaced job")
        };
        assert_eq!(
            (unplaced.name.as_str(), unplaced.status),
            ("slurm partition", Level::Fail)
        );
        assert_eq!(
            unplaced.detail,
            "a names no partition (/stages/0/jobs/0) and the cluster has no default one (partitions: big, small)"
        );
        assert_eq!(
            named(&placement),
            [("big", vec!["b (/stages/0/jobs/1/slurm/partition)"])]
        );
        // The near miss: a default partition takes the job in.
        let placement = place(&jobs[..1], &cluster(&[("big", false), ("small", true)]));
        assert!(placement.unplaced.is_empty());
        assert_eq!(named(&placement), [("small", vec!["a (/stages/0/jobs/0)"])]);
    }

    #[test]
    fn a_partition_passes_only_if_the_cluster_has_it() {
        let cluster = cluster(&[("debug", true), ("big", false)]);
        let workers = [
            "a (/stages/0/jobs/0)".to_string(),
            "b (/stages/0/jobs/1)".into(),
        ];
        let there = partition_check(&cluster, "big", &workers);
        assert_eq!(
            (there.name.as_str(), there.status),
            ("slurm partition big", Level::Ok)
        );
        assert_eq!(
            there.detail,
            "exists; used by a (/stages/0/jobs/0), b (/stages/0/jobs/1)"
        );
        let missing = partition_check(&cluster, "bigger", &workers);
        assert_eq!(missing.status, Level::Fail);
        assert_eq!(
            missing.detail,
            "partition `bigger` does not exist on this cluster (partitions: debug (default), big); named by a (/stages/0/jobs/0), b (/stages/0/jobs/1)"
        );
    }

    #[test]
    fn only_a_node_that_sees_the_root_and_runs_the_wrapper_passes_and_a_slow_one_warns() {
        let verdict = |found: Result<Probe, String>| {
            probe_check(
                "p",
                found,
                Path::new("/proj"),
                Path::new("/bin/okstra"),
                PROBE_TIMEOUT,
            )
        };
        let shared = |wrapper| {
            Ok(Probe::Shared {
                job: 7,
                wrapper,
                took: Duration::from_millis(1500),
            })
        };
        let state = || "PENDING".to_string();
        let found = [
            (shared(true), Level::Ok),
            (shared(false), Level::Fail),
            (
                Ok(Probe::NotShared {
                    job: 7,
                    state: state(),
                }),
                Level::Fail,
            ),
            (
                Ok(Probe::Unfinished {
                    job: 7,
                    state: state(),
                }),
                Level::Warn,
            ),
            (Err("sbatch exited 1".to_string()), Level::Fail),
        ];
        for (found, status) in found {
            assert_eq!(verdict(found.clone()).status, status, "{found:?}");
        }
        let ok = verdict(shared(true));
        assert_eq!(ok.name, "slurm node sees the project (p)");
        assert_eq!(ok.detail, "probe job 7 wrote under /proj and read back here in 1.5 s; the node can run /bin/okstra");
    }

    #[test]
    fn the_probe_timeout_is_whole_seconds_from_the_environment_or_a_minute() {
        assert_eq!(probe_timeout(None), PROBE_TIMEOUT);
        assert_eq!(probe_timeout(Some("5")), Duration::from_secs(5));
        assert_eq!(probe_timeout(Some("1.5")), PROBE_TIMEOUT);
        assert_eq!(probe_timeout(Some("soon")), PROBE_TIMEOUT);
    }
}
