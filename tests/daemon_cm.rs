//! The daemon's connection manager (issue 23, contract §2): CM clients speaking the JSON
//! protocol on the control socket (tests/common/cm_client.rs) listen, resolve, connect, accept,
//! reject and disconnect through UDP daemons on loopback addresses (one daemon: MADs to
//! its own address are hairpinned; two daemons: MADs cross the wire as QP1 packets); a
//! client that goes mid-connect or after establishing is cleaned up (the peer is told, the
//! port can be listened on again); garbage on a CM connection and bad QP1 packets are
//! counted drops and the daemon keeps serving.
//!
//! Each test uses its own loopback addresses (127.P.T.1/2, P from the process id), so
//! they run in parallel with each other and with other test binaries.

mod common;

use common::cm_client::{param, CmClient, WAIT};
use common::daemon::Daemon;
use roce_emu::cm::ucma::{Command, EventKind, Reply};
use roce_emu::daemon::control::ToProcess;
use roce_emu::daemon::qp1::{Sender, PACKET_LEN};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// 127.P.`test`.`host`.
fn addr(test: u8, host: u8) -> IpAddr {
    let p = (std::process::id() % 200) as u8 + 20;
    IpAddr::V4(Ipv4Addr::new(127, p, test, host))
}

fn udp_daemon(ip: IpAddr, tag: &str) -> Daemon {
    Daemon::start(None, &format!("udp:{ip}"), tag, &[])
}

