//! Lanes: the same register action (or hash) on several objects of one stage, run as one
//! step of a pass.
//!
//! A program that handles several items per pass gives each item position its own
//! register array in every stage it uses (Tofino 1 has four stateful ALUs per stage: four
//! arrays, four items). Those arrays sit side by side in one stage and run the same
//! action, each on its own index: "lanes". Running them through [`Pass::execute_lanes`]
//! instead of one `execute` each is a cost of the model only, not of the switch: the
//! guard checks the whole group at once (one stage, the lanes' objects all unused), and
//! the lanes then run back to back. The rules are the same: every lane's array is reached
//! at most once in the pass and only in stage order; if the group cannot enter as a
//! whole, its lanes run one by one through the ordinary checks, so a violation is found
//! and recorded exactly as separate accesses would record it.
//!
//! [`Pass::execute_lanes`]: crate::pass::Pass::execute_lanes

use crate::base::ObjRef;
use crate::decl::HashUnit;
use crate::register::{Cell, RegisterAction};

/// Why lanes cannot be made of the given objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LanesError {
    /// The objects are not all in one stage of one gress.
    NotOneStage,
    /// Two lanes are the same object (it could not run twice in one pass).
    SameObject,
    /// More lanes than a stage has stateful ALUs or hash units ([`MAX_LANES`]).
    TooMany,
    /// Hash lanes must compute the same hash (algorithm and width).
    NotTheSameHash,
}

/// At most this many lanes: a Tofino stage has four stateful ALUs.
pub const MAX_LANES: usize = 4;

impl std::fmt::Display for LanesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LanesError::NotOneStage => write!(f, "lanes must all be in one stage of one gress"),
            LanesError::SameObject => write!(f, "two lanes are the same object"),
            LanesError::TooMany => write!(f, "more than {MAX_LANES} lanes"),
            LanesError::NotTheSameHash => write!(f, "hash lanes must use the same algorithm and width"),
        }
    }
}

impl std::error::Error for LanesError {}

/// The stage position shared by `objs`, checked: one stage, distinct objects, at most
/// [`MAX_LANES`]; and the guard bits of every subset of lanes (index: bit `i` for lane `i`).
fn one_stage(objs: &[ObjRef]) -> Result<(u16, [u64; 1 << MAX_LANES]), LanesError> {
    if objs.len() > MAX_LANES {
        return Err(LanesError::TooMany);
    }
    let mut pos = None;
    let mut bits = 0u64;
    for o in objs {
        if *pos.get_or_insert(o.pos) != o.pos {
            return Err(LanesError::NotOneStage);
        }
        if bits & o.bit != 0 {
            return Err(LanesError::SameObject);
        }
        bits |= o.bit;
    }
    let pos = pos.ok_or(LanesError::NotOneStage)?;
    let by_mask = std::array::from_fn(|m| objs.iter().enumerate().filter(|(i, _)| m >> i & 1 != 0).fold(0, |b, (_, o)| b | o.bit));
    Ok((pos, by_mask))
}

/// `N` register actions with the same body on `N` distinct arrays of one stage.
pub struct RegisterLanes<T: Cell, I, O, B, const N: usize> {
    pub(crate) acts: [RegisterAction<T, I, O, B>; N],
    pub(crate) pos: u16,
    /// Guard bits of each subset of lanes.
    by_mask: [u64; 1 << MAX_LANES],
}

impl<T: Cell, I, O, B: Copy, const N: usize> Clone for RegisterLanes<T, I, O, B, N> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Cell, I, O, B: Copy, const N: usize> Copy for RegisterLanes<T, I, O, B, N> {}

impl<T: Cell, I, O, B: Copy, const N: usize> RegisterLanes<T, I, O, B, N> {
    /// Lanes of `acts` (lane `i` is `acts[i]`): one stage, distinct arrays.
    pub fn new(acts: [RegisterAction<T, I, O, B>; N]) -> Result<Self, LanesError> {
        let (pos, by_mask) = one_stage(&acts.map(|a| a.reg.obj))?;
        Ok(RegisterLanes { acts, pos, by_mask })
    }
    /// Lane `i`'s register action.
    pub fn lane(&self, i: usize) -> &RegisterAction<T, I, O, B> {
        &self.acts[i]
    }
    /// The guard bits of the lanes in `active` (bit `i`: lane `i`; higher bits ignored).
    #[inline(always)]
    pub(crate) fn bits(&self, active: u32) -> u64 {
        self.by_mask[active as usize & ((1 << N) - 1)]
    }
}

/// `N` distinct hash units of one stage.
#[derive(Clone, Copy, Debug)]
pub struct HashLanes<const N: usize> {
    pub(crate) units: [HashUnit; N],
    pub(crate) pos: u16,
    by_mask: [u64; 1 << MAX_LANES],
}

impl<const N: usize> HashLanes<N> {
    /// Lanes of `units`: one stage, distinct units, the same algorithm and width.
    pub fn new(units: [HashUnit; N]) -> Result<Self, LanesError> {
        let (pos, by_mask) = one_stage(&units.map(|h| h.obj))?;
        if units.iter().any(|u| u.algo != units[0].algo || u.mask != units[0].mask) {
            return Err(LanesError::NotTheSameHash);
        }
        Ok(HashLanes { units, pos, by_mask })
    }
    pub fn lane(&self, i: usize) -> &HashUnit {
        &self.units[i]
    }
    #[inline(always)]
    pub(crate) fn bits(&self, active: u32) -> u64 {
        self.by_mask[active as usize & ((1 << N) - 1)]
    }
}
