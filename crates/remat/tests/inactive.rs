//! A process where remat never tracked a tensor says so (`is_active`, the note in `stats`'
//! `Display`): the run-time check for a `[patch.crates-io]` line that did not apply. One test
//! in its own binary (process), so that nothing else tracked a tensor before it.

use burn_backend::{TensorData, ops::FloatTensorOps};

type B = remat::Autodiff<burn_flex::Flex>;

#[test]
fn a_process_that_tracked_nothing_is_told_and_the_note_goes_once_a_tensor_is_tracked() {
    assert!(!remat::is_active());
    let report = remat::stats().to_string();
    assert!(
        report.contains("remat has tracked no tensor in this process")
            && report.contains("cargo tree -i burn-autodiff"),
        "{report}"
    );
    // Untracked work does not count: Burn's inference on an autodiff device is not training.
    let x = B::float_from_data(TensorData::from([1.0f32, 2.0]), &Default::default());
    let y = B::float_exp(x.clone());
    drop(y);
    assert!(!remat::is_active());

    let _x = B::float_set_require_grad(x, true);
    assert!(remat::is_active());
    assert!(!remat::stats().to_string().contains("tracked no tensor"));
}