/// Waits (bounded) until `f` holds for the daemon's counters.
fn wait_counters(
    d: &Daemon,
    what: &str,
    f: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let c = d.counters();
        if f(&c) {
            return c;
        }
        assert!(Instant::now() < deadline, "{what}: {c:#}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn hello_welcome_and_version_refusal() {
    let ip = addr(1, 1);
    let d = udp_daemon(ip, "cm-hello");
    let (_c, welcome) = CmClient::connect(&d.socket, "client");
    match welcome {
        ToProcess::CmWelcome {
            version,
            node_guid,
            addrs,
            mtu,
        } => {
            assert_eq!(version, roce_emu::cm::ucma::VERSION);
            assert_eq!(addrs, vec![ip]);
            // lo's MTU is 65536: the largest IB MTU.
            assert_eq!(mtu, 4096);
            // The EUI-64 of the port's MAC (none on a UDP port), as the verbs device's.
            assert_eq!(node_guid, 0x0200_00ff_fe00_0000);
        }
        w => panic!("{w:?}"),
    }
    // Another protocol version is refused (and the daemon goes on).
    let s = common::cm_client::connect_raw(&d.socket);
    let hello = roce_emu::daemon::control::ToDaemon::CmHello {
        version: 999,
        pid: 1,
    };
    roce_emu::daemon::control::send(std::os::fd::AsFd::as_fd(&s), &hello, &[]).unwrap();
    let deadline = Instant::now() + WAIT;
    let got = loop {
        match roce_emu::daemon::control::recv::<ToProcess>(std::os::fd::AsFd::as_fd(&s)) {
            Ok((m, _)) => break m,
            Err(_) if Instant::now() < deadline => {}
            Err(e) => panic!("{e}"),
        }
    };
    assert!(
        matches!(&got, ToProcess::Refused { why } if why.contains("999")),
        "{got:?}"
    );
    let c = wait_counters(&d, "one hello, one refusal", |c| {
        c["cm_clients"]["refused"] == 1 && c["cm_clients"]["hellos"] == 1
    });
    assert_eq!(c["cm_clients"]["connected"], 1);
}

/// A QP1 packet from `from` to the daemon at `to`, built as the daemon builds them, then
/// changed by `edit` (the ICRC refilled after).
fn qp1_packet(from: SocketAddr, to: SocketAddr, edit: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
    let mut p = vec![0u8; PACKET_LEN];
    // Not a valid CM MAD (class 0): the CM counts it, the daemon hands it over.
    Sender::new().build(from, to, &[0u8; 256], &mut p);
    edit(&mut p);
    let ph = roce_emu::wire::icrc::PseudoHeaders::new(from, to, 0, p.len());
    if p.len() >= 16 {
        roce_emu::wire::icrc::fill(ph.ip(), ph.udp(), &mut p).unwrap();
    }
    p
}

#[test]
fn garbage_and_bad_qp1_packets_are_counted_drops() {
    let ip = addr(2, 1);
    let d = udp_daemon(ip, "cm-garbage");
    let (mut c, _) = CmClient::connect(&d.socket, "client");
    // Not JSON: EINVAL, sequence 0 (none could be read).
    c.send_raw(b"{not json");
    assert!(
        matches!(c.reply_of(0), Reply::Errno { errno: 22, .. }),
        "garbage gets EINVAL"
    );
    // JSON but no such command: EINVAL with its own sequence number.
    c.send_raw(br#"{"seq": 77, "command": {"cmd": "no_such"}}"#);
    assert!(matches!(c.reply_of(77), Reply::Errno { errno: 22, .. }));
    // Bad QP1 packets from another loopback address.
    let peer = UdpSocket::bind((addr(2, 2), 0)).unwrap();
    let from = peer.local_addr().unwrap();
    let to = SocketAddr::new(ip, 4791);
    let bad_qkey = qp1_packet(from, to, |p| {
        p[12..16].copy_from_slice(&0x0123_4567u32.to_be_bytes())
    });
    let bad_opcode = qp1_packet(from, to, |p| p[0] = 0x04); // RC SEND ONLY to QP1
    let mut short = qp1_packet(from, to, |_| {});
    short.truncate(20);
    let good = qp1_packet(from, to, |_| {});
    for p in [&bad_qkey, &bad_opcode, &short, &good] {
        peer.send_to(p, to).unwrap();
    }
    let k = wait_counters(&d, "QP1 drops by reason", |k| {
        k["qp1"]["rcvd_pkts"] == 1
            && k["qp1"]["qkey_viol_cntr"] == 1
            && k["qp1"]["drop_opcode"] == 1
            && k["qp1"]["drop_short"] == 1
    });
    assert_eq!(k["cm_clients"]["bad_requests"], 2);
    assert_eq!(
        k["counters"]["no_owner"], 0,
        "QP1 is not a process's: {k:#}"
    );
    // The daemon and this client still work: a real command is answered in order.
    let r = c.cmd(Command::CreateId {
        ps: roce_emu::cm::ucma::PortSpace::Tcp,
        qp_type: roce_emu::cm::ucma::QpType::Rc,
    });
    assert!(matches!(r, Reply::Id { .. }), "{r:?}");
    // The text form shows the groups.
    let out = std::process::Command::new(common::daemon::BIN)
        .args(["counters", "--daemon"])
        .arg(&d.socket)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("qkey_viol_cntr 1"), "{text}");
    assert!(text.contains("cm_clients"), "{text}");
    // Its end is the CM's `owner_gone`: its id goes with it.
    assert_eq!(d.counters()["cm_clients"]["ids"], 1);
    drop(c);
    wait_counters(&d, "the client's end is seen", |k| {
        k["cm_clients"]["gone"] == 1
            && k["cm_clients"]["connected"] == 0
            && k["cm_clients"]["ids"] == 0
    });
}

/// Connect, accept, establish and disconnect between `srv` (listening on `sip`) and `cli`,
/// then a reject and a connect with no listener.
fn full_exchange(srv: &mut CmClient, cli: &mut CmClient, sip: IpAddr, port: u16) {
    let at = SocketAddr::new(sip, port);
    let lid = srv.listen(at);
    let t0 = Instant::now();
    let aid = cli.resolved(at);
    cli.ok(Command::Connect {
        id: aid,
        param: param(0x11_0011, b"hello"),
    });
    let req = srv.expect(EventKind::ConnectRequest);
    assert_eq!(req.listen_id, Some(lid));
    let p = req
        .param
        .clone()
        .expect("CONNECT_REQUEST carries the peer's parameters");
    assert_eq!(p.qp_num, 0x11_0011);
    assert!(p.private_data.starts_with(b"hello"), "{p:?}");
    let pid = req.id;
    srv.ok(Command::Accept {
        id: pid,
        param: param(0x22_0022, b"world"),
    });
    let rep = cli.expect(EventKind::ConnectResponse);
    assert_eq!(rep.id, aid);
    let p = rep
        .param
        .clone()
        .expect("CONNECT_RESPONSE carries the peer's parameters");
    assert_eq!(p.qp_num, 0x22_0022);
    assert!(p.private_data.starts_with(b"world"), "{p:?}");
    // rdma_establish: the RTU.
    cli.ok(Command::Accept {
        id: aid,
        param: param(0x11_0011, b""),
    });
    let est = srv.expect(EventKind::Established);
    assert_eq!(est.id, pid);
    eprintln!(
        "{sip}: resolve, route, connect, accept, establish in {:?}",
        t0.elapsed()
    );
    // Disconnect from the active side: both see DISCONNECTED.
    cli.ok(Command::Disconnect { id: aid });
    let e = srv.expect(EventKind::Disconnected);
    assert_eq!(e.id, pid);
    srv.ok(Command::Disconnect { id: pid });
    let e = cli.expect(EventKind::Disconnected);
    assert_eq!(e.id, aid);
    srv.ok(Command::DestroyId { id: pid });
    cli.ok(Command::DestroyId { id: aid });

    // A reject: REJECTED, reason 28 (consumer defined), with its private data.
    let aid = cli.resolved(at);
    cli.ok(Command::Connect {
        id: aid,
        param: param(0x11_0012, b""),
    });
    let req = srv.expect(EventKind::ConnectRequest);
    srv.ok(Command::Reject {
        id: req.id,
        private_data: b"no".to_vec(),
        reason: None,
    });
    let e = cli.expect(EventKind::Rejected);
    assert_eq!((e.id, e.status), (aid, 28));
    let pd = e.param.map(|p| p.private_data).unwrap_or_default();
    assert!(pd.starts_with(b"no"), "{pd:?}");
    cli.ok(Command::DestroyId { id: aid });
    srv.ok(Command::DestroyId { id: req.id });

    // Nobody listens on port+1: REJECTED 8 (invalid service ID), as the kernel's CM.
    let aid = cli.resolved(SocketAddr::new(sip, port + 1));
    cli.ok(Command::Connect {
        id: aid,
        param: param(0x11_0013, b""),
    });
    let e = cli.expect(EventKind::Rejected);
    assert_eq!((e.id, e.status), (aid, 8));
    srv.quiet(Duration::from_millis(200));
}

#[test]
fn two_clients_of_one_daemon_connect_through_the_hairpin() {
    let ip = addr(3, 1);
    let d = udp_daemon(ip, "cm-one");
    let (mut srv, _) = CmClient::connect(&d.socket, "server");
    let (mut cli, _) = CmClient::connect(&d.socket, "client");
    full_exchange(&mut srv, &mut cli, ip, 7471);
    let k = d.counters();
    assert!(k["qp1"]["hairpin_pkts"].as_u64().unwrap() >= 8, "{k:#}");
    assert_eq!(k["qp1"]["sent_pkts"], 0, "{k:#}");
    // The CM's own counters are there, in JSON and text.
    assert!(k["cm"]["mads_in"]["req"].as_u64().unwrap() >= 2, "{k:#}");
    let out = std::process::Command::new(common::daemon::BIN)
        .args(["counters", "--daemon"])
        .arg(&d.socket)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}");
    assert!(text.contains("mads_in_req "), "{text}");
}

