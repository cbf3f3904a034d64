//! Holding a started process at its gate until its start is recorded
//! (SPEC §5.8), and telling a process from a later one with its pid.

use super::{SpawnSpec, Spawned};
use std::fs::File;
use std::io::{self, Write as _};

/// The write end of a held wrapper's gate. [`Gate::release`] lets it run;
/// dropping the gate unreleased closes it, and the wrapper exits without
/// starting anything.
#[derive(Debug)]
pub struct Gate {
    file: File,
    released: bool,
}

impl Gate {
    /// A gate over the write end of a pipe or FIFO the wrapper reads.
    pub fn new(file: File) -> Gate {
        Gate {
            file,
            released: false,
        }
    }

    /// Let the wrapper go: one byte on its gate. The gate stays open (a
    /// FIFO loses its byte when every end closes before it is read).
    pub fn release(&mut self) -> io::Result<()> {
        if !self.released {
            self.file.write_all(b"1")?;
            self.released = true;
        }
        Ok(())
    }
}

/// Start `spec.argv` leading a new process group, its stdin the read end of
/// a fresh pipe: the returned gate is the write end.
pub fn spawn_gated(spec: &SpawnSpec) -> io::Result<(Spawned, Gate)> {
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let stdin = File::from(read);
    let child = super::start_with_stdin(spec, true, &stdin)?;
    Ok((child, Gate::new(File::from(write))))
}

/// When process `pid` started, in clock ticks since boot
/// (`/proc/<pid>/stat` field 22); `None` when there is no such process.
pub fn start_time(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After "pid (comm)", whose comm may hold anything: state is field 3,
    // so starttime (22) is the 20th after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether `pid` is alive (not a zombie) and is the process that started at
/// `start` (when known), not a later one that reused the pid.
pub fn same_process_alive(pid: u32, start: Option<u64>) -> bool {
    super::pid_alive(pid) && start.is_none_or(|s| start_time(pid) == Some(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gated_child_runs_once_released_and_sees_eof_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        // `head -c1` stands in for the wrapper's read of its gate.
        let script = "b=$(head -c1); if [ -n \"$b\" ]; then echo ran >> ran.txt; else echo closed >> ran.txt; fi";
        let argv = vec!["sh".to_string(), "-c".to_string(), script.to_string()];
        let spec = SpawnSpec {
            argv: &argv,
            cwd: dir.path(),
            env: &[],
            log: None,
            stdin: None,
        };
        let (mut child, mut gate) = spawn_gated(&spec).unwrap();
        assert!(same_process_alive(child.pid(), start_time(child.pid())));
        gate.release().unwrap();
        assert_eq!(child.wait().unwrap(), 0);
        drop(gate);
        let (mut child, gate) = spawn_gated(&spec).unwrap();
        drop(gate);
        assert_eq!(child.wait().unwrap(), 0);
        let text = std::fs::read_to_string(dir.path().join("ran.txt")).unwrap();
        assert_eq!(text, "ran\nclosed\n");
    }

    #[test]
    fn start_time_tells_processes_apart() {
        let me = std::process::id();
        let t = start_time(me).unwrap();
        assert!(same_process_alive(me, Some(t)));
        assert!(!same_process_alive(me, Some(t + 1)));
        assert!(same_process_alive(me, None));
        assert_eq!(start_time(u32::MAX), None);
    }
}
