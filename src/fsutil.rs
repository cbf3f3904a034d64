//! (to be written)
//! TEMPORARY stub (replaced by the h-state branch).
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)
}
