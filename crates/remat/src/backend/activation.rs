//! Activation ops with direct backward rules (see `ops::activation`).

use burn_backend::{Backend, ops::ActivationOps};

use crate::backend::Autodiff;
use crate::checkpoint::strategy::CheckpointStrategy;

impl<B: Backend, C: CheckpointStrategy> ActivationOps<Self> for Autodiff<B, C> {}
