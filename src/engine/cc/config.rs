//! DCQCN configuration: mlx5's knob names and defaults (debugfs `mlx5/<dev>/cc_params/`,
//! sysfs `ecn/roce_rp|roce_np/params/`, Linux `drivers/infiniband/hw/mlx5/cong.c`), parsed
//! from and printed as `key=value` pairs.

use std::fmt;
use std::str::FromStr;

/// Congestion control of one NIC: the notification point (CE -> CNP, IBA Annex A17.9) and
/// the reaction point (DCQCN in mlx5's fixed-point form). Times in microseconds, rates in
/// bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcConfig {
    /// NP: answer a CE-marked packet with a CNP (`roce_np/enable`). Off: CE is only counted.
    pub np_enable: bool,
    /// RP: lower a QP's rate on a CNP and mark its requests ECT(0) (`roce_rp/enable`).
    pub rp_enable: bool,
    /// NP: least time between two CNPs to one peer QP, µs (`np_min_time_between_cnps`);
    /// 0 sends one per CE-marked packet.
    pub min_time_between_cnps: u32,
    /// NP: the DSCP of a CNP's IP header (`np_cnp_dscp`). Informational: our ports do not
    /// prioritise.
    pub cnp_dscp: u8,
    /// RP: always set RT <- RC on a cut (`rp_clamp_tgt_rate`).
    pub clamp_tgt_rate: bool,
    /// RP: set RT <- RC on a cut that follows a timer-driven increase
    /// (`rp_clamp_tgt_rate_ati`).
    pub clamp_tgt_rate_after_time_inc: bool,
    /// RP: the rate-increase timer, µs (`rp_time_reset`).
    pub rpg_time_reset: u32,
    /// RP: the rate-increase byte counter, in units of 64 bytes (`rp_byte_reset`).
    pub rpg_byte_reset: u32,
    /// RP: stages before additive / hyper increase (`rp_threshold`).
    pub rpg_threshold: u32,
    /// RP: the rate at which a QP leaves DCQCN, bits/s; 0 = `line_rate` (`rp_max_rate`).
    pub rpg_max_rate: u64,
    /// RP: additive-increase step, bits/s (`rp_ai_rate`).
    pub rpg_ai_rate: u64,
    /// RP: hyper-increase step, bits/s (`rp_hai_rate`).
    pub rpg_hai_rate: u64,
    /// RP: alpha-to-cut shift: a cut is RC*alpha >> rpg_gd (11: alpha/2) (`rp_gd`).
    pub rpg_gd: u32,
    /// RP: a cut leaves at least this percentage of RC (`rp_min_dec_fac`).
    pub rpg_min_dec_fac: u32,
    /// RP: the rate floor, bits/s (`rp_min_rate`).
    pub rpg_min_rate: u64,
    /// RP: RC on a QP's first CNP, bits/s; 0 keeps the current rate
    /// (`rp_rate_to_set_on_first_cnp`).
    pub rate_to_set_on_first_cnp: u64,
    /// RP: alpha's gain, a 10-bit fraction (`rp_dce_tcp_g`): alpha <- g*alpha/1024 (+ 1024-g
    /// when a CNP came) every `dce_tcp_rtt`.
    pub dce_tcp_g: u32,
    /// RP: alpha's update period, µs (`rp_dce_tcp_rtt`).
    pub dce_tcp_rtt: u32,
    /// RP: least time between two cuts, µs (`rp_rate_reduce_monitor_period`).
    pub rate_reduce_monitor_period: u32,
    /// RP: alpha (0..=1023) on a QP's first CNP (`rp_initial_alpha_value`).
    pub initial_alpha_value: u32,
    /// The rate a QP starts at and returns to, bits/s. A user-space NIC has no wire speed
    /// of its own: experiments set it to their bottleneck's.
    pub line_rate: u64,
}

impl Default for CcConfig {
    fn default() -> CcConfig {
        CcConfig {
            np_enable: true,
            rp_enable: true,
            min_time_between_cnps: 4,
            cnp_dscp: 48,
            clamp_tgt_rate: false,
            clamp_tgt_rate_after_time_inc: true,
            rpg_time_reset: 300,
            rpg_byte_reset: 32767,
            rpg_threshold: 1,
            rpg_max_rate: 0,
            rpg_ai_rate: 5_000_000,
            rpg_hai_rate: 50_000_000,
            rpg_gd: 11,
            rpg_min_dec_fac: 50,
            rpg_min_rate: 1_000_000,
            rate_to_set_on_first_cnp: 0,
            dce_tcp_g: 1019,
            dce_tcp_rtt: 1,
            rate_reduce_monitor_period: 4,
            initial_alpha_value: 1023,
            line_rate: 100_000_000_000,
        }
    }
}

