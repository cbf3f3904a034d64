//! What the streaming JSON readers share (the plan reader, the team-state
//! check): the visitor methods of the scalar values, and reading an array
//! or an object past, element by element, keeping nothing of it.

use serde::de::{Deserialize, MapAccess, SeqAccess};

/// The visitor methods of every scalar JSON value (boolean, number, string,
/// null), each answering `$out`, with `$what` bound to how the value is
/// named in a message: "a boolean", "a number", "a string" or "null".
macro_rules! scalar_visits {
    ($what:ident => $out:expr) => {
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
            let $what = "a boolean";
            Ok($out)
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
            let $what = "a number";
            Ok($out)
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
            let $what = "a number";
            Ok($out)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            let $what = "a number";
            Ok($out)
        }
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
            let $what = "a string";
            Ok($out)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            let $what = "null";
            Ok($out)
        }
    };
}
pub(crate) use scalar_visits;

/// Read the rest of an array past, each element read as a `T`.
pub(crate) fn past_seq<'de, T: Deserialize<'de>, A: SeqAccess<'de>>(
    mut seq: A,
) -> Result<(), A::Error> {
    while seq.next_element::<T>()?.is_some() {}
    Ok(())
}

/// Read the rest of an object past, each key and value read as a `T`.
pub(crate) fn past_map<'de, T: Deserialize<'de>, A: MapAccess<'de>>(
    mut map: A,
) -> Result<(), A::Error> {
    while map.next_entry::<T, T>()?.is_some() {}
    Ok(())
}
