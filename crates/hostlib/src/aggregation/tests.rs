//! Host-only runs (no switch on the path): the udp baseline and the no-switch fallback,
//! under seeded loss, duplication and reordering, against a HashMap reference.

use std::collections::HashMap;

use super::*;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A lossy link: each packet may be lost, duplicated or delayed behind later ones.
struct Link {
    rng: Rng,
    loss: f64,
    dup: f64,
    reorder: f64,
    held: Vec<(usize, Vec<u8>)>,
}

impl Link {
    fn pass(&mut self, pkts: Vec<(usize, Vec<u8>)>) -> Vec<(usize, Vec<u8>)> {
        let mut out = Vec::new();
        for p in pkts {
            if self.rng.f() < self.loss {
                continue;
            }
            let dup = self.rng.f() < self.dup;
            if self.rng.f() < self.reorder {
                self.held.push(p.clone());
                if dup {
                    self.held.push(p);
                }
                continue;
            }
            if dup {
                out.push(p.clone());
            }
            out.push(p);
            out.append(&mut self.held);
        }
        out
    }
    fn flush(&mut self) -> Vec<(usize, Vec<u8>)> {
        std::mem::take(&mut self.held)
    }
}

fn dataset(n: usize, vocab: usize, seed: u64) -> Vec<(Vec<u8>, u32)> {
    let mut r = Rng(seed | 1);
    (0..n)
        .map(|_| {
            let w = r.next() as usize % vocab;
            let key =
                if w.is_multiple_of(17) { format!("a-rather-long-word-number-{w}").into_bytes() } else { format!("w{w}").into_bytes() };
            (key, 1 + (r.next() % 5) as u32)
        })
        .collect()
}

fn reference(data: &[Vec<(Vec<u8>, u32)>], op: Op) -> HashMap<Vec<u8>, u64> {
    let mut m = HashMap::new();
    for d in data {
        for (k, v) in d {
            merge(&mut m, op, k, *v as u64);
        }
    }
    m
}

fn mapper_for(id: u16, pairs: &[(Vec<u8>, u32)], op: Op, mode: Mode) -> Mapper {
    let mut keys = Vec::new();
    let mut offs = vec![0u64];
    for (k, _) in pairs {
        keys.extend_from_slice(k);
        offs.push(keys.len() as u64);
    }
    let vals = pairs.iter().map(|p| p.1).collect();
    let mut cfg = MapperConfig::new(id, op, mode);
    cfg.rto_ns = 1_000_000;
    cfg.min_rto_ns = 200_000;
    cfg.stall_ns = 20_000_000;
    Mapper::new(cfg, &[5], keys, offs, vals, vec![0; pairs.len()], 0).unwrap()
}

/// Run mappers and one reducer over lossy links with a simulated clock; returns the
/// reducer's result and stats.
fn run(mode: Mode, op: Op, seed: u64, loss: f64, dup: f64, reorder: f64) -> (HashMap<Vec<u8>, u64>, ReducerStats, bool) {
    let data: Vec<_> = (0..3).map(|m| dataset(500, 120, seed * 7 + m)).collect();
    let mut mappers: Vec<_> = data.iter().enumerate().map(|(i, d)| mapper_for(i as u16, d, op, mode)).collect();
    let (result, st) = drive(&mut mappers, mode, op, seed, loss, dup, reorder);
    let fb = mappers.iter().any(|m| m.stats.fallback);
    assert_eq!(result, reference(&data, op), "reducer result equals the reference");
    (result, st, fb)
}

