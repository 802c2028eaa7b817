//! A counting wrapper over an inner backend: every op delegates to `B` and counts its calls
//! by name, per thread. Tests run `remat::Autodiff<Counting<Flex>>` to count exactly how
//! many times each inner op ran (forward, replays and backward), independently of remat's
//! own statistics.
//!
//! Generated once from the `burn-backend` 0.22 trait definitions, then kept by hand: each
//! method is `count(name); B::name(args)`. Methods whose types wrap the backend (pool-with-
//! indices results, quantization parameters, ...) are written out below the generated ones
//! or left to Burn's defaults.
//!
//! Transactions are counted (`tr_execute`) and handed to `B` whole. The distributed hooks
//! ([`DistributedOps`]) do not reach `B` (Flex has no collectives): they are recorded, in
//! order, as [`Event`]s ([`events`]), and simulate [`REPLICAS`] identical devices whose
//! collectives sum (see [`Event`] for what each one does to its tensor).
#![allow(dead_code, clippy::too_many_arguments)]

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::ops::Range;

use burn_backend::distributed::{
    CollectiveTensor, DistributedOps, DistributedParamId, DistributedParams, ReduceOperation,
    TensorRef,
};
use burn_backend::ops::*;
use burn_backend::quantization::QuantizationParametersPrimitive;
use burn_backend::tensor::{BoolTensor, Device, FloatTensor, IntTensor, QuantizedTensor};
use burn_backend::{
    Backend, BackendTypes, DTypeUsageSet, DeviceId, Distribution, ExecutionError, Scalar,
    TensorData,
};
use burn_std::{
    BoolDType, DType, FloatDType, IndexingUpdateOp, IntDType, PadMode, QuantScheme, Shape, Slice,
};

