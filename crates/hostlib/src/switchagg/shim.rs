//! The shim layer (master side) and the controller's state for one task launch, in the
//! project's sans-IO vocabulary: `handle(now, ..)` for a packet, `poll_transmit()` for what
//! to send, `poll_timeout()` / `handle_timeout(now)` for retransmissions. Times are ns on
//! the caller's clock.

use std::collections::VecDeque;

use wire::switchagg::{AckRepr, ConfigureRepr, LaunchRepr};

/// Retransmission timeout of Launch and Configure when the caller gives none.
pub const DEFAULT_RTO_NS: u64 = 200_000_000;

/// The master's shim: Launch until the controller's Ack type 0 arrives.
#[derive(Debug)]
pub struct Shim {
    launch: Vec<u8>,
    rto_ns: u64,
    /// When the Launch goes out again (None once started or before the first send).
    due: Option<u64>,
    queued: bool,
    started: bool,
    /// Launch packets handed out (the first and every retransmission).
    pub launches_sent: u64,
}

impl Shim {
    /// A launch of a task with these reducers and mappers (IPv4 addresses); the Launch is
    /// ready for [`Shim::poll_transmit`].
    pub fn new(reducers: &[[u8; 4]], mappers: &[[u8; 4]], rto_ns: u64) -> Shim {
        let l = LaunchRepr { reducers: reducers.to_vec(), mappers: mappers.to_vec() };
        let mut launch = vec![0u8; l.buffer_len()];
        l.emit(&mut launch).expect("at most 65535 reducers and mappers");
        Shim { launch, rto_ns, due: None, queued: true, started: false, launches_sent: 0 }
    }

    /// The Launch for the controller, once per (re)transmission; `now` arms the timeout.
    pub fn poll_transmit(&mut self, now: u64) -> Option<Vec<u8>> {
        if !self.queued || self.started {
            return None;
        }
        self.queued = false;
        self.due = Some(now + self.rto_ns);
        self.launches_sent += 1;
        Some(self.launch.clone())
    }

    pub fn poll_timeout(&self) -> Option<u64> {
        if self.started {
            None
        } else {
            self.due
        }
    }

    pub fn handle_timeout(&mut self, now: u64) {
        if !self.started && self.due.is_some_and(|d| now >= d) {
            self.due = None;
            self.queued = true;
        }
    }

    /// A packet from the controller: an Ack type 0 starts the task; anything else is ignored.
    pub fn handle(&mut self, _now: u64, bytes: &[u8]) {
        if AckRepr::parse(bytes).is_ok_and(|a| a.ack_type == 0) {
            self.started = true;
            self.due = None;
        }
    }

    /// The mappers may send.
    pub fn started(&self) -> bool {
        self.started
    }
}

/// What one switch must be told: its trees and each tree's number of children there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchPlan {
    pub trees: Vec<(u16, u16)>,
}

/// Who a controller packet is from or for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    Master,
    /// The `i`-th switch of the plan.
    Switch(usize),
}

/// Counts of the controller's exchange (for reports and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControllerStats {
    pub launches: u64,
    pub configures_sent: u64,
    pub configure_retransmissions: u64,
    pub switch_acks: u64,
    pub master_acks_sent: u64,
    /// Packets that were none of the above (garbage, a Launch that does not fit the plan).
    pub ignored: u64,
}

/// The controller's side of one launch: on the master's Launch, a Configure per switch of
/// the plan (resent on timeout until that switch's Ack type 1); when every switch has
/// acknowledged, Ack type 0 to the master (again on every repeated Launch, in case it was
/// lost).
#[derive(Debug)]
pub struct Controller {
    configures: Vec<Vec<u8>>,
    trees_needed: usize,
    acked: Vec<bool>,
    launched: bool,
    rto_ns: u64,
    due: Option<u64>,
    out: VecDeque<(Peer, Vec<u8>)>,
    pub stats: ControllerStats,
}

