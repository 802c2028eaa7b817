//! The gradients container returned by backward.
//!
//! Defined with the graph (`graph/grads.rs`, the bottom layer: the backward traversal fills
//! it); re-exported here at the path Burn's users know.

pub use crate::graph::grads::{GradKey, Gradients};
