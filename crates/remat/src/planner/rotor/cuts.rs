//! The levels of a chain's DP: its stages as leaf items, and consecutive items grouped into
//! items solved by their own level (NOTE \[rotor\] in `mod.rs`), cut from the stages up or
//! from the root down; groups of the same items share one level.
//!
//! NOTE [group-owned]: a group's owned and absent forms come from its own level, whose
//! first item gains the bytes of the group's input where it frees it (the boundary before
//! the group; nothing for the chain's input, a leaf). Before, a group took its input
//! pinned from its parent whatever the parent's table, and freed it after its whole
//! backward (200 blocks of (matmul, add, GELU), one slot above the smallest budget:
//! 394,670 -> 394,430 replayed; small, but the model is now the same at every level).
//! Groups of the same items with inputs of different units are solved apart.
//!
//! NOTE [level-cuts]: where groups are cut decides where the root's checkpoints can sit,
//! and how many levels deep a tight budget must keep boundaries. Cut from the stages up
//! (groups of [`GROUP`] stages, then groups of those), a chain of a little more than
//! [`GROUP`]^2 stages had a root of two items and three levels: 1,000 blocks of (matmul,
//! add, GELU) one slot above the smallest budget found no plan in the levels, and the run
//! (whole blocks) replayed 51.5M, a quadratic schedule. Near the smallest budget (room for
//! at most [`TIGHT_CUTS`] boundaries) the chain is now cut three ways and the cheapest
//! kept: from the stages up in groups of [`GROUP`] and of two thirds of it, and from the
//! root down (the root takes [`GROUP`] groups, each cut the same way within; on a
//! repeating chain, whose equal groups share one DP, the root's groups are whole periods
//! and each is one flat level where it has at most [`FLAT_GROUP`] stages). Measured
//! against one flat level over the whole chain (the chain model's optimum): 200 blocks at 1/2/4 slots 1.15/1.18/1.03x ->
//! 1.07/1.05/1.03x; 100 blocks 1.28/1.08/1.02x -> 1.13/1.08/1.02x; 1,000 blocks at one slot
//! 51.5M -> 4.43M replayed (43 forward passes), two slots 2.30M -> 2.04M. Planning the
//! levels three ways costs about 2x where it applies; with more room the cuts differed by
//! under 0.1% on these chains and one is solved. On a repeating chain the root takes more
//! than [`GROUP`] items (at most [`FLAT`]) where that keeps its groups flat, and a root of
//! [`FLAT`] items is a fourth cut: one slot above the smallest budget, where a group of two
//! levels finds no plan, 2,000 blocks 500 -> 67.4 forward passes (the executor's best 71.1)
//! and 4,000 blocks 500 -> 92.5 (101.4); at two slots the finer root places the root's
//! checkpoints better, 1,000 blocks 19.8 -> 15.6 (17.2), 1,700 blocks 23.4 -> 20.6 (21.0).
//! The price is planner memory while it plans: a root of [`FLAT`] items holds `2 FLAT^2
//! (m + 1)` entries (63 MB at 160 units, 32 MB at 80), as a run's six tables do (75 MB).
//! Past [`FLAT`] root groups of [`FLAT`] stages (5,461 blocks of three stages) a root group
//! takes two levels again and one slot above the smallest budget the levels find no plan
//! (6,000 blocks: the lean chain schedule 504 forward passes, the executor's 124.7, which
//! `plan` keeps).

use std::collections::HashMap;
use std::sync::Arc;

use super::level::{INF, Item, Kind, Level, Scale, inner_for, inner_without_input};
use crate::planner::SignatureHasher;
use crate::planner::blocks::Stages;

/// The most items one DP level takes in a grouped chain.
pub(super) const GROUP: usize = 48;

/// The most stages a chain solved in one level has (O(n^3 m / 6): 128 stages at 160
/// units is 56 million steps).
pub(super) const FLAT: usize = 128;