#[test]
fn clients_of_two_daemons_connect_over_qp1_packets() {
    let (sip, cip) = (addr(4, 1), addr(4, 2));
    let ds = udp_daemon(sip, "cm-srv");
    let dc = udp_daemon(cip, "cm-cli");
    let (mut srv, _) = CmClient::connect(&ds.socket, "server");
    let (mut cli, _) = CmClient::connect(&dc.socket, "client");
    full_exchange(&mut srv, &mut cli, sip, 7472);
    let (ks, kc) = (ds.counters(), dc.counters());
    for k in [&ks, &kc] {
        assert_eq!(k["qp1"]["hairpin_pkts"], 0, "{k:#}");
        assert!(k["qp1"]["sent_pkts"].as_u64().unwrap() >= 3, "{k:#}");
        assert!(k["qp1"]["rcvd_pkts"].as_u64().unwrap() >= 3, "{k:#}");
        assert_eq!(k["qp1"]["drop_bad_icrc"], 0, "{k:#}");
    }
    // What one sent, the other received (nothing lost on loopback).
    assert_eq!(ks["qp1"]["sent_pkts"], kc["qp1"]["rcvd_pkts"]);
    assert_eq!(kc["qp1"]["sent_pkts"], ks["qp1"]["rcvd_pkts"]);
}

