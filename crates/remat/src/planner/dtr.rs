//! Online eviction under a byte budget: DTR (Kirisame et al., "Dynamic Tensor
//! Rematerialization", ICLR 2021), fed one event at a time.
//!
//! The engine calls [`Dtr::on_compute`] as it records each op (in the first step it does not
//! know the graph ahead), [`Dtr::begin_backward`] once the loss is known, then
//! [`Dtr::on_step`] before each backward step; each returns the actions to carry out now, in
//! order (the same [`Action`]s a planned [`Schedule`] has). Whenever the held bytes would pass
//! the budget, the held rebuildable value with the lowest
//! `h = rebuild cost / (bytes * staleness)` is evicted, where the rebuild cost counts the
//! evicted ancestors a rebuild would need (DTR's equivalence classes: evicted values joined
//! through their edges) and staleness is the time since the value was last read.
//!
//! # Invariants
//! - The actions returned so far, in order, form a valid prefix of a schedule for the graph
//!   recorded so far ([`simulate`](super::simulate) accepts the whole once the step ends).
//! - Values that cannot be rebuilt (not replayable, or forced to Keep) are never evicted.

use std::borrow::Cow;

use super::exec::{Exec, Strategy};
use super::{Action, Error, GraphView, Node, Schedule, min_feasible_budget};

/// DTR, online: see the module docs. `'a` is the lifetime of the nodes it was resumed over
/// ([`Dtr::resume_over`]); a `Dtr` that owns its nodes is a `Dtr<'static>`.
pub struct Dtr<'a> {
    exec: Exec<'a>,
    /// Where the actions of the current event start.
    mark: usize,
}

impl Dtr<'static> {
    /// An empty step under `budget_bytes`.
    pub fn new(budget_bytes: u64) -> Self {
        Self {
            exec: Exec::online(Strategy::Dtr, budget_bytes),
            mark: 0,
        }
    }

    /// Continues a step that another plan started: `prefix` lists the ops recorded so far
    /// (indices `0..prefix.len()`), `held` the values remat holds now. The engine uses it
    /// when a step's graph departs from a cached plan's: it switches to online eviction
    /// from that op on. Nothing is returned for the prefix: its actions were carried out.
    ///
    /// # Errors
    /// [`Error::InvalidView`] for a prefix node that reads a later node or a `held` index
    /// out of range; [`Error::Infeasible`] (a lower bound) when what is held already passes
    /// the budget.
    pub fn resume(budget_bytes: u64, prefix: Vec<Node>, held: &[u32]) -> Result<Self, Error> {
        Dtr::resume_or_return(budget_bytes, prefix, held).map_err(|(error, _)| error)
    }

    /// [`Dtr::resume`], handing `prefix` back with the error, so that a caller that tries
    /// again (another budget, fewer values held) need not copy it first.
    ///
    /// # Errors
    /// As [`Dtr::resume`], with `prefix`.
    pub fn resume_or_return(
        budget_bytes: u64,
        prefix: Vec<Node>,
        held: &[u32],
    ) -> Result<Self, (Error, Vec<Node>)> {
        match Dtr::resume_checked(budget_bytes, Cow::Owned(prefix), held) {
            Ok(dtr) => Ok(dtr),
            Err((error, nodes)) => Err((error, nodes.into_owned())),
        }
    }

    /// The nodes of the ops recorded (or resumed over), in order: the planner is spent.
    pub fn into_nodes(self) -> Vec<Node> {
        self.exec.into_node_list().into_owned()
    }
}

impl<'a> Dtr<'a> {
    /// [`Dtr::resume`] over `prefix` as it is, borrowed or owned: a borrowed prefix is not
    /// copied (the backward pass of a step run online resumes over its view's nodes).
    ///
    /// # Errors
    /// As [`Dtr::resume`].
    pub fn resume_over(
        budget_bytes: u64,
        prefix: Cow<'a, [Node]>,
        held: &[u32],
    ) -> Result<Self, Error> {
        Dtr::resume_checked(budget_bytes, prefix, held).map_err(|(error, _)| error)
    }

