//! The invariant CRC (IBA Annex A17.4.1, "ICRC for RoCEv2"; rxe's `rxe_icrc.c`).
//!
//! CRC-32 (the Ethernet/zlib polynomial, as `crc32fast` computes it) over:
//! 8 bytes of 0xff standing for the masked LRH of native InfiniBand, the IP header with
//! its variant fields set to all ones (IPv4: TOS, TTL, header checksum; IPv6: traffic
//! class, flow label, hop limit), the UDP header with its checksum set to all ones, the
//! BTH with byte 4 (FECN, BECN, reserved) set to all ones, and everything after the BTH up
//! to and including the pad bytes. The result is appended least significant byte first.
//!
//! Cost: one CRC pass over the packet. `verify_in_place`/`fill_in_place`, for a frame whose
//! IP header, UDP header and RoCE packet are contiguous, read every byte where it is and
//! fold the masking into the CRC's starting value (`mask_delta`); `compute`, for headers
//! that are elsewhere (a UDP socket's packets), copies the headers (at most 60 + 8 + 12
//! bytes, on the stack) and reads the rest in place.

use super::{bth, Header, Result, WireError};

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// Stands for the LRH of native IB, masked (A17.4.1): 8 bytes of ones.
const MASKED_LRH: [u8; 8] = [0xff; 8];
const IPV4_MIN_LEN: usize = 20;
const IPV4_MAX_LEN: usize = 60;
const IPV6_LEN: usize = 40;
const UDP_LEN: usize = 8;

/// Masks the variant fields of an IP header copy in place; the version nibble says which.
fn mask_ip(h: &mut [u8]) {
    if h[0] >> 4 == 4 {
        h[1] = 0xff; // TOS (DSCP + ECN)
        h[8] = 0xff; // TTL
        h[10] = 0xff; // header checksum
        h[11] = 0xff;
    } else {
        h[0] |= 0x0f; // traffic class, high nibble
        h[1] = 0xff; // traffic class, low nibble, and flow label
        h[2] = 0xff;
        h[3] = 0xff;
        h[7] = 0xff; // hop limit
    }
}

/// Checks that `ip` is a whole IPv4 or IPv6 header.
fn check_ip(ip: &[u8]) -> Result<()> {
    let bad = |header, reason| Err(WireError::Malformed { header, reason });
    match ip.first().map(|b| b >> 4) {
        Some(4) => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            if ihl < IPV4_MIN_LEN || ip.len() != ihl {
                return bad(Header::Ipv4, "header length does not match IHL");
            }
        }
        Some(6) => {
            if ip.len() != IPV6_LEN {
                return bad(Header::Ipv6, "header is not 40 bytes");
            }
        }
        _ => return Err(WireError::NotRoce("IP version is neither 4 nor 6")),
    }
    Ok(())
}

/// The ICRC of a packet whose IP header is `ip` (IPv4 with options, or IPv6 without
/// extension headers), UDP header `udp`, and `covered` = BTH through the last pad byte.
pub fn compute(ip: &[u8], udp: &[u8], covered: &[u8]) -> Result<u32> {
    check_ip(ip)?;
    if udp.len() != UDP_LEN {
        return Err(WireError::Malformed {
            header: Header::Udp,
            reason: "header is not 8 bytes",
        });
    }
    if covered.len() < bth::HEADER_LEN {
        return Err(super::error::truncated(
            Header::Bth,
            bth::HEADER_LEN,
            covered.len(),
        ));
    }
    // The masked LRH, IP, UDP and BTH in one contiguous stack buffer: one CRC update for
    // all headers, one for the rest of the packet read in place. Fixed-size copies for the
    // common IP header sizes let the compiler inline them.
    let mut hdr = [0xffu8; MASKED_LRH.len() + IPV4_MAX_LEN + UDP_LEN + bth::HEADER_LEN];
    let lrh = MASKED_LRH.len();
    let ip_end = lrh + ip.len();
    match ip.len() {
        IPV4_MIN_LEN => hdr[lrh..lrh + IPV4_MIN_LEN].copy_from_slice(&ip[..IPV4_MIN_LEN]),
        IPV6_LEN => hdr[lrh..lrh + IPV6_LEN].copy_from_slice(&ip[..IPV6_LEN]),
        _ => hdr[lrh..ip_end].copy_from_slice(ip),
    }
    mask_ip(&mut hdr[lrh..ip_end]);
    let udp_end = ip_end + UDP_LEN;
    let bth_end = udp_end + bth::HEADER_LEN;
    // UDP without its checksum (bytes 6-7 stay all ones).
    hdr[ip_end..ip_end + 6].copy_from_slice(&udp[..6]);
    hdr[udp_end..bth_end].copy_from_slice(&covered[..bth::HEADER_LEN]);
    hdr[udp_end + bth::field::FECN_BECN] = 0xff;

    let mut h = fresh_hasher();
    h.update(&hdr[..bth_end]);
    h.update(&covered[bth::HEADER_LEN..]);
    Ok(h.finalize())
}

