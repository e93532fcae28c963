//! `struct rdma_event_channel`: its `fd` is the pollable end of roce-emu's
//! [`EventChannel`] (one token per queued event), so programs that poll or epoll it
//! (UCX, libfabric, ceph) or set `O_NONBLOCK` on it see what the kernel's fd gives.

use crate::errno::err;
use crate::ffi::rdma_event_channel;
use crate::guard;
use roce_emu::verbs::cm::EventChannel;

/// The C struct at the front of ours.
#[repr(C)]
pub struct Channel {
    pub c: rdma_event_channel,
    pub ch: EventChannel,
}

impl Channel {
    /// A new channel (`rdma_create_event_channel`).
    pub fn create() -> Result<*mut rdma_event_channel, i32> {
        let ch = EventChannel::new().map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
        let c = Box::new(Channel {
            c: rdma_event_channel { fd: ch.fd() },
            ch,
        });
        Ok(Box::into_raw(c) as *mut rdma_event_channel)
    }

    /// # Safety
    /// `p` came from [`Channel::create`] and is not used after.
    pub unsafe fn destroy(p: *mut rdma_event_channel) {
        if !p.is_null() {
            // SAFETY: the caller's promise: p is a Box<Channel> of ours.
            let c = unsafe { Box::from_raw(p as *mut Channel) };
            // A thread still blocked in rdma_get_cm_event keeps the kernel's file open and
            // waits on (rping v44 destroys its channel without joining its event thread):
            // the channel is left open for it, as the kernel leaves the file.
            if c.ch.busy() {
                tracing::debug!("rdma_destroy_event_channel: a thread still waits on it");
                std::mem::forget(c);
            }
        }
    }

    /// # Safety
    /// `p` came from [`Channel::create`] and is alive.
    pub unsafe fn from_c<'a>(p: *mut rdma_event_channel) -> &'a Channel {
        // SAFETY: the caller's promise.
        unsafe { &*(p as *const Channel) }
    }
}

#[no_mangle]
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    guard::null("rdma_create_event_channel", || {
        crate::init_logging();
        if let Err(e) = crate::ibv::devs() {
            err(e.errno());
            return std::ptr::null_mut();
        }
        match Channel::create() {
            Ok(p) => p,
            Err(e) => {
                err(e);
                std::ptr::null_mut()
            }
        }
    })
}

/// # Safety
/// `channel` came from `rdma_create_event_channel` and has no ids left (as librdmacm
/// requires).
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    guard::value("rdma_destroy_event_channel", || {
        // SAFETY: the caller's promise.
        unsafe { Channel::destroy(channel) }
    })
}
