//! QP states and attributes, and which attributes each transition requires or accepts
//! (IBA 10.3.1 and 11.2.5.2 "Modify QP"; the RC rows of the kernel's `qp_state_table` that
//! `ibv_modify_qp` is checked against).

use crate::engine::config::EngineConfig;
use crate::engine::error::VerbsError;
pub use crate::engine::state::QpState;
use crate::engine::time::{MAX_ACK_TIMEOUT, MAX_RNR_TIMER};
use crate::mem::Access;
use crate::wire::bth::QPN_MASK;
use crate::wire::Psn;
use std::net::IpAddr;

/// Path MTU (ibv_mtu): the largest payload of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    M256 = 1,
    M512 = 2,
    M1024 = 3,
    M2048 = 4,
    M4096 = 5,
}

impl Mtu {
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }
    /// From the ibv_mtu enum value (1..=5), as perftest exchanges it.
    pub const fn from_ibv(v: u8) -> Option<Mtu> {
        Some(match v {
            1 => Mtu::M256,
            2 => Mtu::M512,
            3 => Mtu::M1024,
            4 => Mtu::M2048,
            5 => Mtu::M4096,
            _ => return None,
        })
    }
    /// From a byte count (256, 512, 1024, 2048 or 4096).
    pub const fn from_bytes(v: u32) -> Option<Mtu> {
        Some(match v {
            256 => Mtu::M256,
            512 => Mtu::M512,
            1024 => Mtu::M1024,
            2048 => Mtu::M2048,
            4096 => Mtu::M4096,
            _ => return None,
        })
    }
}

/// Where the connected peer is (the RoCEv2 part of an address handle: the destination
/// GID as an IP address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AddressVector {
    pub dest_ip: IpAddr,
}

/// RNR retry count meaning "retry forever" (IBA 9.7.5.2.8).
pub const RNR_RETRY_INFINITE: u8 = 7;
/// Largest transport retry count: like the RNR retry count, the attribute is 3 bits
/// (IBA 9.7.6.1.3 counts these retries; rxe treats this value as "forever", see
/// `EngineConfig::retry_cnt_7_infinite`).
pub const MAX_RETRY_CNT: u8 = 7;
/// The default P_Key (full membership, default partition, IBA 10.9): the one entry of the
/// P_Key table, at index 0.
pub const DEFAULT_PKEY: u16 = crate::wire::bth::DEFAULT_PKEY;
/// The Local ACK Timeout code ibv_rc_pingpong and perftest connect with: 4.096 µs * 2^14,
/// about 67 ms (IBA 9.7.6.1.3).
pub const DEFAULT_TIMEOUT: u8 = 14;
/// The minimum RNR NAK timer code ibv_rc_pingpong connects with: 0.64 ms (IBA Table 45).
pub const DEFAULT_MIN_RNR_TIMER: u8 = 12;

/// The access flags that apply to a QP (`IBV_QP_ACCESS_FLAGS`): LOCAL_WRITE and the remote
/// rights; the rest are MR-only.
const QP_ACCESS: Access = Access::REMOTE_WRITE
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC)
    .union(Access::LOCAL_WRITE);

