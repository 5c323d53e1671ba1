//! Packet traces (`pisa::trace`) of known packets through `forward` and `daiet`, checked
//! against what the packet must do, computed here without the switch: the L2 entry it hits
//! and the port it leaves by; the DAIET value cell its pair lands in (hash of the key in the
//! tree's partition) and that cell's value before and after (before + value).

use pisa::{PacketBuf, TraceFilter, TraceSession};
use serde_json::Value;
use wire::daiet::Op;

mod common;
use common::daiet_net::*;
use common::*;

const TREE: u16 = 100;
const PARENT: u8 = 15;

fn arm(sw: &mut pisa::Switch, expr: &str) {
    sw.trace_arm(Some(TraceSession { filter: TraceFilter::parse(expr).expect("filter"), limit: 100 }));
}

/// Everything recorded, as JSON records (the pipeline is idle: no quiet period needed).
fn take(sw: &mut pisa::Switch) -> Vec<Value> {
    let set = sw.pipes()[0].set().clone();
    sw.trace_take(u64::MAX, 0).records.iter().map(|r| r.to_json(&set)).collect()
}

fn events<'a>(r: &'a Value, kind: &str) -> Vec<&'a Value> {
    r["events"].as_array().expect("events").iter().filter(|e| e["event"] == kind).collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn forward_trace_shows_the_entry_hit_and_the_port() {
    let mut sw = switch(4, &[(1, 1), (2, 2)], &[]);
    arm(&mut sw, "udp dst 5000 and in port 1");
    let traced = frame(1, 4000, 2, 5000, b"hello");
    let other = frame(1, 4000, 2, 6000, b"other"); // same path, another port: not traced
    let mut rx = vec![PacketBuf::from_slice(&other, 1), PacketBuf::from_slice(&traced, 1), PacketBuf::from_slice(&other, 1)];
    sw.process(&mut rx, 10);
    let out = sw.drain_all();
    assert_eq!(out.len(), 3, "all three forwarded");
    let recs = take(&mut sw);
    assert_eq!(recs.len(), 1, "only the matching packet is traced: {recs:#?}");
    let r = &recs[0];
    let rx_ev = events(r, "received");
    assert_eq!(rx_ev.len(), 1);
    assert_eq!(rx_ev[0]["port"], 1);
    assert_eq!(rx_ev[0]["len"], traced.len());
    assert_eq!(
        rx_ev[0]["headers"],
        "eth 02:00:00:00:00:01 > 02:00:00:00:00:02 type 0x0800, ipv4 10.0.0.1 > 10.0.0.2 proto 17, udp 4000 > 5000"
    );
    // l2_dmac: hit on the destination MAC with the entry's action and port.
    let tables = events(r, "table");
    let dmac = tables.iter().find(|e| e["table"] == "l2_dmac").expect("l2_dmac applied");
    assert_eq!(dmac["hit"], true);
    assert_eq!(dmac["key"][0]["name"], "hdr.ethernet.dst_addr");
    assert_eq!(dmac["key"][0]["value"], hex(&mac(2)));
    assert_eq!(dmac["action"], "l2_forward");
    assert_eq!(dmac["params"][0]["name"], "port");
    assert_eq!(dmac["params"][0]["value"], 2);
    // l2_smac: no entry for the source: a miss running the default (learn).
    let smac = tables.iter().find(|e| e["table"] == "l2_smac").expect("l2_smac applied");
    assert_eq!((&smac["hit"], &smac["action"]), (&Value::Bool(false), &Value::from("learn")));
    assert_eq!(events(r, "digest")[0]["digest"], "mac_learn");
    // The port counters: the traced packet was the second on port 1 (the first untraced
    // one counted before it), so the cell went from (1 packet, n bytes) to (2, n + len).
    let regs = events(r, "register");
    let rxc = regs.iter().find(|e| e["register"] == "rx_port_counters").expect("rx counter");
    let n = other.len() as u64;
    assert_eq!(rxc["index"], 1);
    assert_eq!(rxc["before"], n << 32 | 1);
    assert_eq!(rxc["after"], (n + traced.len() as u64) << 32 | 2);
    let res = events(r, "ingress_result");
    assert_eq!(res[0]["egress_port"], 2);
    assert!(res[0]["drop"].is_null() && res[0]["multicast"].is_null());
    // Egress on port 2, and the frame sent there.
    let passes = events(r, "pass");
    assert!(passes.iter().any(|p| p["gress"] == "egress" && p["port"] == 2 && p["program"] == "forward"));
    let txc = regs.iter().find(|e| e["register"] == "tx_port_counters").expect("tx counter");
    assert_eq!(txc["index"], 2);
    let tx = events(r, "transmit");
    assert_eq!(tx.len(), 1);
    assert_eq!((&tx[0]["port"], &tx[0]["len"]), (&Value::from(2), &Value::from(traced.len())));

    // An unknown destination floods: the multicast group and its ports, less the source.
    let (g, members) = (1u16, vec![1u16, 2, 3]);
    sw.control(&pisa::ControlOp::McastGroupWrite {
        op: pisa::control::WriteOp::Insert,
        group: g,
        replicas: members.iter().map(|&p| pisa::Replica { port: p, rid: 0 }).collect(),
    })
    .expect("group");
    let mut rx = vec![PacketBuf::from_slice(&frame(1, 4000, 9, 5000, b"x"), 1)];
    sw.process(&mut rx, 20);
    sw.drain_all();
    let recs = take(&mut sw);
    assert_eq!(recs.len(), 1);
    let res = events(&recs[0], "ingress_result");
    assert_eq!(res[0]["multicast"]["group"], g);
    assert_eq!(res[0]["multicast"]["ports"], serde_json::json!([2, 3]));
    let sent: Vec<_> = events(&recs[0], "transmit").iter().map(|t| t["port"].as_u64().unwrap()).collect();
    assert_eq!(sent, vec![2, 3], "one copy per replica, both in the one record");

    // Disarmed: nothing more is recorded.
    sw.trace_arm(None);
    let mut rx = vec![PacketBuf::from_slice(&traced, 1)];
    sw.process(&mut rx, 30);
    sw.drain_all();
    assert!(take(&mut sw).is_empty());
}

