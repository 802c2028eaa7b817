//! The one simulator: checks that a schedule is valid for a view and measures it.
//!
//! Cost model: held bytes are the bytes of the values remat holds (kept in the forward pass,
//! or rebuilt) plus the constants of every node recorded and not yet released (at its step,
//! or at its `fixed_until`'s). A replay costs
//! its node's `cost`; forward ops and steps cost nothing extra. The engine's runtime counters
//! (`stats`) are meant to match this trace event for event.
//!
//! # Invariants
//! - Every read is of a held value: a replay's inputs, a step's reads.
//! - The held bytes are checked against the budget after every keep and free event; the one
//!   exception the model allows (the inputs and output of the op running) is the order of
//!   events around a replay: the inputs it takes (`Free`s right after it) leave before its
//!   output arrives.
//! - At the end every node was computed once, in index order, every step ran once, in the
//!   view's step order, and nothing is held.

use super::{Action, Error, Forced, GraphView, Schedule};

/// The held bytes after one keep or free event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldEvent {
    /// The index of the action in the schedule.
    pub index: usize,
    /// The bytes held after the event.
    pub held_bytes: u64,
}

/// What a valid schedule costs.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The most bytes held at any event.
    pub peak_bytes: u64,
    /// The most bytes held during the forward pass (up to the first replay or step).
    pub forward_peak_bytes: u64,
    /// The total cost of the replays (ns).
    pub recompute_cost: f64,
    /// The number of replays of each node.
    pub replays: Vec<u32>,
    /// The total number of replays.
    pub total_replays: u64,
    /// The held bytes after every keep and free event, in order (constants acquired with a
    /// forward op and released with a step are events too); filled by [`simulate_traced`]
    /// only ([`simulate`] leaves it empty: a trace is 16 bytes an event, 160 MB for a
    /// schedule of ten million actions).
    pub trace: Vec<HeldEvent>,
}

/// Checks `schedule` against `view` and `budget_bytes` (`u64::MAX`: no budget) and measures it.
///
/// # Errors
/// [`Error::InvalidAction`] for an action that is not valid where it is, [`Error::OverBudget`]
/// when the held bytes pass the budget, [`Error::Incomplete`] when the schedule ends before
/// the step does or leaves values held.
pub fn simulate(
    view: &GraphView,
    schedule: &Schedule,
    budget_bytes: u64,
) -> Result<Outcome, Error> {
    Sim::new(view, budget_bytes, false).run(schedule.actions())
}

/// [`simulate`], with [`Outcome::trace`] filled.
///
/// # Errors
/// As [`simulate`].
pub fn simulate_traced(
    view: &GraphView,
    schedule: &Schedule,
    budget_bytes: u64,
) -> Result<Outcome, Error> {
    Sim::new(view, budget_bytes, true).run(schedule.actions())
}

struct Sim<'v> {
    view: &'v GraphView,
    budget: u64,
    computed: usize,
    backward: bool,
    /// The last forward op, while no other op ran after it: `Keep` is valid for its values.
    moment: Option<u32>,
    /// The last step, while only `Free`s ran after it: they may drop its own value.
    just_stepped: Option<u32>,
    step_pos: usize,
    held: Vec<bool>,
    stepped: Vec<bool>,
    /// Steps still to run that read each value.
    reads_left: Vec<u32>,
    /// Per node, the constants its step releases.
    released: Vec<u64>,
    held_bytes: u64,
    /// Whether `out.trace` is filled.
    traced: bool,
    out: Outcome,
}

impl<'v> Sim<'v> {
    fn new(view: &'v GraphView, budget: u64, traced: bool) -> Self {
        let n = view.len();
        let mut reads_left = vec![0u32; n];
        for node in view.nodes() {
            for_each_distinct(&node.step_reads, |r| reads_left[r as usize] += 1);
        }
        Self {
            view,
            budget,
            computed: 0,
            backward: false,
            moment: None,
            just_stepped: None,
            step_pos: 0,
            held: vec![false; n],
            stepped: vec![false; n],
            reads_left,
            released: view.released_by_steps(),
            held_bytes: 0,
            traced,
            out: Outcome {
                peak_bytes: 0,
                forward_peak_bytes: 0,
                recompute_cost: 0.0,
                replays: vec![0; n],
                total_replays: 0,
                trace: Vec::new(),
            },
        }
    }

