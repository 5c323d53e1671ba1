//! Aggregation tree configuration, installed by the controller: one `daiet_trees` entry per
//! tree (tree id → parent port, the tree's slot for per-tree registers, its memory
//! partition, its senders' slots, operation, number of children, this switch's id).

use wire::daiet::Op;

use super::CELLS;

/// Most trees one switch serves at once (per-tree registers).
pub const MAX_TREES: u32 = 64;

/// Decoded `set_tree` entries ([`TreeConfig::decode`]): not a tree (also every other action
/// and a miss).
pub const TREE_NONE: u32 = 0;
/// A tree whose configuration the data path cannot use.
pub const TREE_BAD: u32 = 1;
/// A usable tree (its op in the two low bits).
pub const TREE_USABLE: u32 = 0x100;

/// One tree's configuration, as the `set_tree` action's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeConfig {
    /// Port towards the tree's parent (the next switch or the reducer).
    pub parent_port: u16,
    /// Index of the tree's per-tree registers (< [`MAX_TREES`]).
    pub tree_idx: u16,
    /// First cell of the tree's partition of the key/value arrays and index stack.
    pub part_base: u32,
    /// Cells in the partition (a power of two; the hash is masked to it).
    pub part_size: u32,
    /// First cell of the tree's senders in `seq_state`.
    pub sender_base: u32,
    pub op: Op,
    /// Children (mappers or switches) that send END.
    pub children: u16,
    /// This switch's sender id towards the parent.
    pub switch_id: u16,
    /// Sender ids below this are accepted.
    pub max_senders: u16,
}

impl TreeConfig {
    /// The six action parameters (the last packs op, children, switch id, max senders).
    pub fn params(&self) -> [u64; 6] {
        [
            self.parent_port as u64,
            self.tree_idx as u64,
            self.part_base as u64,
            self.part_size as u64,
            self.sender_base as u64,
            ((self.op as u64) << 48) | ((self.children as u64) << 32) | ((self.switch_id as u64) << 16) | self.max_senders as u64,
        ]
    }

    /// From the parameters of a table hit.
    pub fn from_params(p: &[u64; 6]) -> Option<TreeConfig> {
        Some(TreeConfig {
            parent_port: p[0] as u16,
            tree_idx: p[1] as u16,
            part_base: p[2] as u32,
            part_size: p[3] as u32,
            sender_base: p[4] as u32,
            op: Op::from_u8((p[5] >> 48) as u8)?,
            children: (p[5] >> 32) as u16,
            switch_id: (p[5] >> 16) as u16,
            max_senders: p[5] as u16,
        })
    }

    /// Whether the data path can use this tree: its partition a power of two inside the
    /// arrays, its per-tree slot inside the per-tree registers. (Otherwise its packets are
    /// counted `daiet_bad_tree_config` drops touching no register.) The partition's end in
    /// 64 bits cannot overflow.
    pub fn usable(&self) -> bool {
        self.part_size.is_power_of_two()
            && (self.tree_idx as u32) < MAX_TREES
            && self.part_base as u64 + self.part_size as u64 <= CELLS as u64
    }

    /// `set_tree`'s decoded value, computed once when the controller writes the entry
    /// (`pisa::ProgramBuilder::decode_action`) instead of on every pass: [`TREE_NONE`]
    /// for parameters that are no tree (an unknown op: treated as a miss), [`TREE_BAD`]
    /// for a tree the data path cannot use, else [`TREE_USABLE`] with the op in the low
    /// bits.
    pub fn decode(p: &[u64; 6]) -> u32 {
        match TreeConfig::from_params(p) {
            None => TREE_NONE,
            Some(t) if !t.usable() => TREE_BAD,
            Some(t) => TREE_USABLE | t.op as u32,
        }
    }

