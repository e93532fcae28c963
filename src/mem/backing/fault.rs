//! Copies and 8-byte atomics on foreign memory that survive the memory going bad under
//! them. The program registered its memory, then may `mprotect` it read-only, `munmap` it,
//! or truncate the file it maps: a hardware NIC then fails the DMA and reports an access
//! error; a user-space NIC that simply touches the page gets SIGSEGV (or SIGBUS) and the
//! whole program dies. So, as the kernel does for `copy_from_user` (an exception table):
//! the accesses run in three small routines written in assembly, whose instruction range
//! is known; a SIGSEGV/SIGBUS handler, installed once, moves the program counter of a
//! fault inside that range to a fix-up label that makes the routine return 1 ("faulted").
//! A fault anywhere else goes on to the handler that was there before (Rust's stack
//! overflow guard, the program's own, or the default action, which kills as before).
//! No system call per access: only the registration installs the handler, once.
//!
//! x86_64 only for now. On other architectures the accesses are plain
//! `core::ptr::copy`/`AtomicU64` operations, as before this module: a fault there still
//! kills the program (the registration check in the C ABI catches what is wrong at
//! registration time, not a later `mprotect`).

use core::sync::atomic::{AtomicU64, Ordering};

/// The memory faulted (SIGSEGV or SIGBUS) during the access: nothing more was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Faulted;

static CAUGHT: AtomicU64 = AtomicU64::new(0);

