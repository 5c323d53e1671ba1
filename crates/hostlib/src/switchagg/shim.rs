//! The shim layer (master side) and the controller's state for one task launch.

use wire::switchagg::{AckRepr, ConfigureRepr, LaunchRepr};

/// The master's shim: `launch` gives the Launch packet; `on_packet` says when the task has
/// been set up (the controller's Ack type 0 arrived).
#[derive(Debug, Default)]
pub struct Shim {
    launch: Option<LaunchRepr>,
    started: bool,
}

impl Shim {
    pub fn new() -> Shim {
        Shim::default()
    }

    /// Launch a task with these reducers and mappers (IPv4 addresses): the packet for the
    /// controller (send it again until [`Shim::started`]).
    pub fn launch(&mut self, reducers: &[[u8; 4]], mappers: &[[u8; 4]]) -> Vec<u8> {
        let l = LaunchRepr { reducers: reducers.to_vec(), mappers: mappers.to_vec() };
        let mut b = vec![0u8; l.buffer_len()];
        l.emit(&mut b).expect("at most 65535 reducers and mappers");
        self.launch = Some(l);
        b
    }

    /// A packet from the controller; true once the task is set up.
    pub fn on_packet(&mut self, bytes: &[u8]) -> bool {
        if self.launch.is_some() && AckRepr::parse(bytes).is_ok_and(|a| a.ack_type == 0) {
            self.started = true;
        }
        self.started
    }

    pub fn started(&self) -> bool {
        self.started
    }
}

/// What one switch must be told: its trees and each tree's number of children there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchPlan {
    pub trees: Vec<(u16, u16)>,
}

/// The controller's side of one launch: Configure per switch, Acks counted.
#[derive(Debug)]
pub struct Controller {
    configures: Vec<Vec<u8>>,
    acked: Vec<bool>,
}

impl Controller {
    /// A Launch packet and the plan the controller made from it (one per switch, e.g. from
    /// the topology: children of each tree at each switch). None if the packet is not a
    /// Launch or the plan has no tree for some reducer.
    pub fn on_launch(launch: &[u8], plan: &[SwitchPlan]) -> Option<Controller> {
        let l = LaunchRepr::parse(launch).ok()?;
        let trees_needed = l.reducers.len();
        if plan.iter().any(|p| p.trees.len() != trees_needed) || plan.is_empty() {
            return None;
        }
        let configures = plan
            .iter()
            .map(|p| {
                let c = ConfigureRepr { trees: p.trees.clone() };
                let mut b = vec![0u8; c.buffer_len()];
                c.emit(&mut b).expect("at most 65535 trees");
                b
            })
            .collect();
        Some(Controller { configures, acked: vec![false; plan.len()] })
    }

    /// The Configure packet for each switch not yet acknowledged: `(switch, bytes)`.
    pub fn pending(&self) -> Vec<(usize, &[u8])> {
        self.configures.iter().enumerate().filter(|(i, _)| !self.acked[*i]).map(|(i, b)| (i, b.as_slice())).collect()
    }

    /// A packet from switch `i`; when it is the last Ack type 1 needed, the Ack type 0 for
    /// the master.
    pub fn on_switch_packet(&mut self, i: usize, bytes: &[u8]) -> Option<Vec<u8>> {
        let a = AckRepr::parse(bytes).ok()?;
        if a.ack_type != 1 || i >= self.acked.len() || self.acked[i] {
            return None;
        }
        self.acked[i] = true;
        if self.acked.iter().all(|&x| x) {
            let mut b = [0u8; 2];
            AckRepr { ack_type: 0 }.emit(&mut b).expect("two bytes");
            Some(b.to_vec())
        } else {
            None
        }
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

    #[test]
    fn launch_configure_ack_with_a_lost_ack() {
        let mut shim = Shim::new();
        let launch = shim.launch(&[[10, 0, 0, 200], [10, 0, 0, 201]], &[[10, 0, 0, 1], [10, 0, 0, 2], [10, 0, 0, 3]]);
        // Two ToR switches under one aggregation switch: trees 0 and 1 everywhere.
        let plan = vec![
            SwitchPlan { trees: vec![(0, 2), (1, 2)] },
            SwitchPlan { trees: vec![(0, 1), (1, 1)] },
            SwitchPlan { trees: vec![(0, 2), (1, 2)] },
        ];
        assert!(Controller::on_launch(&launch, &[SwitchPlan { trees: vec![(0, 2)] }]).is_none(), "one tree per reducer");
        let mut ctl = Controller::on_launch(&launch, &plan).unwrap();
        assert_eq!(ctl.pending().len(), 3);
        let mut to_master = None;
        for round in 0..2 {
            for (i, cfg) in ctl.pending().into_iter().map(|(i, b)| (i, b.to_vec())).collect::<Vec<_>>() {
                let (trees, ack) = switch_on_configure(&cfg).unwrap();
                assert_eq!(trees.len(), 2);
                assert_eq!(trees[1].2, 1, "tree 1 gets the second half of the memory");
                // Switch 1's first Ack is lost.
                if round == 0 && i == 1 {
                    continue;
                }
                to_master = ctl.on_switch_packet(i, &ack).or(to_master);
                assert!(ctl.on_switch_packet(i, &ack).is_none(), "a repeated Ack changes nothing");
            }
            if round == 0 {
                assert!(to_master.is_none());
                assert!(!shim.on_packet(&[4, 1]), "a type-1 Ack is not for the master");
                assert_eq!(ctl.pending().len(), 1);
            }
        }
        assert!(shim.on_packet(&to_master.unwrap()));
        assert!(shim.started());
        assert!(ctl.pending().is_empty());
    }

    #[test]
    fn garbage_is_ignored() {
        assert!(Controller::on_launch(&[1, 2, 3], &[SwitchPlan { trees: vec![] }]).is_none());
        assert!(switch_on_configure(&[3, 0, 0]).is_none());
        assert!(switch_on_configure(&[3, 0, 5, 0]).is_none());
        let mut s = Shim::new();
        assert!(!s.on_packet(&[4, 0]), "no launch yet");
    }
}
