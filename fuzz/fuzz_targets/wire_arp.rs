//! ARP: the generic view on arbitrary bytes, the Ethernet/IPv4 repr, emit → parse.
#![no_main]

use std::hint::black_box;

use libfuzzer_sys::fuzz_target;
use wire::{ArpPacket, ArpRepr};

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = ArpPacket::new_checked(data) else {
        return;
    };
    black_box((
        packet.hardware_type(),
        packet.protocol_type(),
        packet.hardware_len(),
        packet.protocol_len(),
        packet.operation(),
        packet.packet_len(),
    ));
    assert_eq!(
        packet.source_hardware_addr().len(),
        usize::from(packet.hardware_len())
    );
    assert_eq!(
        packet.source_protocol_addr().len(),
        usize::from(packet.protocol_len())
    );
    assert_eq!(
        packet.target_hardware_addr().len(),
        usize::from(packet.hardware_len())
    );
    assert_eq!(
        packet.target_protocol_addr().len(),
        usize::from(packet.protocol_len())
    );

    let Ok(repr) = ArpRepr::parse(&packet) else {
        return;
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut ArpPacket::new_unchecked(&mut buf[..]));
    let again = ArpPacket::new_checked(&buf[..]).expect("emitted packet is valid");
    assert_eq!(ArpRepr::parse(&again), Ok(repr));
    // Ethernet/IPv4 ARP is fully described by the repr: the 28 bytes come back exactly.
    assert_eq!(&buf[..], &data[..buf.len()]);
});
