//! The data-plane driver: one thread per pipe, each owning its ports and its [`Pipe`],
//! moving batches between ports and the pipeline. This is the I/O loop around the sans-IO
//! core; the control plane talks to it through [`Dataplane`] (commands applied between
//! batches, PacketIn and digests delivered through queues).
//!
//! A pipe thread sleeps in epoll on its ports' fds and a doorbell when it has nothing to
//! do, so an idle switch uses no CPU (the machines this runs on have two cores, shared
//! with the hosts).
//!
//! Packets crossing pipes (ingress in the pipe of the ingress port, egress in the pipe of
//! the egress port, as on a Tofino) go through the traffic manager's crossbar: one bounded
//! lock-free ring per ordered pair of pipes, with exactly one producer (the ingress pipe's
//! thread) and one consumer (the egress pipe's thread), so no lock and no shared queue is
//! on the packet path. A full ring drops the packet, counted as the traffic manager's
//! `pipe_ring_full` drop at its egress port. The ring's producer rings the consumer's
//! doorbell (an eventfd write) only when the consumer has gone to sleep.
//!
//! With [`DataplaneOptions::cores`] each pipe thread is pinned to one CPU
//! (`sched_setaffinity`).

use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use pisa::control::{ControlError, ControlOp, ControlReply};
use pisa::counters::Counters;
use pisa::pass::DigestMsg;
use pisa::pipe::{Handoff, PacketIn, Pipe, PipeConfig, PortMap};
use pisa::{PacketBuf, PortId, ProgramSet};

use crate::port::Port;
use crate::stats::PortStats;
use crate::sys::{monotonic_ns, EventFd};

/// How the driver runs.
#[derive(Clone, Debug)]
pub struct DataplaneOptions {
    /// Pipes (threads); ports are split among them contiguously.
    pub pipes: u8,
    /// Queue sizes and rates of every pipe.
    pub pipe: PipeConfig,
    /// Frames read per port per loop iteration.
    pub batch: usize,
    /// Most PacketIn messages / digests held for the controller before new ones are dropped.
    pub event_capacity: usize,
    /// File ports start replaying only at [`Dataplane::start_replay`] (so the controller can
    /// install entries first), instead of at once.
    pub hold_replay: bool,
    /// CPU of each pipe's thread (`cores[i]` runs pipe `i`); empty: not pinned. Checked by
    /// [`check_cores`] at start.
    pub cores: Vec<usize>,
    /// Batches each crossbar ring (one per ordered pair of pipes) holds: a batch is what
    /// one ingress call sent to that pipe (at most a batch from every port of the pipe).
    pub ring_capacity: usize,
}

/// How long a pipe of a multi-pipe switch polls its rings, idle, before it sleeps.
const SPIN_BEFORE_SLEEP_NS: u64 = 100_000;

/// Batches a crossbar ring holds by default (4096 packets in batches of 32).
pub const DEFAULT_RING_CAPACITY: usize = 128;

