//! The one decision site: for an op being recorded, what is kept, what may be rebuilt and
//! which inputs are retained, from plain facts (no tensor).
//!
//! [`decide`] combines what used to be decided in four places: the policy's answer
//! ([`place`](super::policy::place): regions, scopes, the process-wide policy, the strategy's
//! default, the budget), Balanced's weighing of bytes (NOTE [thrifty-balanced]), whether a
//! consumer may rely on a replay of each input (the question `Node::require_value` is asked),
//! and whether a region's value is still in context (its open flag, NOTE [regions] in
//! `policy.rs`, which the recording site reads into [`InputState::Op::rebuildable`]). The
//! answer is in the planner's vocabulary, one [`Forced`] mark per value: `Keep` (store it
//! now) or `Recompute` (leave it to a replay), the marks `planner::from_decisions` turns into
//! today's schedule. The recording site (`ops/record.rs`) carries the answer out on the graph.
//!
//! Cost per recorded op: the policy's (one thread-local borrow, one atomic load) plus one
//! pass over the inputs.
//!
//! # Invariants
//! - Never sees a tensor. The one fact that needs the op's output, its size, is asked for
//!   only when Balanced weighs bytes or a sized selector reads it, and then at most once.
//! - An input is retained exactly when the op's backward step reads it, or the op may be
//!   rebuilt and its replay reads it.

use smallvec::SmallVec;

use super::policy;
use crate::graph::{Cost, OpInfo, Placement, Reads};
use crate::planner::Forced;

/// What the recording site knows about one input of an op, as it stands when the op is
/// recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InputState {
    /// A tracked input whose value the record does not hold: a custom op's parent, or a
    /// value the caller moved into the inner call. It gets a gradient; nothing is kept.
    GradientOnly,
    /// A leaf: its value can only be held on the consumer's edge.
    Leaf,
    /// An untracked value (a constant for this graph): held on the edge if read.
    Untracked,
    /// The output of a recorded op.
    Op {
        /// Its value may be rebuilt for a later consumer: its policy recomputes it and its
        /// region (if any) is still open, or a budget plans it.
        rebuildable: bool,
        /// A planner decides it (`Placement::planned`: recorded under a budget, NOTE
        /// \[budget\]).
        planned: bool,
        /// Bytes of its value.
        bytes: u64,
    },
}

/// What the recording site knows about the op being recorded.
pub(crate) struct OpFacts<'a> {
    pub(crate) info: OpInfo,
    /// Whether a replay reproduces the output bit for bit (`Rule::replayable`).
    pub(crate) replayable: bool,
    /// The tensors carry Burn's `BalancedCheckpointing` (it picks the default policy only).
    pub(crate) balanced: bool,
    /// What the op's backward step reads.
    pub(crate) reads: &'a Reads,
    /// Whether a replay of the op reads input `i` (`Rule::replay_input`).
    pub(crate) replay_reads: &'a dyn Fn(usize) -> bool,
    /// The inputs, in order.
    pub(crate) inputs: &'a [InputState],
    /// Whether input `i` (an [`InputState::Op`]) is kept now. Asked only when Balanced
    /// weighs bytes (it locks the producer).
    pub(crate) stored: &'a dyn Fn(usize) -> bool,
    /// Whether Balanced may weigh the inputs a rebuild would retain against the output
    /// (NOTE [thrifty-balanced]). False for custom ops, whose replay inputs are the user's
    /// retro-forward's, kept as Burn keeps them.
    pub(crate) weigh_bytes: bool,
}

/// The decision for one recorded op.
pub(crate) struct Decision {
    /// What the op's node carries (whether it may be rebuilt, its region, its budget).
    pub(crate) placement: Placement,
    /// The output's mark: `None` when its own step does not read it (a consumer may mark it
    /// later), `Keep` to store it now, `Recompute` to leave it to a replay.
    pub(crate) output: Option<Forced>,
    /// Each input's mark: `None` when it is not retained; `Keep` to store it now (in its
    /// producer's slot, or held on the edge for leaves and constants); `Recompute` when the
    /// op may rely on a replay of its producer (marked needed, not stored).
    pub(crate) inputs: SmallVec<[Option<Forced>; 2]>,
}