/// Room for at most this many of the chain's largest boundaries is tight: the chain's
/// groups are cut three ways (NOTE \[level-cuts\]).
pub(super) const TIGHT_CUTS: usize = 8;

/// The most stages of a root group of a repeating chain solved as one flat level (NOTE
/// \[level-cuts\]): its tables take at most 16 MB at 160 units, and a chain has a few such
/// groups (the first, the last, the one with its head).
pub(super) const FLAT_GROUP: usize = 64;

/// The leaf items of `stages` under `scale`.
pub(super) fn stage_items(stages: &Stages, scale: Scale) -> Vec<Item> {
    let width = scale.m_max + 1;
    type Curves = (Arc<[f64]>, Arc<[f64]>, Arc<[f64]>);
    let mut curves: HashMap<u64, Curves> = HashMap::new();
    (0..stages.len())
        .map(|k| {
            let shape = stages.shape[k].clone();
            let (rev, top, top_absent) = curves
                .entry(stages.key[k])
                .or_insert_with(|| {
                    let curve = |rev: bool| -> Arc<[f64]> {
                        (0..width)
                            .map(|m| inner_for(&shape, m, rev, scale).map_or(INF, |(_, c)| c))
                            .collect()
                    };
                    let absent: Arc<[f64]> = (0..width)
                        .map(|m| inner_without_input(&shape, m, scale).map_or(INF, |(_, c)| c))
                        .collect();
                    (curve(true), curve(false), absent)
                })
                .clone();
            Item {
                first: k,
                stages: 1,
                key: stages.key[k],
                boundary: shape.boundary,
                boundary_units: scale.units(shape.boundary),
                fixed: shape.fixed,
                sweep_cost: shape.sweep.cost,
                sweep_first: scale.units(shape.sweep.peak),
                sweep_later: scale.units(shape.sweep_through_peak),
                kind: Kind::Stage(shape),
                rev_owned: rev.clone(),
                top_owned: top.clone(),
                top_absent,
                rev,
                top,
            }
        })
        .collect()
}

/// The levels of the DP over `stages` (see NOTE \[rotor\]), at most `group` items each,
/// cut from the stages up or from the root down (NOTE \[level-cuts\]); returns the root.
pub(super) fn build(stages: &Stages, scale: Scale, how: Cut) -> Arc<Level> {
    let mut items = stage_items(stages, scale);
    let mut solved = HashMap::new();
    match how {
        Cut::BottomUp(group) => {
            while items.len() > group {
                let groups = items.len().div_ceil(group);
                let size = items.len().div_ceil(groups);
                items = cut(&items, size, None, scale, 0, &mut solved);
            }
        }
        Cut::TopDown { top, period } => {
            // Equal groups share one DP: the root's groups of a repeating chain start at the
            // same place in its period, and each is one flat level where it has at most
            // `FLAT_GROUP` stages.
            let size = items.len().div_ceil(top).next_multiple_of(period);
            let inner = if period > 1 && size <= FLAT_GROUP {
                FLAT_GROUP
            } else {
                top
            };
            if items.len() > top {
                items = cut(&items, size, Some(inner), scale, 0, &mut solved);
            }
        }
    }
    Arc::new(Level::solve(items, scale, 0))
}

/// How a chain's stages are cut into groups (NOTE \[level-cuts\]).
#[derive(Clone, Copy, Debug)]
pub(super) enum Cut {
    /// Groups of at most this many stages, then groups of those, until a level takes them.
    BottomUp(usize),
    /// At most `top` items at the root, each a group of a whole number of `period`s of
    /// stages (one flat level on a repeating chain where it is short enough), else cut the
    /// same way within.
    TopDown { top: usize, period: usize },
}