/// `Err(why)` if `v` is above `max`.
fn at_most<T: PartialOrd>(v: T, max: T, why: &'static str) -> Result<(), &'static str> {
    if v > max {
        Err(why)
    } else {
        Ok(())
    }
}

/// An attribute value as `VerbsError::InvalidAttr` reports it.
trait Raw {
    fn raw(self) -> u64;
}
macro_rules! raw_from {
    ($($t:ty),*) => { $(impl Raw for $t { fn raw(self) -> u64 { self.into() } })* };
}
raw_from!(u8, u16, u32);
impl Raw for Access {
    fn raw(self) -> u64 {
        self.bits().into()
    }
}

/// The QP attributes, one row each, so adding one is one row: the row makes its field of
/// [`QpAttr`] (given or not), its [`Attr`] name (the ibverbs mask bit, for the transition
/// errors), its place in [`QpAttr::given`], its field of [`Attrs`] (the value in force, with
/// its value before any modify; rows without one act on other QP state, in `Qp::modify`),
/// and its range check (`VerbsError::InvalidAttr`, named by the field).
///
/// The rows are in the order `given` lists attributes and `validate` checks them.
macro_rules! qp_attributes {
    ($(
        $(#[$doc:meta])*
        $field:ident: $ty:ty => $variant:ident($ibv:literal)
            $(, kept $kty:ty = $init:expr)?
            $(, check |$v:ident, $cfg:ident| $check:expr)?;
    )*) => {
        /// Attributes for `modify_qp`. `None` = not given. `state: None` keeps the current
        /// state (e.g. RTS -> RTS to change the RNR timer).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct QpAttr {
            pub state: Option<QpState>,
            $($(#[$doc])* pub $field: Option<$ty>,)*
        }

        /// Attribute names, as ibverbs' IBV_QP_* mask bits call them.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Attr {
            $($variant,)*
        }

        impl Attr {
            pub const fn name(self) -> &'static str {
                match self {
                    $(Attr::$variant => $ibv,)*
                }
            }
        }

        /// Attributes in force (set by `modify`).
        #[derive(Debug, Clone, Copy)]
        pub struct Attrs {
            $($(pub $field: $kty,)?)*
        }

        impl Default for Attrs {
            /// A new QP's, before its first modify.
            fn default() -> Attrs {
                Attrs {
                    $($($field: $init,)?)*
                }
            }
        }

        impl Attrs {
            /// Keeps every attribute given that is kept here.
            pub(crate) fn apply(&mut self, a: &QpAttr) {
                $($(
                    if let Some(v) = a.$field {
                        let v: $kty = v.into();
                        self.$field = v;
                    }
                )?)*
            }
        }

        impl QpAttr {
            /// The attributes given, in a fixed order.
            pub fn given(&self) -> impl Iterator<Item = Attr> + '_ {
                [$((self.$field.is_some(), Attr::$variant)),*]
                    .into_iter()
                    .filter_map(|(on, a)| on.then_some(a))
            }

            /// Range checks of the values given, against the NIC's limits.
            pub(crate) fn validate(&self, cfg: &EngineConfig) -> Result<(), VerbsError> {
                $($(
                    if let Some($v) = self.$field {
                        let $cfg = cfg;
                        let checked: Result<(), &'static str> = $check;
                        if let Err(why) = checked {
                            return Err(VerbsError::InvalidAttr {
                                attr: stringify!($field),
                                value: $v.raw(),
                                why,
                            });
                        }
                    }
                )?)*
                Ok(())
            }
        }
    };
}

