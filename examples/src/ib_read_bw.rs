//! `ib_read_bw`: perftest's `ib_read_bw` on bareverbs (its common options and result table).
//! Without `--pci`, both sides run in this process on two model HCAs.

mod perftest;

fn main() -> std::process::ExitCode {
    perftest::main_for(perftest::Test::ReadBw, "ib_read_bw")
}
