//! The out-of-band exchange of `roce-emu pingpong`, byte for byte against what rdma-core
//! 44's `ibv_rc_pingpong` sent in shared/captures/rc_pingpong_s64.pcap (see
//! shared/lab/README.md, "The out-of-band exchanges (TCP), byte for byte"): the 52-byte
//! record formatted and parsed, and the order and sizes of the TCP messages, with this
//! test playing the real tool's part against the binary in each role.

use roce_emu::cli::pingpong::{gid_to_ip, ip_to_gid, Dest, RecordError, DONE, RECORD_LEN};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Client -> server, first record of the capture.
const CLIENT_REC: &[u8; RECORD_LEN] = b"0000:000011:9e6004:00000000000000000000ffffc612000c\0";
/// Server -> client.
const SERVER_REC: &[u8; RECORD_LEN] = b"0000:000011:7bdbc8:00000000000000000000ffffc612000b\0";

/// The README's hex dump of the first record, as bytes.
fn hexdump_bytes() -> Vec<u8> {
    let dump = "\
00000000: 3030 3030 3a30 3030 3031 313a 3965 3630  0000:000011:9e60
00000010: 3034 3a30 3030 3030 3030 3030 3030 3030  04:0000000000000
00000020: 3030 3030 3030 3066 6666 6663 3631 3230  0000000ffffc6120
00000030: 3030 6300                                00c.";
    let mut out = Vec::new();
    for line in dump.lines() {
        let hex = &line[10..50];
        for group in hex.split_whitespace() {
            for i in (0..group.len()).step_by(2) {
                out.push(u8::from_str_radix(&group[i..i + 2], 16).unwrap());
            }
        }
    }
    out
}

#[test]
fn the_capture_record_formats_byte_for_byte() {
    assert_eq!(hexdump_bytes(), CLIENT_REC.to_vec());
    let d = Dest {
        lid: 0,
        qpn: 0x11,
        psn: 0x9e6004,
        gid: ip_to_gid(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 12))),
    };
    assert_eq!(&d.to_record(), CLIENT_REC);
    assert_eq!(d.to_record().len(), 52);
    let s = Dest {
        psn: 0x7bdbc8,
        gid: ip_to_gid(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 11))),
        ..d
    };
    assert_eq!(&s.to_record(), SERVER_REC);
}

#[test]
fn the_capture_records_parse() {
    let d = Dest::from_record(CLIENT_REC).unwrap();
    assert_eq!((d.lid, d.qpn, d.psn), (0, 0x11, 0x9e6004));
    assert_eq!(
        d.gid,
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 12]
    );
    assert_eq!(d.gid_v6().to_string(), "::ffff:198.18.0.12");
    assert_eq!(
        gid_to_ip(d.gid),
        Some(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 12)))
    );
    let s = Dest::from_record(SERVER_REC).unwrap();
    assert_eq!((s.lid, s.qpn, s.psn), (0, 0x11, 0x7bdbc8));
    assert_eq!(
        gid_to_ip(s.gid),
        Some(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 11)))
    );
}

#[test]
fn fields_are_zero_padded_lowercase_and_round_trip() {
    let v6: Ipv6Addr = "fd00:abcd::1:2".parse().unwrap();
    for d in [
        Dest {
            lid: 0xbeef,
            qpn: 0xff_ffff,
            psn: 0,
            gid: ip_to_gid(IpAddr::V6(v6)),
        },
        Dest {
            lid: 1,
            qpn: 0x12,
            psn: 0xab_cdef,
            gid: [0; 16],
        },
    ] {
        let r = d.to_record();
        assert_eq!(r[51], 0);
        let text = std::str::from_utf8(&r[..51]).unwrap();
        assert!(!text.bytes().any(|b| b.is_ascii_uppercase()), "{text}");
        assert_eq!(&text[4..5], ":");
        assert_eq!(&text[11..12], ":");
        assert_eq!(&text[18..19], ":");
        assert_eq!(Dest::from_record(&r).unwrap(), d);
    }
    assert_eq!(
        &Dest {
            lid: 0xbeef,
            qpn: 0xff_ffff,
            psn: 0,
            gid: ip_to_gid(IpAddr::V6(v6)),
        }
        .to_record()[..],
        b"beef:ffffff:000000:fd00abcd000000000000000000010002\0"
    );
    assert_eq!(gid_to_ip(ip_to_gid(IpAddr::V6(v6))), Some(IpAddr::V6(v6)));
    assert_eq!(gid_to_ip([0; 16]), None);
}

