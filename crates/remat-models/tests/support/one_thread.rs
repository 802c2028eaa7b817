//! Flex runs large kernels on rayon's global pool, whose threads keep per-thread buffers from
//! their first job on. With several threads, which one first takes a job varies from run to
//! run, so the counting-allocator tests pin the pool to one thread, counted by the allocator
//! (`super::heap`, included by each test binary): every such buffer is then made in a
//! warm-up, before the measured window.

use std::sync::Once;

/// Pins rayon's global pool to one counted thread (once per binary), and counts this one.
pub fn one_measured_thread() {
    static ONE_THREAD: Once = Once::new();
    ONE_THREAD.call_once(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .start_handler(|_| {
                super::heap::set_measured(true);
            })
            .build_global()
            .expect("rayon's global pool is configured before any Flex op of this binary");
    });
    super::heap::set_measured(true);
}
