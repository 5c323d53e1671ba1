//! The payload analyzer (SwitchAgg §4.2.3): assigns each key-value pair to a group by key
//! length, and so to the front-end processing engine (FPE) of that group.
//!
//! Keys of 1..=64 bytes fall in eight groups of 8 bytes each (§5: "8 Groups, with an
//! inferior limit of 8B and an upper limit of 64B"): group `g` holds lengths
//! `8g+1 ..= 8g+8`, stored in slots of `8(g+1)` bytes padded with zeros. Longer keys belong
//! to no group: they bypass aggregation and travel on intact.

/// Groups, hence FPEs.
pub const GROUPS: usize = 8;
/// The base `B` of the group division, bytes.
pub const GROUP_BASE: usize = 8;
/// Longest key an engine stores.
pub const MAX_GROUPED_KEY: usize = GROUPS * GROUP_BASE;

/// The group of a key of `len` bytes; None for an empty key or one longer than 64 bytes.
#[inline]
pub fn group_of(len: usize) -> Option<usize> {
    if len == 0 || len > MAX_GROUPED_KEY {
        None
    } else {
        Some((len - 1) / GROUP_BASE)
    }
}

/// Slot size, in key bytes, of group `g`.
#[inline]
pub const fn slot_len(g: usize) -> usize {
    GROUP_BASE * (g + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_cover_8_to_64_bytes() {
        assert_eq!(group_of(0), None);
        assert_eq!(group_of(1), Some(0));
        assert_eq!(group_of(8), Some(0));
        assert_eq!(group_of(9), Some(1));
        assert_eq!(group_of(64), Some(7));
        assert_eq!(group_of(65), None);
        for len in 1..=64 {
            let g = group_of(len).unwrap();
            assert!(len <= slot_len(g) && len > slot_len(g) - GROUP_BASE);
        }
    }
}
