//! Action profiles and action selectors (P4's `action_profile` / `action_selector`, P4Runtime's
//! `ActionProfileMember` and `ActionProfileGroup`).
//!
//! A table *implemented by* a profile holds no actions of its own: each entry points at a
//! member (an action with its data) or at a group of members. On a group the selector picks
//! one member by a hash of the packet's fields (the 5-tuple for ECMP), computed by one of its
//! stage's hash units, so every packet of a flow takes the same member and flows spread over
//! the group. Members and groups change only through the control plane.
//!
//! In the table an indirect entry is stored as a reserved action ([`MEMBER_REF`] or
//! [`GROUP_REF`]) whose first parameter is the member or group id; [`Pass::select`]
//! (crate::Pass::select) turns it into the member's action.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::control::{ControlError, WriteOp};
use crate::decl::{ActionId, HashUnit, MAX_ACTION_PARAMS};
use crate::table::TableResult;

/// The stored action of a table entry that points at a member (parameter 0: member id).
pub const MEMBER_REF: ActionId = ActionId(u16::MAX - 1);
/// The stored action of a table entry that points at a group (parameter 0: group id).
pub const GROUP_REF: ActionId = ActionId(u16::MAX - 2);

/// Whether `a` is one of the reserved indirect actions.
pub fn is_ref(a: ActionId) -> bool {
    a == MEMBER_REF || a == GROUP_REF
}

/// Most members one group may list (a weight counts as that many members).
pub const MAX_GROUP_SLOTS: u32 = 4096;

/// An action profile as declared.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ActionProfileDecl {
    pub name: String,
    pub doc: String,
    /// Indices of the tables it implements.
    pub tables: Vec<u16>,
    /// Most members.
    pub size: u32,
    /// Most members in one group; 0 for a profile without a selector (no groups).
    pub max_group_size: u32,
    /// The hash unit (index among the program's) its selector uses.
    pub hash_unit: Option<u16>,
}

/// Handle to an action selector, for [`crate::Pass::select`].
#[derive(Clone, Copy, Debug)]
pub struct ActionSelector {
    pub(crate) idx: u16,
    pub(crate) hash: HashUnit,
}

/// Which member or group a table entry points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndirectRef {
    Member(u32),
    Group(u32),
}

impl IndirectRef {
    /// The reserved action and its parameter, as stored in the table.
    pub fn stored(self) -> (ActionId, [u64; 1]) {
        match self {
            IndirectRef::Member(m) => (MEMBER_REF, [m as u64]),
            IndirectRef::Group(g) => (GROUP_REF, [g as u64]),
        }
    }

    /// The reference a stored entry holds, if it is an indirect one.
    pub fn of_stored(action: ActionId, params: &[u64]) -> Option<IndirectRef> {
        let id = params.first().copied().unwrap_or(0) as u32;
        match action {
            MEMBER_REF => Some(IndirectRef::Member(id)),
            GROUP_REF => Some(IndirectRef::Group(id)),
            _ => None,
        }
    }
}

struct Member {
    action: ActionId,
    params: [u64; MAX_ACTION_PARAMS],
}

struct Group {
    /// As written: (member id, weight).
    members: Vec<(u32, u32)>,
    /// The selection list: each member id `weight` times, in the written order.
    slots: Vec<u32>,
}

/// One profile's members and groups in one pipe.
pub struct ProfileState {
    name: String,
    size: u32,
    max_group_size: u32,
    members: BTreeMap<u32, Member>,
    groups: BTreeMap<u32, Group>,
}

/// A member as read back: id, action (program-local), parameters.
pub type MemberRead = (u32, ActionId, Vec<u64>);
/// A group as read back: id, (member id, weight) in the written order.
pub type GroupRead = (u32, Vec<(u32, u32)>);

impl ProfileState {
    pub fn new(decl: &ActionProfileDecl) -> ProfileState {
        ProfileState {
            name: decl.name.clone(),
            size: decl.size,
            max_group_size: decl.max_group_size,
            members: BTreeMap::new(),
            groups: BTreeMap::new(),
        }
    }

