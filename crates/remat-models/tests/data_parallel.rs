//! Data-parallel training through Burn on CPU, on remat (through the patch).
//!
//! Burn 0.22 has no collectives on its CPU backends (ARCHITECTURE.md, "Distributed data
//! parallel"): burn-train's data-parallel strategy cannot start on Flex, and Burn's dispatch
//! does not even let a Flex parameter be marked distributed, so no call reaches remat's
//! hooks. These tests pin that down, so that a Burn release that adds CPU collectives is
//! noticed (and an end-to-end data-parallel training test on remat added then). remat's
//! hooks themselves are checked call by call, below Burn, in
//! `crates/remat/tests/distributed.rs`.

use burn::module::ParamId;
use burn::tensor::distributed::{DistributedConfig, DistributedContext, ReduceOperation};
use burn::tensor::{Device, Tensor, TensorData};

#[test]
fn flex_has_no_collectives_so_data_parallel_cannot_start() {
    let devices = vec![Device::flex().autodiff(), Device::flex().autodiff()];
    let config = DistributedConfig {
        all_reduce_op: ReduceOperation::Mean,
    };
    // What burn-train's `ExecutionStrategy::ddp(devices, config)` does first.
    let started = std::panic::catch_unwind(move || DistributedContext::init(devices, config));
    let Err(payload) = started else {
        panic!(
            "Burn now starts a data-parallel context on Flex: add an end-to-end data-parallel \
             training test on remat and update ARCHITECTURE.md"
        )
    };
    let message = panic_message(payload);
    assert!(
        message.contains("Distributed operations are not supported for device"),
        "unexpected panic: {message}"
    );
}

/// Burn's dispatch routes `set_distributed` (burn-train's sharder marks every parameter
/// with it) only to backends with collectives: on Flex it panics before reaching remat.
#[test]
fn flex_parameters_cannot_be_marked_distributed_through_burn() {
    let device = Device::flex().autodiff();
    let w = Tensor::<2>::from_data(TensorData::from([[1.0f32, -2.0]]), &device).require_grad();
    let marked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        w.set_distributed(ParamId::from(1))
    }));
    let Err(payload) = marked else {
        panic!(
            "Burn now marks Flex parameters distributed: add an end-to-end data-parallel \
             training test on remat and update ARCHITECTURE.md"
        )
    };
    let message = panic_message(payload);
    assert!(
        message.contains("Distributed operations are not supported for tensor kind"),
        "unexpected panic: {message}"
    );
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}
