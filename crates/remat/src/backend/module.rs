//! Module ops: each differentiable method records through its family (`ops::conv`,
//! `ops::pool`, `ops::module`, `ops::attention`). Provided methods not overridden here keep
//! Burn's default, which composes differentiable float ops.

use burn_backend::Backend;
use burn_backend::ops::*;
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor};
use burn_std::IntDType;

use crate::backend::Autodiff;
use crate::checkpoint::strategy::CheckpointStrategy;
use crate::ops::conv::{self, Conv};
use crate::ops::pool::{self, Pool, PoolBackward, Window};
use crate::ops::{attention, module};
use crate::tensor::AutodiffTensor;

/// The window of an average pool (no dilation).
fn avg_window<const N: usize>(
    kernel_size: [usize; N],
    stride: [usize; N],
    padding: [usize; N],
    ceil_mode: bool,
) -> Window<N> {
    Window {
        kernel_size,
        stride,
        padding,
        dilation: [1; N],
        ceil_mode,
    }
}

impl<B: Backend, C: CheckpointStrategy> ModuleOps<Self> for Autodiff<B, C> {
    fn embedding(weights: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self> {
        module::embedding(C::BALANCED, weights, indices)
    }

    fn linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        module::linear(C::BALANCED, x, weight, bias)
    }

    fn batch_norm_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> BatchNormTrain<Self> {
        let [output, mean, variance] =
            module::batch_norm_train(C::BALANCED, x, gamma, beta, epsilon);
        BatchNormTrain::new(output, mean, variance)
    }

    fn layer_norm(
        tensor: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        module::layer_norm(C::BALANCED, tensor, gamma, beta, epsilon)
    }

