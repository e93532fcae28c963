//! Arbitrary MADs, commands, time and dead owners into a connection manager
//! (`roce_emu::cm::Cm`): it must never panic. The input is a script of small operations;
//! the manager's own MADs go back into it (loopback to its own address), possibly with a
//! byte changed, so the handlers past the comm-ID lookup are reached too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_emu::cm::ucma::{CmOption, Command, ConnParam, PortSpace, QpState, QpType};
use roce_emu::cm::{Cm, CmConfig, MadPeer, Resolved};
use roce_emu::engine::Instant;
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from(self.byte()?) << 8 | u16::from(self.byte()?))
    }
}

fuzz_target!(|data: &[u8]| {
    let me: IpAddr = Ipv4Addr::new(10, 0, 0, 1).into();
    let other: IpAddr = Ipv4Addr::new(10, 0, 0, 2).into();
    let mut cm = Cm::new(CmConfig {
        node_guid: 1,
        addrs: vec![me],
        mtu: 1024,
        seed: 7,
    });
    let mut now = Instant::from_nanos(0);
    let mut wire: VecDeque<(MadPeer, [u8; 256])> = VecDeque::new();
    let mut inp = Input(data);
    let ports = [7174u16, 7471, 0, 1];
    for _ in 0..400 {
        let Some(op) = inp.byte() else { break };
        let owner = u64::from(op >> 6);
        let id = u32::from(inp.byte().unwrap_or(0) % 8);
        let ps = [
            PortSpace::Tcp,
            PortSpace::Udp,
            PortSpace::Ib,
            PortSpace::Ipoib,
        ][usize::from(op >> 4 & 3)];
        let port = ports[usize::from(op & 3)];
        let ip = if op & 4 != 0 {
            me
        } else {
            Ipv4Addr::UNSPECIFIED.into()
        };
        let param = ConnParam {
            private_data: vec![op; usize::from(op)],
            qp_num: u32::from(op),
            retry_count: op,
            ..ConnParam::default()
        };
        let cmd = match op % 19 {
            0 => Some(Command::CreateId {
                ps,
                qp_type: QpType::Rc,
            }),
            1 => Some(Command::Bind {
                id,
                addr: SocketAddr::new(ip, port),
            }),
            2 => Some(Command::Listen {
                id,
                backlog: u32::from(op),
            }),
            3 => Some(Command::ResolveAddr {
                id,
                src: None,
                dst: SocketAddr::new(if op & 8 != 0 { me } else { other }, port),
                timeout_ms: u32::from(op),
            }),
            4 => Some(Command::ResolveRoute { id, timeout_ms: 0 }),
            5 => Some(Command::Connect { id, param }),
            6 => Some(Command::Accept { id, param }),
            7 => Some(Command::Reject {
                id,
                private_data: vec![1; usize::from(op)],
                reason: Some(u16::from(op)),
            }),
            8 => Some(Command::Disconnect { id }),
            9 => Some(Command::DestroyId { id }),
            10 => Some(Command::InitQpAttr {
                id,
                state: [QpState::Init, QpState::Rtr, QpState::Rts][usize::from(op % 3)],
            }),
            11 => Some(Command::Notify {
                id,
                event: u32::from(op & 7),
            }),
            12 => Some(Command::SetOption {
                id,
                option: CmOption::ReuseAddr(op & 1 != 0),
            }),
            13 => Some(Command::Query { id }),
            _ => None,
        };
        if let Some(c) = cmd {
            let _ = cm.command(now, owner, c);
        }
        match op % 19 {
            14 => {
                // The next MAD on the wire back into the manager, one byte changed.
                if let Some((peer, mut mad)) = wire.pop_front() {
                    let at = usize::from(inp.byte().unwrap_or(0));
                    mad[at] ^= inp.byte().unwrap_or(0);
                    let back = MadPeer {
                        remote: peer.local,
                        local: peer.remote,
                    };
                    cm.handle_mad(now, back, &mad);
                }
            }
            15 => {
                // An arbitrary MAD with a CM header.
                let mut mad = [0u8; 256];
                for b in mad.iter_mut().skip(16) {
                    *b = inp.byte().unwrap_or(0);
                }
                mad[..4].copy_from_slice(&[1, 7, 2, 3]);
                let len = usize::from(inp.byte().unwrap_or(255)) + 1;
                cm.handle_mad(
                    now,
                    MadPeer {
                        remote: other,
                        local: me,
                    },
                    &mad[..len.min(256)],
                );
            }
            16 => {
                let ms = inp.u16().unwrap_or(0);
                now = now.saturating_add(std::time::Duration::from_millis(u64::from(ms) * 8));
                if cm.poll_timeout().is_some_and(|t| t <= now) {
                    cm.handle_timeout(now);
                }
                // Every deadline that passed was served: no busy loop for the host.
                assert!(
                    cm.poll_timeout().is_none_or(|t| t > now),
                    "a passed deadline is left"
                );
            }
            17 => cm.owner_gone(now, owner),
            18 => {
                if let Some((rid, _, dst)) = cm.poll_resolve() {
                    let r = if op & 8 != 0 {
                        Ok(Resolved {
                            src: me,
                            hop_limit: 64,
                        })
                    } else {
                        Err(-101)
                    };
                    let _ = dst;
                    cm.resolved(now, rid, r);
                } else {
                    cm.resolved(
                        now,
                        id,
                        Ok(Resolved {
                            src: other,
                            hop_limit: 1,
                        }),
                    );
                }
            }
            _ => {}
        }
        while let Some(m) = cm.poll_transmit() {
            if wire.len() < 64 {
                wire.push_back(m);
            }
        }
        while cm.poll_event().is_some() {}
        let _ = cm.stats();
    }
});