/// A new crc32fast hasher, cloned from one made once: `Hasher::new` detects the CPU's
/// features every time (36 instructions, against ~130 for the CRC of a small packet).
fn fresh_hasher() -> crc32fast::Hasher {
    static FRESH: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
    FRESH.get_or_init(crc32fast::Hasher::new).clone()
}

/// Verifies the ICRC at the end of `roce` (BTH through ICRC).
pub fn verify(ip: &[u8], udp: &[u8], roce: &[u8]) -> Result<()> {
    if roce.len() < bth::HEADER_LEN + ICRC_LEN {
        return Err(super::error::truncated(
            Header::Icrc,
            bth::HEADER_LEN + ICRC_LEN,
            roce.len(),
        ));
    }
    let (covered, tail) = roce.split_at(roce.len() - ICRC_LEN);
    check(tail, compute(ip, udp, covered)?)
}

/// Compares the ICRC trailer `tail` (four bytes, least significant first) with `computed`.
fn check(tail: &[u8], computed: u32) -> Result<()> {
    let found = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    if found == computed {
        Ok(())
    } else {
        Err(WireError::BadIcrc { found, computed })
    }
}

/// Computes and stores the ICRC in the last four bytes of `roce`.
pub fn fill(ip: &[u8], udp: &[u8], roce: &mut [u8]) -> Result<u32> {
    if roce.len() < bth::HEADER_LEN + ICRC_LEN {
        return Err(super::error::truncated(
            Header::Icrc,
            bth::HEADER_LEN + ICRC_LEN,
            roce.len(),
        ));
    }
    let n = roce.len() - ICRC_LEN;
    let crc = compute(ip, udp, &roce[..n])?;
    roce[n..].copy_from_slice(&crc.to_le_bytes());
    Ok(crc)
}

// ---- One pass over a frame in place ------------------------------------------------
//
// The CRC is affine: XORing `d` into input byte `j` (counted from the IP header) changes
// the result exactly as XORing `d` into the CRC register `j` bytes earlier, which is XORing
// `unstep^(8j)(d)` into the register at the start of the IP header (`unstep` runs one bit
// of the register backwards). So the masked fields need no copy: the CRC runs over the
// bytes as they are, from the register the masked LRH leaves, changed by one table entry
// per masked byte (`MASKS_V4`, `MASKS_V6`).

/// The reflected CRC-32 polynomial (crc32fast's and zlib's).
const POLY: u32 = 0xedb8_8320;

/// One bit of input (a zero) through the CRC register.
const fn step(r: u32) -> u32 {
    if r & 1 != 0 {
        (r >> 1) ^ POLY
    } else {
        r >> 1
    }
}

/// `step` backwards: POLY has bit 31 set and `r >> 1` never does, so bit 31 tells
/// whether POLY went in.
const fn unstep(r: u32) -> u32 {
    if r & 0x8000_0000 != 0 {
        ((r ^ POLY) << 1) | 1
    } else {
        r << 1
    }
}

