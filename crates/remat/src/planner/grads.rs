//! The gradients in flight beside the held values: a step's predicted peak of what remat
//! holds (NOTE \[grads-in-flight\]).
//!
//! # Invariants
//! - [`step_peak`] adds to the held bytes of [`simulate_traced`] the gradient bytes of the
//!   profile at that point of the step order; nothing else.

use super::{Action, Error, GraphView, Schedule, simulate_traced};

// NOTE [grads-in-flight]: besides the values it holds, a backward pass holds gradients: each
// step takes its node's gradient and adds its inputs' (summed into one buffer per node, as
// Burn's `Gradients` does); a leaf's stays to the end, unless the optimizer steps it inside
// backward (`with_complete_leaves`). Replays make none. So the gradient bytes live at each
// point depend on the step order alone, not on the schedule: one pass's profile (what its
// `Gradients` held before its first step, at most during each step, and after each step, in
// the view's step order) serves every schedule of the same view. A schedule's held bytes
// plus the profile at each of its events are its step's peak of what remat holds, for any
// budget. The profile is measured (the engine counts the bytes of the pass's `Gradients`),
// not modelled from the graph: it is exact for the graph as it ran, the step inside
// backward included. On models whose parameters are most of the step (issue 36's MLP) the
// gradients, not the held values, are the step's peak: `tradeoff()` shows both.

/// The gradients a backward pass held, step by step (NOTE \[grads-in-flight\]): what
/// [`step_peak`] adds to a schedule's held bytes. The engine measures it on every pass
/// under a budget; `remat::tradeoff()` carries the last one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GradProfile {
    /// Bytes of gradients held when the first step started (the loss's seed).
    pub before_bytes: u64,
    /// The most bytes of gradients held during each step, in the view's step order.
    pub during_bytes: Vec<u64>,
    /// Bytes of gradients held right after each step, in the view's step order.
    pub after_bytes: Vec<u64>,
    /// The most bytes of held values plus gradients the pass counted, at its steps and
    /// replays: what [`step_peak`] predicts for the schedule the pass carried out.
    pub measured_peak_bytes: u64,
}

impl GradProfile {
    /// The most bytes of gradients held at any point of the pass.
    pub fn peak_bytes(&self) -> u64 {
        self.during_bytes
            .iter()
            .chain(&self.after_bytes)
            .copied()
            .fold(self.before_bytes, u64::max)
    }
}

/// The most bytes of held values plus gradients in flight when `schedule` runs on `view`,
/// with the gradients of `grads` (NOTE \[grads-in-flight\]): during the forward pass the
/// held values alone, from the first replay or step on each event's held bytes plus the
/// gradients at that point, and during each step the held bytes before it plus the most
/// gradients of that step.
///
/// # Errors
/// As [`simulate_traced`]; [`Error::InvalidView`] when `grads` does not have one entry per
/// step of `view` (a profile of another graph).
pub fn step_peak(view: &GraphView, schedule: &Schedule, grads: &GradProfile) -> Result<u64, Error> {
    let steps = view.len();
    if grads.during_bytes.len() != steps || grads.after_bytes.len() != steps {
        return Err(Error::InvalidView {
            node: None,
            reason: format!(
                "the gradient profile has {} and {} entries, the view {steps} steps",
                grads.during_bytes.len(),
                grads.after_bytes.len()
            ),
        });
    }
    let outcome = simulate_traced(view, schedule, u64::MAX)?;
    let mut events = outcome.trace.iter().peekable();
    let mut held = 0;
    // Gradients: none in the forward pass, then the seed, then each step's.
    let mut in_flight = 0;
    let mut peak = 0;
    let mut step = 0;
    for (index, action) in schedule.actions().iter().enumerate() {
        while let Some(event) = events.next_if(|e| e.index < index) {
            held = event.held_bytes;
            peak = peak.max(held + in_flight);
        }
        match *action {
            Action::Replay(_) if step == 0 => in_flight = grads.before_bytes,
            Action::Step(_) => {
                if step == 0 {
                    in_flight = grads.before_bytes;
                }
                peak = peak.max(held + grads.during_bytes[step].max(in_flight));
                in_flight = grads.after_bytes[step];
                step += 1;
            }
            _ => {}
        }
    }
    for event in events {
        peak = peak.max(event.held_bytes + in_flight);
    }
    Ok(peak)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three 100-byte ops in a chain, each step reading the value before it, kept whole:
    /// held 100 and 200 bytes in the forward pass, 200 through the first step, then 100
    /// and 0. The gradients add to each point of the step order.
    #[test]
    fn the_gradients_add_to_the_held_bytes_at_each_point_of_the_step_order() {
        let view = crate::planner::tests::chain(3, 100, 1.0);
        use Action::*;
        let schedule = Schedule::new(vec![
            Compute(0),
            Keep(0),
            Compute(1),
            Keep(1),
            Compute(2),
            Step(2),
            Free(1),
            Step(1),
            Free(0),
            Step(0),
        ]);
        let profile = |during: [u64; 3]| GradProfile {
            before_bytes: 10,
            during_bytes: during.to_vec(),
            after_bytes: vec![20, 25, 0],
            measured_peak_bytes: 0,
        };
        // The first step: 200 held, 30 of gradients.
        assert_eq!(step_peak(&view, &schedule, &profile([30, 40, 50])), Ok(230));
        // The seed counts from the first step on, the most of a step at its held bytes.
        assert_eq!(step_peak(&view, &schedule, &profile([5, 40, 50])), Ok(210));
        // The last step, with nothing held, has the most.
        assert_eq!(
            step_peak(&view, &schedule, &profile([30, 40, 500])),
            Ok(500)
        );
        // Between two steps: after the second, 25 of gradients beside what is held (0).
        assert_eq!(profile([0, 0, 0]).peak_bytes(), 25);
        let short = GradProfile {
            during_bytes: vec![1, 2],
            after_bytes: vec![1, 2],
            ..GradProfile::default()
        };
        assert!(matches!(
            step_peak(&view, &schedule, &short),
            Err(Error::InvalidView { .. })
        ));
    }
}