qp_attributes! {
    /// Remote operations the responder allows: REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC.
    access: Access => AccessFlags("IBV_QP_ACCESS_FLAGS"), kept Access = Access::empty(),
        check |v, _cfg| if QP_ACCESS.contains(v) {
            Ok(())
        } else {
            Err("only LOCAL_WRITE and REMOTE_* apply to a QP")
        };
    /// Index into the P_Key table, which has one entry ([`DEFAULT_PKEY`]).
    pkey_index: u16 => PkeyIndex("IBV_QP_PKEY_INDEX"), kept u16 = 0,
        check |v, _cfg| at_most(v, 0, "only P_Key index 0 exists");
    /// Port number: the NIC has one, number 1.
    port: u8 => Port("IBV_QP_PORT"), kept u8 = 1,
        check |v, _cfg| if v == 1 { Ok(()) } else { Err("the NIC has one port, number 1") };
    path_mtu: Mtu => PathMtu("IBV_QP_PATH_MTU"), kept Mtu = Mtu::M1024;
    av: AddressVector => Av("IBV_QP_AV"), kept Option<AddressVector> = None;
    dest_qpn: u32 => DestQpn("IBV_QP_DEST_QPN"), kept u32 = 0,
        check |v, _cfg| at_most(v, QPN_MASK, "QPNs are 24 bits");
    /// Expected PSN of the first request the responder receives.
    rq_psn: Psn => RqPsn("IBV_QP_RQ_PSN");
    /// PSN of the first request the requester sends.
    sq_psn: Psn => SqPsn("IBV_QP_SQ_PSN");
    /// Incoming READ/atomic requests the responder keeps in flight (its replay ring).
    max_dest_rd_atomic: u8 => MaxDestRdAtomic("IBV_QP_MAX_DEST_RD_ATOMIC"), kept u8 = 0,
        check |v, cfg| at_most(v, cfg.max_rd_atomic, "above the NIC's max_qp_rd_atom");
    /// Outgoing READ/atomic requests the requester keeps in flight.
    max_rd_atomic: u8 => MaxQpRdAtomic("IBV_QP_MAX_QP_RD_ATOMIC"), kept u8 = 0,
        check |v, cfg| at_most(v, cfg.max_rd_atomic, "above the NIC's max_qp_rd_atom");
    /// 5-bit RNR NAK timer code the responder sends (IBA Table 45).
    min_rnr_timer: u8 => MinRnrTimer("IBV_QP_MIN_RNR_TIMER"), kept u8 = 0,
        check |v, _cfg| at_most(v, MAX_RNR_TIMER, "5-bit code 0..=31");
    /// Local ACK timeout code: 4.096 µs * 2^timeout, 0 = infinite.
    timeout: u8 => Timeout("IBV_QP_TIMEOUT"), kept u8 = 0,
        check |v, _cfg| at_most(v, MAX_ACK_TIMEOUT, "5-bit code 0..=31");
    /// Transport retries, 0..=7.
    retry_cnt: u8 => RetryCnt("IBV_QP_RETRY_CNT"), kept u8 = 0,
        check |v, _cfg| at_most(v, MAX_RETRY_CNT, "3-bit count 0..=7");
    /// RNR retries, 0..=7; 7 means retry forever (IBA 9.7.5.2.8).
    rnr_retry: u8 => RnrRetry("IBV_QP_RNR_RETRY"), kept u8 = 0,
        check |v, _cfg| at_most(v, RNR_RETRY_INFINITE, "3-bit count 0..=7 (7 = infinite)");
    /// UD and GSI: the Q_Key received datagrams must carry (IBA 10.2.4).
    qkey: u32 => Qkey("IBV_QP_QKEY"), kept u32 = 0;
    /// Raise `SqDrained` when SQD is reached with the send queue empty.
    sq_draining_notify: bool => EnSqdAsyncNotify("IBV_QP_EN_SQD_ASYNC_NOTIFY"),
        kept bool = false;
}

impl Attrs {
    /// The P_Key in force: the table's one entry (`pkey_index` can only be 0).
    pub fn pkey(&self) -> u16 {
        DEFAULT_PKEY
    }
}

impl QpAttr {
    /// RESET -> INIT: P_Key index 0 on port 1, with the remote rights the responder allows.
    pub fn init(access: Access) -> QpAttr {
        QpAttr {
            state: Some(QpState::Init),
            pkey_index: Some(0),
            port: Some(1),
            access: Some(access),
            ..Default::default()
        }
    }

    /// INIT -> RTR toward the peer QP `dest_qpn` at `peer`, whose first request will carry
    /// `rq_psn`: the attributes an RC QP must be given (IBA 11.2.5.2).
    pub fn rtr(
        peer: IpAddr,
        path_mtu: Mtu,
        dest_qpn: u32,
        rq_psn: Psn,
        max_dest_rd_atomic: u8,
        min_rnr_timer: u8,
    ) -> QpAttr {
        QpAttr {
            state: Some(QpState::Rtr),
            av: Some(AddressVector { dest_ip: peer }),
            path_mtu: Some(path_mtu),
            dest_qpn: Some(dest_qpn),
            rq_psn: Some(rq_psn),
            max_dest_rd_atomic: Some(max_dest_rd_atomic),
            min_rnr_timer: Some(min_rnr_timer),
            ..Default::default()
        }
    }

    /// RTR -> RTS: our first PSN and the requester's timers and limits.
    pub fn rts(
        sq_psn: Psn,
        timeout: u8,
        retry_cnt: u8,
        rnr_retry: u8,
        max_rd_atomic: u8,
    ) -> QpAttr {
        QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            timeout: Some(timeout),
            retry_cnt: Some(retry_cnt),
            rnr_retry: Some(rnr_retry),
            max_rd_atomic: Some(max_rd_atomic),
            ..Default::default()
        }
    }
}

