//! A whole switch driven from one thread: all pipes, handoffs between them done in place.
//! Used by tests, benchmarks and the discrete-event simulator; the threaded driver in
//! `ports` runs the same [`Pipe`]s one per thread.

use std::sync::Arc;

use crate::base::ControlError;
use crate::control::{ControlOp, ControlReply};
use crate::counters::Counters;
use crate::packet::{PacketBuf, PortId};
use crate::pass::DigestMsg;
use crate::pipe::{Handoff, PacketIn, Pipe, PipeConfig, PortMap};
use crate::program::ProgramSet;

pub struct Switch {
    pipes: Vec<Pipe>,
    map: PortMap,
    handoff: Handoff,
    /// Frames to transmit, per port.
    tx: Vec<Vec<PacketBuf>>,
}

impl Switch {
    pub fn new(set: Arc<ProgramSet>, ports: u16, pipes: u8, cfg: PipeConfig) -> Switch {
        let map = PortMap::contiguous(ports, pipes);
        let pipes_v = (0..map.pipes()).map(|i| Pipe::new(i, set.clone(), map.clone(), cfg.clone())).collect();
        Switch { pipes: pipes_v, handoff: Handoff::new(map.pipes()), tx: (0..ports).map(|_| Vec::new()).collect(), map }
    }

    pub fn num_ports(&self) -> u16 {
        self.map.num_ports()
    }
    pub fn pipes(&self) -> &[Pipe] {
        &self.pipes
    }
    pub fn pipe_mut(&mut self, i: usize) -> &mut Pipe {
        &mut self.pipes[i]
    }
    pub fn port_map(&self) -> &PortMap {
        &self.map
    }

    /// A buffer from the pool of the pipe owning `port`, for building input without allocating.
    #[inline]
    pub fn buffer_for(&mut self, port: PortId) -> PacketBuf {
        let p = self.map.pipe_of(port).unwrap_or(0) as usize;
        let mut b = self.pipes[p].pool().get();
        b.port = port;
        b
    }

    /// Process a batch of received frames (each with `port` set) at time `now`; the frames
    /// to send are then in [`Switch::tx`]. Input frames must all belong to ports of one
    /// pipe or be mixed; they are split by pipe.
    pub fn process(&mut self, rx: &mut Vec<PacketBuf>, now: u64) {
        if self.pipes.len() == 1 {
            self.pipes[0].ingress(rx, now, &mut self.handoff);
        } else {
            let mut split: Vec<Vec<PacketBuf>> = (0..self.pipes.len()).map(|_| Vec::new()).collect();
            for p in rx.drain(..) {
                let i = self.map.pipe_of(p.port).unwrap_or(0) as usize;
                split[i].push(p);
            }
            for (i, mut v) in split.into_iter().enumerate() {
                self.pipes[i].ingress(&mut v, now, &mut self.handoff);
            }
        }
        self.settle(now);
    }

    /// Run the pipes without new input (recirculations, generators, shaped queues).
    pub fn tick(&mut self, now: u64) {
        let mut empty = Vec::new();
        for i in 0..self.pipes.len() {
            self.pipes[i].ingress(&mut empty, now, &mut self.handoff);
        }
        self.settle(now);
    }

    fn settle(&mut self, now: u64) {
        // Egress always runs once (queues may hold packets from earlier calls); egress clones
        // (E2E) into other pipes take a few more rounds to settle.
        for round in 0..4 {
            if round > 0 && self.handoff.is_empty() {
                break;
            }
            for i in 0..self.pipes.len() {
                let mut v = std::mem::take(&mut self.handoff.per_pipe[i]);
                self.pipes[i].enqueue(&mut v);
                self.handoff.per_pipe[i] = v;
            }
            for i in 0..self.pipes.len() {
                self.pipes[i].egress(now, &mut self.tx, &mut self.handoff);
            }
        }
    }

    /// Frames waiting to be sent on `port`.
    pub fn tx(&mut self, port: PortId) -> &mut Vec<PacketBuf> {
        &mut self.tx[port as usize]
    }

    /// Take every frame waiting on every port as `(port, bytes)` (tests; allocates).
    pub fn drain_all(&mut self) -> Vec<(PortId, Vec<u8>)> {
        let mut out = Vec::new();
        for port in 0..self.tx.len() {
            let pipe = self.map.pipe_of(port as PortId).unwrap_or(0) as usize;
            for p in self.tx[port].drain(..) {
                out.push((port as PortId, p.data().to_vec()));
                self.pipes[pipe].recycle(p);
            }
        }
        out
    }

    /// Return transmitted buffers of `port` to their pool.
    #[inline]
    pub fn recycle_tx(&mut self, port: PortId) {
        let pipe = self.map.pipe_of(port).unwrap_or(0) as usize;
        for p in self.tx[port as usize].drain(..) {
            self.pipes[pipe].recycle(p);
        }
    }

    /// Apply a control operation: writes go to every pipe; reads come from pipe 0.
    pub fn control(&mut self, op: &ControlOp) -> Result<ControlReply, ControlError> {
        if is_read(op) {
            return self.pipes[0].control(op);
        }
        let mut result = Ok(ControlReply::Done);
        for p in &mut self.pipes {
            let r = p.control(op);
            if r.is_err() {
                result = r;
            }
        }
        result
    }

    pub fn packet_out(&mut self, bytes: &[u8], egress: Option<PortId>, now: u64) -> Result<(), ControlError> {
        self.pipes[0].packet_out(bytes, egress, now, &mut self.handoff)?;
        self.settle(now);
        Ok(())
    }

    pub fn take_packet_ins(&mut self) -> Vec<PacketIn> {
        let mut v = Vec::new();
        for p in &mut self.pipes {
            p.take_packet_ins(&mut v);
        }
        v
    }

    pub fn take_digests(&mut self) -> Vec<DigestMsg> {
        let mut v = Vec::new();
        for p in &mut self.pipes {
            p.take_digests(&mut v);
        }
        v
    }

    /// Counters summed over pipes.
    pub fn counters(&self) -> Counters {
        let mut c = Counters::default();
        for p in &self.pipes {
            c.merge(p.counters());
        }
        c
    }

    /// Arm a packet trace session on every pipe (None disarms; see [`crate::trace`]).
    pub fn trace_arm(&mut self, session: Option<crate::trace::TraceSession>) {
        for p in &mut self.pipes {
            p.trace_arm(session.clone());
        }
    }

    /// The complete trace records of every pipe (see [`Pipe::trace_take`]), a packet's
    /// parts from several pipes joined.
    pub fn trace_take(&mut self, now: u64, quiet_ns: u64) -> crate::trace::TraceTake {
        let mut all = crate::trace::TraceTake::default();
        for p in &mut self.pipes {
            all.merge(p.trace_take(now, quiet_ns));
        }
        all
    }

    pub fn next_deadline(&self) -> Option<u64> {
        self.pipes.iter().filter_map(|p| p.next_deadline()).min()
    }
}

/// Reads are answered by one pipe; writes go to all.
pub fn is_read(op: &ControlOp) -> bool {
    matches!(
        op,
        ControlOp::TableRead { .. }
            | ControlOp::RegisterRead { .. }
            | ControlOp::McastGroupRead { .. }
            | ControlOp::CloneSessionRead { .. }
            | ControlOp::ProfileRead { .. }
    )
}
