//! SwitchML-style allreduce end to end: hostlib workers and the `allreduce` program over an
//! in-memory switch, with loss, duplication and reordering injected on every link. The
//! result every worker gets must be the exact (wrapping) integer sum of the inputs.

use std::sync::Arc;

use hostlib::allreduce::{Worker, WorkerConfig};
use pisa::control::{ControlOp, ControlReply, Replica, WriteOp};
use pisa::{DropCode, FieldMatch, PacketBuf, PipeConfig, ProgramSet, ResourceReport, Switch, Target};
use programs::allreduce::Allreduce;
use programs::forward::Forward;
use wire::allreduce::{flags, Packet, Repr, ELEMS, UDP_PORT};

mod common;
use common::*;

const WORKER_PORT: u16 = 6000;

/// A job: id, its hosts (each on the switch port numbered as the host), its slots.
struct JobSpec {
    id: u16,
    hosts: Vec<u8>,
    slots: u16,
    pool_base: u32,
    seen_base: u32,
}

fn set() -> Arc<ProgramSet> {
    Arc::new(ProgramSet::new(vec![Arc::new(Forward::new()), Arc::new(Allreduce::new())]).unwrap())
}

fn install(sw: &mut Switch, set: &ProgramSet, job: &JobSpec) {
    // Each host on its own port here, worker `i` on `hosts[i]`: each port allows one id.
    let ports: Vec<(u8, u16, u16)> = job.hosts.iter().enumerate().map(|(i, &h)| (h, i as u16, 1)).collect();
    install_jobs(sw, set, job, &ports);
    let replicas = job.hosts.iter().map(|&h| Replica { port: h as u16, rid: h as u16 }).collect();
    sw.control(&ControlOp::McastGroupWrite { op: WriteOp::Insert, group: job.id + 1, replicas }).unwrap();
    let (t, a) = ids(set, 1, "worker_addr", "set_addr");
    for &h in &job.hosts {
        sw.control(&worker_addr(t, a, h, h as u16, WORKER_PORT)).unwrap();
    }
}

/// The `worker_addr` entry of replica `rid`: host `h`'s MAC and address, UDP port `udp`.
fn worker_addr(t: u32, a: u32, h: u8, rid: u16, udp: u16) -> ControlOp {
    let mut m = [0u8; 8];
    m[2..].copy_from_slice(&mac(h));
    ControlOp::TableWrite {
        table_id: t,
        op: WriteOp::Insert,
        matches: vec![FieldMatch::Exact { field: 0, value: be_bytes(rid as u64, 16) }],
        priority: 0,
        action_id: a,
        params: vec![
            (1, be_bytes(u64::from_be_bytes(m), 48)),
            (2, be_bytes(u32::from_be_bytes([10, 0, 0, h]) as u64, 32)),
            (3, be_bytes(udp as u64, 16)),
            (4, be_bytes(0x0200_0000_00FE, 48)),
            (5, be_bytes(u32::from_be_bytes([10, 0, 0, 254]) as u64, 32)),
        ],
    }
}

/// The job's `jobs` entries: one per `(port, first worker, workers on it)`.
fn install_jobs(sw: &mut Switch, set: &ProgramSet, job: &JobSpec, ports: &[(u8, u16, u16)]) {
    let (t, a) = ids(set, 1, "jobs", "set_job");
    let group = job.id + 1;
    let workers: u16 = ports.iter().map(|p| p.2).sum();
    for &(h, first, n) in ports {
        sw.control(&ControlOp::TableWrite {
            table_id: t,
            op: WriteOp::Insert,
            matches: vec![
                FieldMatch::Exact { field: 0, value: be_bytes(h as u64, 16) },
                FieldMatch::Exact { field: 1, value: be_bytes(job.id as u64, 16) },
            ],
            priority: 0,
            action_id: a,
            params: vec![
                (1, be_bytes(job.pool_base as u64, 32)),
                (2, be_bytes(job.slots as u64, 16)),
                (3, be_bytes(workers as u64, 16)),
                (4, be_bytes(job.seen_base as u64, 32)),
                (5, be_bytes(group as u64, 16)),
                (6, be_bytes((first as u64) << 16 | n as u64, 32)),
            ],
        })
        .unwrap();
    }
}

