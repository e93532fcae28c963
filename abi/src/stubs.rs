//! What this NIC does not do yet, failing cleanly (EOPNOTSUPP: pyverbs turns it into a
//! skip), and the IBVERBS_PRIVATE_34 names Debian's libmlx5.so.1 and libefa.so.1 bind
//! to at load time (BIND_NOW). Those two call them only for their own devices, which
//! never exist here; each stub fails without touching its arguments.

use crate::errno::set_errno;
use libc::c_int;
use std::ptr::null_mut;

/// Stubs returning an errno (int-returning calls).
macro_rules! fail_int {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            set_errno(libc::EOPNOTSUPP);
            libc::EOPNOTSUPP
        }
    )*};
}

/// Stubs returning NULL with errno set (pointer-returning calls).
macro_rules! fail_null {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> *mut libc::c_void {
            set_errno(libc::EOPNOTSUPP);
            null_mut()
        }
    )*};
}

/// Stubs doing nothing (void calls).
macro_rules! nothing {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() {}
    )*};
}

// Public verbs of features not built yet: multicast, import of
// objects from another process, ECE, L2 resolution.
fail_null!(
    ibv_import_device,
    ibv_import_pd,
    ibv_import_mr,
    ibv_import_dm,
);
fail_int!(
    ibv_attach_mcast,
    ibv_detach_mcast,
    ibv_query_ece,
    ibv_set_ece,
    ibv_resolve_eth_l2_from_gid,
);
nothing!(ibv_unimport_pd, ibv_unimport_mr, ibv_unimport_dm);
// The kernel-struct converters stock librdmacm uses: it only runs against a kernel.
nothing!(
    ibv_copy_ah_attr_from_kern,
    ibv_copy_path_rec_from_kern,
    ibv_copy_path_rec_to_kern,
    ibv_copy_qp_attr_from_kern,
    ibv_register_driver,
);

// IBVERBS_PRIVATE_34 (rdma-core 44, plus ibv_cmd_create_cq_ex2 of 50).
fail_int!(
    __ioctl_final_num_attrs,
    execute_ioctl,
    ibv_cmd_advise_mr,
    ibv_cmd_alloc_dm,
    ibv_cmd_alloc_mw,
    ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast,
    ibv_cmd_close_xrcd,
    ibv_cmd_create_ah,
    ibv_cmd_create_counters,
    ibv_cmd_create_cq,
    ibv_cmd_create_cq_ex,
    ibv_cmd_create_cq_ex2,
    ibv_cmd_create_flow,
    ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp,
    ibv_cmd_create_qp_ex2,
    ibv_cmd_create_qp_ex,
    ibv_cmd_create_rwq_ind_table,
    ibv_cmd_create_srq,
    ibv_cmd_create_srq_ex,
    ibv_cmd_create_wq,
    ibv_cmd_dealloc_mw,
    ibv_cmd_dealloc_pd,
    ibv_cmd_dereg_mr,
    ibv_cmd_destroy_ah,
    ibv_cmd_destroy_counters,
    ibv_cmd_destroy_cq,
    ibv_cmd_destroy_flow,
    ibv_cmd_destroy_flow_action,
    ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table,
    ibv_cmd_destroy_srq,
    ibv_cmd_destroy_wq,
    ibv_cmd_detach_mcast,
    ibv_cmd_free_dm,
    ibv_cmd_get_context,
    ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp,
    ibv_cmd_modify_qp,
    ibv_cmd_modify_qp_ex,
    ibv_cmd_modify_srq,
    ibv_cmd_modify_wq,
    ibv_cmd_open_qp,
    ibv_cmd_open_xrcd,
    ibv_cmd_poll_cq,
    ibv_cmd_post_recv,
    ibv_cmd_post_send,
    ibv_cmd_post_srq_recv,
    ibv_cmd_query_context,
    ibv_cmd_query_device_any,
    ibv_cmd_query_mr,
    ibv_cmd_query_port,
    ibv_cmd_query_qp,
    ibv_cmd_query_srq,
    ibv_cmd_read_counters,
    ibv_cmd_reg_dm_mr,
    ibv_cmd_reg_dmabuf_mr,
    ibv_cmd_reg_mr,
    ibv_cmd_req_notify_cq,
    ibv_cmd_rereg_mr,
    ibv_cmd_resize_cq,
    ibv_read_ibdev_sysfs_file,
);
fail_null!(_verbs_init_and_alloc_context, verbs_open_device);
nothing!(
    __verbs_log,
    verbs_init_cq,
    verbs_set_ops,
    verbs_uninit_context
);

/// Providers register themselves from an ELF constructor (`PROVIDER_DRIVER`): Debian's
/// libmlx5 and libefa do as they load. Nothing to register with here.
#[no_mangle]
pub extern "C" fn verbs_register_driver_34(_ops: *const libc::c_void) {}

/// `verbs_allow_disassociate_destroy` (a `bool` rdma-core sets from
/// RDMAV_ALLOW_DISASSOC_DESTROY); providers read it.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static verbs_allow_disassociate_destroy: bool = false;
