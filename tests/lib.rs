//! Integration test support (see `integration/`).