    /// Insert, modify or delete a member. `in_use` says whether a table entry points at it
    /// (checked by the caller, who has the tables).
    pub fn write_member(&mut self, op: WriteOp, id: u32, action: ActionId, params: &[u64], in_use: bool) -> Result<(), ControlError> {
        let name = &self.name;
        let mut p = [0u64; MAX_ACTION_PARAMS];
        for (d, s) in p.iter_mut().zip(params) {
            *d = *s;
        }
        match op {
            WriteOp::Insert if self.members.contains_key(&id) => {
                Err(ControlError::AlreadyExists(format!("action profile {name}: member {id} exists")))
            }
            WriteOp::Insert if self.members.len() as u32 >= self.size => {
                Err(ControlError::ResourceExhausted(format!("action profile {name} is full ({} members)", self.size)))
            }
            WriteOp::Insert | WriteOp::Modify => {
                if op == WriteOp::Modify && !self.members.contains_key(&id) {
                    return Err(ControlError::NotFound(format!("action profile {name}: no member {id}")));
                }
                self.members.insert(id, Member { action, params: p });
                Ok(())
            }
            WriteOp::Delete => {
                if !self.members.contains_key(&id) {
                    return Err(ControlError::NotFound(format!("action profile {name}: no member {id}")));
                }
                if let Some((g, _)) = self.groups.iter().find(|(_, g)| g.members.iter().any(|(m, _)| *m == id)) {
                    return Err(ControlError::InvalidArgument(format!("action profile {name}: member {id} is in group {g}")));
                }
                if in_use {
                    return Err(ControlError::InvalidArgument(format!("action profile {name}: a table entry points at member {id}")));
                }
                self.members.remove(&id);
                Ok(())
            }
        }
    }

    /// Insert, modify or delete a group of (member, weight).
    pub fn write_group(&mut self, op: WriteOp, id: u32, members: &[(u32, u32)], in_use: bool) -> Result<(), ControlError> {
        let name = &self.name;
        if self.max_group_size == 0 {
            return Err(ControlError::InvalidArgument(format!("action profile {name} has no selector, hence no groups")));
        }
        if op == WriteOp::Delete {
            if !self.groups.contains_key(&id) {
                return Err(ControlError::NotFound(format!("action profile {name}: no group {id}")));
            }
            if in_use {
                return Err(ControlError::InvalidArgument(format!("action profile {name}: a table entry points at group {id}")));
            }
            self.groups.remove(&id);
            return Ok(());
        }
        match (op, self.groups.contains_key(&id)) {
            (WriteOp::Insert, true) => return Err(ControlError::AlreadyExists(format!("action profile {name}: group {id} exists"))),
            (WriteOp::Modify, false) => return Err(ControlError::NotFound(format!("action profile {name}: no group {id}"))),
            _ => {}
        }
        let mut slots = Vec::new();
        for (i, &(m, w)) in members.iter().enumerate() {
            if !self.members.contains_key(&m) {
                return Err(ControlError::NotFound(format!("action profile {name}: group {id} lists member {m}, which does not exist")));
            }
            if members[..i].iter().any(|(o, _)| *o == m) {
                return Err(ControlError::InvalidArgument(format!("action profile {name}: group {id} lists member {m} twice")));
            }
            if w == 0 {
                return Err(ControlError::InvalidArgument(format!("action profile {name}: member {m} of group {id} has weight 0")));
            }
            if slots.len() as u64 + w as u64 > MAX_GROUP_SLOTS as u64 {
                return Err(ControlError::ResourceExhausted(format!("action profile {name}: group {id} weighs over {MAX_GROUP_SLOTS}")));
            }
            slots.extend(std::iter::repeat_n(m, w as usize));
        }
        if members.len() as u32 > self.max_group_size {
            return Err(ControlError::ResourceExhausted(format!(
                "action profile {name}: group {id} has {} members, at most {}",
                members.len(),
                self.max_group_size
            )));
        }
        if op == WriteOp::Insert && self.groups.len() as u32 >= self.size {
            return Err(ControlError::ResourceExhausted(format!("action profile {name} is full ({} groups)", self.size)));
        }
        self.groups.insert(id, Group { members: members.to_vec(), slots });
        Ok(())
    }