/// crc32fast's state (the complemented register) after the masked LRH.
const LRH_STATE: u32 = {
    let mut r = !0u32;
    let mut i = 0;
    while i < MASKED_LRH.len() {
        r ^= MASKED_LRH[i] as u32;
        let mut k = 0;
        while k < 8 {
            r = step(r);
            k += 1;
        }
        i += 1;
    }
    !r
};

/// `table[d]`: the register change at the IP header equivalent to XORing `d` into the
/// byte `j` bytes after it.
const fn shift_table(j: usize) -> [u32; 256] {
    let mut basis = [0u32; 8];
    let mut b = 0;
    while b < 8 {
        let mut r = 1u32 << b;
        let mut k = 0;
        while k < 8 * j {
            r = unstep(r);
            k += 1;
        }
        basis[b] = r;
        b += 1;
    }
    let mut t = [0u32; 256];
    let mut d = 0;
    while d < 256 {
        let mut b = 0;
        while b < 8 {
            if (d >> b) & 1 != 0 {
                t[d] ^= basis[b];
            }
            b += 1;
        }
        d += 1;
    }
    t
}

/// A masked byte: its offset from the IP header, the bits the mask sets, and its table.
type MaskedByte = (usize, u8, [u32; 256]);

const fn masked(j: usize, bits: u8) -> MaskedByte {
    (j, bits, shift_table(j))
}

/// IPv4 without options: TOS, TTL, header checksum; UDP checksum; BTH byte 4.
static MASKS_V4: [MaskedByte; 7] = [
    masked(1, 0xff),
    masked(8, 0xff),
    masked(10, 0xff),
    masked(11, 0xff),
    masked(26, 0xff),
    masked(27, 0xff),
    masked(28 + bth::field::FECN_BECN, 0xff),
];

/// IPv6: traffic class and flow label (the low nibble of byte 0, bytes 1-3), hop limit;
/// UDP checksum; BTH byte 4.
static MASKS_V6: [MaskedByte; 8] = [
    masked(0, 0x0f),
    masked(1, 0xff),
    masked(2, 0xff),
    masked(3, 0xff),
    masked(7, 0xff),
    masked(46, 0xff),
    masked(47, 0xff),
    masked(48 + bth::field::FECN_BECN, 0xff),
];

/// The register change that stands for masking `l3`'s variant fields. Generic over the
/// table so that, inlined for one family, the offsets and masks are constants and one
/// bounds check covers every byte read.
#[inline(always)]
fn mask_delta<const N: usize>(masks: &'static [MaskedByte; N], l3: &[u8]) -> u32 {
    // In bounds: `in_place_masks` checked that a BTH follows the UDP header, and the last
    // masked byte is the BTH's fifth.
    let head = &l3[..=masks[N - 1].0];
    masks
        .iter()
        .fold(0, |acc, (j, m, t)| acc ^ t[usize::from(m & !head[*j])])
}

/// Which masks a one-pass ICRC applies.
#[derive(Debug, Clone, Copy)]
enum Masks {
    V4,
    V6,
}

/// The masks for `l3` if the one-pass path applies: IPv4 without options or IPv6, with
/// at least a BTH after the UDP header.
fn in_place_masks(l3: &[u8], ip_len: usize) -> Option<Masks> {
    if l3.len() < ip_len + UDP_LEN + bth::HEADER_LEN {
        return None;
    }
    match (l3[0] >> 4, ip_len) {
        (4, IPV4_MIN_LEN) if usize::from(l3[0] & 0x0f) * 4 == IPV4_MIN_LEN => Some(Masks::V4),
        (6, IPV6_LEN) => Some(Masks::V6),
        _ => None,
    }
}

/// The one-pass CRC of `covered` (IP header through the last pad byte, contiguous).
fn crc_in_place(masks: Masks, covered: &[u8]) -> u32 {
    let delta = match masks {
        Masks::V4 => mask_delta(&MASKS_V4, covered),
        Masks::V6 => mask_delta(&MASKS_V6, covered),
    };
    let mut h = crc32fast::Hasher::new_with_initial(LRH_STATE ^ delta);
    h.update(covered);
    h.finalize()
}

