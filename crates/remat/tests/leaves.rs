//! `with_complete_leaves` (NOTE [complete-leaves] in `src/leaves.rs`): each leaf's gradient
//! is handed out once, complete (after every op that read the leaf ran its step), under
//! SaveAll and under a budget; taken, it leaves the pass; left, it is in the pass's
//! gradients as without the hook.

mod support;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Mutex;

use burn_backend::AutodiffBackend;
use burn_backend::ops::FloatTensorOps;
use remat::Policy;
use support::{A, T, tensor, values};

static SERIAL: Mutex<()> = Mutex::new(());

/// Each leaf the callback saw, by name, and its gradient.
type Seen = Vec<(&'static str, Vec<f64>)>;

fn leaf(values: Vec<f64>, shape: &[usize]) -> T {
    A::float_set_require_grad(tensor(values, shape), true)
}

/// `w` read by three ops at three depths, `v` by one: `sum(sin(w x) * w + tanh(v) * w)`.
fn loss(w: &T, v: &T, x: &T) -> T {
    let a = A::float_sin(A::float_mul(w.clone(), x.clone()));
    let b = A::float_mul(a, w.clone());
    let c = A::float_mul(A::float_tanh(v.clone()), w.clone());
    A::float_sum(A::float_add(b, c))
}

#[test]
fn each_leaf_gradient_is_handed_out_once_complete() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let w = leaf(vec![0.3, -0.7, 1.1], &[3]);
    let v = leaf(vec![0.5, 0.2, -0.4], &[3]);
    let x = tensor(vec![1.5, 2.0, -0.5], &[3]);
    let expected = A::backward(loss(&w, &v, &x));
    let (want_w, want_v) = (
        values(A::grad(&w, &expected).unwrap()),
        values(A::grad(&v, &expected).unwrap()),
    );
    for policy in [Policy::SaveAll, Policy::Budget(64)] {
        let l = remat::with_policy(policy.clone(), || loss(&w, &v, &x));
        let seen: Rc<RefCell<Seen>> = Rc::default();
        let (record, w_in, v_in) = (seen.clone(), w.clone(), v.clone());
        let mut sink = remat::grads::Gradients::new();
        let rest = remat::with_complete_leaves(
            move || {
                // The pending gradient is found through any `Gradients`: `w`'s is taken,
                // `v`'s only read (it stays in the pass's gradients).
                let mut record = record.borrow_mut();
                if let Some(g) = A::grad_remove(&w_in, &mut sink) {
                    record.push(("w", values(g)));
                } else if let Some(g) = A::grad(&v_in, &sink) {
                    record.push(("v", values(g)));
                } else {
                    record.push(("other", Vec::new()));
                }
            },
            || A::backward(l),
        );
        let seen = seen.borrow();
        let names: Vec<&str> = seen.iter().map(|(n, _)| *n).collect();
        assert_eq!(names.len(), 2, "{policy:?}: one call per leaf, {names:?}");
        assert!(
            names.contains(&"w") && names.contains(&"v"),
            "{policy:?}: {names:?}"
        );
        for (name, got) in seen.iter() {
            let want = if *name == "w" { &want_w } else { &want_v };
            assert_eq!(got, want, "{policy:?}: {name}'s gradient is not complete");
        }
        assert!(
            A::grad(&w, &rest).is_none(),
            "{policy:?}: w's taken gradient is back"
        );
        assert_eq!(
            values(A::grad(&v, &rest).unwrap()),
            want_v,
            "{policy:?}: v's is gone"
        );
    }
    // Outside the hook, nothing is pending.
    let rest = A::backward(loss(&w, &v, &x));
    assert_eq!(values(A::grad(&w, &rest).unwrap()), want_w);
}

#[test]
fn a_panic_in_the_callback_leaves_no_hook_behind() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let w = leaf(vec![0.3, -0.7], &[2]);
    let x = tensor(vec![1.5, 2.0], &[2]);
    let l = A::float_sum(A::float_mul(w.clone(), x.clone()));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        remat::with_complete_leaves(|| panic!("the user's callback"), || A::backward(l))
    }));
    assert!(outcome.is_err());
    // A later pass runs without the callback, its gradients all there.
    let l = A::float_sum(A::float_mul(w.clone(), x.clone()));
    let grads = A::backward(l);
    assert_eq!(values(A::grad(&w, &grads).unwrap()), vec![1.5, 2.0]);
}