#[test]
fn an_unreachable_address_is_addr_error() {
    let ip = addr(5, 1);
    let d = udp_daemon(ip, "cm-unreach");
    let (mut cli, _) = CmClient::connect(&d.socket, "client");
    let id = cli.create_id();
    // TEST-NET-1: no route leaves from a loopback address.
    cli.ok(Command::ResolveAddr {
        id,
        src: None,
        dst: "192.0.2.1:7000".parse().unwrap(),
        timeout_ms: 1000,
    });
    let e = cli.expect(EventKind::AddrError);
    assert_eq!(e.id, id);
    assert!(e.status < 0, "{e:?}");
}

/// A server whose connection closes while a client's connect waits on it: the client is
/// told (REJECTED, or UNREACHABLE), the server's listener is gone with it (another client
/// listens on the same port), and the daemon's CM state for it is gone.
#[test]
fn a_server_gone_mid_connect_is_cleaned_up() {
    let ip = addr(6, 1);
    let d = udp_daemon(ip, "cm-gone-mid");
    let at = SocketAddr::new(ip, 7473);
    let (mut srv, _) = CmClient::connect(&d.socket, "server");
    let (mut cli, _) = CmClient::connect(&d.socket, "client");
    srv.listen(at);
    let aid = cli.resolved(at);
    cli.ok(Command::Connect {
        id: aid,
        param: param(0x33_0001, b""),
    });
    srv.expect(EventKind::ConnectRequest);
    drop(srv);
    let e = cli.expect_one_of(&[EventKind::Rejected, EventKind::Unreachable]);
    assert_eq!(e.id, aid);
    // The daemon's CM state for it is gone: only the client's id is left.
    wait_counters(&d, "the server's end is seen and its ids gone", |k| {
        k["cm_clients"]["gone"] == 1
            && k["cm_clients"]["connected"] == 1
            && k["cm_clients"]["ids"] == 1
    });
    // Its listener went with it.
    let (mut again, _) = CmClient::connect(&d.socket, "new server");
    again.listen(at);
}

/// A client whose connection closes after establishing: the server sees DISCONNECTED.
#[test]
fn a_client_gone_after_establishing_disconnects_its_peer() {
    let (sip, cip) = (addr(7, 1), addr(7, 2));
    let ds = udp_daemon(sip, "cm-gone-est-s");
    let dc = udp_daemon(cip, "cm-gone-est-c");
    let at = SocketAddr::new(sip, 7474);
    let (mut srv, _) = CmClient::connect(&ds.socket, "server");
    let (mut cli, _) = CmClient::connect(&dc.socket, "client");
    srv.listen(at);
    let aid = cli.resolved(at);
    cli.ok(Command::Connect {
        id: aid,
        param: param(0x44_0001, b""),
    });
    let req = srv.expect(EventKind::ConnectRequest);
    srv.ok(Command::Accept {
        id: req.id,
        param: param(0x55_0001, b""),
    });
    cli.expect(EventKind::ConnectResponse);
    cli.ok(Command::Accept {
        id: aid,
        param: param(0x44_0001, b""),
    });
    srv.expect(EventKind::Established);
    drop(cli);
    let e = srv.expect(EventKind::Disconnected);
    assert_eq!(e.id, req.id);
    wait_counters(&dc, "the client's end is seen and its ids gone", |k| {
        k["cm_clients"]["gone"] == 1
            && k["cm_clients"]["connected"] == 0
            && k["cm_clients"]["ids"] == 0
    });
    // The client's daemon serves a new client at once.
    let (mut again, _) = CmClient::connect(&dc.socket, "new client");
    again.resolved(at);
}

trait OneOf {
    fn expect_one_of(&mut self, kinds: &[EventKind]) -> roce_emu::cm::ucma::Event;
}