/// Required and optional attributes of an RC transition, or `None` if the transition does
/// not exist. Any state may go to RESET or ERR with no attributes.
pub fn rc_rules(from: QpState, to: QpState) -> Option<(&'static [Attr], &'static [Attr])> {
    use Attr::*;
    use QpState::*;
    const NONE: &[Attr] = &[];
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (NONE, NONE),
        (Reset, Init) => (&[PkeyIndex, Port, AccessFlags], NONE),
        (Init, Init) => (NONE, &[PkeyIndex, Port, AccessFlags]),
        (Init, Rtr) => (
            &[Av, PathMtu, DestQpn, RqPsn, MaxDestRdAtomic, MinRnrTimer],
            &[AccessFlags, PkeyIndex],
        ),
        (Rtr, Rts) => (
            &[Timeout, RetryCnt, RnrRetry, SqPsn, MaxQpRdAtomic],
            &[AccessFlags, MinRnrTimer],
        ),
        (Rts, Rts) => (NONE, &[AccessFlags, MinRnrTimer]),
        (Rts, Sqd) => (NONE, &[EnSqdAsyncNotify]),
        (Sqd, Rts) => (NONE, &[AccessFlags, MinRnrTimer]),
        (Sqd, Sqd) => (
            NONE,
            &[
                PkeyIndex,
                Av,
                Timeout,
                RetryCnt,
                RnrRetry,
                MaxQpRdAtomic,
                MaxDestRdAtomic,
                AccessFlags,
                MinRnrTimer,
            ],
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn mtu_encodings() {
        assert_eq!(Mtu::M1024.bytes(), 1024);
        assert_eq!(Mtu::M4096.bytes(), 4096);
        assert_eq!(Mtu::from_ibv(3), Some(Mtu::M1024));
        assert_eq!(Mtu::from_bytes(2048), Some(Mtu::M2048));
        assert_eq!(Mtu::from_bytes(1500), None);
        assert_eq!(Mtu::from_ibv(6), None);
    }

    /// The table's rows: what a new QP starts with, what a modify keeps, what it refuses.
    #[test]
    fn attribute_rows() {
        let mut t = Attrs::default();
        assert_eq!((t.path_mtu, t.av, t.port), (Mtu::M1024, None, 1));
        assert_eq!((t.pkey_index, t.pkey()), (0, DEFAULT_PKEY));
        t.apply(&QpAttr::rts(
            Psn::new(5),
            DEFAULT_TIMEOUT,
            MAX_RETRY_CNT,
            RNR_RETRY_INFINITE,
            4,
        ));
        assert_eq!((t.timeout, t.retry_cnt, t.rnr_retry), (14, 7, 7));
        assert_eq!(t.max_rd_atomic, 4);
        let cfg = EngineConfig::new(IpAddr::from([127, 0, 0, 1]));
        assert_eq!(QpAttr::rts(Psn::new(5), 31, 7, 7, 4).validate(&cfg), Ok(()));
        let bad = QpAttr {
            timeout: Some(MAX_ACK_TIMEOUT + 1),
            ..Default::default()
        };
        assert_eq!(
            bad.validate(&cfg),
            Err(VerbsError::InvalidAttr {
                attr: "timeout",
                value: 32,
                why: "5-bit code 0..=31"
            })
        );
        assert_eq!(Attr::EnSqdAsyncNotify.name(), "IBV_QP_EN_SQD_ASYNC_NOTIFY");
    }

    #[test]
    fn transition_table() {
        use QpState::*;
        assert!(rc_rules(Reset, Rts).is_none());
        assert!(rc_rules(Init, Rts).is_none());
        assert!(rc_rules(Err, Rts).is_none());
        assert!(rc_rules(Rts, Rtr).is_none());
        assert_eq!(rc_rules(Rts, Err), Some((&[][..], &[][..])));
        let (req, _) = rc_rules(Init, Rtr).unwrap();
        assert!(req.contains(&Attr::RqPsn) && req.contains(&Attr::DestQpn));
        let a = QpAttr {
            sq_psn: Some(Psn::new(1)),
            timeout: Some(DEFAULT_TIMEOUT),
            ..Default::default()
        };
        assert_eq!(
            a.given().collect::<Vec<_>>(),
            vec![Attr::SqPsn, Attr::Timeout]
        );
    }
}
