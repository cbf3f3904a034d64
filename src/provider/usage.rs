//! What an attempt spent, in one vocabulary across providers (issue 17).
//!
//! Each CLI counts in its own words (PROVIDERS.md): claude keeps cache reads
//! and writes outside `input_tokens`, codex and gemini count cached tokens
//! inside theirs; gemini keeps thoughts outside `output_tokens`, codex keeps
//! reasoning inside. [`Usage`] says it one way, so that attempts of any
//! provider add up: `inputTokens` is every prompt token, with
//! `cachedInputTokens` (read from a cache) and `cacheWriteTokens` (written
//! to one) as parts of it; `outputTokens` is every generated token, with
//! `reasoningTokens` as part of it; `totalTokens` is input plus output. A
//! part the CLI does not report is absent, never a made-up zero.
//!
//! Cost is the user's business: [`Pricing`] comes from the manifest's model
//! catalog (`models.<ref>.pricing`, USD per million tokens). Where it is
//! given it prices the attempt (`price-table`); otherwise only claude's own
//! estimate (`cli-estimate`) gives a cost, and codex and gemini have none.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Tokens (and, where known, cost) one attempt spent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Every prompt token, cache reads and cache writes included.
    pub input_tokens: u64,
    /// The part of `inputTokens` read from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
    /// The part of `inputTokens` written to the provider's prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    /// Every generated token, reasoning (thinking) included.
    pub output_tokens: u64,
    /// The part of `outputTokens` spent reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// `inputTokens + outputTokens`.
    pub total_tokens: u64,
    /// The model that served, where the CLI says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// What the attempt cost, in US dollars, where it can be told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Where `costUsd` comes from; absent with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_source: Option<CostSource>,
    /// Where the token counts were read.
    pub tokens_from: TokensFrom,
}

/// Where an attempt's cost comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CostSource {
    /// The CLI's own estimate (claude's `total_cost_usd`, from its built-in
    /// price table).
    CliEstimate,
    /// The `pricing` of the job's model in the manifest's catalog.
    PriceTable,
}

/// Where the token counts of an attempt were read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TokensFrom {
    /// The CLI's final usage event in its output: the whole attempt.
    #[default]
    CliOutput,
    /// The CLI was stopped before it printed one: its own session file,
    /// which holds what it had recorded by then.
    SessionFile,
}

impl Usage {
    /// Usage from the parts a CLI reports: `input` and `output` are the
    /// wholes of this module's vocabulary (each provider converts first).
    pub fn new(input: u64, output: u64, from: TokensFrom) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            total_tokens: input + output,
            tokens_from: from,
            ..Usage::default()
        }
    }

    /// Two spends added up, part by part (a part is absent only where
    /// both lack it); the cost only where both have one; the model, the
    /// later's.
    pub fn plus(&self, later: &Usage) -> Usage {
        let part = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        Usage {
            input_tokens: self.input_tokens + later.input_tokens,
            cached_input_tokens: part(self.cached_input_tokens, later.cached_input_tokens),
            cache_write_tokens: part(self.cache_write_tokens, later.cache_write_tokens),
            output_tokens: self.output_tokens + later.output_tokens,
            reasoning_tokens: part(self.reasoning_tokens, later.reasoning_tokens),
            total_tokens: self.total_tokens + later.total_tokens,
            model: later.model.clone().or_else(|| self.model.clone()),
            cost_usd: self
                .cost_usd
                .zip(later.cost_usd)
                .map(|(a, b)| round_cost(a + b)),
            cost_source: self
                .cost_source
                .filter(|_| later.cost_source == self.cost_source),
            tokens_from: later.tokens_from,
        }
    }

    /// The user's price table wins where there is one (prices are the
    /// user's: the same rule for every provider); otherwise the CLI's own
    /// estimate stays, if it gave one.
    pub fn priced(mut self, pricing: Option<&Pricing>) -> Usage {
        if let Some(p) = pricing {
            self.cost_usd = Some(p.cost(&self));
            self.cost_source = Some(CostSource::PriceTable);
        }
        self
    }
}

/// What a model costs, in US dollars per million tokens: the `pricing` of a
/// catalog entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pricing {
    /// Prompt tokens neither read from nor written to a cache.
    pub input: f64,
    /// Prompt tokens read from a cache (default: `input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<f64>,
    /// Prompt tokens written to a cache (default: `input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
    /// Generated tokens, reasoning included.
    pub output: f64,
}

impl Pricing {
    /// The `pricing` of a catalog entry, if it has a usable one.
    pub fn of(entry: &Value) -> Option<Pricing> {
        let p: Pricing = serde_json::from_value(entry.get("pricing")?.clone()).ok()?;
        let prices = [Some(p.input), p.cached_input, p.cache_write, Some(p.output)];
        prices
            .iter()
            .flatten()
            .all(|x| x.is_finite() && *x >= 0.0)
            .then_some(p)
    }

