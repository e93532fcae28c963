//! Congestion control (issue 25): the notification point (a CE-marked packet -> a CNP,
//! IBA Annex A17.9) and the reaction point (DCQCN, mlx5's fixed-point form).

mod config;

pub use config::{CcConfig, CcConfigError};