/// Run every job's workers (one operation per input vector, in order) to completion.
/// `inputs[j][w][op]` is worker `w` of job `j`'s vector for operation `op`; returns each
/// worker's results in the same shape.
fn run(jobs: &[JobSpec], inputs: &[Vec<Vec<Vec<i32>>>], f: Faults, seed: u64) -> (Vec<Vec<Vec<Vec<i32>>>>, u64) {
    let set = set();
    let hosts: Vec<u8> = jobs.iter().flat_map(|j| j.hosts.clone()).collect();
    let ports = hosts.iter().map(|&h| h as u16 + 1).max().unwrap().max(16);
    let mut sw = Switch::new(set.clone(), ports, 1, PipeConfig::default());
    for j in jobs {
        install(&mut sw, &set, j);
    }
    let mut net = Net::one_switch(sw, &hosts, seed, f);
    let rto = 50_000;
    // (job, worker index, host, worker)
    let mut ws: Vec<(usize, usize, u8, Worker)> = Vec::new();
    for (ji, j) in jobs.iter().enumerate() {
        for (wi, &h) in j.hosts.iter().enumerate() {
            let cfg = WorkerConfig { job: j.id, worker: wi as u16, workers: j.hosts.len() as u16, slots: j.slots, rto_ns: rto };
            ws.push((ji, wi, h, Worker::new(cfg)));
        }
    }
    let mut out: Vec<Vec<Vec<Vec<i32>>>> = jobs.iter().map(|j| vec![Vec::new(); j.hosts.len()]).collect();
    let mut now = 0u64;
    for (ji, wi, _, w) in &mut ws {
        w.start(now, &inputs[*ji][*wi][0], false);
    }
    let mut steps = 0;
    loop {
        steps += 1;
        assert!(steps < 200_000, "no progress");
        let mut sent = Vec::new();
        for (_, _, h, w) in &mut ws {
            while let Some(p) = w.poll_transmit() {
                sent.push((*h, frame(*h, WORKER_PORT, 200, UDP_PORT, &p)));
            }
        }
        let idle = sent.is_empty();
        let arrived = net.run(sent, now, idle);
        for (h, fr) in arrived {
            let (dst, dport, payload) = unframe(&fr).expect("a UDP frame");
            assert_eq!((dst, dport), (h, WORKER_PORT), "each copy addressed to its worker");
            assert_ne!(fr[26..30], [10, 0, 0, h], "never from the worker's own address (its kernel would drop it)");
            let w = ws.iter_mut().find(|x| x.2 == h).unwrap();
            w.3.handle(now, payload);
        }
        // Finished operations: record, start the next.
        for (ji, wi, _, w) in &mut ws {
            if w.is_done() && out[*ji][*wi].len() < inputs[*ji][*wi].len() {
                out[*ji][*wi].push(w.result().to_vec());
                if let Some(next) = inputs[*ji][*wi].get(out[*ji][*wi].len()) {
                    w.start(now, next, false);
                }
            }
        }
        if out.iter().zip(inputs).all(|(o, i)| o.iter().zip(i).all(|(a, b)| a.len() == b.len())) {
            break;
        }
        now += 1_000;
        if idle {
            if let Some(t) = ws.iter().filter_map(|x| x.3.poll_timeout()).min() {
                now = now.max(t);
            }
        }
        for (_, _, _, w) in &mut ws {
            w.handle_timeout(now);
        }
    }
    let retrans = ws.iter().map(|x| x.3.stats().retransmissions).sum();
    (out, retrans)
}

fn inputs(rng: &mut Rng, workers: usize, lens: &[usize]) -> Vec<Vec<Vec<i32>>> {
    (0..workers).map(|_| lens.iter().map(|&n| (0..n).map(|_| rng.next() as i32).collect()).collect()).collect()
}

fn exact_sum(per_worker: &[Vec<Vec<i32>>], op: usize) -> Vec<i32> {
    let n = per_worker[0][op].len();
    (0..n).map(|i| per_worker.iter().fold(0i32, |s, w| s.wrapping_add(w[op][i]))).collect()
}

fn check(jobs: &[JobSpec], ins: &[Vec<Vec<Vec<i32>>>], out: &[Vec<Vec<Vec<i32>>>]) {
    for ((job, job_in), job_out) in jobs.iter().zip(ins).zip(out) {
        for op in 0..job_in[0].len() {
            let want = exact_sum(job_in, op);
            for (w, got) in job_out.iter().enumerate() {
                assert_eq!(&got[op][..want.len()], &want[..], "job {} worker {w} op {op}", job.id);
            }
        }
    }
}

