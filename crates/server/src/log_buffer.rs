//! Where `serve`'s log goes: one buffer per thread in front of stderr, written out when it
//! fills and at least every 50 ms, rather than one `write(2)` per line (one per request).
//!
//! Per thread, so that workers never wait for one another to log: each appends to its own
//! buffer under its own lock, which only the flusher also takes (20 times a second). Lines from
//! two threads may reach stderr in another order than they were written, within those 50 ms;
//! each line is written whole.

use crossbeam_utils::CachePadded;
use std::io::Write;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;
use thread_local::ThreadLocal;

/// How long a log line may wait in its buffer before it reaches stderr.
const LOG_FLUSH_EVERY: Duration = Duration::from_millis(50);
/// A thread's buffer is written out once it holds this much.
const BUFFER_BYTES: usize = 64 * 1024;

type Buffer = CachePadded<Mutex<Vec<u8>>>;

fn buffers() -> &'static ThreadLocal<Buffer> {
    static BUFFERS: OnceLock<ThreadLocal<Buffer>> = OnceLock::new();
    BUFFERS.get_or_init(|| {
        std::thread::Builder::new()
            .name("log-flush".into())
            .spawn(|| loop {
                std::thread::sleep(LOG_FLUSH_EVERY);
                flush_log();
            })
            .expect("start the log flusher");
        ThreadLocal::new()
    })
}

fn lock(buffer: &Buffer) -> MutexGuard<'_, Vec<u8>> {
    buffer.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Writes `bytes` (whole lines) to stderr, and empties them. Buffers of several threads may be
/// written at once: stderr's own lock keeps each buffer's lines together.
fn write_out(bytes: &mut Vec<u8>) {
    if !bytes.is_empty() {
        let _ = std::io::stderr().lock().write_all(bytes);
        bytes.clear();
    }
}

/// One log line on its way to stderr, holding this thread's buffer while it is written.
#[derive(Debug)]
pub struct LogLine(MutexGuard<'static, Vec<u8>>);

impl LogLine {
    /// The buffer itself, for a line written piece by piece (`request_line`); whole lines only.
    pub(crate) fn bytes(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }
}

impl Write for LogLine {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    /// Left to the flusher: flushing every line is the cost the buffer exists to avoid.
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine {
    /// A full buffer is written at once, by the thread that filled it.
    fn drop(&mut self) {
        if self.0.len() >= BUFFER_BYTES {
            write_out(&mut self.0);
        }
    }
}

/// Where `serve` writes its log (a `MakeWriter` for `tracing_subscriber`): this thread's
/// buffer, written out when it holds 64 KiB and at least every 50 ms; [`flush_log`] writes
/// every buffer at exit.
pub fn log_line() -> LogLine {
    LogLine(lock(buffers().get_or_default()))
}

/// Writes out every thread's buffered log lines (before exiting).
pub fn flush_log() {
    for buffer in buffers() {
        write_out(&mut lock(buffer));
    }
}
