//! The jobs of a plan as exec holds them: each job's canonical JSON text
//! (a few kilobytes), parsed into a [`Job`] when the runner needs it and
//! kept parsed only while the job is being worked on.
//!
//! A plan of 10,000 jobs as `Job` values is a tree of some 640,000 small
//! strings (about 60 MB); as texts it is the size of the plan file's jobs
//! written compactly (about 21 MB). Parsing a job costs tens of
//! microseconds, once per job and attempt, next to a process start each.

use crate::plan::{Job, Plan, Stage};
use crate::vocab::Backend;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// What is held of one job before it is parsed: its canonical text, its
/// state key and its backend.
pub type Held = (Box<str>, Box<str>, Backend);

pub struct Jobs {
    /// Each job's JSON text, in plan order.
    texts: Vec<Box<str>>,
    /// Each job's state key.
    keys: Vec<Box<str>>,
    /// Each job's stage.
    stage: Vec<u32>,
    /// Each job's backend, known without parsing it.
    backend: Vec<Backend>,
    /// The jobs parsed and being worked on, by index.
    parsed: RefCell<HashMap<usize, Rc<Job>>>,
}

impl Jobs {
    /// From each stage's jobs.
    pub fn from_stages(stages: Vec<Vec<Held>>) -> Jobs {
        let mut jobs = Jobs {
            texts: Vec::new(),
            keys: Vec::new(),
            stage: Vec::new(),
            backend: Vec::new(),
            parsed: RefCell::new(HashMap::new()),
        };
        for (si, stage) in stages.into_iter().enumerate() {
            for (text, key, backend) in stage {
                jobs.texts.push(text);
                jobs.keys.push(key);
                jobs.stage.push(si as u32);
                jobs.backend.push(backend);
            }
        }
        jobs
    }

    /// The jobs of `plan`, taken out of it (its stages keep their names).
    pub fn take(plan: &mut Plan) -> Jobs {
        let stages = plan
            .stages
            .iter_mut()
            .map(|Stage { jobs, .. }| {
                std::mem::take(jobs)
                    .into_iter()
                    .map(|job| {
                        let text = serde_json::to_string(&job).unwrap_or_default();
                        (text.into_boxed_str(), job.key.into_boxed_str(), job.backend)
                    })
                    .collect()
            })
            .collect();
        Jobs::from_stages(stages)
    }

    pub fn len(&self) -> usize {
        self.texts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    pub fn stage_of(&self, i: usize) -> usize {
        self.stage[i] as usize
    }

    pub fn key(&self, i: usize) -> &str {
        &self.keys[i]
    }

    /// Whether any job runs on `backend`.
    pub fn uses(&self, backend: Backend) -> bool {
        self.backend.contains(&backend)
    }

    /// Job `i`, parsed: as kept by [`Self::hold`], or parsed afresh and not
    /// kept (a stage of 10,000 jobs looked over at its start would
    /// otherwise keep them all parsed until each ends).
    pub fn get(&self, i: usize) -> Rc<Job> {
        if let Some(job) = self.parsed.borrow().get(&i) {
            return Rc::clone(job);
        }
        Rc::new(self.parse(i))
    }

    /// Job `i`, parsed and kept parsed until [`Self::forget`]: a job being
    /// worked on, looked at on every turn of the loop.
    pub fn hold(&self, i: usize) -> Rc<Job> {
        let job = self.get(i);
        self.parsed.borrow_mut().insert(i, Rc::clone(&job));
        job
    }

    /// Job `i` is done with for now: its parsed form goes.
    pub fn forget(&self, i: usize) {
        self.parsed.borrow_mut().remove(&i);
    }

    /// Every job, parsed one at a time and not kept.
    pub fn each(&self) -> impl Iterator<Item = (usize, Job)> + '_ {
        (0..self.len()).map(|i| (i, self.parse(i)))
    }

    fn parse(&self, i: usize) -> Job {
        // The texts are the canonical form of jobs that parsed when the plan
        // was read (or were serialised from jobs): they parse again.
        serde_json::from_str(&self.texts[i])
            .expect("a job text okstra checked when it read the plan")
    }
}