#[test]
fn forward_trace_shows_the_drop_reason() {
    // A frame to the router's own MAC (l3_route) with no route: dropped by ipv4_lpm's miss.
    let set = set();
    let mut sw = switch(4, &[(1, 1)], &[]);
    let (t, a) = ids(&set, 0, "l2_dmac", "l3_route");
    sw.control(&pisa::ControlOp::TableWrite {
        table_id: t,
        op: pisa::control::WriteOp::Insert,
        matches: vec![pisa::FieldMatch::Exact { field: 0, value: mac(0xAA).to_vec() }],
        priority: 0,
        action_id: a,
        params: vec![],
    })
    .expect("entry");
    arm(&mut sw, "ip dst 10.0.0.170");
    let mut rx = vec![PacketBuf::from_slice(&frame(1, 4000, 0xAA, 5000, b"x"), 1)];
    sw.process(&mut rx, 10);
    assert!(sw.drain_all().is_empty());
    let recs = take(&mut sw);
    assert_eq!(recs.len(), 1);
    let lpm = events(&recs[0], "table").into_iter().find(|e| e["table"] == "ipv4_lpm").expect("ipv4_lpm").clone();
    assert_eq!(lpm["hit"], false);
    assert_eq!(lpm["key"][0]["value"], "0a0000aa");
    let res = events(&recs[0], "ingress_result");
    assert_eq!(res[0]["drop"]["reason"], "no_ipv4_route");
    assert_eq!(res[0]["drop"]["program"], "forward");
    assert!(events(&recs[0], "transmit").is_empty());
}

#[test]
fn daiet_trace_shows_the_value_cell_before_and_after() {
    let part = (0u32, 1024u32);
    let t = tree(PARENT as u16, 0, part.0, part.1, Op::Sum, 2, 250);
    let mut sw = switch(16, &[(1, 1), (2, 2), (PARENT, PARENT as u16)], &[(TREE, t)]);
    arm(&mut sw, "udp dst 7070");
    let key = b"apple".to_vec();
    let sends = [(0u32, 5u32), (1, 7)];
    let mut expect_before = 0u64;
    let mut cell = None;
    for (seq, v) in sends {
        let mut rx = vec![PacketBuf::from_slice(&daiet_data_frame(TREE, 1, PARENT, 1, seq, 0, &[(key.clone(), v)]), 1)];
        sw.process(&mut rx, 10 + seq as u64);
        for i in 0..64 {
            sw.tick(100 + i);
        }
        sw.drain_all();
        let recs = take(&mut sw);
        assert_eq!(recs.len(), 1, "one record per packet");
        let r = &recs[0];
        assert_eq!(events(r, "received")[0]["owner"], "daiet");
        assert!(events(r, "table").iter().any(|e| e["table"] == "daiet_trees" && e["hit"] == true));
        // The pair went to slice 0: its hash picks the cell in the tree's partition.
        let h = events(r, "hash").into_iter().find(|e| e["unit"] == "key_hash_0").expect("key hash").clone();
        let want_idx = part.0 + (h["value"].as_u64().unwrap() as u32 & (part.1 - 1));
        let vals: Vec<_> = events(r, "register").into_iter().filter(|e| e["register"] == "value_0").collect();
        assert_eq!(vals.len(), 1, "one value cell updated");
        assert_eq!(vals[0]["index"], want_idx);
        assert_eq!(vals[0]["before"], expect_before);
        assert_eq!(vals[0]["after"], expect_before + v as u64, "after = before + value (Sum)");
        if let Some(c) = cell {
            assert_eq!(c, want_idx, "the same key lands in the same cell");
        }
        cell = Some(want_idx);
        expect_before += v as u64;
        // The key's first word was claimed or matched in key0_0 at the same index.
        let k0: Vec<_> = events(r, "register").into_iter().filter(|e| e["register"] == "key0_0").collect();
        assert_eq!(k0[0]["index"], want_idx);
        let word = u32::from_be_bytes([key[0], key[1], key[2], key[3]]) as u64;
        assert_eq!(k0[0]["after"], word);
    }
    // A frame of another port is not traced.
    let mut rx = vec![PacketBuf::from_slice(&frame(1, 4000, 2, 5000, b"x"), 1)];
    sw.process(&mut rx, 1000);
    sw.drain_all();
    assert!(take(&mut sw).is_empty());
}
