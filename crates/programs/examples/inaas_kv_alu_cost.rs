//! Cost of inaas's key-value register actions as declared stateful-ALU instructions
//! (`programs::inaas::primitives`) against the Rust bodies they replaced (kept here, as
//! they were before issue 19's conversion, only for this comparison). Both run the same
//! precomputed mix of reads, swaps, writes and two-pass evictions over one array of cells,
//! alternately, in one process, and must give the same answers (checked); the ratio is
//! what to look at on a shared machine.
//!
//! `cargo run --release --locked -p programs --example inaas_kv_alu_cost`

use std::hint::black_box;
use std::time::Instant;

use pisa::{DualCell, SaluProgram};
use programs::inaas::arith::MISS;
use programs::inaas::primitives::{dec, dec_evicted, enc, Exchange, Read, Write, EVICT, KEY_ONLY};

const CELLS: usize = 4096;
const OPS: usize = 1 << 20;

#[derive(Clone, Copy)]
enum Kind {
    Read,
    Swap,
    Write,
    Evict,
}

/// The bodies before the conversion (value half stored as is, MISS for a miss).
mod legacy {
    use super::*;
    pub fn exchange(cell: DualCell, (evict, (key, value)): (bool, (u32, i32))) -> (DualCell, i32) {
        if evict {
            (DualCell::new(cell.lo, value as u32), cell.hi as i32)
        } else if cell.lo == 0 || cell.lo == key {
            (DualCell::new(key, value as u32), if cell.lo == 0 { 0 } else { cell.hi as i32 })
        } else {
            (cell, MISS)
        }
    }
    pub fn read(cell: DualCell, (clear, key): (bool, u32)) -> (DualCell, i32) {
        if cell.lo == key && key != 0 {
            (if clear { DualCell::new(0, 0) } else { cell }, cell.hi as i32)
        } else {
            (cell, MISS)
        }
    }
    pub fn write(cell: DualCell, (evict, (key, value)): (bool, (u32, i32))) -> (DualCell, u32) {
        if evict {
            (DualCell::new(key, cell.hi), cell.lo)
        } else {
            (DualCell::new(key, value as u32), cell.lo)
        }
    }
}

fn ops() -> Vec<(Kind, usize, u32, i32)> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..OPS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let kind = match x % 10 {
                0..=3 => Kind::Read,
                4..=6 => Kind::Swap,
                7..=8 => Kind::Write,
                _ => Kind::Evict,
            };
            (kind, (x >> 8) as usize % CELLS, 1 + (x >> 24) as u32 % 8, (x >> 32) as i32 % 1000)
        })
        .collect()
}

fn run_legacy(cells: &mut [DualCell], ops: &[(Kind, usize, u32, i32)]) -> i64 {
    let mut acc = 0i64;
    for &(k, i, key, v) in ops {
        let c = cells[i];
        let (c, out) = match k {
            Kind::Read => legacy::read(c, (false, key)),
            Kind::Swap => legacy::exchange(c, (false, (key, v))),
            Kind::Write => {
                let (c, o) = legacy::write(c, (false, (key, v)));
                (c, o as i32)
            }
            Kind::Evict => {
                let (c, o) = legacy::exchange(c, (true, (0, v)));
                let (c, k) = legacy::write(c, (true, (key, 0)));
                (c, o ^ k as i32)
            }
        };
        cells[i] = c;
        acc = acc.wrapping_add(out as i64);
    }
    acc
}

fn run_declared(cells: &mut [DualCell], ops: &[(Kind, usize, u32, i32)]) -> i64 {
    let mut acc = 0i64;
    for &(k, i, key, v) in ops {
        let c = cells[i];
        let (c, out) = match k {
            Kind::Read => {
                let (c, w) = Read.run(c, (key, 0));
                (c, dec(w))
            }
            Kind::Swap => {
                let (c, w) = Exchange.run(c, (key, enc(v)));
                (c, dec(w))
            }
            Kind::Write => {
                let (c, o) = Write.run(c, (key, enc(v)));
                (c, o as i32)
            }
            Kind::Evict => {
                let (c, w) = Read.run(c, (EVICT, enc(v)));
                let (c, k) = Write.run(c, (key, KEY_ONLY));
                (c, dec_evicted(w) ^ k as i32)
            }
        };
        cells[i] = c;
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
    let (mut lt, mut dt) = (Vec::new(), Vec::new());
    for _ in 0..9 {
        let mut cells = vec![DualCell::default(); CELLS];
        let t = Instant::now();
        let a = black_box(run_legacy(black_box(&mut cells), black_box(&ops)));
        lt.push(t.elapsed().as_secs_f64() * 1e9 / OPS as f64);
        // Free cells as the program leaves them (value half enc(0)); the bodies' free cells
        // are (0, 0). Same answers to every operation, so the same sum.
        let mut cells = vec![DualCell::new(0, enc(0)); CELLS];
        let t = Instant::now();
        let b = black_box(run_declared(black_box(&mut cells), black_box(&ops)));
        dt.push(t.elapsed().as_secs_f64() * 1e9 / OPS as f64);
        assert_eq!(a, b, "the declared instructions answer as the bodies did");
    }
    let (l, d) = (median(lt), median(dt));
    println!("kv actions, ns per operation (median of 9 alternating runs of {OPS}):");
    println!("  Rust bodies (before)        {l:.2}");
    println!("  declared instructions (now) {d:.2}");
    println!("  ratio declared / bodies     {:.2}", d / l);
}
