//! `ib_write_bw`: perftest's `ib_write_bw` on bareverbs (its common options and result table).
//! Without `--pci`, both sides run in this process on two model HCAs.

mod perftest;

fn main() -> std::process::ExitCode {
    perftest::main_for(perftest::Test::WriteBw, "ib_write_bw")
}