/// Decides what an op being recorded keeps (see the module docs). `output_bytes` gives the
/// size of the op's output; it is called at most once, only when Balanced weighs bytes or a
/// [`Selector::sized`](super::policy::Selector::sized) rule reads it.
pub(crate) fn decide(facts: &OpFacts<'_>, output_bytes: &mut dyn FnMut() -> u64) -> Decision {
    // Asked at most once, by a sized selector or by Balanced's weighing.
    let mut known: Option<u64> = None;
    let mut size = || *known.get_or_insert_with(&mut *output_bytes);
    let (mut placement, thrifty) =
        policy::place(&facts.info, facts.replayable, facts.balanced, &mut size);
    placement.leaf_view = facts.info.cost == Cost::Alias
        && !facts.inputs.is_empty()
        && facts.inputs.iter().all(|i| *i == InputState::Leaf);
    if thrifty && facts.weigh_bytes {
        // NOTE [thrifty-balanced]: Balanced rebuilds a cheap output to save its bytes, but a
        // rebuild needs the op's inputs. Inputs kept for nothing else (an op output no step
        // reads yet, and that cannot be rebuilt itself) would cost bytes of their own: when
        // they cost at least the output's, keeping the output instead saves the replays at
        // no cost in memory (e.g. conv -> relu, matmul -> add bias). Inputs the op's own
        // backward reads are kept anyway and cost nothing here.
        let extra: u64 = facts
            .inputs
            .iter()
            .enumerate()
            .filter(|(i, _)| !facts.reads.has_input(*i) && (facts.replay_reads)(*i))
            .map(|(i, input)| match *input {
                InputState::Op {
                    rebuildable: false,
                    bytes,
                    ..
                } if !(facts.stored)(i) => bytes,
                _ => 0,
            })
            .sum();
        if extra > 0 && extra >= size() {
            placement.recompute = false;
        }
    }
    let mark = |recompute: bool| {
        if recompute {
            Forced::Recompute
        } else {
            Forced::Keep
        }
    };
    let inputs = facts
        .inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let needed =
                facts.reads.has_input(i) || (placement.recompute && (facts.replay_reads)(i));
            match *input {
                InputState::GradientOnly => None,
                _ if !needed => None,
                InputState::Leaf | InputState::Untracked => Some(Forced::Keep),
                // Under a budget, a value the budget plans waits for the planner's `Keep`
                // (NOTE \[budget\]; the planner keeps a value that cannot be rebuilt for as
                // long as anything may read it).
                InputState::Op {
                    rebuildable,
                    planned,
                    ..
                } => Some(mark(rebuildable || (planned && placement.planned))),
            }
        })
        .collect();
    let output = facts.reads.output.then(|| mark(placement.recompute));
    Decision {
        placement,
        output,
        inputs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::policy::{Policy, with_policy};

    const CHEAP: OpInfo = OpInfo {
        name: "exp",
        cost: Cost::Cheap,
    };

    /// An input recorded by a kept (compute-bound) op that nothing stored yet.
    const UNSTORED: InputState = InputState::Op {
        rebuildable: false,
        planned: false,
        bytes: 64,
    };

    fn facts<'a>(reads: &'a Reads, inputs: &'a [InputState], weigh: bool) -> OpFacts<'a> {
        OpFacts {
            info: CHEAP,
            replayable: true,
            balanced: false,
            reads,
            replay_reads: &|_| true,
            inputs,
            stored: &|_| false,
            weigh_bytes: weigh,
        }
    }

    /// NOTE [thrifty-balanced]: a cheap output is kept when rebuilding it would retain at
    /// least its bytes of inputs that nothing else keeps; otherwise it is rebuilt and the
    /// input kept for the replay. The output's size is asked once.
    #[test]
    fn balanced_weighs_the_inputs_a_rebuild_retains() {
        with_policy(Policy::Balanced, || {
            for (out_bytes, recompute) in [(64, false), (128, true)] {
                let mut asked = 0;
                let reads = Reads::OUTPUT;
                let decision = decide(&facts(&reads, &[UNSTORED], true), &mut || {
                    asked += 1;
                    out_bytes
                });
                assert_eq!(asked, 1);
                assert_eq!(decision.placement.recompute, recompute);
                let (output, input) = if recompute {
                    (Forced::Recompute, Some(Forced::Keep))
                } else {
                    (Forced::Keep, None)
                };
                assert_eq!(decision.output, Some(output));
                assert_eq!(decision.inputs.as_slice(), &[input]);
            }
        });
    }

    /// Without weighing (custom ops) the output's size is never asked.
    #[test]
    fn an_unweighed_op_is_not_asked_its_size() {
        with_policy(Policy::Balanced, || {
            let reads = Reads::NOTHING;
            let decision = decide(&facts(&reads, &[UNSTORED], false), &mut || panic!("asked"));
            assert!(decision.placement.recompute);
            assert_eq!(decision.output, None);
        });
    }

    /// A sized selector is told the output's bytes, asked once; an unsized one never asks.
    #[test]
    fn a_sized_selector_asks_the_output_s_size_once() {
        use crate::checkpoint::policy::Selector;
        let reads = Reads::OUTPUT;
        let small = Selector::keep_at_most(100);
        for (selector, bytes, asks, recompute) in [
            (small.clone(), 100, 1, false),
            (small.clone(), 101, 1, true),
            // Composed twice over the size: still asked once.
            (small.clone().and(!Selector::keep_at_most(10)), 50, 1, false),
            (small.or(Selector::keep_names(&["exp"])), 500, 1, false),
            (Selector::keep_names(&["exp"]), 500, 0, false),
            (!Selector::keep_names(&["exp"]), 500, 0, true),
        ] {
            let mut asked = 0;
            let decision = with_policy(Policy::Selective(selector), || {
                decide(&facts(&reads, &[], true), &mut || {
                    asked += 1;
                    bytes
                })
            });
            assert_eq!(asked, asks, "{bytes} bytes");
            assert_eq!(decision.placement.recompute, recompute, "{bytes} bytes");
        }
    }

    /// NOTE \[budget\]: under a budget the decision marks the op `planned`, and an input that
    /// a planner decides waits for its `Keep` even when no policy rebuilds it; outside a
    /// budget the same input is stored now.
    #[test]
    fn a_budget_leaves_what_it_plans_to_the_planner() {
        let reads = Reads::input(0);
        let planned_input = [InputState::Op {
            rebuildable: false,
            planned: true,
            bytes: 64,
        }];
        let budget = with_policy(Policy::Budget(1 << 20), || {
            decide(&facts(&reads, &planned_input, true), &mut || 0)
        });
        assert!(budget.placement.planned);
        assert_eq!(budget.inputs[0], Some(Forced::Recompute));
        let save_all = with_policy(Policy::SaveAll, || {
            decide(&facts(&reads, &planned_input, true), &mut || 0)
        });
        assert!(!save_all.placement.planned);
        assert_eq!(save_all.inputs[0], Some(Forced::Keep));
        let unplanned = with_policy(Policy::Budget(1 << 20), || {
            decide(&facts(&reads, &[UNSTORED], true), &mut || 0)
        });
        assert_eq!(unplanned.inputs[0], Some(Forced::Keep));
    }

    /// NOTE [regions]: a value recorded in a region may be rebuilt for consumers until its
    /// outermost region closes; the flag the node carries says so.
    #[test]
    fn a_region_value_is_rebuildable_until_its_outermost_region_closes() {
        let reads = Reads::OUTPUT;
        let inner = crate::checkpoint(|| {
            let inner = crate::checkpoint(|| decide(&facts(&reads, &[], true), &mut || 0));
            assert!(inner.placement.region_open(), "outer region still open");
            inner
        });
        assert_eq!(inner.output, Some(Forced::Recompute));
        assert!(!inner.placement.region_open());
    }
}
