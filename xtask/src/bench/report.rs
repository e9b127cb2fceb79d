//! The figures of a run, the table of medians and ratios, and its section of
//! `docs/benchmarks.md` (the rest of that file is left as it is).

use super::wrk::Sample;
use anyhow::{Context, Result};
use std::fmt::{self, Write};
use std::path::Path;

/// The heading of the section this command writes.
const SECTION: &str = "## HTTP (`cargo xtask bench`)";

/// The median (the mean of the middle two for an even count); 0 for none.
pub fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

/// One round of P1–P4.
#[derive(Debug, Clone, Copy)]
pub struct RoundSamples {
    pub p1_registry: Sample,
    pub p1_nginx: Sample,
    pub p1_tls_registry: Sample,
    pub p1_tls_nginx: Sample,
    pub p2: Sample,
    pub p3: Sample,
    pub p4: Sample,
}

impl fmt::Display for RoundSamples {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = |s: &Sample| format!("{:.0}/s p99 {:.2} ms", s.requests_per_sec, s.p99_ms);
        write!(
            f,
            "P1 registry {} | P1 nginx {} | P1-TLS registry {} | P1-TLS nginx {} | P2 {} | P3 {} \
             | P4 {}",
            s(&self.p1_registry),
            s(&self.p1_nginx),
            s(&self.p1_tls_registry),
            s(&self.p1_tls_nginx),
            s(&self.p2),
            s(&self.p3),
            s(&self.p4)
        )
    }
}

/// Requests around a revocation.
#[derive(Debug, Clone, Copy, Default)]
pub struct Revocation {
    pub before: u64,
    pub after: u64,
    pub accepted_after: u64,
}

/// P5 and P6.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    pub ready_fresh_ms: f64,
    pub ready_existing_ms: f64,
    pub ready_loaded_ms: f64,
    pub rss_idle_kib: u64,
    pub rss_loaded_kib: u64,
    pub services: usize,
    pub populate_secs: f64,
    pub propagation_median_ms: f64,
    pub propagation_max_ms: f64,
    pub revocation_static: Revocation,
    pub revocation_federated: Revocation,
}

/// Everything a run measured, and how.
#[derive(Debug, Default)]
pub struct Report {
    pub seconds: u32,
    pub rounds: Vec<RoundSamples>,
    pub figures: Figures,
    pub load_before: String,
    pub load_after: String,
    pub pinning: String,
    pub commands: Vec<(String, String)>,
    pub nginx_config: String,
    pub registry_env: Vec<String>,
}

fn met(ok: bool) -> &'static str {
    if ok {
        "yes"
    } else {
        "**no**"
    }
}