impl CcConfig {
    /// Sets the knobs a `key=value` list names (commas or spaces between pairs), keeping
    /// the others: how a daemon's settings and then a program's environment are laid over
    /// the defaults. Nothing changes when a pair is wrong.
    pub fn apply(&mut self, spec: &str) -> Result<(), CcConfigError> {
        let mut cfg = *self;
        for pair in spec
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|p| !p.is_empty())
        {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| CcConfigError::MissingValue(pair.to_string()))?;
            cfg.set(k.trim(), v.trim())?;
        }
        *self = cfg;
        Ok(())
    }

    /// The rate at which a QP leaves DCQCN: `rpg_max_rate`, or `line_rate` when 0.
    pub fn max_rate(&self) -> u64 {
        if self.rpg_max_rate == 0 {
            self.line_rate
        } else {
            self.rpg_max_rate.min(self.line_rate)
        }
    }
}

/// What is wrong with a `key=value` list given to [`CcConfig::from_str`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CcConfigError {
    /// No such knob (the message lists the known ones).
    UnknownKey(String),
    /// A pair without `=`.
    MissingValue(String),
    /// The value does not parse or is out of range for the key.
    BadValue {
        key: String,
        value: String,
        expected: &'static str,
    },
}

impl fmt::Display for CcConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CcConfigError::UnknownKey(k) => {
                write!(f, "unknown congestion-control key `{k}` (known: ")?;
                for (i, (name, _)) in KEYS.iter().enumerate() {
                    write!(f, "{}{name}", if i == 0 { "" } else { ", " })?;
                }
                write!(f, ")")
            }
            CcConfigError::MissingValue(k) => write!(f, "`{k}` needs a value: `{k}=VALUE`"),
            CcConfigError::BadValue {
                key,
                value,
                expected,
            } => {
                write!(f, "bad value `{value}` for `{key}`: expected {expected}")
            }
        }
    }
}

impl std::error::Error for CcConfigError {}

/// How a knob's value is written.
#[derive(Clone, Copy)]
enum Kind {
    Bool,
    /// A plain integer up to the bound.
    Int(u64),
    /// Bits per second, with an optional `kbit|mbit|gbit` suffix.
    Rate,
}

const KEYS: &[(&str, Kind)] = &[
    ("np_enable", Kind::Bool),
    ("rp_enable", Kind::Bool),
    ("min_time_between_cnps", Kind::Int(u32::MAX as u64)),
    ("cnp_dscp", Kind::Int(63)),
    ("clamp_tgt_rate", Kind::Bool),
    ("clamp_tgt_rate_after_time_inc", Kind::Bool),
    ("rpg_time_reset", Kind::Int(u32::MAX as u64)),
    ("rpg_byte_reset", Kind::Int(u32::MAX as u64)),
    ("rpg_threshold", Kind::Int(u32::MAX as u64)),
    ("rpg_max_rate", Kind::Rate),
    ("rpg_ai_rate", Kind::Rate),
    ("rpg_hai_rate", Kind::Rate),
    ("rpg_gd", Kind::Int(31)),
    ("rpg_min_dec_fac", Kind::Int(100)),
    ("rpg_min_rate", Kind::Rate),
    ("rate_to_set_on_first_cnp", Kind::Rate),
    ("dce_tcp_g", Kind::Int(1023)),
    ("dce_tcp_rtt", Kind::Int(u32::MAX as u64)),
    ("rate_reduce_monitor_period", Kind::Int(u32::MAX as u64)),
    ("initial_alpha_value", Kind::Int(1023)),
    ("line_rate", Kind::Rate),
];

fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "on" | "true" => Some(true),
        "0" | "off" | "false" => Some(false),
        _ => None,
    }
}

fn parse_rate(v: &str) -> Option<u64> {
    let l = v.to_ascii_lowercase();
    let (num, mul) = [
        ("gbit", 1_000_000_000u64),
        ("mbit", 1_000_000),
        ("kbit", 1_000),
    ]
    .iter()
    .find_map(|(s, m)| l.strip_suffix(s).map(|n| (n, *m)))
    .unwrap_or((l.as_str(), 1));
    num.trim().parse::<u64>().ok()?.checked_mul(mul)
}

