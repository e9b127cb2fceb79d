//! Load from `wrk`: one keep-alive client thread, a fixed number of connections, a fixed time;
//! requests per second and the 99th percentile latency read from its `--latency` report.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// One kind of load.
#[derive(Debug, Clone)]
pub struct Load {
    pub url: String,
    pub headers: Vec<(String, String)>,
    /// A Lua script (method and body of writes).
    pub script: Option<PathBuf>,
    pub connections: u32,
    pub seconds: u32,
    /// The CPUs wrk runs on, a `taskset` list (the servers run on others).
    pub cpus: Option<String>,
    /// wrk's threads.
    pub threads: u32,
}

/// What one run measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    pub requests_per_sec: f64,
    /// Requests answered in the run.
    pub requests: u64,
    pub p99_ms: f64,
    /// Answers that were not 2xx or 3xx, and socket errors.
    pub failures: u64,
}

impl Load {
    fn command(&self) -> Command {
        let mut command = match &self.cpus {
            Some(cpus) => {
                let mut c = Command::new("taskset");
                c.args(["-c", cpus, "wrk"]);
                c
            }
            None => Command::new("wrk"),
        };
        command.args([
            &format!("-t{}", self.threads),
            &format!("-c{}", self.connections),
            &format!("-d{}s", self.seconds),
            "--latency",
        ]);
        for (name, value) in &self.headers {
            command.arg("-H").arg(format!("{name}: {value}"));
        }
        if let Some(script) = &self.script {
            command.arg("-s").arg(script);
        }
        command.arg(&self.url);
        command
    }

    /// The command line, secrets elided (for the report).
    pub fn describe(&self) -> String {
        let mut line = match &self.cpus {
            Some(cpus) => format!("taskset -c {cpus} wrk"),
            None => "wrk".to_owned(),
        };
        line.push_str(&format!(
            " -t{} -c{} -d{}s --latency",
            self.threads, self.connections, self.seconds
        ));
        for (name, value) in &self.headers {
            let value = if name.eq_ignore_ascii_case("authorization") {
                "Bearer …"
            } else {
                value
            };
            line.push_str(&format!(" -H '{name}: {value}'"));
        }
        if let Some(script) = &self.script {
            let name = script.file_name().map(|n| n.to_string_lossy().into_owned());
            line.push_str(&format!(" -s {}", name.unwrap_or_default()));
        }
        line.push(' ');
        line.push_str(&self.url);
        line
    }

    /// Runs wrk once.
    pub fn run(&self) -> Result<Sample> {
        self.run_with_report().map(|(sample, _)| sample)
    }

    /// Runs wrk once; also its whole report (what a script's `done` printed).
    pub fn run_with_report(&self) -> Result<(Sample, String)> {
        let out = self.command().output().context("running wrk")?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            bail!(
                "wrk failed: {}{}",
                text,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let sample = parse(&text).with_context(|| format!("reading wrk's report:\n{text}"))?;
        Ok((sample, text))
    }
}

fn milliseconds(value: &str) -> Option<f64> {
    let split = value.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = value.split_at(split);
    let number: f64 = number.parse().ok()?;
    Some(match unit {
        "us" => number / 1000.0,
        "ms" => number,
        "s" => number * 1000.0,
        "m" => number * 60_000.0,
        _ => return None,
    })
}

fn parse(report: &str) -> Option<Sample> {
    let mut sample = Sample::default();
    let mut found = (false, false);
    for line in report.lines().map(str::trim) {
        if let Some(rate) = line.strip_prefix("Requests/sec:") {
            sample.requests_per_sec = rate.trim().parse().ok()?;
            found.0 = true;
        } else if let Some((count, _)) = line.split_once(" requests in ") {
            sample.requests = count.trim().parse().ok()?;
        } else if let Some(p99) = line.strip_prefix("99%") {
            sample.p99_ms = milliseconds(p99.trim())?;
            found.1 = true;
        } else if let Some(n) = line.strip_prefix("Non-2xx or 3xx responses:") {
            sample.failures += n.trim().parse::<u64>().ok()?;
        } else if let Some(errors) = line.strip_prefix("Socket errors:") {
            // "connect 0, read 0, write 0, timeout 0"
            sample.failures += errors
                .split(',')
                .filter_map(|part| part.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>();
        }
    }
    (found.0 && found.1).then_some(sample)
}

/// A wrk script that sends `method` with a JSON `body` and a bearer `token`.
pub fn script(method: &str, token: &str, body: &str) -> String {
    // A long bracket no JSON document contains, so the body needs no escaping.
    format!(
        "wrk.method = \"{method}\"\n\
         wrk.headers[\"Content-Type\"] = \"application/json\"\n\
         wrk.headers[\"Authorization\"] = \"Bearer {token}\"\n\
         wrk.body = [=====[{body}]=====]\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rate_p99_and_failures() {
        let report = "Running 5s test @ http://127.0.0.1:1/x
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   687.87us  1.20ms  74.91ms   97.14%
  Latency Distribution
     50%  459.00us
     75%  512.00us
     90%  631.00us
     99%    4.91ms
  238000 requests in 5.00s, 120.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 4
Requests/sec:  47684.46
Transfer/sec:     24.00MB
";
        let sample = parse(report).unwrap();
        assert!((sample.requests_per_sec - 47684.46).abs() < 1e-6);
        assert_eq!(sample.requests, 238_000);
        assert!((sample.p99_ms - 4.91).abs() < 1e-9);
        assert_eq!(sample.failures, 7);
        assert_eq!(milliseconds("459.00us"), Some(0.459));
        assert_eq!(milliseconds("1.50s"), Some(1500.0));
        assert!(parse("nothing").is_none());
    }
}
