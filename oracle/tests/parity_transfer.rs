//! Transfers between inner backends inside one graph (Flex -> NdArray -> Flex, and a graph
//! whose loss lives on NdArray), on Burn's autodiff and on remat, in one process.
//!
//! Both engines move tensors with `Autodiff::<Src, C>::to_backend::<Dst, Adapter>` and the
//! same host-mediated adapter (read the data, rebuild it on the other backend; what
//! burn-dispatch's transfer adapter does between its backends), implemented once for each
//! engine's `DifferentiableTransfer` trait. remat must agree with Burn within
//! [`RTOL`] under both strategies, be bit-identical under each of its policies and in
//! checkpoint regions (around the whole program, and around the middle segment so that
//! region boundaries and backend boundaries cross), and free every kept value afterwards.

use core::marker::PhantomData;

use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, Backend, Scalar, TensorData, TensorMetadata};
use burn_flex::Flex;
#[allow(deprecated)]
use burn_ndarray::NdArray;
use remat::{Cost, Policy, Selector};
use remat_oracle::backend::{Leaf, Outcome, RTOL, assert_bitwise, assert_close};

/// The host-mediated transfer: the tensor's data is read and rebuilt on the destination
/// device; its gradient takes the same way back.
#[derive(Debug)]
struct HostTransfer;

/// Moves a float tensor between inner backends through host memory.
fn through_host<Src: Backend, Dst: Backend>(
    tensor: FloatTensor<Src>,
    device: &Dst::Device,
) -> FloatTensor<Dst> {
    let data = burn_backend::read_sync(Src::float_into_data(tensor))
        .expect("a tensor's data can be read for a transfer");
    Dst::float_from_data(data, device)
}

impl<Src: Backend, Dst: Backend> burn_autodiff::ops::DifferentiableTransfer<Src, Dst>
    for HostTransfer
{
    fn forward(tensor: FloatTensor<Src>, device: &Dst::Device) -> FloatTensor<Dst> {
        through_host::<Src, Dst>(tensor, device)
    }

    fn backward(tensor: FloatTensor<Dst>, device: &Src::Device) -> FloatTensor<Src> {
        through_host::<Dst, Src>(tensor, device)
    }
}

impl<Src: Backend, Dst: Backend> remat::ops::DifferentiableTransfer<Src, Dst> for HostTransfer {
    fn forward(tensor: FloatTensor<Src>, device: &Dst::Device) -> FloatTensor<Dst> {
        through_host::<Src, Dst>(tensor, device)
    }

    fn backward(tensor: FloatTensor<Dst>, device: &Src::Device) -> FloatTensor<Src> {
        through_host::<Dst, Src>(tensor, device)
    }
}

/// An autodiff engine over Flex and NdArray with transfers between them.
trait Engine {
    /// The engine over Flex.
    type F: AutodiffBackend;
    /// The engine over NdArray, with the same gradients container (a graph spans both).
    type N: AutodiffBackend<Gradients = <Self::F as AutodiffBackend>::Gradients>;
    fn to_ndarray(tensor: FloatTensor<Self::F>) -> FloatTensor<Self::N>;
    fn to_flex(tensor: FloatTensor<Self::N>) -> FloatTensor<Self::F>;
    /// Runs `f` as a checkpoint region where the engine has them (remat), else plainly.
    fn segment<R>(f: impl FnOnce() -> R) -> R;
}

/// Burn's autodiff under strategy `C`.
struct Burn<C>(PhantomData<C>);

impl<C: burn_autodiff::checkpoint::strategy::CheckpointStrategy> Engine for Burn<C> {
    type F = burn_autodiff::Autodiff<Flex, C>;
    #[allow(deprecated)]
    type N = burn_autodiff::Autodiff<NdArray, C>;

    fn to_ndarray(tensor: FloatTensor<Self::F>) -> FloatTensor<Self::N> {
        #[allow(deprecated)]
        Self::F::to_backend::<NdArray, HostTransfer>(tensor, &Default::default())
    }

    fn to_flex(tensor: FloatTensor<Self::N>) -> FloatTensor<Self::F> {
        Self::N::to_backend::<Flex, HostTransfer>(tensor, &Default::default())
    }

    fn segment<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
}

/// remat under strategy `C`; `REGIONS` puts the middle segments in checkpoint regions.
struct Remat<C, const REGIONS: bool>(PhantomData<C>);

impl<C: remat::checkpoint::strategy::CheckpointStrategy, const REGIONS: bool> Engine
    for Remat<C, REGIONS>
{
    type F = remat::Autodiff<Flex, C>;
    #[allow(deprecated)]
    type N = remat::Autodiff<NdArray, C>;

    fn to_ndarray(tensor: FloatTensor<Self::F>) -> FloatTensor<Self::N> {
        #[allow(deprecated)]
        Self::F::to_backend::<NdArray, HostTransfer>(tensor, &Default::default())
    }

    fn to_flex(tensor: FloatTensor<Self::N>) -> FloatTensor<Self::F> {
        Self::N::to_backend::<Flex, HostTransfer>(tensor, &Default::default())
    }

    fn segment<R>(f: impl FnOnce() -> R) -> R {
        if REGIONS { remat::checkpoint(f) } else { f() }
    }
}

