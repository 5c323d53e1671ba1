//! The `bloom` tenant's membership answered by the switch (`programs::inaas::bloom`):
//! inserts and lookups are INaaS packets through the switch model, answered by the switch
//! itself. Checked against a plain host-side copy of the same filter and against the exact
//! set: no false negative, every answer equal to the reference filter's, the measured
//! false-positive rate within a statistical tolerance of `(1 - e^{-kn/m})^k`; and another
//! tenant can neither read nor set the bits.

use std::collections::HashSet;

use hostlib::inaas::bloom::{answer, elements_for_rate, theory_fp, HostBloom, Layout};
use hostlib::inaas::{ItemReq, ItemResult, Kind, Op, Service};
use programs::inaas::bloom::HASHES;
use wire::inaas::Operator;

const FOREVER: u32 = 1 << 30;

/// A service with `n` Bloom tenants.
fn service(n: usize) -> Service {
    let mut s = Service::new(16, 11);
    for _ in 0..n {
        let p = s.new_port();
        s.add_tenant(p, Kind::Bloom, FOREVER, FOREVER, false, 1_000);
    }
    s
}

/// Tenant `t` takes the leases of its region in segments 0..HASHES (ordinary writes, as
/// the Paxos tenant does); true if it got every one.
fn take_region(s: &mut Service, t: usize, l: Layout) -> bool {
    let mut seqs = Vec::new();
    for idx in l.base..l.base + l.cells {
        let items: Vec<_> = (0..HASHES).map(|seg| ItemReq { seg, idx, op: Op::Write { key: 0, value: 0 } }).collect();
        seqs.push(s.submit(t, &items, Operator::Add).unwrap());
        if seqs.len() % 64 == 0 {
            s.run(10_000);
        }
    }
    s.run(1_000_000);
    let done = std::mem::take(&mut s.tenants[t].done);
    assert_eq!(done.len(), seqs.len());
    done.iter().all(|c| c.results.iter().take(HASHES).all(|r| matches!(r, Some(ItemResult::Done(_)))))
}

/// Send requests in windows of 64 and collect each one's switch answer, in order.
fn ask(s: &mut Service, t: usize, reqs: &[Vec<ItemReq>]) -> Vec<(Option<bool>, bool)> {
    let mut out = Vec::with_capacity(reqs.len());
    for chunk in reqs.chunks(64) {
        let seqs: Vec<u32> = chunk.iter().map(|r| s.submit(t, r, Operator::Add).unwrap()).collect();
        s.run(1_000_000);
        let mut done = std::mem::take(&mut s.tenants[t].done);
        done.sort_by_key(|c| c.seq);
        assert_eq!(done.iter().map(|c| c.seq).collect::<Vec<_>>(), seqs, "every request answered once");
        out.extend(done.iter().map(|c| (answer(&c.results), c.via_goalkeeper)));
    }
    out
}

#[test]
fn switch_answers_membership_at_the_theoretical_rate() {
    let mut s = service(1);
    let l = Layout { base: 100, cells: 512 };
    assert!(take_region(&mut s, 0, l));
    // Sized for the paper's 2.4 %: m = 3 x 512 x 32 = 49152 bits, k = 3.
    let m = l.bits();
    let n = elements_for_rate(m, HASHES as u32, 0.024);
    let members: Vec<u64> = (0..n).map(|i| i.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0xA5A5).collect();
    let set: HashSet<u64> = members.iter().copied().collect();
    let mut host = HostBloom::new(l);
    let ins: Vec<_> = members.iter().map(|&k| l.insert(k)).collect();
    for (a, &k) in ask(&mut s, 0, &ins).iter().zip(&members) {
        // An insert answers for the bits before it: present only if the reference agrees.
        assert_eq!(a.0, Some(host.contains(k)), "insert of {k}");
        assert!(!a.1, "answered by the switch, not the goalkeeper");
        host.insert(k);
    }
    // Members: all present. Non-members: as the reference filter says.
    let q_in: Vec<_> = members.iter().step_by(3).map(|&k| l.query(k)).collect();
    for a in ask(&mut s, 0, &q_in) {
        assert_eq!(a, (Some(true), false), "no false negative");
    }
    let probes: Vec<u64> = (0..40_000u64).map(|i| (i + 1) << 40 | 0x77).filter(|k| !set.contains(k)).collect();
    let q_out: Vec<_> = probes.iter().map(|&k| l.query(k)).collect();
    let mut fp = 0u64;
    for (a, &k) in ask(&mut s, 0, &q_out).iter().zip(&probes) {
        assert_eq!(a.0, Some(host.contains(k)), "the switch's answer is the reference filter's for {k}");
        fp += (a.0 == Some(true)) as u64;
    }
    let rate = fp as f64 / probes.len() as f64;
    let theory = theory_fp(n, m, HASHES as u32);
    // Binomial spread of the probes (4 sigma) plus the filter's own (its fill varies).
    let tol = 4.0 * (theory * (1.0 - theory) / probes.len() as f64).sqrt() + 0.002;
    eprintln!("bloom: n={n} m={m} k={HASHES} fill={:.4} fp={rate:.4} theory={theory:.4} paper=0.024 tol={tol:.4}", host.fill());
    assert!((rate - theory).abs() <= tol, "measured {rate} vs theory {theory} (tolerance {tol})");
    assert!((theory - 0.024).abs() < 1e-3);
    assert_eq!(s.violations(), 0);
    assert_eq!(s.recirculations(), l.cells as u64, "one recirculation per lease taken, none per Bloom packet");
    let u = s.switch_usage(0);
    assert_eq!(u.mismatches, 0);
}