    /// What `usage` costs at these prices, to the billionth of a dollar (so
    /// that sums do not show binary-fraction noise).
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cached_input_tokens.unwrap_or(0);
        let written = usage.cache_write_tokens.unwrap_or(0);
        let fresh = usage.input_tokens.saturating_sub(cached + written);
        let dollars = (fresh as f64 * self.input
            + cached as f64 * self.cached_input.unwrap_or(self.input)
            + written as f64 * self.cache_write.unwrap_or(self.input)
            + usage.output_tokens as f64 * self.output)
            / 1e6;
        round_cost(dollars)
    }

    /// One line for the plan review.
    pub fn describe(&self) -> String {
        let price = |x: f64| format!("{x}");
        let mut parts = vec![format!("input {}", price(self.input))];
        if let Some(c) = self.cached_input {
            parts.push(format!("cached input {}", price(c)));
        }
        if let Some(w) = self.cache_write {
            parts.push(format!("cache write {}", price(w)));
        }
        parts.push(format!("output {}", price(self.output)));
        format!("USD per million tokens: {}", parts.join(", "))
    }
}

/// A cost to the billionth of a dollar.
fn round_cost(dollars: f64) -> f64 {
    (dollars * 1e9).round() / 1e9
}

/// Usage summed over attempts (a job's, a stage's, a run's): for reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageTotal {
    /// Attempts that reported usage.
    pub attempts: u64,
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub cache_write_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
    pub total_tokens: u64,
    /// The cost of the attempts whose cost is known; absent when none is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Attempts with usage but no cost: `costUsd` leaves them out.
    pub unpriced_attempts: u64,
}

impl UsageTotal {
    pub fn add(&mut self, u: &Usage) {
        self.attempts += 1;
        self.input_tokens += u.input_tokens;
        self.cached_input_tokens += u.cached_input_tokens.unwrap_or(0);
        self.cache_write_tokens += u.cache_write_tokens.unwrap_or(0);
        self.output_tokens += u.output_tokens;
        self.reasoning_tokens += u.reasoning_tokens.unwrap_or(0);
        self.total_tokens += u.total_tokens;
        match u.cost_usd {
            Some(c) => self.cost_usd = Some(round_cost(self.cost_usd.unwrap_or(0.0) + c)),
            None => self.unpriced_attempts += 1,
        }
    }

    pub fn merge(&mut self, other: &UsageTotal) {
        self.attempts += other.attempts;
        self.input_tokens += other.input_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.output_tokens += other.output_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
        self.total_tokens += other.total_tokens;
        if let Some(c) = other.cost_usd {
            self.cost_usd = Some(round_cost(self.cost_usd.unwrap_or(0.0) + c));
        }
        self.unpriced_attempts += other.unpriced_attempts;
    }

    /// The total of these attempts' usage; `None` when none reported any.
    pub fn of<'a>(usages: impl IntoIterator<Item = &'a Usage>) -> Option<UsageTotal> {
        let mut total = UsageTotal::default();
        for u in usages {
            total.add(u);
        }
        (total.attempts > 0).then_some(total)
    }

    /// Tokens for a table cell: `1234`, `12.3k`, `4.56M`.
    pub fn tokens_text(&self) -> String {
        compact(self.total_tokens)
    }

    /// Cost for a table cell: `$0.0123`; `?` when no attempt's cost is
    /// known; `$0.0123+?` when some are not.
    pub fn cost_text(&self) -> String {
        match (self.cost_usd, self.unpriced_attempts) {
            (None, _) => "?".into(),
            (Some(c), 0) => dollars(c),
            (Some(c), _) => format!("{}+?", dollars(c)),
        }
    }

    /// Input tokens with their cached parts: `1.2k (cached 300)`.
    pub fn input_text(&self) -> String {
        let mut parts = Vec::new();
        if self.cached_input_tokens > 0 {
            parts.push(format!("cached {}", compact(self.cached_input_tokens)));
        }
        if self.cache_write_tokens > 0 {
            parts.push(format!("cache write {}", compact(self.cache_write_tokens)));
        }
        with_parts(compact(self.input_tokens), &parts)
    }

    /// Output tokens with their reasoning part: `200 (reasoning 50)`.
    pub fn output_text(&self) -> String {
        let mut parts = Vec::new();
        if self.reasoning_tokens > 0 {
            parts.push(format!("reasoning {}", compact(self.reasoning_tokens)));
        }
        with_parts(compact(self.output_tokens), &parts)
    }

    /// `in 1.2k (cached 300) · out 200 (reasoning 50)`.
    pub fn breakdown(&self) -> String {
        format!("in {} · out {}", self.input_text(), self.output_text())
    }
}