    fn run(mut self, actions: &[Action]) -> Result<Outcome, Error> {
        let mut taken = vec![false; actions.len()];
        for (index, &action) in actions.iter().enumerate() {
            if taken[index] {
                continue;
            }
            let invalid = |reason: String| Error::InvalidAction {
                index,
                action,
                reason,
            };
            if !matches!(action, Action::Free(_)) {
                self.just_stepped = None;
            }
            if action.node() as usize >= self.view.len() {
                return Err(invalid("no such node".into()));
            }
            match action {
                Action::Compute(i) => {
                    if self.backward || i as usize != self.computed {
                        return Err(invalid(format!(
                            "forward ops run in index order before backward; node {} is next",
                            self.computed
                        )));
                    }
                    self.computed += 1;
                    self.moment = Some(i);
                    let fixed = self.view.node(i).fixed_bytes;
                    if fixed > 0 {
                        self.held_bytes += fixed;
                        self.event(index)?;
                    }
                }
                Action::Keep(u) => {
                    let in_hand = self.moment.is_some_and(|j| {
                        let node = self.view.node(j);
                        u == j || node.inputs.contains(&u) || node.step_reads.contains(&u)
                    });
                    if !in_hand {
                        return Err(invalid(
                            "a value is kept only in the forward pass, right after the op \
                             that produces or reads it"
                                .into(),
                        ));
                    }
                    if self.view.node(u).forced == Some(Forced::Recompute) {
                        return Err(invalid("the value is forced to Recompute".into()));
                    }
                    self.hold(u, index, action)?;
                }
                Action::Replay(x) => {
                    self.enter_backward(index, action)?;
                    let node = self.view.node(x);
                    if !node.replayable {
                        return Err(invalid("the op cannot be replayed".into()));
                    }
                    if node.forced == Some(Forced::Keep) {
                        return Err(invalid("the value is forced to Keep".into()));
                    }
                    if self.stepped[x as usize] {
                        return Err(invalid(
                            "the node's step already ran (its op is gone)".into(),
                        ));
                    }
                    if let Some(&u) = node.inputs.iter().find(|&&u| !self.held[u as usize]) {
                        return Err(invalid(format!("input {u} is not held")));
                    }
                    self.moment = None;
                    self.out.recompute_cost += node.cost;
                    self.out.replays[x as usize] += 1;
                    self.out.total_replays += 1;
                    // The inputs the replay takes leave before its output arrives.
                    let mut next = index + 1;
                    while let Some(&Action::Free(u)) = actions.get(next) {
                        if u != x && node.inputs.contains(&u) && !taken[next] {
                            taken[next] = true;
                            self.free(u, next).map_err(|reason| Error::InvalidAction {
                                index: next,
                                action: Action::Free(u),
                                reason,
                            })?;
                        }
                        next += 1;
                    }
                    self.hold(x, index, action)?;
                }
                Action::Step(s) => {
                    self.enter_backward(index, action)?;
                    let expected = self.view.step_order().get(self.step_pos).copied();
                    if expected != Some(s) {
                        return Err(invalid(format!("the next step is {expected:?}")));
                    }
                    let node = self.view.node(s);
                    if let Some(&r) = node.step_reads.iter().find(|&&r| !self.held[r as usize]) {
                        return Err(invalid(format!("it reads value {r}, which is not held")));
                    }
                    self.moment = None;
                    self.step_pos += 1;
                    self.stepped[s as usize] = true;
                    self.just_stepped = Some(s);
                    for_each_distinct(&node.step_reads, |r| self.reads_left[r as usize] -= 1);
                    let released = self.released[s as usize];
                    if released > 0 {
                        self.held_bytes -= released;
                        self.event(index)?;
                    }
                }
                Action::Free(v) => {
                    if self.stepped.get(v as usize) == Some(&true) && self.just_stepped != Some(v) {
                        return Err(invalid(
                            "the node's step already ran (its op is gone): a value is dropped \
                             at the latest in the Frees right after its own step"
                                .into(),
                        ));
                    }
                    self.free(v, index).map_err(invalid)?
                }
            }
        }
        if self.computed != self.view.len() || self.step_pos != self.view.len() {
            return Err(Error::Incomplete {
                reason: format!(
                    "{} of {} forward ops and {} of {} steps ran",
                    self.computed,
                    self.view.len(),
                    self.step_pos,
                    self.view.len()
                ),
            });
        }
        if let Some(v) = self.held.iter().position(|&h| h) {
            return Err(Error::Incomplete {
                reason: format!("value {v} is still held at the end"),
            });
        }
        Ok(self.out)
    }

    fn enter_backward(&mut self, index: usize, action: Action) -> Result<(), Error> {
        if self.computed != self.view.len() {
            return Err(Error::InvalidAction {
                index,
                action,
                reason: "backward starts after the whole forward pass".into(),
            });
        }
        self.backward = true;
        Ok(())
    }

    fn hold(&mut self, v: u32, index: usize, action: Action) -> Result<(), Error> {
        if std::mem::replace(&mut self.held[v as usize], true) {
            return Err(Error::InvalidAction {
                index,
                action,
                reason: format!("value {v} is already held"),
            });
        }
        self.held_bytes += self.view.node(v).bytes;
        self.event(index)
    }

    fn free(&mut self, v: u32, index: usize) -> Result<(), String> {
        if !std::mem::replace(&mut self.held[v as usize], false) {
            return Err(format!("value {v} is not held"));
        }
        if self.view.node(v).forced == Some(Forced::Keep) && self.reads_left[v as usize] > 0 {
            return Err(format!(
                "value {v} is forced to Keep and a later step still reads it"
            ));
        }
        self.held_bytes -= self.view.node(v).bytes;
        self.trace(index);
        Ok(())
    }

    fn trace(&mut self, index: usize) {
        if self.traced {
            self.out.trace.push(HeldEvent {
                index,
                held_bytes: self.held_bytes,
            });
        }
    }

    fn event(&mut self, index: usize) -> Result<(), Error> {
        self.trace(index);
        self.out.peak_bytes = self.out.peak_bytes.max(self.held_bytes);
        if !self.backward {
            self.out.forward_peak_bytes = self.out.forward_peak_bytes.max(self.held_bytes);
        }
        if self.held_bytes > self.budget {
            return Err(Error::OverBudget {
                index,
                held_bytes: self.held_bytes,
                budget_bytes: self.budget,
            });
        }
        Ok(())
    }
}

/// Calls `f` once for each distinct value of `values`, in order of first appearance.
pub(crate) fn for_each_distinct(values: &[u32], mut f: impl FnMut(u32)) {
    if values.len() <= 16 {
        for (k, &v) in values.iter().enumerate() {
            if !values[..k].contains(&v) {
                f(v);
            }
        }
    } else {
        let mut seen = std::collections::HashSet::with_capacity(values.len());
        for &v in values {
            if seen.insert(v) {
                f(v);
            }
        }
    }
}
