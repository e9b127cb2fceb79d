//! What a server spent on the CPU, from `/proc`: the time its process and every process under
//! it (nginx's workers) ran, in user space and in the kernel.
//!
//! A request's CPU cost is the scaling table's steadiest figure: requests a second move with
//! whatever else the machine runs (two rounds of one run differ by half on a small shared
//! machine), while the time a server spends on each request does not. Growing with W at a
//! constant load, it is also the sign of workers waiting for one another.

use crate::processes;
use anyhow::{Context, Result};
use std::process::Command;
use std::sync::OnceLock;

/// CPU time, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTime {
    pub user: f64,
    pub system: f64,
}

impl CpuTime {
    /// The time spent from `earlier` to `self`, per request of `requests`, in microseconds.
    pub fn per_request_since(self, earlier: CpuTime, requests: u64) -> CpuTime {
        let per = |now: f64, then: f64| (now - then) * 1e6 / requests.max(1) as f64;
        CpuTime {
            user: per(self.user, earlier.user),
            system: per(self.system, earlier.system),
        }
    }

    /// User and system time together.
    pub fn total(self) -> f64 {
        self.user + self.system
    }
}

/// The CPU time so far of process `pid` and of the processes under it.
pub fn of_tree(pid: u32) -> Result<CpuTime> {
    let ticks = ticks_per_second()?;
    let (mut user, mut system) = (0, 0);
    let mut tree = vec![pid];
    while let Some(next) = tree.pop() {
        // A process may end between the listing and the read.
        if let Some(process) = processes::stat(next) {
            (user, system) = (user + process.user_ticks, system + process.system_ticks);
            tree.extend(processes::children_of(next));
        }
    }
    Ok(CpuTime {
        user: user as f64 / ticks,
        system: system as f64 / ticks,
    })
}

fn ticks_per_second() -> Result<f64> {
    static TICKS: OnceLock<f64> = OnceLock::new();
    if let Some(ticks) = TICKS.get() {
        return Ok(*ticks);
    }
    let out = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .context("running getconf CLK_TCK")?;
    let ticks: f64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .context("reading getconf CLK_TCK")?;
    Ok(*TICKS.get_or_init(|| ticks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_run_and_costs_add_up_per_request() {
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(30) {}
        let now = of_tree(std::process::id()).unwrap();
        assert!(now.total() > 0.0, "{now:?}");
        let before = CpuTime {
            user: 1.0,
            system: 2.0,
        };
        let after = CpuTime {
            user: 1.5,
            system: 2.25,
        };
        let each = after.per_request_since(before, 1000);
        assert!((each.user - 500.0).abs() < 1e-9 && (each.system - 250.0).abs() < 1e-9);
        assert!((each.total() - 750.0).abs() < 1e-9);
    }
}
