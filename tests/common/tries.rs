//! A worker that tries things and reports each outcome in its own result
//! file (a confined worker cannot write a scratch directory outside the
//! project): the confinement suites' adversarial workers.

use super::Fx;
use std::collections::BTreeMap;

/// The script's prelude: `t NAME 'shell'` appends one line to the result,
/// `NAME: refused|allowed: <output on one line>`.
pub const TRY_PRELUDE: &str = r#"set -u
R="$OKSTRA_RESULT_PATH"
mkdir -p "$(dirname "$R")"
: > "$R"
t() { if out=$(sh -c "$2" 2>&1); then v=allowed; else v=refused; fi; printf '%s: %s: %s\n' "$1" "$v" "$out" | tr -d '\r\n' >> "$R"; echo >> "$R"; }
"#;

/// What worker `id` reported in `results/<id>/out.md`: name -> (refused?,
/// what it printed).
pub type Tries = BTreeMap<String, (bool, String)>;

pub fn tries(fx: &Fx, id: &str) -> Tries {
    fx.p.read(&format!("results/{id}/out.md"))
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(": ")?;
            let (verdict, out) = rest.split_once(": ").unwrap_or((rest, ""));
            Some((name.to_string(), (verdict == "refused", out.to_string())))
        })
        .collect()
}

/// Try `name` failed, saying `said`.
#[track_caller]
pub fn assert_try_refused(tries: &Tries, name: &str, said: &str) {
    let (refused, out) = tries
        .get(name)
        .unwrap_or_else(|| panic!("no outcome for {name}: {tries:?}"));
    assert!(*refused, "{name} was allowed: {out}");
    assert!(out.contains(said), "{name}: expected `{said}`, got: {out}");
}

/// Try `name` succeeded, saying `said`.
#[track_caller]
pub fn assert_try_allowed(tries: &Tries, name: &str, said: &str) {
    let (refused, out) = tries
        .get(name)
        .unwrap_or_else(|| panic!("no outcome for {name}: {tries:?}"));
    assert!(!*refused, "{name} was refused: {out}");
    assert!(out.contains(said), "{name}: expected `{said}`, got: {out}");
}