impl OneOf for CmClient {
    fn expect_one_of(&mut self, kinds: &[EventKind]) -> roce_emu::cm::ucma::Event {
        let e = self
            .event_within(WAIT)
            .unwrap_or_else(|| panic!("{}: no event (wanted {kinds:?})", self.name));
        assert!(kinds.contains(&e.kind), "{}: {e:?}", self.name);
        e
    }
}

/// Two TAP daemons bridged in a namespace of the test's own (root only): the CM's MADs
/// leave through each daemon's L2 (ARP and ND find the peer), over IPv4 and IPv6, and
/// every QP1 frame in one daemon's capture has a valid ICRC (a frame port rebases the
/// ICRC for the IPv4 identification it picks; the receiver checks it in full).
#[test]
fn clients_of_two_tap_daemons_connect_over_ipv4_and_ipv6() {
    if !nix::unistd::geteuid().is_root() {
        common::netns::skip(
            "daemon_cm (TAP)",
            "needs root for a namespace, TAPs and a bridge",
        );
        return;
    }
    let ns = common::netns::Netns::new("dcm");
    ns.ip(&["link", "add", "br97", "type", "bridge"]);
    ns.ip(&["link", "set", "br97", "up"]);
    let pcap = std::env::temp_dir().join(format!("roce-emu-dcm-{}.pcapng", std::process::id()));
    let pcap_arg = pcap.to_str().unwrap();
    let a = Daemon::start(
        Some(&ns),
        "tap:rdcma,10.97.0.2/24,fd00:97::2/64",
        "dcma",
        &["--pcap", pcap_arg],
    );
    let b = Daemon::start(
        Some(&ns),
        "tap:rdcmb,10.97.0.3/24,fd00:97::3/64",
        "dcmb",
        &[],
    );
    for t in ["rdcma", "rdcmb"] {
        ns.ip(&["link", "set", t, "master", "br97"]);
    }
    let (mut srv, _) = CmClient::connect(&a.socket, "server");
    let (mut cli, _) = CmClient::connect(&b.socket, "client");
    full_exchange(&mut srv, &mut cli, "10.97.0.2".parse().unwrap(), 7475);
    full_exchange(&mut srv, &mut cli, "fd00:97::2".parse().unwrap(), 7477);
    // A destination outside the port's subnets: ADDR_ERROR.
    let id = cli.create_id();
    cli.ok(Command::ResolveAddr {
        id,
        src: None,
        dst: "10.98.0.2:7000".parse().unwrap(),
        timeout_ms: 1000,
    });
    assert!(cli.expect(EventKind::AddrError).status < 0);
    let (ka, kb) = (a.counters(), b.counters());
    for k in [&ka, &kb] {
        assert_eq!(k["qp1"]["hairpin_pkts"], 0, "{k:#}");
        assert_eq!(k["qp1"]["drop_bad_icrc"], 0, "{k:#}");
        assert!(k["qp1"]["sent_pkts"].as_u64().unwrap() >= 6, "{k:#}");
    }
    assert_eq!(ka["qp1"]["sent_pkts"], kb["qp1"]["rcvd_pkts"]);
    assert_eq!(kb["qp1"]["sent_pkts"], ka["qp1"]["rcvd_pkts"]);
    drop(a);
    // The capture: every RoCE frame's ICRC verifies (`roce-emu pcap` says 0 bad ICRC).
    let out = std::process::Command::new(common::daemon::BIN)
        .arg("pcap")
        .arg(&pcap)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "roce-emu pcap: {err}");
    eprintln!("{err}");
    assert!(err.contains(" 0 bad ICRC"), "{err}");
    let _ = std::fs::remove_file(&pcap);
}

