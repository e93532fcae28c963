//! Ending and moving ids: `rdma_destroy_id` and `rdma_migrate_id`'s work, which both wait
//! until every event handed out for the id is acked (`events_completed`), as librdmacm.

use crate::channel::Channel;
use crate::evt::ack;
use crate::ffi::*;
use crate::id::{self, CmId};
use libc::c_int;

/// `rdma_destroy_id`: the manager forgets the id (and drops its queued events), then the
/// call waits until every event handed out for it was acked.
pub fn destroy(p: *mut CmId) -> c_int {
    // SAFETY: p is a live id of ours (the callers').
    let id = unsafe { &*p };
    let hs = std::mem::take(&mut id.lock().handles);
    for h in &hs {
        id::detach(h, &id.channel().ch);
    }
    let c = id.c();
    // SAFETY: the id's own C struct.
    let ev = unsafe { (*c).event };
    if !ev.is_null() {
        ack(ev);
        // SAFETY: as above.
        unsafe { (*c).event = std::ptr::null_mut() };
    }
    id.wait_acked();
    // SAFETY: the id is out of the table and every event acked: nothing refers to it.
    unsafe { id::free(p) };
    0
}

/// `rdma_migrate_id`: the id's queued and future events go to `channel` (a new private
/// one when NULL, making the id synchronous); waits until its handed-out events are
/// acked.
pub fn migrate(id: &CmId, channel: *mut rdma_event_channel) -> Result<(), i32> {
    let was_sync = id.lock().sync;
    if was_sync && channel.is_null() {
        return Err(libc::EINVAL);
    }
    let sync = channel.is_null();
    let channel = if sync { Channel::create()? } else { channel };
    // SAFETY: a channel of ours (made above, or the program's from this library).
    let to = unsafe { Channel::from_c(channel) };
    for h in id.handles() {
        h.conn.migrate(h.num, &to.ch);
    }
    let c = id.c();
    if was_sync {
        // SAFETY: the id's own C struct.
        let ev = unsafe { (*c).event };
        if !ev.is_null() {
            ack(ev);
            // SAFETY: as above.
            unsafe { (*c).event = std::ptr::null_mut() };
        }
        // SAFETY: the id's private channel, now empty of its events.
        unsafe { Channel::destroy((*c).channel) };
    }
    id.lock().sync = sync;
    // SAFETY: the id's own C struct.
    unsafe { (*c).channel = channel };
    id.wait_acked();
    Ok(())
}
