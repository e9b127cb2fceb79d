//! Each worker thread's own copies of the entries it reads from a shared map ([`Near`]).
//!
//! An entry that every worker reads through one shared map costs each request the map's read
//! lock and the entry's reference count: two cache lines that every other worker writes too,
//! which travel from core to core at every request once there are many. A worker that keeps its
//! own copy (its own allocations, so its own reference counts) reads no lock and writes no line
//! another worker reads.
//!
//! A copy is made at a thread's second use of an entry, not its first: the first is served from
//! the shared entry and leaves only a note. Verifiers fetch from very many issuers, most of them
//! seldom: copying each one at its first fetch (a few kilobytes, several allocations) cost more
//! than the lock and the count it saves, and pushed the hot entries' copies out of the budget.
//! The notes are a table of fixed size apart from the copies ([`Notes`]): a stream of keys used
//! once costs no allocation and never pushes a copy out.
//!
//! A copy is trusted only as of the owner's count of changes it was checked at: the owner bumps
//! that count, under its write lock, with every change of the shared map. After any change, a
//! worker's next use of a copy reads the shared entry once (the lock, as without copies) and
//! keeps the copy when that entry is still the one it was made from. So a copy is never older
//! than what the shared map held when the request read the count.

use crossbeam_utils::CachePadded;
use foldhash::HashMap;
use std::borrow::Borrow;
use std::cell::RefCell;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use thread_local::ThreadLocal;

/// What a worker can copy into its own allocations.
pub(crate) trait Copied {
    /// A copy that shares no reference count a request touches with `self`.
    fn copied(&self) -> Arc<Self>;

    /// What the copy counts against a thread's budget ([`Near::new`]).
    fn weight(&self) -> usize {
        1
    }
}

/// Each thread's copies of the entries of one shared map, by key, at most `budget` in weight
/// per thread (past it, the thread starts again from the shared map), and its notes of keys
/// used once.
#[derive(Debug)]
pub(crate) struct Near<K: Send, T: Send + Sync + ?Sized> {
    copies: ThreadLocal<CachePadded<RefCell<Copies<K, T>>>>,
    budget: usize,
}

#[derive(Debug)]
struct Copies<K, T: ?Sized> {
    by_key: HashMap<K, Copy<T>>,
    weight: usize,
    notes: Notes,
}

impl<K, T: ?Sized> Default for Copies<K, T> {
    fn default() -> Self {
        Self {
            by_key: HashMap::default(),
            weight: 0,
            notes: Notes::default(),
        }
    }
}

/// A thread's notes per map: 2^12 slots, 32 KiB.
const NOTE_BITS: u32 = 12;
const NOTE_SLOTS: usize = 1 << NOTE_BITS;

/// The keys a thread used once lately, each by a fingerprint (a keyed hash of it, never 0) in
/// the slot the fingerprint names: a new note takes the place of the one there, so the table
/// never grows, and holds no entry (a note must not keep one in memory once the owner let it
/// go). A note lost that way costs one more use served from the shared entry; a fingerprint
/// mistaken for another's, a copy made one use early.
#[derive(Debug, Default)]
struct Notes {
    /// Made at the first note.
    slots: Option<Box<[u64; NOTE_SLOTS]>>,
}

impl Notes {
    /// The fingerprint's high bits (its low bit is always set).
    fn slot(fingerprint: u64) -> usize {
        (fingerprint >> (u64::BITS - NOTE_BITS)) as usize
    }

    /// Notes a first use.
    fn put(&mut self, fingerprint: u64) {
        let slots = self.slots.get_or_insert_with(|| Box::new([0; NOTE_SLOTS]));
        slots[Self::slot(fingerprint)] = fingerprint;
    }

    /// Whether a use was noted, forgetting it.
    fn take(&mut self, fingerprint: u64) -> bool {
        let Some(slot) = (self.slots.as_mut()).map(|slots| &mut slots[Self::slot(fingerprint)])
        else {
            return false;
        };
        let noted = *slot == fingerprint;
        if noted {
            *slot = 0;
        }
        noted
    }
}

#[derive(Debug)]
struct Copy<T: ?Sized> {
    /// The owner's count of changes when the copy was last found current.
    checked_at: u64,
    /// The shared entry it was made from (held, so that its address names it).
    origin: Arc<T>,
    own: Arc<T>,
}