/// The CM's timers run in the daemon's loop (its sleep ends at the CM's next deadline): a
/// REQ to a silent peer (a UDP socket of the test's own on 4791) is sent again after the
/// kernel's REQ timeout (2 * 2^(18-8) + 2^(20-8) ms = 6.1 s), same transaction, next PSN;
/// both are valid QP1 packets as the peer's socket receives them (ICRC included).
#[test]
fn a_req_to_a_silent_peer_is_retried_by_the_loops_timer() {
    let (ip, peer_ip) = (addr(9, 1), addr(9, 2));
    let d = udp_daemon(ip, "cm-retry");
    let peer = UdpSocket::bind((peer_ip, 4791)).unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (mut cli, _) = CmClient::connect(&d.socket, "client");
    let id = cli.resolved(SocketAddr::new(peer_ip, 7478));
    cli.ok(Command::Connect {
        id,
        param: param(0x66_0001, b""),
    });
    let mut got = Vec::new();
    let start = Instant::now();
    for _ in 0..2 {
        let mut buf = [0u8; 512];
        let (n, from) = peer.recv_from(&mut buf).expect("a REQ within 10 s");
        got.push((start.elapsed(), from, buf[..n].to_vec()));
    }
    let mut solver = roce_emu::wire::icrc::Ipv4IdSolver::new();
    let mut tids = Vec::new();
    for (i, (_, from, p)) in got.iter().enumerate() {
        let net = roce_emu::daemon::qp1::Net {
            src: *from,
            dst: SocketAddr::new(peer_ip, 4791),
            ipv4_id: None,
        };
        let mad = roce_emu::daemon::qp1::parse(&net, p, &mut solver).expect("a valid QP1 packet");
        // CM class, attribute REQ (0x0010); the TID at bytes 8..16.
        assert_eq!(
            (mad[1], u16::from_be_bytes([mad[16], mad[17]])),
            (7, 0x0010)
        );
        tids.push(mad[8..16].to_vec());
        let psn = u32::from_be_bytes([0, p[9], p[10], p[11]]);
        assert_eq!(psn, i as u32, "QP1's own PSN sequence");
    }
    assert_eq!(tids[0], tids[1], "a retry is the same transaction");
    let gap = got[1].0 - got[0].0;
    assert!(
        gap > Duration::from_millis(5500) && gap < Duration::from_millis(7500),
        "REQ retry after {gap:?}"
    );
    let k = d.counters();
    assert!(k["cm"]["retries"]["req"].as_u64().unwrap() >= 1, "{k:#}");
    cli.ok(Command::DestroyId { id });
}

/// The active side goes mid-connect (the server holds its CONNECT_REQUEST, not accepted
/// yet): the server's id for the request is told (REJECTED), and the listener still
/// serves the next client.
#[test]
fn a_client_gone_mid_connect_is_rejected_at_the_server() {
    let (sip, cip) = (addr(10, 1), addr(10, 2));
    let ds = udp_daemon(sip, "cm-gone-cli-s");
    let dc = udp_daemon(cip, "cm-gone-cli-c");
    let at = SocketAddr::new(sip, 7479);
    let (mut srv, _) = CmClient::connect(&ds.socket, "server");
    let (mut cli, _) = CmClient::connect(&dc.socket, "client");
    srv.listen(at);
    let aid = cli.resolved(at);
    cli.ok(Command::Connect {
        id: aid,
        param: param(0x77_0001, b""),
    });
    let req = srv.expect(EventKind::ConnectRequest);
    drop(cli);
    let e = srv.expect(EventKind::Rejected);
    assert_eq!(e.id, req.id);
    wait_counters(&dc, "the client's ids are gone", |k| {
        k["cm_clients"]["gone"] == 1 && k["cm_clients"]["ids"] == 0
    });
    srv.ok(Command::DestroyId { id: req.id });
    // The listener takes the next client.
    let (mut cli2, _) = CmClient::connect(&dc.socket, "client 2");
    let aid = cli2.resolved(at);
    cli2.ok(Command::Connect {
        id: aid,
        param: param(0x77_0002, b""),
    });
    let req = srv.expect(EventKind::ConnectRequest);
    srv.ok(Command::Accept {
        id: req.id,
        param: param(0x88_0002, b""),
    });
    cli2.expect(EventKind::ConnectResponse);
}