    /// Whether a member (or group) exists, for a table entry about to point at it.
    pub fn check_ref(&self, r: IndirectRef) -> Result<(), ControlError> {
        let ok = match r {
            IndirectRef::Member(m) => self.members.contains_key(&m),
            IndirectRef::Group(g) => self.max_group_size > 0 && self.groups.contains_key(&g),
        };
        if ok {
            Ok(())
        } else {
            Err(ControlError::NotFound(format!("action profile {}: no {:?}", self.name, r)))
        }
    }

    pub fn members(&self) -> Vec<MemberRead> {
        self.members.iter().map(|(id, m)| (*id, m.action, m.params.to_vec())).collect()
    }

    pub fn groups(&self) -> Vec<GroupRead> {
        self.groups.iter().map(|(id, g)| (*id, g.members.clone())).collect()
    }

    pub fn clear(&mut self) {
        self.members.clear();
        self.groups.clear();
    }

    /// The member a table hit resolves to; `hash` (the selector's hash of the packet) is
    /// computed only for a group. A miss, an empty group or a dangling id misses.
    #[inline]
    pub fn resolve<'a>(&'a self, r: TableResult<'a>, hash: impl FnOnce() -> u32) -> TableResult<'a> {
        if !r.hit {
            return r;
        }
        let member = match r.action {
            MEMBER_REF => r.param(0) as u32,
            GROUP_REF => match self.groups.get(&(r.param(0) as u32)) {
                Some(g) if !g.slots.is_empty() => g.slots[(hash() as usize) % g.slots.len()],
                _ => return TableResult::NONE,
            },
            _ => return r,
        };
        match self.members.get(&member) {
            Some(m) => TableResult { hit: true, action: m.action, params: &m.params, decoded: 0 },
            None => TableResult::NONE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl() -> ActionProfileDecl {
        ActionProfileDecl { name: "p".into(), doc: String::new(), tables: vec![0], size: 8, max_group_size: 4, hash_unit: Some(0) }
    }

    #[test]
    fn groups_check_members_weights_and_sizes() {
        let mut p = ProfileState::new(&decl());
        p.write_member(WriteOp::Insert, 1, ActionId(0), &[10], false).unwrap();
        p.write_member(WriteOp::Insert, 2, ActionId(0), &[20], false).unwrap();
        assert!(matches!(p.write_member(WriteOp::Insert, 1, ActionId(0), &[1], false), Err(ControlError::AlreadyExists(_))));
        assert!(matches!(p.write_group(WriteOp::Insert, 7, &[(1, 1), (3, 1)], false), Err(ControlError::NotFound(_))));
        assert!(matches!(p.write_group(WriteOp::Insert, 7, &[(1, 0)], false), Err(ControlError::InvalidArgument(_))));
        assert!(matches!(p.write_group(WriteOp::Insert, 7, &[(1, 1), (1, 1)], false), Err(ControlError::InvalidArgument(_))));
        p.write_group(WriteOp::Insert, 7, &[(1, 1), (2, 3)], false).unwrap();
        assert!(matches!(p.write_member(WriteOp::Delete, 1, ActionId(0), &[], false), Err(ControlError::InvalidArgument(_))));
        assert_eq!(p.groups(), vec![(7, vec![(1, 1), (2, 3)])]);
        // Weights: member 2 takes three of the four slots.
        let hit = TableResult { hit: true, action: GROUP_REF, params: &[7, 0, 0, 0, 0, 0], decoded: 0 };
        let picks: Vec<u64> = (0..4).map(|h| p.resolve(hit, || h).param(0)).collect();
        assert_eq!(picks, vec![10, 20, 20, 20]);
        p.write_group(WriteOp::Delete, 7, &[], false).unwrap();
        p.write_member(WriteOp::Delete, 1, ActionId(0), &[], false).unwrap();
        assert_eq!(p.members().len(), 1);
    }
}
