//! QP states (IBA 10.3.1), in a leaf module of their own: the errors name states
//! (`VerbsError::InvalidState`) and the QP code returns those errors, so the type both need
//! sits below both instead of in `qp` (which made `error` and `qp` import each other).

use core::fmt;

/// QP states (IBA 10.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QpState {
    Reset,
    Init,
    /// Ready to receive: the responder runs.
    Rtr,
    /// Ready to send: requester and completer run too.
    Rts,
    /// Send queue drain: no new WR is started; the current message finishes.
    Sqd,
    /// Send queue error (UC/UD only).
    Sqe,
    Err,
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        })
    }
}