thread_local! {
    static CALLS: RefCell<BTreeMap<&'static str, u64>> = const { RefCell::new(BTreeMap::new()) };
    static TOTAL: RefCell<u64> = const { RefCell::new(0) };
    static EVENTS: RefCell<Vec<(Event, u64)>> = const { RefCell::new(Vec::new()) };
    static OBSERVER: Cell<Option<fn(&'static str)>> = const { Cell::new(None) };
    static SYNCS: Cell<u64> = const { Cell::new(0) };
}

/// `Backend::sync` calls on this thread since the last [`reset_calls`] (not counted as inner
/// ops).
pub fn syncs() -> u64 {
    SYNCS.with(Cell::get)
}

fn count(op: &'static str) {
    CALLS.with(|c| *c.borrow_mut().entry(op).or_insert(0) += 1);
    TOTAL.with(|t| *t.borrow_mut() += 1);
    if let Some(observer) = OBSERVER.with(Cell::get) {
        observer(op);
    }
}

/// Calls `observer` with the name of every inner op counted on this thread from now on,
/// before the op runs (`None` stops it). A test samples `remat::stats()` there, e.g. at
/// each backward step's first inner call (tests/memory_trace.rs).
pub fn observe(observer: Option<fn(&'static str)>) {
    OBSERVER.with(|o| o.set(observer));
}

/// How many identical devices the simulated collectives reduce over.
pub const REPLICAS: usize = 2;

/// One call of a distributed hook on the inner backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `register_sync_parameters`, with the parameter ids in the order given.
    Register(Vec<DistributedParamId>),
    /// `submit_gradient_sync` for this parameter; the gradient is summed over the replicas
    /// in place (multiplied by [`REPLICAS`]), as the sync server's all-reduce would.
    SubmitGradient(DistributedParamId),
    /// `submit_sync_collective`.
    SubmitSyncCollective,
    /// `all_reduce`; a sum over the replicas (times [`REPLICAS`]), a mean is the identity.
    AllReduce,
    /// `sync_collective`.
    SyncCollective,
}

fn record(event: Event) {
    let at = TOTAL.with(|t| *t.borrow());
    EVENTS.with(|e| e.borrow_mut().push((event, at)));
}

/// The distributed hooks called on this thread since the last [`reset_calls`], in order.
pub fn events() -> Vec<Event> {
    EVENTS.with(|e| e.borrow().iter().map(|(event, _)| event.clone()).collect())
}

/// Like [`events`], each with the number of counted inner calls made before it on this
/// thread (so a test can see whether other work ran between two hooks).
pub fn timed_events() -> Vec<(Event, u64)> {
    EVENTS.with(|e| e.borrow().clone())
}

/// Calls of inner op `op` on this thread since the last [`reset_calls`].
pub fn calls(op: &str) -> u64 {
    CALLS.with(|c| c.borrow().get(op).copied().unwrap_or(0))
}

/// Resets this thread's call counts.
pub fn reset_calls() {
    CALLS.with(|c| c.borrow_mut().clear());
    TOTAL.with(|t| *t.borrow_mut() = 0);
    EVENTS.with(|e| e.borrow_mut().clear());
    SYNCS.with(|s| s.set(0));
}

/// The counting wrapper (see the module docs).
#[derive(Clone, Copy, Debug, Default)]
pub struct Counting<B>(PhantomData<B>);

impl<B: Backend> BackendTypes for Counting<B> {
    type Device = B::Device;
    type FloatTensorPrimitive = B::FloatTensorPrimitive;
    type IntTensorPrimitive = B::IntTensorPrimitive;
    type BoolTensorPrimitive = B::BoolTensorPrimitive;
    type QuantizedTensorPrimitive = B::QuantizedTensorPrimitive;
    type GraphPrimitive = burn_backend::GraphUnsupported;
}

impl<B: Backend> Backend for Counting<B> {
    fn name(device: &Self::Device) -> String {
        format!("counting<{}>", B::name(device))
    }

    fn seed(device: &Self::Device, seed: u64) {
        B::seed(device, seed)
    }

    fn flush(device: &Self::Device) -> Result<(), ExecutionError> {
        B::flush(device)
    }

    fn sync(device: &Self::Device) -> Result<(), ExecutionError> {
        SYNCS.with(|s| s.set(s.get() + 1));
        B::sync(device)
    }

    fn dtype_usage(device: &Self::Device, dtype: DType) -> DTypeUsageSet {
        B::dtype_usage(device, dtype)
    }

    fn device_count(type_id: u16) -> usize {
        B::device_count(type_id)
    }
}

impl<B: Backend> TransactionOps<Self> for Counting<B> {
    fn tr_execute(
        transaction: TransactionPrimitive<Self>,
    ) -> impl Future<Output = Result<TransactionPrimitiveData, ExecutionError>> + Send {
        count("tr_execute");
        B::tr_execute(TransactionPrimitive::new(
            transaction.read_floats,
            transaction.read_qfloats,
            transaction.read_ints,
            transaction.read_bools,
        ))
    }
}

fn replicated_sum<B: Backend>(tensor: FloatTensor<B>) -> FloatTensor<B> {
    B::float_mul_scalar(tensor, Scalar::from(REPLICAS as f64))
}

impl<B: Backend> DistributedOps<Self> for Counting<B> {
    fn start_communication_server(
        _devices: &[Device<Self>],
        _config: burn_backend::distributed::DistributedConfig,
    ) {
    }

    fn close_communication_server(_device: &Device<Self>) {}

    fn register_sync_parameters(_device: &Device<Self>, params: Vec<DistributedParams>) {
        record(Event::Register(
            params.into_iter().map(|p| p.param_id).collect(),
        ));
    }

    fn submit_sync_collective(_device: &Device<Self>) {
        record(Event::SubmitSyncCollective);
    }

    fn submit_gradient_sync(tensor: TensorRef<Self>, params: DistributedParams) {
        record(Event::SubmitGradient(params.param_id));
        // SAFETY: the caller hands a live gradient that nothing else touches until the
        // backward pass ends (the contract of `submit_gradient_sync`).
        unsafe {
            let grad = (*tensor.0).clone();
            *tensor.0 = replicated_sum::<B>(grad);
        }
    }

    fn all_reduce(
        tensor: FloatTensor<Self>,
        op: ReduceOperation,
        _device_ids: Vec<DeviceId>,
    ) -> CollectiveTensor<Self> {
        record(Event::AllReduce);
        CollectiveTensor::new(match op {
            ReduceOperation::Sum => replicated_sum::<B>(tensor),
            ReduceOperation::Mean => tensor,
        })
    }

    fn sync_collective(_device: &Device<Self>) {
        record(Event::SyncCollective);
    }
}

impl<B: Backend> FloatTensorOps<Self> for Counting<B> {
    fn float_from_data(data: TensorData, device: &Device<Self>) -> FloatTensor<Self> {
        count("float_from_data");
        B::float_from_data(data, device)
    }

    fn float_random(
        shape: Shape,
        distribution: Distribution,
        device: &Device<Self>,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        count("float_random");
        B::float_random(shape, distribution, device, dtype)
    }

    fn float_zeros(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        count("float_zeros");
        B::float_zeros(shape, device, dtype)
    }

    fn float_ones(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        count("float_ones");
        B::float_ones(shape, device, dtype)
    }

    fn float_full(
        shape: Shape,
        fill_value: Scalar,
        device: &Device<Self>,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        count("float_full");
        B::float_full(shape, fill_value, device, dtype)
    }

    fn float_into_data(
        tensor: FloatTensor<Self>,
    ) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send {
        count("float_into_data");
        B::float_into_data(tensor)
    }

    fn float_to_device(tensor: FloatTensor<Self>, device: &Device<Self>) -> FloatTensor<Self> {
        count("float_to_device");
        B::float_to_device(tensor, device)
    }

    fn float_into_int(tensor: FloatTensor<Self>, out_dtype: IntDType) -> IntTensor<Self> {
        count("float_into_int");
        B::float_into_int(tensor, out_dtype)
    }

    fn float_empty(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        count("float_empty");
        B::float_empty(shape, device, dtype)
    }

    fn float_repeat_dim(tensor: FloatTensor<Self>, dim: usize, times: usize) -> FloatTensor<Self> {
        count("float_repeat_dim");
        B::float_repeat_dim(tensor, dim, times)
    }

    fn float_add(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_add");
        B::float_add(lhs, rhs)
    }

    fn float_add_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        count("float_add_scalar");
        B::float_add_scalar(lhs, rhs)
    }

    fn float_clamp_min(tensor: FloatTensor<Self>, min: Scalar) -> FloatTensor<Self> {
        count("float_clamp_min");
        B::float_clamp_min(tensor, min)
    }

    fn float_clamp_max(tensor: FloatTensor<Self>, max: Scalar) -> FloatTensor<Self> {
        count("float_clamp_max");
        B::float_clamp_max(tensor, max)
    }

    fn float_clamp(tensor: FloatTensor<Self>, min: Scalar, max: Scalar) -> FloatTensor<Self> {
        count("float_clamp");
        B::float_clamp(tensor, min, max)
    }

    fn float_sub(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_sub");
        B::float_sub(lhs, rhs)
    }

    fn float_sub_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        count("float_sub_scalar");
        B::float_sub_scalar(lhs, rhs)
    }

    fn float_mul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_mul");
        B::float_mul(lhs, rhs)
    }

    fn float_mul_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        count("float_mul_scalar");
        B::float_mul_scalar(lhs, rhs)
    }

    fn float_div(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_div");
        B::float_div(lhs, rhs)
    }

    fn float_div_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        count("float_div_scalar");
        B::float_div_scalar(lhs, rhs)
    }

    fn float_remainder(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_remainder");
        B::float_remainder(lhs, rhs)
    }

    fn float_remainder_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        count("float_remainder_scalar");
        B::float_remainder_scalar(lhs, rhs)
    }

    fn float_matmul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_matmul");
        B::float_matmul(lhs, rhs)
    }

    fn float_cross(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        dim: usize,
    ) -> FloatTensor<Self> {
        count("float_cross");
        B::float_cross(lhs, rhs, dim)
    }

    fn float_neg(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_neg");
        B::float_neg(tensor)
    }

    fn float_recip(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_recip");
        B::float_recip(tensor)
    }

    fn float_transpose(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_transpose");
        B::float_transpose(tensor)
    }

    fn float_swap_dims(tensor: FloatTensor<Self>, dim1: usize, dim2: usize) -> FloatTensor<Self> {
        count("float_swap_dims");
        B::float_swap_dims(tensor, dim1, dim2)
    }

    fn float_permute(tensor: FloatTensor<Self>, axes: &[usize]) -> FloatTensor<Self> {
        count("float_permute");
        B::float_permute(tensor, axes)
    }

    fn float_flip(tensor: FloatTensor<Self>, axes: &[usize]) -> FloatTensor<Self> {
        count("float_flip");
        B::float_flip(tensor, axes)
    }

    fn float_reshape(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> {
        count("float_reshape");
        B::float_reshape(tensor, shape)
    }

    fn float_gather(
        dim: usize,
        tensor: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        count("float_gather");
        B::float_gather(dim, tensor, indices)
    }

    fn float_scatter(
        dim: usize,
        tensor: FloatTensor<Self>,
        indices: IntTensor<Self>,
        value: FloatTensor<Self>,
        update: IndexingUpdateOp,
    ) -> FloatTensor<Self> {
        count("float_scatter");
        B::float_scatter(dim, tensor, indices, value, update)
    }

    fn float_scatter_nd(
        data: FloatTensor<Self>,
        indices: IntTensor<Self>,
        values: FloatTensor<Self>,
        reduction: IndexingUpdateOp,
    ) -> FloatTensor<Self> {
        count("float_scatter_nd");
        B::float_scatter_nd(data, indices, values, reduction)
    }

    fn float_gather_nd(data: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self> {
        count("float_gather_nd");
        B::float_gather_nd(data, indices)
    }

    fn float_select(
        tensor: FloatTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        count("float_select");
        B::float_select(tensor, dim, indices)
    }

    fn float_select_assign(
        tensor: FloatTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
        value: FloatTensor<Self>,
        update: IndexingUpdateOp,
    ) -> FloatTensor<Self> {
        count("float_select_assign");
        B::float_select_assign(tensor, dim, indices, value, update)
    }

    fn float_slice(tensor: FloatTensor<Self>, slices: &[Slice]) -> FloatTensor<Self> {
        count("float_slice");
        B::float_slice(tensor, slices)
    }

    fn float_slice_assign(
        tensor: FloatTensor<Self>,
        slices: &[Slice],
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        count("float_slice_assign");
        B::float_slice_assign(tensor, slices, value)
    }

    fn float_mask_where(
        tensor: FloatTensor<Self>,
        mask: BoolTensor<Self>,
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        count("float_mask_where");
        B::float_mask_where(tensor, mask, value)
    }

    fn float_mask_fill(
        tensor: FloatTensor<Self>,
        mask: BoolTensor<Self>,
        value: Scalar,
    ) -> FloatTensor<Self> {
        count("float_mask_fill");
        B::float_mask_fill(tensor, mask, value)
    }

    fn float_mask_select(
        tensor: FloatTensor<Self>,
        mask: BoolTensor<Self>,
    ) -> impl Future<Output = FloatTensor<Self>> + 'static + Send {
        count("float_mask_select");
        B::float_mask_select(tensor, mask)
    }

    fn float_equal(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("float_equal");
        B::float_equal(lhs, rhs, out_dtype)
    }

    fn float_not_equal(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("float_not_equal");
        B::float_not_equal(lhs, rhs, out_dtype)
    }

    fn float_equal_elem(
        lhs: FloatTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("float_equal_elem");
        B::float_equal_elem(lhs, rhs, out_dtype)
    }

    fn float_not_equal_elem(
        lhs: FloatTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("float_not_equal_elem");
        B::float_not_equal_elem(lhs, rhs, out_dtype)
    }

    fn float_greater(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("float_greater");
        B::float_greater(lhs, rhs, out_dtype)
    }

    fn float_greater_elem(
        lhs: FloatTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("float_greater_elem");
        B::float_greater_elem(lhs, rhs, out_dtype)
    }

    fn float_greater_equal(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("float_greater_equal");
        B::float_greater_equal(lhs, rhs, out_dtype)
    }

    fn float_greater_equal_elem(
        lhs: FloatTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("float_greater_equal_elem");
        B::float_greater_equal_elem(lhs, rhs, out_dtype)
    }

    fn float_lower(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("float_lower");
        B::float_lower(lhs, rhs, out_dtype)
    }

    fn float_lower_elem(
        lhs: FloatTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("float_lower_elem");
        B::float_lower_elem(lhs, rhs, out_dtype)
    }

    fn float_lower_equal(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("float_lower_equal");
        B::float_lower_equal(lhs, rhs, out_dtype)
    }

    fn float_lower_equal_elem(
        lhs: FloatTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("float_lower_equal_elem");
        B::float_lower_equal_elem(lhs, rhs, out_dtype)
    }

    fn float_sum(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_sum");
        B::float_sum(tensor)
    }

    fn float_sum_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        count("float_sum_dim");
        B::float_sum_dim(tensor, dim)
    }

    fn float_sum_dims(tensor: FloatTensor<Self>, dims: &[usize]) -> FloatTensor<Self> {
        count("float_sum_dims");
        B::float_sum_dims(tensor, dims)
    }

    fn float_prod(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_prod");
        B::float_prod(tensor)
    }

    fn float_prod_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        count("float_prod_dim");
        B::float_prod_dim(tensor, dim)
    }

    fn float_mean(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_mean");
        B::float_mean(tensor)
    }

    fn float_mean_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        count("float_mean_dim");
        B::float_mean_dim(tensor, dim)
    }

    fn float_cumsum(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        count("float_cumsum");
        B::float_cumsum(tensor, dim)
    }

    fn float_cumprod(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        count("float_cumprod");
        B::float_cumprod(tensor, dim)
    }

    fn float_cummin(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        count("float_cummin");
        B::float_cummin(tensor, dim)
    }

    fn float_cummax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        count("float_cummax");
        B::float_cummax(tensor, dim)
    }

    fn float_cast(tensor: FloatTensor<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        count("float_cast");
        B::float_cast(tensor, dtype)
    }

    fn float_exp(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_exp");
        B::float_exp(tensor)
    }

    fn float_log(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_log");
        B::float_log(tensor)
    }

    fn float_log1p(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_log1p");
        B::float_log1p(tensor)
    }

    fn float_powf(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_powf");
        B::float_powf(lhs, rhs)
    }

    fn float_powi(lhs: FloatTensor<Self>, rhs: IntTensor<Self>) -> FloatTensor<Self> {
        count("float_powi");
        B::float_powi(lhs, rhs)
    }

    fn float_powi_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        count("float_powi_scalar");
        B::float_powi_scalar(lhs, rhs)
    }

    fn float_powi_scalar_impl(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        count("float_powi_scalar_impl");
        B::float_powi_scalar_impl(lhs, rhs)
    }

    fn float_powf_scalar(tensor: FloatTensor<Self>, value: Scalar) -> FloatTensor<Self> {
        count("float_powf_scalar");
        B::float_powf_scalar(tensor, value)
    }

    fn float_powf_scalar_impl(tensor: FloatTensor<Self>, value: Scalar) -> FloatTensor<Self> {
        count("float_powf_scalar_impl");
        B::float_powf_scalar_impl(tensor, value)
    }

    fn float_sqrt(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_sqrt");
        B::float_sqrt(tensor)
    }

    fn float_hypot(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_hypot");
        B::float_hypot(lhs, rhs)
    }

    fn float_abs(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_abs");
        B::float_abs(tensor)
    }

    fn float_cos(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_cos");
        B::float_cos(tensor)
    }

    fn float_sin(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_sin");
        B::float_sin(tensor)
    }

    fn float_tan(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_tan");
        B::float_tan(tensor)
    }

    fn float_cosh(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_cosh");
        B::float_cosh(tensor)
    }

    fn float_sinh(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_sinh");
        B::float_sinh(tensor)
    }

    fn float_tanh(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_tanh");
        B::float_tanh(tensor)
    }

    fn float_acos(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_acos");
        B::float_acos(tensor)
    }

    fn float_acosh(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_acosh");
        B::float_acosh(tensor)
    }

    fn float_asin(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_asin");
        B::float_asin(tensor)
    }

    fn float_asinh(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_asinh");
        B::float_asinh(tensor)
    }

    fn float_atan(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_atan");
        B::float_atan(tensor)
    }

    fn float_atanh(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_atanh");
        B::float_atanh(tensor)
    }

    fn float_atan2(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_atan2");
        B::float_atan2(lhs, rhs)
    }

    fn float_round(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_round");
        B::float_round(tensor)
    }

    fn float_floor(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_floor");
        B::float_floor(tensor)
    }

    fn float_ceil(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_ceil");
        B::float_ceil(tensor)
    }

    fn float_trunc(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_trunc");
        B::float_trunc(tensor)
    }

    fn float_erf(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_erf");
        B::float_erf(tensor)
    }

    fn float_cat(tensors: Vec<FloatTensor<Self>>, dim: usize) -> FloatTensor<Self> {
        count("float_cat");
        B::float_cat(tensors, dim)
    }

    fn float_argmax(tensor: FloatTensor<Self>, dim: usize, out_dtype: IntDType) -> IntTensor<Self> {
        count("float_argmax");
        B::float_argmax(tensor, dim, out_dtype)
    }

    fn float_argtopk(
        tensor: FloatTensor<Self>,
        dim: usize,
        k: usize,
        out_dtype: IntDType,
    ) -> IntTensor<Self> {
        count("float_argtopk");
        B::float_argtopk(tensor, dim, k, out_dtype)
    }

    fn float_topk(tensor: FloatTensor<Self>, dim: usize, k: usize) -> FloatTensor<Self> {
        count("float_topk");
        B::float_topk(tensor, dim, k)
    }

    fn float_topk_with_indices(
        tensor: FloatTensor<Self>,
        dim: usize,
        k: usize,
        out_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        count("float_topk_with_indices");
        B::float_topk_with_indices(tensor, dim, k, out_dtype)
    }

    fn float_argmin(tensor: FloatTensor<Self>, dim: usize, out_dtype: IntDType) -> IntTensor<Self> {
        count("float_argmin");
        B::float_argmin(tensor, dim, out_dtype)
    }

    fn float_max(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_max");
        B::float_max(tensor)
    }

    fn float_max_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        count("float_max_dim");
        B::float_max_dim(tensor, dim)
    }

    fn float_max_dim_with_indices(
        tensor: FloatTensor<Self>,
        dim: usize,
        indices_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        count("float_max_dim_with_indices");
        B::float_max_dim_with_indices(tensor, dim, indices_dtype)
    }

    fn float_min(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_min");
        B::float_min(tensor)
    }

    fn float_min_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        count("float_min_dim");
        B::float_min_dim(tensor, dim)
    }

    fn float_min_dim_with_indices(
        tensor: FloatTensor<Self>,
        dim: usize,
        indices_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        count("float_min_dim_with_indices");
        B::float_min_dim_with_indices(tensor, dim, indices_dtype)
    }

    fn float_max_abs(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_max_abs");
        B::float_max_abs(tensor)
    }

    fn float_max_abs_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        count("float_max_abs_dim");
        B::float_max_abs_dim(tensor, dim)
    }

    fn float_any(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> {
        count("float_any");
        B::float_any(tensor, out_dtype)
    }

    fn float_any_dim(
        tensor: FloatTensor<Self>,
        dim: usize,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("float_any_dim");
        B::float_any_dim(tensor, dim, out_dtype)
    }

    fn float_all(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> {
        count("float_all");
        B::float_all(tensor, out_dtype)
    }

    fn float_all_dim(
        tensor: FloatTensor<Self>,
        dim: usize,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("float_all_dim");
        B::float_all_dim(tensor, dim, out_dtype)
    }

    fn float_sign(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("float_sign");
        B::float_sign(tensor)
    }

    fn float_expand(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> {
        count("float_expand");
        B::float_expand(tensor, shape)
    }

    fn float_sort(tensor: FloatTensor<Self>, dim: usize, descending: bool) -> FloatTensor<Self> {
        count("float_sort");
        B::float_sort(tensor, dim, descending)
    }

    fn float_sort_with_indices(
        tensor: FloatTensor<Self>,
        dim: usize,
        descending: bool,
        indices_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        count("float_sort_with_indices");
        B::float_sort_with_indices(tensor, dim, descending, indices_dtype)
    }

    fn float_argsort(
        tensor: FloatTensor<Self>,
        dim: usize,
        descending: bool,
        out_dtype: IntDType,
    ) -> IntTensor<Self> {
        count("float_argsort");
        B::float_argsort(tensor, dim, descending, out_dtype)
    }

    fn float_grid_sample_2d(
        tensor: FloatTensor<Self>,
        grid: FloatTensor<Self>,
        options: GridSampleOptions,
    ) -> FloatTensor<Self> {
        count("float_grid_sample_2d");
        B::float_grid_sample_2d(tensor, grid, options)
    }

    fn float_unfold(
        tensor: FloatTensor<Self>,
        dim: usize,
        size: usize,
        step: usize,
    ) -> FloatTensor<Self> {
        count("float_unfold");
        B::float_unfold(tensor, dim, size, step)
    }

    fn float_is_nan(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> {
        count("float_is_nan");
        B::float_is_nan(tensor, out_dtype)
    }

    fn float_is_inf(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> {
        count("float_is_inf");
        B::float_is_inf(tensor, out_dtype)
    }

    fn float_pad(
        tensor: FloatTensor<Self>,
        padding: &[(usize, usize)],
        mode: PadMode,
    ) -> FloatTensor<Self> {
        count("float_pad");
        B::float_pad(tensor, padding, mode)
    }
}

impl<B: Backend> IntTensorOps<Self> for Counting<B> {
    fn int_empty(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> {
        count("int_empty");
        B::int_empty(shape, device, dtype)
    }

    fn int_into_data(
        tensor: IntTensor<Self>,
    ) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send {
        count("int_into_data");
        B::int_into_data(tensor)
    }

    fn int_from_data(data: TensorData, device: &Device<Self>) -> IntTensor<Self> {
        count("int_from_data");
        B::int_from_data(data, device)
    }

    fn int_to_device(tensor: IntTensor<Self>, device: &Device<Self>) -> IntTensor<Self> {
        count("int_to_device");
        B::int_to_device(tensor, device)
    }

    fn int_reshape(tensor: IntTensor<Self>, shape: Shape) -> IntTensor<Self> {
        count("int_reshape");
        B::int_reshape(tensor, shape)
    }

    fn int_slice(tensor: IntTensor<Self>, slices: &[Slice]) -> IntTensor<Self> {
        count("int_slice");
        B::int_slice(tensor, slices)
    }

    fn int_slice_assign(
        tensor: IntTensor<Self>,
        slices: &[Slice],
        value: IntTensor<Self>,
    ) -> IntTensor<Self> {
        count("int_slice_assign");
        B::int_slice_assign(tensor, slices, value)
    }

    fn int_into_float(tensor: IntTensor<Self>, out_dtype: FloatDType) -> FloatTensor<Self> {
        count("int_into_float");
        B::int_into_float(tensor, out_dtype)
    }

    fn int_mask_where(
        tensor: IntTensor<Self>,
        mask: BoolTensor<Self>,
        value: IntTensor<Self>,
    ) -> IntTensor<Self> {
        count("int_mask_where");
        B::int_mask_where(tensor, mask, value)
    }

    fn int_mask_fill(
        tensor: IntTensor<Self>,
        mask: BoolTensor<Self>,
        value: Scalar,
    ) -> IntTensor<Self> {
        count("int_mask_fill");
        B::int_mask_fill(tensor, mask, value)
    }

    fn int_mask_select(
        tensor: IntTensor<Self>,
        mask: BoolTensor<Self>,
    ) -> impl Future<Output = IntTensor<Self>> + 'static + Send {
        count("int_mask_select");
        B::int_mask_select(tensor, mask)
    }

    fn int_gather(
        dim: usize,
        tensor: IntTensor<Self>,
        indices: IntTensor<Self>,
    ) -> IntTensor<Self> {
        count("int_gather");
        B::int_gather(dim, tensor, indices)
    }

    fn int_scatter(
        dim: usize,
        tensor: IntTensor<Self>,
        indices: IntTensor<Self>,
        value: IntTensor<Self>,
        update: IndexingUpdateOp,
    ) -> IntTensor<Self> {
        count("int_scatter");
        B::int_scatter(dim, tensor, indices, value, update)
    }

    fn int_scatter_nd(
        data: IntTensor<Self>,
        indices: IntTensor<Self>,
        values: IntTensor<Self>,
        reduction: IndexingUpdateOp,
    ) -> IntTensor<Self> {
        count("int_scatter_nd");
        B::int_scatter_nd(data, indices, values, reduction)
    }

    fn int_gather_nd(data: IntTensor<Self>, indices: IntTensor<Self>) -> IntTensor<Self> {
        count("int_gather_nd");
        B::int_gather_nd(data, indices)
    }

    fn int_select(
        tensor: IntTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
    ) -> IntTensor<Self> {
        count("int_select");
        B::int_select(tensor, dim, indices)
    }

    fn int_select_assign(
        tensor: IntTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
        value: IntTensor<Self>,
        update: IndexingUpdateOp,
    ) -> IntTensor<Self> {
        count("int_select_assign");
        B::int_select_assign(tensor, dim, indices, value, update)
    }

    fn int_repeat_dim(tensor: IntTensor<Self>, dim: usize, times: usize) -> IntTensor<Self> {
        count("int_repeat_dim");
        B::int_repeat_dim(tensor, dim, times)
    }

    fn int_cat(tensors: Vec<IntTensor<Self>>, dim: usize) -> IntTensor<Self> {
        count("int_cat");
        B::int_cat(tensors, dim)
    }

    fn int_equal(
        lhs: IntTensor<Self>,
        rhs: IntTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("int_equal");
        B::int_equal(lhs, rhs, out_dtype)
    }

    fn int_not_equal(
        lhs: IntTensor<Self>,
        rhs: IntTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("int_not_equal");
        B::int_not_equal(lhs, rhs, out_dtype)
    }

    fn int_equal_elem(lhs: IntTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> {
        count("int_equal_elem");
        B::int_equal_elem(lhs, rhs, out_dtype)
    }

    fn int_not_equal_elem(
        lhs: IntTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("int_not_equal_elem");
        B::int_not_equal_elem(lhs, rhs, out_dtype)
    }

    fn int_greater(
        lhs: IntTensor<Self>,
        rhs: IntTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("int_greater");
        B::int_greater(lhs, rhs, out_dtype)
    }

    fn int_greater_elem(
        lhs: IntTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("int_greater_elem");
        B::int_greater_elem(lhs, rhs, out_dtype)
    }

    fn int_greater_equal(
        lhs: IntTensor<Self>,
        rhs: IntTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("int_greater_equal");
        B::int_greater_equal(lhs, rhs, out_dtype)
    }

    fn int_greater_equal_elem(
        lhs: IntTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("int_greater_equal_elem");
        B::int_greater_equal_elem(lhs, rhs, out_dtype)
    }

    fn int_lower(
        lhs: IntTensor<Self>,
        rhs: IntTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("int_lower");
        B::int_lower(lhs, rhs, out_dtype)
    }

    fn int_lower_elem(lhs: IntTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> {
        count("int_lower_elem");
        B::int_lower_elem(lhs, rhs, out_dtype)
    }

    fn int_lower_equal(
        lhs: IntTensor<Self>,
        rhs: IntTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("int_lower_equal");
        B::int_lower_equal(lhs, rhs, out_dtype)
    }

    fn int_lower_equal_elem(
        lhs: IntTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        count("int_lower_equal_elem");
        B::int_lower_equal_elem(lhs, rhs, out_dtype)
    }

    fn int_add(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        count("int_add");
        B::int_add(lhs, rhs)
    }

    fn int_add_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        count("int_add_scalar");
        B::int_add_scalar(lhs, rhs)
    }

    fn int_square(tensor: IntTensor<Self>) -> IntTensor<Self> {
        count("int_square");
        B::int_square(tensor)
    }

    fn int_powi(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        count("int_powi");
        B::int_powi(lhs, rhs)
    }

    fn int_powi_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        count("int_powi_scalar");
        B::int_powi_scalar(lhs, rhs)
    }

    fn int_powi_scalar_impl(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        count("int_powi_scalar_impl");
        B::int_powi_scalar_impl(lhs, rhs)
    }

    fn int_clamp_min(tensor: IntTensor<Self>, min: Scalar) -> IntTensor<Self> {
        count("int_clamp_min");
        B::int_clamp_min(tensor, min)
    }

    fn int_clamp_max(tensor: IntTensor<Self>, max: Scalar) -> IntTensor<Self> {
        count("int_clamp_max");
        B::int_clamp_max(tensor, max)
    }

    fn int_clamp(tensor: IntTensor<Self>, min: Scalar, max: Scalar) -> IntTensor<Self> {
        count("int_clamp");
        B::int_clamp(tensor, min, max)
    }

    fn int_sub(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        count("int_sub");
        B::int_sub(lhs, rhs)
    }

    fn int_sub_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        count("int_sub_scalar");
        B::int_sub_scalar(lhs, rhs)
    }

    fn int_mul(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        count("int_mul");
        B::int_mul(lhs, rhs)
    }

    fn int_mul_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        count("int_mul_scalar");
        B::int_mul_scalar(lhs, rhs)
    }

    fn int_div(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        count("int_div");
        B::int_div(lhs, rhs)
    }

    fn int_div_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        count("int_div_scalar");
        B::int_div_scalar(lhs, rhs)
    }

    fn int_remainder(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        count("int_remainder");
        B::int_remainder(lhs, rhs)
    }

    fn int_remainder_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        count("int_remainder_scalar");
        B::int_remainder_scalar(lhs, rhs)
    }

    fn int_matmul(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        count("int_matmul");
        B::int_matmul(lhs, rhs)
    }

    fn int_neg(tensor: IntTensor<Self>) -> IntTensor<Self> {
        count("int_neg");
        B::int_neg(tensor)
    }

    fn int_zeros(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> {
        count("int_zeros");
        B::int_zeros(shape, device, dtype)
    }

    fn int_ones(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> {
        count("int_ones");
        B::int_ones(shape, device, dtype)
    }

    fn int_full(
        shape: Shape,
        fill_value: Scalar,
        device: &Device<Self>,
        dtype: IntDType,
    ) -> IntTensor<Self> {
        count("int_full");
        B::int_full(shape, fill_value, device, dtype)
    }

    fn int_sum(tensor: IntTensor<Self>) -> IntTensor<Self> {
        count("int_sum");
        B::int_sum(tensor)
    }

    fn int_sum_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        count("int_sum_dim");
        B::int_sum_dim(tensor, dim)
    }

    fn int_prod(tensor: IntTensor<Self>) -> IntTensor<Self> {
        count("int_prod");
        B::int_prod(tensor)
    }

    fn int_prod_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        count("int_prod_dim");
        B::int_prod_dim(tensor, dim)
    }

    fn int_mean(tensor: IntTensor<Self>) -> IntTensor<Self> {
        count("int_mean");
        B::int_mean(tensor)
    }

    fn int_mean_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        count("int_mean_dim");
        B::int_mean_dim(tensor, dim)
    }

    fn int_cumsum(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        count("int_cumsum");
        B::int_cumsum(tensor, dim)
    }

    fn int_cumprod(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        count("int_cumprod");
        B::int_cumprod(tensor, dim)
    }

    fn int_cummin(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        count("int_cummin");
        B::int_cummin(tensor, dim)
    }

    fn int_cummax(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        count("int_cummax");
        B::int_cummax(tensor, dim)
    }

    fn int_argmax(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        count("int_argmax");
        B::int_argmax(tensor, dim)
    }

    fn int_argtopk(tensor: IntTensor<Self>, dim: usize, k: usize) -> IntTensor<Self> {
        count("int_argtopk");
        B::int_argtopk(tensor, dim, k)
    }

    fn int_topk(tensor: IntTensor<Self>, dim: usize, k: usize) -> IntTensor<Self> {
        count("int_topk");
        B::int_topk(tensor, dim, k)
    }

    fn int_topk_with_indices(
        tensor: IntTensor<Self>,
        dim: usize,
        k: usize,
    ) -> (IntTensor<Self>, IntTensor<Self>) {
        count("int_topk_with_indices");
        B::int_topk_with_indices(tensor, dim, k)
    }

    fn int_argmin(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        count("int_argmin");
        B::int_argmin(tensor, dim)
    }

    fn int_max(tensor: IntTensor<Self>) -> IntTensor<Self> {
        count("int_max");
        B::int_max(tensor)
    }

    fn int_max_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        count("int_max_dim");
        B::int_max_dim(tensor, dim)
    }

    fn int_max_dim_with_indices(
        tensor: IntTensor<Self>,
        dim: usize,
    ) -> (IntTensor<Self>, IntTensor<Self>) {
        count("int_max_dim_with_indices");
        B::int_max_dim_with_indices(tensor, dim)
    }

    fn int_max_abs(tensor: IntTensor<Self>) -> IntTensor<Self> {
        count("int_max_abs");
        B::int_max_abs(tensor)
    }

    fn int_max_abs_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        count("int_max_abs_dim");
        B::int_max_abs_dim(tensor, dim)
    }

    fn int_min(tensor: IntTensor<Self>) -> IntTensor<Self> {
        count("int_min");
        B::int_min(tensor)
    }

    fn int_min_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        count("int_min_dim");
        B::int_min_dim(tensor, dim)
    }

    fn int_min_dim_with_indices(
        tensor: IntTensor<Self>,
        dim: usize,
    ) -> (IntTensor<Self>, IntTensor<Self>) {
        count("int_min_dim_with_indices");
        B::int_min_dim_with_indices(tensor, dim)
    }

    fn int_abs(tensor: IntTensor<Self>) -> IntTensor<Self> {
        count("int_abs");
        B::int_abs(tensor)
    }

    fn int_transpose(tensor: IntTensor<Self>) -> IntTensor<Self> {
        count("int_transpose");
        B::int_transpose(tensor)
    }

    fn int_swap_dims(tensor: IntTensor<Self>, dim1: usize, dim2: usize) -> IntTensor<Self> {
        count("int_swap_dims");
        B::int_swap_dims(tensor, dim1, dim2)
    }

    fn int_permute(tensor: IntTensor<Self>, axes: &[usize]) -> IntTensor<Self> {
        count("int_permute");
        B::int_permute(tensor, axes)
    }

    fn int_flip(tensor: IntTensor<Self>, axes: &[usize]) -> IntTensor<Self> {
        count("int_flip");
        B::int_flip(tensor, axes)
    }

    fn int_random(
        shape: Shape,
        distribution: Distribution,
        device: &Device<Self>,
        dtype: IntDType,
    ) -> IntTensor<Self> {
        count("int_random");
        B::int_random(shape, distribution, device, dtype)
    }

    fn int_arange_step(
        range: Range<i64>,
        step: usize,
        device: &Device<Self>,
        dtype: IntDType,
    ) -> IntTensor<Self> {
        count("int_arange_step");
        B::int_arange_step(range, step, device, dtype)
    }

    fn int_arange(range: Range<i64>, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> {
        count("int_arange");
        B::int_arange(range, device, dtype)
    }

    fn int_any(tensor: IntTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> {
        count("int_any");
        B::int_any(tensor, out_dtype)
    }

    fn int_any_dim(tensor: IntTensor<Self>, dim: usize, out_dtype: BoolDType) -> BoolTensor<Self> {
        count("int_any_dim");
        B::int_any_dim(tensor, dim, out_dtype)
    }

    fn int_all(tensor: IntTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> {
        count("int_all");
        B::int_all(tensor, out_dtype)
    }

    fn int_all_dim(tensor: IntTensor<Self>, dim: usize, out_dtype: BoolDType) -> BoolTensor<Self> {
        count("int_all_dim");
        B::int_all_dim(tensor, dim, out_dtype)
    }

    fn int_sign(tensor: IntTensor<Self>) -> IntTensor<Self> {
        count("int_sign");
        B::int_sign(tensor)
    }

    fn int_expand(tensor: IntTensor<Self>, shape: Shape) -> IntTensor<Self> {
        count("int_expand");
        B::int_expand(tensor, shape)
    }

    fn int_sort(tensor: IntTensor<Self>, dim: usize, descending: bool) -> IntTensor<Self> {
        count("int_sort");
        B::int_sort(tensor, dim, descending)
    }

    fn int_sort_with_indices(
        tensor: IntTensor<Self>,
        dim: usize,
        descending: bool,
    ) -> (IntTensor<Self>, IntTensor<Self>) {
        count("int_sort_with_indices");
        B::int_sort_with_indices(tensor, dim, descending)
    }

    fn int_argsort(tensor: IntTensor<Self>, dim: usize, descending: bool) -> IntTensor<Self> {
        count("int_argsort");
        B::int_argsort(tensor, dim, descending)
    }

    fn bitwise_and(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        count("bitwise_and");
        B::bitwise_and(lhs, rhs)
    }

    fn bitwise_and_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        count("bitwise_and_scalar");
        B::bitwise_and_scalar(lhs, rhs)
    }

    fn bitwise_or(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        count("bitwise_or");
        B::bitwise_or(lhs, rhs)
    }

    fn bitwise_or_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        count("bitwise_or_scalar");
        B::bitwise_or_scalar(lhs, rhs)
    }

    fn bitwise_xor(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        count("bitwise_xor");
        B::bitwise_xor(lhs, rhs)
    }

    fn bitwise_xor_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        count("bitwise_xor_scalar");
        B::bitwise_xor_scalar(lhs, rhs)
    }

    fn bitwise_not(tensor: IntTensor<Self>) -> IntTensor<Self> {
        count("bitwise_not");
        B::bitwise_not(tensor)
    }

    fn bitwise_left_shift(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        count("bitwise_left_shift");
        B::bitwise_left_shift(lhs, rhs)
    }

    fn bitwise_left_shift_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        count("bitwise_left_shift_scalar");
        B::bitwise_left_shift_scalar(lhs, rhs)
    }

    fn bitwise_right_shift(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        count("bitwise_right_shift");
        B::bitwise_right_shift(lhs, rhs)
    }

    fn bitwise_right_shift_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        count("bitwise_right_shift_scalar");
        B::bitwise_right_shift_scalar(lhs, rhs)
    }

    fn int_cast(tensor: IntTensor<Self>, dtype: IntDType) -> IntTensor<Self> {
        count("int_cast");
        B::int_cast(tensor, dtype)
    }

    fn int_unfold(
        tensor: IntTensor<Self>,
        dim: usize,
        size: usize,
        step: usize,
    ) -> IntTensor<Self> {
        count("int_unfold");
        B::int_unfold(tensor, dim, size, step)
    }

    fn int_pad(
        tensor: IntTensor<Self>,
        padding: &[(usize, usize)],
        mode: PadMode,
    ) -> IntTensor<Self> {
        count("int_pad");
        B::int_pad(tensor, padding, mode)
    }
}