pub fn grouped(n: f64) -> String {
    let digits = format!("{:.0}", n.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

impl Report {
    pub fn new(seconds: u32, load_before: String) -> Report {
        Report {
            seconds,
            load_before,
            ..Report::default()
        }
    }

    fn rate(&self, pick: impl Fn(&RoundSamples) -> Sample) -> f64 {
        median(self.rounds.iter().map(|r| pick(r).requests_per_sec))
    }

    fn p99(&self, pick: impl Fn(&RoundSamples) -> Sample) -> f64 {
        median(self.rounds.iter().map(|r| pick(r).p99_ms))
    }

    fn failures(&self, pick: impl Fn(&RoundSamples) -> Sample) -> u64 {
        self.rounds.iter().map(|r| pick(r).failures).sum()
    }

    /// The section, in Markdown.
    pub fn render(&self) -> String {
        let f = &self.figures;
        let p1 = self.rate(|r| r.p1_registry);
        let nginx = self.rate(|r| r.p1_nginx);
        let (tls, tls_nginx) = (
            self.rate(|r| r.p1_tls_registry),
            self.rate(|r| r.p1_tls_nginx),
        );
        let p2 = self.rate(|r| r.p2);
        let p3 = self.rate(|r| r.p3);
        let p4 = self.rate(|r| r.p4);
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let mut out = String::new();
        let _ = writeln!(out, "{SECTION}\n");
        let _ = writeln!(
            out,
            "Written by `cargo xtask bench` on {} (UTC). Machine: {}.\n\
             Load average (1/5/15 min) before: {}; after: {}. Pinning: {}. Each figure is the \
             median of {} rounds of {} s, the runs of a round alternating registry, nginx, \
             registry over HTTPS, nginx over HTTPS, P2, P3, P4; requests that failed (not 2xx/3xx, or socket errors) are counted and must be 0.\n",
            today(),
            super::machine(),
            self.load_before,
            self.load_after,
            self.pinning,
            self.rounds.len(),
            self.seconds,
        );
        // The values, named as the table below (Markdown as it is written) uses them.
        let ms = |pick: fn(&RoundSamples) -> Sample| format!("{:.2} ms", self.p99(pick));
        let (p1_p99, nginx_p99) = (ms(|r| r.p1_registry), ms(|r| r.p1_nginx));
        let (tls_p99, tls_nginx_p99) = (ms(|r| r.p1_tls_registry), ms(|r| r.p1_tls_nginx));
        let tls_ratio = ratio(tls, tls_nginx);
        let tls_met = met(tls_ratio >= 1.0);
        let [tls, tls_nginx] = [tls, tls_nginx].map(grouped);
        let (p2_p99, p3_p99, p4_p99) = (ms(|r| r.p2), ms(|r| r.p3), ms(|r| r.p4));
        let (r1, r2, r3) = (ratio(p1, nginx), ratio(p2, p1), ratio(p3, p1));
        let (m1, m2, m3) = (met(r1 >= 1.0), met(r2 >= 0.5), met(r3 >= 0.3));
        let [p1, nginx, p2, p3, p4] = [p1, nginx, p2, p3, p4].map(grouped);
        let failed = self.failures(|r| r.p1_registry)
            + self.failures(|r| r.p1_tls_registry)
            + self.failures(|r| r.p2)
            + self.failures(|r| r.p3)
            + self.failures(|r| r.p4);
        let (failed_met, nginx_failed) = (
            met(failed == 0),
            self.failures(|r| r.p1_nginx) + self.failures(|r| r.p1_tls_nginx),
        );
        let (existing, fresh, loaded) = (f.ready_existing_ms, f.ready_fresh_ms, f.ready_loaded_ms);
        let existing_met = met(existing > 0.0 && existing <= 200.0);
        let (idle, rss_loaded) = (mib(f.rss_idle_kib), mib(f.rss_loaded_kib));
        let idle_met = met(f.rss_idle_kib > 0 && idle <= 30.0);
        let (services, populate) = (grouped(f.services as f64), f.populate_secs);
        let _ = write!(
            out,
            "| scenario | figure | value | compared with | ratio | target | met |
|---|---|---:|---|---:|---|---|
| P1 public discovery by `Host`, 1 worker | requests/s | {p1} | nginx {nginx} | {r1:.2} | ≥ 1.0 × nginx | {m1} |
| P1 | p99 | {p1_p99} | nginx {nginx_p99} |  |  |  |
| P1-TLS the same over HTTPS (TLS 1.3, keep-alive), 1 worker | requests/s | {tls} | nginx {tls_nginx} | {tls_ratio:.2} | ≥ 1.0 × nginx | {tls_met} |
| P1-TLS | p99 | {tls_p99} | nginx {tls_nginx_p99} |  |  |  |
| P2 `GET /services/{{s}}/config`, static token | requests/s | {p2} | P1 | {r2:.2} | ≥ 0.5 × P1 | {m2} |
| P2 | p99 | {p2_p99} |  |  |  |  |
| P3 the same, RS256 identity token (warm) | requests/s | {p3} | P1 | {r3:.2} | ≥ 0.3 × P1 | {m3} |
| P3 | p99 | {p3_p99} |  |  |  |  |
| P4 `PUT /services/{{s}}/config`, SQLite | writes/s | {p4} |  |  |  |  |
| P4 | p99 | {p4_p99} |  |  |  |  |
| P1–P4 | failed requests (registry) | {failed} | nginx {nginx_failed} |  | 0 | {failed_met} |
| P5 start-up to `/readyz`, existing database | ms | {existing:.0} |  |  | ≤ 200 ms | {existing_met} |
| P5 start-up, new database (creates and migrates) | ms | {fresh:.0} |  |  |  |  |
| P5 start-up with {services} published services | ms | {loaded:.0} |  |  |  |  |
| P5 resident memory, idle | VmRSS | {idle:.1} MiB |  |  | ≤ 30 MiB | {idle_met} |
| P5 resident memory, {services} published services | VmRSS | {rss_loaded:.1} MiB |  |  |  |  |
| P5 creating and publishing them (4 clients) | s | {populate:.1} |  |  |  |  |
"
        );
        if f.propagation_max_ms > 0.0 {
            let (median, max) = (f.propagation_median_ms, f.propagation_max_ms);
            let quick = met(max <= 5000.0);
            let _ = writeln!(out, "| P6 PUT on replica A → served by B (PostgreSQL) | median / max | {median:.0} / {max:.0} ms |  |  | ≤ 5 s (aim < 1 s) | {quick} |");
            for (name, r) in [
                ("static token", f.revocation_static),
                ("identity token", f.revocation_federated),
            ] {
                let (accepted, sent, before) = (r.accepted_after, r.after, r.before);
                let none = met(accepted == 0 && sent > 0);
                let _ = writeln!(out, "| P6 requests on B after the account's DELETE on A returned, {name} | accepted / sent | {accepted} / {sent} | {before} sent before |  | 0 | {none} |");
            }
        }
        out.push_str("\nRounds (requests/s, p99):\n\n");
        for (i, round) in self.rounds.iter().enumerate() {
            let _ = writeln!(out, "{}. {round}", i + 1);
        }
        out.push_str("\nCommands (the registry and nginx on loopback, release build):\n\n```\n");
        out.push_str("cargo xtask bench");
        if self.rounds.len() != 5 || self.seconds != 10 {
            let _ = write!(
                out,
                " --rounds {} --seconds {}",
                self.rounds.len(),
                self.seconds
            );
        }
        out.push_str("\n\n# the registry of P1–P4 (stderr to a file; the customer made by `registry customer create`)\n");
        let _ = writeln!(
            out,
            "{} taskset -c 1 target/release/registry serve",
            self.registry_env.join(" ")
        );
        out.push('\n');
        for (name, command) in &self.commands {
            let _ = writeln!(out, "# {name}\n{command}");
        }
        out.push_str("```\n\nnginx (`nginx -c nginx.conf`, the file holds the registry's discovery document):\n\n```nginx\n");
        out.push_str(&self.nginx_config);
        out.push_str("```\n");
        out
    }
}

pub fn today() -> String {
    crate::cmd::output(std::process::Command::new("date").args(["-u", "+%Y-%m-%d %H:%M"]))
        .map(|d| d.trim().to_owned())
        .unwrap_or_default()
}

/// Replaces (or appends) this command's section of the document at `path`, keeping the others.
pub fn write_section(path: &Path, section: &str) -> Result<()> {
    write_titled_section(path, SECTION, section)
}

/// Replaces (or appends) the section headed `title` (its first line) of the document at `path`.
pub fn write_titled_section(path: &Path, title: &str, section: &str) -> Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let updated = match text.find(title) {
        Some(start) => {
            let rest = &text[start + title.len()..];
            let end = rest
                .find("\n## ")
                .map_or(text.len(), |i| start + title.len() + i + 1);
            format!(
                "{}{section}{}{}",
                &text[..start],
                if end < text.len() { "\n" } else { "" },
                &text[end..]
            )
        }
        None => format!("{}\n{section}", text.trim_end().to_owned() + "\n"),
    };
    std::fs::write(path, updated).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_digit_groups() {
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), 2.0);
        assert_eq!(median([4.0, 1.0, 2.0, 3.0].into_iter()), 2.5);
        assert_eq!(median(std::iter::empty()), 0.0);
        assert_eq!(grouped(1234567.4), "1,234,567");
        assert_eq!(grouped(999.0), "999");
    }

    #[test]
    fn the_section_is_replaced_and_the_others_kept() {
        let dir = std::env::temp_dir().join(format!("bench-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("b.md");
        std::fs::write(&path, "# B\n\n## Domain (criterion)\n\nkept\n").unwrap();
        write_section(&path, &format!("{SECTION}\n\nfirst\n")).unwrap();
        write_section(&path, &format!("{SECTION}\n\nsecond\n")).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("## Domain (criterion)\n\nkept\n"), "{text}");
        assert!(text.contains("second") && !text.contains("first"), "{text}");
        std::fs::write(
            &path,
            format!("# B\n\n{SECTION}\n\nold\n\n## Later\n\nkept too\n"),
        )
        .unwrap();
        write_section(&path, &format!("{SECTION}\n\nnew\n")).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("new\n\n## Later\n\nkept too\n") && !text.contains("old"),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
