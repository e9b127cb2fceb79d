//! The process's own figures for `/metrics`, under the names Prometheus' client libraries give
//! them: CPU time, resident memory, open file descriptors and start time, read from Linux's
//! `/proc` at scrape time (nothing is counted while serving).

/// Clock ticks per second in `/proc` (`USER_HZ`, 100 on every Linux architecture).
const TICKS_PER_SECOND: f64 = 100.0;

/// What the process uses now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    /// User and system CPU time since start, in seconds.
    pub cpu_seconds: f64,
    /// Resident memory, in bytes.
    pub resident_bytes: f64,
    /// Open file descriptors (sockets and the database's files included).
    pub open_fds: f64,
    /// When it started, in seconds since the Unix epoch.
    pub start_time_seconds: f64,
}

/// The figures, or `None` where `/proc` does not tell them.
pub fn figures() -> Option<Figures> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let boot = std::fs::read_to_string("/proc/stat").ok()?;
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count();
    parse(&stat, &status, &boot, open_fds)
}

fn parse(stat: &str, status: &str, boot: &str, open_fds: usize) -> Option<Figures> {
    // The command name, in parentheses, may hold spaces: fields are counted after its end
    // (the first of them, the state, is field 3 of proc(5)).
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    let field = |number: usize| fields.get(number - 3)?.parse::<f64>().ok();
    let ticks = field(14)? + field(15)?;
    let started_after_boot = field(22)? / TICKS_PER_SECOND;
    let boot_time = boot
        .lines()
        .find_map(|line| line.strip_prefix("btime "))?
        .trim()
        .parse::<f64>()
        .ok()?;
    let resident_kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<f64>()
        .ok()?;
    Some(Figures {
        cpu_seconds: ticks / TICKS_PER_SECOND,
        resident_bytes: resident_kib * 1024.0,
        open_fds: open_fds as f64,
        start_time_seconds: boot_time + started_after_boot,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_are_read_by_field() {
        let stat = "4242 (reg istry) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 \
                    9 0 1234500 800000000 5000 18446744073709551615";
        let status = "Name:\tregistry\nVmRSS:\t   20480 kB\nThreads:\t9\n";
        let boot = "cpu  1 2 3\nbtime 1764150000\nprocesses 10\n";
        let figures = parse(stat, status, boot, 17).unwrap();
        assert_eq!(figures.cpu_seconds, 3.0);
        assert_eq!(figures.resident_bytes, 20480.0 * 1024.0);
        assert_eq!(figures.open_fds, 17.0);
        assert_eq!(figures.start_time_seconds, 1764150000.0 + 12345.0);
        assert_eq!(parse("garbage", status, boot, 1), None);
    }

    #[test]
    fn this_process_has_figures() {
        let figures = figures().expect("Linux /proc");
        assert!(figures.resident_bytes > 0.0 && figures.open_fds >= 3.0);
        assert!(figures.start_time_seconds > 1.6e9);
    }
}