impl<B: Backend> BoolTensorOps<Self> for Counting<B> {
    fn bool_empty(shape: Shape, device: &Device<Self>, dtype: BoolDType) -> BoolTensor<Self> {
        count("bool_empty");
        B::bool_empty(shape, device, dtype)
    }

    fn bool_zeros(shape: Shape, device: &Device<Self>, dtype: BoolDType) -> BoolTensor<Self> {
        count("bool_zeros");
        B::bool_zeros(shape, device, dtype)
    }

    fn bool_ones(shape: Shape, device: &Device<Self>, dtype: BoolDType) -> BoolTensor<Self> {
        count("bool_ones");
        B::bool_ones(shape, device, dtype)
    }

    fn bool_into_data(
        tensor: BoolTensor<Self>,
    ) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send {
        count("bool_into_data");
        B::bool_into_data(tensor)
    }

    fn bool_from_data(data: TensorData, device: &Device<Self>) -> BoolTensor<Self> {
        count("bool_from_data");
        B::bool_from_data(data, device)
    }

    fn bool_into_int(tensor: BoolTensor<Self>, out_dtype: IntDType) -> IntTensor<Self> {
        count("bool_into_int");
        B::bool_into_int(tensor, out_dtype)
    }

    fn bool_into_float(tensor: BoolTensor<Self>, out_dtype: FloatDType) -> FloatTensor<Self> {
        count("bool_into_float");
        B::bool_into_float(tensor, out_dtype)
    }