/// For `l3` with its ICRC: how many bytes the ICRC covers and the masks, when the one-pass
/// path applies; otherwise the copying functions on the split parts decide (and report).
fn in_place(l3: &[u8], ip_len: usize) -> Option<(usize, Masks)> {
    let n = l3.len().checked_sub(ICRC_LEN)?;
    Some((n, in_place_masks(&l3[..n], ip_len)?))
}

/// The ICRC of `covered` = IP header (`ip_len` bytes), UDP header, and BTH through the
/// last pad byte, contiguous. Same result and errors as `compute` on the three parts.
pub fn compute_in_place(covered: &[u8], ip_len: usize) -> Result<u32> {
    match in_place_masks(covered, ip_len) {
        Some(masks) => Ok(crc_in_place(masks, covered)),
        None => {
            let (ip, udp, rest) = split_l3(covered, ip_len);
            compute(ip, udp, rest)
        }
    }
}

/// `l3` cut into IP header, UDP header and the rest, each as long as `l3` allows.
fn split_l3(l3: &[u8], ip_len: usize) -> (&[u8], &[u8], &[u8]) {
    let (ip, rest) = l3.split_at(ip_len.min(l3.len()));
    let (udp, rest) = rest.split_at(UDP_LEN.min(rest.len()));
    (ip, udp, rest)
}

/// `verify` for a frame whose IP header (`ip_len` bytes), UDP header and RoCE packet
/// (through the ICRC) are contiguous in `l3`: one CRC pass, nothing copied.
pub fn verify_in_place(l3: &[u8], ip_len: usize) -> Result<()> {
    let Some((n, masks)) = in_place(l3, ip_len) else {
        let (ip, udp, roce) = split_l3(l3, ip_len);
        return verify(ip, udp, roce);
    };
    check(&l3[n..], crc_in_place(masks, &l3[..n]))
}

/// `fill` for contiguous headers and packet (see `verify_in_place`).
pub fn fill_in_place(l3: &mut [u8], ip_len: usize) -> Result<u32> {
    let Some((n, masks)) = in_place(l3, ip_len) else {
        let (ip, rest) = l3.split_at_mut(ip_len.min(l3.len()));
        let (udp, roce) = rest.split_at_mut(UDP_LEN.min(rest.len()));
        return fill(ip, udp, roce);
    };
    let crc = crc_in_place(masks, &l3[..n]);
    l3[n..].copy_from_slice(&crc.to_le_bytes());
    Ok(crc)
}

/// The IP and UDP headers under the ICRC, rebuilt from what a UDP socket knows: addresses,
/// ports, length and (IPv4) the identification the sender used. The masked fields are
/// irrelevant; IPv4 is taken to carry DF and no options, as rxe and roce-emu send it.
#[derive(Debug, Clone, Copy)]
pub struct PseudoHeaders {
    buf: [u8; IPV6_LEN + UDP_LEN],
    ip_len: usize,
}

/// IPv4 flags/fragment field with DF set.
const IPV4_DF: [u8; 2] = [0x40, 0x00];
const IPPROTO_UDP: u8 = 17;