/// The CPUs this process may run on (its affinity mask).
pub fn allowed_cores() -> io::Result<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET reads the set we own, for indices below CPU_SETSIZE.
    Ok((0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// Check a list of cores for `pipes` pipes: one per pipe, distinct, each one this process
/// may run on. The error is one line.
pub fn check_cores(cores: &[usize], pipes: u8) -> Result<(), String> {
    if cores.is_empty() {
        return Ok(());
    }
    if cores.len() != pipes as usize {
        return Err(format!("{} cores for {pipes} pipe{}: give one core per pipe", cores.len(), if pipes == 1 { "" } else { "s" }));
    }
    for (i, c) in cores.iter().enumerate() {
        if cores[..i].contains(c) {
            return Err(format!("core {c} is listed twice: each pipe needs its own core"));
        }
    }
    let allowed = allowed_cores().map_err(|e| format!("cannot read this process's CPU affinity: {e}"))?;
    if let Some(c) = cores.iter().find(|c| !allowed.contains(c)) {
        return Err(format!("core {c} is not one this process may run on (allowed: {})", fmt_cores(&allowed)));
    }
    Ok(())
}

/// `0-3,6` style list of cores.
pub fn fmt_cores(cores: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cores.len() {
        let mut j = i;
        while j + 1 < cores.len() && cores[j + 1] == cores[j] + 1 {
            j += 1;
        }
        out.push(if j > i { format!("{}-{}", cores[i], cores[j]) } else { cores[i].to_string() });
        i = j + 1;
    }
    out.join(",")
}

/// Pin the calling thread to `core`.
fn pin_to(core: usize) -> io::Result<()> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set; CPU_SET writes inside it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if core >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("core {core} out of range")));
    }
    // SAFETY: `core` is below CPU_SETSIZE (checked above).
    unsafe { libc::CPU_SET(core, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; 0 is the calling thread.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A pipe's doorbell: an eventfd its epoll waits on, and whether the pipe sleeps (so
/// producers of crossbar rings write the eventfd only when it does).
struct Doorbell {
    efd: EventFd,
    sleeping: AtomicBool,
}

impl Doorbell {
    fn new() -> io::Result<Doorbell> {
        Ok(Doorbell { efd: EventFd::new()?, sleeping: AtomicBool::new(false) })
    }
    /// Wake the pipe unconditionally (commands, stop).
    fn signal(&self) {
        self.efd.signal();
    }
    /// Wake the pipe if it sleeps, after packets were pushed to one of its rings. The fence
    /// pairs with the one in the consumer between `sleeping = true` and its last look at
    /// the rings: either the consumer sees the packets or the producer sees it sleeping.
    #[inline]
    fn wake_if_sleeping(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) && self.sleeping.swap(false, Ordering::AcqRel) {
            self.efd.signal();
        }
    }
}

/// One ring of the crossbar: packets from one pipe's ingress to another pipe's egress, in
/// the batches one ingress call produced (one atomic operation per batch, not per packet).
struct Ring {
    q: ArrayQueue<Vec<PacketBuf>>,
    /// Emptied batch vectors going back to the producer (so the packet path does not
    /// allocate).
    spare: ArrayQueue<Vec<PacketBuf>>,
    /// Packets ever pushed (written by the producer only; read by [`Dataplane::replay_done`]).
    pushed: AtomicU64,
}

impl Ring {
    /// A ring of `batches` batches.
    fn new(batches: usize) -> Ring {
        Ring { q: ArrayQueue::new(batches), spare: ArrayQueue::new(batches + 1), pushed: AtomicU64::new(0) }
    }
}

/// The traffic manager's crossbar: `rings[from][to]` (None on the diagonal).
type Crossbar = Vec<Vec<Option<Arc<Ring>>>>;

impl Default for DataplaneOptions {
    fn default() -> Self {
        DataplaneOptions {
            pipes: 1,
            pipe: PipeConfig::default(),
            batch: 64,
            event_capacity: 65536,
            hold_replay: false,
            cores: Vec::new(),
            ring_capacity: DEFAULT_RING_CAPACITY,
        }
    }
}

type Reply<T> = Sender<T>;

enum Cmd {
    Control(ControlOp, Reply<Result<ControlReply, ControlError>>),
    /// Writes applied in order in one wakeup of the pipe, one result each.
    ControlMany(Arc<Vec<ControlOp>>, Reply<Vec<Result<(), ControlError>>>),
    PacketOut(Vec<u8>, Option<PortId>, Reply<Result<(), ControlError>>),
    Counters(Reply<Counters>),
    Replace(Arc<ProgramSet>, Reply<()>),
    Replay(Reply<Replay>),
    TraceArm(Option<pisa::TraceSession>, Reply<()>),
    TraceTake(u64, Reply<pisa::TraceTake>),
}

/// One pipe's answer to "is the replay over?".
#[derive(Clone, Copy)]
struct Replay {
    /// The pipe has a port replaying a file.
    replays: bool,
    /// Every replaying port of the pipe is done and nothing waits in the pipe.
    drained: bool,
}

/// A queue the controller waits on (each queue has its own condition variable).
struct EventQueue<T> {
    q: Mutex<VecDeque<T>>,
    cv: Condvar,
}

impl<T> EventQueue<T> {
    fn new() -> Self {
        EventQueue { q: Mutex::new(VecDeque::new()), cv: Condvar::new() }
    }
}

/// Events for the controller, filled by pipe threads.
struct Events {
    packet_ins: EventQueue<(Vec<u8>, PortId)>,
    digests: EventQueue<DigestMsg>,
    dropped: std::sync::atomic::AtomicU64,
    capacity: usize,
}

struct PipeHandle {
    tx: Sender<Cmd>,
    bell: Arc<Doorbell>,
}

impl PipeHandle {
    fn send(&self, c: Cmd) -> Result<(), ControlError> {
        self.tx.send(c).map_err(|_| ControlError::Unavailable("the data plane has stopped".into()))?;
        self.bell.signal();
        Ok(())
    }
}

/// A running data plane.
pub struct Dataplane {
    pipes: Vec<PipeHandle>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    stop: Arc<AtomicBool>,
    events: Arc<Events>,
    port_stats: Vec<(String, Arc<PortStats>)>,
    set: Mutex<Arc<ProgramSet>>,
    map: PortMap,
    /// The crossbar's rings.
    rings: Vec<Arc<Ring>>,
    /// The CPU of each pipe's thread (empty: not pinned).
    cores: Vec<usize>,
    /// Set while file ports wait for [`Dataplane::start_replay`].
    replay_held: Arc<AtomicBool>,
}

fn recv_reply<T>(rx: Receiver<T>) -> Result<T, ControlError> {
    rx.recv_timeout(Duration::from_secs(10)).map_err(|_| ControlError::Unavailable("the data plane did not answer".into()))
}

impl Dataplane {
    /// Start one thread per pipe over `ports` (whose ids must be 0..N).
    pub fn start(set: Arc<ProgramSet>, ports: Vec<Box<dyn Port>>, opts: DataplaneOptions) -> io::Result<Dataplane> {
        let n = ports.len();
        for (i, p) in ports.iter().enumerate() {
            if p.id() as usize != i {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("port {} has id {}, expected {i}", p.name(), p.id())));
            }
        }
        let map = PortMap::contiguous(n as u16, opts.pipes.max(1));
        check_cores(&opts.cores, map.pipes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let port_stats = ports.iter().map(|p| (p.name().to_string(), p.stats())).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let events = Arc::new(Events {
            packet_ins: EventQueue::new(),
            digests: EventQueue::new(),
            dropped: Default::default(),
            capacity: opts.event_capacity,
        });
        let mut per_pipe: Vec<Vec<Box<dyn Port>>> = (0..map.pipes()).map(|_| Vec::new()).collect();
        for p in ports {
            let pipe = map.pipe_of(p.id()).unwrap_or(0) as usize;
            per_pipe[pipe].push(p);
        }
        let mut handles = Vec::new();
        let mut receivers = Vec::new();
        for _ in 0..map.pipes() {
            let (tx, rx) = channel();
            handles.push(PipeHandle { tx, bell: Arc::new(Doorbell::new()?) });
            receivers.push(rx);
        }
        let np = map.pipes() as usize;
        let cap = opts.ring_capacity.max(1);
        let crossbar: Crossbar = (0..np).map(|from| (0..np).map(|to| (from != to).then(|| Arc::new(Ring::new(cap)))).collect()).collect();
        let rings: Vec<Arc<Ring>> = crossbar.iter().flatten().flatten().cloned().collect();
        let bells: Vec<Arc<Doorbell>> = handles.iter().map(|h| h.bell.clone()).collect();
        let mut threads = Vec::new();
        let replay_held = Arc::new(AtomicBool::new(opts.hold_replay));
        for (i, (ports, rx)) in per_pipe.into_iter().zip(receivers).enumerate() {
            let pipe = Pipe::new(i as u8, set.clone(), map.clone(), opts.pipe.clone());
            let worker = Worker {
                pipe,
                ports,
                rx,
                bell: handles[i].bell.clone(),
                out: crossbar[i].iter().zip(&bells).map(|(r, b)| r.clone().map(|r| (r, b.clone()))).collect(),
                inbound: crossbar.iter().zip(&bells).filter_map(|(row, b)| row[i].clone().map(|r| (r, b.clone()))).collect(),
                core: opts.cores.get(i).copied(),
                stop: stop.clone(),
                events: events.clone(),
                batch: opts.batch.max(1),
                map: map.clone(),
                cfg: opts.pipe.clone(),
                replay_held: replay_held.clone(),
            };
            threads.push(std::thread::Builder::new().name(format!("pipe{i}")).spawn(move || worker.run())?);
        }
        Ok(Dataplane {
            pipes: handles,
            threads: Mutex::new(threads),
            stop,
            events,
            port_stats,
            set: Mutex::new(set),
            map,
            rings,
            cores: opts.cores.clone(),
            replay_held,
        })
    }

    /// Front-panel ports.
    pub fn num_ports(&self) -> u16 {
        self.map.num_ports()
    }
    /// Pipes (threads).
    pub fn num_pipes(&self) -> u8 {
        self.map.pipes()
    }
    /// Which pipe each port belongs to.
    pub fn port_map(&self) -> &PortMap {
        &self.map
    }
    /// The CPU each pipe's thread is pinned to (empty: not pinned).
    pub fn cores(&self) -> &[usize] {
        &self.cores
    }
    /// The program set now loaded.
    pub fn program_set(&self) -> Arc<ProgramSet> {
        self.set.lock().expect("set lock").clone()
    }

    /// Apply a control operation: writes go to every pipe (state is kept symmetric), reads
    /// are answered by pipe 0.
    pub fn control(&self, op: ControlOp) -> Result<ControlReply, ControlError> {
        if pisa::switch::is_read(&op) {
            return self.control_pipe(0, op);
        }
        let mut rxs = Vec::new();
        for h in &self.pipes {
            let (tx, rx) = channel();
            h.send(Cmd::Control(op.clone(), tx))?;
            rxs.push(rx);
        }
        let mut result = Ok(ControlReply::Done);
        for rx in rxs {
            let r = recv_reply(rx)?;
            if r.is_err() {
                result = r;
            }
        }
        result
    }

    /// Apply writes in order, each on every pipe, with one round trip to each pipe for
    /// all of them (a P4Runtime Write batch); one result per op, the first error a pipe
    /// reports for it. A failed op does not stop the ones after it (CONTINUE_ON_ERROR).
    pub fn control_many(&self, ops: Vec<ControlOp>) -> Result<Vec<Result<(), ControlError>>, ControlError> {
        if let Some(op) = ops.iter().find(|op| pisa::switch::is_read(op)) {
            return Err(ControlError::InvalidArgument(format!("control_many takes writes, not {op:?}")));
        }
        let ops = Arc::new(ops);
        let mut rxs = Vec::new();
        for h in &self.pipes {
            let (tx, rx) = channel();
            h.send(Cmd::ControlMany(ops.clone(), tx))?;
            rxs.push(rx);
        }
        let mut results: Vec<Result<(), ControlError>> = vec![Ok(()); ops.len()];
        for rx in rxs {
            for (slot, r) in results.iter_mut().zip(recv_reply(rx)?) {
                if slot.is_ok() {
                    *slot = r;
                }
            }
        }
        Ok(results)
    }

    /// Apply a control operation on one pipe only (e.g. read that pipe's registers).
    pub fn control_pipe(&self, pipe: u8, op: ControlOp) -> Result<ControlReply, ControlError> {
        let h = self.pipes.get(pipe as usize).ok_or_else(|| ControlError::InvalidArgument(format!("no pipe {pipe}")))?;
        let (tx, rx) = channel();
        h.send(Cmd::Control(op, tx))?;
        recv_reply(rx)?
    }

    /// Load a new program set: every pipe starts over with empty tables, registers and
    /// replication configuration (P4Runtime's SetForwardingPipelineConfig).
    pub fn replace_program_set(&self, set: Arc<ProgramSet>) -> Result<(), ControlError> {
        let mut rxs = Vec::new();
        for h in &self.pipes {
            let (tx, rx) = channel();
            h.send(Cmd::Replace(set.clone(), tx))?;
            rxs.push(rx);
        }
        for rx in rxs {
            recv_reply(rx)?;
        }
        *self.set.lock().expect("set lock") = set;
        Ok(())
    }

    /// Send a packet from the controller.
    pub fn packet_out(&self, bytes: Vec<u8>, egress: Option<PortId>) -> Result<(), ControlError> {
        let (tx, rx) = channel();
        self.pipes[0].send(Cmd::PacketOut(bytes, egress, tx))?;
        recv_reply(rx)?
    }

    /// Wait up to `timeout` for PacketIn messages; returns at most `max`.
    pub fn wait_packet_ins(&self, timeout: Duration, max: usize) -> Vec<(Vec<u8>, PortId)> {
        self.wait(&self.events.packet_ins, timeout, max)
    }

    /// Wait up to `timeout` for digests; returns at most `max`.
    pub fn wait_digests(&self, timeout: Duration, max: usize) -> Vec<DigestMsg> {
        self.wait(&self.events.digests, timeout, max)
    }

    fn wait<T>(&self, eq: &EventQueue<T>, timeout: Duration, max: usize) -> Vec<T> {
        let deadline = Instant::now() + timeout;
        let mut g = eq.q.lock().expect("event lock");
        loop {
            if !g.is_empty() || self.stop.load(Ordering::Relaxed) {
                let n = g.len().min(max);
                return g.drain(..n).collect();
            }
            let now = Instant::now();
            if now >= deadline {
                return Vec::new();
            }
            g = eq.cv.wait_timeout(g, deadline - now).expect("event lock").0;
        }
    }

    /// For a switch with file ports: `Some(true)` once every input has been replayed and
    /// every packet has left the pipeline (so the outputs are complete once the data plane
    /// stops); `None` if no port replays a file.
    pub fn replay_done(&self) -> Result<Option<bool>, ControlError> {
        // A pipe answers between iterations, after it pushed its crossing packets to the
        // rings. If no packet entered a ring while the pipes answered and the rings were
        // empty before and after, no pipe received a packet after it answered: every
        // packet was in a pipe that said whether it was drained.
        let pushed = |rings: &[Arc<Ring>]| rings.iter().map(|r| r.pushed.load(Ordering::SeqCst)).sum::<u64>();
        let empty = |rings: &[Arc<Ring>]| rings.iter().all(|r| r.q.is_empty());
        let (before, empty_before) = (pushed(&self.rings), empty(&self.rings));
        let mut rxs = Vec::new();
        for h in &self.pipes {
            let (tx, rx) = channel();
            h.send(Cmd::Replay(tx))?;
            rxs.push(rx);
        }
        let mut answers = Vec::new();
        for rx in rxs {
            answers.push(recv_reply(rx)?);
        }
        if !answers.iter().any(|a| a.replays) {
            return Ok(None);
        }
        let quiet = empty_before && empty(&self.rings) && pushed(&self.rings) == before;
        Ok(Some(answers.iter().all(|a| a.drained) && quiet))
    }

    /// Let file ports held by [`DataplaneOptions::hold_replay`] start replaying.
    pub fn start_replay(&self) {
        self.replay_held.store(false, Ordering::SeqCst);
        for h in &self.pipes {
            h.bell.signal();
        }
    }

    /// Arm a packet trace session on every pipe (None disarms; see `pisa::trace`).
    pub fn trace_arm(&self, session: Option<pisa::TraceSession>) -> Result<(), ControlError> {
        let mut rxs = Vec::new();
        for h in &self.pipes {
            let (tx, rx) = channel();
            h.send(Cmd::TraceArm(session.clone(), tx))?;
            rxs.push(rx);
        }
        for rx in rxs {
            recv_reply(rx)?;
        }
        Ok(())
    }

    /// The trace records complete now: no copy queued and no event for `quiet` (a
    /// packet's parts in several pipes joined).
    pub fn trace_take(&self, quiet: Duration) -> Result<pisa::TraceTake, ControlError> {
        let mut rxs = Vec::new();
        for h in &self.pipes {
            let (tx, rx) = channel();
            h.send(Cmd::TraceTake(quiet.as_nanos() as u64, tx))?;
            rxs.push(rx);
        }
        let mut all = pisa::TraceTake::default();
        for rx in rxs {
            all.merge(recv_reply(rx)?);
        }
        Ok(all)
    }

    /// Events dropped because the controller did not collect them in time.
    pub fn events_dropped(&self) -> u64 {
        self.events.dropped.load(Ordering::Relaxed)
    }

    /// Counters of every pipe.
    pub fn counters_per_pipe(&self) -> Result<Vec<Counters>, ControlError> {
        let mut rxs = Vec::new();
        for h in &self.pipes {
            let (tx, rx) = channel();
            h.send(Cmd::Counters(tx))?;
            rxs.push(rx);
        }
        rxs.into_iter().map(recv_reply).collect()
    }

    /// Counters summed over pipes.
    pub fn counters(&self) -> Result<Counters, ControlError> {
        let mut c = Counters::default();
        for p in self.counters_per_pipe()? {
            c.merge(&p);
        }
        Ok(c)
    }

    /// Per-port I/O counters (name and shared stats).
    pub fn port_stats(&self) -> &[(String, Arc<PortStats>)] {
        &self.port_stats
    }

    /// Stop the threads and wait for them. Safe to call while other threads are inside
    /// control calls (they then fail with `Unavailable`) and more than once.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        for h in &self.pipes {
            h.bell.signal();
        }
        let threads = std::mem::take(&mut *self.threads.lock().expect("threads lock"));
        for t in threads {
            let _ = t.join();
        }
        self.events.packet_ins.cv.notify_all();
        self.events.digests.cv.notify_all();
    }
}

