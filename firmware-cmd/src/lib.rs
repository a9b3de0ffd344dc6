//! mlx5 firmware interface: every structure the driver and the model exchange with the HCA,
//! declared once as a bit table (`ifc!`), the opcode table (`commands!`), BAR0 registers
//! (`reg!`) and the status codes.
//!
//! Field names are those of the PRM and Linux `mlx5_ifc.h`, so a grep finds the same name in
//! all three. Nothing here computes an offset by hand: layouts are checked at compile time and
//! every field gets a generated round-trip test.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

#[macro_use]
mod macros;

pub mod commands;
pub mod cqe_repr;
pub mod handles;
pub mod ifc;
pub mod init_seg;
pub mod layout;
pub mod reg;
pub mod status;
pub mod wqe_codec;

pub use bareverbs_hal::BarOffset;
pub use commands::{Command, Opcode};
pub use handles::*;
pub use layout::{Layout, TooShort, View, ViewMut};
pub use status::{CmdStatus, DeliveryStatus, Syndrome};