#[test]
fn malformed_records_are_refused_with_the_reason() {
    assert_eq!(
        Dest::from_record(&CLIENT_REC[..40]),
        Err(RecordError::Length(40))
    );
    let mut r = *CLIENT_REC;
    r[51] = b'x';
    assert_eq!(Dest::from_record(&r), Err(RecordError::NoNul));
    let mut r = *CLIENT_REC;
    r[11] = b'.';
    assert_eq!(Dest::from_record(&r), Err(RecordError::Fields(3)));
    let mut r = *CLIENT_REC;
    r[7] = b'z';
    assert!(matches!(
        Dest::from_record(&r),
        Err(RecordError::Hex { field: "QPN", .. })
    ));
    let mut r = *CLIENT_REC;
    r[50] = 0;
    assert_eq!(Dest::from_record(&r), Err(RecordError::GidLength(31)));
    let mut r = [0u8; RECORD_LEN];
    r[..22].copy_from_slice(b"0000:1000000:000000:00");
    assert!(matches!(
        Dest::from_record(&r),
        Err(RecordError::Range { field: "QPN", .. })
    ));
}

// ---- the TCP exchange against the binary ------------------------------------------------

const BIN: &str = env!("CARGO_BIN_EXE_roce-emu");

fn connect_retrying(port: u16) -> TcpStream {
    let t = Instant::now();
    loop {
        match TcpStream::connect((Ipv4Addr::LOCALHOST, port)) {
            Ok(s) => return s,
            Err(_) if t.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("the server never listened on {port}: {e}"),
        }
    }
}

/// This test as ibv_rc_pingpong's client: our server must read one 52-byte record, answer
/// with one 52-byte record naming its QP and GID, then take the client's `done\0`.
#[test]
fn server_answers_as_rc_pingpong_does() {
    let port = 18670;
    let server = Command::new(BIN)
        .args([
            "pingpong",
            "-p",
            &port.to_string(),
            "--bind",
            "127.0.0.40",
            "--wait",
            "10",
            "--timeout",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut s = connect_retrying(port);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let me = Dest {
        lid: 0,
        qpn: 0x11,
        psn: 0x9e6004,
        gid: ip_to_gid(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 41))),
    };
    s.write_all(&me.to_record()).unwrap();
    let mut rec = [0u8; RECORD_LEN];
    s.read_exact(&mut rec).unwrap();
    let text = std::str::from_utf8(&rec).unwrap();
    let d = Dest::from_record(&rec).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    assert_eq!(d.lid, 0);
    // Its QP is in the QPN block the daemon of its address leased (never block 0).
    assert_ne!(d.qpn >> 16, 0, "{text:?}");
    assert_eq!(
        &rec[..19],
        format!("0000:{:06x}:{:06x}:", d.qpn, d.psn).as_bytes()
    );
    assert_eq!(&rec[19..], b"00000000000000000000ffff7f000028\0");
    s.write_all(DONE).unwrap();
    // Nothing more on TCP: the server closes its side.
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    // No RoCE peer exists at 127.0.0.41: the server gives up after --timeout.
    let out = server.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "  remote address: LID 0x0000, QPN 0x000011, PSN 0x9e6004, GID ::ffff:127.0.0.41\n"
        ),
        "{stdout}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("no completion for 1 s"));
}

/// This test as ibv_rc_pingpong's server: our client must write first (52 bytes), and
/// after our answer write exactly `done\0`.
#[test]
fn client_writes_first_and_says_done() {
    let l = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 18671)).unwrap();
    let client = Command::new(BIN)
        .args([
            "pingpong",
            "-p",
            "18671",
            "--bind",
            "127.0.0.42",
            "--timeout",
            "2",
            "127.0.0.1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut rec = [0u8; RECORD_LEN];
    s.read_exact(&mut rec).unwrap();
    let d = Dest::from_record(&rec).unwrap();
    assert_eq!(&rec[19..], b"00000000000000000000ffff7f00002a\0");
    assert_ne!(d.qpn >> 16, 0, "a leased block's");
    let peer = Dest {
        lid: 0,
        qpn: 0x11,
        psn: 0x7bdbc8,
        gid: ip_to_gid(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 43))),
    };
    s.write_all(&peer.to_record()).unwrap();
    let mut done = Vec::new();
    s.read_to_end(&mut done).unwrap();
    assert_eq!(done, DONE);
    // Nobody answers RoCE at 127.0.0.43: the first send fails after its retries.
    let out = client.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("transport retry counter exceeded")
            || stderr.contains("no completion for 2 s"),
        "{stderr}"
    );
}
