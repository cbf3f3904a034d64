//! Starting one attempt: its wrapper's argv, its log and sidecar made
//! ready below the root, what its completion paths are before it, and its
//! wrapper started held at its gate; the dispatch record that names it.

use super::Runner;
use crate::beneath::WriteMode;
use crate::exec::backend::{Dispatch, Launch};
use crate::exec::event::{Dispatched, Head, Who};
use crate::plan::{Identity, Job, MAX_ATTEMPTS};
use std::path::Path;

impl Runner<'_> {
    pub(super) fn head(&self, i: usize, job: &Job, attempt: u64) -> Head {
        let (mode, degraded) = self.backend.local.mode_of(job);
        Head {
            ts: crate::clock::now(),
            who: Who::from(&job.identity),
            attempt,
            dispatch_id: job.dispatch_id_for(attempt),
            worker_key: job.key.clone(),
            plan_digest: self.plan.digest.clone(),
            max_attempts: MAX_ATTEMPTS,
            dispatch_mode: mode,
            degraded_from: degraded,
            stage: Some(self.plan.stages[self.jobs.stage_of(i)].name.clone()),
        }
    }

    /// The wrapper argv of one attempt: the plan's command with the
    /// attempt's own flags before the provider's `--`.
    pub(super) fn worker_argv(
        &self,
        job: &Job,
        attempt: u64,
        session_id: Option<&str>,
        tmp_dir: Option<&Path>,
        proxy: Option<u16>,
    ) -> Vec<String> {
        let mut argv: Vec<String> = job.command.clone();
        let split = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
        let mut extra = vec![
            "--attempt".to_string(),
            attempt.to_string(),
            "--gated".to_string(),
        ];
        if let Some(id) = job.dispatch_id_for(attempt) {
            extra.extend(["--dispatch-id".into(), id]);
        }
        if let Some(s) = session_id {
            extra.extend(["--session-id".into(), s.to_string()]);
        }
        if let Some(dir) = tmp_dir {
            extra.extend(["--tmp-dir".into(), dir.display().to_string()]);
        }
        if let Some(port) = proxy {
            extra.extend(["--proxy".into(), port.to_string()]);
        }
        argv.splice(split..split, extra);
        argv
    }

    /// Start one attempt's wrapper, held at its gate; its dispatch record.
    pub(super) fn start_held(&mut self, i: usize, attempt: u64) -> std::io::Result<Dispatched> {
        let job = self.jobs.hold(i);
        let session_id = job
            .takes_session_id
            .then(|| uuid::Uuid::new_v4().to_string());
        let tmp_dir = self.private_dir(&job, attempt)?;
        let status = self.abs(&job.status_path());
        // okstra's own writes never go through a symlink
        // (docs/exec.md#never-through-a-symlink): the log is opened here, below
        // the root, and handed to the wrapper; the sidecar of an earlier
        // attempt, which must not speak for this one, is removed the same way.
        match self
            .own
            .relative(&status)
            .and_then(|rel| self.own.remove_file(rel))
        {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        let log = self.abs(&job.log_path());
        let log_file = self
            .own
            .relative(&log)
            .and_then(|rel| self.own.open_file(rel, WriteMode::Append))?;
        let env: Vec<(String, String)> = job
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let title = match &job.identity {
            Identity::V2(v) => v.execution_label.clone(),
            Identity::V1 { worker_id } => format!("{worker_id}-worker"),
        };
        // Before anything of the attempt can run: what its completion paths
        // are now, so that only what it writes counts
        // (docs/exec.md#settling-an-attempt).
        let completion_paths_before =
            crate::exec::artifacts::before(&self.root, &job.completion_paths)?;
        // The door last, so that nothing fallible comes between opening it
        // and the start, whose failure closes it again.
        let proxy = self.open_door(i, &job, attempt)?;
        let argv = self.worker_argv(
            &job,
            attempt,
            session_id.as_deref(),
            tmp_dir.as_deref(),
            proxy,
        );
        crate::fault::point("spawn");
        let started = self.backend.start(&Launch {
            job: &job,
            argv: &argv,
            cwd: &self.root,
            env: &env,
            log: &self.abs(&job.log_path()),
            log_file: &log_file,
            status: &status,
            title: &title,
        });
        let started = match started {
            Ok(started) => started,
            Err(e) => {
                self.close_door(i, attempt);
                return Err(e);
            }
        };
        Ok(Dispatched {
            head: self.head(i, &job, attempt),
            handle: started.handle,
            pid_start: started.pid_start,
            session_id,
            prompt_path: job.prompt_path.clone(),
            result_path: job.result_path.clone(),
            argv: started.argv,
            tmp_dir: tmp_dir.map(|d| d.display().to_string()),
            completion_paths_before,
            worktree: self.worktree_use(&job),
        })
    }
}
