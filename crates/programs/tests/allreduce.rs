//! SwitchML-style allreduce end to end: hostlib workers and the `allreduce` program over an
//! in-memory switch, with loss, duplication and reordering injected on every link. The
//! result every worker gets must be the exact (wrapping) integer sum of the inputs.

use std::sync::Arc;

use hostlib::allreduce::{Worker, WorkerConfig};
use pisa::control::{ControlOp, Replica, WriteOp};
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
    let (t, a) = ids(set, 1, "jobs", "set_job");
    let group = job.id + 1;
    // One `jobs` entry per worker port (each host on its own port here).
    for &h in &job.hosts {
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
                (3, be_bytes(job.hosts.len() as u64, 16)),
                (4, be_bytes(job.seen_base as u64, 32)),
                (5, be_bytes(group as u64, 16)),
            ],
        })
        .unwrap();
    }
    let replicas = job.hosts.iter().map(|&h| Replica { port: h as u16, rid: h as u16 }).collect();
    sw.control(&ControlOp::McastGroupWrite { op: WriteOp::Insert, group, replicas }).unwrap();
    let (t, a) = ids(set, 1, "worker_addr", "set_addr");
    for &h in &job.hosts {
        let mut m = [0u8; 8];
        m[2..].copy_from_slice(&mac(h));
        sw.control(&ControlOp::TableWrite {
            table_id: t,
            op: WriteOp::Insert,
            matches: vec![FieldMatch::Exact { field: 0, value: be_bytes(h as u64, 16) }],
            priority: 0,
            action_id: a,
            params: vec![
                (1, be_bytes(u64::from_be_bytes(m), 48)),
                (2, be_bytes(u32::from_be_bytes([10, 0, 0, h]) as u64, 32)),
                (3, be_bytes(WORKER_PORT as u64, 16)),
                (4, be_bytes(0x0200_0000_00FE, 48)),
                (5, be_bytes(u32::from_be_bytes([10, 0, 0, 254]) as u64, 32)),
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

#[test]
fn allreduce_fits_tofino1() {
    let set = set();
    let decls: Vec<_> = (0..set.len()).map(|i| set.decl(i)).collect();
    let r = ResourceReport::new(&decls, &Target::tofino1());
    assert!(r.fits, "{:?}", r.problems);
}
