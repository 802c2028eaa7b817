//! A spectral model through `burn::signal` (Burn's `signal` feature): Linear, a real FFT
//! along the features, a learned gain on the spectrum, the inverse FFT back to a signal and
//! the power spectrum into a read-out. `burn-signal` differentiates its FFTs with Burn's
//! custom-op API (`Backward`, `prepare`, `OpsKind`), which remat provides.

use burn::module::{Module, Param};
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Linear, LinearConfig};
use burn::optim::AdamConfig;
use burn::signal::{irfft, rfft};
use burn::tensor::{Device, Tensor, TensorData};

use super::{LEARNING_RATE, TrainReport, synthetic};

const BATCH: usize = 4;
/// Signal length (a power of two).
const LENGTH: usize = 16;
/// Bins of the real FFT.
const BINS: usize = LENGTH / 2 + 1;
const OUT: usize = 3;

/// The model.
#[derive(Module, Debug)]
pub struct Spectral {
    /// Mixes the input features into a signal.
    pub mix: Linear,
    /// A learned gain per frequency bin.
    pub gain: Param<Tensor<1>>,
    /// Read-out from the filtered signal and the power spectrum.
    pub head: Linear,
}

impl Spectral {
    /// A freshly initialised model (draws from the device's RNG).
    pub fn new(device: &Device) -> Self {
        Self {
            mix: LinearConfig::new(LENGTH, LENGTH).init(device),
            gain: Param::from_tensor(Tensor::<1>::from_data(
                TensorData::new(
                    synthetic(BINS, 91)
                        .into_iter()
                        .map(|v| 1.0 + 0.3 * v)
                        .collect(),
                    [BINS],
                ),
                device,
            )),
            head: LinearConfig::new(LENGTH + BINS, OUT).init(device),
        }
    }

    /// `[batch, LENGTH] -> [batch, OUT]`.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let signal = self.mix.forward(x);
        let (re, im) = rfft(signal, 1, None);
        let gain = self.gain.val().unsqueeze_dim::<2>(0);
        let (re, im) = (re * gain.clone(), im * gain);
        let power = re.clone().powi_scalar(2) + im.clone().powi_scalar(2);
        let filtered = irfft(re, im, 1, None);
        let features = Tensor::cat(vec![filtered, power.mul_scalar(0.1)], 1);
        self.head.forward(features)
    }
}

/// Trains the model for [`STEPS`](super::STEPS) steps on `device` (an autodiff device).
pub fn run(device: &Device) -> TrainReport {
    let _exclusive = super::exclusive();
    device.seed(59);
    let model = Spectral::new(device);
    let x = Tensor::<2>::from_data(
        TensorData::new(synthetic(BATCH * LENGTH, 92), [BATCH, LENGTH]),
        device,
    );
    let y = Tensor::<2>::from_data(
        TensorData::new(synthetic(BATCH * OUT, 93), [BATCH, OUT]),
        device,
    );
    let optim = AdamConfig::new().init();
    super::train(model, optim, LEARNING_RATE, |model| {
        MseLoss::new().forward(model.forward(x.clone()), y.clone(), Reduction::Mean)
    })
}