type BurnNo = Burn<burn_autodiff::checkpoint::strategy::NoCheckpointing>;
type BurnBal = Burn<burn_autodiff::checkpoint::strategy::BalancedCheckpointing>;
type RematNo<const REGIONS: bool> = Remat<remat::checkpoint::strategy::NoCheckpointing, REGIONS>;
type RematBal = Remat<remat::checkpoint::strategy::BalancedCheckpointing, false>;

/// A tracked leaf of `B` (f32).
fn leaf<B: AutodiffBackend>(leaf: &Leaf) -> FloatTensor<B> {
    let data = TensorData::new(leaf.values.clone(), leaf.shape.clone());
    B::float_set_require_grad(B::float_from_data(data, &Default::default()), true)
}

/// The values of a tensor of `B`'s inner backend.
fn values<B: Backend>(tensor: FloatTensor<B>) -> Vec<f32> {
    let data = burn_backend::read_sync(B::float_into_data(tensor)).expect("tensor data");
    data.convert::<f32>()
        .try_to_vec::<f32>()
        .expect("f32 values")
}

/// Fixed backward weights, so every output element has its own cotangent.
fn weighted<B: AutodiffBackend>(out: FloatTensor<B>) -> FloatTensor<B> {
    let shape = out.shape();
    let w = Leaf::synthetic(&shape.to_vec(), 99, 0.0);
    let w = B::float_from_data(TensorData::new(w.values, shape), &Default::default());
    B::float_mul(out, w)
}

fn s(v: f64) -> Scalar {
    Scalar::Float(v)
}

/// Leaves: `x` and `b` on Flex, `w` on NdArray.
fn leaves() -> [Leaf; 3] {
    [
        Leaf::synthetic(&[3, 4], 1, 0.0),
        Leaf::synthetic(&[4, 2], 2, 0.0),
        Leaf::synthetic(&[3, 2], 3, 0.0),
    ]
}

/// Flex -> NdArray -> Flex, loss on Flex:
///
/// ```text
/// h  = exp(0.5 x) * x                    Flex
/// hn = to_ndarray(h)                     (h is read again below: a shared parent)
/// m  = tanh(hn) @ w + to_ndarray(b)      NdArray (w an NdArray leaf, b a Flex leaf)
/// y  = to_flex(m) * sum_dim(h, 1)        Flex, back from NdArray
/// out = y + to_flex(to_ndarray(x))[:, 0..2] + c   c an untracked NdArray constant moved over
/// ```
fn round_trip<E: Engine>(leaves: &[Leaf]) -> Outcome {
    let x = leaf::<E::F>(&leaves[0]);
    let w = leaf::<E::N>(&leaves[1]);
    let b = leaf::<E::F>(&leaves[2]);
    let h = E::F::float_mul(
        E::F::float_exp(E::F::float_mul_scalar(x.clone(), s(0.5))),
        x.clone(),
    );
    let m = E::segment(|| {
        let hn = E::to_ndarray(h.clone());
        let t = E::N::float_matmul(E::N::float_tanh(hn), w.clone());
        E::N::float_add(t, E::to_ndarray(b.clone()))
    });
    let y = E::F::float_mul(E::to_flex(m), E::F::float_sum_dim(h, 1));
    // A leaf that makes the round trip on its own, sliced after it.
    let back = E::segment(|| E::to_flex(E::to_ndarray(x.clone())));
    let back = E::F::float_slice(back, &[(0..3).into(), (0..2).into()]);
    // An untracked constant created on NdArray and moved over.
    let c = E::N::float_from_data(
        TensorData::new(Leaf::synthetic(&[3, 2], 4, 0.0).values, vec![3, 2]),
        &Default::default(),
    );
    let out = E::F::float_add(E::F::float_add(y, back), E::to_flex(c));
    let output = values::<<E::F as AutodiffBackend>::InnerBackend>(E::F::inner(out.clone()));
    let grads = E::F::backward(weighted::<E::F>(out));
    let grads = vec![
        E::F::grad(&x, &grads).map(values::<<E::F as AutodiffBackend>::InnerBackend>),
        E::N::grad(&w, &grads).map(values::<<E::N as AutodiffBackend>::InnerBackend>),
        E::F::grad(&b, &grads).map(values::<<E::F as AutodiffBackend>::InnerBackend>),
    ];
    Outcome { output, grads }
}