    fn bool_to_device(tensor: BoolTensor<Self>, device: &Device<Self>) -> BoolTensor<Self> {
        count("bool_to_device");
        B::bool_to_device(tensor, device)
    }

    fn bool_reshape(tensor: BoolTensor<Self>, shape: Shape) -> BoolTensor<Self> {
        count("bool_reshape");
        B::bool_reshape(tensor, shape)
    }

    fn bool_slice(tensor: BoolTensor<Self>, slices: &[Slice]) -> BoolTensor<Self> {
        count("bool_slice");
        B::bool_slice(tensor, slices)
    }

    fn bool_slice_assign(
        tensor: BoolTensor<Self>,
        slices: &[Slice],
        value: BoolTensor<Self>,
    ) -> BoolTensor<Self> {
        count("bool_slice_assign");
        B::bool_slice_assign(tensor, slices, value)
    }

    fn bool_mask_where(
        tensor: BoolTensor<Self>,
        mask: BoolTensor<Self>,
        value: BoolTensor<Self>,
    ) -> BoolTensor<Self> {
        count("bool_mask_where");
        B::bool_mask_where(tensor, mask, value)
    }

    fn bool_mask_fill(
        tensor: BoolTensor<Self>,
        mask: BoolTensor<Self>,
        value: Scalar,
    ) -> BoolTensor<Self> {
        count("bool_mask_fill");
        B::bool_mask_fill(tensor, mask, value)
    }

