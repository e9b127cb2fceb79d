//! `registry fetch-log`: ships a cache's access log to the registry as fetch evidence
//! (`POST /fetch-log`, docs/api.md, "Behind a CDN"). It reads JSON lines on stdin (`varnishncsa -j`
//! with the format of `deploy/cdn/`), and posts them in batches: when a batch is full, and at
//! least every second while lines come.

use anyhow::Context;
use registry_client::{Credentials, RegistryApi};
use serde_json::json;
use std::io::BufRead;
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::time::{Duration, Instant};

/// `registry fetch-log`'s arguments.
#[derive(Debug, clap::Args)]
pub struct FetchLogArgs {
    /// The registry's API.
    #[arg(
        long,
        env = "REGISTRY_API_URL",
        // A URL may hold a password, which a call refuses and help must not show.
        hide_env_values = true,
        default_value = "http://localhost:8080"
    )]
    pub api_url: String,
    /// The registry's REGISTRY_FETCH_LOG_TOKEN (prefer the environment: a flag shows in `ps`).
    #[arg(long, env = "REGISTRY_FETCH_LOG_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Most bytes posted at once, 1024 to 1048576 (`POST /fetch-log` takes up to 1 MiB,
    /// whatever the registry's REGISTRY_MAX_BODY_BYTES).
    #[arg(long, default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1024..=MAX_BATCH_BYTES))]
    pub batch_bytes: u64,
}

/// The largest body `POST /fetch-log` takes.
const MAX_BATCH_BYTES: u64 = crate::routes::fetch_log::MAX_BATCH_BYTES as u64;

/// A batch waits at most this long for more lines.
const SHIP_EVERY: Duration = Duration::from_secs(1);
/// How long a batch the registry could not take is tried again (then it is dropped).
const RETRY_FOR: Duration = Duration::from_secs(60);

/// A batch of lines not counted, for the exit code.
#[derive(Debug, thiserror::Error)]
#[error("{0} lines of the log were not counted (see above)")]
struct Dropped(u64);

impl FetchLogArgs {
    /// What makes these flags unusable (exit 2), if anything: an API address that is no
    /// http(s) URL, or no token, or one no header can carry.
    pub fn usage_problem(&self) -> Option<String> {
        const TOKEN: &str = "REGISTRY_FETCH_LOG_TOKEN (--token)";
        super::api_url_problem(&self.api_url).or_else(|| match self.token.as_deref() {
            None | Some("") => Some(format!(
                "no fetch-log token: set {TOKEN} to the registry's own"
            )),
            Some(token) => super::token_problem(token, TOKEN),
        })
    }
}

/// Reads stdin to its end, shipping batches as they fill; fails when a batch was dropped.
pub fn run(args: FetchLogArgs) -> anyhow::Result<()> {
    let token = args.token.unwrap_or_default();
    let api = RegistryApi::new(&args.api_url, Credentials::Token(token))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let limit = usize::try_from(args.batch_bytes).unwrap_or(usize::MAX);
    let (lines, incoming) = channel();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        loop {
            let line = read_line(&mut stdin, limit);
            let end = matches!(line, Ok(None));
            if end || lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut batch = Batch::default();
    let mut dropped = 0;
    loop {
        let wait = batch.since.map_or(SHIP_EVERY, |since| {
            SHIP_EVERY.saturating_sub(since.elapsed())
        });
        let (line, done) = match incoming.recv_timeout(wait) {
            Ok(line) => match line.context("reading stdin")? {
                Some(Line::Text(line)) => (Some(line), false),
                Some(Line::TooLong) => {
                    crate::stdout::report(format_args!(
                        "registry fetch-log: a line longer than --batch-bytes ({limit}) was not \
                         posted"
                    ));
                    dropped += 1;
                    (None, false)
                }
                None => (None, true),
            },
            Err(RecvTimeoutError::Timeout) => (None, false),
            Err(RecvTimeoutError::Disconnected) => (None, true),
        };
        let line = line.filter(|l| !l.trim().is_empty());
        if line
            .as_ref()
            .is_some_and(|l| batch.text.len() + l.len() + 1 > limit)
        {
            dropped += batch.ship(&runtime, &api);
        }
        if let Some(line) = line {
            batch.push(&line);
        }
        let due = batch
            .since
            .is_some_and(|since| since.elapsed() >= SHIP_EVERY);
        if due || done {
            dropped += batch.ship(&runtime, &api);
        }
        if done {
            return if dropped == 0 {
                Ok(())
            } else {
                Err(Dropped(dropped).into())
            };
        }
    }
}

/// A line of the log as read.
enum Line {
    /// Its text, without its end.
    Text(String),
    /// One longer than a batch may be: skipped to its end, never held whole.
    TooLong,
}

/// The next line of `input`, without its end (`None` at the end of the input): one that does
/// not fit a batch of `limit` bytes with its line end is [`Line::TooLong`], read to its end
/// without more than `limit + 1` bytes of it held, so that a log without line ends
/// (`/dev/zero`) takes no more memory than a batch.
fn read_line(input: &mut impl BufRead, limit: usize) -> std::io::Result<Option<Line>> {
    use std::io::Read;
    let mut line = Vec::new();
    let bound = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    if input.take(bound).read_until(b'\n', &mut line)? == 0 {
        return Ok(None);
    }
    let ended = line.last() == Some(&b'\n');
    if ended {
        line.pop();
    }
    if line.len() >= limit {
        if !ended {
            skip_line(input)?;
        }
        return Ok(Some(Line::TooLong));
    }
    let text = String::from_utf8(line)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    Ok(Some(Line::Text(text)))
}

/// Reads past the end of the current line, holding none of it.
fn skip_line(input: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let buffer = input.fill_buf()?;
        if buffer.is_empty() {
            return Ok(());
        }
        if let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            input.consume(end + 1);
            return Ok(());
        }
        let all = buffer.len();
        input.consume(all);
    }
}

