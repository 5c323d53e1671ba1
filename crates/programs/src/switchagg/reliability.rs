//! Exactly once at the switch: the next expected sequence number per (tree, child) in a
//! register array. A packet is aggregated only if its sequence number is the one
//! expected; an older one is a retransmission the switch has already aggregated (never
//! added twice: it is answered with an ACK again); a newer one means a packet in between
//! was lost or overtaken, and it is dropped (counted) for the sender to retransmit in
//! order (go-back-N, no per-worker bitmap, so no limit on the number of children).
//!
//! Acknowledgements go back to the sender as the packet itself turned around (when
//! nothing of it travels on) or as a truncated clone of it (when pairs travel on to the
//! parent): the switch never creates a packet.

use pisa::TraceMode;
use pisa::{Cmp, Cond, Op, OutputSource, Pass, Pred, Salu, SaluOutput, SaluProgram, Src, Update};
use wire::switchagg::{flags, HEADER_LEN};

/// Verdicts of the sequence check.
pub const NEW: u8 = 0;
pub const DUPLICATE: u8 = 1;
pub const GAP: u8 = 2;

/// The stateful ALU of `expected_seq`: cell = next expected sequence number. Conditions:
/// c0 the sequence number is older, c1 newer; the verdict is the predicate (NEW: neither).
#[derive(Clone, Copy)]
pub struct SeqCheck;
impl SaluProgram<u32, u32, u8> for SeqCheck {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::PhvLo, Cmp::LtU, Src::Lo), Cond::new(Src::PhvLo, Cmp::GtU, Src::Lo)],
        lo: &[Update::new(Pred::C0.or(Pred::C1).not(), Src::Lo, Op::Add, Src::K(1))],
        hi: &[],
        out: &[SaluOutput::always(OutputSource::Predicate)],
    };
}

/// [`SeqCheck`] on one cell: the new cell and the verdict.
pub fn seq_check(expected: u32, seq: u32) -> (u32, u8) {
    SeqCheck.run(expected, seq)
}

/// Where the IPv4 header starts.
pub const IP_AT: usize = 14;

/// Rewrite the lengths and checksums after the aggregation payload became `agg_len`
/// bytes (at offset `at`); the header region is cut or grown to match. UDP checksum 0
/// ("none", allowed over IPv4): the switch rewrote the payload.
pub fn set_agg_len<M: TraceMode>(pass: &mut Pass<'_, M>, at: usize, agg_len: usize) -> bool {
    if !pass.resize_hdr(at + agg_len) {
        return false;
    }
    let h = pass.hdr_mut();
    let ihl = (h[IP_AT] & 0x0F) as usize * 4;
    let udp_at = IP_AT + ihl;
    let udp_len = (8 + agg_len) as u16;
    let ip_len = (ihl + 8 + agg_len) as u16;
    h[IP_AT + 2..IP_AT + 4].copy_from_slice(&ip_len.to_be_bytes());
    h[udp_at + 4..udp_at + 6].copy_from_slice(&udp_len.to_be_bytes());
    h[udp_at + 6..udp_at + 8].fill(0);
    let mut ip = wire::Ipv4Packet::new_unchecked(&mut h[IP_AT..IP_AT + ihl]);
    ip.fill_checksum();
    true
}

/// Turn the packet into the ACK of (`child`, `seq`) for its sender: addresses and ports
/// swapped, flags ACK, no pairs.
pub fn make_ack<M: TraceMode>(pass: &mut Pass<'_, M>, at: usize, child: u16, seq: u32) -> bool {
    {
        let h = pass.hdr_mut();
        let ihl = (h[IP_AT] & 0x0F) as usize * 4;
        let udp_at = IP_AT + ihl;
        crate::reply::swap_addresses(h, udp_at);
        h[at + 1] = flags::ACK;
        h[at + 6..at + 8].copy_from_slice(&child.to_be_bytes());
        h[at + 8..at + 12].copy_from_slice(&seq.to_be_bytes());
        h[at + 12..at + 14].fill(0);
    }
    set_agg_len(pass, at, HEADER_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_duplicate_gap() {
        assert_eq!(seq_check(5, 5), (6, NEW));
        assert_eq!(seq_check(5, 4), (5, DUPLICATE));
        assert_eq!(seq_check(5, 7), (5, GAP));
    }
}