impl Drop for Dataplane {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Worker {
    pipe: Pipe,
    ports: Vec<Box<dyn Port>>,
    rx: Receiver<Cmd>,
    bell: Arc<Doorbell>,
    /// Rings to every other pipe and their doorbells, by destination pipe.
    out: Vec<Option<(Arc<Ring>, Arc<Doorbell>)>>,
    /// Rings from every other pipe, and the doorbells of their producers (woken when
    /// the ring makes room for a producer waiting for it).
    inbound: Vec<(Arc<Ring>, Arc<Doorbell>)>,
    /// The CPU to pin this thread to.
    core: Option<usize>,
    stop: Arc<AtomicBool>,
    events: Arc<Events>,
    batch: usize,
    map: PortMap,
    cfg: PipeConfig,
    replay_held: Arc<AtomicBool>,
}

/// epoll set of a worker's fds.
struct Epoll {
    fd: RawFd,
    polls_all: bool,
}

impl Epoll {
    fn new(fds: &[Option<RawFd>]) -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes no pointers.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(io::Error::last_os_error());
        }
        for fd in fds.iter().flatten() {
            let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: *fd as u64 };
            // SAFETY: `ev` is a valid epoll_event for the duration of the call.
            if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, *fd, &mut ev) } < 0 {
                let e = io::Error::last_os_error();
                // SAFETY: closing the epoll fd we created.
                unsafe { libc::close(ep) };
                return Err(e);
            }
        }
        Ok(Epoll { fd: ep, polls_all: fds.iter().all(|f| f.is_some()) })
    }

    fn wait(&self, timeout: Duration) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 16];
        // Ports without a fd are polled every millisecond.
        let t = if self.polls_all { timeout } else { timeout.min(Duration::from_millis(1)) };
        let ms = t.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `evs` is a valid array of 16 events.
        unsafe { libc::epoll_wait(self.fd, evs.as_mut_ptr(), evs.len() as i32, ms.max(if t.is_zero() { 0 } else { 1 })) };
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: closing the epoll fd we own.
        unsafe { libc::close(self.fd) };
    }
}

