//! What the Hare test binaries share: host `i` is MAC 02:00:00:00:00:i and IP 10.0.0.i, and
//! its frames are built by hostlib's Hare framing (`hostlib::hare::frames`), the one the
//! host side uses.
#![allow(dead_code)]

use hostlib::hare::frames::{self, Endpoint};
use wire::hare::Repr;
use wire::{EthernetAddress, Ipv4Address};

pub fn mac(i: u8) -> [u8; 6] {
    [2, 0, 0, 0, 0, i]
}

fn endpoint(host: u8, port: u16) -> Endpoint {
    Endpoint { mac: EthernetAddress(mac(host)), ip: Ipv4Address([10, 0, 0, host]), port }
}

/// An Ethernet/IPv4/UDP frame from host `src` to host `dst` carrying `msg`.
pub fn frame(src: u8, dst: u8, sport: u16, dport: u16, msg: &Repr) -> Vec<u8> {
    frames::frame(&endpoint(src, sport), &endpoint(dst, dport), msg).unwrap()
}
