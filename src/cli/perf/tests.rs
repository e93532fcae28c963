use super::*;

/// The client's record of shared/captures/write_bw_s4096.pcap (rxe, perftest 4.5-0.17).
const CAPTURED: &[u8] = b"0000:0001:000011:8db1b9:00000225:000055e9d7deb000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:0c:00000000:\0";

#[test]
fn record_round_trips_the_capture() {
    let r = Record::parse(CAPTURED).expect("parses");
    assert_eq!(r.out_reads, 1);
    assert_eq!(r.qpn, 0x11);
    assert_eq!(r.psn, 0x8db1b9);
    assert_eq!(r.rkey, 0x225);
    assert_eq!(r.vaddr, 0x55e9_d7de_b000);
    assert_eq!(gid_to_ip(r.gid), Some("198.18.0.12".parse().unwrap()));
    assert_eq!(&r.to_bytes()[..], CAPTURED);
    assert_eq!(CAPTURED.len(), RECORD_LEN);
}

#[test]
fn malformed_records_are_refused() {
    for bad in [
        &b"\0"[..],
        b"0000:0001:000011:8db1b9:00000225:000055e9d7deb000:00\0",
        b"0000:0001:1000011:8db1b9:00000225:000055e9d7deb000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:0c:00000000:\0",
        b"0000:0001:000011:8db1b9:00000225:000055e9d7deb000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:zz:00000000:\0",
        b"no nul",
    ] {
        assert_eq!(Record::parse(bad), None, "{:?}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn offsets_follow_perftest() {
    // 4096-byte cycle, 64-byte lines: 8-byte atomics use 64 slots of 64 bytes.
    let g = Geometry {
        cycle: 4096,
        stride: stride(8, 64),
    };
    assert_eq!(offset(0, 8, &g), 0);
    assert_eq!(offset(1, 8, &g), 64);
    assert_eq!(offset(63, 8, &g), 63 * 64);
    assert_eq!(offset(64, 8, &g), 0);
    // A 4096-byte message does not fit twice: always offset 0.
    let g = Geometry {
        cycle: 4096,
        stride: stride(4096, 64),
    };
    assert_eq!(offset(5, 4096, &g), 0);
    assert_eq!(stride(100, 64), 128);
    assert_eq!(stride(0, 64), 64);
}

#[test]
fn meter_peak_is_the_best_window() {
    let t0 = Instant::now();
    let m = Meter {
        start: t0,
        marks: vec![
            (100, t0 + Duration::from_millis(100)),
            (200, t0 + Duration::from_millis(150)),
        ],
    };
    let r = m.report(1_048_576, 200);
    assert!((r.bw_avg - 200.0 / 0.15).abs() < 1e-6, "{r:?}");
    assert!((r.bw_peak - 100.0 / 0.05).abs() < 1e-6, "{r:?}");
    assert!((r.msg_rate - 200.0 / 0.15 / 1e6).abs() < 1e-12, "{r:?}");
}