    /// Parameter widths of `set_tree`, in bits, with their names.
    pub const PARAMS: [(&'static str, u32); 6] =
        [("parent_port", 9), ("tree_idx", 16), ("part_base", 32), ("part_size", 32), ("sender_base", 32), ("op_children_id_senders", 64)];
}

/// A usable tree's configuration as the data path reads it: the `daiet_trees` hit's
/// parameters in place (borrowed from the table for the pass, as [`TreeConfig::params`]
/// lays them out) and their decoded value, so a pass builds no [`TreeConfig`] and checks
/// nothing the controller's write already checked. Field by field the same values as
/// `TreeConfig::from_params` gives (`tree::tests::tree_view_equals_the_config`).
#[derive(Clone, Copy)]
pub struct Tree<'a> {
    p: &'a [u64; 6],
    d: u32,
}

impl<'a> Tree<'a> {
    /// The tree of a hit whose decoded value `d` is [`TREE_USABLE`] (`None` otherwise).
    #[inline(always)]
    pub fn usable(p: &'a [u64; 6], d: u32) -> Option<Tree<'a>> {
        (d & TREE_USABLE != 0).then_some(Tree { p, d })
    }
    #[inline(always)]
    pub fn parent_port(&self) -> u16 {
        self.p[0] as u16
    }
    #[inline(always)]
    pub fn tree_idx(&self) -> u16 {
        self.p[1] as u16
    }
    #[inline(always)]
    pub fn part_base(&self) -> u32 {
        self.p[2] as u32
    }
    #[inline(always)]
    pub fn part_size(&self) -> u32 {
        self.p[3] as u32
    }
    #[inline(always)]
    pub fn sender_base(&self) -> u32 {
        self.p[4] as u32
    }
    /// From the decoded value (checked when the entry was written).
    #[inline(always)]
    pub fn op(&self) -> Op {
        match self.d & 3 {
            0 => Op::Sum,
            1 => Op::Min,
            _ => Op::Max,
        }
    }
    #[inline(always)]
    pub fn children(&self) -> u16 {
        (self.p[5] >> 32) as u16
    }
    #[inline(always)]
    pub fn switch_id(&self) -> u16 {
        (self.p[5] >> 16) as u16
    }
    #[inline(always)]
    pub fn max_senders(&self) -> u16 {
        self.p[5] as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field of the view equals the decoded config's, for usable configs of every op
    /// and extreme field values; unusable ones decode to `TREE_BAD`, an unknown op to
    /// `TREE_NONE`, and neither gives a view.
    #[test]
    fn tree_view_equals_the_config() {
        for op in [Op::Sum, Op::Min, Op::Max] {
            for (tree_idx, part_base, part_size) in [(0, 0, 1), (63, CELLS - 1, 1), (5, 0, CELLS), (7, 4096, 256)] {
                for (port, senders, children, id) in [(0, 0, 0, 0), (511, u16::MAX, u16::MAX, u16::MAX), (3, 17, 2, 9)] {
                    let c = TreeConfig {
                        parent_port: port,
                        tree_idx,
                        part_base,
                        part_size,
                        sender_base: u32::MAX - 3,
                        op,
                        children,
                        switch_id: id,
                        max_senders: senders,
                    };
                    let p = c.params();
                    let d = TreeConfig::decode(&p);
                    assert_eq!(d, TREE_USABLE | op as u32);
                    let t = Tree::usable(&p, d).expect("usable");
                    let back = TreeConfig {
                        parent_port: t.parent_port(),
                        tree_idx: t.tree_idx(),
                        part_base: t.part_base(),
                        part_size: t.part_size(),
                        sender_base: t.sender_base(),
                        op: t.op(),
                        children: t.children(),
                        switch_id: t.switch_id(),
                        max_senders: t.max_senders(),
                    };
                    assert_eq!(Some(back), TreeConfig::from_params(&p));
                }
            }
        }
        let ok = TreeConfig {
            parent_port: 1,
            tree_idx: 0,
            part_base: 0,
            part_size: 16,
            sender_base: 0,
            op: Op::Sum,
            children: 1,
            switch_id: 1,
            max_senders: 4,
        };
        for bad in [
            TreeConfig { part_size: 0, ..ok },
            TreeConfig { part_size: 12, ..ok },
            TreeConfig { tree_idx: MAX_TREES as u16, ..ok },
            TreeConfig { part_base: CELLS - 8, ..ok },
            TreeConfig { part_base: u32::MAX, part_size: 1 << 31, ..ok },
        ] {
            let p = bad.params();
            assert_eq!(TreeConfig::decode(&p), TREE_BAD, "{bad:?}");
            assert!(Tree::usable(&p, TREE_BAD).is_none());
        }
        let mut p = ok.params();
        p[5] |= 3 << 48; // op 3: none
        assert_eq!(TreeConfig::decode(&p), TREE_NONE);
        assert!(Tree::usable(&p, TREE_NONE).is_none());
    }
}