    fn bool_mask_select(
        tensor: BoolTensor<Self>,
        mask: BoolTensor<Self>,
    ) -> impl Future<Output = BoolTensor<Self>> + 'static + Send {
        count("bool_mask_select");
        B::bool_mask_select(tensor, mask)
    }

    fn bool_gather(
        dim: usize,
        tensor: BoolTensor<Self>,
        indices: IntTensor<Self>,
    ) -> BoolTensor<Self> {
        count("bool_gather");
        B::bool_gather(dim, tensor, indices)
    }

    fn bool_scatter_or(
        dim: usize,
        tensor: BoolTensor<Self>,
        indices: IntTensor<Self>,
        value: BoolTensor<Self>,
    ) -> BoolTensor<Self> {
        count("bool_scatter_or");
        B::bool_scatter_or(dim, tensor, indices, value)
    }

    fn bool_select(
        tensor: BoolTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
    ) -> BoolTensor<Self> {
        count("bool_select");
        B::bool_select(tensor, dim, indices)
    }

    fn bool_select_or(
        tensor: BoolTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
        value: BoolTensor<Self>,
    ) -> BoolTensor<Self> {
        count("bool_select_or");
        B::bool_select_or(tensor, dim, indices, value)
    }

    fn bool_repeat_dim(tensor: BoolTensor<Self>, dim: usize, times: usize) -> BoolTensor<Self> {
        count("bool_repeat_dim");
        B::bool_repeat_dim(tensor, dim, times)
    }

    fn bool_cat(tensors: Vec<BoolTensor<Self>>, dim: usize) -> BoolTensor<Self> {
        count("bool_cat");
        B::bool_cat(tensors, dim)
    }

    fn bool_equal(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self> {
        count("bool_equal");
        B::bool_equal(lhs, rhs)
    }

    fn bool_not_equal(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self> {
        count("bool_not_equal");
        B::bool_not_equal(lhs, rhs)
    }

    fn bool_equal_elem(lhs: BoolTensor<Self>, rhs: Scalar) -> BoolTensor<Self> {
        count("bool_equal_elem");
        B::bool_equal_elem(lhs, rhs)
    }

    fn bool_not_equal_elem(lhs: BoolTensor<Self>, rhs: Scalar) -> BoolTensor<Self> {
        count("bool_not_equal_elem");
        B::bool_not_equal_elem(lhs, rhs)
    }

    fn bool_not(tensor: BoolTensor<Self>) -> BoolTensor<Self> {
        count("bool_not");
        B::bool_not(tensor)
    }

    fn bool_and(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self> {
        count("bool_and");
        B::bool_and(lhs, rhs)
    }

    fn bool_or(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self> {
        count("bool_or");
        B::bool_or(lhs, rhs)
    }

    fn bool_xor(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self> {
        count("bool_xor");
        B::bool_xor(lhs, rhs)
    }

    fn bool_transpose(tensor: BoolTensor<Self>) -> BoolTensor<Self> {
        count("bool_transpose");
        B::bool_transpose(tensor)
    }

    fn bool_swap_dims(tensor: BoolTensor<Self>, dim1: usize, dim2: usize) -> BoolTensor<Self> {
        count("bool_swap_dims");
        B::bool_swap_dims(tensor, dim1, dim2)
    }

    fn bool_permute(tensor: BoolTensor<Self>, axes: &[usize]) -> BoolTensor<Self> {
        count("bool_permute");
        B::bool_permute(tensor, axes)
    }

    fn bool_flip(tensor: BoolTensor<Self>, axes: &[usize]) -> BoolTensor<Self> {
        count("bool_flip");
        B::bool_flip(tensor, axes)
    }

    fn bool_any(tensor: BoolTensor<Self>) -> BoolTensor<Self> {
        count("bool_any");
        B::bool_any(tensor)
    }

    fn bool_any_dim(tensor: BoolTensor<Self>, dim: usize) -> BoolTensor<Self> {
        count("bool_any_dim");
        B::bool_any_dim(tensor, dim)
    }

    fn bool_all(tensor: BoolTensor<Self>) -> BoolTensor<Self> {
        count("bool_all");
        B::bool_all(tensor)
    }

    fn bool_all_dim(tensor: BoolTensor<Self>, dim: usize) -> BoolTensor<Self> {
        count("bool_all_dim");
        B::bool_all_dim(tensor, dim)
    }

    fn bool_argwhere(
        tensor: BoolTensor<Self>,
        out_dtype: IntDType,
    ) -> impl Future<Output = IntTensor<Self>> + 'static + Send {
        count("bool_argwhere");
        B::bool_argwhere(tensor, out_dtype)
    }

    fn bool_expand(tensor: BoolTensor<Self>, shape: Shape) -> BoolTensor<Self> {
        count("bool_expand");
        B::bool_expand(tensor, shape)
    }

    fn bool_unfold(
        tensor: BoolTensor<Self>,
        dim: usize,
        size: usize,
        step: usize,
    ) -> BoolTensor<Self> {
        count("bool_unfold");
        B::bool_unfold(tensor, dim, size, step)
    }
}

impl<B: Backend> QTensorOps<Self> for Counting<B> {
    fn quantize(
        tensor: FloatTensor<Self>,
        scheme: &QuantScheme,
        qparams: QuantizationParametersPrimitive<Self>,
    ) -> QuantizedTensor<Self> {
        count("quantize");
        let qparams = QuantizationParametersPrimitive {
            scales: qparams.scales,
            global: qparams.global,
        };
        B::quantize(tensor, scheme, qparams)
    }

    fn q_from_data(data: TensorData, device: &Device<Self>) -> QuantizedTensor<Self> {
        count("q_from_data");
        B::q_from_data(data, device)
    }

    fn dequantize(tensor: QuantizedTensor<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        count("dequantize");
        B::dequantize(tensor, dtype)
    }

    fn q_to_device(tensor: QuantizedTensor<Self>, device: &Device<Self>) -> QuantizedTensor<Self> {
        count("q_to_device");
        B::q_to_device(tensor, device)
    }

    fn q_reshape(tensor: QuantizedTensor<Self>, shape: Shape) -> QuantizedTensor<Self> {
        count("q_reshape");
        B::q_reshape(tensor, shape)
    }

    fn q_into_data(
        tensor: QuantizedTensor<Self>,
    ) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send {
        count("q_into_data");
        B::q_into_data(tensor)
    }

    fn q_swap_dims(
        tensor: QuantizedTensor<Self>,
        dim1: usize,
        dim2: usize,
    ) -> QuantizedTensor<Self> {
        count("q_swap_dims");
        B::q_swap_dims(tensor, dim1, dim2)
    }

    fn q_permute(tensor: QuantizedTensor<Self>, axes: &[usize]) -> QuantizedTensor<Self> {
        count("q_permute");
        B::q_permute(tensor, axes)
    }

    fn q_flip(tensor: QuantizedTensor<Self>, axes: &[usize]) -> QuantizedTensor<Self> {
        count("q_flip");
        B::q_flip(tensor, axes)
    }
}

impl<B: Backend> ModuleOps<Self> for Counting<B> {
    fn deform_conv2d_backward(
        x: FloatTensor<Self>,
        offset: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        mask: Option<FloatTensor<Self>>,
        bias: Option<FloatTensor<Self>>,
        output_grad: FloatTensor<Self>,
        options: DeformConvOptions<2>,
    ) -> DeformConv2dBackward<Self> {
        count("deform_conv2d_backward");
        let g = B::deform_conv2d_backward(x, offset, weight, mask, bias, output_grad, options);
        DeformConv2dBackward::new(
            g.x_grad,
            g.offset_grad,
            g.weight_grad,
            g.mask_grad,
            g.bias_grad,
        )
    }

    fn max_pool2d_with_indices(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
        indices_dtype: IntDType,
    ) -> MaxPool2dWithIndices<Self> {
        count("max_pool2d_with_indices");
        let out = B::max_pool2d_with_indices(
            x,
            kernel_size,
            stride,
            padding,
            dilation,
            ceil_mode,
            indices_dtype,
        );
        MaxPool2dWithIndices::new(out.output, out.indices)
    }

    fn max_pool2d_with_indices_backward(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
        output_grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> MaxPool2dBackward<Self> {
        count("max_pool2d_with_indices_backward");
        let out = B::max_pool2d_with_indices_backward(
            x,
            kernel_size,
            stride,
            padding,
            dilation,
            ceil_mode,
            output_grad,
            indices,
        );
        MaxPool2dBackward::new(out.x_grad)
    }

    fn batch_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        variance: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        count("batch_norm");
        B::batch_norm(x, gamma, beta, mean, variance, epsilon)
    }

    fn embedding(weights: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self> {
        count("embedding");
        B::embedding(weights, indices)
    }

    fn embedding_backward(
        weights: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        count("embedding_backward");
        B::embedding_backward(weights, output_grad, indices)
    }

    fn linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        count("linear");
        B::linear(x, weight, bias)
    }

    fn linear_x_backward(
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        count("linear_x_backward");
        B::linear_x_backward(weight, output_grad)
    }

    fn linear_weight_backward(
        x: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        count("linear_weight_backward");
        B::linear_weight_backward(x, output_grad)
    }

    fn linear_bias_backward(output_grad: FloatTensor<Self>) -> FloatTensor<Self> {
        count("linear_bias_backward");
        B::linear_bias_backward(output_grad)
    }

    fn conv1d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvOptions<1>,
    ) -> FloatTensor<Self> {
        count("conv1d");
        B::conv1d(x, weight, bias, options)
    }

    fn conv1d_x_backward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        options: ConvOptions<1>,
    ) -> FloatTensor<Self> {
        count("conv1d_x_backward");
        B::conv1d_x_backward(x, weight, output_grad, options)
    }

    fn conv1d_weight_backward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        options: ConvOptions<1>,
    ) -> FloatTensor<Self> {
        count("conv1d_weight_backward");
        B::conv1d_weight_backward(x, weight, output_grad, options)
    }

    fn conv1d_bias_backward(
        x: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        count("conv1d_bias_backward");
        B::conv1d_bias_backward(x, bias, output_grad)
    }

    fn conv2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self> {
        count("conv2d");
        B::conv2d(x, weight, bias, options)
    }

    fn conv2d_x_backward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self> {
        count("conv2d_x_backward");
        B::conv2d_x_backward(x, weight, output_grad, options)
    }

    fn conv2d_weight_backward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self> {
        count("conv2d_weight_backward");
        B::conv2d_weight_backward(x, weight, output_grad, options)
    }

    fn conv2d_bias_backward(
        x: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        count("conv2d_bias_backward");
        B::conv2d_bias_backward(x, bias, output_grad)
    }

    fn deform_conv2d(
        x: FloatTensor<Self>,
        offset: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        mask: Option<FloatTensor<Self>>,
        bias: Option<FloatTensor<Self>>,
        options: DeformConvOptions<2>,
    ) -> FloatTensor<Self> {
        count("deform_conv2d");
        B::deform_conv2d(x, offset, weight, mask, bias, options)
    }

    fn conv3d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvOptions<3>,
    ) -> FloatTensor<Self> {
        count("conv3d");
        B::conv3d(x, weight, bias, options)
    }

    fn conv3d_x_backward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        options: ConvOptions<3>,
    ) -> FloatTensor<Self> {
        count("conv3d_x_backward");
        B::conv3d_x_backward(x, weight, output_grad, options)
    }

    fn conv3d_weight_backward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        options: ConvOptions<3>,
    ) -> FloatTensor<Self> {
        count("conv3d_weight_backward");
        B::conv3d_weight_backward(x, weight, output_grad, options)
    }

    fn conv3d_bias_backward(
        x: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        count("conv3d_bias_backward");
        B::conv3d_bias_backward(x, bias, output_grad)
    }

    fn conv_transpose1d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvTransposeOptions<1>,
    ) -> FloatTensor<Self> {
        count("conv_transpose1d");
        B::conv_transpose1d(x, weight, bias, options)
    }

    fn conv_transpose1d_x_backward(
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        options: ConvTransposeOptions<1>,
    ) -> FloatTensor<Self> {
        count("conv_transpose1d_x_backward");
        B::conv_transpose1d_x_backward(weight, output_grad, options)
    }

    fn conv_transpose1d_weight_backward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        options: ConvTransposeOptions<1>,
    ) -> FloatTensor<Self> {
        count("conv_transpose1d_weight_backward");
        B::conv_transpose1d_weight_backward(x, weight, output_grad, options)
    }

    fn conv_transpose1d_bias_backward(
        x: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        count("conv_transpose1d_bias_backward");
        B::conv_transpose1d_bias_backward(x, bias, output_grad)
    }

    fn conv_transpose2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvTransposeOptions<2>,
    ) -> FloatTensor<Self> {
        count("conv_transpose2d");
        B::conv_transpose2d(x, weight, bias, options)
    }

    fn conv_transpose2d_x_backward(
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        options: ConvTransposeOptions<2>,
    ) -> FloatTensor<Self> {
        count("conv_transpose2d_x_backward");
        B::conv_transpose2d_x_backward(weight, output_grad, options)
    }

    fn conv_transpose2d_weight_backward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        options: ConvTransposeOptions<2>,
    ) -> FloatTensor<Self> {
        count("conv_transpose2d_weight_backward");
        B::conv_transpose2d_weight_backward(x, weight, output_grad, options)
    }

    fn conv_transpose2d_bias_backward(
        x: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        count("conv_transpose2d_bias_backward");
        B::conv_transpose2d_bias_backward(x, bias, output_grad)
    }

    fn conv_transpose3d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvTransposeOptions<3>,
    ) -> FloatTensor<Self> {
        count("conv_transpose3d");
        B::conv_transpose3d(x, weight, bias, options)
    }

    fn conv_transpose3d_x_backward(
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        options: ConvTransposeOptions<3>,
    ) -> FloatTensor<Self> {
        count("conv_transpose3d_x_backward");
        B::conv_transpose3d_x_backward(weight, output_grad, options)
    }

    fn conv_transpose3d_weight_backward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        options: ConvTransposeOptions<3>,
    ) -> FloatTensor<Self> {
        count("conv_transpose3d_weight_backward");
        B::conv_transpose3d_weight_backward(x, weight, output_grad, options)
    }

    fn conv_transpose3d_bias_backward(
        x: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        count("conv_transpose3d_bias_backward");
        B::conv_transpose3d_bias_backward(x, bias, output_grad)
    }

    fn unfold4d(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        options: UnfoldOptions,
    ) -> FloatTensor<Self> {
        count("unfold4d");
        B::unfold4d(x, kernel_size, options)
    }

    fn fold4d(
        x: FloatTensor<Self>,
        output_size: [usize; 2],
        kernel_size: [usize; 2],
        options: UnfoldOptions,
    ) -> FloatTensor<Self> {
        count("fold4d");
        B::fold4d(x, output_size, kernel_size, options)
    }

    fn avg_pool1d(
        x: FloatTensor<Self>,
        kernel_size: usize,
        stride: usize,
        padding: usize,
        count_include_pad: bool,
        ceil_mode: bool,
    ) -> FloatTensor<Self> {
        count("avg_pool1d");
        B::avg_pool1d(
            x,
            kernel_size,
            stride,
            padding,
            count_include_pad,
            ceil_mode,
        )
    }

    fn avg_pool1d_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        kernel_size: usize,
        stride: usize,
        padding: usize,
        count_include_pad: bool,
        ceil_mode: bool,
    ) -> FloatTensor<Self> {
        count("avg_pool1d_backward");
        B::avg_pool1d_backward(
            x,
            grad,
            kernel_size,
            stride,
            padding,
            count_include_pad,
            ceil_mode,
        )
    }

    fn avg_pool2d(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        count_include_pad: bool,
        ceil_mode: bool,
    ) -> FloatTensor<Self> {
        count("avg_pool2d");
        B::avg_pool2d(
            x,
            kernel_size,
            stride,
            padding,
            count_include_pad,
            ceil_mode,
        )
    }

    fn avg_pool2d_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        count_include_pad: bool,
        ceil_mode: bool,
    ) -> FloatTensor<Self> {
        count("avg_pool2d_backward");
        B::avg_pool2d_backward(
            x,
            grad,
            kernel_size,
            stride,
            padding,
            count_include_pad,
            ceil_mode,
        )
    }

    fn adaptive_avg_pool2d(x: FloatTensor<Self>, output_size: [usize; 2]) -> FloatTensor<Self> {
        count("adaptive_avg_pool2d");
        B::adaptive_avg_pool2d(x, output_size)
    }

    fn adaptive_avg_pool2d_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        count("adaptive_avg_pool2d_backward");
        B::adaptive_avg_pool2d_backward(x, grad)
    }

    fn adaptive_avg_pool3d(x: FloatTensor<Self>, output_size: [usize; 3]) -> FloatTensor<Self> {
        count("adaptive_avg_pool3d");
        B::adaptive_avg_pool3d(x, output_size)
    }

    fn adaptive_avg_pool3d_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        count("adaptive_avg_pool3d_backward");
        B::adaptive_avg_pool3d_backward(x, grad)
    }

    fn adaptive_avg_pool1d(x: FloatTensor<Self>, output_size: usize) -> FloatTensor<Self> {
        count("adaptive_avg_pool1d");
        B::adaptive_avg_pool1d(x, output_size)
    }

    fn adaptive_avg_pool1d_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        count("adaptive_avg_pool1d_backward");
        B::adaptive_avg_pool1d_backward(x, grad)
    }

    fn max_pool1d(
        x: FloatTensor<Self>,
        kernel_size: usize,
        stride: usize,
        padding: usize,
        dilation: usize,
        ceil_mode: bool,
    ) -> FloatTensor<Self> {
        count("max_pool1d");
        B::max_pool1d(x, kernel_size, stride, padding, dilation, ceil_mode)
    }

    fn max_pool2d(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
    ) -> FloatTensor<Self> {
        count("max_pool2d");
        B::max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode)
    }

    fn interpolate(
        x: FloatTensor<Self>,
        output_size: [usize; 2],
        options: InterpolateOptions,
    ) -> FloatTensor<Self> {
        count("interpolate");
        B::interpolate(x, output_size, options)
    }

    fn interpolate_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        output_size: [usize; 2],
        options: InterpolateOptions,
    ) -> FloatTensor<Self> {
        count("interpolate_backward");
        B::interpolate_backward(x, grad, output_size, options)
    }

    fn attention(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        mask: Option<BoolTensor<Self>>,
        attn_bias: Option<FloatTensor<Self>>,
        options: AttentionModuleOptions,
    ) -> FloatTensor<Self> {
        count("attention");
        B::attention(query, key, value, mask, attn_bias, options)
    }

    fn layer_norm(
        tensor: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        count("layer_norm");
        B::layer_norm(tensor, gamma, beta, epsilon)
    }

    fn ctc_loss(
        log_probs: FloatTensor<Self>,
        targets: IntTensor<Self>,
        input_lengths: IntTensor<Self>,
        target_lengths: IntTensor<Self>,
        blank: usize,
    ) -> FloatTensor<Self> {
        count("ctc_loss");
        B::ctc_loss(log_probs, targets, input_lengths, target_lengths, blank)
    }

    fn has_ctc_loss_backward() -> bool {
        count("has_ctc_loss_backward");
        B::has_ctc_loss_backward()
    }

    fn ctc_loss_backward(
        log_probs: FloatTensor<Self>,
        targets: IntTensor<Self>,
        input_lengths: IntTensor<Self>,
        target_lengths: IntTensor<Self>,
        grad_loss: FloatTensor<Self>,
        blank: usize,
    ) -> FloatTensor<Self> {
        count("ctc_loss_backward");
        B::ctc_loss_backward(
            log_probs,
            targets,
            input_lengths,
            target_lengths,
            grad_loss,
            blank,
        )
    }
}

