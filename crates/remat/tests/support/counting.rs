//! A counting wrapper over an inner backend: every op delegates to `B` and counts its calls
//! by name, per thread. Tests run `remat::Autodiff<Counting<Flex>>` to count exactly how
//! many times each inner op ran (forward, replays and backward), independently of remat's
//! own statistics.
//!
//! Each method is `count(name); B::name(args)`, written as its signature in a
//! `remat::delegate_to_inner!` block (`count: count;`), which generates the body (the same
//! macro generates the engine's int and bool delegation). The int and bool ops come from the
//! engine's own lists (`remat::int_ops_delegated!`, `remat::bool_ops_delegated!`), so a
//! method Burn adds is delegated in both places at once. Methods whose types wrap the
//! backend (pool-with-indices results, quantization parameters, ...) are written out beside
//! them, or left to Burn's defaults.
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

use remat::delegate_to_inner;

use burn_backend::distributed::{
    CollectiveTensor, DistributedOps, DistributedParamId, DistributedParams, ReduceOperation,
    TensorRef,
};
use burn_backend::ops::*;
use burn_backend::quantization::QuantizationParametersPrimitive;
use burn_backend::tensor::{BoolTensor, Device, FloatTensor, IntTensor, QuantizedTensor};
use burn_backend::{
    AutodiffBackend, Backend, BackendTypes, DTypeUsageSet, DeviceId, Distribution, ExecutionError,
    Scalar, TensorData,
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
    remat::delegate_to_inner! {
        count: count;
        fn float_from_data(data: TensorData, device: &Device<Self>) -> FloatTensor<Self>;
        fn float_random(shape: Shape, distribution: Distribution, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self>;
        fn float_zeros(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self>;
        fn float_ones(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self>;
        fn float_full(shape: Shape, fill_value: Scalar, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self>;
        fn float_into_data(tensor: FloatTensor<Self>) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send;
        fn float_to_device(tensor: FloatTensor<Self>, device: &Device<Self>) -> FloatTensor<Self>;
        fn float_into_int(tensor: FloatTensor<Self>, out_dtype: IntDType) -> IntTensor<Self>;
        fn float_empty(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self>;
        fn float_repeat_dim(tensor: FloatTensor<Self>, dim: usize, times: usize) -> FloatTensor<Self>;
        fn float_add(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_add_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self>;
        fn float_clamp_min(tensor: FloatTensor<Self>, min: Scalar) -> FloatTensor<Self>;
        fn float_clamp_max(tensor: FloatTensor<Self>, max: Scalar) -> FloatTensor<Self>;
        fn float_clamp(tensor: FloatTensor<Self>, min: Scalar, max: Scalar) -> FloatTensor<Self>;
        fn float_sub(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_sub_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self>;
        fn float_mul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_mul_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self>;
        fn float_div(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_div_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self>;
        fn float_remainder(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_remainder_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self>;
        fn float_matmul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_cross(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_neg(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_recip(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_transpose(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_swap_dims(tensor: FloatTensor<Self>, dim1: usize, dim2: usize) -> FloatTensor<Self>;
        fn float_permute(tensor: FloatTensor<Self>, axes: &[usize]) -> FloatTensor<Self>;
        fn float_flip(tensor: FloatTensor<Self>, axes: &[usize]) -> FloatTensor<Self>;
        fn float_reshape(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self>;
        fn float_gather(dim: usize, tensor: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self>;
        fn float_scatter(dim: usize, tensor: FloatTensor<Self>, indices: IntTensor<Self>, value: FloatTensor<Self>, update: IndexingUpdateOp) -> FloatTensor<Self>;
        fn float_scatter_nd(data: FloatTensor<Self>, indices: IntTensor<Self>, values: FloatTensor<Self>, reduction: IndexingUpdateOp) -> FloatTensor<Self>;
        fn float_gather_nd(data: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self>;
        fn float_select(tensor: FloatTensor<Self>, dim: usize, indices: IntTensor<Self>) -> FloatTensor<Self>;
        fn float_select_assign(tensor: FloatTensor<Self>, dim: usize, indices: IntTensor<Self>, value: FloatTensor<Self>, update: IndexingUpdateOp) -> FloatTensor<Self>;
        fn float_slice(tensor: FloatTensor<Self>, slices: &[Slice]) -> FloatTensor<Self>;
        fn float_slice_assign(tensor: FloatTensor<Self>, slices: &[Slice], value: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_mask_where(tensor: FloatTensor<Self>, mask: BoolTensor<Self>, value: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_mask_fill(tensor: FloatTensor<Self>, mask: BoolTensor<Self>, value: Scalar) -> FloatTensor<Self>;
        fn float_mask_select(tensor: FloatTensor<Self>, mask: BoolTensor<Self>) -> impl Future<Output = FloatTensor<Self>> + 'static + Send;
        fn float_equal(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_not_equal(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_equal_elem(lhs: FloatTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_not_equal_elem(lhs: FloatTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_greater(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_greater_elem(lhs: FloatTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_greater_equal(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_greater_equal_elem(lhs: FloatTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_lower(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_lower_elem(lhs: FloatTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_lower_equal(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_lower_equal_elem(lhs: FloatTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_sum(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_sum_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_sum_dims(tensor: FloatTensor<Self>, dims: &[usize]) -> FloatTensor<Self>;
        fn float_prod(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_prod_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_mean(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_mean_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_cumsum(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_cumprod(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_cummin(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_cummax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_cast(tensor: FloatTensor<Self>, dtype: FloatDType) -> FloatTensor<Self>;
        fn float_exp(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_log(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_log1p(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_powf(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_powi(lhs: FloatTensor<Self>, rhs: IntTensor<Self>) -> FloatTensor<Self>;
        fn float_powi_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self>;
        fn float_powi_scalar_impl(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self>;
        fn float_powf_scalar(tensor: FloatTensor<Self>, value: Scalar) -> FloatTensor<Self>;
        fn float_powf_scalar_impl(tensor: FloatTensor<Self>, value: Scalar) -> FloatTensor<Self>;
        fn float_sqrt(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_hypot(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_abs(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_cos(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_sin(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_tan(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_cosh(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_sinh(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_tanh(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_acos(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_acosh(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_asin(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_asinh(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_atan(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_atanh(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_atan2(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_round(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_floor(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_ceil(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_trunc(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_erf(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_cat(tensors: Vec<FloatTensor<Self>>, dim: usize) -> FloatTensor<Self>;
        fn float_argmax(tensor: FloatTensor<Self>, dim: usize, out_dtype: IntDType) -> IntTensor<Self>;
        fn float_argtopk(tensor: FloatTensor<Self>, dim: usize, k: usize, out_dtype: IntDType) -> IntTensor<Self>;
        fn float_topk(tensor: FloatTensor<Self>, dim: usize, k: usize) -> FloatTensor<Self>;
        fn float_topk_with_indices(tensor: FloatTensor<Self>, dim: usize, k: usize, out_dtype: IntDType) -> (FloatTensor<Self>, IntTensor<Self>);
        fn float_argmin(tensor: FloatTensor<Self>, dim: usize, out_dtype: IntDType) -> IntTensor<Self>;
        fn float_max(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_max_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_max_dim_with_indices(tensor: FloatTensor<Self>, dim: usize, indices_dtype: IntDType) -> (FloatTensor<Self>, IntTensor<Self>);
        fn float_min(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_min_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_min_dim_with_indices(tensor: FloatTensor<Self>, dim: usize, indices_dtype: IntDType) -> (FloatTensor<Self>, IntTensor<Self>);
        fn float_max_abs(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_max_abs_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn float_any(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_any_dim(tensor: FloatTensor<Self>, dim: usize, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_all(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_all_dim(tensor: FloatTensor<Self>, dim: usize, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_sign(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn float_expand(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self>;
        fn float_sort(tensor: FloatTensor<Self>, dim: usize, descending: bool) -> FloatTensor<Self>;
        fn float_sort_with_indices(tensor: FloatTensor<Self>, dim: usize, descending: bool, indices_dtype: IntDType) -> (FloatTensor<Self>, IntTensor<Self>);
        fn float_argsort(tensor: FloatTensor<Self>, dim: usize, descending: bool, out_dtype: IntDType) -> IntTensor<Self>;
        fn float_grid_sample_2d(tensor: FloatTensor<Self>, grid: FloatTensor<Self>, options: GridSampleOptions) -> FloatTensor<Self>;
        fn float_unfold(tensor: FloatTensor<Self>, dim: usize, size: usize, step: usize) -> FloatTensor<Self>;
        fn float_is_nan(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_is_inf(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
        fn float_pad(tensor: FloatTensor<Self>, padding: &[(usize, usize)], mode: PadMode) -> FloatTensor<Self>;
    }
}

impl<B: Backend> IntTensorOps<Self> for Counting<B> {
    remat::int_ops_delegated!(delegate_to_inner! { count: count; });
    remat::delegate_to_inner! {
        count: count;
        fn int_into_float(tensor: IntTensor<Self>, out_dtype: FloatDType) -> FloatTensor<Self>;
    }
}

impl<B: Backend> BoolTensorOps<Self> for Counting<B> {
    remat::bool_ops_delegated!(delegate_to_inner! { count: count; });
    remat::delegate_to_inner! {
        count: count;
        fn bool_into_float(tensor: BoolTensor<Self>, out_dtype: FloatDType) -> FloatTensor<Self>;
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

    remat::delegate_to_inner! {
        count: count;
        fn q_from_data(data: TensorData, device: &Device<Self>) -> QuantizedTensor<Self>;
        fn dequantize(tensor: QuantizedTensor<Self>, dtype: FloatDType) -> FloatTensor<Self>;
        fn q_to_device(tensor: QuantizedTensor<Self>, device: &Device<Self>) -> QuantizedTensor<Self>;
        fn q_reshape(tensor: QuantizedTensor<Self>, shape: Shape) -> QuantizedTensor<Self>;
        fn q_into_data(tensor: QuantizedTensor<Self>) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send;
        fn q_swap_dims(tensor: QuantizedTensor<Self>, dim1: usize, dim2: usize) -> QuantizedTensor<Self>;
        fn q_permute(tensor: QuantizedTensor<Self>, axes: &[usize]) -> QuantizedTensor<Self>;
        fn q_flip(tensor: QuantizedTensor<Self>, axes: &[usize]) -> QuantizedTensor<Self>;
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

    remat::delegate_to_inner! {
        count: count;
        fn batch_norm(x: FloatTensor<Self>, gamma: FloatTensor<Self>, beta: FloatTensor<Self>, mean: FloatTensor<Self>, variance: FloatTensor<Self>, epsilon: f64) -> FloatTensor<Self>;
        fn embedding(weights: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self>;
        fn embedding_backward(weights: FloatTensor<Self>, output_grad: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self>;
        fn linear(x: FloatTensor<Self>, weight: FloatTensor<Self>, bias: Option<FloatTensor<Self>>) -> FloatTensor<Self>;
        fn linear_x_backward(weight: FloatTensor<Self>, output_grad: FloatTensor<Self>) -> FloatTensor<Self>;
        fn linear_weight_backward(x: FloatTensor<Self>, output_grad: FloatTensor<Self>) -> FloatTensor<Self>;
        fn linear_bias_backward(output_grad: FloatTensor<Self>) -> FloatTensor<Self>;
        fn conv1d(x: FloatTensor<Self>, weight: FloatTensor<Self>, bias: Option<FloatTensor<Self>>, options: ConvOptions<1>) -> FloatTensor<Self>;
        fn conv1d_x_backward(x: FloatTensor<Self>, weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvOptions<1>) -> FloatTensor<Self>;
        fn conv1d_weight_backward(x: FloatTensor<Self>, weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvOptions<1>) -> FloatTensor<Self>;
        fn conv1d_bias_backward(x: FloatTensor<Self>, bias: FloatTensor<Self>, output_grad: FloatTensor<Self>) -> FloatTensor<Self>;
        fn conv2d(x: FloatTensor<Self>, weight: FloatTensor<Self>, bias: Option<FloatTensor<Self>>, options: ConvOptions<2>) -> FloatTensor<Self>;
        fn conv2d_x_backward(x: FloatTensor<Self>, weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvOptions<2>) -> FloatTensor<Self>;
        fn conv2d_weight_backward(x: FloatTensor<Self>, weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvOptions<2>) -> FloatTensor<Self>;
        fn conv2d_bias_backward(x: FloatTensor<Self>, bias: FloatTensor<Self>, output_grad: FloatTensor<Self>) -> FloatTensor<Self>;
        fn deform_conv2d(x: FloatTensor<Self>, offset: FloatTensor<Self>, weight: FloatTensor<Self>, mask: Option<FloatTensor<Self>>, bias: Option<FloatTensor<Self>>, options: DeformConvOptions<2>) -> FloatTensor<Self>;
        fn conv3d(x: FloatTensor<Self>, weight: FloatTensor<Self>, bias: Option<FloatTensor<Self>>, options: ConvOptions<3>) -> FloatTensor<Self>;
        fn conv3d_x_backward(x: FloatTensor<Self>, weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvOptions<3>) -> FloatTensor<Self>;
        fn conv3d_weight_backward(x: FloatTensor<Self>, weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvOptions<3>) -> FloatTensor<Self>;
        fn conv3d_bias_backward(x: FloatTensor<Self>, bias: FloatTensor<Self>, output_grad: FloatTensor<Self>) -> FloatTensor<Self>;
        fn conv_transpose1d(x: FloatTensor<Self>, weight: FloatTensor<Self>, bias: Option<FloatTensor<Self>>, options: ConvTransposeOptions<1>) -> FloatTensor<Self>;
        fn conv_transpose1d_x_backward(weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvTransposeOptions<1>) -> FloatTensor<Self>;
        fn conv_transpose1d_weight_backward(x: FloatTensor<Self>, weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvTransposeOptions<1>) -> FloatTensor<Self>;
        fn conv_transpose1d_bias_backward(x: FloatTensor<Self>, bias: FloatTensor<Self>, output_grad: FloatTensor<Self>) -> FloatTensor<Self>;
        fn conv_transpose2d(x: FloatTensor<Self>, weight: FloatTensor<Self>, bias: Option<FloatTensor<Self>>, options: ConvTransposeOptions<2>) -> FloatTensor<Self>;
        fn conv_transpose2d_x_backward(weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvTransposeOptions<2>) -> FloatTensor<Self>;
        fn conv_transpose2d_weight_backward(x: FloatTensor<Self>, weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvTransposeOptions<2>) -> FloatTensor<Self>;
        fn conv_transpose2d_bias_backward(x: FloatTensor<Self>, bias: FloatTensor<Self>, output_grad: FloatTensor<Self>) -> FloatTensor<Self>;
        fn conv_transpose3d(x: FloatTensor<Self>, weight: FloatTensor<Self>, bias: Option<FloatTensor<Self>>, options: ConvTransposeOptions<3>) -> FloatTensor<Self>;
        fn conv_transpose3d_x_backward(weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvTransposeOptions<3>) -> FloatTensor<Self>;
        fn conv_transpose3d_weight_backward(x: FloatTensor<Self>, weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvTransposeOptions<3>) -> FloatTensor<Self>;
        fn conv_transpose3d_bias_backward(x: FloatTensor<Self>, bias: FloatTensor<Self>, output_grad: FloatTensor<Self>) -> FloatTensor<Self>;
        fn unfold4d(x: FloatTensor<Self>, kernel_size: [usize; 2], options: UnfoldOptions) -> FloatTensor<Self>;
        fn fold4d(x: FloatTensor<Self>, output_size: [usize; 2], kernel_size: [usize; 2], options: UnfoldOptions) -> FloatTensor<Self>;
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

    remat::delegate_to_inner! {
        count: count;
        fn adaptive_avg_pool2d(x: FloatTensor<Self>, output_size: [usize; 2]) -> FloatTensor<Self>;
        fn adaptive_avg_pool2d_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self>;
        fn adaptive_avg_pool3d(x: FloatTensor<Self>, output_size: [usize; 3]) -> FloatTensor<Self>;
        fn adaptive_avg_pool3d_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self>;
        fn adaptive_avg_pool1d(x: FloatTensor<Self>, output_size: usize) -> FloatTensor<Self>;
        fn adaptive_avg_pool1d_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self>;
        fn max_pool1d(x: FloatTensor<Self>, kernel_size: usize, stride: usize, padding: usize, dilation: usize, ceil_mode: bool) -> FloatTensor<Self>;
        fn max_pool2d(x: FloatTensor<Self>, kernel_size: [usize; 2], stride: [usize; 2], padding: [usize; 2], dilation: [usize; 2], ceil_mode: bool) -> FloatTensor<Self>;
        fn interpolate(x: FloatTensor<Self>, output_size: [usize; 2], options: InterpolateOptions) -> FloatTensor<Self>;
        fn interpolate_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>, output_size: [usize; 2], options: InterpolateOptions) -> FloatTensor<Self>;
        fn attention(query: FloatTensor<Self>, key: FloatTensor<Self>, value: FloatTensor<Self>, mask: Option<BoolTensor<Self>>, attn_bias: Option<FloatTensor<Self>>, options: AttentionModuleOptions) -> FloatTensor<Self>;
        fn layer_norm(tensor: FloatTensor<Self>, gamma: FloatTensor<Self>, beta: Option<FloatTensor<Self>>, epsilon: f64) -> FloatTensor<Self>;
        fn ctc_loss(log_probs: FloatTensor<Self>, targets: IntTensor<Self>, input_lengths: IntTensor<Self>, target_lengths: IntTensor<Self>, blank: usize) -> FloatTensor<Self>;
        fn has_ctc_loss_backward() -> bool;
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
    remat::delegate_to_inner! {
        count: count;
        fn leaky_relu(tensor: FloatTensor<Self>, negative_slope: Scalar) -> FloatTensor<Self>;
        fn relu(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn relu_backward(output: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self>;
        fn gelu(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn prelu(tensor: FloatTensor<Self>, alpha: FloatTensor<Self>) -> FloatTensor<Self>;
        fn gelu_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self>;
        fn sigmoid(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn sigmoid_backward(output: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self>;
        fn hard_sigmoid(tensor: FloatTensor<Self>, alpha: Scalar, beta: Scalar) -> FloatTensor<Self>;
        fn log_sigmoid(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn softmax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn log_softmax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn softmin(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
        fn log_sigmoid_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self>;
    }
}

/// A 6-op step of one kind (`sin` on a 4-element leaf) and its backward pass, on `B`.
pub fn sin_step<B: AutodiffBackend>() {
    let x = B::float_set_require_grad(
        B::float_from_data(
            TensorData::new(vec![0.1f32, 0.2, 0.3, 0.4], [4]),
            &Default::default(),
        ),
        true,
    );
    let y = (0..6).fold(x.clone(), |y, _| B::float_sin(y));
    let grads = B::backward(B::float_sum(y));
    assert!(B::grad(&x, &grads).is_some());
}
