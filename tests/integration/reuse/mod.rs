//! Reuse keys: unchanged work is restored from the store, changed work
//! runs again.

mod steps;
