//! Control-plane operations on a pipe, and their errors.
//!
//! These are what P4Runtime Write/Read map to. A pipe applies them between packet batches,
//! the way a switch's driver updates tables between packets, so the packet path never
//! takes a lock.

use serde::Serialize;

pub use crate::base::ControlError;
use crate::packet::PortId;
use crate::table::{Entry, FieldMatch};

/// Insert, modify or delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOp {
    Insert,
    Modify,
    Delete,
}

/// One replica of a multicast group or clone session: a port and an instance (replication id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Replica {
    pub port: PortId,
    pub rid: u16,
}

/// A clone (mirror) session: where copies go and how much of the packet they keep.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CloneSession {
    pub replicas: Vec<Replica>,
    /// Truncate copies to this many bytes (0: whole packet).
    pub truncate_len: u32,
}

/// A control-plane operation, addressed by P4Runtime ids.
#[derive(Clone, Debug)]
pub enum ControlOp {
    TableWrite {
        table_id: u32,
        op: WriteOp,
        matches: Vec<FieldMatch>,
        priority: i32,
        action_id: u32,
        params: Vec<(u32, Vec<u8>)>,
    },
    TableSetDefault {
        table_id: u32,
        action_id: u32,
        params: Vec<(u32, Vec<u8>)>,
    },
    TableResetDefault {
        table_id: u32,
    },
    TableRead {
        table_id: u32,
    },
    TableClear {
        table_id: u32,
    },
    RegisterRead {
        register_id: u32,
        index: Option<u32>,
    },
    RegisterWrite {
        register_id: u32,
        index: Option<u32>,
        value: u64,
    },
    McastGroupWrite {
        op: WriteOp,
        group: u16,
        replicas: Vec<Replica>,
    },
    McastGroupRead {
        group: Option<u16>,
    },
    CloneSessionWrite {
        op: WriteOp,
        session: u16,
        session_cfg: CloneSession,
    },
    CloneSessionRead {
        session: Option<u16>,
    },
    /// Enable or disable delivery of a digest to the control plane.
    DigestConfig {
        digest_id: u32,
        enabled: bool,
    },
    /// Insert, modify or delete an action profile member (an action of the profile's table).
    ProfileMemberWrite {
        profile_id: u32,
        op: WriteOp,
        member_id: u32,
        action_id: u32,
        params: Vec<(u32, Vec<u8>)>,
    },
    /// Insert, modify or delete an action selector's group of (member, weight).
    ProfileGroupWrite {
        profile_id: u32,
        op: WriteOp,
        group_id: u32,
        members: Vec<(u32, u32)>,
    },
    ProfileRead {
        profile_id: u32,
    },
    /// Insert, modify or delete an entry of a table implemented by an action profile.
    TableWriteIndirect {
        table_id: u32,
        op: WriteOp,
        matches: Vec<FieldMatch>,
        priority: i32,
        target: crate::selector::IndirectRef,
    },
    /// Change a packet generator's period (0 disables it).
    PktGenConfig {
        program: String,
        name: String,
        period_ns: u64,
    },
}

/// What a read returns.
#[derive(Clone, Debug)]
pub enum ControlReply {
    Done,
    TableEntries {
        entries: Vec<Entry>,
        default_action: u16,
        default_params: Vec<u64>,
    },
    RegisterCells(Vec<(u32, u64)>),
    McastGroups(Vec<(u16, Vec<Replica>)>),
    CloneSessions(Vec<(u16, CloneSession)>),
    /// An action profile's members (id, action index, parameters) and groups.
    ProfileEntries {
        members: Vec<crate::selector::MemberRead>,
        groups: Vec<crate::selector::GroupRead>,
    },
}