impl PseudoHeaders {
    /// Headers for a RoCE packet of `roce_len` bytes (BTH through ICRC) from `src` to `dst`.
    /// Mixed address families are a caller bug: the IPv6 form is used when either side is
    /// IPv6 and the other is mapped.
    pub fn new(
        src: std::net::SocketAddr,
        dst: std::net::SocketAddr,
        ipv4_id: u16,
        roce_len: usize,
    ) -> PseudoHeaders {
        use std::net::IpAddr;
        let mut buf = [0u8; IPV6_LEN + UDP_LEN];
        let udp_len = (UDP_LEN + roce_len) as u16;
        let ip_len = match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let h = &mut buf[..IPV4_MIN_LEN];
                h[0] = 0x45;
                h[2..4].copy_from_slice(&(IPV4_MIN_LEN as u16 + udp_len).to_be_bytes());
                h[4..6].copy_from_slice(&ipv4_id.to_be_bytes());
                h[6..8].copy_from_slice(&IPV4_DF);
                h[9] = IPPROTO_UDP;
                h[12..16].copy_from_slice(&s.octets());
                h[16..20].copy_from_slice(&d.octets());
                IPV4_MIN_LEN
            }
            (s, d) => {
                let v6 = |a: IpAddr| match a {
                    IpAddr::V4(a) => a.to_ipv6_mapped(),
                    IpAddr::V6(a) => a,
                };
                let h = &mut buf[..IPV6_LEN];
                h[0] = 0x60;
                h[4..6].copy_from_slice(&udp_len.to_be_bytes());
                h[6] = IPPROTO_UDP;
                h[8..24].copy_from_slice(&v6(s).octets());
                h[24..40].copy_from_slice(&v6(d).octets());
                IPV6_LEN
            }
        };
        let u = &mut buf[ip_len..ip_len + UDP_LEN];
        u[0..2].copy_from_slice(&src.port().to_be_bytes());
        u[2..4].copy_from_slice(&dst.port().to_be_bytes());
        u[4..6].copy_from_slice(&udp_len.to_be_bytes());
        PseudoHeaders { buf, ip_len }
    }

    pub fn ip(&self) -> &[u8] {
        &self.buf[..self.ip_len]
    }

    pub fn udp(&self) -> &[u8] {
        &self.buf[self.ip_len..self.ip_len + UDP_LEN]
    }
}

/// Recovers the IPv4 identification an ICRC was computed with, for receivers that never
/// see it (a UDP socket): the rest of the covered bytes are known, and rxe numbers its
/// packets with a per-socket counter, not the ID 0 that roce-emu sends.
///
/// The CRC is affine in its input: for a fixed length, flipping ID bit `i` flips the ICRC
/// by a constant `delta_i`, whatever the other bytes. So with `c0` the ICRC computed with
/// ID 0 and `found` the received one, the packet is intact for the ID `x` whose bits
/// select the deltas that XOR to `c0 ^ found`. CRC-32 detects every error burst of at most
/// 32 bits, so the 16 deltas are independent and at most one `x` fits; a packet with any
/// other damage fits none with probability 1 - 2^-16 (the 16 bits the check spends on the
/// unknown ID). The deltas depend only on the length: they are kept per length, reduced
/// to echelon form, computed once (17 CRCs over zeros) the first time a length is seen.
#[derive(Debug, Default)]
pub struct Ipv4IdSolver {
    by_len: rustc_hash::FxHashMap<usize, IdBasis>,
}

/// Independent delta combinations, each with the ID bits that make it. Row `k` has a
/// leading bit (its pivot) that no later row has, so one pass in order reduces any value.
#[derive(Debug, Clone, Copy)]
struct IdBasis {
    rows: [(u32, u16); 16],
    n: usize,
}

/// Offset of the IPv4 identification in the ICRC's input (after the masked LRH).
const ID_OFFSET: usize = MASKED_LRH.len() + 4;

fn pivot(v: u32) -> u32 {
    1 << (31 - v.leading_zeros())
}

/// How setting each bit of the IPv4 identification changes the ICRC of an input of
/// `total` bytes (LRH through pad): the CRC is affine, so the change is the same whatever
/// the other bytes are, and changes of several bits XOR together.
fn id_deltas(total: usize) -> [u32; 16] {
    const ZEROS: [u8; 1024] = [0; 1024];
    let crc = |id: u16| {
        let mut h = crc32fast::Hasher::new();
        h.update(&ZEROS[..ID_OFFSET]);
        h.update(&id.to_be_bytes());
        let mut left = total.saturating_sub(ID_OFFSET + 2);
        while left > 0 {
            let n = left.min(ZEROS.len());
            h.update(&ZEROS[..n]);
            left -= n;
        }
        h.finalize()
    };
    let base = crc(0);
    core::array::from_fn(|bit| crc(1 << bit) ^ base)
}

/// Bytes of ICRC input (LRH through pad) of an IPv4 packet without options whose RoCE
/// part (BTH through ICRC) is `roce_len` bytes.
fn ipv4_icrc_input_len(roce_len: usize) -> usize {
    MASKED_LRH.len() + IPV4_MIN_LEN + UDP_LEN + roce_len - ICRC_LEN
}