/// A rate the way a user would write it: the largest unit that divides it.
fn show_rate(r: u64) -> String {
    for (s, m) in [
        ("gbit", 1_000_000_000u64),
        ("mbit", 1_000_000),
        ("kbit", 1_000),
    ] {
        if r != 0 && r % m == 0 {
            return format!("{}{s}", r / m);
        }
    }
    r.to_string()
}

impl CcConfig {
    fn set(&mut self, key: &str, value: &str) -> Result<(), CcConfigError> {
        let kind = KEYS
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, kind)| *kind)
            .ok_or_else(|| CcConfigError::UnknownKey(key.to_string()))?;
        let bad = |expected| CcConfigError::BadValue {
            key: key.to_string(),
            value: value.to_string(),
            expected,
        };
        let (b, n) = match kind {
            Kind::Bool => (
                parse_bool(value).ok_or_else(|| bad("0|1|on|off|true|false"))?,
                0,
            ),
            Kind::Int(max) => {
                let n = value.parse::<u64>().ok().filter(|n| *n <= max);
                (false, n.ok_or_else(|| bad(int_expect(max)))?)
            }
            Kind::Rate => {
                let n =
                    parse_rate(value).ok_or_else(|| bad("bits/s, optionally kbit|mbit|gbit"))?;
                (false, n)
            }
        };
        let u = n as u32; // Int kinds are bounded by u32::MAX or less above
        match key {
            "np_enable" => self.np_enable = b,
            "rp_enable" => self.rp_enable = b,
            "min_time_between_cnps" => self.min_time_between_cnps = u,
            "cnp_dscp" => self.cnp_dscp = n as u8,
            "clamp_tgt_rate" => self.clamp_tgt_rate = b,
            "clamp_tgt_rate_after_time_inc" => self.clamp_tgt_rate_after_time_inc = b,
            "rpg_time_reset" => self.rpg_time_reset = u,
            "rpg_byte_reset" => self.rpg_byte_reset = u,
            "rpg_threshold" => self.rpg_threshold = u,
            "rpg_max_rate" => self.rpg_max_rate = n,
            "rpg_ai_rate" => self.rpg_ai_rate = n,
            "rpg_hai_rate" => self.rpg_hai_rate = n,
            "rpg_gd" => self.rpg_gd = u,
            "rpg_min_dec_fac" => self.rpg_min_dec_fac = u,
            "rpg_min_rate" => self.rpg_min_rate = n,
            "rate_to_set_on_first_cnp" => self.rate_to_set_on_first_cnp = n,
            "dce_tcp_g" => self.dce_tcp_g = u,
            "dce_tcp_rtt" => self.dce_tcp_rtt = u,
            "rate_reduce_monitor_period" => self.rate_reduce_monitor_period = u,
            "initial_alpha_value" => self.initial_alpha_value = u,
            "line_rate" => {
                if n == 0 {
                    return Err(bad("a rate above 0"));
                }
                self.line_rate = n
            }
            _ => unreachable!("every key of KEYS has an arm"),
        }
        Ok(())
    }
}

fn int_expect(max: u64) -> &'static str {
    match max {
        63 => "an integer 0..=63",
        31 => "an integer 0..=31",
        100 => "a percentage 0..=100",
        1023 => "an integer 0..=1023",
        _ => "a non-negative 32-bit integer",
    }
}

impl FromStr for CcConfig {
    type Err = CcConfigError;

    /// `key=value` pairs separated by commas or spaces, over the defaults:
    /// `"rp_enable=0,rpg_ai_rate=10mbit,min_time_between_cnps=0"`.
    fn from_str(s: &str) -> Result<CcConfig, CcConfigError> {
        let mut cfg = CcConfig::default();
        cfg.apply(s)?;
        Ok(cfg)
    }
}

