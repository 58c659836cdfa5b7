//! The `ferry` command's core functions, one module per operation; `main.rs`
//! only parses arguments and calls them.

pub mod chainctl;
pub mod demo;
pub mod genlive;
pub mod genxsk;
pub mod hostctl;
pub mod nfrun;
pub mod proc;
pub mod sfc;
pub mod sink;
pub mod top;
pub mod txonly;
pub mod util;
pub mod xdprun;
pub mod xskport;
