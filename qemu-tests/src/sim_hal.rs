//! `SimHal`: the driver's [`Hal`] routed into the in-process model. MMIO calls the device;
//! DMA memory comes from a [`HostMemory`] arena the device reaches through its address space.
//!
//! Two drives: [`Drive::Synchronous`] runs firmware work inside the doorbell write (and in
//! `relax`/`delay`) on a virtual clock, so tests are deterministic and instant;
//! [`Drive::Background`] runs it on an engine thread on the real clock, so the driver must
//! really poll.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use bareverbs_hal::mmio::check_access;
use bareverbs_hal::{BarOffset, DmaBuf, DmaError, Hal, Instant, Mmio, MmioError};

use crate::clock::SimClock;
use crate::config::{Faults, ModelConfig};
use crate::dma::DmaFault;
use crate::engine::{Device, Engine};
use crate::hca::{Hca, HcaState};
use crate::memory::{HostMemory, SimDma};
use crate::trace::{ModelEvent, TraceEntry};

/// How firmware work is driven.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drive {
    /// Work runs inside MMIO writes and waits, on a virtual clock.
    Synchronous,
    /// Work runs on an engine thread, on the real clock.
    Background,
}

struct Shared {
    dev: Arc<Device>,
    clock: Arc<SimClock>,
    drive: Drive,
    interrupts: Vec<AtomicU64>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Hca> {
        self.dev.lock()
    }
}

/// BAR0 of the modelled HCA.
pub struct SimMmio {
    shared: Arc<Shared>,
    len: usize,
}

impl Mmio for SimMmio {
    fn len(&self) -> usize {
        self.len
    }

    fn try_read32(&self, off: BarOffset) -> Result<u32, MmioError> {
        check_access(off.0, 4, self.len)?;
        Ok(self.shared.lock().mmio_read32(off.0))
    }

    fn try_write32(&self, off: BarOffset, val: u32) -> Result<(), MmioError> {
        check_access(off.0, 4, self.len)?;
        self.shared.lock().mmio_write32(off.0, val);
        self.shared.dev.notify();
        Ok(())
    }

    fn try_write64(&self, off: BarOffset, val: u64) -> Result<(), MmioError> {
        check_access(off.0, 8, self.len)?;
        self.shared.lock().mmio_write64(off.0, val);
        self.shared.dev.notify();
        Ok(())
    }

    fn try_write64_block(&self, off: BarOffset, words: &[u64]) -> Result<(), MmioError> {
        bareverbs_hal::check_block(off.0, words.len(), self.len)?;
        let mut hca = self.shared.lock();
        for (i, w) in words.iter().enumerate() {
            hca.mmio_write64(off.0 + 8 * i, *w);
        }
        drop(hca);
        self.shared.dev.notify();
        Ok(())
    }
}

/// The in-process platform: the driver's `Hal` backed by the model.
pub struct SimHal {
    shared: Arc<Shared>,
    mmio: SimMmio,
    mem: HostMemory,
    /// Held for its Drop, which stops and joins the engine thread.
    _engine: Option<Engine>,
}

