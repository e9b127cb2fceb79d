//! The map of the documents in memory, by subdomain and by service, with the bytes they keep,
//! evicting the least recently served past the cache's bound.

use super::hosted::{Hosted, MAP_SLOTS_PER_ENTRY};
use foldhash::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use uuid::Uuid;

/// The entries in memory (held under the cache's lock).
#[derive(Debug, Default)]
pub(super) struct Hosts {
    pub(super) by_subdomain: HashMap<String, Arc<Hosted>>,
    /// The service of each entry in memory, to find it by id.
    pub(super) subdomain_of: HashMap<Uuid, String>,
    /// Bytes the entries in `by_subdomain` keep ([`Hosted::footprint`]).
    pub(super) bytes: usize,
}

impl Hosts {
    /// Stops serving the service `service_id`. A subdomain is let go only while it still
    /// belongs to that service: a service deleted and created again under the same name has a
    /// new id, and forgetting the old one must not take the new one's documents.
    /// Forgets a service's documents; the subdomain they were served under, if they were.
    pub(super) fn forget(&mut self, service_id: Uuid) -> Option<String> {
        let subdomain = self.subdomain_of.remove(&service_id)?;
        if self
            .by_subdomain
            .get(&subdomain)
            .is_some_and(|h| h.service_id == service_id)
        {
            if let Some(old) = self.by_subdomain.remove(&subdomain) {
                self.bytes -= old.footprint;
            }
            self.shrink();
        }
        Some(subdomain)
    }

    /// Evicts the least recently served documents (never `keep`'s) until they fit `max_bytes`.
    pub(super) fn evict_down_to(&mut self, max_bytes: usize, keep: &str) {
        while self.bytes > max_bytes {
            let oldest = self
                .by_subdomain
                .iter()
                .filter(|(subdomain, _)| subdomain.as_str() != keep)
                .min_by_key(|(_, hosted)| hosted.last_served.load(Ordering::Relaxed))
                .map(|(subdomain, _)| subdomain.clone());
            let Some(subdomain) = oldest else {
                return;
            };
            if let Some(old) = self.by_subdomain.remove(&subdomain) {
                self.bytes -= old.footprint;
                if self.subdomain_of.get(&old.service_id) == Some(&subdomain) {
                    self.subdomain_of.remove(&old.service_id);
                }
            }
        }
        self.shrink();
    }

    /// Gives back the maps' slots once they are less than a third full: each entry counts
    /// [`MAP_SLOTS_PER_ENTRY`] of them, and a map never shrinks by itself.
    fn shrink(&mut self) {
        let entries = self.by_subdomain.len();
        if self.by_subdomain.capacity() > MAP_SLOTS_PER_ENTRY * entries + 16 {
            self.by_subdomain.shrink_to(entries);
        }
        if self.subdomain_of.capacity() > MAP_SLOTS_PER_ENTRY * entries + 16 {
            self.subdomain_of.shrink_to(entries);
        }
    }
}
