//! Helpers shared by integration tests.
#![allow(dead_code)]

pub mod attach;
pub mod cm;
pub mod cm_client;
pub mod daemon;
pub mod dropin;
pub mod in_thread;
pub mod log;
pub mod netns;
pub mod nic;
pub mod proc;
pub mod rc;
pub mod srq;
pub mod srq_case;
pub mod ud;
pub mod wire_gen;
pub mod zero;

use std::path::PathBuf;

/// Every capture under tests/data, sorted.
pub fn captures() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/data")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    v.sort();
    assert!(v.len() >= 17, "expected the 17 rxe captures in {dir:?}");
    v
}

/// The frames of a classic pcap file (Ethernet link), read with pcap-file.
pub fn frames(path: &std::path::Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(path).unwrap();
    let mut r = pcap_file::pcap::PcapReader::new(&bytes[..]).unwrap();
    assert_eq!(r.header().datalink, pcap_file::DataLink::ETHERNET);
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.into_owned());
    }
    out
}

/// True for an Ethernet/IPv4|IPv6/UDP frame to port 4791 (read independently of the crate).
pub fn is_udp_4791(f: &[u8]) -> bool {
    let et = u16::from_be_bytes([f[12], f[13]]);
    let (proto, l4) = match et {
        0x0800 => (f[14 + 9], 14 + usize::from(f[14] & 0x0f) * 4),
        0x86dd => (f[14 + 6], 14 + 40),
        _ => return false,
    };
    proto == 17 && f.len() >= l4 + 4 && u16::from_be_bytes([f[l4 + 2], f[l4 + 3]]) == 4791
}