/// Moves ICRCs from one IPv4 identification to another without a CRC pass over the
/// packet. For UDP GSO (`backend::udp`): the kernel cuts one send into segments whose
/// IDs count up from the send's own (0, from an unconnected socket with DF), and the ICRC
/// covers each segment's ID (A17.4.1), so segment `k` must carry the ICRC of ID `k`.
/// The deltas depend only on the length; the few lengths a stream uses (full segments,
/// a shorter last one, ACKs) are kept.
#[derive(Debug, Default)]
pub struct Ipv4IdRebase {
    /// (ICRC input length, deltas); length 0 is an empty entry.
    cache: [(usize, [u32; 16]); 4],
    next: usize,
}

impl Ipv4IdRebase {
    pub fn new() -> Ipv4IdRebase {
        Ipv4IdRebase::default()
    }

    /// Rewrites the ICRC at the end of `roce` (BTH through ICRC, sent over IPv4 without
    /// options), computed with identification `from`, to the one for identification `to`.
    pub fn rebase(&mut self, roce: &mut [u8], from: u16, to: u16) {
        let Some(at) = roce.len().checked_sub(ICRC_LEN) else {
            return;
        };
        if at < bth::HEADER_LEN || from == to {
            return;
        }
        let total = ipv4_icrc_input_len(roce.len());
        let i = match self.cache.iter().position(|e| e.0 == total) {
            Some(i) => i,
            None => {
                let i = self.next;
                self.next = (self.next + 1) % self.cache.len();
                self.cache[i] = (total, id_deltas(total));
                i
            }
        };
        let deltas = &self.cache[i].1;
        let flip = from ^ to;
        let delta = (0..16)
            .filter(|b| flip & (1 << b) != 0)
            .fold(0, |d, b| d ^ deltas[b]);
        let icrc = u32::from_le_bytes([roce[at], roce[at + 1], roce[at + 2], roce[at + 3]]);
        roce[at..].copy_from_slice(&(icrc ^ delta).to_le_bytes());
    }
}

impl IdBasis {
    /// The basis for ICRC inputs of `total` bytes (LRH through pad).
    fn new(total: usize) -> IdBasis {
        let mut b = IdBasis {
            rows: [(0, 0); 16],
            n: 0,
        };
        for (bit, &delta) in id_deltas(total).iter().enumerate() {
            let (v, m) = b.reduce(delta);
            if v != 0 {
                b.rows[b.n] = (v, m ^ (1 << bit));
                b.n += 1;
            }
        }
        b
    }

    /// `v` with every row's pivot cleared, and the ID bits of the rows used.
    fn reduce(&self, mut v: u32) -> (u32, u16) {
        let mut m = 0;
        for &(rv, rm) in &self.rows[..self.n] {
            if v & pivot(rv) != 0 {
                v ^= rv;
                m ^= rm;
            }
        }
        (v, m)
    }

    fn solve(&self, diff: u32) -> Option<u16> {
        let (rest, id) = self.reduce(diff);
        (rest == 0).then_some(id)
    }
}

impl Ipv4IdSolver {
    pub fn new() -> Ipv4IdSolver {
        Ipv4IdSolver::default()
    }

