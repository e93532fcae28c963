//! Where the daemon's packets go: to the process that leases the block of their BTH
//! DestQP, from the port (one copy into its receive ring) or from another process of the
//! daemon (the hairpin: one copy, ring to ring, waiting while the receiver's ring is full).

use super::{Client, PortCounters};
use crate::daemon::lease::Leases;
use crate::ring::{DaemonEnd, Entry, Meta, PushError};
use std::time::{Duration, Instant};

/// The index of the client that owns the block of a packet's DestQP (`bth`: its first 12
/// or more bytes), counting the packet as received and, if nobody has it, why.
pub(super) fn owner_of(
    clients: &[Client],
    leases: &Leases,
    counters: &mut PortCounters,
    bth: &[u8],
) -> Option<usize> {
    counters.rcvd_pkts += 1;
    if bth.len() < 12 {
        counters.malformed += 1;
        return None;
    }
    let i = owner_index(clients, leases, bth);
    if i.is_none() {
        counters.no_owner += 1;
    }
    i
}

/// The index of the attached client that leases the block of the BTH DestQP in `bth`
/// (bytes 5..8 of the packet, IBA 9.2; at least 8 bytes).
fn owner_index(clients: &[Client], leases: &Leases, bth: &[u8]) -> Option<usize> {
    let qpn = u32::from_be_bytes([0, bth[5], bth[6], bth[7]]);
    leases
        .owner(qpn)
        .and_then(|owner| clients.iter().position(|c| c.id == owner))
        .filter(|&i| clients[i].link.is_some())
}

/// Counts a push of `len` bytes into client `c`'s receive ring.
pub(super) fn pushed(
    c: &mut Client,
    counters: &mut PortCounters,
    len: usize,
    r: Result<(), PushError>,
) {
    match r {
        Ok(()) => {
            c.counters.rcvd_pkts += 1;
            c.counters.rcvd_bytes += len as u64;
            c.dirty = true;
        }
        Err(_) => {
            counters.ring_full += 1;
            c.counters.ring_full += 1;
        }
    }
}

/// Hands one packet from the port to the owner of its DestQP's block.
pub(super) fn deliver(
    clients: &mut [Client],
    leases: &Leases,
    counters: &mut PortCounters,
    meta: &Meta,
    bytes: &[u8],
) {
    let Some(i) = owner_of(clients, leases, counters, bytes) else {
        return;
    };
    let c = &mut clients[i];
    let r = match c.link.as_mut() {
        Some(l) => l.rx.try_push(meta, bytes),
        None => return,
    };
    pushed(c, counters, bytes.len(), r);
}

/// Whether client `k`'s packet `e`, taken at `mark`, to another process of the daemon
/// waits (put back: it and what follows it stay in `k`'s ring, in order, and `k`'s engine
/// stops sending once the ring is full): its receiver's ring has no room, and `k` has
/// waited less than `limit` (`Config::hairpin_hold`). A lossless link between two
/// programs on one machine, as PFC makes one between two NICs: UC and UD never send again.
pub(super) fn hold_for_room(
    clients: &mut [Client],
    leases: &Leases,
    limit: Duration,
    k: usize,
    mark: u64,
    e: &Entry,
) -> bool {
    if hairpin_room(clients, leases, k, e) {
        clients[k].held_since = None;
        return false;
    }
    let c = &mut clients[k];
    let since = *c.held_since.get_or_insert_with(Instant::now);
    if since.elapsed() >= limit {
        return false;
    }
    if let Some(l) = c.link.as_mut() {
        l.tx.untake(mark);
    }
    true
}

/// Whether the owner of packet `e`'s DestQP block (`e` taken from client `k`'s send
/// ring) has room for it in its receive ring now. True when it has no owner (the hairpin
/// counts that drop) or the BTH cannot be read: only a full ring is worth waiting for.
fn hairpin_room(clients: &mut [Client], leases: &Leases, k: usize, e: &Entry) -> bool {
    let mut bth = [0u8; 8];
    let read = clients[k]
        .link
        .as_ref()
        .is_some_and(|l| l.tx.read(e, 0, &mut bth));
    if !read {
        return true;
    }
    match owner_index(clients, leases, &bth) {
        Some(i) => clients[i]
            .link
            .as_mut()
            .is_none_or(|l| l.rx.room(e.len()) > 0),
        None => true,
    }
}

/// Hands packet `e`, taken from client `k`'s send ring, to the owner of its DestQP's
/// block: copied from ring to ring. The routing reads the BTH once, into a local; the
/// sender may rewrite the bytes before the copy, but then the receiver gets what the
/// sender could have sent it anyway (its engine drops a packet for a QP it does not
/// have), never anything of another process.
pub(super) fn hairpin(
    clients: &mut [Client],
    leases: &Leases,
    counters: &mut PortCounters,
    k: usize,
    meta: &Meta,
    e: &Entry,
) {
    let mut bth = [0u8; 12];
    let read = e.len() >= bth.len()
        && clients[k]
            .link
            .as_ref()
            .is_some_and(|l| l.tx.read(e, 0, &mut bth));
    let bth = if read { &bth[..] } else { &[][..] };
    let Some(i) = owner_of(clients, leases, counters, bth) else {
        return;
    };
    let r = if i == k {
        match clients[k].link.as_mut() {
            Some(DaemonEnd { rx, tx }) => rx.try_push_from(meta, tx, e),
            None => return,
        }
    } else {
        let (src, dst) = if k < i {
            let (a, b) = clients.split_at_mut(i);
            (&a[k], &mut b[0])
        } else {
            let (a, b) = clients.split_at_mut(k);
            (&b[0], &mut a[i])
        };
        match (src.link.as_ref(), dst.link.as_mut()) {
            (Some(s), Some(d)) => d.rx.try_push_from(meta, &s.tx, e),
            _ => return,
        }
    };
    pushed(&mut clients[i], counters, e.len(), r);
}

pub(super) fn flush_all(clients: &mut [Client]) {
    for c in clients.iter_mut().filter(|c| c.dirty) {
        c.dirty = false;
        if let Some(l) = c.link.as_mut() {
            let _ = l.rx.flush();
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use std::time::Duration;

    /// A datagram for QP1 (the GSI QP: connection management) finds no program: block 0
    /// is never leased. It is counted (`no_owner`), never handed to anyone. (The server
    /// takes QP1's packets from the port before routing: `server::cm`, `daemon::qp1`.)
    #[test]
    fn dest_qp_1_is_a_counted_drop() {
        let leases = Leases::new(Duration::ZERO);
        let mut k = PortCounters::default();
        // BTH of a UD SEND only (0x64) to DestQP 1.
        let mut bth = [0u8; 12];
        bth[0] = 0x64;
        bth[7] = 1;
        assert_eq!(owner_of(&[], &leases, &mut k, &bth), None);
        assert_eq!((k.rcvd_pkts, k.no_owner), (1, 1));
    }
}
