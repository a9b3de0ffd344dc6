//! `ib_send_lat`: perftest's `ib_send_lat` on bareverbs (its common options and result table).
//! Without `--pci`, both sides run in this process on two model HCAs.

mod perftest;

fn main() -> std::process::ExitCode {
    perftest::main_for(perftest::Test::SendLat, "ib_send_lat")
}
