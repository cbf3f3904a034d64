//! The command line's manners: a report whose reader went away.

use std::process::{Command, Stdio};

#[test]
fn a_report_whose_reader_went_away_ends_quietly() {
    // The read end is gone before okstra writes: every write fails with
    // EPIPE, as in `okstra schema jobs | head -0`.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    for args in [&["schema"][..], &["schema", "jobs"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_okstra"))
            .args(args)
            .stdout(Stdio::from(writer.try_clone().unwrap()))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert_eq!(err, "", "{args:?}");
    }
}

#[test]
fn refused_input_keeps_its_exit_code_when_nobody_reads_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_okstra"))
        .args(["show", "no-such-plan.json", "--format", "json"])
        .current_dir(dir.path())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}
