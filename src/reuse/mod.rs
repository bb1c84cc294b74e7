//! Reuse keys, the input-file hash cache and the result store.
//! (Being built; see issue 3.)
