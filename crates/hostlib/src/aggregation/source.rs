//! Where a mapper's pairs come from: [`PairSource`], read tree by tree and again from the
//! start, so the mapper builds its packets as its window advances instead of all up front
//! (a WordCount mapper without a combiner has one pair per word of its input).

use super::Error;

/// A mapper's pairs, per tree, in a fixed order that can be read again from the start: a
/// fallback to host-side aggregation (RESEND) sends a tree's pairs once more.
pub trait PairSource {
    /// Number of trees (tree indexes are `0..trees()`).
    fn trees(&self) -> usize;
    /// Start tree `tree`'s pairs again from the first.
    fn rewind(&mut self, tree: usize) -> Result<(), Error>;
    /// Tree `tree`'s next pair: its key replaces `key`'s contents and its value is returned;
    /// `None` once the tree's pairs are over. An error (I/O, a malformed file:
    /// [`Error::Source`]) ends the run.
    fn next_pair(&mut self, tree: usize, key: &mut Vec<u8>) -> Result<Option<u32>, Error>;
}

/// Pairs held in memory: pair `j` is `keys[offsets[j]..offsets[j+1]]` with `values[j]`, of
/// tree index `tree_of_pair[j]`.
pub struct MemPairs {
    keys: Vec<u8>,
    offsets: Vec<u64>,
    values: Vec<u32>,
    tree_of_pair: Vec<u16>,
    /// Per tree, the next pair index to look at.
    cursor: Vec<usize>,
}

impl MemPairs {
    /// Checks the arrays' shapes (what `Mapper::new` refused before it used them).
    pub fn new(trees: usize, keys: Vec<u8>, offsets: Vec<u64>, values: Vec<u32>, tree_of_pair: Vec<u16>) -> Result<MemPairs, Error> {
        let n = values.len();
        if offsets.len() != n + 1 || tree_of_pair.len() != n {
            return Err(Error::Shape { values: n, offsets: offsets.len(), tree_indexes: tree_of_pair.len() });
        }
        if offsets.windows(2).any(|w| w[0] > w[1]) || offsets.last().copied().unwrap_or(0) as usize > keys.len() {
            return Err(Error::Offsets);
        }
        if let Some(&t) = tree_of_pair.iter().find(|&&t| t as usize >= trees) {
            return Err(Error::TreeIndex { index: t, trees });
        }
        Ok(MemPairs { keys, offsets, values, tree_of_pair, cursor: vec![0; trees] })
    }
}

impl PairSource for MemPairs {
    fn trees(&self) -> usize {
        self.cursor.len()
    }

    fn rewind(&mut self, tree: usize) -> Result<(), Error> {
        self.cursor[tree] = 0;
        Ok(())
    }

    fn next_pair(&mut self, tree: usize, key: &mut Vec<u8>) -> Result<Option<u32>, Error> {
        let mut j = self.cursor[tree];
        while j < self.values.len() && self.tree_of_pair[j] as usize != tree {
            j += 1;
        }
        if j == self.values.len() {
            self.cursor[tree] = j;
            return Ok(None);
        }
        self.cursor[tree] = j + 1;
        key.clear();
        key.extend_from_slice(&self.keys[self.offsets[j] as usize..self.offsets[j + 1] as usize]);
        Ok(Some(self.values[j]))
    }
}

/// What a source holds, counted in one pass before anything is sent.
#[derive(Debug, Clone, Default)]
pub struct Census {
    /// Pairs per tree.
    pub pairs: Vec<u64>,
}

/// Read every tree once (then rewind it): count its pairs and refuse a key `check` refuses
/// (a key the protocol cannot carry is refused before the first packet, never truncated).
pub fn census<S: PairSource>(src: &mut S, check: impl Fn(usize) -> Result<(), Error>) -> Result<Census, Error> {
    let mut c = Census { pairs: vec![0; src.trees()] };
    let mut key = Vec::new();
    for t in 0..src.trees() {
        src.rewind(t)?;
        while src.next_pair(t, &mut key)?.is_some() {
            check(key.len())?;
            c.pairs[t] += 1;
        }
        src.rewind(t)?;
    }
    Ok(c)
}
