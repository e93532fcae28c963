pub mod pretty {}
