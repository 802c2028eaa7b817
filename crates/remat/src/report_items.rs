//! The plain items of the reports that the budget fills in as well: a dropped value and the
//! byte formatting. A bottom module (it names nothing of the crate), so that the budget
//! (`checkpoint::budget`) and the reports (`stats`, which ask the budget what it dropped)
//! do not name each other.

/// A value a [`Policy::Budget`](crate::Policy::Budget) dropped on this thread: a backward
/// step (or a replay) will read it, and it is rebuilt then. Listed by
/// [`SavedValues::dropped`](crate::SavedValues::dropped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DroppedValue {
    /// The op that produced it.
    pub op: &'static str,
    /// Its size in bytes.
    pub bytes: u64,
}

/// Formats a byte count with a binary unit (`512 B`, `1.5 MiB`), as the reports do.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
