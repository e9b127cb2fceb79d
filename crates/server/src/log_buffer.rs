//! Where `serve`'s log goes: a 64 KiB buffer in front of stderr, written out when it fills and
//! at least every 50 ms, rather than one `write(2)` per line (one per request).

use std::io::{BufWriter, Stderr, Write};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

/// How long a log line may wait in the buffer before it reaches stderr.
const LOG_FLUSH_EVERY: Duration = Duration::from_millis(50);

fn log_buffer() -> &'static Mutex<BufWriter<Stderr>> {
    static BUFFER: OnceLock<Mutex<BufWriter<Stderr>>> = OnceLock::new();
    BUFFER.get_or_init(|| {
        std::thread::Builder::new()
            .name("log-flush".into())
            .spawn(|| loop {
                std::thread::sleep(LOG_FLUSH_EVERY);
                flush_log();
            })
            .expect("start the log flusher");
        Mutex::new(BufWriter::with_capacity(64 * 1024, std::io::stderr()))
    })
}

/// One log line on its way to stderr, holding the buffer's lock while it is written.
#[derive(Debug)]
pub struct LogLine(MutexGuard<'static, BufWriter<Stderr>>);

impl Write for LogLine {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.write(bytes)
    }

    /// Left to the flusher: flushing every line is the cost the buffer exists to avoid.
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Where `serve` writes its log (a `MakeWriter` for `tracing_subscriber`). One line per request
/// would otherwise cost one `write(2)` per request: lines are appended to a 64 KiB buffer, which
/// is written when it fills and at least every 50 ms; [`flush_log`] writes the rest at exit.
pub fn log_line() -> LogLine {
    LogLine(log_buffer().lock().unwrap_or_else(PoisonError::into_inner))
}

/// Writes out buffered log lines (before exiting).
pub fn flush_log() {
    let _ = log_buffer()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .flush();
}
