//! The vocabulary the rest of the crate shares: where an object sits ([`ObjRef`], [`Gress`]),
//! why a packet was dropped ([`DropCode`]), why a control operation failed
//! ([`ControlError`]), and a few sizes. It imports nothing from the crate, so the modules
//! that use it (`register`, `decl`, `table`, `control`, `packet`, `lanes`, `pass`) depend
//! on each other without cycles.

use serde::{Deserialize, Serialize};

/// Ingress or egress: the two threads of the match-action pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Gress {
    Ingress,
    Egress,
}

/// Where a stateful or table object sits, and its bit in the per-pass access set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjRef {
    /// Its bit among the objects of its stage (of its gress). A pass only needs to know
    /// which objects of its current stage it has used: an earlier stage's objects are out
    /// of reach anyway, and a later stage's cannot have been used yet.
    pub(crate) bit: u64,
    /// Gress and stage as one number, `gress << 8 | stage`: the order in which a pass may
    /// reach objects (see `pass::Guard`).
    pub(crate) pos: u16,
}

impl ObjRef {
    /// The object with index `local` (below [`crate::decl::MAX_STAGE_OBJECTS`]) in its stage.
    #[inline]
    pub(crate) fn new(local: u8, stage: u8, gress: Gress) -> ObjRef {
        ObjRef { bit: 1u64 << (local & 63), pos: pos(stage, gress) }
    }
    pub fn stage(&self) -> u8 {
        self.pos as u8
    }
    pub fn gress(&self) -> Gress {
        if self.pos >> 8 == 0 {
            Gress::Ingress
        } else {
            Gress::Egress
        }
    }
}

/// `gress << 8 | stage`: the order in which a pass may reach objects.
#[inline]
pub(crate) fn pos(stage: u8, gress: Gress) -> u16 {
    ((gress as u16) << 8) | stage as u16
}

/// Most parameters an action may have.
pub const MAX_ACTION_PARAMS: usize = 6;

/// Bytes of metadata the ingress can bridge to the egress.
pub const BRIDGED_BYTES: usize = 16;

/// Handle to a table action (program-local index).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ActionId(pub u16);

/// How a key field matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchKind {
    Exact,
    Ternary,
    Lpm,
    /// P4Runtime's `optional`: exact or wildcard.
    Optional,
}

/// A reason a packet was dropped. Codes below [`DropCode::FIRST_PROGRAM`] are the switch's
/// own; programs declare theirs with [`crate::decl::ProgramBuilder::drop_reason`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DropCode(pub u8);

impl DropCode {
    /// The program decided to drop (no particular reason).
    pub const PROGRAM: DropCode = DropCode(1);
    /// The packet's headers are malformed or truncated.
    pub const MALFORMED: DropCode = DropCode(2);
    /// The program reached for a table or register against the hardware rules.
    pub const VIOLATION: DropCode = DropCode(3);
    /// No egress port or multicast group was chosen.
    pub const NO_ROUTE: DropCode = DropCode(4);
    /// The egress queue of the chosen port was full.
    pub const QUEUE_FULL: DropCode = DropCode(5);
    /// The packet recirculated more often than its program allows.
    pub const RECIRC_LIMIT: DropCode = DropCode(6);
    /// The recirculation queue was full.
    pub const RECIRC_FULL: DropCode = DropCode(7);
    /// A multicast group or clone session that does not exist.
    pub const NO_GROUP: DropCode = DropCode(8);
    /// The queue towards the controller (PacketIn) was full.
    pub const CPU_FULL: DropCode = DropCode(9);
    /// No program owns the packet and no base program forwards ordinary traffic.
    pub const NO_PROGRAM: DropCode = DropCode(10);
    /// A header grew past the parse depth or the buffer.
    pub const TOO_LARGE: DropCode = DropCode(11);
    /// Egress port does not exist.
    pub const BAD_PORT: DropCode = DropCode(12);
    /// The traffic manager's ring from the ingress pipe to the egress pipe was full (a
    /// multi-pipe switch's packets crossing pipes faster than the egress pipe takes them).
    pub const PIPE_RING_FULL: DropCode = DropCode(13);
    pub const FIRST_PROGRAM: u8 = 32;
    pub const MAX: usize = 64;

    pub fn builtin_name(self) -> Option<&'static str> {
        Some(match self.0 {
            1 => "program",
            2 => "malformed",
            3 => "violation",
            4 => "no_route",
            5 => "queue_full",
            6 => "recirc_limit",
            7 => "recirc_full",
            8 => "no_group",
            9 => "cpu_full",
            10 => "no_program",
            11 => "too_large",
            12 => "bad_port",
            13 => "pipe_ring_full",
            _ => return None,
        })
    }
}

/// Why a control-plane operation failed; the kinds follow gRPC's status codes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("already exists: {0}")]
    AlreadyExists(String),
    #[error("resource exhausted: {0}")]
    ResourceExhausted(String),
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    #[error("out of range: {0}")]
    OutOfRange(String),
    #[error("unimplemented: {0}")]
    Unimplemented(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl ControlError {
    /// The gRPC status code number (google.rpc.Code).
    pub fn grpc_code(&self) -> u32 {
        match self {
            ControlError::InvalidArgument(_) => 3,
            ControlError::NotFound(_) => 5,
            ControlError::AlreadyExists(_) => 6,
            ControlError::PermissionDenied(_) => 7,
            ControlError::ResourceExhausted(_) => 8,
            ControlError::OutOfRange(_) => 11,
            ControlError::Unimplemented(_) => 12,
            ControlError::Unavailable(_) => 14,
        }
    }
}
