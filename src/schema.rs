//! TEMPORARY stub (replaced by the h-schema branch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaKind {
    Jobs,
    Manifest,
    Metadata,
    Plan,
    TeamState,
}
impl SchemaKind {
    pub const ALL: [SchemaKind; 5] = [
        SchemaKind::Jobs,
        SchemaKind::Manifest,
        SchemaKind::Metadata,
        SchemaKind::Plan,
        SchemaKind::TeamState,
    ];
    pub fn name(self) -> &'static str {
        match self {
            SchemaKind::Jobs => "jobs",
            SchemaKind::Manifest => "manifest",
            SchemaKind::Metadata => "metadata",
            SchemaKind::Plan => "plan",
            SchemaKind::TeamState => "team-state",
        }
    }
    pub fn file_name(self) -> &'static str {
        "x.schema.json"
    }
    pub fn text(self) -> &'static str {
        "{}"
    }
    pub fn from_name(s: &str) -> Option<SchemaKind> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}
pub struct SchemaError {
    pub pointer: String,
    pub message: String,
    pub keyword: String,
}
pub fn validate(_kind: SchemaKind, _value: &serde_json::Value) -> Vec<SchemaError> {
    Vec::new()
}