#[test]
fn another_tenant_cannot_read_or_set_the_bits() {
    let mut s = service(2);
    let l = Layout { base: 0, cells: 8 };
    assert!(take_region(&mut s, 0, l));
    let keys: Vec<u64> = (1..=40).collect();
    let ins: Vec<_> = keys.iter().map(|&k| l.insert(k)).collect();
    ask(&mut s, 0, &ins);
    // Tenant 1 asks the same cells for the same keys: every probe refused (no lease), no
    // answer, and its inserts change nothing.
    let q: Vec<_> = keys.iter().map(|&k| l.query(k)).collect();
    let before = s.switch_usage(1).mismatches;
    for a in ask(&mut s, 1, &q) {
        assert_eq!(a.0, None, "no answer from another tenant's bits");
    }
    assert_eq!(s.switch_usage(1).mismatches - before, (keys.len() * HASHES) as u64, "each probe counted as a mismatch");
    let others: Vec<u64> = (1000..1400).collect();
    let ins1: Vec<_> = others.iter().map(|&k| l.insert(k)).collect();
    for a in ask(&mut s, 1, &ins1) {
        assert_eq!(a.0, None);
    }
    // Tenant 0's filter holds exactly its own keys: the reference agrees on every key.
    let mut host = HostBloom::new(l);
    keys.iter().for_each(|&k| host.insert(k));
    let all: Vec<u64> = keys.iter().chain(&others).copied().collect();
    let q0: Vec<_> = all.iter().map(|&k| l.query(k)).collect();
    for (a, &k) in ask(&mut s, 0, &q0).iter().zip(&all) {
        assert_eq!(a.0, Some(host.contains(k)), "tenant 0's answer for {k} is its own filter's");
    }
    // Tenant 1 takes cells once tenant 0's leases are gone (short leases here): the old
    // bits are not handed over. Tenant 0 gives them up by letting them expire.
    let mut s = Service::new(16, 12);
    for _ in 0..2 {
        let p = s.new_port();
        s.add_tenant(p, Kind::Bloom, 200, 200, false, 1_000);
    }
    assert!(take_region(&mut s, 0, l));
    ask(&mut s, 0, &ins);
    s.run_for(1_000);
    assert!(take_region(&mut s, 1, l), "expired leases are free to take");
    for a in ask(&mut s, 1, &q) {
        assert_eq!(a.0, Some(false), "the new holder reads none of the old holder's bits");
    }
    assert_eq!(s.violations(), 0);
}

#[test]
fn malformed_bloom_packets_are_dropped() {
    let mut s = service(1);
    let l = Layout { base: 0, cells: 4 };
    assert!(take_region(&mut s, 0, l));
    let before = s.drops("malformed");
    // A probe outside segments 0..HASHES, and a zero mask.
    let bad = [
        vec![ItemReq { seg: HASHES, idx: 0, op: Op::BloomQuery { mask: 1 } }],
        vec![ItemReq { seg: 0, idx: 0, op: Op::BloomInsert { mask: 0 } }],
    ];
    for r in &bad {
        let f = hostlib::inaas::build_frame(s.tenants[0].client.asm.mac, s.gk.mac(), s.tenants[0].uid, 5, FOREVER, r, Operator::Add, 0, 0)
            .unwrap();
        let port = s.tenants[0].port;
        s.inject_raw(port, f);
        s.run(1_000);
    }
    assert_eq!(s.drops("malformed") - before, 2);
    // Mixed requests are refused by the assembler.
    let mixed = [ItemReq { seg: 0, idx: 0, op: Op::BloomQuery { mask: 1 } }, ItemReq { seg: 1, idx: 0, op: Op::BloomInsert { mask: 1 } }];
    assert_eq!(s.submit(0, &mixed, Operator::Add), Err(hostlib::inaas::FrameError::MixedBloom));
}
