//! The events a program holds (`struct rdma_cm_event` at the front of ours) and their ack,
//! which counts the event on the id it belongs to (`ucma_complete_event`): destroy and
//! migrate wait for that count.

use crate::ffi::rdma_cm_event;
use crate::id::CmId;
use roce_emu::cm::ucma;

/// The C event at the front of ours, with the private data it points into.
#[repr(C)]
pub struct Evt {
    pub c: rdma_cm_event,
    /// The id whose event count the ack completes (the listener for a request).
    pub owner: *const CmId,
    pub private_data: [u8; ucma::MAX_PRIVATE_DATA],
}

/// Acks an event (`rdma_ack_cm_event`): counts it on its owner and frees it.
pub fn ack(ev: *mut rdma_cm_event) {
    // SAFETY: every event this library hands out is the front of a Box<Evt>.
    let e = unsafe { Box::from_raw(ev as *mut Evt) };
    if !e.owner.is_null() {
        // SAFETY: the owner waits in destroy for this very ack, so it is alive.
        unsafe { &*e.owner }.complete_event();
    }
}
