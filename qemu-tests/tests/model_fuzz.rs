//! The model's command engine under random commands (a seeded loop on stable): opcodes of
//! every command family and unknown ones, random op_mods, random input bytes and lengths up
//! to the mailboxes' 15 KiB, random output lengths. Every command must be delivered and
//! answered (a status, never a panic or a stall), and the device must still answer a
//! well-formed query afterwards. `BAREVERBS_FUZZ_COMMANDS=N` (and `BAREVERBS_FUZZ_SEED`) for
//! long runs by hand.

mod common;

use bareverbs_firmware_cmd::DeliveryStatus;
use bareverbs_model::rng::Rng;
use bareverbs_model::Drive;
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

#[test]
fn random_commands_are_answered_and_the_device_survives() {
    let seed = bareverbs_model::rng::env_or("BAREVERBS_FUZZ_SEED", 0xc0ff_ee00_d15e_a5e5);
    let n: u64 = bareverbs_model::rng::env_or("BAREVERBS_FUZZ_COMMANDS", 2000);
    let mut r = Rng(seed | 1);
    let mut raw = Raw::new(Drive::Synchronous);
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
            raw = Raw::new(Drive::Synchronous);
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