#[test]
fn exact_sum_under_faults_for_2_to_40_workers() {
    let f = Faults { loss: 0.05, dup: 0.05, reorder: 0.1 };
    for (i, &n) in [2usize, 3, 8, 17, 33, 40].iter().enumerate() {
        let mut rng = Rng(0x5EED + i as u64);
        let job = JobSpec { id: 7, hosts: (1..=n as u8).collect(), slots: 8, pool_base: 100, seen_base: 5000 };
        // Three operations in a row (the copies alternate across them), one not a whole
        // number of packets, one shorter than the window.
        let ins = vec![inputs(&mut rng, n, &[1000, 45, 320])];
        let (out, retrans) = run(&[job], &ins, f, 11 + i as u64);
        check(&[JobSpec { id: 7, hosts: (1..=n as u8).collect(), slots: 8, pool_base: 100, seen_base: 5000 }], &ins, &out);
        assert!(retrans > 0, "faults were injected and recovered from ({n} workers)");
    }
}

#[test]
fn fault_free_sends_each_contribution_once() {
    let mut rng = Rng(99);
    let job = JobSpec { id: 1, hosts: (1..=4).collect(), slots: 16, pool_base: 0, seen_base: 0 };
    let ins = vec![inputs(&mut rng, 4, &[32 * 64])];
    let (out, retrans) = run(std::slice::from_ref(&job), &ins, Faults::default(), 1);
    check(&[job], &ins, &out);
    assert_eq!(retrans, 0);
}

#[test]
fn two_jobs_at_once_in_separate_partitions() {
    let f = Faults { loss: 0.03, dup: 0.03, reorder: 0.05 };
    let mut rng = Rng(4242);
    let a = JobSpec { id: 1, hosts: (1..=5).collect(), slots: 4, pool_base: 0, seen_base: 0 };
    let b = JobSpec { id: 2, hosts: (10..=12).collect(), slots: 6, pool_base: 4, seen_base: 20 };
    let ins = vec![inputs(&mut rng, 5, &[700, 64]), inputs(&mut rng, 3, &[900, 33])];
    let jobs = [a, b];
    let (out, _) = run(&jobs, &ins, f, 5);
    check(&jobs, &ins, &out);
}

#[test]
fn float_allreduce_agrees_with_the_float_sum() {
    // The float path (exponent round, then data) over a lossy switch: every worker gets
    // the same result, within the quantization step of the f64 sum.
    let set = set();
    let hosts: Vec<u8> = (1..=6).collect();
    let mut sw = Switch::new(set.clone(), 16, 1, PipeConfig::default());
    let job = JobSpec { id: 3, hosts: hosts.clone(), slots: 8, pool_base: 0, seen_base: 0 };
    install(&mut sw, &set, &job);
    let mut net = Net::one_switch(sw, &hosts, 3, Faults { loss: 0.05, dup: 0.05, reorder: 0.05 });
    let mut rng = Rng(17);
    let xs: Vec<Vec<f32>> = (0..6).map(|_| (0..500).map(|i| ((rng.f() - 0.5) * 10f64.powi(i % 7 - 3)) as f32).collect()).collect();
    let mut ws: Vec<Worker> =
        (0..6).map(|w| Worker::new(WorkerConfig { job: 3, worker: w as u16, workers: 6, slots: 8, rto_ns: 50_000 })).collect();
    let mut now = 0;
    for (w, x) in ws.iter_mut().zip(&xs) {
        w.start_floats(now, x);
    }
    for _ in 0..100_000 {
        if ws.iter().all(|w| w.float_done()) {
            break;
        }
        let mut sent = Vec::new();
        for (i, w) in ws.iter_mut().enumerate() {
            while let Some(p) = w.poll_transmit() {
                sent.push((hosts[i], frame(hosts[i], WORKER_PORT, 200, UDP_PORT, &p)));
            }
        }
        let idle = sent.is_empty();
        for (h, fr) in net.run(sent, now, idle) {
            let (_, _, payload) = unframe(&fr).unwrap();
            ws[h as usize - 1].handle(now, payload);
        }
        now += 10_000;
        for w in &mut ws {
            w.handle_timeout(now);
        }
    }
    let results: Vec<Vec<f32>> = ws.iter_mut().map(|w| w.take_floats().expect("finished")).collect();
    for r in &results[1..] {
        assert_eq!(r, &results[0], "every worker the same bits");
    }
    for (c, chunk) in results[0].chunks(32).enumerate() {
        let maxabs = xs.iter().flat_map(|x| x[c * 32..(c * 32 + 32).min(500)].iter()).fold(0f64, |m, v| m.max(v.abs() as f64));
        for (i, got) in chunk.iter().enumerate() {
            let want: f64 = xs.iter().map(|x| x[c * 32 + i] as f64).sum();
            // Half a step 2^(e - 30 + log2 8) per value, six values; then the f32 rounding.
            assert!(
                (*got as f64 - want).abs() <= 6.0 * maxabs * 2f64.powi(-26) + want.abs() * 2f64.powi(-24) + 1e-12,
                "chunk {c} elem {i}: {got} vs {want}"
            );
        }
    }
}

