//! The candidate index of an issuer's rules: which rules a token can possibly match, found by
//! the exact values and literal heads the rules pin, so that a request does not try every rule.
//!
//! Each rule is filed once, under one of its claims: the one whose exact value (or, failing
//! that, literal head before the first wildcard) the fewest other rules share. A rule that pins
//! nothing literal is always a candidate. A token's value of a filed claim finds the rules
//! filed under that value, and under each of its prefixes that is some rule's head; only those
//! candidates are then matched in full, in document order. The index is sound by construction:
//! a rule matches only values equal to (or starting with) its key, so a matching rule is always
//! among the candidates.
//!
//! Cost of a look-up: for each claim some rule is filed under, one hash of the token's value
//! and one per distinct head length, independent of the number of rules.

use super::pattern::{ClaimView, Key};
use std::collections::HashMap;

/// The rules of one issuer, filed by claim.
#[derive(Debug, Clone, Default)]
pub(crate) struct CandidateIndex {
    /// One per claim slot some rule is filed under.
    slots: Box<[SlotIndex]>,
    /// Positions of the rules that pin no literal text: candidates for every token.
    unfiled: Box<[u32]>,
}

/// The rules filed under one claim.
#[derive(Debug, Clone, Default)]
struct SlotIndex {
    /// The claim's position in the group's claim names.
    slot: usize,
    /// Exact value → positions of the rules pinning it, ascending.
    exact: HashMap<Box<str>, Box<[u32]>>,
    /// Literal head → positions of the rules whose pattern starts with it, ascending.
    heads: HashMap<Box<str>, Box<[u32]>>,
    /// The distinct byte lengths of `heads`' keys, ascending.
    head_lengths: Box<[usize]>,
}

/// Where a rule is filed: its claim slot, and the key.
type Filing = (usize, bool, Box<str>);

impl CandidateIndex {
    /// Files an issuer's rules, given in document order as the keys each can be filed under:
    /// (claim slot, the literal its pattern pins) for each of its claims that pins one.
    pub(crate) fn build<'k, R>(rules: impl IntoIterator<Item = R>) -> Self
    where
        R: IntoIterator<Item = (usize, Key<'k>)>,
    {
        let filing = |(slot, key): (usize, Key<'_>)| -> Filing {
            match key {
                Key::Exact(value) => (slot, true, value.into()),
                Key::Head(head) => (slot, false, head.into()),
            }
        };
        let mut shared: HashMap<Filing, usize> = HashMap::new();
        let candidates: Vec<Vec<Filing>> = rules
            .into_iter()
            .map(|keys| keys.into_iter().map(filing).collect())
            .collect();
        for filing in candidates.iter().flatten() {
            *shared.entry(filing.clone()).or_default() += 1;
        }
        let mut slots: Vec<SlotIndex> = Vec::new();
        let mut unfiled = Vec::new();
        let mut exact: HashMap<(usize, Box<str>), Vec<u32>> = HashMap::new();
        let mut heads: HashMap<(usize, Box<str>), Vec<u32>> = HashMap::new();
        for (position, filings) in candidates.into_iter().enumerate() {
            let position = u32::try_from(position).expect("fewer than 2^32 rules");
            // The key fewest rules share; then an exact one, then the longest (the fewest
            // values start with it), then the first claim.
            let best = filings
                .into_iter()
                .enumerate()
                .min_by_key(|(order, f)| (shared[f], !f.1, std::cmp::Reverse(f.2.len()), *order));
            let Some((_, (slot, is_exact, key))) = best else {
                unfiled.push(position);
                continue;
            };
            if !slots.iter().any(|s| s.slot == slot) {
                slots.push(SlotIndex {
                    slot,
                    ..SlotIndex::default()
                });
            }
            let map = if is_exact { &mut exact } else { &mut heads };
            map.entry((slot, key)).or_default().push(position);
        }
        for ((slot, key), positions) in exact {
            if let Some(index) = slots.iter_mut().find(|s| s.slot == slot) {
                index.exact.insert(key, positions.into());
            }
        }
        for ((slot, key), positions) in heads {
            if let Some(index) = slots.iter_mut().find(|s| s.slot == slot) {
                index.heads.insert(key, positions.into());
            }
        }
        for index in &mut slots {
            let mut lengths: Vec<usize> = index.heads.keys().map(|k| k.len()).collect();
            lengths.sort_unstable();
            lengths.dedup();
            index.head_lengths = lengths.into();
        }
        slots.sort_by_key(|s| s.slot);
        Self {
            slots: slots.into(),
            unfiled: unfiled.into(),
        }
    }

    /// The positions of the rules the token's claims (`views`, by slot) can match, ascending
    /// and each once.
    pub(crate) fn candidates(&self, views: &[ClaimView<'_>]) -> Vec<u32> {
        let mut found: Vec<u32> = self.unfiled.to_vec();
        for index in self.slots.iter() {
            match &views[index.slot] {
                ClaimView::Never => {}
                ClaimView::Str(s) => index.collect(s, &mut found),
                ClaimView::Int(text) => index.collect(text.as_str(), &mut found),
                ClaimView::Bool(b) => {
                    index.collect_exact(if *b { "true" } else { "false" }, &mut found)
                }
                ClaimView::Array(items) => {
                    for item in items.iter() {
                        match ClaimView::of(item) {
                            ClaimView::Str(s) => index.collect(s, &mut found),
                            ClaimView::Int(text) => index.collect(text.as_str(), &mut found),
                            ClaimView::Bool(b) => {
                                index.collect_exact(if b { "true" } else { "false" }, &mut found)
                            }
                            // Nested arrays, objects, null and fractions match no pattern.
                            ClaimView::Never | ClaimView::Array(_) => {}
                        }
                    }
                }
            }
        }
        found.sort_unstable();
        found.dedup();
        found
    }
}

impl SlotIndex {
    fn collect_exact(&self, value: &str, found: &mut Vec<u32>) {
        if let Some(positions) = self.exact.get(value) {
            found.extend_from_slice(positions);
        }
    }

    fn collect(&self, value: &str, found: &mut Vec<u32>) {
        self.collect_exact(value, found);
        for &length in self.head_lengths.iter() {
            // A head cut inside a character is no head of this value.
            let Some(prefix) = value.get(..length) else {
                if length > value.len() {
                    break;
                }
                continue;
            };
            if let Some(positions) = self.heads.get(prefix) {
                found.extend_from_slice(positions);
            }
        }
    }
}
