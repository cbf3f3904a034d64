//! Budgets (docs/exec.md#budgets): what an attempt (`budget` on a worker
//! or in `[defaults]`) or the whole run (`[budget]`) may spend, in tokens
//! and in US dollars priced as `okstra status` prices
//! ([`crate::provider::Usage::priced`]), and the one check of spend against
//! them that the wrapper and exec share.

use crate::provider::{Usage, UsageTotal};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A spending limit: at least one of its two is set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Budget {
    /// US dollars, priced by the job's catalog `pricing` (or claude's own
    /// estimate where there is none); spend whose cost is unknown does not
    /// count against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Every token, input (cached included) and output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// What the run does with attempts still running once its budget is spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnBudget {
    /// Let them finish; start nothing new.
    #[default]
    Finish,
    /// Stop them (settled `error`, `budget-exceeded`).
    Stop,
}

impl OnBudget {
    pub fn as_str(self) -> &'static str {
        match self {
            OnBudget::Finish => "finish",
            OnBudget::Stop => "stop",
        }
    }
}

/// The `[budget]` of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunBudget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "is_finish")]
    pub on_budget: OnBudget,
}

fn is_finish(o: &OnBudget) -> bool {
    *o == OnBudget::Finish
}

/// Spend, in the two measures a budget has.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spend {
    pub tokens: u64,
    /// The priced part; `None` where nothing spent had a known cost.
    pub cost_usd: Option<f64>,
}

impl From<&Usage> for Spend {
    fn from(u: &Usage) -> Spend {
        Spend {
            tokens: u.total_tokens,
            cost_usd: u.cost_usd,
        }
    }
}

impl From<&UsageTotal> for Spend {
    fn from(u: &UsageTotal) -> Spend {
        Spend {
            tokens: u.total_tokens,
            cost_usd: u.cost_usd,
        }
    }
}

impl std::fmt::Display for Spend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} tokens", self.tokens)?;
        if let Some(c) = self.cost_usd {
            write!(f, ", ${c:.4}")?;
        }
        Ok(())
    }
}

/// Which limit spend went past, and the spend.
#[derive(Debug, Clone, PartialEq)]
pub struct Crossing {
    /// `maxTokens 1000` or `maxCostUsd 0.5`.
    pub limit: String,
    pub spent: Spend,
}

impl std::fmt::Display for Crossing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "spent {}, past {}", self.spent, self.limit)
    }
}

impl Budget {
    /// The budget as the spec wrote it, if it is one (the schema reports
    /// anything else): an object with `maxCostUsd > 0` and/or
    /// `maxTokens >= 1`; a key of the wrong kind reads as absent.
    pub fn from_value(v: &Value) -> Option<Budget> {
        let b = Budget {
            max_cost_usd: v
                .get("maxCostUsd")
                .and_then(Value::as_f64)
                .filter(|c| c.is_finite() && *c > 0.0),
            max_tokens: v
                .get("maxTokens")
                .and_then(Value::as_u64)
                .filter(|n| *n >= 1),
        };
        (b.max_cost_usd.is_some() || b.max_tokens.is_some()).then_some(b)
    }

    /// Whether `spent` is past this budget: more tokens than `maxTokens`, or
    /// a known cost above `maxCostUsd`. Reaching a limit exactly is within it.
    pub fn crossed(&self, spent: Spend) -> Option<Crossing> {
        let limit = match (self.max_tokens, self.max_cost_usd, spent.cost_usd) {
            (Some(max), _, _) if spent.tokens > max => format!("maxTokens {max}"),
            (_, Some(max), Some(cost)) if cost > max => format!("maxCostUsd {max}"),
            _ => return None,
        };
        Some(Crossing { limit, spent })
    }

    /// `maxCostUsd 2.5, maxTokens 400000`, for the review and reasons.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(c) = self.max_cost_usd {
            parts.push(format!("maxCostUsd {c}"));
        }
        if let Some(n) = self.max_tokens {
            parts.push(format!("maxTokens {n}"));
        }
        parts.join(", ")
    }
}

impl RunBudget {
    /// The top-level `[budget]` table, if it sets a limit.
    pub fn from_value(v: &Value) -> Option<RunBudget> {
        let limit = Budget::from_value(v)?;
        let on_budget = match v.get("onBudget").and_then(Value::as_str) {
            Some("stop") => OnBudget::Stop,
            _ => OnBudget::Finish,
        };
        Some(RunBudget {
            max_cost_usd: limit.max_cost_usd,
            max_tokens: limit.max_tokens,
            on_budget,
        })
    }

    /// Its limits, as a [`Budget`].
    pub fn limit(&self) -> Budget {
        Budget {
            max_cost_usd: self.max_cost_usd,
            max_tokens: self.max_tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn spend_crosses_a_budget_only_past_it() {
        let b = Budget::from_value(&json!({"maxTokens": 1000, "maxCostUsd": 0.5})).unwrap();
        let at = |tokens, cost| Spend {
            tokens,
            cost_usd: cost,
        };
        assert_eq!(b.crossed(at(1000, Some(0.5))), None, "reaching is within");
        let c = b.crossed(at(1001, None)).unwrap();
        assert_eq!(c.to_string(), "spent 1001 tokens, past maxTokens 1000");
        let c = b.crossed(at(10, Some(0.51))).unwrap();
        assert_eq!(c.limit, "maxCostUsd 0.5");
        assert_eq!(b.crossed(at(10, None)), None, "an unknown cost is no cost");
        assert_eq!(b.describe(), "maxCostUsd 0.5, maxTokens 1000");
    }

    #[test]
    fn only_a_usable_limit_is_a_budget() {
        for bad in [
            json!({}),
            json!({"maxTokens": 0}),
            json!({"maxCostUsd": -1}),
            json!("x"),
        ] {
            assert_eq!(Budget::from_value(&bad), None, "{bad}");
        }
        let r = RunBudget::from_value(&json!({"maxTokens": 5, "onBudget": "stop"})).unwrap();
        assert_eq!(r.on_budget, OnBudget::Stop);
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"maxTokens": 5, "onBudget": "stop"})
        );
        let r = RunBudget::from_value(&json!({"maxCostUsd": 2.5})).unwrap();
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"maxCostUsd": 2.5})
        );
        let back: RunBudget = serde_json::from_value(json!({"maxCostUsd": 2.5})).unwrap();
        assert_eq!(back, r);
    }
}
