//! What the tests of `remat-optim` share.

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;

/// Every float parameter's bits, in visiting order: two models trained alike compare equal.
pub fn bits<M: Module>(module: &M) -> Vec<Vec<u32>> {
    struct Bits(Vec<Vec<u32>>);
    impl ModuleVisitor for Bits {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let data = param.val().into_data().convert::<f32>();
            let values = data.as_slice::<f32>().expect("f32 data");
            self.0.push(values.iter().map(|v| v.to_bits()).collect());
        }
    }
    let mut visitor = Bits(Vec::new());
    module.visit(&mut visitor);
    visitor.0
}