    /// [`Dtr::resume_over`] the whole graph, `view`: its backward pass
    /// ([`Dtr::begin_backward_over_view`]) reads the view as it is,
    /// where a resumed prefix is copied into a view of its own (NOTE \[resume-view\] in
    /// `exec/backward.rs`).
    ///
    /// # Errors
    /// As [`Dtr::resume`].
    pub(crate) fn resume_over_view(
        budget_bytes: u64,
        view: &'a GraphView,
        held: &[u32],
    ) -> Result<Self, Error> {
        let mut dtr = Dtr::resume_over(budget_bytes, Cow::Borrowed(view.nodes()), held)?;
        dtr.exec.know_view(view);
        Ok(dtr)
    }

    /// [`Dtr::resume_over`], handing `prefix` back on an error.
    fn resume_checked(
        budget_bytes: u64,
        prefix: Cow<'a, [Node]>,
        held: &[u32],
    ) -> Result<Self, (Error, Cow<'a, [Node]>)> {
        let mut exec = Exec::online_over(Strategy::Dtr, budget_bytes, prefix);
        let len = exec.len();
        if let Some(&v) = held.iter().find(|&&v| v as usize >= len) {
            let error = Error::InvalidView {
                node: Some(v),
                reason: "a held value that the prefix does not record".into(),
            };
            return Err((error, exec.into_node_list()));
        }
        let mut mask = vec![false; len];
        for &v in held {
            mask[v as usize] = true;
        }
        if let Err(error) = exec.adopt_given(&mask) {
            return Err((error, exec.into_node_list()));
        }
        exec.settle_lost();
        if exec.held_bytes() > budget_bytes {
            let error = Error::Infeasible {
                budget_bytes,
                min_budget_bytes: exec.held_bytes(),
                lower_bound: true,
            };
            return Err((error, exec.into_node_list()));
        }
        let mark = exec.actions().len();
        Ok(Self { exec, mark })
    }

    /// Records the next op (its index is the number of ops recorded before) and runs it
    /// forward. Returns the actions to carry out now: `Compute` of the op, then the values to
    /// keep and to evict.
    ///
    /// # Errors
    /// [`Error::InvalidView`] for a node that reads a later node; [`Error::Infeasible`]
    /// (a lower bound) when values that cannot be rebuilt no longer fit.
    pub fn on_compute(&mut self, node: Node) -> Result<&[Action], Error> {
        self.mark = self.exec.actions().len();
        self.exec.record(node)?;
        Ok(&self.exec.actions()[self.mark..])
    }

    /// [`Dtr::on_compute`], forgetting the actions of the earlier events first: the engine
    /// carries out each event's actions as they come and never reads them again, and a
    /// forward pass's history (a `Compute` and its keeps and drops for each op) was held
    /// beside every kept value until backward (NOTE \[gentle-growth\] in `grow.rs`).
    /// [`Dtr::into_schedule`] then holds the latest event's actions only.
    ///
    /// # Errors
    /// As [`Dtr::on_compute`].
    pub(crate) fn on_compute_forgetting(&mut self, node: Node) -> Result<&[Action], Error> {
        self.forget_actions();
        self.on_compute(node)
    }

    /// Makes its errors name a lower bound on the smallest budget ([`Error::Infeasible`] with
    /// `lower_bound`), not [`min_feasible_budget`]: for a caller that only asks whether it
    /// fits (NOTE \[online-first\] in `backward.rs`). That bound is planning of its own, in
    /// the step it would be asked in: 10 MB of tables on Burn's `Lstm` over 1,024 steps,
    /// where SaveAll's step peaks at 53 MB.
    pub(crate) fn bound_errors(&mut self) {
        self.exec.bound_errors();
    }

    /// Forgets the actions returned so far: [`Dtr::into_schedule`] holds those returned from
    /// here on only. For a caller that carries out or copies each event's actions as they
    /// come, and would otherwise hold them twice.
    pub(crate) fn forget_actions(&mut self) {
        self.exec.forget_actions();
        self.mark = 0;
    }