/// Flex -> NdArray -> Flex -> NdArray, loss on NdArray: the backward pass starts on the
/// other backend and crosses three times.
///
/// ```text
/// a = to_ndarray(sin(x))                 NdArray
/// f = to_flex(a * w)  (w: [3, 4] NdArray leaf) then f * x, Flex
/// out = to_ndarray(f) + a                NdArray (a read on both sides of two transfers)
/// ```
fn ends_on_ndarray<E: Engine>(leaves: &[Leaf]) -> Outcome {
    let x = leaf::<E::F>(&leaves[0]);
    let w = leaf::<E::N>(&leaves[1]);
    let a = E::to_ndarray(E::F::float_sin(x.clone()));
    let f = E::segment(|| {
        let f = E::to_flex(E::N::float_mul(a.clone(), w.clone()));
        E::F::float_mul(f, x.clone())
    });
    let out = E::N::float_add(E::to_ndarray(f), a);
    let output = values::<<E::N as AutodiffBackend>::InnerBackend>(E::N::inner(out.clone()));
    let grads = E::N::backward(weighted::<E::N>(out));
    let grads = vec![
        E::F::grad(&x, &grads).map(values::<<E::F as AutodiffBackend>::InnerBackend>),
        E::N::grad(&w, &grads).map(values::<<E::N as AutodiffBackend>::InnerBackend>),
    ];
    Outcome { output, grads }
}

/// remat's policies, each run through `with_policy` (the default strategy's `SaveAll` is
/// the reference).
fn policies() -> Vec<(&'static str, Policy)> {
    vec![
        ("Balanced", Policy::Balanced),
        ("RecomputeAll", Policy::RecomputeAll),
        (
            "Selective(keep compute)",
            Policy::Selective(Selector::keep_costs(&[Cost::Compute])),
        ),
        (
            "Selective(keep views and cheap)",
            Policy::Selective(Selector::keep_costs(&[Cost::Alias, Cost::Cheap])),
        ),
    ]
}

/// A program over an [`Engine`]: builds its graph from `leaves`, runs backward, and returns
/// the output and each leaf's gradient.
trait Program {
    fn run<E: Engine>(&self, leaves: &[Leaf]) -> Outcome;
}

struct RoundTrip;
impl Program for RoundTrip {
    fn run<E: Engine>(&self, leaves: &[Leaf]) -> Outcome {
        round_trip::<E>(leaves)
    }
}

struct EndsOnNdArray;
impl Program for EndsOnNdArray {
    fn run<E: Engine>(&self, leaves: &[Leaf]) -> Outcome {
        ends_on_ndarray::<E>(leaves)
    }
}

/// Runs `program` on both engines and compares (see the module docs).
/// `remat::stats()` is process-wide: the tests of this file compare it one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn compare(name: &str, program: &impl Program, leaves: &[Leaf]) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let before = remat::stats().live_bytes;
    let ours = program.run::<RematNo<false>>(leaves);
    assert!(
        ours.grads.iter().all(Option::is_some),
        "{name}: every leaf gets a gradient: {:?}",
        ours.grads
    );
    let got = program.run::<RematBal>(leaves);
    assert_bitwise(&format!("{name}: remat BalancedCheckpointing"), &got, &ours);
    for (label, policy) in policies() {
        let got = remat::with_policy(policy.clone(), || program.run::<RematNo<false>>(leaves));
        assert_bitwise(&format!("{name}: remat {label}"), &got, &ours);
        let got = remat::with_policy(policy, || program.run::<RematNo<true>>(leaves));
        assert_bitwise(
            &format!("{name}: remat {label}, regions inside"),
            &got,
            &ours,
        );
    }
    let got = remat::checkpoint(|| program.run::<RematNo<true>>(leaves));
    assert_bitwise(&format!("{name}: remat in a region"), &got, &ours);
    assert_eq!(
        remat::stats().live_bytes,
        before,
        "{name}: remat kept values after every tensor was dropped"
    );
    let burn = program.run::<BurnNo>(leaves);
    assert_close(
        &format!("{name}: vs Burn NoCheckpointing"),
        &ours,
        &burn,
        RTOL,
    );
    let burn = program.run::<BurnBal>(leaves);
    assert_close(
        &format!("{name}: vs Burn BalancedCheckpointing"),
        &ours,
        &burn,
        RTOL,
    );
}

#[test]
fn flex_to_ndarray_and_back_matches_burn() {
    compare("Flex -> NdArray -> Flex", &RoundTrip, &leaves());
}

#[test]
fn a_loss_on_ndarray_after_three_crossings_matches_burn() {
    let leaves = [
        Leaf::synthetic(&[3, 4], 5, 0.0),
        Leaf::synthetic(&[3, 4], 6, 0.0),
    ];
    compare(
        "Flex -> NdArray -> Flex -> NdArray",
        &EndsOnNdArray,
        &leaves,
    );
}
