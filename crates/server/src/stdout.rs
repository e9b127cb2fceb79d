//! What the commands print on stdout, in one place. A reader that goes away before the end
//! (`registry audit-events | head -1`) ends the output, and the command with it, quietly and
//! with exit 0, as `grep` or `kubectl` end: the rest of the output was not wanted. Rust's
//! `println!` would panic there (exit 101, a backtrace); a signal's default could not be
//! restored without `unsafe`, which the workspace forbids.

use std::fmt::Display;
use std::io::{ErrorKind, Write};

/// Prints `text` and a line feed.
pub fn line(text: impl Display) {
    write(format_args!("{text}\n"), 0);
}

/// Prints `text` as it is (it ends its own lines).
pub fn text(text: impl Display) {
    write(format_args!("{text}"), 0);
}

/// Prints a line of a command whose exit code says how it ended (`registry keys wait`: 0 is
/// "safe"): a reader that goes away ends it with 1, the code of "not known to be safe".
pub fn progress(text: impl Display) {
    write(format_args!("{text}\n"), 1);
}

/// Prints a line on stderr (a long-running command's report of a failure it retries): a reader
/// of stderr that goes away does not end the command, whose work goes on, and nothing panics.
/// What the line quotes (a registry's or a source's answer) is printed inert.
pub fn report(text: impl Display) {
    let text = text.to_string();
    let text = registry_domain::text::escape_controls(&text);
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

fn write(text: std::fmt::Arguments<'_>, reader_gone: i32) {
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = stdout.write_fmt(text).and_then(|()| stdout.flush()) {
        if error.kind() == ErrorKind::BrokenPipe {
            std::process::exit(reader_gone);
        }
        report(format_args!("registry: cannot write the output: {error}"));
        std::process::exit(1);
    }
}