    /// Before the next op is recorded: whether [`Dtr::on_compute`] may keep `value`, one of
    /// that op's inputs, at that op (`false` only where it surely does not), given whether
    /// the op's step reads it and whether a replay of the op reads it (the op replayable).
    /// The engine holds in hand, while the op runs, only the inputs it may keep, so that an
    /// inner kernel may work in place on the others.
    pub fn may_keep_at_next(&self, value: u32, read_by_its_step: bool, replay_input: bool) -> bool {
        self.exec
            .may_keep_at_next(value, read_by_its_step, replay_input)
    }

    /// The ops recorded so far.
    pub fn recorded(&self) -> usize {
        self.exec.len()
    }

    /// Notes that value `value` was read (it becomes less stale).
    pub fn on_access(&mut self, value: u32) {
        self.exec.touch(value);
    }

    /// Evicts values until `needed_bytes` more fit under the budget, and returns them (the
    /// caller drops them).
    ///
    /// # Errors
    /// [`Error::Infeasible`] when not enough can be evicted.
    pub fn victims(&mut self, needed_bytes: u64) -> Result<Vec<u32>, Error> {
        self.exec.victims(needed_bytes)
    }

    /// Ends the forward pass: `step_order` lists every recorded node, consumers first.
    /// Returns the values to drop now (kept, but read by no step after all).
    ///
    /// # Errors
    /// [`Error::InvalidView`] when the order is not a valid step order for the recorded ops.
    pub fn begin_backward(&mut self, step_order: Vec<u32>) -> Result<&[Action], Error> {
        self.mark = self.exec.actions().len();
        self.exec.begin_backward(step_order)?;
        Ok(&self.exec.actions()[self.mark..])
    }

    /// [`Dtr::begin_backward`] for a `Dtr` resumed over a whole view
    /// ([`Dtr::resume_over_view`]): the view's own step order.
    pub(crate) fn begin_backward_over_view(&mut self) -> &[Action] {
        self.mark = self.exec.actions().len();
        self.exec.begin_backward_over_view();
        &self.exec.actions()[self.mark..]
    }

    /// Runs the next backward step: returns the replays and drops that make room and bring
    /// its reads back, the `Step`, and the values it was the last to read.
    ///
    /// # Errors
    /// [`Error::Infeasible`] (naming [`min_feasible_budget`]) when the budget is below it and
    /// this step cannot fit.
    ///
    /// # Panics
    /// If called before [`Dtr::begin_backward`] or after the last step.
    pub fn on_step(&mut self) -> Result<&[Action], Error> {
        self.mark = self.exec.actions().len();
        assert!(
            self.exec.step_pos() < self.exec.len(),
            "Dtr::on_step called after the last step"
        );
        self.exec.step()?;
        Ok(&self.exec.actions()[self.mark..])
    }

    /// The bytes held now.
    pub fn held_bytes(&self) -> u64 {
        self.exec.held_bytes()
    }

    /// The most bytes held so far.
    pub fn peak_bytes(&self) -> u64 {
        self.exec.peak()
    }

    /// The cost of the replays so far (ns).
    pub fn recompute_cost(&self) -> f64 {
        self.exec.recompute_cost()
    }

    /// Every action so far, as a schedule.
    pub fn into_schedule(self) -> Schedule {
        Schedule::new(self.exec.into_actions())
    }

    /// Runs DTR over a whole view, event by event, as the engine would.
    ///
    /// # Errors
    /// [`Error::Infeasible`] naming [`min_feasible_budget`] when the budget is too small.
    pub fn schedule(view: &GraphView, budget_bytes: u64) -> Result<Schedule, Error> {
        let complete = |e: Error| match e {
            Error::Infeasible { budget_bytes, .. } => Error::Infeasible {
                budget_bytes,
                min_budget_bytes: min_feasible_budget(view),
                lower_bound: false,
            },
            other => other,
        };
        let mut dtr = Dtr::new(budget_bytes);
        for node in view.nodes() {
            dtr.on_compute(node.clone()).map_err(complete)?;
        }
        dtr.begin_backward(view.step_order().to_vec())?;
        for _ in 0..view.len() {
            dtr.on_step().map_err(complete)?;
        }
        Ok(dtr.into_schedule())
    }
}