/// The UDP port space (udaddy's): SIDR_REQ and SIDR_REP between two daemons; the client's
/// ESTABLISHED carries the server's QPN, the port space's Q_Key and the address vector
/// of the server's address; the server's CONNECT_REQUEST the client's address vector.
#[test]
fn ud_ids_resolve_the_peers_qp_by_sidr_between_two_daemons() {
    use roce_emu::cm::ucma::{ip_gid, PortSpace, QpType};
    let (sip, cip) = (addr(11, 1), addr(11, 2));
    let ds = udp_daemon(sip, "cm-sidr-s");
    let dc = udp_daemon(cip, "cm-sidr-c");
    let at = SocketAddr::new(sip, 7480);
    let (mut srv, _) = CmClient::connect(&ds.socket, "server");
    let (mut cli, _) = CmClient::connect(&dc.socket, "client");
    let ud_id = |c: &mut CmClient| match c.ok(Command::CreateId {
        ps: PortSpace::Udp,
        qp_type: QpType::Ud,
    }) {
        Reply::Id { id } => id,
        r => panic!("{r:?}"),
    };
    let lid = ud_id(&mut srv);
    srv.ok(Command::Bind { id: lid, addr: at });
    srv.ok(Command::Listen {
        id: lid,
        backlog: 4,
    });
    let cid = ud_id(&mut cli);
    cli.ok(Command::ResolveAddr {
        id: cid,
        src: None,
        dst: at,
        timeout_ms: 2000,
    });
    cli.expect(EventKind::AddrResolved);
    cli.ok(Command::ResolveRoute {
        id: cid,
        timeout_ms: 2000,
    });
    cli.expect(EventKind::RouteResolved);
    cli.ok(Command::Connect {
        id: cid,
        param: param(0x99_0001, b"udp hello"),
    });
    let req = srv.expect(EventKind::ConnectRequest);
    assert_eq!(req.listen_id, Some(lid));
    assert_eq!(
        req.ah.expect("the client's address vector").dgid,
        ip_gid(cip)
    );
    let p = req.param.unwrap();
    assert!(p.private_data.starts_with(b"udp hello"), "{p:?}");
    srv.ok(Command::Accept {
        id: req.id,
        param: param(0xaa_0001, b"udp reply"),
    });
    let e = cli.expect(EventKind::Established);
    let p = e.param.unwrap();
    assert_eq!((e.id, p.qp_num, p.qkey), (cid, 0xaa_0001, 0x0123_4567));
    assert!(p.private_data.starts_with(b"udp reply"), "{p:?}");
    assert_eq!(e.ah.expect("the server's address vector").dgid, ip_gid(sip));
    let (ks, kc) = (ds.counters(), dc.counters());
    assert_eq!(kc["cm"]["mads_out"]["sidr_req"], 1, "{kc:#}");
    assert_eq!(ks["cm"]["mads_out"]["sidr_rep"], 1, "{ks:#}");
}

/// A CM client that sends requests and never reads its answers cannot hold the daemon:
/// its answers wait in its outbox until it holds more than 8 MiB, then it is detached
/// (its ids go, as at its exit); another client is answered at once all along.
#[test]
fn a_cm_client_that_never_reads_is_detached_and_blocks_nobody() {
    use std::os::fd::AsFd;
    let ip = addr(12, 1);
    let d = udp_daemon(ip, "cm-flood");
    let (mut good, _) = CmClient::connect(&d.socket, "good");
    let (mut bad, _) = CmClient::connect(&d.socket, "flooder");
    bad.create_id();
    bad.sock.set_nonblocking(true).unwrap();
    let start = Instant::now();
    let mut sent = 0u64;
    let mut cut = false;
    let mut good_ids = 0u64;
    while start.elapsed() < Duration::from_secs(30) && sent < 400_000 {
        match roce_emu::daemon::control::try_send_bytes(bad.sock.as_fd(), b"x") {
            Ok(()) => sent += 1,
            Err(roce_emu::daemon::control::ControlError::Io(e))
                if e.kind() == std::io::ErrorKind::WouldBlock =>
            {
                // The daemon is busy or its buffer is full: meanwhile another client is
                // served without delay.
                let t = Instant::now();
                good.create_id();
                good_ids += 1;
                assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(_) => {
                cut = true;
                break;
            }
        }
    }
    let k = wait_counters(&d, "the flooder is detached", |k| {
        k["cm_clients"]["gone"] == 1 && k["cm_clients"]["connected"] == 1
    });
    eprintln!(
        "flooder cut after {sent} requests in {:?} (its send failed: {cut}); bad_requests {}",
        start.elapsed(),
        k["cm_clients"]["bad_requests"]
    );
    // Only the good client's ids are left: the flooder's went with it.
    assert_eq!(k["cm_clients"]["ids"].as_u64().unwrap(), good_ids, "{k:#}");
}
