//! The plan language: source text, the spanned tree, decoding, validation and the validated model.
//!
//! Owns everything from a plan file's bytes to [`model::Plan`]; knows nothing
//! of running steps or money. Entry point: [`load`].

pub mod decode;
pub mod diagnostic;
pub mod load;
pub mod model;
pub mod node;
pub mod raw;
pub mod schema;
pub mod source;
pub mod validate;

pub use load::{LoadFailure, LoadOptions, LoadedPlan, find_root, load};