impl<B: Backend> ActivationOps<Self> for Counting<B> {
    fn leaky_relu(tensor: FloatTensor<Self>, negative_slope: Scalar) -> FloatTensor<Self> {
        count("leaky_relu");
        B::leaky_relu(tensor, negative_slope)
    }

    fn relu(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("relu");
        B::relu(tensor)
    }

    fn relu_backward(output: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        count("relu_backward");
        B::relu_backward(output, grad)
    }

    fn gelu(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("gelu");
        B::gelu(tensor)
    }

    fn prelu(tensor: FloatTensor<Self>, alpha: FloatTensor<Self>) -> FloatTensor<Self> {
        count("prelu");
        B::prelu(tensor, alpha)
    }

    fn gelu_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        count("gelu_backward");
        B::gelu_backward(x, grad)
    }

    fn sigmoid(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("sigmoid");
        B::sigmoid(tensor)
    }

    fn sigmoid_backward(output: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        count("sigmoid_backward");
        B::sigmoid_backward(output, grad)
    }

    fn hard_sigmoid(tensor: FloatTensor<Self>, alpha: Scalar, beta: Scalar) -> FloatTensor<Self> {
        count("hard_sigmoid");
        B::hard_sigmoid(tensor, alpha, beta)
    }

    fn log_sigmoid(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        count("log_sigmoid");
        B::log_sigmoid(tensor)
    }

    fn softmax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        count("softmax");
        B::softmax(tensor, dim)
    }

    fn log_softmax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        count("log_softmax");
        B::log_softmax(tensor, dim)
    }

    fn softmin(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        count("softmin");
        B::softmin(tensor, dim)
    }

    fn log_sigmoid_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        count("log_sigmoid_backward");
        B::log_sigmoid_backward(x, grad)
    }
}