/// `items` cut into groups of `size` consecutive items (the last may be shorter), each
/// solved by its own level, cut within into levels of at most `within` items where given
/// (NOTE \[level-cuts\]). `input`: the units of the boundary before `items`.
fn cut(
    items: &[Item],
    size: usize,
    within: Option<usize>,
    scale: Scale,
    input: usize,
    solved: &mut Solutions,
) -> Vec<Item> {
    let mut input = input;
    let mut out = Vec::new();
    for chunk in items.chunks(size) {
        let inner = match within {
            Some(inner) => level_items(chunk, inner, scale, input, solved),
            None => chunk.to_vec(),
        };
        // A group's input is the boundary of the item before it; the first group's is the
        // chain's input, a leaf whose freeing gains nothing (NOTE [group-owned]).
        let item = match &inner[..] {
            [one] => one.clone(),
            _ => group_item(&inner, scale, input, solved),
        };
        input = ((item.boundary / scale.unit) as usize).min(scale.m_max);
        out.push(item);
    }
    out
}

/// The items of one level over `items`, at most `group`, cut from the top: as many groups
/// as the level takes, each cut the same way within (NOTE \[level-cuts\]). `input`: the
/// units of the boundary before `items`.
fn level_items(
    items: &[Item],
    group: usize,
    scale: Scale,
    input: usize,
    solved: &mut Solutions,
) -> Vec<Item> {
    if items.len() <= group {
        return items.to_vec();
    }
    let size = items.len().div_ceil(group);
    cut(items, size, Some(group), scale, input, solved)
}

/// Levels solved for groups, by their items' keys and input units.
pub(super) type Solutions = HashMap<(Vec<u64>, usize), Arc<Level>>;

/// One item for the consecutive `chunk`, solved by its own level (shared by equal chunks
/// with inputs of the same units), whose input gains `input_units` where freed.
pub(super) fn group_item(
    chunk: &[Item],
    scale: Scale,
    input_units: usize,
    solved: &mut Solutions,
) -> Item {
    let keys: Vec<u64> = chunk.iter().map(|item| item.key).collect();
    let key = group_key(&keys);
    let first = chunk[0].first;
    let level = solved
        .entry((keys, input_units))
        .or_insert_with(|| {
            let relative = chunk
                .iter()
                .map(|item| Item {
                    first: item.first - first,
                    ..item.clone()
                })
                .collect();
            Arc::new(Level::solve(relative, scale, input_units))
        })
        .clone();
    let last = chunk.last().expect("chunks are not empty");
    let width = scale.m_max + 1;
    let t = level.n() - 1;
    let revs = |table: &[f64]| -> Arc<[f64]> {
        (0..width)
            .map(|m| table[level.rev_at(0, t, m, scale)])
            .collect()
    };
    let tops = |table: &[f64]| -> Arc<[f64]> {
        (0..width)
            .map(|m| table[level.top_at(0, m, scale)])
            .collect()
    };
    Item {
        first,
        stages: chunk.iter().map(|item| item.stages).sum(),
        key,
        boundary: last.boundary,
        boundary_units: last.boundary_units,
        fixed: chunk.iter().map(|item| item.fixed).sum(),
        sweep_cost: chunk.iter().map(|item| item.sweep_cost).sum(),
        sweep_first: chunk
            .iter()
            .skip(1)
            .map(|item| item.sweep_later)
            .fold(chunk[0].sweep_first, usize::max),
        sweep_later: chunk.iter().map(|item| item.sweep_later).max().unwrap_or(0),
        rev: revs(&level.rev),
        top: tops(&level.top),
        rev_owned: revs(&level.rev_owned),
        top_owned: tops(&level.top_owned),
        top_absent: tops(&level.top_absent),
        kind: Kind::Group(level),
    }
}

/// A key for a group of items with these keys (the signatures' hash).
pub(super) fn group_key(keys: &[u64]) -> u64 {
    let mut hasher = SignatureHasher::new();
    for &key in keys {
        hasher.word(key);
    }
    hasher.prefix()
}
