//! What the image does: finds two mlx5 functions, brings both up, prints what `devinfo`
//! prints, runs an RC ping-pong and a UD exchange between them with every byte checked (on
//! Ethernet ports: the packet appliance and its peer, `eth.rs`), tears both down and checks
//! that every DMA page came back.

use core::fmt;
use core::time::Duration;

use core::cell::UnsafeCell;
use core::ptr::NonNull;

use bareverbs::hal::bare_metal::{
    find_ecam, find_functions, Arena, BareHal, Function, PciError, StaticCell, Tsc, VENDOR_MELLANOX,
};
use bareverbs::hal::{DmaError, Hal};
use bareverbs::verbs::{
    AccessFlags, AhAttr, Cq, Mr, Mtu, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendFlags, SendOp,
    SendWr, Sge, UdDest, Wc, WcStatus,
};
use bareverbs::{Config, Device, Error, PortState, StepError};

use crate::println;

/// RC ping-pong round trips, and their message size.
const RC_ITERS: u32 = 200;
const RC_SIZE: usize = 4096;
/// UD messages each way, and their size (without the 40-byte GRH room).
const UD_ITERS: u32 = 50;
const UD_SIZE: usize = 1024;
const GRH: usize = 40;
const QKEY: u32 = 0x1111_1111;
/// How long a completion may take before the run fails.
pub(crate) const COMPLETION_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the run failed; printed on the console before the failure exit.
pub enum Fail {
    /// No PIT to calibrate the TSC against.
    NoPit,
    /// No ACPI MCFG table: no ECAM window.
    NoMcfg,
    /// Fewer than two mlx5 functions.
    Devices(usize),
    /// A function's BAR0.
    Pci(Function, PciError),
    /// A bring-up step.
    BringUp(StepError),
    /// A teardown step.
    Teardown(StepError),
    /// A verb.
    Verb(&'static str, Error),
    /// DMA memory.
    Dma(&'static str, DmaError),
    /// A completion that did not come.
    Timeout(&'static str),
    /// A completion with an error status.
    Completion(&'static str, Wc),
    /// Data that arrived different from what was sent.
    Data(&'static str, u32),
    /// DMA pages still in use after both teardowns.
    Leak(usize),
    /// The run's statics were taken already (`run` called twice).
    Reentered,
}

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fail::NoPit => write!(f, "no PIT: cannot calibrate the TSC"),
            Fail::NoMcfg => write!(f, "no ACPI MCFG table: no PCIe ECAM window"),
            Fail::Devices(n) => write!(f, "{n} mlx5 function(s) found, two needed"),
            Fail::Pci(func, e) => {
                write!(f, "{:02x}:{:02x}.{}: {e}", func.bus, func.dev, func.func)
            }
            Fail::BringUp(e) => write!(f, "bring-up failed at {e}"),
            Fail::Teardown(e) => write!(f, "teardown failed at {e}"),
            Fail::Verb(what, e) => write!(f, "{what}: {e}"),
            Fail::Dma(what, e) => write!(f, "{what}: {e}"),
            Fail::Timeout(what) => write!(f, "{what}: no completion in {COMPLETION_TIMEOUT:?}"),
            Fail::Completion(what, wc) => write!(
                f,
                "{what}: completion with status {:?} (vendor error {:#x})",
                wc.status, wc.vendor_err
            ),
            Fail::Data(what, i) => write!(f, "{what}: iteration {i}: data does not match"),
            Fail::Leak(n) => write!(f, "{n} DMA pages still in use after teardown"),
            Fail::Reentered => write!(f, "the devices' storage is taken: run twice"),
        }
    }
}

pub(crate) fn verb(what: &'static str) -> impl FnOnce(Error) -> Fail {
    move |e| Fail::Verb(what, e)
}

fn verb_and<T>(what: &'static str) -> impl FnOnce((Error, T)) -> Fail {
    move |(e, _)| Fail::Verb(what, e)
}

/// The run; `start_info` is PVH's start info (for the ACPI RSDP).
pub fn run(start_info: u64) -> Result<(), Fail> {
    // SAFETY: this image owns the PIT and port 0x61.
    let tsc = unsafe { Tsc::calibrate() }.ok_or(Fail::NoPit)?;
    let hz = tsc.hz();
    println!(
        "clock: TSC {}.{:03} MHz (against the PIT)",
        hz / 1_000_000,
        hz / 1000 % 1000
    );
    // SAFETY: `boot.rs` identity-maps 0-4 GiB (uncached above 2 GiB, where q35's ECAM window
    // is), and nothing else in this image uses configuration space.
    let ecam = unsafe { find_ecam(start_info) }.ok_or(Fail::NoMcfg)?;
    println!(
        "pci: ECAM at {:#x}, buses {:?} (ACPI MCFG)",
        ecam.base(),
        ecam.buses()
    );
    let (found, n) = find_functions::<4>(ecam, VENDOR_MELLANOX);
    let (Some(f0), Some(f1)) = (found[0], found[1]) else {
        return Err(Fail::Devices(n));
    };
    let (Some(a), Some(h0), Some(h1), Some(s0), Some(s1)) = (
        ARENA.take(),
        HAL0.take(),
        HAL1.take(),
        DEV0.take(),
        DEV1.take(),
    ) else {
        return Err(Fail::Reentered);
    };
    let base = NonNull::new(ARENA_MEMORY.0.get().cast::<u8>()).ok_or(Fail::Reentered)?;
    // SAFETY: `ARENA_MEMORY` is zeroed `.bss`, 2 MiB-aligned, used only through this arena,
    // identity-mapped, and q35 has no IOMMU here: its addresses are device addresses.
    let arena: &'static Arena =
        a.insert(unsafe { Arena::new(base, ARENA_BYTES) }.map_err(|e| Fail::Dma("arena", e))?);
    // No IOMMU: both devices see physical memory, the arena's one device-address space.
    let h0: &'static BareHal<'static> = h0.insert(open(f0, arena, tsc)?);
    let h1: &'static BareHal<'static> = h1.insert(open(f1, arena, tsc)?);
    // The devices are built in place in their statics: no frame holds one.
    let r = both(s0, s1, h0, h1, f0, f1);
    // Torn down whatever happened (an empty slot is a no-op).
    let t1 = Device::teardown_in(s1).map_err(Fail::Teardown);
    let t0 = Device::teardown_in(s0).map_err(Fail::Teardown);
    r.and(t1).and(t0)?;
    f0.disable();
    f1.disable();
    let left = arena.pages_in_use();
    if left != 0 {
        return Err(Fail::Leak(left));
    }
    println!("teardown: both HCAs down, every DMA page back");
    Ok(())
}

/// Bytes of the DMA arena: rings, command pages and firmware pages of both HCAs.
const ARENA_BYTES: usize = 32 << 20;

/// The arena's memory, in `.bss`.
#[repr(C, align(2097152))]
struct ArenaMemory(UnsafeCell<[u8; ARENA_BYTES]>);

// SAFETY: reached only through the one `Arena` built over it (a `StaticCell`, taken once).
unsafe impl Sync for ArenaMemory {}

static ARENA_MEMORY: ArenaMemory = ArenaMemory(UnsafeCell::new([0; ARENA_BYTES]));
static ARENA: StaticCell<Option<Arena>> = StaticCell::new(None);

type Slot = Option<Device<&'static BareHal<'static>>>;

static HAL0: StaticCell<Option<BareHal<'static>>> = StaticCell::new(None);
static HAL1: StaticCell<Option<BareHal<'static>>> = StaticCell::new(None);
static DEV0: StaticCell<Slot> = StaticCell::new(None);
static DEV1: StaticCell<Slot> = StaticCell::new(None);

/// Brings both devices up in their slots, prints them, runs the traffic.
fn both(
    s0: &mut Slot,
    s1: &mut Slot,
    h0: &'static BareHal<'static>,
    h1: &'static BareHal<'static>,
    f0: Function,
    f1: Function,
) -> Result<(), Fail> {
    let cfg = Config::default();
    Device::bring_up_in(s0, h0, cfg).map_err(Fail::BringUp)?;
    Device::bring_up_in(s1, h1, cfg).map_err(Fail::BringUp)?;
    let (Some(d0), Some(d1)) = (s0.as_ref(), s1.as_ref()) else {
        return Err(Fail::Reentered);
    };
    devinfo("mlx5_0", d0, f0);
    devinfo("mlx5_1", d1, f1);
    // Port type 1: Ethernet (the model server's `--eth`): the packet appliance instead.
    if d0.info().caps.port_type == 1 {
        return crate::eth::appliance(d0, d1);
    }
    rc_pingpong(d0, d1)?;
    ud_exchange(d0, d1)
}

fn open(f: Function, arena: &'static Arena, tsc: Tsc) -> Result<BareHal<'static>, Fail> {
    let (addr, len) = f.bar0().map_err(|e| Fail::Pci(f, e))?;
    let (vendor, device) = f.ids();
    println!(
        "pci: {:02x}:{:02x}.{} [{vendor:04x}:{device:04x}] BAR0 {addr:#x} ({} MiB)",
        f.bus,
        f.dev,
        f.func,
        len >> 20
    );
    f.enable();
    let len = usize::try_from(len).map_err(|_| Fail::Pci(f, PciError::Unmapped { addr }))?;
    // SAFETY: `bar0` checked that BAR0 lies below 4 GiB, which `boot.rs` identity-maps
    // (uncached above 2 GiB, where SeaBIOS places BARs); `enable` turned decoding and bus
    // mastering on; this is the only `BareHal` of `f`.
    Ok(unsafe { BareHal::new(arena, tsc, addr, len) })
}

fn guid(g: u64) -> [u16; 4] {
    [
        (g >> 48) as u16,
        (g >> 32) as u16,
        (g >> 16) as u16,
        g as u16,
    ]
}

/// What `devinfo` prints of a device.
fn devinfo<H: Hal>(name: &str, dev: &Device<H>, f: Function) {
    let i = dev.info();
    let (maj, min, sub) = i.fw_version;
    let g = guid(i.node_guid);
    println!(
        "hca_id:\t{name} (pci {:02x}:{:02x}.{})",
        f.bus, f.dev, f.func
    );
    println!("\tfw_ver:\t\t\t{maj}.{min}.{sub}");
    println!(
        "\tnode_guid:\t\t{:04x}:{:04x}:{:04x}:{:04x}",
        g[0], g[1], g[2], g[3]
    );
    println!("\tvendor_id:\t\t{:#06x}", i.vendor_id);
    println!("\tboard_id:\t\t{}", i.board_id());
    println!("\tphys_port_cnt:\t\t{}", i.caps.num_ports);
    println!("\tmax_qp:\t\t\t{}", i.caps.max_qp);
    println!("\tmax_cqe:\t\t{}", i.caps.max_cqe);
    println!("\tfw_pages:\t\t{}", dev.pages_given());
    for p in dev.ports() {
        let state = if p.state == PortState::Active {
            "PORT_ACTIVE (4)"
        } else {
            "not active"
        };
        println!("\t\tport:\t{}", p.port);
        println!("\t\t\tstate:\t\t{state}");
        println!("\t\t\tport_lid:\t{}", p.lid);
        println!("\t\t\tsm_lid:\t\t{}", p.sm_lid);
    }
}

/// One side: a PD's QP with its CQ and a registered buffer (send half, receive half).
struct Side<'p, 'd, H: Hal> {
    cq: Cq<'d, H>,
    qp: Qp<'p, 'd, H>,
    mr: Mr<'p, 'd, H>,
    lid: u16,
    half: usize,
}

fn side<'p, 'd, H: Hal>(
    dev: &'d Device<H>,
    pd: &'p bareverbs::verbs::Pd<'d, H>,
    qp_type: QpType,
    half: usize,
) -> Result<Side<'p, 'd, H>, Fail>
where
    'd: 'p,
{
    let cq = dev.create_cq(32).map_err(verb("create_cq"))?;
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut qp_init = QpInitAttr::new(qp_type, &cq, &cq, cap);
    qp_init.sq_sig_all = true;
    let qp = pd.create_qp(&qp_init).map_err(verb("create_qp"))?;
    let buf = dev
        .hal()
        .dma_alloc(2 * half, 4096)
        .map_err(|e| Fail::Dma("buffer", e))?
        .share();
    let mr = pd
        .reg_mr(buf, AccessFlags::LOCAL_WRITE)
        .map_err(verb_and("reg_mr"))?;
    let lid = dev.ports().first().map_or(0, |p| p.lid);
    Ok(Side {
        cq,
        qp,
        mr,
        lid,
        half,
    })
}

impl<H: Hal> Side<'_, '_, H> {
    fn tx(&self, len: usize) -> Sge {
        Sge {
            addr: self.mr.addr(),
            length: len as u32,
            lkey: self.mr.lkey(),
        }
    }

    fn rx(&self) -> Sge {
        Sge {
            addr: self.mr.addr() + self.half as u64,
            length: self.half as u32,
            lkey: self.mr.lkey(),
        }
    }

    fn post_recv(&mut self) -> Result<(), Fail> {
        let rx = self.rx();
        self.qp
            .post_recv(&[RecvWr {
                wr_id: 2,
                sg_list: core::slice::from_ref(&rx),
            }])
            .map_err(|e| Fail::Verb("post_recv", e.error))
    }

    fn send(&mut self, len: usize, ud: Option<UdDest>) -> Result<(), Fail> {
        let tx = self.tx(len);
        self.qp
            .post_send(&[SendWr {
                wr_id: 1,
                sg_list: core::slice::from_ref(&tx),
                inline_data: &[],
                op: SendOp::Send,
                flags: SendFlags::SIGNALED,
                ud,
            }])
            .map_err(|e| Fail::Verb("post_send", e.error))
    }

    /// The next completion, within `COMPLETION_TIMEOUT`.
    fn wait(&mut self, what: &'static str, hal: &impl Hal) -> Result<Wc, Fail> {
        let start = hal.now();
        let mut wc = [Wc::EMPTY; 1];
        loop {
            if self.cq.poll(&mut wc) == 1 {
                return if wc[0].status == WcStatus::Success {
                    Ok(wc[0])
                } else {
                    Err(Fail::Completion(what, wc[0]))
                };
            }
            if hal.now().since(start) > COMPLETION_TIMEOUT {
                return Err(Fail::Timeout(what));
            }
            hal.relax();
        }
    }

    /// Writes the pattern of iteration `i` to the send half.
    fn fill(&self, i: u32, len: usize) -> Result<(), Fail> {
        let mut chunk = [0u8; 256];
        for at in (0..len).step_by(chunk.len()) {
            let n = chunk.len().min(len - at);
            for (k, b) in chunk[..n].iter_mut().enumerate() {
                *b = pattern(i, at + k);
            }
            self.mr
                .buf()
                .write_bytes(at, &chunk[..n])
                .map_err(|e| Fail::Dma("fill", e))?;
        }
        Ok(())
    }

    /// Whether the receive half holds the pattern of iteration `i` from `skip` on.
    fn check(&self, i: u32, skip: usize, len: usize) -> Result<bool, Fail> {
        let mut chunk = [0u8; 256];
        for at in (0..len).step_by(chunk.len()) {
            let n = chunk.len().min(len - at);
            self.mr
                .buf()
                .read_bytes(self.half + skip + at, &mut chunk[..n])
                .map_err(|e| Fail::Dma("check", e))?;
            if chunk[..n]
                .iter()
                .enumerate()
                .any(|(k, &b)| b != pattern(i, at + k))
            {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Copies what arrived (from `skip` on) to the send half: the echo.
    fn echo(&self, skip: usize, len: usize) -> Result<(), Fail> {
        let mut chunk = [0u8; 256];
        for at in (0..len).step_by(chunk.len()) {
            let n = chunk.len().min(len - at);
            let buf = self.mr.buf();
            buf.read_bytes(self.half + skip + at, &mut chunk[..n])
                .map_err(|e| Fail::Dma("echo", e))?;
            buf.write_bytes(at, &chunk[..n])
                .map_err(|e| Fail::Dma("echo", e))?;
        }
        Ok(())
    }

    fn destroy(self) -> Result<(), Fail> {
        self.qp.destroy().map_err(verb_and("destroy_qp"))?;
        // The buffer goes back to the arena when the returned memory drops.
        drop(self.mr.dereg().map_err(verb_and("dereg_mr"))?);
        self.cq.destroy().map_err(verb_and("destroy_cq"))
    }
}

fn pattern(i: u32, at: usize) -> u8 {
    (i as usize)
        .wrapping_mul(31)
        .wrapping_add(at)
        .wrapping_mul(7) as u8
}

/// RC: HCA 0 sends, HCA 1 checks and echoes, HCA 0 checks the echo; `RC_ITERS` times.
fn rc_pingpong<H: Hal>(d0: &Device<H>, d1: &Device<H>) -> Result<(), Fail> {
    let (p0, p1) = (
        d0.alloc_pd().map_err(verb("alloc_pd"))?,
        d1.alloc_pd().map_err(verb("alloc_pd"))?,
    );
    let mut a = side(d0, &p0, QpType::Rc, RC_SIZE)?;
    let mut b = side(d1, &p1, QpType::Rc, RC_SIZE)?;
    let (an, bn) = (a.qp.qpn().raw(), b.qp.qpn().raw());
    let (alid, blid) = (a.lid, b.lid);
    for (s, peer, dlid, psn) in [(&mut a, bn, blid, 0x11u32), (&mut b, an, alid, 0x22)] {
        s.qp.to_init(1, 0, AccessFlags::LOCAL_WRITE, 0)
            .map_err(verb("RC to INIT"))?;
        let path = AhAttr {
            dlid,
            port_num: 1,
            ..AhAttr::default()
        };
        let peer_psn = if psn == 0x11 { 0x22 } else { 0x11 };
        s.qp.to_rtr(peer, peer_psn, path, Mtu::Mtu1024)
            .map_err(verb("RC to RTR"))?;
        s.qp.to_rts(psn).map_err(verb("RC to RTS"))?;
    }
    println!(
        "rc: QP {an:#x} (LID {alid}) <-> QP {bn:#x} (LID {blid}), {RC_ITERS} x {RC_SIZE} bytes"
    );
    let start = d0.hal().now();
    for i in 0..RC_ITERS {
        a.fill(i, RC_SIZE)?;
        b.post_recv()?;
        a.post_recv()?;
        a.send(RC_SIZE, None)?;
        a.wait("rc send", d0.hal())?;
        let r = b.wait("rc receive", d1.hal())?;
        if r.byte_len as usize != RC_SIZE || !b.check(i, 0, RC_SIZE)? {
            return Err(Fail::Data("rc receive", i));
        }
        b.echo(0, RC_SIZE)?;
        b.send(RC_SIZE, None)?;
        b.wait("rc echo send", d1.hal())?;
        let r = a.wait("rc echo receive", d0.hal())?;
        if r.byte_len as usize != RC_SIZE || !a.check(i, 0, RC_SIZE)? {
            return Err(Fail::Data("rc echo", i));
        }
    }
    let us = d0.hal().now().since(start).as_micros() as u64;
    println!(
        "rc: {RC_ITERS} round trips checked byte for byte in {}.{:03} ms ({} us each)",
        us / 1000,
        us % 1000,
        us / u64::from(RC_ITERS)
    );
    a.destroy()?;
    b.destroy()?;
    p0.dealloc().map_err(verb("dealloc_pd"))?;
    p1.dealloc().map_err(verb("dealloc_pd"))?;
    Ok(())
}

/// UD: each message from HCA 0 to HCA 1 and back through address handles; the receiver
/// checks the payload after the 40-byte GRH room and the source QP.
fn ud_exchange<H: Hal>(d0: &Device<H>, d1: &Device<H>) -> Result<(), Fail> {
    let (p0, p1) = (
        d0.alloc_pd().map_err(verb("alloc_pd"))?,
        d1.alloc_pd().map_err(verb("alloc_pd"))?,
    );
    let mut a = side(d0, &p0, QpType::Ud, UD_SIZE + GRH)?;
    let mut b = side(d1, &p1, QpType::Ud, UD_SIZE + GRH)?;
    for s in [&mut a, &mut b] {
        s.qp.to_init(1, 0, AccessFlags::empty(), QKEY)
            .map_err(verb("UD to INIT"))?;
        s.qp.to_rtr(0, 0, AhAttr::default(), Mtu::Mtu1024)
            .map_err(verb("UD to RTR"))?;
        s.qp.to_rts(0).map_err(verb("UD to RTS"))?;
    }
    let (an, bn) = (a.qp.qpn().raw(), b.qp.qpn().raw());
    let path = |dlid| AhAttr {
        dlid,
        port_num: 1,
        ..AhAttr::default()
    };
    let ah_ab = p0.create_ah(path(b.lid)).map_err(verb("create_ah"))?;
    let ah_ba = p1.create_ah(path(a.lid)).map_err(verb("create_ah"))?;
    let to_b = ah_ab.dest(bn, QKEY).map_err(verb("UD destination"))?;
    let to_a = ah_ba.dest(an, QKEY).map_err(verb("UD destination"))?;
    println!("ud: QP {an:#x} <-> QP {bn:#x}, {UD_ITERS} x {UD_SIZE} bytes each way");
    for i in 0..UD_ITERS {
        a.fill(i, UD_SIZE)?;
        b.post_recv()?;
        a.post_recv()?;
        a.send(UD_SIZE, Some(to_b))?;
        a.wait("ud send", d0.hal())?;
        let r = b.wait("ud receive", d1.hal())?;
        if r.byte_len as usize != UD_SIZE + GRH || r.src_qp != an || !b.check(i, GRH, UD_SIZE)? {
            return Err(Fail::Data("ud receive", i));
        }
        b.echo(GRH, UD_SIZE)?;
        b.send(UD_SIZE, Some(to_a))?;
        b.wait("ud echo send", d1.hal())?;
        let r = a.wait("ud echo receive", d0.hal())?;
        if r.byte_len as usize != UD_SIZE + GRH || r.src_qp != bn || !a.check(i, GRH, UD_SIZE)? {
            return Err(Fail::Data("ud echo", i));
        }
    }
    println!("ud: {UD_ITERS} exchanges checked byte for byte");
    a.destroy()?;
    b.destroy()?;
    p0.dealloc().map_err(verb("dealloc_pd"))?;
    p1.dealloc().map_err(verb("dealloc_pd"))?;
    Ok(())
}
