//! The ECN field: the low two bits of the IPv4 TOS byte or the IPv6 traffic class
//! (RFC 3168 §5). RoCEv2 congestion control (IBA Annex A17.9) rides on it: a sender whose
//! QP does congestion control marks its packets ECN-capable (ECT(0)), a congested switch
//! rewrites that to CE instead of dropping, and the receiver answers CE with a CNP.

/// An ECN codepoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum Ecn {
    /// 00: the sender does not do ECN; a switch drops such a packet instead of marking it.
    #[default]
    NotEct,
    /// 01.
    Ect1,
    /// 10: what RoCEv2 senders with congestion control on send.
    Ect0,
    /// 11: Congestion Experienced, written by a switch on an ECN-capable packet.
    Ce,
}

impl Ecn {
    /// The codepoint of a TOS or traffic-class byte (its low two bits).
    pub const fn from_tos(tos: u8) -> Ecn {
        match tos & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// The two bits, as they sit in the TOS byte.
    pub const fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0,
            Ecn::Ect1 => 1,
            Ecn::Ect0 => 2,
            Ecn::Ce => 3,
        }
    }

    /// `tos` with its ECN bits replaced by this codepoint (the DSCP kept).
    pub const fn in_tos(self, tos: u8) -> u8 {
        (tos & !3) | self.bits()
    }

    /// Whether a switch may mark this packet CE rather than drop it (ECT(0), ECT(1), or
    /// already CE).
    pub const fn capable(self) -> bool {
        !matches!(self, Ecn::NotEct)
    }

    /// The name Wireshark shows (`ip.dsfield.ecn`).
    pub const fn name(self) -> &'static str {
        match self {
            Ecn::NotEct => "Not-ECT",
            Ecn::Ect1 => "ECT(1)",
            Ecn::Ect0 => "ECT(0)",
            Ecn::Ce => "CE",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_tos_byte() {
        for tos in 0..=255u8 {
            let e = Ecn::from_tos(tos);
            assert_eq!(e.in_tos(tos), tos);
            assert_eq!(Ecn::from_tos(e.bits()), e);
        }
        assert_eq!(Ecn::Ce.in_tos(0xb8 | 2), 0xbb);
        assert_eq!(Ecn::from_tos(0x02), Ecn::Ect0);
        assert!(!Ecn::NotEct.capable() && Ecn::Ect1.capable());
    }
}
