//! Transactions (reading several tensors at once): Burn's default implementation, which
//! reads each tensor through the float/int/bool ops of this backend.

use burn_backend::{Backend, ops::TransactionOps};

use crate::backend::Autodiff;
use crate::checkpoint::strategy::CheckpointStrategy;

impl<B: Backend, C: CheckpointStrategy> TransactionOps<Self> for Autodiff<B, C> {}
