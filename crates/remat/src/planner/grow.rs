//! NOTE [gentle-growth]: the lists a step holds op by op (the online planner's nodes and
//! per-value state, the budget session's handles and ids) grow by a quarter when full, not
//! by doubling. They are the bookkeeping of a graph's first step under a budget, held
//! beside every kept value until backward starts, and doubling left up to half of each
//! empty: Burn's `Lstm` over 128 steps records 4,737 ops, and its lists had room for 8,192
//! (0.36 MB of the planner's nodes alone, where SaveAll's whole step peaks at 6.0 MB).
//! Growing by a quarter leaves at most a fifth empty, for a few more reallocations (of
//! large blocks, which the system allocator moves by remapping pages, not copying).
//!
//! Cost model: amortized O(1) per element, as doubling.

/// Makes room in `list` for at least `len` elements: when its capacity is short, at least
/// a quarter more than it was (and at least 16).
pub(crate) fn room_for<T>(list: &mut Vec<T>, len: usize) {
    let capacity = list.capacity();
    if len > capacity {
        let target = len.max(capacity + capacity / 4).max(16);
        list.reserve_exact(target - list.len());
    }
}

/// Appends `value` to `list`, growing it as [`room_for`] does.
pub(crate) fn push<T>(list: &mut Vec<T>, value: T) {
    room_for(list, list.len() + 1);
    list.push(value);
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_full_list_grows_by_a_quarter_and_keeps_its_elements() {
        let mut list: Vec<u32> = Vec::new();
        for k in 0..1_000u32 {
            super::push(&mut list, k);
            assert!(list.capacity() >= list.len());
            // At most a fifth empty once past the first 16.
            if list.len() > 16 {
                assert!(
                    list.capacity() * 4 <= list.len() * 5 + 4,
                    "{} of {}",
                    list.len(),
                    list.capacity()
                );
            }
        }
        assert!(list.iter().copied().eq(0..1_000));
        let mut wide: Vec<u8> = Vec::with_capacity(100);
        super::room_for(&mut wide, 101);
        assert!(wide.capacity() >= 125);
        super::room_for(&mut wide, 1_000);
        assert!(wide.capacity() >= 1_000);
    }
}
