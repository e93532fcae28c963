//! Ladder diagrams of RoCE exchanges (`roce-emu ladder`, the lessons, conformance
//! failures): sources turn what they saw into [`model::Observed`] packets, the builder
//! turns those into a [`model::Ladder`] of per-QP-pair rows, and the renderers draw it
//! (terminal text, a self-contained HTML page).

pub mod build;
pub mod html;
pub mod model;
pub mod source;
pub mod text;
