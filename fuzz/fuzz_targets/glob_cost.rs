//! The claim matcher's worst case: time per byte of claim stays flat whatever the pattern.
//!
//! Input: `pattern NUL value-seed`. The pattern is cut to the longest a policy may hold
//! (`registry_domain::limits::MAX_PATTERN_CHARS`), the value is the seed repeated to 64 KiB (an
//! identity token is far smaller), and the best of three timed matches must stay under
//! `NANOS_PER_BYTE` per byte of value. Matching a piece at every position, as the matcher once
//! did, costs pattern length × value length: ~1 µs per byte for a 512-character `?a?a…b`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use registry_domain::limits::MAX_PATTERN_CHARS;
use registry_domain::policy::ClaimPattern;
use std::time::Instant;

const VALUE_BYTES: usize = 64 * 1024;
/// Linear matching costs ~10–20 ns per byte here, sanitizers included; quadratic, 50× that.
const NANOS_PER_BYTE: u128 = 250;

fuzz_target!(|data: &[u8]| {
    let (pattern, seed) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b"a"[..]),
    };
    let pattern: String = String::from_utf8_lossy(pattern)
        .chars()
        .take(MAX_PATTERN_CHARS)
        .collect();
    let seed = String::from_utf8_lossy(if seed.is_empty() { b"a" } else { seed });
    let mut value = String::with_capacity(VALUE_BYTES + seed.len());
    while value.len() < VALUE_BYTES {
        value.push_str(&seed);
    }
    let compiled = ClaimPattern::new(&pattern);
    let best = (0..3)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(compiled.matches_str(std::hint::black_box(&value)));
            started.elapsed().as_nanos()
        })
        .min()
        .unwrap_or_default();
    let per_byte = best / value.len() as u128;
    assert!(
        per_byte <= NANOS_PER_BYTE,
        "{per_byte} ns per byte for pattern {pattern:?} on a value of {seed:?} repeated"
    );
});
