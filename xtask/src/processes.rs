//! Processes as `/proc/PID/stat` shows them: state, parent and CPU time. The chores watch the
//! servers they start through it (PostgreSQL's backends ending, what a request costs a server).

/// What the chores read of one process.
#[derive(Debug, Clone, PartialEq)]
pub struct Process {
    /// `R`, `S`, `Z`…
    pub state: char,
    pub ppid: u32,
    /// Clock ticks in user space and in the kernel: every thread's, those that ended included.
    pub user_ticks: u64,
    pub system_ticks: u64,
}

/// Process `pid`; `None` when it does not exist.
pub fn stat(pid: u32) -> Option<Process> {
    parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// `pid (comm) state ppid … utime stime …`: the command may hold spaces and parentheses, so the
/// fields are counted from its last `)`.
fn parse(stat: &str) -> Option<Process> {
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(Process {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        user_ticks: fields.get(11)?.parse().ok()?,
        system_ticks: fields.get(12)?.parse().ok()?,
    })
}

/// The processes whose parent is `parent`.
pub fn children_of(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            (stat(pid)?.ppid == parent).then_some(pid)
        })
        .collect()
}

/// Whether a process exists and is not a zombie (dead, waiting to be reaped).
pub fn is_alive(pid: u32) -> bool {
    stat(pid).is_some_and(|process| process.state != 'Z')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::Duration;

    #[test]
    fn the_fields_are_read_after_the_command() {
        let line = "4242 (nginx: worker (x)) S 4241 4241 4241 0 -1 4194624 15 0 0 0 \
                    731 1242 0 0 20 0 1 0 5 1 1 18446744073709551615";
        let expected = Process {
            state: 'S',
            ppid: 4241,
            user_ticks: 731,
            system_ticks: 1242,
        };
        assert_eq!(parse(line), Some(expected));
        assert_eq!(parse("1 (init) S"), None);
    }

    #[test]
    fn processes_are_found_with_their_parent() {
        let me = std::process::id();
        let parent = std::os::unix::process::parent_id();
        let process = stat(me).expect("this process exists");
        assert_eq!(process.ppid, parent);
        assert_ne!(process.state, 'Z');
        assert!(is_alive(me));
        assert!(children_of(parent).contains(&me));
        assert!(!children_of(me).contains(&me));

        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        assert!(children_of(me).contains(&child.id()));
        child.kill().unwrap();
        // Killed but not reaped: a zombie, no longer alive.
        std::thread::sleep(Duration::from_millis(200));
        assert!(!is_alive(child.id()));
        child.wait().unwrap();
        assert!(stat(child.id()).is_none());
    }
}