/// Lines waiting to be posted, and since when.
#[derive(Debug, Default)]
struct Batch {
    text: String,
    lines: u64,
    since: Option<Instant>,
}

impl Batch {
    fn push(&mut self, line: &str) {
        self.text.push_str(line);
        self.text.push('\n');
        self.lines += 1;
        self.since.get_or_insert_with(Instant::now);
    }

    /// Posts the batch and empties it: prints `{"lines", "accepted", "skipped"}`; answers how
    /// many lines were dropped (refused, or the registry unreachable for [`RETRY_FOR`]).
    fn ship(&mut self, runtime: &tokio::runtime::Runtime, api: &RegistryApi) -> u64 {
        let (text, lines) = (
            std::mem::take(&mut self.text),
            std::mem::take(&mut self.lines),
        );
        self.since = None;
        if lines == 0 {
            return 0;
        }
        let started = Instant::now();
        let mut pause = Duration::from_millis(250);
        loop {
            let body = Some((crate::routes::fetch_log::NDJSON, text.clone()));
            let why = match runtime.block_on(api.send("POST", "/fetch-log", body)) {
                Ok((200, answer)) => {
                    let line = json!({"lines": lines, "accepted": answer["accepted"],
                        "skipped": answer["skipped"]});
                    crate::stdout::line(&line);
                    return 0;
                }
                // The registry will refuse these lines again: say why, and go on.
                Ok((status @ 400..=499, answer)) if status != 429 => {
                    let text = registry_client::problem_text(&answer);
                    crate::stdout::report(format_args!(
                        "registry fetch-log: {lines} lines refused ({status}): {text}"
                    ));
                    return lines;
                }
                Ok((status, _)) => format!("the registry answered {status}"),
                // Not the registry: asking again for a minute changes nothing.
                Err(error @ registry_client::ClientError::NotJson { .. }) => {
                    crate::stdout::report(format_args!(
                        "registry fetch-log: {lines} lines not posted: {error}"
                    ));
                    return lines;
                }
                Err(error) => error.to_string(),
            };
            if started.elapsed() >= RETRY_FOR {
                crate::stdout::report(format_args!(
                    "registry fetch-log: {lines} lines dropped after {RETRY_FOR:?}: {why}"
                ));
                return lines;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{read_line, Line};

    fn lines(input: &str, limit: usize) -> Vec<Option<String>> {
        let mut input = input.as_bytes();
        std::iter::from_fn(|| read_line(&mut input, limit).unwrap())
            .map(|line| match line {
                Line::Text(text) => Some(text),
                Line::TooLong => None,
            })
            .collect()
    }

    #[test]
    fn a_line_that_fits_a_batch_with_its_end_is_read_and_a_longer_one_skipped() {
        // A batch of 4 bytes holds a line of 3 and its line end.
        assert_eq!(
            lines("abc\nabcd\nab\nabcdefgh\nx", 4),
            [
                Some("abc".into()),
                None,
                Some("ab".into()),
                None,
                Some("x".into())
            ]
        );
        // The last line, without its end, is read as well; a too long one is skipped to the end.
        assert_eq!(lines("abc", 4), [Some("abc".into())]);
        assert_eq!(lines("abcdefgh", 4), [None]);
        assert_eq!(lines("", 4), Vec::<Option<String>>::new());
    }
}