/// One contribution of `worker` to slot 0, copy 0 of `job`, from host (and port) `h`.
fn contribution(h: u8, job: u16, worker: u16, values: [i32; ELEMS]) -> PacketBuf {
    let p = Repr { job, flags: 0, ver: 0, worker, slot: 0, offset: 0, values }.to_bytes();
    PacketBuf::from_slice(&frame(h, WORKER_PORT, 200, UDP_PORT, &p), h as u16)
}

fn allreduce_drops(sw: &Switch, set: &ProgramSet, name: &str) -> u64 {
    let code = DropCode::FIRST_PROGRAM as usize + set.decl(1).drop_reasons.iter().position(|r| r == name).unwrap();
    sw.counters().programs[1].drops[code]
}

#[test]
fn a_live_job_id_from_a_port_not_in_the_job_is_dropped_and_counted() {
    // Job 5's workers are hosts 1 and 2; host 9 (its own port) has learnt the live id and
    // sends worker 1's contribution to the slot worker 0 has just filled.
    let set = set();
    let mut sw = Switch::new(set.clone(), 16, 1, PipeConfig::default());
    let job = JobSpec { id: 5, hosts: vec![1, 2], slots: 4, pool_base: 0, seen_base: 0 };
    install(&mut sw, &set, &job);
    let a: [i32; ELEMS] = std::array::from_fn(|i| 1000 + i as i32);
    let b: [i32; ELEMS] = std::array::from_fn(|i| -7 * i as i32);
    let forged = [0x4000_0000i32; ELEMS];
    sw.process(&mut vec![contribution(1, 5, 0, a)], 0);
    assert!(sw.drain_all().is_empty(), "the first contribution is absorbed");
    let unknown = allreduce_drops(&sw, &set, "allreduce_unknown_job");
    sw.process(&mut vec![contribution(9, 5, 1, forged), contribution(9, 5, 0, forged)], 0);
    assert!(sw.drain_all().is_empty(), "nothing answers the forged port");
    assert_eq!(allreduce_drops(&sw, &set, "allreduce_unknown_job") - unknown, 2, "both forged packets counted as unknown-job drops");
    // Worker 1's real contribution completes the slot: the sum is a + b alone.
    sw.process(&mut vec![contribution(2, 5, 1, b)], 0);
    let out = sw.drain_all();
    let mut ports: Vec<u16> = out.iter().map(|(p, _)| *p).collect();
    ports.sort();
    assert_eq!(ports, [1, 2], "the result multicast to the job's two workers");
    let want: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x.wrapping_add(*y)).collect();
    for (p, fr) in &out {
        let (_, _, payload) = unframe(fr).expect("a UDP frame");
        let r = Repr::parse(&Packet::new_checked(payload).unwrap()).unwrap();
        assert_eq!(r.flags & flags::RESULT, flags::RESULT);
        assert_eq!(&r.values[..], &want[..], "port {p}: the sum of the job's workers only");
    }
}

/// Cell `k` of the allreduce register `name`.
fn cell(sw: &mut Switch, set: &ProgramSet, name: &str, k: u32) -> u64 {
    let i = set.decl(1).registers.iter().position(|r| r.name == name).unwrap();
    match sw.control(&ControlOp::RegisterRead { register_id: set.ids(1).registers[i], index: Some(k) }).unwrap() {
        ControlReply::RegisterCells(v) => v[0].1,
        r => panic!("{r:?}"),
    }
}

