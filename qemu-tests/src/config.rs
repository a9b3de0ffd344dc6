//! What the modelled HCA looks like (identity, ports, page needs) and which faults it injects.

use std::time::Duration;

use bareverbs_firmware_cmd::{CmdStatus, DeliveryStatus};

/// Identity and resources of the modelled HCA. The defaults describe one PCI function of a
/// ConnectX-5 running InfiniBand: one port, as on the hardware, where a dual-port card shows
/// one PCI function per port (Linux commit 1dcf3ac49fb0, the mlx5 Ethernet merge: "Unlike
/// previous generations, the ConnectX-4 has a separate PCI function per port"; `mlx5_ib`
/// takes the port count from `cmd_hca_cap.num_ports`).
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// PCI device id (0x1017: ConnectX-5).
    pub device_id: u16,
    /// Firmware version major.minor.subminor.
    pub fw_version: (u16, u16, u16),
    /// Number of ports on this PCI function (1 on ConnectX-4 and later; more models a
    /// multi-port function such as Connect-IB's).
    pub num_ports: u8,
    /// Ports are Ethernet (RoCE) instead of InfiniBand.
    pub port_type_eth: bool,
    /// Ethernet: the largest frame the port receives, L2 header included (the NIC vport
    /// context's `mtu`; Linux subtracts 22 bytes of header, VLAN tag and FCS for the netdev's).
    pub eth_mtu: u16,
    /// Ethernet: the headers every send WQE must inline (`MLX5_INLINE_MODE_*`: 0 none, 1 L2,
    /// 2 IP, 3 TCP/UDP), reported as the NIC vport context's `min_wqe_inline_mode`.
    pub eth_min_inline: u8,
    /// Node GUID; port GUIDs are derived from it.
    pub node_guid: u64,
    /// Base LID; port n gets `base_lid + ((n - 1) << lmc)`.
    pub base_lid: u16,
    /// LID mask control: each port answers for `2^lmc` LIDs, the low `lmc` bits being the
    /// path bits (`dlid_path_bits` of a receive completion). `base_lid` must then be a
    /// multiple of `2^lmc`, as a subnet manager assigns them.
    pub lmc: u8,
    /// Pages firmware wants before INIT_HCA can run (QUERY_PAGES boot).
    pub boot_pages: u32,
    /// Pages firmware wants for INIT_HCA (QUERY_PAGES init).
    pub init_pages: u32,
    /// Time after power-on (or reset) before `initializing` clears.
    pub ready_after: Duration,
    /// Time firmware takes to execute a command.
    pub command_latency: Duration,
    /// BAR0 size in bytes.
    pub bar0_size: usize,
    /// Number of MSI-X vectors.
    pub msix_vectors: u16,
    /// Atomic requests can be answered in host byte order
    /// (`supported_atomic_req_8b_endianness_mode_1`); without it a driver gets big-endian
    /// atomics, which Linux reports as no atomics at all.
    pub atomic_host_endianness: bool,
    /// RC QPs may use packet-based end-to-end credits (`cmd_hca_cap.qp_packet_based`). The
    /// model keeps the QP context's `req_e2e_credit_mode` and reports it; it models no
    /// credits, message- or packet-based.
    pub qp_packet_based: bool,
    /// DC transport (`cmd_hca_cap.dct`, DCI streams); off, the device has no DC at all.
    pub dc: bool,
    /// Faults to inject.
    pub faults: Faults,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            device_id: 0x1017,
            fw_version: (16, 35, 2000),
            num_ports: 1,
            port_type_eth: false,
            eth_mtu: 1500 + 22,
            eth_min_inline: 1,
            node_guid: 0x0002_c903_00a1_b2c0,
            base_lid: 1,
            lmc: 0,
            boot_pages: 16,
            init_pages: 128,
            ready_after: Duration::from_millis(5),
            command_latency: Duration::ZERO,
            bar0_size: 32 << 20,
            msix_vectors: 64,
            atomic_host_endianness: true,
            qp_packet_based: false,
            dc: true,
            faults: Faults::default(),
        }
    }
}

/// A command the model fails on purpose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandFault {
    /// Opcode to fail.
    pub opcode: u16,
    /// Only this op_mod (`None`: any).
    pub op_mod: Option<u16>,
    /// Skip this many matching commands first.
    pub skip: u32,
    /// Fail this many matching commands after the skipped ones (`None`: all of them).
    pub times: Option<u32>,
    /// What to do instead of executing it.
    pub action: FaultAction,
}

/// How an injected command fault shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// Complete with this command status and syndrome.
    Status(CmdStatus, u32),
    /// Complete with this delivery status.
    Delivery(DeliveryStatus),
    /// Never complete: the entry stays owned by hardware.
    Stall,
    /// Execute it, then overwrite everything after the status and syndrome of a successful
    /// output with bytes from this seed (garbage a driver's output parsers must survive).
    Garble(u64),
}

/// Faults the model injects. Everything defaults to a healthy device.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// `initializing` never clears.
    pub never_ready: bool,
    /// Report this command interface revision instead of 5.
    pub cmdif_rev: Option<u16>,
    /// Commands to fail.
    pub commands: Vec<CommandFault>,
    /// Before executing this opcode, ask for this many pages with a page-request EQE and hold
    /// the command until they arrive.
    pub pages_before: Option<(u16, i32)>,
    /// The health counter does not advance.
    pub health_stalled: bool,
    /// Every BAR read returns all ones and writes are dropped (surprise removal).
    pub removed: bool,
    /// Send doorbells to ignore, from now on (a doorbell lost on the bus); the work they
    /// announced waits for the next doorbell, which carries the count in the doorbell record.
    pub lose_doorbells: u32,
    /// Completions to drop instead of writing, from now on (a CQE lost).
    pub lose_cqes: u32,
    /// Completions to write [`Faults::late_by`] late, from now on; the CQ's later ones wait
    /// behind them (`late.rs`).
    pub late_cqes: u32,
    /// Events to drop instead of writing, from now on (an EQE lost).
    pub lose_eqes: u32,
    /// Events to write [`Faults::late_by`] late, from now on; the EQ's later ones wait
    /// behind them.
    pub late_eqes: u32,
    /// How late a late CQE or EQE is, on the model's clock (0: at the next tick).
    pub late_by: Duration,
    /// The next completion overruns its CQ, whatever room it has (CQ error, then the QP
    /// that completes into it is fatal, as a real overrun).
    pub overrun_cq: bool,
    /// The next event overruns its EQ, whatever room it has: it is dropped and the EQ marked
    /// overrun, as a real overrun.
    pub overrun_eq: bool,
}

impl Faults {
    /// Fails `opcode` with `status` and `syndrome`.
    pub fn fail(mut self, opcode: u16, status: CmdStatus, syndrome: u32) -> Self {
        self.commands.push(CommandFault {
            opcode,
            op_mod: None,
            skip: 0,
            times: None,
            action: FaultAction::Status(status, syndrome),
        });
        self
    }

    /// Makes `opcode` never complete.
    pub fn stall(mut self, opcode: u16) -> Self {
        self.commands.push(CommandFault {
            opcode,
            op_mod: None,
            skip: 0,
            times: None,
            action: FaultAction::Stall,
        });
        self
    }
}