fn with_parts(whole: String, parts: &[String]) -> String {
    if parts.is_empty() {
        whole
    } else {
        format!("{whole} ({})", parts.join(", "))
    }
}

/// A token count people read at a glance.
pub fn compact(n: u64) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.2}M", n as f64 / 1e6),
    }
}

/// Dollars with four decimals, or more where a small cost would show as 0.
fn dollars(c: f64) -> String {
    if c > 0.0 && c < 0.0001 {
        format!("${c:.6}")
    } else {
        format!("${c:.4}")
    }
}

/// An unsigned count at `key`, if the event has one.
pub(super) fn count(v: &Value, key: &str) -> Option<u64> {
    v.get(key)?.as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn usage() -> Usage {
        Usage {
            cached_input_tokens: Some(300_000),
            cache_write_tokens: Some(100_000),
            reasoning_tokens: Some(10),
            ..Usage::new(1_000_000, 500_000, TokensFrom::CliOutput)
        }
    }

    #[test]
    fn the_wire_names() {
        let u = Usage {
            model: Some("m".into()),
            cost_usd: Some(0.5),
            cost_source: Some(CostSource::CliEstimate),
            ..usage()
        };
        assert_eq!(
            serde_json::to_value(&u).unwrap(),
            json!({"inputTokens": 1_000_000, "cachedInputTokens": 300_000, "cacheWriteTokens": 100_000,
                   "outputTokens": 500_000, "reasoningTokens": 10, "totalTokens": 1_500_000,
                   "model": "m", "costUsd": 0.5, "costSource": "cli-estimate", "tokensFrom": "cli-output"})
        );
        let bare = Usage::new(1, 2, TokensFrom::SessionFile);
        assert_eq!(
            serde_json::to_value(&bare).unwrap(),
            json!({"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "tokensFrom": "session-file"}),
            "what the CLI did not say is absent"
        );
        let back: Usage = serde_json::from_value(serde_json::to_value(&u).unwrap()).unwrap();
        assert_eq!(back, u);
    }

    #[test]
    fn a_price_table_prices_each_part_and_wins_over_an_estimate() {
        let p = Pricing::of(&json!({"pricing": {"input": 3.0, "cachedInput": 0.3, "cacheWrite": 3.75, "output": 15.0}})).unwrap();
        // 600k fresh at 3, 300k cached at 0.3, 100k written at 3.75, 500k out at 15.
        assert_eq!(p.cost(&usage()), 9.765);
        let estimated = Usage {
            cost_usd: Some(1.0),
            cost_source: Some(CostSource::CliEstimate),
            ..usage()
        };
        let priced = estimated.clone().priced(Some(&p));
        assert_eq!(priced.cost_source, Some(CostSource::PriceTable));
        assert_eq!(estimated.clone().priced(None), estimated);
        // Cache prices default to the input price.
        let flat = Pricing::of(&json!({"pricing": {"input": 1.0, "output": 2.0}})).unwrap();
        assert_eq!(flat.cost(&usage()), 1.0 + 1.0);
        // Not a price table: refused, never half-read.
        for bad in [
            json!({}),
            json!({"pricing": {"input": 1.0}}),
            json!({"pricing": {"input": -1.0, "output": 1.0}}),
            json!({"pricing": {"input": 1.0, "output": 1.0, "extra": 1}}),
        ] {
            assert_eq!(Pricing::of(&bad), None, "{bad}");
        }
        assert_eq!(flat.describe(), "USD per million tokens: input 1, output 2");
    }

    #[test]
    fn totals_keep_count_of_what_is_unpriced() {
        let priced = Usage {
            cost_usd: Some(0.1),
            cost_source: Some(CostSource::PriceTable),
            ..Usage::new(100, 20, TokensFrom::CliOutput)
        };
        let unpriced = Usage::new(12_000, 3, TokensFrom::SessionFile);
        assert_eq!(UsageTotal::of([]), None);
        let t = UsageTotal::of([&priced, &priced]).unwrap();
        assert_eq!((t.total_tokens, t.cost_usd), (240, Some(0.2)));
        assert_eq!(t.cost_text(), "$0.2000");
        let mut t = UsageTotal::of([&priced, &unpriced]).unwrap();
        assert_eq!(t.cost_text(), "$0.1000+?");
        assert_eq!(t.tokens_text(), "12.1k");
        assert_eq!(UsageTotal::of([&unpriced]).unwrap().cost_text(), "?");
        t.merge(&UsageTotal::of([&priced]).unwrap());
        assert_eq!((t.attempts, t.unpriced_attempts), (3, 1));
        assert_eq!(t.breakdown(), "in 12.2k · out 43");
        assert_eq!(compact(4_560_000), "4.56M");
    }
}