impl fmt::Display for CcConfig {
    /// Every knob, in the syntax `from_str` reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = |v: bool| if v { "1" } else { "0" };
        write!(
            f,
            "np_enable={},rp_enable={},min_time_between_cnps={},cnp_dscp={},clamp_tgt_rate={},\
             clamp_tgt_rate_after_time_inc={},rpg_time_reset={},rpg_byte_reset={},\
             rpg_threshold={},rpg_max_rate={},rpg_ai_rate={},rpg_hai_rate={},rpg_gd={},\
             rpg_min_dec_fac={},rpg_min_rate={},rate_to_set_on_first_cnp={},dce_tcp_g={},\
             dce_tcp_rtt={},rate_reduce_monitor_period={},initial_alpha_value={},line_rate={}",
            b(self.np_enable),
            b(self.rp_enable),
            self.min_time_between_cnps,
            self.cnp_dscp,
            b(self.clamp_tgt_rate),
            b(self.clamp_tgt_rate_after_time_inc),
            self.rpg_time_reset,
            self.rpg_byte_reset,
            self.rpg_threshold,
            show_rate(self.rpg_max_rate),
            show_rate(self.rpg_ai_rate),
            show_rate(self.rpg_hai_rate),
            self.rpg_gd,
            self.rpg_min_dec_fac,
            show_rate(self.rpg_min_rate),
            show_rate(self.rate_to_set_on_first_cnp),
            self.dce_tcp_g,
            self.dce_tcp_rtt,
            self.rate_reduce_monitor_period,
            self.initial_alpha_value,
            show_rate(self.line_rate),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_mlx5s() {
        let c = CcConfig::default();
        assert!(c.np_enable && c.rp_enable);
        assert_eq!((c.min_time_between_cnps, c.cnp_dscp), (4, 48));
        assert_eq!(
            (c.rpg_time_reset, c.rpg_byte_reset, c.rpg_threshold),
            (300, 32767, 1)
        );
        assert_eq!((c.rpg_ai_rate, c.rpg_hai_rate), (5_000_000, 50_000_000));
        assert_eq!(
            (c.rpg_gd, c.rpg_min_dec_fac, c.rpg_min_rate),
            (11, 50, 1_000_000)
        );
        assert_eq!(
            (c.dce_tcp_g, c.dce_tcp_rtt, c.rate_reduce_monitor_period),
            (1019, 1, 4)
        );
        assert_eq!(
            (c.initial_alpha_value, c.line_rate),
            (1023, 100_000_000_000)
        );
        assert_eq!(c.max_rate(), c.line_rate);
        assert_eq!("".parse::<CcConfig>().unwrap(), c);
    }

    #[test]
    fn parses_pairs_with_commas_spaces_units_and_booleans() {
        let c: CcConfig = "rp_enable=0,rpg_ai_rate=10mbit min_time_between_cnps=0, \
                           line_rate=1gbit np_enable=off clamp_tgt_rate=true rpg_min_rate=500kbit \
                           rpg_hai_rate=123"
            .parse()
            .unwrap();
        assert!(!c.rp_enable && !c.np_enable && c.clamp_tgt_rate);
        assert_eq!(c.rpg_ai_rate, 10_000_000);
        assert_eq!(c.min_time_between_cnps, 0);
        assert_eq!(c.line_rate, 1_000_000_000);
        assert_eq!(c.rpg_min_rate, 500_000);
        assert_eq!(c.rpg_hai_rate, 123);
        assert_eq!(
            "rpg_max_rate=2Gbit"
                .parse::<CcConfig>()
                .unwrap()
                .rpg_max_rate,
            2_000_000_000
        );
    }

    #[test]
    fn errors_name_the_key_or_value() {
        let e = "rpg_ai=5".parse::<CcConfig>().unwrap_err();
        assert_eq!(e, CcConfigError::UnknownKey("rpg_ai".into()));
        assert!(e.to_string().contains("rpg_ai_rate"), "{e}");
        let e = "np_enable=maybe".parse::<CcConfig>().unwrap_err();
        assert!(
            matches!(&e, CcConfigError::BadValue { key, .. } if key == "np_enable"),
            "{e}"
        );
        assert!(e.to_string().contains("maybe"));
        assert!("initial_alpha_value=1024".parse::<CcConfig>().is_err());
        assert!("rpg_min_dec_fac=101".parse::<CcConfig>().is_err());
        assert!("rpg_ai_rate=5xbit".parse::<CcConfig>().is_err());
        assert!("line_rate=0".parse::<CcConfig>().is_err());
        assert_eq!(
            "rp_enable".parse::<CcConfig>().unwrap_err(),
            CcConfigError::MissingValue("rp_enable".into())
        );
    }

    #[test]
    fn display_round_trips() {
        let mut c = CcConfig::default();
        assert_eq!(c.to_string().parse::<CcConfig>().unwrap(), c);
        c = "rp_enable=0,rpg_ai_rate=10mbit,min_time_between_cnps=0,line_rate=1234567,\
             rpg_max_rate=40gbit,rate_to_set_on_first_cnp=7kbit,dce_tcp_g=1000"
            .parse()
            .unwrap();
        let s = c.to_string();
        assert!(
            s.contains("rpg_ai_rate=10mbit") && s.contains("line_rate=1234567"),
            "{s}"
        );
        assert_eq!(s.parse::<CcConfig>().unwrap(), c);
    }
}