/// Mappers (ids = indexes) and one reducer of tree 5 over lossy links, until complete.
fn drive<S: PairSource>(
    mappers: &mut [Mapper<S>],
    mode: Mode,
    op: Op,
    seed: u64,
    loss: f64,
    dup: f64,
    reorder: f64,
) -> (HashMap<Vec<u8>, u64>, ReducerStats) {
    let mut cfg = ReducerConfig::new(5, mappers.len(), op, mode);
    cfg.rto_ns = 1_000_000;
    cfg.grace_ns = 10_000_000;
    let mut red = Reducer::new(cfg);
    let mut up = Link { rng: Rng(seed | 1), loss, dup, reorder, held: vec![] };
    let mut down = Link { rng: Rng(seed.wrapping_mul(31) | 1), loss, dup, reorder, held: vec![] };
    let mut now = 0u64;
    let mut steps = 0u64;
    while !(red.is_complete() && mappers.iter().all(|m| m.is_done())) {
        steps += 1;
        assert!(steps < 200_000, "no progress");
        let mut tx = Vec::new();
        for (i, m) in mappers.iter_mut().enumerate() {
            let mut o = Vec::new();
            m.poll_transmit(now, &mut o);
            assert!(m.error().is_none());
            tx.extend(o.into_iter().map(|(_, p)| (i, p)));
        }
        let mut arrived = up.pass(tx);
        if steps.is_multiple_of(50) {
            arrived.extend(up.flush());
        }
        for (_, p) in arrived {
            red.handle(now, &p);
        }
        red.handle_timeout(now);
        let mut back = Vec::new();
        red.poll_transmit(&mut back);
        let mut back = down.pass(back);
        if steps.is_multiple_of(50) {
            back.extend(down.flush());
        }
        for (m, p) in back {
            mappers[m].handle(now, &p);
        }
        now += 100_000;
    }
    (red.take_result(), red.stats.clone())
}

#[test]
fn udp_mode_exact_without_faults() {
    for op in [Op::Sum, Op::Min, Op::Max] {
        let (_, st, fb) = run(Mode::Udp, op, 1, 0.0, 0.0, 0.0);
        assert!(!st.fallback && !fb);
        assert_eq!(st.duplicates, 0);
    }
}

#[test]
fn udp_mode_exact_under_faults() {
    for seed in 1..6 {
        let (_, st, _) = run(Mode::Udp, Op::Sum, seed, 0.1, 0.1, 0.1);
        assert!(st.duplicates > 0, "faults were injected");
    }
}

#[test]
fn no_switch_falls_back_and_stays_exact() {
    for seed in 1..4 {
        let (_, st, fb) = run(Mode::Switch, Op::Sum, seed, 0.05, 0.05, 0.05);
        assert!(st.fallback && fb, "switch mode without a switch must fall back");
    }
}

/// The longest DAIET key fits one frame's budget with its headers and comes out of the
/// packet whole; one byte more is refused by the mapper (never truncated).
#[test]
fn daiet_longest_key_whole_and_one_more_refused() {
    let longest = vec![b'x'; DAIET_MAX_KEY_LEN];
    let hdr = Header { tree_id: 1, flags: 0, op: Op::Sum, sender: 0, epoch: 0 };
    let pk = Protocol::Daiet.packetize(hdr, [(&longest[..], 7u32)].into_iter());
    assert_eq!(pk.len(), 1);
    assert_eq!(pk[0].len(), VARLEN_BUDGET, "exactly one frame's budget");
    let got: Vec<(Vec<u8>, u32)> = Protocol::Daiet.parse(&pk[0]).unwrap().view.pairs().map(|(k, v)| (k.to_vec(), v)).collect();
    assert_eq!(got, vec![(longest.clone(), 7)]);
    assert_eq!(Protocol::Daiet.max_key_len(), DAIET_MAX_KEY_LEN);
    assert_eq!(Protocol::SwitchAgg.max_key_len(), switchagg::MAX_KEY_LEN);
    let mk = |klen: usize| {
        let keys = vec![b'a'; klen + 3];
        Mapper::new(MapperConfig::new(1, Op::Sum, Mode::Udp), &[1], keys, vec![0, 3, klen as u64 + 3], vec![1, 1], vec![0, 0], 0)
    };
    assert!(mk(DAIET_MAX_KEY_LEN).is_ok());
    let err = mk(DAIET_MAX_KEY_LEN + 1).err().expect("refused");
    assert_eq!(err, Error::DaietKey { len: DAIET_MAX_KEY_LEN + 1, max: DAIET_MAX_KEY_LEN });
    assert!(err.to_string().contains(&format!("{} bytes", DAIET_MAX_KEY_LEN + 1)), "{err}");
}