    fn conv1d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvOptions<1>,
    ) -> FloatTensor<Self> {
        conv::conv(C::BALANCED, Conv::Plain1d(options), x, weight, bias)
    }

    fn conv2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self> {
        conv::conv(C::BALANCED, Conv::Plain2d(options), x, weight, bias)
    }

    fn deform_conv2d(
        x: FloatTensor<Self>,
        offset: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        mask: Option<FloatTensor<Self>>,
        bias: Option<FloatTensor<Self>>,
        options: DeformConvOptions<2>,
    ) -> FloatTensor<Self> {
        conv::deform_conv2d(C::BALANCED, x, offset, weight, mask, bias, options)
    }

    /// # Panics
    /// When an argument is tracked: differentiating this backward is not supported.
    fn deform_conv2d_backward(
        x: FloatTensor<Self>,
        offset: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        mask: Option<FloatTensor<Self>>,
        bias: Option<FloatTensor<Self>>,
        output_grad: FloatTensor<Self>,
        options: DeformConvOptions<2>,
    ) -> DeformConv2dBackward<Self> {
        let tracked = [&x, &offset, &weight, &output_grad]
            .into_iter()
            .chain(mask.as_ref())
            .chain(bias.as_ref())
            .any(AutodiffTensor::is_tracked);
        assert!(
            !tracked,
            "remat: double backward through deform_conv2d is not supported \
             (deform_conv2d_backward was called on tracked tensors; detach them first)"
        );
        let grads = B::deform_conv2d_backward(
            x.primitive,
            offset.primitive,
            weight.primitive,
            mask.map(|m| m.primitive),
            bias.map(|b| b.primitive),
            output_grad.primitive,
            options,
        );
        DeformConv2dBackward::new(
            AutodiffTensor::new(grads.x_grad),
            AutodiffTensor::new(grads.offset_grad),
            AutodiffTensor::new(grads.weight_grad),
            grads.mask_grad.map(AutodiffTensor::new),
            grads.bias_grad.map(AutodiffTensor::new),
        )
    }

    fn conv3d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvOptions<3>,
    ) -> FloatTensor<Self> {
        conv::conv(C::BALANCED, Conv::Plain3d(options), x, weight, bias)
    }

    fn conv_transpose1d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvTransposeOptions<1>,
    ) -> FloatTensor<Self> {
        conv::conv(C::BALANCED, Conv::Transpose1d(options), x, weight, bias)
    }

    fn conv_transpose2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvTransposeOptions<2>,
    ) -> FloatTensor<Self> {
        conv::conv(C::BALANCED, Conv::Transpose2d(options), x, weight, bias)
    }

    fn conv_transpose3d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvTransposeOptions<3>,
    ) -> FloatTensor<Self> {
        conv::conv(C::BALANCED, Conv::Transpose3d(options), x, weight, bias)
    }

    fn unfold4d(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        options: UnfoldOptions,
    ) -> FloatTensor<Self> {
        module::unfold4d(C::BALANCED, x, kernel_size, options)
    }

    fn fold4d(
        x: FloatTensor<Self>,
        output_size: [usize; 2],
        kernel_size: [usize; 2],
        options: UnfoldOptions,
    ) -> FloatTensor<Self> {
        module::fold4d(C::BALANCED, x, output_size, kernel_size, options)
    }

    fn avg_pool1d(
        x: FloatTensor<Self>,
        kernel_size: usize,
        stride: usize,
        padding: usize,
        count_include_pad: bool,
        ceil_mode: bool,
    ) -> FloatTensor<Self> {
        let w = avg_window([kernel_size], [stride], [padding], ceil_mode);
        pool::pool(C::BALANCED, Pool::Avg1d(w, count_include_pad), x)
    }

    fn avg_pool2d(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        count_include_pad: bool,
        ceil_mode: bool,
    ) -> FloatTensor<Self> {
        let w = avg_window(kernel_size, stride, padding, ceil_mode);
        pool::pool(C::BALANCED, Pool::Avg2d(w, count_include_pad), x)
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
        let w = avg_window(kernel_size, stride, padding, ceil_mode);
        let op = PoolBackward::Avg2d(w, count_include_pad);
        pool::pool_backward(C::BALANCED, op, x, grad)
    }

    fn adaptive_avg_pool1d(x: FloatTensor<Self>, output_size: usize) -> FloatTensor<Self> {
        pool::pool(C::BALANCED, Pool::AdaptiveAvg1d(output_size), x)
    }

    fn adaptive_avg_pool2d(x: FloatTensor<Self>, output_size: [usize; 2]) -> FloatTensor<Self> {
        pool::pool(C::BALANCED, Pool::AdaptiveAvg2d(output_size), x)
    }

    fn adaptive_avg_pool2d_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        pool::pool_backward(C::BALANCED, PoolBackward::AdaptiveAvg2d, x, grad)
    }

    fn adaptive_avg_pool3d(x: FloatTensor<Self>, output_size: [usize; 3]) -> FloatTensor<Self> {
        pool::pool(C::BALANCED, Pool::AdaptiveAvg3d(output_size), x)
    }

    fn adaptive_avg_pool3d_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        pool::pool_backward(C::BALANCED, PoolBackward::AdaptiveAvg3d, x, grad)
    }

    fn max_pool1d(
        x: FloatTensor<Self>,
        kernel_size: usize,
        stride: usize,
        padding: usize,
        dilation: usize,
        ceil_mode: bool,
    ) -> FloatTensor<Self> {
        let w = Window {
            kernel_size: [kernel_size],
            stride: [stride],
            padding: [padding],
            dilation: [dilation],
            ceil_mode,
        };
        pool::max_pool1d(C::BALANCED, x, w)
    }

    fn max_pool1d_with_indices(
        x: FloatTensor<Self>,
        kernel_size: usize,
        stride: usize,
        padding: usize,
        dilation: usize,
        ceil_mode: bool,
        indices_dtype: IntDType,
    ) -> MaxPool1dWithIndices<Self> {
        let w = Window {
            kernel_size: [kernel_size],
            stride: [stride],
            padding: [padding],
            dilation: [dilation],
            ceil_mode,
        };
        let (output, indices) = pool::max_pool1d_with_indices(C::BALANCED, x, w, indices_dtype);
        MaxPool1dWithIndices::new(output, indices)
    }

    fn max_pool2d(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
    ) -> FloatTensor<Self> {
        let w = Window {
            kernel_size,
            stride,
            padding,
            dilation,
            ceil_mode,
        };
        pool::max_pool2d(C::BALANCED, x, w)
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
        let w = Window {
            kernel_size,
            stride,
            padding,
            dilation,
            ceil_mode,
        };
        let (output, indices) = pool::max_pool2d_with_indices(C::BALANCED, x, w, indices_dtype);
        MaxPool2dWithIndices::new(output, indices)
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
        let w = Window {
            kernel_size,
            stride,
            padding,
            dilation,
            ceil_mode,
        };
        let op = PoolBackward::Max2d(w, indices);
        MaxPool2dBackward::new(pool::pool_backward(C::BALANCED, op, x, output_grad))
    }

    fn interpolate(
        x: FloatTensor<Self>,
        output_size: [usize; 2],
        options: InterpolateOptions,
    ) -> FloatTensor<Self> {
        module::interpolate(C::BALANCED, x, output_size, options)
    }

    fn interpolate_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        output_size: [usize; 2],
        options: InterpolateOptions,
    ) -> FloatTensor<Self> {
        module::interpolate_backward(C::BALANCED, x, grad, output_size, options)
    }

    fn attention(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        mask: Option<BoolTensor<Self>>,
        attn_bias: Option<FloatTensor<Self>>,
        options: AttentionModuleOptions,
    ) -> FloatTensor<Self> {
        attention::attention(C::BALANCED, query, key, value, mask, attn_bias, options)
    }

    fn ctc_loss(
        log_probs: FloatTensor<Self>,
        targets: IntTensor<Self>,
        input_lengths: IntTensor<Self>,
        target_lengths: IntTensor<Self>,
        blank: usize,
    ) -> FloatTensor<Self> {
        if !B::has_ctc_loss_backward() {
            // Burn's decomposition, recorded op by op.
            return ctc::ctc_loss_default::<Self>(
                log_probs,
                targets,
                input_lengths,
                target_lengths,
                blank,
            );
        }
        module::ctc_loss(
            C::BALANCED,
            log_probs,
            targets,
            input_lengths,
            target_lengths,
            blank,
        )
    }
}
