//! The congestion point: a switch egress queue in front of a port (issue 25, part C).
//!
//! [`model::QueueModel`] is the sans-IO queue (line rate, buffer, RED/ECN marking by
//! instantaneous depth, tail drop; seeded); [`port::Queued`] puts one on a backend's
//! transmit side, so what the daemon sends to the wire leaves at the line rate, with CE
//! on the ECN-capable packets the queue marked.

pub mod model;
pub mod port;

pub use model::{QueueConfig, QueueConfigError, QueueModel, QueueStats};
pub use port::{QueueHandle, QueueReport, Queued};
