//! Two userspace hosts on UDP-tunnel ports, a real data plane running `forward` between
//! them: ARP, ping and UDP go through the switch (no root needed).

use std::net::{SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use pisa::control::{ControlOp, Replica, WriteOp};
use pisa::{FieldMatch, ProgramSet};
use ports::dataplane::{Dataplane, DataplaneOptions};
use ports::spec::{open_ports, OpenOptions, PortSpec};
use ports::tunnelhost::TunnelHost;
use wire::ethernet::EthernetAddress;
use wire::ipv4::Ipv4Address;

fn free_base(n: u16) -> u16 {
    // Find `n` consecutive free UDP ports on loopback.
    'outer: for base in (40000..60000).step_by(97) {
        for i in 0..n {
            if UdpSocket::bind(("127.0.0.1", base + i)).is_err() {
                continue 'outer;
            }
        }
        return base;
    }
    panic!("no free port range");
}

#[test]
fn hosts_ping_and_exchange_datagrams_through_the_switch() {
    let base = free_base(2);
    let set = Arc::new(ProgramSet::new(vec![programs::by_name("forward").unwrap()]).unwrap());
    let (ports, _) = open_ports(&PortSpec::parse(&format!("udp:{base}:2")).unwrap(), &OpenOptions::default()).unwrap();
    let dp = Dataplane::start(set.clone(), ports, DataplaneOptions::default()).unwrap();
    let d = set.decl(0);
    let ids = set.ids(0);
    let t = ids.tables[d.tables.iter().position(|x| x.name == "l2_dmac").unwrap()];
    let a = ids.actions[d.actions.iter().position(|x| x.name == "l2_forward").unwrap()];
    let mac = |i: u8| EthernetAddress([2, 0, 0, 0, 0, i]);
    for i in 0..2u8 {
        let m = vec![FieldMatch::Exact { field: 0, value: mac(i + 1).0.to_vec() }];
        dp.control(ControlOp::TableWrite {
            table_id: t,
            op: WriteOp::Insert,
            matches: m,
            priority: 0,
            action_id: a,
            params: vec![(1, vec![i])],
        })
        .unwrap();
    }
    dp.control(ControlOp::McastGroupWrite {
        op: WriteOp::Insert,
        group: 1,
        replicas: (0..2).map(|p| Replica { port: p, rid: 0 }).collect(),
    })
    .unwrap();

    let addr = |i: u16| SocketAddrV4::new([127, 0, 0, 1].into(), base + i);
    let h1 = TunnelHost::start(addr(0), None, mac(1), Ipv4Address::new(10, 0, 0, 1), 24, None).unwrap();
    let h2 = TunnelHost::start(addr(1), None, mac(2), Ipv4Address::new(10, 0, 0, 2), 24, None).unwrap();
    std::thread::sleep(Duration::from_millis(50)); // let both registrations reach the switch

    let rtts = h1.ping(Ipv4Address::new(10, 0, 0, 2), 3, Duration::from_secs(2), Duration::from_millis(10)).unwrap();
    assert!(rtts.iter().all(|r| r.is_some()), "pings lost: {rtts:?}");

    h2.bind_udp(7000);
    for i in 0..100u32 {
        h1.send_udp(Ipv4Address::new(10, 0, 0, 2), 6000, 7000, &i.to_be_bytes()).unwrap();
    }
    let mut got = Vec::new();
    while got.len() < 100 {
        let v = h2.recv_udp(7000, Duration::from_secs(2), 1000);
        assert!(!v.is_empty(), "only {} of 100 datagrams arrived", got.len());
        got.extend(v);
    }
    let seqs: Vec<u32> = got.iter().map(|(_, _, p)| u32::from_be_bytes([p[0], p[1], p[2], p[3]])).collect();
    assert_eq!(seqs, (0..100).collect::<Vec<_>>(), "in order, none lost or duplicated");
    assert!(got.iter().all(|(src, sp, _)| *src == Ipv4Address::new(10, 0, 0, 1) && *sp == 6000));

    // The switch forwarded them: its port counters saw the traffic.
    let c = dp.counters().unwrap();
    assert!(c.ports[0].rx_packets >= 100 && c.ports[1].tx_packets >= 100, "{:?}", c.ports);
}
