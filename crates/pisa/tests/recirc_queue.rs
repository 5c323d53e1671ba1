//! The recirculation queue against a plain FIFO model: order, the per-batch share of the
//! recirculation port, and the queue's capacity (packets of the batch being run still
//! count as waiting until they run).

use std::collections::VecDeque;
use std::sync::Arc;

use pisa::counters::Counters;
use pisa::*;

/// Byte 0: the packet's id; byte 1: how many times it recirculates before leaving by port 1
/// (counted down in its bridged metadata).
struct Loop(ProgramDecl);

impl Loop {
    fn new() -> Loop {
        let mut b = ProgramBuilder::new("loop", "recirculates each packet a given number of times");
        b.parser(16, &[("h", 128)]).bridged_bytes(1).max_recirculations(Some(200));
        Loop(b.build().expect("valid"))
    }
}

impl Program for Loop {
    fn decl(&self) -> &ProgramDecl {
        &self.0
    }
    fn ingress(&self, p: &mut Pass<'_>) {
        let left = if p.recirculations() == 0 { p.hdr()[1] } else { p.bridged()[0] };
        if left > 0 {
            p.bridged_mut()[0] = left - 1;
            p.recirculate();
        } else {
            p.forward(1);
        }
    }
}

/// The same traffic manager as a FIFO of (id, recirculations left): per ingress call the
/// first `per_batch` waiting packets run, then the received ones; a recirculation into a
/// queue holding `cap` packets (those of the batch not run yet included) is dropped.
struct Model {
    q: VecDeque<(u8, u8)>,
    cap: usize,
    per_batch: usize,
    sent: Vec<u8>,
    full_drops: u64,
}

impl Model {
    fn run(&mut self, (id, left): (u8, u8)) {
        if left == 0 {
            self.sent.push(id);
        } else if self.q.len() >= self.cap {
            self.full_drops += 1;
        } else {
            self.q.push_back((id, left - 1));
        }
    }
    fn ingress(&mut self, rx: &[(u8, u8)]) {
        let n = self.q.len().min(self.per_batch);
        for _ in 0..n {
            let p = self.q.pop_front().expect("n <= len");
            self.run(p);
        }
        for &p in rx {
            self.run(p);
        }
    }
}

fn frame(sw: &mut Switch, id: u8, loops: u8) -> PacketBuf {
    let mut b = sw.buffer_for(0);
    b.copy_from(&[id, loops, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    b
}

#[test]
fn recirculation_queue_is_a_bounded_fifo_with_a_per_batch_share() {
    // Seeded pseudo-random traffic; small capacity and batch share so both bind often.
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for (cap, per_batch) in [(4, 2), (6, 6), (8, 1), (3, 8)] {
        let set = Arc::new(ProgramSet::new(vec![Arc::new(Loop::new())]).expect("loads"));
        let cfg = PipeConfig { recirc_capacity: cap, recirc_per_batch: per_batch, ..PipeConfig::default() };
        let mut sw = Switch::new(set, 2, 1, cfg);
        let mut m = Model { q: VecDeque::new(), cap, per_batch, sent: Vec::new(), full_drops: 0 };
        let mut id = 0u8;
        for step in 0..300u64 {
            let k = (next() % 4) as usize;
            let rx: Vec<(u8, u8)> = (0..k)
                .map(|_| {
                    id = id.wrapping_add(1);
                    (id, (next() % 5) as u8)
                })
                .collect();
            let mut bufs: Vec<PacketBuf> = rx.iter().map(|&(i, l)| frame(&mut sw, i, l)).collect();
            sw.process(&mut bufs, step);
            m.ingress(&rx);
            let got: Vec<u8> = sw.tx(1).iter().map(|p| p.data()[0]).collect();
            sw.recycle_tx(1);
            let want: Vec<u8> = std::mem::take(&mut m.sent);
            assert_eq!(got, want, "cap {cap} per batch {per_batch} step {step}: packets sent");
            let c = sw.counters();
            assert_eq!(c.drops[DropCode::RECIRC_FULL.0 as usize], m.full_drops, "cap {cap} per batch {per_batch} step {step}");
            assert_eq!(sw.pipes()[0].pending(), m.q.len(), "waiting packets");
        }
        assert!(m.full_drops > 0, "the capacity bound was exercised");
    }
}

/// Recirculated passes offered at `passes_per_us` per microsecond for `us` microseconds
/// (packets of 16 bytes recirculating 4 times), one ingress call per microsecond: the
/// switch's counters after.
fn offer(recirc_rate_bps: Option<u64>, passes_per_us: u8, us: u64) -> Counters {
    let set = Arc::new(ProgramSet::new(vec![Arc::new(Loop::new())]).expect("loads"));
    let cfg = PipeConfig { recirc_rate_bps, ..PipeConfig::default() };
    let mut sw = Switch::new(set, 2, 1, cfg);
    for t in 0..us {
        let mut bufs: Vec<PacketBuf> = (0..passes_per_us / 4).map(|i| frame(&mut sw, i, 4)).collect();
        sw.process(&mut bufs, t * 1_000);
        sw.recycle_tx(1);
    }
    sw.counters()
}

#[test]
fn recirculation_is_limited_to_one_ports_line_rate() {
    // 1 Gb/s; a 16-byte pass is 16 + 24 bytes on the wire: one pass per 320 ns.
    let (rate, us) = (1_000_000_000u64, 2_000u64);
    let pass_ns = (16 + 24) * 8 * 1_000_000_000 / rate;
    // Offered: 8 passes per microsecond, 2.5 times what the port carries.
    let c = offer(Some(rate), 32, us);
    let elapsed = (us - 1) * 1_000;
    // What a port of this rate carries by the last call, with the shaper's 1 us of credit.
    let most = (elapsed + 1_000) / pass_ns + 1;
    let least = elapsed / pass_ns - 4;
    assert!((least..=most).contains(&c.recirculations), "{} recirculations, expected {least}..={most}", c.recirculations);
    assert_eq!(c.recirc_bytes, c.recirculations * 16, "every pass's bytes crossed the recirculation port");
    assert!(c.recirc_rate_waits > 0, "back-pressure was counted");
    assert!(c.drops[DropCode::RECIRC_FULL.0 as usize] > 0, "beyond the queue, recirculations are counted drops");
    // The same traffic without a recirculation rate: every offered pass runs.
    let free = offer(None, 32, us);
    // A packet sent at call t recirculates at calls t+1..=t+4 (those before the last call).
    let per_call = 32 / 4;
    assert_eq!(free.recirculations, per_call * (4 * (us - 4) + 3 + 2 + 1));
    assert_eq!(free.recirc_rate_waits, 0);
}
