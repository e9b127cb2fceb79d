//! Each worker thread's own SQLite connection, for the reads a request takes in place
//! ([`InPlace`]): the one statement every authenticated request runs takes no connection from
//! the pool, whose two critical sections per checkout every worker would otherwise queue on.

use crate::error::{Failure, Res};
use crate::pool::{Db, Manager};
use crossbeam_utils::CachePadded;
use registry_domain::ports::StoreResult;
use std::cell::RefCell;
use thread_local::ThreadLocal;

/// The threads' connections to one SQLite file, opened by each thread at its first read.
pub(crate) struct InPlace {
    manager: Manager,
    connections: ThreadLocal<CachePadded<RefCell<Option<Db>>>>,
}

impl std::fmt::Debug for InPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InPlace").finish_non_exhaustive()
    }
}

impl InPlace {
    /// No connection yet; each is opened by `manager` (so never after [`Store::close`]).
    ///
    /// [`Store::close`]: crate::Store::close
    pub(crate) fn new(manager: Manager) -> Self {
        Self {
            manager,
            connections: ThreadLocal::new(),
        }
    }

    /// Runs `f` on this thread's connection; `None` when there is none to use now (it cannot be
    /// opened, or the thread is already in a read): the caller then uses the pool. A
    /// connection that failed a statement is closed, and the thread's next read opens another.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&mut Db) -> Res<T>) -> Option<StoreResult<T>> {
        let cell: &RefCell<Option<Db>> = self.connections.get_or_default();
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.is_none() {
            *slot = Some(self.manager.open().ok()?);
        }
        let conn = slot.as_mut()?;
        let result = f(conn).map_err(|Failure(e)| e);
        if result.is_err() {
            *slot = None;
        }
        Some(result)
    }
}