impl Worker {
    fn run(mut self) {
        if let Some(core) = self.core {
            if let Err(e) = pin_to(core) {
                eprintln!("pipe {}: cannot pin to core {core}: {e}", self.pipe.id());
            }
        }
        let mut fds: Vec<Option<RawFd>> = self.ports.iter().map(|p| p.poll_fd()).collect();
        fds.push(Some(self.bell.efd.raw()));
        let epoll = match Epoll::new(&fds) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("pipe {}: epoll failed: {e}", self.pipe.id());
                return;
            }
        };
        let npipes = self.map.pipes() as usize;
        let mut handoff = Handoff::new(self.map.pipes());
        let mut rx_batch: Vec<PacketBuf> = Vec::with_capacity(self.batch * self.ports.len().max(1));
        let mut tx: Vec<Vec<PacketBuf>> = (0..self.map.num_ports()).map(|_| Vec::new()).collect();
        let mut pins: Vec<PacketIn> = Vec::new();
        let mut digests: Vec<DigestMsg> = Vec::new();
        let me = self.pipe.id() as usize;
        // Most packets taken from one inbound ring per iteration (a bound on one
        // iteration's work, as a port's batch is).
        let ring_batch = self.cfg.egress_budget.max(self.batch);
        // With other pipes, an idle pipe polls its rings for a while before it sleeps: a
        // wakeup through the eventfd costs microseconds per batch, which at full load is
        // more than the batch's work. (A single pipe sleeps at once.)
        let spin_ns = if self.inbound.is_empty() { 0 } else { SPIN_BEFORE_SLEEP_NS };
        let mut idle_since: Option<u64> = None;
        while !self.stop.load(Ordering::Relaxed) {
            let mut busy = false;
            // Commands.
            while let Ok(cmd) = self.rx.try_recv() {
                busy = true;
                self.command(cmd, &mut handoff);
            }
            // Packets other pipes' ingress sent to our egress ports.
            for (r, producer) in &self.inbound {
                let mut took = 0;
                while took < ring_batch {
                    let Some(mut v) = r.q.pop() else { break };
                    took += v.len();
                    self.pipe.enqueue(&mut v);
                    let _ = r.spare.push(v);
                }
                if took > 0 {
                    busy = true;
                    producer.wake_if_sleeping();
                }
            }
            // Receive.
            let mut full = false;
            // A file can wait: read replaying ports only while the traffic manager has room
            // (in this pipe's queues and in its rings to other pipes), so a replay runs as
            // fast as the pipeline drains and never overflows a queue or a ring.
            let held = self.replay_held.load(Ordering::Relaxed);
            let room = self.pipe.pending() < self.cfg.queue_capacity / 2 && self.rings_have_room();
            let mut waits_for_room = false;
            for p in &mut self.ports {
                let replay = p.replay_done();
                if replay.is_some() && (held || !room) {
                    // Waiting for this pipe's queues to drain (then `pending` keeps the loop
                    // going) or for another pipe to take from a ring (it wakes us).
                    waits_for_room |= !held;
                    continue;
                }
                let got = p.recv_batch(self.pipe.pool(), &mut rx_batch, self.batch);
                full |= got >= self.batch || replay == Some(false);
            }
            busy |= !rx_batch.is_empty();
            let now = monotonic_ns();
            self.pipe.ingress(&mut rx_batch, now, &mut handoff);
            self.cross(&mut handoff, npipes, me);
            self.pipe.egress(now, &mut tx, &mut handoff);
            // Egress clones bound for other pipes cross now, not after the next batch.
            self.cross(&mut handoff, npipes, me);
            for p in &mut self.ports {
                let v = &mut tx[p.id() as usize];
                if !v.is_empty() {
                    p.send_batch(v, self.pipe.pool());
                }
            }
            self.deliver(&mut pins, &mut digests);
            let pending = self.pipe.pending() > 0 || !handoff.is_empty();
            if busy || full || pending {
                if !busy && !full {
                    // Only shaped or recirculating packets wait: sleep until they are due.
                    let wait = self
                        .pipe
                        .next_deadline()
                        .map_or(Duration::from_micros(50), |d| Duration::from_nanos(d.saturating_sub(monotonic_ns()).min(1_000_000)));
                    if self.pipe.pending() > 0 && self.cfg.port_rate_bps.is_some() {
                        std::thread::sleep(wait);
                    }
                }
                idle_since = None;
                continue;
            }
            if spin_ns > 0 {
                let t = monotonic_ns();
                let since = *idle_since.get_or_insert(t);
                if t.saturating_sub(since) < spin_ns {
                    std::hint::spin_loop();
                    continue;
                }
            }
            idle_since = None;
            // Going to sleep: say so, then look at the rings once more (see
            // [`Doorbell::wake_if_sleeping`]); a producer that pushed before seeing the flag
            // has its packets found here.
            self.bell.sleeping.store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if self.inbound.iter().any(|(r, _)| !r.q.is_empty()) || (waits_for_room && self.rings_have_room()) {
                self.bell.sleeping.store(false, Ordering::Relaxed);
                continue;
            }
            let timeout = match self.pipe.next_deadline() {
                Some(d) => Duration::from_nanos(d.saturating_sub(monotonic_ns())),
                None => Duration::from_millis(200),
            };
            epoll.wait(timeout);
            self.bell.sleeping.store(false, Ordering::Relaxed);
            self.bell.efd.clear();
        }
    }

    /// Whether every ring to another pipe is less than half full (a source that can wait
    /// is read only then).
    #[inline]
    fn rings_have_room(&self) -> bool {
        self.out.iter().flatten().all(|(r, _)| r.q.len() < r.q.capacity() / 2)
    }

    /// The traffic manager's crossbar: packets for this pipe's ports to its own queues,
    /// the others to the ring of their egress pipe (dropped and counted when it is full).
    #[inline]
    fn cross(&mut self, handoff: &mut Handoff, npipes: usize, me: usize) {
        for q in 0..npipes {
            if handoff.per_pipe[q].is_empty() {
                continue;
            }
            if q == me {
                self.pipe.enqueue(&mut handoff.per_pipe[q]);
                continue;
            }
            let Some((ring, bell)) = &self.out[q] else { continue };
            let v = &mut handoff.per_pipe[q];
            let n = v.len() as u64;
            let batch = std::mem::replace(v, ring.spare.pop().unwrap_or_default());
            match ring.q.push(batch) {
                Ok(()) => {
                    ring.pushed.fetch_add(n, Ordering::Relaxed);
                    bell.wake_if_sleeping();
                }
                Err(mut refused) => {
                    self.pipe.drop_crossing(refused.drain(..));
                    *v = refused;
                }
            }
        }
    }

    fn command(&mut self, cmd: Cmd, handoff: &mut Handoff) {
        match cmd {
            Cmd::Control(op, reply) => {
                let _ = reply.send(self.pipe.control(&op));
            }
            Cmd::ControlMany(ops, reply) => {
                let _ = reply.send(ops.iter().map(|op| self.pipe.control(op).map(|_| ())).collect());
            }
            Cmd::PacketOut(bytes, egress, reply) => {
                let _ = reply.send(self.pipe.packet_out(&bytes, egress, monotonic_ns(), handoff));
            }
            Cmd::Counters(reply) => {
                let _ = reply.send(self.pipe.counters().clone());
            }
            Cmd::Replace(set, reply) => {
                self.pipe = Pipe::new(self.pipe.id(), set, self.map.clone(), self.cfg.clone());
                let _ = reply.send(());
            }
            Cmd::TraceArm(session, reply) => {
                self.pipe.trace_arm(session);
                let _ = reply.send(());
            }
            Cmd::TraceTake(quiet_ns, reply) => {
                let _ = reply.send(self.pipe.trace_take(monotonic_ns(), quiet_ns));
            }
            Cmd::Replay(reply) => {
                let states: Vec<Option<bool>> = self.ports.iter().map(|p| p.replay_done()).collect();
                let replays = states.iter().any(Option::is_some);
                let drained = states.iter().all(|s| *s != Some(false)) && self.pipe.pending() == 0 && handoff.is_empty();
                let _ = reply.send(Replay { replays, drained });
            }
        }
    }

    fn deliver(&mut self, pins: &mut Vec<PacketIn>, digests: &mut Vec<DigestMsg>) {
        self.pipe.take_packet_ins(pins);
        self.pipe.take_digests(digests);
        if pins.is_empty() && digests.is_empty() {
            return;
        }
        let cap = self.events.capacity;
        if !pins.is_empty() {
            let mut q = self.events.packet_ins.q.lock().expect("event lock");
            for p in pins.drain(..) {
                if q.len() < cap {
                    q.push_back((p.pkt.data().to_vec(), p.ingress_port));
                } else {
                    self.events.dropped.fetch_add(1, Ordering::Relaxed);
                }
                self.pipe.recycle(p.pkt);
            }
            drop(q);
            self.events.packet_ins.cv.notify_all();
        }
        if !digests.is_empty() {
            let mut q = self.events.digests.q.lock().expect("event lock");
            for d in digests.drain(..) {
                if q.len() < cap {
                    q.push_back(d);
                } else {
                    self.events.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            drop(q);
            self.events.digests.cv.notify_all();
        }
    }
}
