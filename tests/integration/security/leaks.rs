//! Second security review (DECISIONS §17): placeholder, filled by its finding's tests.
