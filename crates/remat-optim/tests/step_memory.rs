//! The heap peak of a training step with the optimizer stepped inside backward, against
//! Burn's separate step, measured with a counting allocator: on a model whose gradients
//! outweigh its activations (four 256x256 layers, a batch of 2), the gradients are never all
//! alive at once.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Tensor};

/// The system allocator, counting the bytes live and their peak.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let live =
                LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed) + layout.size() as isize;
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const WIDTH: usize = 256;

#[derive(Module, Debug)]
struct Deep {
    layers: Vec<Linear>,
}

impl Deep {
    fn forward(&self, mut x: Tensor<2>) -> Tensor<2> {
        for layer in &self.layers {
            x = layer.forward(x).tanh();
        }
        x
    }
}

/// The heap peak of one step above the level before it (`inside`: the optimizer stepped
/// inside backward), and the model after it.
fn step(model: Deep, optim: &mut ModuleOptimizer, x: &Tensor<2>, inside: bool) -> (isize, Deep) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let loss = model.forward(x.clone()).sum();
    let model = if inside {
        remat_optim::backward_and_step(&loss, model, optim, 1e-3)
    } else {
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        optim.step(1e-3, model, grads)
    };
    drop(loss);
    (PEAK.load(Ordering::Relaxed) - before, model)
}

#[test]
fn the_gradients_are_not_all_alive_at_once() {
    let device = Device::flex().autodiff();
    device.seed(5);
    let model = Deep {
        layers: (0..4)
            .map(|_| {
                LinearConfig::new(WIDTH, WIDTH)
                    .with_bias(false)
                    .init(&device)
            })
            .collect(),
    };
    let x = Tensor::<2>::ones([2, WIDTH], &device);
    let grad_bytes = (4 * WIDTH * WIDTH * 4) as isize;
    let mut peaks = [0; 2];
    for (k, inside) in [false, true].into_iter().enumerate() {
        let mut model = model.clone();
        let mut optim: ModuleOptimizer = AdamConfig::new().init();
        // Steps 1 and 2 create the optimizer's state; step 3 is measured.
        for _ in 0..3 {
            let (peak, next) = step(model, &mut optim, &x, inside);
            model = next;
            peaks[k] = peak;
        }
    }
    let [separate, inside] = peaks;
    eprintln!(
        "step heap peak: separate step {separate} bytes, inside backward {inside} bytes \
         (gradients {grad_bytes} bytes)"
    );
    // The separate step holds every gradient (1 MiB) at the end of backward; inside
    // backward, one layer's (256 KiB) at a time.
    assert!(
        inside + grad_bytes / 2 <= separate,
        "inside backward the step peaked at {inside} bytes, the separate step at {separate}"
    );
}