#[test]
fn a_worker_id_not_of_its_port_is_dropped_and_counted() {
    // Job 6: workers 0 and 1 on host 1 (one port, as the INaaS dense tenant's four on its
    // host), worker 2 on host 2. Each port may send only its own ids: host 2 sending as
    // worker 0 or 1 (below its first id) or host 1 as worker 2 (beyond its range) would
    // otherwise take that worker's seen-cell or add a second contribution.
    let set = set();
    let mut sw = Switch::new(set.clone(), 16, 1, PipeConfig::default());
    let job = JobSpec { id: 6, hosts: vec![1, 1, 2], slots: 4, pool_base: 3, seen_base: 40 };
    install_jobs(&mut sw, &set, &job, &[(1, 0, 2), (2, 2, 1)]);
    let replicas = vec![Replica { port: 1, rid: 10 }, Replica { port: 1, rid: 11 }, Replica { port: 2, rid: 12 }];
    sw.control(&ControlOp::McastGroupWrite { op: WriteOp::Insert, group: job.id + 1, replicas }).unwrap();
    let (t, a) = ids(&set, 1, "worker_addr", "set_addr");
    for (h, rid, udp) in [(1, 10, WORKER_PORT), (1, 11, WORKER_PORT + 1), (2, 12, WORKER_PORT)] {
        sw.control(&worker_addr(t, a, h, rid, udp)).unwrap();
    }
    let xs: [[i32; ELEMS]; 3] =
        [std::array::from_fn(|i| 1000 + i as i32), std::array::from_fn(|i| -7 * i as i32), std::array::from_fn(|i| 3 << i.min(30))];
    let forged = [0x4000_0000i32; ELEMS];
    let cell_index = job.pool_base * 2; // slot 0, copy 0
    sw.process(&mut vec![contribution(1, 6, 0, xs[0])], 0);
    assert!(sw.drain_all().is_empty(), "the first contribution is absorbed");
    let before = allreduce_drops(&sw, &set, "allreduce_worker_not_on_port");
    let (count, pool0) = (cell(&mut sw, &set, "count", cell_index), cell(&mut sw, &set, "pool_0", cell_index));
    assert_eq!((count, pool0), (1, xs[0][0] as u32 as u64));
    let seen_1 = cell(&mut sw, &set, "seen", job.seen_base + 1);
    sw.process(
        &mut vec![
            contribution(2, 6, 0, forged),
            contribution(2, 6, 1, forged),
            contribution(1, 6, 2, forged),
            contribution(2, 6, 1, forged),
        ],
        0,
    );
    assert!(sw.drain_all().is_empty(), "nothing answers a forged worker id");
    assert_eq!(allreduce_drops(&sw, &set, "allreduce_worker_not_on_port") - before, 4, "every forged id counted");
    assert_eq!(allreduce_drops(&sw, &set, "allreduce_out_of_range"), 0, "within the job's workers: not an out-of-range drop");
    // Nothing of them reached the registers: the slot's count and sums, worker 1's seen-cell.
    assert_eq!(cell(&mut sw, &set, "count", cell_index), count);
    for (e, &x) in xs[0].iter().enumerate() {
        assert_eq!(cell(&mut sw, &set, &format!("pool_{e}"), cell_index), x as u32 as u64, "pool_{e}");
    }
    assert_eq!(cell(&mut sw, &set, "seen", job.seen_base + 1), seen_1, "worker 1's seen-cell untouched");
    // The real workers 1 (host 1, beside worker 0) and 2 (host 2) complete the slot: exactly
    // the sum of the three, to all three.
    sw.process(&mut vec![contribution(1, 6, 1, xs[1])], 0);
    assert!(sw.drain_all().is_empty(), "worker 1's contribution is new and absorbed");
    sw.process(&mut vec![contribution(2, 6, 2, xs[2])], 0);
    let out = sw.drain_all();
    let mut to: Vec<(u16, u16)> = out.iter().map(|(p, fr)| (*p, unframe(fr).expect("a UDP frame").1)).collect();
    to.sort();
    assert_eq!(to, [(1, WORKER_PORT), (1, WORKER_PORT + 1), (2, WORKER_PORT)], "the result multicast to the three workers");
    let want: Vec<i32> = (0..ELEMS).map(|i| xs[0][i].wrapping_add(xs[1][i]).wrapping_add(xs[2][i])).collect();
    for (p, fr) in &out {
        let (_, _, payload) = unframe(fr).unwrap();
        let r = Repr::parse(&Packet::new_checked(payload).unwrap()).unwrap();
        assert_eq!(r.flags & flags::RESULT, flags::RESULT);
        assert_eq!(&r.values[..], &want[..], "port {p}: the sum of the three real contributions");
    }
    assert_eq!(cell(&mut sw, &set, "count", cell_index), 0, "complete: the count wrapped to 0");
}

#[test]
fn allreduce_fits_tofino1() {
    let set = set();
    let decls: Vec<_> = (0..set.len()).map(|i| set.decl(i)).collect();
    let r = ResourceReport::new(&decls, &Target::tofino1());
    assert!(r.fits, "{:?}", r.problems);
}