impl<K, T> Near<K, T>
where
    K: Send + Eq + Hash,
    T: Copied + Send + Sync + ?Sized,
{
    /// No copies yet; each thread keeps at most `budget` in weight.
    pub(crate) fn new(budget: usize) -> Self {
        Self {
            copies: ThreadLocal::new(),
            budget,
        }
    }

    /// The entry at `key` as of the owner's count `changes` (read before the call): this thread's
    /// copy when it was found current at that count, else what `shared` reads from the shared map
    /// (`None` when the map holds nothing there): the shared entry itself at this thread's first
    /// use of `key`, a copy of it from the second use on. `seen` is shown the shared entry
    /// behind a copy served as current (the owner's bookkeeping of use, which should write to it
    /// rarely).
    pub(crate) fn get<Q>(
        &self,
        key: &Q,
        changes: u64,
        seen: impl FnOnce(&T),
        shared: impl FnOnce() -> Option<Arc<T>>,
    ) -> Option<Arc<T>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(own) = self.current(key, changes, seen) {
            return Some(own);
        }
        Some(self.copy_of(key, &shared()?, changes))
    }

    /// This thread's copy of the entry at `key`, when it was found current at the owner's count
    /// `changes` (read before the call); `seen` is shown the shared entry it was made from (the
    /// owner's bookkeeping of use, which should write to it rarely).
    fn current<Q>(&self, key: &Q, changes: u64, seen: impl FnOnce(&T)) -> Option<Arc<T>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let copies: &RefCell<Copies<K, T>> = self.copies.get()?;
        let copies = copies.borrow();
        let copy = copies.by_key.get(key)?;
        if copy.checked_at != changes {
            return None;
        }
        seen(&copy.origin);
        Some(copy.own.clone())
    }

    /// This thread's copy of `origin`, the entry at `key` that the shared map held once the owner's
    /// count was `changes`: the copy it has when made from the same entry, else a new one when
    /// the thread used the key before, kept for the next requests; `origin` itself at the
    /// thread's first use of the key (noted), and for an entry heavier than a quarter of the
    /// budget (never copied).
    fn copy_of<Q>(&self, key: &Q, origin: &Arc<T>, changes: u64) -> Arc<T>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if origin.weight() > self.budget / 4 {
            return origin.clone();
        }
        let mut copies = self.copies.get_or_default().borrow_mut();
        let copies = &mut *copies;
        if let Some(copy) = copies.by_key.get_mut(key) {
            if Arc::ptr_eq(&copy.origin, origin) {
                copy.checked_at = changes;
                return copy.own.clone();
            }
        }
        // A copy of an entry the shared map no longer holds: a new one at once.
        let replaced = match copies.by_key.remove(key) {
            Some(old) => {
                copies.weight -= old.origin.weight();
                true
            }
            None => false,
        };
        if !replaced {
            let fingerprint = copies.by_key.hasher().hash_one(key) | 1;
            if !copies.notes.take(fingerprint) {
                copies.notes.put(fingerprint);
                return origin.clone();
            }
        }
        let own = origin.copied();
        let weight = origin.weight();
        if copies.weight + weight > self.budget {
            copies.by_key.clear();
            copies.weight = 0;
        }
        copies.weight += weight;
        let copy = Copy {
            checked_at: changes,
            origin: origin.clone(),
            own: own.clone(),
        };
        copies.by_key.insert(key.to_owned(), copy);
        own
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Entry(String);

    impl Copied for Entry {
        fn copied(&self) -> Arc<Self> {
            Arc::new(self.clone())
        }

        fn weight(&self) -> usize {
            self.0.len()
        }
    }

    /// `origin` used twice by this thread at `changes`: its copy, made at the second use.
    fn used_twice(
        near: &Near<String, Entry>,
        key: &str,
        origin: &Arc<Entry>,
        changes: u64,
    ) -> Arc<Entry> {
        let first = near.copy_of(key, origin, changes);
        assert!(
            Arc::ptr_eq(&first, origin),
            "the first use is served the shared entry"
        );
        assert!(
            near.current(key, changes, |_| {}).is_none(),
            "nothing copied at the first use"
        );
        near.copy_of(key, origin, changes)
    }

    #[test]
    fn a_copy_is_its_own_allocation_and_serves_until_the_count_moves() {
        let near: Near<String, Entry> = Near::new(100);
        let origin = Arc::new(Entry("a".into()));
        assert!(near.current("k", 0, |_| {}).is_none());
        let own = used_twice(&near, "k", &origin, 0);
        assert_eq!(own, origin);
        assert!(!Arc::ptr_eq(&own, &origin), "the copy shares no count");
        let again = near
            .current("k", 0, |_| {})
            .expect("current at the same count");
        assert!(Arc::ptr_eq(&again, &own));
        // Another change anywhere: checked against the shared entry once, then current again.
        assert!(near.current("k", 1, |_| {}).is_none());
        let checked = near.copy_of("k", &origin, 1);
        assert!(
            Arc::ptr_eq(&checked, &own),
            "the same origin keeps its copy"
        );
        assert!(near.current("k", 1, |_| {}).is_some());
        // A new entry under a key used before: a new copy at once.
        let replaced = Arc::new(Entry("b".into()));
        assert!(near.current("k", 2, |_| {}).is_none());
        let fresh = near.copy_of("k", &replaced, 2);
        assert!(!Arc::ptr_eq(&fresh, &replaced));
        assert_eq!(fresh.0, "b");
        assert_eq!(
            near.current("k", 2, |_| {}).map(|e| e.0.clone()),
            Some("b".into())
        );
    }

    #[test]
    fn each_thread_has_its_own_copies() {
        let near: Near<String, Entry> = Near::new(100);
        let origin = Arc::new(Entry("a".into()));
        let mine = used_twice(&near, "k", &origin, 0);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                assert!(
                    near.current("k", 0, |_| {}).is_none(),
                    "another thread copies its own"
                );
                let theirs = used_twice(&near, "k", &origin, 0);
                assert!(!Arc::ptr_eq(&theirs, &mine));
            });
        });
    }

    #[test]
    fn notes_use_every_slot() {
        let keys = std::collections::hash_map::RandomState::new();
        let slots: std::collections::HashSet<usize> = (0..100_000)
            .map(|i| Notes::slot(keys.hash_one(i) | 1))
            .collect();
        assert_eq!(slots.len(), NOTE_SLOTS);
    }

    #[test]
    fn keys_used_once_never_push_a_copy_out() {
        let near: Near<String, Entry> = Near::new(100);
        let hot = Arc::new(Entry("hot".into()));
        let own = used_twice(&near, "hot", &hot, 0);
        // A hundred thousand issuers fetched once each, as a verifier's sweep does.
        for i in 0..100_000 {
            let once = Arc::new(Entry("x".into()));
            let served = near.copy_of(&format!("once-{i}"), &once, 0);
            assert!(Arc::ptr_eq(&served, &once), "served the shared entry");
        }
        let still = near.current("hot", 0, |_| {}).expect("the copy stays");
        assert!(Arc::ptr_eq(&still, &own));
        // A key noted lately is copied at its next use.
        let last = Arc::new(Entry("last".into()));
        let copy = near.copy_of("once-99999", &last, 0);
        assert!(!Arc::ptr_eq(&copy, &last), "copied at the second use");
    }

    #[test]
    fn copies_stay_within_the_budget() {
        let near: Near<String, Entry> = Near::new(8);
        let heavy = Arc::new(Entry("abc".into()));
        let served = near.copy_of("heavy", &heavy, 0);
        assert!(
            Arc::ptr_eq(&served, &heavy),
            "over a quarter of the budget: not copied"
        );
        assert!(near.current("heavy", 0, |_| {}).is_none());
        for (i, key) in ["a", "b", "c", "d", "e"].into_iter().enumerate() {
            used_twice(&near, key, &Arc::new(Entry("xx".into())), 0);
            let kept = ["a", "b", "c", "d", "e"][..=i]
                .iter()
                .filter(|k| near.current(**k, 0, |_| {}).is_some())
                .count();
            assert!(
                kept * 2 <= 8,
                "{kept} copies of weight 2 kept in a budget of 8"
            );
        }
        // The fifth started the thread's copies again.
        assert!(near.current("a", 0, |_| {}).is_none());
        assert!(near.current("e", 0, |_| {}).is_some());
    }
}
