//! `ud_pingpong`: UD ping-pong with the command line of rdma-core's `ibv_ud_pingpong`.
//! Without `--pci`, both sides run in this process on two model HCAs.

mod pingpong;

fn main() -> std::process::ExitCode {
    pingpong::main_for(bareverbs::verbs::QpType::Ud, "ud_pingpong")
}