impl SimHal {
    /// A new HCA with `cfg`, driven as `drive`.
    pub fn new(cfg: ModelConfig, drive: Drive) -> Self {
        let clock = Arc::new(match drive {
            Drive::Synchronous => SimClock::virtual_clock(),
            Drive::Background => SimClock::real(),
        });
        let mem = HostMemory::new();
        let vectors = usize::from(cfg.msix_vectors);
        let bar = cfg.bar0_size;
        let hca = Hca::new(cfg, clock.clone(), Arc::new(mem.clone()));
        let shared = Arc::new(Shared {
            dev: Device::new(hca),
            clock,
            drive,
            interrupts: (0..vectors).map(|_| AtomicU64::new(0)).collect(),
        });
        let weak = Arc::downgrade(&shared);
        shared.lock().set_irq_sink(Box::new(move |v| {
            if let Some(s) = weak.upgrade() {
                if let Some(c) = s.interrupts.get(usize::from(v)) {
                    c.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
        let engine =
            (drive == Drive::Background).then(|| Engine::start(shared.dev.clone(), |_| {}));
        SimHal {
            mmio: SimMmio {
                shared: shared.clone(),
                len: bar,
            },
            shared,
            mem,
            _engine: engine,
        }
    }

    /// A new HCA with `cfg` joined to `fabric` (give each HCA its own `base_lid`).
    pub fn on_fabric(
        cfg: ModelConfig,
        drive: Drive,
        fabric: &std::sync::Arc<crate::fabric::Fabric>,
    ) -> Self {
        let (base, lids) = (cfg.base_lid, u16::from(cfg.num_ports) << cfg.lmc.min(7));
        let hal = Self::new(cfg, drive);
        hal.shared.lock().set_fabric(fabric.clone());
        fabric.join(base, lids, &hal.shared.dev);
        hal
    }

    /// A default ConnectX-5 model, driven synchronously.
    pub fn synchronous() -> Self {
        Self::new(ModelConfig::default(), Drive::Synchronous)
    }

    /// Inspection and fault injection for tests.
    pub fn model(&self) -> Model {
        Model {
            shared: self.shared.clone(),
            mem: self.mem.clone(),
        }
    }
}

// SAFETY: bar0 reaches the model for the life of self; dma_alloc returns HostMemory
// allocations (zeroed, aligned at CPU and IOVA, see memory.rs); now() is monotonic (virtual
// time only grows, real time is Instant-based).
unsafe impl Hal for SimHal {
    type Mmio = SimMmio;
    type Dma = SimDma;

    fn bar0(&self) -> &SimMmio {
        &self.mmio
    }

    fn dma_alloc(&self, len: usize, align: usize) -> Result<DmaBuf<SimDma>, DmaError> {
        self.mem.alloc(len, align).map(DmaBuf::new)
    }

    fn dma_domain(&self) -> bareverbs_hal::DmaDomain {
        self.mem.domain()
    }

    /// The model's function-level reset (`Hca::reset`).
    fn function_reset(&self) -> Result<(), bareverbs_hal::ResetError> {
        self.shared.lock().reset();
        Ok(())
    }

    fn now(&self) -> Instant {
        Instant(self.shared.clock.now_ns())
    }

    fn delay(&self, d: Duration) {
        self.shared.clock.advance(d);
        if self.shared.drive == Drive::Synchronous {
            self.shared.lock().run_due();
        }
    }

    /// The model's memory is reached by device address as the device reaches it.
    fn dma_by_iova(&self) -> bool {
        true
    }

    fn dma_read(&self, iova: bareverbs_hal::Iova, dst: &mut [u8]) -> Result<(), DmaError> {
        use crate::dma::AddressSpace;
        let len = dst.len();
        self.mem
            .read(iova.0, dst)
            .map_err(|_| DmaError::NotMapped { iova: iova.0, len })
    }

    fn dma_write(&self, iova: bareverbs_hal::Iova, src: &[u8]) -> Result<(), DmaError> {
        use crate::dma::AddressSpace;
        self.mem
            .write(iova.0, src)
            .map_err(|_| DmaError::NotMapped {
                iova: iova.0,
                len: src.len(),
            })
    }

    fn relax(&self) {
        match self.shared.drive {
            Drive::Synchronous => self.delay(Duration::from_micros(1)),
            Drive::Background => std::thread::yield_now(),
        }
    }
}

/// A handle on the model behind a `SimHal`: what firmware did, and switches to make it fail.
#[derive(Clone)]
pub struct Model {
    shared: Arc<Shared>,
    mem: HostMemory,
}

impl Model {
    /// Runs `f` on the device under its lock.
    pub fn with<R>(&self, f: impl FnOnce(&mut Hca) -> R) -> R {
        f(&mut self.shared.lock())
    }

    /// Changes the injected faults.
    pub fn set_faults(&self, f: impl FnOnce(&mut Faults)) {
        self.with(|h| {
            f(&mut h.cfg.faults);
            h.cmdq.fault_hits.clear();
            h.sync_faults();
        });
    }

    /// Commands executed so far: the most recent [`LOG_LIMIT`](crate::trace::LOG_LIMIT).
    pub fn trace(&self) -> Vec<TraceEntry> {
        self.with(|h| h.logs.trace.to_vec())
    }

    /// The command trace, one line per command.
    pub fn trace_text(&self) -> String {
        self.trace().iter().map(|t| format!("{t}\n")).collect()
    }

    /// What the model observed or did, in order: the most recent
    /// [`LOG_LIMIT`](crate::trace::LOG_LIMIT) events.
    pub fn events(&self) -> Vec<ModelEvent> {
        self.with(|h| h.logs.events.to_vec())
    }

    /// Events dropped from [`Self::events`] to keep it bounded (the oldest go first).
    pub fn events_dropped(&self) -> u64 {
        self.with(|h| h.logs.events.dropped())
    }

    /// DMA faults seen so far: the most recent [`LOG_LIMIT`](crate::trace::LOG_LIMIT).
    pub fn dma_faults(&self) -> Vec<DmaFault> {
        self.with(|h| h.logs.dma_faults.to_vec())
    }

    /// DMA faults seen so far, those [`Self::dma_faults`] no longer holds included.
    pub fn dma_faults_recorded(&self) -> u64 {
        self.with(|h| h.logs.dma_faults.recorded())
    }

    /// Pages firmware holds.
    pub fn pages_held(&self) -> usize {
        self.with(|h| h.pages.len())
    }

    /// Life-cycle state.
    pub fn state(&self) -> HcaState {
        self.with(|h| h.state)
    }

    /// Number of EQs.
    pub fn eq_count(&self) -> usize {
        self.with(|h| h.objects.eqs.len())
    }

    /// Number of allocated UARs.
    pub fn uar_count(&self) -> usize {
        self.with(|h| h.objects.uars.len())
    }

    /// The value the driver wrote to HOST_ENDIANNESS, if any.
    pub fn host_endianness(&self) -> Option<u8> {
        self.with(|h| h.host_endianness)
    }

    /// Firmware asks for `n` pages (negative: gives pages back) with a page-request EQE.
    pub fn request_pages(&self, n: i32) {
        self.with(|h| h.request_pages(n));
    }

    /// Port `port` goes up or down.
    pub fn set_port(&self, port: u8, up: bool) {
        self.with(|h| h.set_port(port, up));
    }

    /// Sets the health syndrome and the "reset requested" bit.
    pub fn set_health(&self, synd: u8, rfr: bool) {
        self.with(|h| {
            h.init_seg.health_synd = synd;
            h.init_seg.health_rfr = rfr;
        });
    }

    /// Interrupts raised on `vector`.
    pub fn interrupts(&self, vector: u16) -> u64 {
        self.shared
            .interrupts
            .get(usize::from(vector))
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// The DMA arena (limits, injected allocation failures, live allocations).
    pub fn memory(&self) -> &HostMemory {
        &self.mem
    }
}