impl Controller {
    /// A controller with the plan it made from the topology (one per switch: the children
    /// of each tree there). None if the plan is empty, a switch has no tree, or the switches
    /// disagree on the number of trees.
    pub fn new(plan: &[SwitchPlan], rto_ns: u64) -> Option<Controller> {
        let trees_needed = plan.first()?.trees.len();
        if trees_needed == 0 || plan.iter().any(|p| p.trees.len() != trees_needed) {
            return None;
        }
        let configures = plan
            .iter()
            .map(|p| {
                let c = ConfigureRepr { trees: p.trees.clone() };
                let mut b = vec![0u8; c.buffer_len()];
                c.emit(&mut b).ok().map(|_| b)
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Controller {
            configures,
            trees_needed,
            acked: vec![false; plan.len()],
            launched: false,
            rto_ns,
            due: None,
            out: VecDeque::new(),
            stats: ControllerStats::default(),
        })
    }

    fn all_acked(&self) -> bool {
        self.acked.iter().all(|&x| x)
    }

    fn queue_pending(&mut self, now: u64) {
        for (i, b) in self.configures.iter().enumerate() {
            if !self.acked[i] {
                self.out.push_back((Peer::Switch(i), b.clone()));
            }
        }
        self.due = if self.all_acked() { None } else { Some(now + self.rto_ns) };
    }

    fn ack_master(&mut self) {
        let mut b = [0u8; 2];
        AckRepr { ack_type: 0 }.emit(&mut b).expect("two bytes");
        self.out.push_back((Peer::Master, b.to_vec()));
    }

    /// A packet from `from`.
    pub fn handle(&mut self, now: u64, from: Peer, bytes: &[u8]) {
        match from {
            Peer::Master => {
                // One tree per reducer: a Launch the plan does not fit is not this job's.
                if !LaunchRepr::parse(bytes).is_ok_and(|l| l.reducers.len() == self.trees_needed) {
                    self.stats.ignored += 1;
                    return;
                }
                self.stats.launches += 1;
                if self.all_acked() {
                    self.ack_master();
                } else if !self.launched {
                    self.launched = true;
                    self.queue_pending(now);
                }
            }
            Peer::Switch(i) => {
                let ok = AckRepr::parse(bytes).is_ok_and(|a| a.ack_type == 1);
                if !ok || !self.launched || i >= self.acked.len() {
                    self.stats.ignored += 1;
                    return;
                }
                self.stats.switch_acks += 1;
                if self.acked[i] {
                    return;
                }
                self.acked[i] = true;
                if self.all_acked() {
                    self.due = None;
                    self.ack_master();
                }
            }
        }
    }

    /// The next packet to send and to whom.
    pub fn poll_transmit(&mut self) -> Option<(Peer, Vec<u8>)> {
        let p = self.out.pop_front()?;
        match p.0 {
            Peer::Switch(_) => self.stats.configures_sent += 1,
            Peer::Master => self.stats.master_acks_sent += 1,
        }
        Some(p)
    }

    pub fn poll_timeout(&self) -> Option<u64> {
        self.due
    }

    /// Configure again to every switch that has not acknowledged.
    pub fn handle_timeout(&mut self, now: u64) {
        if self.due.is_some_and(|d| now >= d) {
            self.stats.configure_retransmissions += self.acked.iter().filter(|&&a| !a).count() as u64;
            self.queue_pending(now);
        }
    }

    /// Every switch has acknowledged its Configure.
    pub fn configured(&self) -> bool {
        self.launched && self.all_acked()
    }
}

/// A tree as the switch installs it: `(tree, children, region, regions)`.
pub type TreeEntry = (u16, u16, u8, u8);

/// The switch's side: the Configure packet's trees, each with its memory region (an even
/// split, SwitchAgg §4.2.2) as `(tree, children, region, regions)`, and the Ack to send.
pub fn switch_on_configure(bytes: &[u8]) -> Option<(Vec<TreeEntry>, Vec<u8>)> {
    let c = ConfigureRepr::parse(bytes).ok()?;
    let n = c.trees.len();
    if n == 0 || n > 255 {
        return None;
    }
    let trees = c.trees.iter().enumerate().map(|(i, &(t, k))| (t, k, i as u8, n as u8)).collect();
    let mut b = [0u8; 2];
    AckRepr { ack_type: 1 }.emit(&mut b).ok()?;
    Some((trees, b.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Master, controller and switches in virtual time; `drop(peer, bytes)` loses a packet.
    fn exchange(plan: &[SwitchPlan], mut drop: impl FnMut(Peer, &[u8]) -> bool) -> (Shim, Controller, u64) {
        let rto = 1_000;
        // The master waits longer than the controller: the switches' retries come first.
        let mut shim = Shim::new(&[[10, 0, 0, 200], [10, 0, 0, 201]], &[[10, 0, 0, 1], [10, 0, 0, 2], [10, 0, 0, 3]], 5 * rto);
        let mut ctl = Controller::new(plan, rto).unwrap();
        let mut now = 0;
        while !shim.started() && now < 100 * rto {
            now += 100;
            shim.handle_timeout(now);
            ctl.handle_timeout(now);
            if let Some(l) = shim.poll_transmit(now) {
                if !drop(Peer::Master, &l) {
                    ctl.handle(now, Peer::Master, &l);
                }
            }
            while let Some((to, b)) = ctl.poll_transmit() {
                match to {
                    Peer::Master => shim.handle(now, &b),
                    Peer::Switch(i) => {
                        let (trees, ack) = switch_on_configure(&b).unwrap();
                        assert_eq!(trees.len(), 2);
                        assert_eq!(trees[1].2, 1, "tree 1 gets the second half of the memory");
                        if !drop(to, &ack) {
                            ctl.handle(now, Peer::Switch(i), &ack);
                        }
                    }
                }
            }
        }
        (shim, ctl, now)
    }

    fn plan() -> Vec<SwitchPlan> {
        // Two ToR switches under one aggregation switch: trees 0 and 1 everywhere.
        vec![
            SwitchPlan { trees: vec![(0, 2), (1, 2)] },
            SwitchPlan { trees: vec![(0, 1), (1, 1)] },
            SwitchPlan { trees: vec![(0, 2), (1, 2)] },
        ]
    }

    #[test]
    fn launch_configure_ack_without_loss() {
        let (shim, ctl, now) = exchange(&plan(), |_, _| false);
        assert!(shim.started() && ctl.configured());
        assert_eq!(now, 100, "one round trip, in the first step");
        assert_eq!(ctl.stats.configures_sent, 3);
        assert_eq!(ctl.stats.configure_retransmissions, 0);
        assert_eq!(shim.launches_sent, 1);
    }

    #[test]
    fn lost_launch_and_switch_ack_are_retried() {
        // The first Launch and switch 1's first Ack are lost.
        let (mut launches, mut lost_s1) = (0, false);
        let (shim, ctl, _) = exchange(&plan(), |p, _| match p {
            Peer::Master => {
                launches += 1;
                launches == 1
            }
            Peer::Switch(1) if !lost_s1 => {
                lost_s1 = true;
                true
            }
            _ => false,
        });
        assert!(shim.started() && ctl.configured());
        assert_eq!(shim.launches_sent, 2, "the lost Launch went again");
        assert_eq!(ctl.stats.configure_retransmissions, 1, "only switch 1 was asked again");
        assert_eq!(ctl.stats.configures_sent, 4);
    }

    #[test]
    fn no_start_before_every_ack() {
        // Switch 2 never answers: the master never starts.
        let (shim, ctl, _) = exchange(&plan(), |p, _| p == Peer::Switch(2));
        assert!(!shim.started() && !ctl.configured());
        assert!(ctl.stats.configure_retransmissions >= 50);
    }

    #[test]
    fn lost_master_ack_is_answered_again() {
        let mut ctl = Controller::new(&[SwitchPlan { trees: vec![(0, 1)] }], 10).unwrap();
        let mut shim = Shim::new(&[[10, 0, 0, 9]], &[[10, 0, 0, 1]], 10);
        let l = shim.poll_transmit(0).unwrap();
        ctl.handle(0, Peer::Master, &l);
        let (_, cfg) = ctl.poll_transmit().unwrap();
        let (_, ack) = switch_on_configure(&cfg).unwrap();
        ctl.handle(0, Peer::Switch(0), &ack);
        assert_eq!(ctl.poll_transmit().map(|p| p.0), Some(Peer::Master)); // lost
        shim.handle_timeout(10);
        let l = shim.poll_transmit(10).unwrap();
        ctl.handle(10, Peer::Master, &l);
        let (to, a) = ctl.poll_transmit().unwrap();
        assert_eq!(to, Peer::Master);
        shim.handle(10, &a);
        assert!(shim.started());
        assert_eq!(shim.poll_timeout(), None);
    }

    #[test]
    fn garbage_is_ignored() {
        assert!(Controller::new(&[], 1).is_none());
        assert!(Controller::new(&[SwitchPlan { trees: vec![] }], 1).is_none());
        let mut ctl = Controller::new(&[SwitchPlan { trees: vec![(0, 2)] }], 1).unwrap();
        let two = Shim::new(&[[1, 1, 1, 1], [2, 2, 2, 2]], &[], 1).poll_transmit(0).unwrap();
        ctl.handle(0, Peer::Master, &two);
        ctl.handle(0, Peer::Master, &[1, 2, 3]);
        ctl.handle(0, Peer::Switch(0), &[4, 1]);
        assert_eq!(ctl.stats.ignored, 3, "a two-reducer Launch for a one-tree plan, garbage, an Ack before any Launch");
        assert!(ctl.poll_transmit().is_none());
        assert!(switch_on_configure(&[3, 0, 0]).is_none());
        assert!(switch_on_configure(&[3, 0, 5, 0]).is_none());
        let mut s = Shim::new(&[[1, 1, 1, 1]], &[], 1);
        s.handle(0, &[4, 1]);
        assert!(!s.started(), "a type-1 Ack is not for the master");
    }
}