#[test]
fn packetize_keeps_long_keys_whole() {
    let long = vec![b'k'; 3000];
    let pairs = vec![(&long[..], 1u32), (&b"short"[..], 2), (&b"a\0b"[..], 3), (&b""[..], 4)];
    let hdr = Header { tree_id: 1, flags: 0, op: Op::Sum, sender: 0, epoch: 0 };
    let pk = Protocol::Daiet.packetize(hdr, pairs.clone().into_iter());
    let mut got: Vec<(Vec<u8>, u32)> = Vec::new();
    for p in &pk {
        let v = Protocol::Daiet.parse(p).unwrap();
        got.extend(v.view.pairs().map(|(k, v)| (k.to_vec(), v)));
    }
    got.sort();
    let mut want: Vec<(Vec<u8>, u32)> = pairs.iter().map(|(k, v)| (k.to_vec(), *v)).collect();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn rtt_estimator_follows_rfc6298() {
    let mut r = mapper::Rtt::new(20_000_000);
    assert_eq!(r.rto(1_000, 1_000_000_000), 20_000_000, "initial timeout before any sample");
    r.sample(100_000);
    assert_eq!(r.srtt(), Some(100_000));
    assert_eq!(r.rto(1_000, 1_000_000_000), 100_000 + 4 * 50_000);
    for _ in 0..50 {
        r.sample(100_000);
    }
    let settled = r.rto(1_000, 1_000_000_000);
    assert!(settled < 110_000, "a steady RTT shrinks the variation term: {settled}");
    assert_eq!(r.rto(5_000_000, 1_000_000_000), 5_000_000, "clamped to the minimum");
    r.back_off(1_000_000_000);
    assert_eq!(r.rto(1_000, 1_000_000_000), 2 * settled, "a timeout doubles it");
    for _ in 0..40 {
        r.back_off(300_000_000);
    }
    assert_eq!(r.rto(1_000, 1_000_000_000), 300_000_000, "backed off no further than the maximum");

    // RFC 6298 section 5: from the second timeout in a row the estimate is dropped, and the
    // next sample starts it afresh as the first one did (2.2).
    let mut r = mapper::Rtt::new(20_000_000);
    r.sample(4_000_000);
    r.back_off(1_000_000_000);
    assert_eq!(r.srtt(), Some(4_000_000), "one timeout keeps the estimate");
    r.sample(4_000_000);
    r.back_off(1_000_000_000);
    assert_eq!(r.srtt(), Some(4_000_000), "a sample in between: not two in a row");
    r.back_off(1_000_000_000);
    assert_eq!(r.srtt(), None, "two timeouts in a row drop it");
    assert!(r.rto(1_000, 1_000_000_000) > 4_000_000, "the timeout stays backed off until a sample");
    r.sample(100_000);
    assert_eq!((r.srtt(), r.rto(1_000, 1_000_000_000)), (Some(100_000), 100_000 + 4 * 50_000));
}

/// One mapper and a slow reducer: every packet and ACK takes `delay` each way. Returns
/// the mapper's stats (the result is checked against the reference).
fn run_delayed(delay: u64, min_rto: u64, max_rto: u64) -> MapperStats {
    let data = vec![dataset(20_000, 3000, 9)];
    let mut m = mapper_for(0, &data[0], Op::Sum, Mode::Udp);
    m.set_rto_bounds(min_rto, max_rto);
    let mut cfg = ReducerConfig::new(5, 1, Op::Sum, Mode::Udp);
    cfg.rto_ns = 1_000_000;
    cfg.grace_ns = 10_000_000;
    let mut red = Reducer::new(cfg);
    let mut up: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut down: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut now = 0u64;
    while !(red.is_complete() && m.is_done()) {
        assert!(now < 60_000_000_000, "no progress");
        let mut o = Vec::new();
        m.poll_transmit(now, &mut o);
        up.extend(o.into_iter().map(|(_, p)| (now + delay, p)));
        let (due, later): (Vec<_>, Vec<_>) = up.drain(..).partition(|(t, _)| *t <= now);
        up = later;
        for (_, p) in due {
            red.handle(now, &p);
        }
        red.handle_timeout(now);
        let mut back = Vec::new();
        red.poll_transmit(&mut back);
        down.extend(back.into_iter().map(|(_, p)| (now + delay, p)));
        let (due, later): (Vec<_>, Vec<_>) = down.drain(..).partition(|(t, _)| *t <= now);
        down = later;
        for (_, p) in due {
            m.handle(now, &p);
        }
        now += 100_000;
    }
    assert_eq!(red.take_result(), reference(&data, Op::Sum));
    m.stats.clone()
}

/// A reducer slower than the initial timeout (8 ms round trip against 1 ms): a fixed
/// timeout retransmits again and again; the adaptive one backs off and learns the RTT.
#[test]
fn adaptive_rto_stops_spurious_retransmissions() {
    let delay = 4_000_000u64;
    let adaptive = run_delayed(delay, 200_000, 1_000_000_000);
    let fixed = run_delayed(delay, 1_000_000, 1_000_000);
    let packets = adaptive.packets_sent - adaptive.retransmissions;
    eprintln!(
        "{packets} packets; adaptive: {} timeouts, {} retransmissions; fixed 1 ms: {} timeouts, {} retransmissions",
        adaptive.timeouts, adaptive.retransmissions, fixed.timeouts, fixed.retransmissions
    );
    assert!(packets > 1500, "enough packets: {packets}");
    // The samples of retransmitted packets (timed from their latest copy) under-estimate
    // the RTT for a while, so some timeouts stay; a fixed timeout fires all along.
    assert!(adaptive.timeouts * 4 < fixed.timeouts, "{} timeouts against {}", adaptive.timeouts, fixed.timeouts);
    assert!(
        fixed.retransmissions > 4 * adaptive.retransmissions,
        "fixed 1 ms timeout: {} retransmissions, adaptive: {}",
        fixed.retransmissions,
        adaptive.retransmissions
    );
}

/// A finished mapper whose RTO is long (400 ms here) reports FINISHED at least every
/// `finished_report_ns` (100 ms) while the reducer's NOTED answers are lost, and stops
/// once one arrives: a waiting mapper then costs the reducer nothing.
#[test]
fn finished_mapper_reports_until_noted() {
    let data = dataset(50, 20, 3);
    let mut m = mapper_for(0, &data, Op::Sum, Mode::Udp);
    m.set_rto_bounds(400_000_000, 400_000_000);
    // Two mappers expected: the reducer acknowledges mapper 0's stream but never completes.
    let mut red = Reducer::new(ReducerConfig::new(5, 2, Op::Sum, Mode::Udp));
    let (mut now, mut reports, mut max_wait, mut noted_lost) = (0u64, Vec::new(), 0u64, 0);
    while now < 3_000_000_000 {
        let mut o = Vec::new();
        m.poll_transmit(now, &mut o);
        for (_, p) in o {
            let r = Protocol::Daiet.parse(&p).unwrap().repr;
            if r.flags & flags::QUERY != 0 && r.info == wire::daiet::info::FINISHED {
                reports.push(now);
            }
            red.handle(now, &p);
        }
        let mut back = Vec::new();
        red.poll_transmit(&mut back);
        for (_, p) in back {
            let r = Protocol::Daiet.parse(&p).unwrap().repr;
            if r.flags & flags::QUERY != 0 && r.info == wire::daiet::info::NOTED && now < 2_000_000_000 {
                noted_lost += 1;
                continue;
            }
            m.handle(now, &p);
        }
        if let Some(d) = m.poll_timeout() {
            max_wait = max_wait.max(d.saturating_sub(now));
        }
        now += 1_000_000;
    }
    assert_eq!(m.rto_ns(), vec![400_000_000]);
    let (lost, after): (Vec<u64>, Vec<u64>) = reports.iter().partition(|&&t| t < 2_000_000_000);
    assert!(lost.len() >= 15 && noted_lost == lost.len(), "FINISHED reports in 2 s: {lost:?}, NOTED lost: {noted_lost}");
    assert!(lost.windows(2).all(|w| w[1] - w[0] <= 101_000_000), "report gaps: {lost:?}");
    assert!(max_wait <= 100_000_000, "poll_timeout waits {max_wait} ns");
    assert_eq!(after.len(), 1, "one report after 2 s, answered NOTED, and no more: {after:?}");
    assert_eq!(m.poll_timeout(), None, "a noted mapper has no timer");
    assert!(!m.is_done() && !red.is_complete());
}

/// After completion the reducer sends DONE again, backing off from `rto_ns` to a fifth of
/// `linger_ns`, to a mapper that has not said BYE, and stops when it does.
#[test]
fn done_is_resent_until_bye() {
    let data = dataset(200, 40, 4);
    let mut m = mapper_for(0, &data, Op::Sum, Mode::Udp);
    let mut cfg = ReducerConfig::new(5, 1, Op::Sum, Mode::Udp);
    cfg.rto_ns = 10_000_000;
    cfg.linger_ns = 400_000_000;
    let mut red = Reducer::new(cfg);
    // DONE is lost until 300 ms, and the first BYE too. The mapper's FINISHED reports
    // (each answered with DONE once complete) are lost as well: only the reducer's timer
    // sends DONE again here.
    let (mut now, mut dones, mut byes) = (0u64, Vec::new(), 0);
    while now < 1_000_000_000 && !red.all_said_bye() {
        let mut o = Vec::new();
        m.poll_transmit(now, &mut o);
        for (_, p) in o {
            let r = Protocol::Daiet.parse(&p).unwrap().repr;
            if r.flags & flags::QUERY != 0 && r.info == wire::daiet::info::FINISHED {
                continue;
            }
            if r.flags & flags::QUERY != 0 && r.info == wire::daiet::info::BYE {
                byes += 1;
                if byes == 1 {
                    continue;
                }
            }
            red.handle(now, &p);
        }
        red.handle_timeout(now);
        let mut back = Vec::new();
        red.poll_transmit(&mut back);
        for (_, p) in back {
            if Protocol::Daiet.parse(&p).unwrap().repr.flags & flags::DONE != 0 {
                dones.push(now);
                if now < 300_000_000 {
                    continue;
                }
            }
            m.handle(now, &p);
        }
        now += 1_000_000;
    }
    assert!(red.is_complete() && m.is_done() && m.is_quiet());
    assert!(red.all_said_bye(), "the second BYE was heard");
    assert_eq!(byes, 2);
    assert_eq!(red.take_result(), reference(&[data], Op::Sum));
    let gaps: Vec<u64> = dones.windows(2).map(|w| (w[1] - w[0]) / 1_000_000).collect();
    // 10, 20, 40, 80 ms, then the cap of 80 ms (a fifth of the linger).
    assert!(gaps.len() >= 5, "DONEs at {dones:?}");
    assert!(gaps.iter().zip([10u64, 20, 40, 80, 80]).all(|(&g, want)| g.abs_diff(want) <= 1), "gaps {gaps:?} ms");
    assert_eq!(red.stats.done_resent as usize, dones.len() - 1);
    assert_eq!(red.poll_timeout(), None, "nothing left to send once everyone said BYE");
}

/// A tree of several DAIET placement batches: packets are built as the window advances
/// (never more than a window held), the fallback re-reads the source from the start, and
/// the result is exact.
#[test]
fn lazy_mapper_holds_one_window_and_rereads_on_fallback() {
    let n = 2 * stream::DAIET_BATCH + 12_345;
    for (mode, loss) in [(Mode::Udp, 0.0), (Mode::Switch, 0.02)] {
        let data: Vec<_> = (0..2).map(|m| dataset(n, 5000, 11 + m)).collect();
        let mut mappers: Vec<_> = data.iter().enumerate().map(|(i, d)| mapper_for(i as u16, d, Op::Sum, mode)).collect();
        let (result, st) = drive(&mut mappers, mode, Op::Sum, 3, loss, loss, loss);
        assert_eq!(result, reference(&data, Op::Sum));
        assert_eq!(st.fallback, mode == Mode::Switch);
        for m in &mappers {
            assert_eq!(m.stats.pairs, n as u64);
            let window = MapperConfig::new(0, Op::Sum, mode).window as u64;
            assert!(m.stats.max_held_packets <= window, "{} packets held", m.stats.max_held_packets);
            assert!(m.stats.max_held_packets > 0);
        }
    }
}

/// Batches keep DAIET's packets full: only the stream's last fixed packet may be short,
/// and every pair is packed exactly once.
#[test]
fn packer_batches_keep_packets_full() {
    let data = dataset(3 * stream::DAIET_BATCH + 7, 900, 5);
    let hdr = Header { tree_id: 1, flags: 0, op: Op::Sum, sender: 0, epoch: 0 };
    let pk = Protocol::Daiet.packetize(hdr, data.iter().map(|(k, v)| (&k[..], *v)));
    let mut got: Vec<(Vec<u8>, u32)> = Vec::new();
    let mut short = 0;
    for p in &pk {
        let v = Protocol::Daiet.parse(p).unwrap();
        if v.repr.flags & wire::daiet::flags::VARLEN == 0 && (v.repr.num_pairs as usize) < wire::daiet::MAX_PAIRS {
            short += 1;
        }
        got.extend(v.view.pairs().map(|(k, v)| (k.to_vec(), v)));
    }
    assert!(short <= 1, "{short} short fixed packets");
    got.sort();
    let mut want = data.clone();
    want.sort();
    assert_eq!(got, want);
}

/// A source that fails on its `fail_at`-th read of a pair (counted over all reads).
struct Failing {
    inner: MemPairs,
    reads: usize,
    fail_at: usize,
}

impl PairSource for Failing {
    fn trees(&self) -> usize {
        self.inner.trees()
    }
    fn rewind(&mut self, tree: usize) -> Result<(), Error> {
        self.inner.rewind(tree)
    }
    fn next_pair(&mut self, tree: usize, key: &mut Vec<u8>) -> Result<Option<u32>, Error> {
        self.reads += 1;
        if self.reads == self.fail_at {
            return Err(Error::Source("spool: cut short".into()));
        }
        self.inner.next_pair(tree, key)
    }
}

#[test]
fn source_errors_are_reported() {
    let data = dataset(1000, 50, 9);
    let mut keys = Vec::new();
    let mut offs = vec![0u64];
    for (k, _) in &data {
        keys.extend_from_slice(k);
        offs.push(keys.len() as u64);
    }
    let vals: Vec<u32> = data.iter().map(|p| p.1).collect();
    let src =
        |fail_at| Failing { inner: MemPairs::new(1, keys.clone(), offs.clone(), vals.clone(), vec![0; 1000]).unwrap(), reads: 0, fail_at };
    let cfg = MapperConfig::new(0, Op::Sum, Mode::Udp);
    // In the census: refused before anything is sent.
    let err = Mapper::from_source(cfg.clone(), &[5], src(10), 0).err().expect("refused");
    assert_eq!(err, Error::Source("spool: cut short".into()));
    // While sending: the mapper reports it and builds nothing more.
    let mut m = Mapper::from_source(cfg, &[5], src(1001 + 300), 0).unwrap();
    let mut out = Vec::new();
    for _ in 0..100 {
        m.poll_transmit(0, &mut out);
        let acks: Vec<Vec<u8>> = out
            .drain(..)
            .map(|(_, p)| {
                let r = Protocol::Daiet.parse(&p).unwrap().repr;
                let h = Header {
                    tree_id: 5,
                    flags: wire::daiet::flags::ACK | wire::daiet::flags::BYPASS,
                    op: Op::Sum,
                    sender: 0,
                    epoch: r.epoch,
                };
                Protocol::Daiet.control(h, r.seq, 0)
            })
            .collect();
        for a in acks {
            m.handle(0, &a);
        }
    }
    assert_eq!(m.error(), Some(&Error::Source("spool: cut short".into())));
    assert!(!m.is_done());
}

/// The packets of `q` (sent in time order with one delay) due by `now`.
fn due(q: &mut Vec<(u64, Vec<u8>)>, now: u64) -> Vec<Vec<u8>> {
    let n = q.iter().take_while(|(t, _)| *t <= now).count();
    q.drain(..n).map(|(_, p)| p).collect()
}

/// A round trip longer than the reducer's DONE timer (a loaded host): DONE goes again while
/// the BYE is on its way. The mapper answers every DONE, the reducer says GONE only once
/// each is answered, and only then may the mapper close: no DONE is left to reach a closed
/// socket (whose ICMP error would be a frame the mapper never sent).
#[test]
fn gone_only_after_every_done_is_answered() {
    let data = dataset(200, 40, 4);
    let mut m = mapper_for(0, &data, Op::Sum, Mode::Udp);
    let mut cfg = ReducerConfig::new(5, 1, Op::Sum, Mode::Udp);
    cfg.rto_ns = 10_000_000;
    let mut red = Reducer::new(cfg);
    let delay = 15_000_000u64; // each way
    let (mut to_red, mut to_map) = (Vec::new(), Vec::new());
    let (mut now, mut dones, mut byes, mut closed_at) = (0u64, 0, 0, None);
    while now < 5_000_000_000 {
        let mut o = Vec::new();
        m.poll_transmit(now, &mut o);
        for (_, p) in o {
            let r = Protocol::Daiet.parse(&p).unwrap().repr;
            byes += usize::from(r.flags & flags::QUERY != 0 && r.info == wire::daiet::info::BYE);
            to_red.push((now + delay, p));
        }
        for p in due(&mut to_red, now) {
            red.handle(now, &p);
        }
        red.handle_timeout(now);
        let mut back = Vec::new();
        red.poll_transmit(&mut back);
        for (_, p) in back {
            dones += usize::from(Protocol::Daiet.parse(&p).unwrap().repr.flags & flags::DONE != 0);
            to_map.push((now + delay, p));
        }
        for p in due(&mut to_map, now) {
            assert!(closed_at.is_none(), "a packet reached the mapper {} ms after it closed", (now - closed_at.unwrap_or(0)) / 1_000_000);
            m.handle(now, &p);
        }
        if closed_at.is_none() && m.may_close() {
            closed_at = Some(now);
        }
        if closed_at.is_some() && red.all_answered() && to_red.is_empty() && to_map.is_empty() {
            break;
        }
        now += 1_000_000;
    }
    assert!(closed_at.is_some() && red.all_answered(), "mapper closed at {closed_at:?}, reducer answered: {}", red.all_answered());
    assert!(red.stats.done_resent > 0, "the DONE timer fired while the BYE was on its way");
    assert!(dones > 1 && byes == dones, "{dones} DONEs, {byes} BYEs");
    assert_eq!(red.take_result(), reference(&[data], Op::Sum));
}
