//! The configuration module (SwitchAgg §4.2.2): per aggregation tree, its parent port,
//! number of children and operation, and its share of every engine's memory — the
//! memory is divided evenly among the trees ("each tree will occupy half of the memory"
//! with two), each tree addressing its region from a base pointer.

/// A tree's region of an engine memory of `words` words: (base, words) for tree slot
/// `region` of `regions`; None when misconfigured.
#[inline]
pub fn region(words: u32, region: u32, regions: u32) -> Option<(u32, u32)> {
    if regions == 0 || region >= regions {
        return None;
    }
    let per = words / regions;
    if per == 0 {
        return None;
    }
    Some((region * per, per))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_split() {
        assert_eq!(region(100, 0, 2), Some((0, 50)));
        assert_eq!(region(100, 1, 2), Some((50, 50)));
        assert_eq!(region(100, 2, 2), None);
        assert_eq!(region(1, 0, 2), None);
    }
}
