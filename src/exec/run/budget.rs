//! The run's budget (docs/exec.md#budgets): what every attempt of this plan
//! spent, settled (by earlier execs too, as the events log recorded it) or
//! still running (its status sidecar's `usage`, which the wrapper keeps
//! current), against the plan's `[budget]`. Once past it, nothing new
//! starts; attempts still running finish, or are stopped with
//! `onBudget = "stop"`; the run ends with `exec/budget`.

use super::{Ended, Runner};
use crate::budget::{OnBudget, Spend};
use crate::diag::{Code, Diagnostic};
use crate::provider::UsageTotal;
use crate::worker::StatusSidecar;
use std::time::{Duration, Instant};

/// How often running attempts' sidecars are read for their spend (an
/// attempt that ended is read at once).
pub(super) const SPEND_EVERY: Duration = Duration::from_secs(1);

impl Runner<'_> {
    /// What the run spent: every settled attempt's usage, the usage the
    /// sidecars of `ended` jobs (ended, not yet settled) hold, and that of
    /// `running` jobs as last read (at most [`SPEND_EVERY`] ago).
    fn run_spend(&mut self, running: &[usize], ended: &[usize]) -> Spend {
        let read = |r: &Self, i: usize| {
            let status = r.abs(&r.job(i).status_path());
            StatusSidecar::read(&status).and_then(|s| s.usage)
        };
        if self
            .spend_read_at
            .is_none_or(|at| at.elapsed() >= SPEND_EVERY)
        {
            self.spend_read_at = Some(Instant::now());
            self.running_spend = running.iter().filter_map(|&i| read(self, i)).collect();
        }
        let mut total = UsageTotal::default();
        for u in self.usages.iter().flatten().chain(&self.running_spend) {
            total.add(u);
        }
        for &i in ended {
            if let Some(u) = read(self, i) {
                total.add(&u);
            }
        }
        Spend::from(&total)
    }

    /// Whether the run's spend is past its budget; the first time it is,
    /// the run's budget is noted spent (`over_budget`, said and reported
    /// once as `exec/budget`), and what the run does with attempts still
    /// running returned.
    pub(super) fn budget_crossed(
        &mut self,
        running: &[usize],
        ended: &[usize],
    ) -> Option<OnBudget> {
        let budget = self.plan.run.budget.clone()?;
        if self.over_budget.is_some() {
            return None;
        }
        let crossing = budget.limit().crossed(self.run_spend(running, ended))?;
        let why = format!(
            "the run's budget is spent: {crossing} ([budget] {}); no new attempt starts",
            budget.limit().describe()
        );
        self.say(why.clone());
        let help = match budget.on_budget {
            OnBudget::Finish => "attempts already running were let finish (`onBudget = \"finish\"`); raise `[budget]` in the spec and plan again to go on",
            OnBudget::Stop => "attempts still running were stopped (`onBudget = \"stop\"`); raise `[budget]` in the spec and plan again to go on",
        };
        self.problems
            .push(Diagnostic::new(Code::ExecBudget, why.clone()).help(help));
        self.over_budget = Some(why);
        Some(budget.on_budget)
    }

    /// Why a job did not start: the run's budget, where it is spent.
    pub(super) fn budget_reason(&self) -> Option<&str> {
        self.over_budget.as_deref()
    }

    /// The jobs of `ended` (not yet settled), for [`Self::budget_crossed`].
    pub(super) fn unsettled(ended: &[Ended]) -> Vec<usize> {
        ended.iter().map(|e| e.job).collect()
    }
}
