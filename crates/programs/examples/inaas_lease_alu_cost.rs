//! Cost of inaas's lease check as two declared stateful-ALU instructions (a deadline array
//! gating a holder array, `programs::inaas::lease`) against the one Rust body on a
//! (holder, deadline) pair it replaced (`lease::legacy`, as it was before issue 19's conversion,
//! kept only for such comparisons). Both run the same precomputed mix of lease checks, probes
//! and second-pass commits over the same cells, alternately, in one process, and must give
//! the same answers (checked); the ratio is what to look at on a shared machine.
//!
//! `cargo run --release --locked -p programs --example inaas_lease_alu_cost`

use std::hint::black_box;
use std::time::Instant;

use pisa::{DualCell, SaluProgram};
use programs::inaas::lease::{
    deadline, legacy, DeadlineProbe, DeadlineTake, HolderCheck, HolderTake, LeaseCommit, ACQUIRED, BUSY, MAX_UID,
};

const CELLS: usize = 4096;
const OPS: usize = 1 << 20;

#[derive(Clone, Copy)]
enum Kind {
    Check,
    Probe,
    Commit,
}

/// (kind, cell, uid, now, T). The clock advances; T is short or long so leases expire.
fn ops() -> Vec<(Kind, usize, u32, u32, u32)> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut now = 1u32;
    (0..OPS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let kind = match x % 10 {
                0..=5 => Kind::Check,
                6..=7 => Kind::Probe,
                _ => Kind::Commit,
            };
            now = now.wrapping_add((x >> 40) as u32 % 4);
            let t = if x & 1 << 20 != 0 { (x >> 48) as u32 % 64 } else { 1 + (x >> 48) as u32 % 4096 };
            (kind, (x >> 8) as usize % CELLS, 1 + (x >> 24) as u32 % 8, now, t)
        })
        .collect()
}

fn run_legacy(cells: &mut [DualCell], ops: &[(Kind, usize, u32, u32, u32)]) -> i64 {
    let mut acc = 0i64;
    for &(k, i, uid, now, t) in ops {
        let (c, out) = match k {
            Kind::Check => legacy::check(cells[i], uid, now, t),
            Kind::Probe => legacy::check(cells[i], uid | legacy::PROBE, now, 0),
            Kind::Commit => legacy::commit(cells[i], uid),
        };
        cells[i] = c;
        acc = acc.wrapping_add(out as i64);
    }
    acc
}

fn run_declared(deadlines: &mut [u32], holders: &mut [u32], ops: &[(Kind, usize, u32, u32, u32)]) -> i64 {
    let mut acc = 0i64;
    for &(k, i, uid, now, t) in ops {
        let out = match k {
            Kind::Check => {
                let (d, took) = DeadlineTake.run(deadlines[i], (now, deadline(now, t)));
                deadlines[i] = d;
                if took != 0 {
                    let (h, prev) = HolderTake.run(holders[i], uid | BUSY);
                    holders[i] = h;
                    ACQUIRED | prev & MAX_UID
                } else {
                    HolderCheck.run(holders[i], ()).1
                }
            }
            Kind::Probe => {
                if DeadlineProbe.run(deadlines[i], now).1 != 0 {
                    0
                } else {
                    HolderCheck.run(holders[i], ()).1
                }
            }
            Kind::Commit => {
                let (h, o) = LeaseCommit.run(holders[i], uid);
                holders[i] = h;
                o
            }
        };
        acc = acc.wrapping_add(out as i64);
    }
    acc
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let ops = ops();
    // The one deadline the split stores one µs later (see `lease::deadline`) is not in the
    // mix, so both give the same answers.
    assert!(ops.iter().all(|&(_, _, _, now, t)| now.wrapping_add(t) != 0));
    let (mut lt, mut dt) = (Vec::new(), Vec::new());
    for _ in 0..9 {
        let mut cells = vec![DualCell::default(); CELLS];
        let t = Instant::now();
        let a = black_box(run_legacy(black_box(&mut cells), black_box(&ops)));
        lt.push(t.elapsed().as_secs_f64() * 1e9 / OPS as f64);
        let (mut d, mut h) = (vec![0u32; CELLS], vec![0u32; CELLS]);
        let t = Instant::now();
        let b = black_box(run_declared(black_box(&mut d), black_box(&mut h), black_box(&ops)));
        dt.push(t.elapsed().as_secs_f64() * 1e9 / OPS as f64);
        assert_eq!(a, b, "the split instructions answer as the body did");
    }
    let (l, d) = (median(lt), median(dt));
    println!("lease check, ns per operation (median of 9 alternating runs of {OPS}):");
    println!("  Rust body on a pair (before)        {l:.2}");
    println!("  two declared instructions (now)     {d:.2}");
    println!("  ratio declared / body               {:.2}", d / l);
}