/// Faults this process has caught in the routines and turned into errors, since start.
pub fn caught() -> u64 {
    CAUGHT.load(Ordering::Relaxed)
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use super::{Faulted, CAUGHT};
    use core::sync::atomic::Ordering;
    use std::sync::{Once, OnceLock};

    // The routines, between roce_emu_fault_begin and roce_emu_fault_end; every faulting
    // instruction among them is recovered at roce_emu_fault_fixup, which returns 1. None
    // of them touches the stack before the faulting instruction (no push, no call), so
    // `ret` from the fix-up returns to the routine's caller with its stack as it was.
    //
    // copy(dst rdi, src rsi, n rdx) -> eax: memmove with `rep movsb`, backwards (DF set)
    // when dst lies inside [src, src + n). fetch_add(p rdi, add rsi, out rdx) -> eax:
    // `lock xadd`. cas(p rdi, compare rsi, swap rdx, out rcx) -> eax: `lock cmpxchg`.
    // The out-parameters are the caller's own stack slots, which cannot fault.
    core::arch::global_asm!(
        ".pushsection .text.roce_emu_fault,\"ax\",@progbits",
        ".p2align 4",
        ".globl roce_emu_fault_begin",
        ".hidden roce_emu_fault_begin",
        "roce_emu_fault_begin:",
        ".globl roce_emu_fault_copy",
        ".hidden roce_emu_fault_copy",
        "roce_emu_fault_copy:",
        "    mov rcx, rdx",
        "    mov rax, rdi",
        "    sub rax, rsi",
        "    cmp rax, rcx",
        "    jb 2f",
        "    rep movsb",
        "    xor eax, eax",
        "    ret",
        "2:",
        "    lea rsi, [rsi + rcx - 1]",
        "    lea rdi, [rdi + rcx - 1]",
        "    std",
        "    rep movsb",
        "    cld",
        "    xor eax, eax",
        "    ret",
        ".globl roce_emu_fault_fetch_add",
        ".hidden roce_emu_fault_fetch_add",
        "roce_emu_fault_fetch_add:",
        "    lock xadd qword ptr [rdi], rsi",
        "    mov qword ptr [rdx], rsi",
        "    xor eax, eax",
        "    ret",
        ".globl roce_emu_fault_cas",
        ".hidden roce_emu_fault_cas",
        "roce_emu_fault_cas:",
        "    mov rax, rsi",
        "    lock cmpxchg qword ptr [rdi], rdx",
        "    mov qword ptr [rcx], rax",
        "    xor eax, eax",
        "    ret",
        ".globl roce_emu_fault_end",
        ".hidden roce_emu_fault_end",
        "roce_emu_fault_end:",
        ".globl roce_emu_fault_fixup",
        ".hidden roce_emu_fault_fixup",
        "roce_emu_fault_fixup:",
        "    cld",
        "    mov eax, 1",
        "    ret",
        ".popsection",
    );

    extern "C" {
        static roce_emu_fault_begin: u8;
        static roce_emu_fault_end: u8;
        static roce_emu_fault_fixup: u8;
        fn roce_emu_fault_copy(dst: *mut u8, src: *const u8, n: usize) -> u32;
        fn roce_emu_fault_fetch_add(p: *mut u64, add: u64, out: *mut u64) -> u32;
        fn roce_emu_fault_cas(p: *mut u64, compare: u64, swap: u64, out: *mut u64) -> u32;
    }

    /// The handlers that were installed before ours, for faults that are not ours.
    static PREV_SEGV: OnceLock<libc::sigaction> = OnceLock::new();
    static PREV_BUS: OnceLock<libc::sigaction> = OnceLock::new();

    /// Installs the SIGSEGV/SIGBUS handler, once per process. A failure leaves faults
    /// fatal, as they were (logged once).
    pub fn install() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            for (sig, prev) in [(libc::SIGSEGV, &PREV_SEGV), (libc::SIGBUS, &PREV_BUS)] {
                // SAFETY: sigaction(2) with a zeroed struct filled in (all-zero is a valid
                // `sigaction`: an empty mask, no flags); `on_fault` is async-signal-safe
                // (atomics, reads of the saved handlers, and a call of the previous one).
                unsafe {
                    let mut sa: libc::sigaction = core::mem::zeroed();
                    sa.sa_sigaction = on_fault as *const () as usize;
                    sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                    libc::sigemptyset(&mut sa.sa_mask);
                    let mut old: libc::sigaction = core::mem::zeroed();
                    // The previous handler is saved before ours can run: a fault of ours
                    // only happens after `install` returns.
                    if libc::sigaction(sig, core::ptr::null(), &mut old) != 0 {
                        tracing::warn!("sigaction({sig}): faults on foreign memory stay fatal");
                        continue;
                    }
                    let _ = prev.set(old);
                    if libc::sigaction(sig, &sa, core::ptr::null_mut()) != 0 {
                        tracing::warn!("sigaction({sig}): faults on foreign memory stay fatal");
                    }
                }
            }
        });
    }

    /// The handler: a fault inside the routines resumes at the fix-up; any other goes to
    /// the previous handler (or the default action).
    extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid ucontext_t for an SA_SIGINFO handler; REG_RIP
        // is the interrupted instruction pointer, which we may change to make the thread
        // resume elsewhere (the fix-up label, a valid instruction of ours). Taking the
        // addresses of the asm labels reads nothing.
        unsafe {
            let uc = ctx as *mut libc::ucontext_t;
            let rip = &mut (*uc).uc_mcontext.gregs[libc::REG_RIP as usize];
            let pc = *rip as usize;
            let begin = &raw const roce_emu_fault_begin as usize;
            let end = &raw const roce_emu_fault_end as usize;
            if (begin..end).contains(&pc) {
                CAUGHT.fetch_add(1, Ordering::Relaxed);
                *rip = (&raw const roce_emu_fault_fixup as usize) as i64;
                return;
            }
            chain(sig, info, ctx);
        }
    }

    /// Hands a fault that is not ours to the handler that was there before.
    ///
    /// # Safety
    /// Called from `on_fault` with the kernel's arguments.
    unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        let prev = if sig == libc::SIGBUS {
            PREV_BUS.get()
        } else {
            PREV_SEGV.get()
        };
        let Some(prev) = prev else {
            // SAFETY: as below (the default action).
            unsafe { default_action(sig) };
            return;
        };
        match prev.sa_sigaction {
            libc::SIG_DFL => {
                // SAFETY: restores the default action and re-raises: a synchronous fault
                // re-executes and kills with the same signal (and core), as without us.
                unsafe { default_action(sig) }
            }
            libc::SIG_IGN => {}
            h if prev.sa_flags & libc::SA_SIGINFO != 0 => {
                // SAFETY: the previous handler was installed with SA_SIGINFO: this is its
                // type, and these are the arguments the kernel gave us for it.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { core::mem::transmute(h) };
                f(sig, info, ctx);
            }
            h => {
                // SAFETY: a plain `void (*)(int)` handler.
                let f: extern "C" fn(libc::c_int) = unsafe { core::mem::transmute(h) };
                f(sig);
            }
        }
    }

    /// # Safety
    /// In a signal handler for `sig`: sigaction and raise are async-signal-safe.
    unsafe fn default_action(sig: libc::c_int) {
        // SAFETY: a zeroed sigaction is SIG_DFL with no flags; raise(3) queues `sig`, which
        // the kernel delivers (default action) once this handler returns.
        unsafe {
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &sa, core::ptr::null_mut());
            libc::raise(sig);
        }
    }

    /// # Safety
    /// `dst` valid for writes and `src` for reads of `n` bytes, but for a fault: those
    /// return `Err(Faulted)` (the handler is installed: `install`).
    pub unsafe fn copy(dst: *mut u8, src: *const u8, n: usize) -> Result<(), Faulted> {
        // SAFETY: the routine touches exactly [src, src + n) and [dst, dst + n); a fault
        // there resumes at the fix-up (the caller's contract).
        match unsafe { roce_emu_fault_copy(dst, src, n) } {
            0 => Ok(()),
            _ => Err(Faulted),
        }
    }

    /// # Safety
    /// `p` 8-byte aligned, valid for atomic read-modify-write, but for a fault.
    pub unsafe fn fetch_add(p: *mut u64, add: u64) -> Result<u64, Faulted> {
        let mut out = 0u64;
        // SAFETY: `lock xadd` on `p` (the caller's contract) and a store to `out`.
        match unsafe { roce_emu_fault_fetch_add(p, add, &mut out) } {
            0 => Ok(out),
            _ => Err(Faulted),
        }
    }

    /// # Safety
    /// As [`fetch_add`].
    pub unsafe fn compare_swap(p: *mut u64, compare: u64, swap: u64) -> Result<u64, Faulted> {
        let mut out = 0u64;
        // SAFETY: `lock cmpxchg` on `p` (the caller's contract) and a store to `out`.
        match unsafe { roce_emu_fault_cas(p, compare, swap, &mut out) } {
            0 => Ok(out),
            _ => Err(Faulted),
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    //! Other architectures: no recovery yet (the accesses of before; a fault is fatal).
    use super::Faulted;
    use core::sync::atomic::{AtomicU64, Ordering};

    pub fn install() {}

    /// # Safety
    /// `dst` valid for writes and `src` for reads of `n` bytes.
    pub unsafe fn copy(dst: *mut u8, src: *const u8, n: usize) -> Result<(), Faulted> {
        // SAFETY: the caller's contract.
        unsafe { core::ptr::copy(src, dst, n) };
        Ok(())
    }

    /// # Safety
    /// `p` 8-byte aligned and valid for atomic read-modify-write.
    pub unsafe fn fetch_add(p: *mut u64, add: u64) -> Result<u64, Faulted> {
        // SAFETY: the caller's contract.
        Ok(unsafe { AtomicU64::from_ptr(p) }.fetch_add(add, Ordering::SeqCst))
    }

    /// # Safety
    /// As [`fetch_add`].
    pub unsafe fn compare_swap(p: *mut u64, compare: u64, swap: u64) -> Result<u64, Faulted> {
        // SAFETY: the caller's contract.
        let a = unsafe { AtomicU64::from_ptr(p) };
        Ok(
            match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(v) | Err(v) => v,
            },
        )
    }
}

pub(super) use imp::{compare_swap, copy, fetch_add, install};
