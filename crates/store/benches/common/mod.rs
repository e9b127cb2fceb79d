//! What the store's benchmarks share: their one argument, and a migrated store on a SQLite file
//! of its own, removed when the benchmark ends.

use registry_store::Store;
use std::path::PathBuf;
use std::sync::Arc;

/// The benchmark's one argument, a count (`cargo bench … -- COUNT`), or `default`.
pub fn count_argument(default: usize) -> usize {
    std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(default)
}

/// A migrated store on a SQLite file in a directory of the benchmark's own.
pub struct Scratch {
    pub store: Arc<Store>,
    /// The SQLite file.
    #[allow(
        dead_code,
        reason = "each benchmark compiles this module alone; not all open the file"
    )]
    pub file: PathBuf,
    dir: PathBuf,
}

impl Scratch {
    /// A new one, its directory named after `bench`.
    pub fn new(bench: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("{bench}-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("registry.db");
        let store = Arc::new(Store::connect(&format!("sqlite://{}", file.display())).unwrap());
        store.migrate().unwrap();
        Self { store, file, dir }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }
}