    /// The IPv4 identification under which `roce` (BTH through ICRC) carries a valid ICRC,
    /// given pseudo headers built with ID 0 (IPv4, no options); `BadIcrc` if there is none.
    pub fn solve(&mut self, ip_id0: &[u8], udp: &[u8], roce: &[u8]) -> Result<u16> {
        if ip_id0.len() != IPV4_MIN_LEN || ip_id0[0] != 0x45 || ip_id0[4..6] != [0, 0] {
            return Err(WireError::Malformed {
                header: Header::Ipv4,
                reason: "ID solving needs a 20-byte IPv4 header with ID 0",
            });
        }
        match verify(ip_id0, udp, roce) {
            Ok(()) => Ok(0),
            Err(WireError::BadIcrc { found, computed }) => {
                let total = ipv4_icrc_input_len(roce.len());
                let basis = self
                    .by_len
                    .entry(total)
                    .or_insert_with(|| IdBasis::new(total));
                basis
                    .solve(found ^ computed)
                    .ok_or(WireError::BadIcrc { found, computed })
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    /// The one-pass path equals the copying one on random IPv4 and IPv6 packets (every
    /// masked field random too), of every length up to a few hundred bytes; and it falls
    /// back, with the same result or error, for IPv4 options and short inputs.
    #[test]
    fn in_place_equals_copying() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        };
        let mut fast = 0;
        for ip_len in [20usize, 24, 40] {
            for len in 0..400 {
                let mut l3: Vec<u8> = (0..len).map(|_| rnd()).collect();
                if let Some(b) = l3.first_mut() {
                    *b = match ip_len {
                        40 => 0x60 | (*b & 0x0f),
                        n => 0x40 | (n / 4) as u8,
                    };
                }
                let (ip, udp, rest) = split_l3(&l3, ip_len);
                assert_eq!(compute_in_place(&l3, ip_len), compute(ip, udp, rest));
                let (ip, udp, roce) = split_l3(&l3, ip_len);
                let want = verify(ip, udp, roce);
                assert_eq!(verify_in_place(&l3, ip_len), want);
                let mut a = l3.clone();
                let mut b = l3.clone();
                let (ip, rest) = b.split_at_mut(ip_len.min(len));
                let (udp, roce) = rest.split_at_mut(UDP_LEN.min(rest.len()));
                assert_eq!(fill_in_place(&mut a, ip_len), fill(ip, udp, roce));
                assert_eq!(a, b);
                if in_place_masks(&l3, ip_len).is_some() {
                    fast += 1;
                    // A filled packet verifies; flipping a byte outside the masked fields
                    // breaks it, flipping a masked one does not.
                    if len >= ip_len + UDP_LEN + bth::HEADER_LEN + ICRC_LEN {
                        verify_in_place(&a, ip_len).unwrap();
                        let masks = if ip_len == 40 {
                            &MASKS_V6[..]
                        } else {
                            &MASKS_V4[..]
                        };
                        let k = usize::from(rnd()) % (len - ICRC_LEN);
                        let mut c = a.clone();
                        match masks.iter().find(|m| m.0 == k) {
                            Some((_, m, _)) => {
                                c[k] ^= m;
                                verify_in_place(&c, ip_len).unwrap();
                            }
                            None => {
                                c[k] ^= 0x10;
                                assert!(verify_in_place(&c, ip_len).is_err(), "byte {k}");
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(
            fast,
            (400 - 40) + (400 - 60),
            "IPv4 from 40 bytes, IPv6 from 60"
        );
    }

    /// The first RoCE frame rxe sent in rc_pingpong_s64.pcap: pseudo headers built from
    /// its addresses, ports, length and IP ID rebuild exactly the bytes under its ICRC.
    #[test]
    fn pseudo_headers_match_a_real_frame() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/rc_pingpong_s64.pcap"
        );
        let bytes = std::fs::read(path).unwrap();
        // Find the first RoCE frame by hand: classic pcap, 24-byte file header, 16-byte
        // record headers, Ethernet.
        let mut off = 24;
        loop {
            let caplen = u32::from_le_bytes(bytes[off + 8..off + 12].try_into().unwrap()) as usize;
            let f = &bytes[off + 16..off + 16 + caplen];
            off += 16 + caplen;
            let frame = match crate::wire::RoceFrame::parse_ethernet(f) {
                Ok(fr) => fr,
                Err(_) => continue,
            };
            let crate::wire::frame::IpSlice::V4(ip) = &frame.ip else {
                panic!("IPv4 capture")
            };
            let src = std::net::SocketAddr::new(frame.ip.src(), frame.udp.source_port());
            let dst = std::net::SocketAddr::new(frame.ip.dst(), frame.udp.destination_port());
            let ph = PseudoHeaders::new(src, dst, ip.identification(), frame.roce.len());
            verify(ph.ip(), ph.udp(), frame.roce).unwrap();
            // A different ID breaks it: the ID is covered.
            let ph = PseudoHeaders::new(src, dst, ip.identification() ^ 1, frame.roce.len());
            assert!(verify(ph.ip(), ph.udp(), frame.roce).is_err());
            break;
        }
    }

    /// Every RoCE frame of a real rxe capture (IP IDs from a counter) and of roce-emu's
    /// own (ID 0): the solver finds the ID the frame carries from the ICRC alone, and
    /// refuses every single-bit error elsewhere in the covered bytes.
    #[test]
    fn ipv4_id_is_recovered_from_the_icrc() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/rc_pingpong_s5000_m1024.pcap"
        );
        let data = std::fs::read(path).expect("capture");
        let mut solver = Ipv4IdSolver::new();
        let mut frames = 0;
        // Classic pcap: 24-byte file header, 16-byte record headers.
        let mut at = 24;
        while at + 16 <= data.len() {
            let len = u32::from_le_bytes(data[at + 8..at + 12].try_into().unwrap()) as usize;
            let f = &data[at + 16..at + 16 + len];
            at += 16 + len;
            // Ethernet + IPv4 (IHL 5) + UDP to 4791.
            if f.len() < 14 + 20 + 8 || f[12..14] != [8, 0] || f[14] != 0x45 || f[23] != 17 {
                continue;
            }
            let (ip, udp, roce) = (&f[14..34], &f[34..42], &f[42..]);
            if udp[2..4] != [0x12, 0xb7] {
                continue;
            }
            let id = u16::from_be_bytes([ip[4], ip[5]]);
            let mut ip0 = [0u8; 20];
            ip0.copy_from_slice(ip);
            ip0[4] = 0;
            ip0[5] = 0;
            assert_eq!(solver.solve(&ip0, udp, roce).expect("solves"), id);
            frames += 1;
            for k in [0, 5, roce.len() / 2, roce.len() - 5] {
                let mut bad = roce.to_vec();
                bad[k] ^= 0x10;
                assert!(solver.solve(&ip0, udp, &bad).is_err(), "byte {k} flipped");
            }
        }
        assert!(frames >= 20, "{frames} frames");
        // An ID-0 packet as roce-emu sends it.
        let ph = PseudoHeaders::new(
            "10.0.0.1:49152".parse().unwrap(),
            "10.0.0.2:4791".parse().unwrap(),
            0,
            12 + 8 + 4,
        );
        let mut pkt = [0u8; 24];
        pkt[0] = 4;
        fill(ph.ip(), ph.udp(), &mut pkt).unwrap();
        assert_eq!(solver.solve(ph.ip(), ph.udp(), &pkt).unwrap(), 0);
    }

    /// Rebasing an ICRC from ID 0 to ID k gives exactly the ICRC computed with ID k, for
    /// lengths from an ACK to a 4096-byte segment, and rebasing back restores it.
    #[test]
    fn ipv4_id_rebase_equals_recomputing() {
        let src = "10.0.0.1:49152".parse().unwrap();
        let dst = "10.0.0.2:4791".parse().unwrap();
        let mut r = Ipv4IdRebase::new();
        for len in [20, 24, 80, 1052, 4124, 4125, 4127, 333] {
            let mut pkt: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let ph0 = PseudoHeaders::new(src, dst, 0, len);
            fill(ph0.ip(), ph0.udp(), &mut pkt).unwrap();
            let sent = pkt.clone();
            for id in [1u16, 2, 3, 17, 63, 0x8001, 0xffff] {
                let mut p = sent.clone();
                r.rebase(&mut p, 0, id);
                let phk = PseudoHeaders::new(src, dst, id, len);
                verify(phk.ip(), phk.udp(), &p).unwrap();
                assert!(
                    verify(ph0.ip(), ph0.udp(), &p).is_err(),
                    "len {len} id {id}"
                );
                r.rebase(&mut p, id, 0);
                assert_eq!(p, sent);
            }
        }
    }
}
