//! Aggregation tree configuration, installed by the controller: one `daiet_trees` entry per
//! tree (tree id → parent port, the tree's slot for per-tree registers, its memory
//! partition, its senders' slots, operation, number of children, this switch's id).

use wire::daiet::Op;

/// Most trees one switch serves at once (per-tree registers).
pub const MAX_TREES: u32 = 64;

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

    /// Parameter widths of `set_tree`, in bits, with their names.
    pub const PARAMS: [(&'static str, u32); 6] =
        [("parent_port", 9), ("tree_idx", 16), ("part_base", 32), ("part_size", 32), ("sender_base", 32), ("op_children_id_senders", 64)];
}
