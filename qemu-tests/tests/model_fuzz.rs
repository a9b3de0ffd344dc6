//! The model's command engine under random commands (a seeded loop on stable): opcodes of
//! every command family and unknown ones, random op_mods, random input bytes and lengths up
//! to the mailboxes' 15 KiB, random output lengths. Every command must be delivered and
//! answered (a status, never a panic or a stall), and the device must still answer a
//! well-formed query afterwards. `BAREVERBS_FUZZ_COMMANDS=N` (and `BAREVERBS_FUZZ_SEED`) for
//! long runs by hand.

mod common;

use bareverbs_firmware_cmd::DeliveryStatus;
use bareverbs_model::rng::Rng;
use bareverbs_model::{Drive, ModelConfig};
use common::{bring_up, header, Raw};

/// An opcode: mostly from the families the model implements (0x1xx init and pages, 0x2xx
/// mkeys, 0x3xx EQ, 0x4xx CQ, 0x5xx QP, 0x7xx/0x8xx vports and domains, 0x9xx objects), the
/// rest anything.
fn opcode(r: &mut Rng) -> u16 {
    match r.below(10) {
        0 => r.next() as u16,
        k => ((k as u16) << 8) | r.below(0x40) as u16,
    }
}

/// An opcode of the Ethernet NIC's families most of the time: NIC vport and counters
/// (0x75x, 0x77x), ACCESS_REG, TIR/SQ/RQ/TIS/RQT (0x90x–0x91x), flow steering (0x92f–0x93c).
fn eth_opcode(r: &mut Rng) -> u16 {
    const ETH: &[u16] = &[
        0x754, 0x755, 0x770, 0x771, 0x772, 0x773, 0x805, 0x900, 0x901, 0x902, 0x904, 0x905, 0x906,
        0x908, 0x909, 0x90a, 0x912, 0x913, 0x914, 0x916, 0x917, 0x918, 0x92f, 0x930, 0x931, 0x933,
        0x934, 0x936, 0x938, 0x939, 0x93a, 0x93b, 0x93c,
    ];
    match r.below(4) {
        0 => opcode(r),
        _ => ETH[r.below(ETH.len() as u64) as usize],
    }
}

#[test]
fn random_commands_are_answered_and_the_device_survives() {
    fuzz(ModelConfig::default(), opcode, 0);
}

/// The same on an Ethernet HCA, with the Ethernet commands most of the time.
#[test]
fn random_ethernet_commands_are_answered_and_the_device_survives() {
    let cfg = ModelConfig {
        port_type_eth: true,
        ..ModelConfig::default()
    };
    fuzz(cfg, eth_opcode, 1);
}

fn fuzz(cfg: ModelConfig, opcode: fn(&mut Rng) -> u16, salt: u64) {
    let seed = bareverbs_model::rng::env_or("BAREVERBS_FUZZ_SEED", 0xc0ff_ee00_d15e_a5e5) ^ salt;
    let n: u64 = bareverbs_model::rng::env_or("BAREVERBS_FUZZ_COMMANDS", 2000);
    let mut r = Rng(seed | 1);
    let mut raw = Raw::with(cfg.clone(), Drive::Synchronous);
    let mut pages = bring_up(&raw);
    let (mut sent, mut refused, mut devices) = (0u64, 0u64, 1u64);
    while sent < n {
        let len = match r.below(4) {
            0 => 16 + r.below(16) as usize,
            1 => 16 + r.below(0x100) as usize,
            _ => 16 + r.below(15 * 512) as usize,
        };
        let mut input = header(opcode(&mut r), r.next() as u16, len);
        for b in input.iter_mut().skip(8) {
            if r.below(3) == 0 {
                *b = r.next() as u8;
            }
        }
        let outlen = 16 + r.below(15 * 512) as usize;
        let (d, out) = raw.post(&input, outlen, |_| {});
        sent += 1;
        assert_eq!(
            d,
            DeliveryStatus::Ok,
            "command {sent}: delivered and answered"
        );
        if out[0] != 0 {
            refused += 1;
        }
        // Commands that tear the device down (TEARDOWN_HCA, DISABLE_HCA, ...) leave it
        // unusable: every 200 commands a fresh device, after checking the old one answers.
        if sent % 200 == 0 {
            let q = raw.cmd(&header(0x101, 0, 16), 0x100);
            let _ = Raw::status(&q);
            raw = Raw::with(cfg.clone(), Drive::Synchronous);
            pages = bring_up(&raw);
            devices += 1;
        }
    }
    drop(pages);
    eprintln!(
        "model fuzz: seed {seed:#x}: {sent} commands ({refused} refused) on {devices} devices, \
         no panic, no stall"
    );
}
