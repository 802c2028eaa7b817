//! Transactions (reading several tensors at once) go to the inner backend whole.
//!
//! A transaction is the caller's way of asking for one synchronisation for many reads.
//! Burn's default implementation reads each tensor through this backend's
//! `float_into_data`/`int_into_data`/... in turn: on a device backend that is one sync per
//! tensor. Instead the float tensors are unwrapped to their inner tensors (a read needs no
//! node) and the whole transaction is handed to `B::tr_execute`, once. Int, bool and
//! quantized tensors are the inner backend's already.

use core::future::Future;

use burn_backend::ops::{TransactionOps, TransactionPrimitive, TransactionPrimitiveData};
use burn_backend::{Backend, ExecutionError};

use crate::backend::Autodiff;
use crate::checkpoint::strategy::CheckpointStrategy;
use crate::tensor::AutodiffTensor;

impl<B: Backend, C: CheckpointStrategy> TransactionOps<Self> for Autodiff<B, C> {
    fn tr_execute(
        transaction: TransactionPrimitive<Self>,
    ) -> impl Future<Output = Result<TransactionPrimitiveData, ExecutionError>> + Send {
        // The order of the reads across kinds (`execute_async`'s bookkeeping) stays with the
        // caller's transaction: the result lists each kind in the order it was given.
        let inner = TransactionPrimitive::<B>::new(
            transaction
                .read_floats
                .into_iter()
                .map(AutodiffTensor::into_primitive)
                .collect(),
            transaction.read_qfloats,
            transaction.read_ints,
            transaction.read_bools,
        );
        B::tr_execute(inner)
    }
}
