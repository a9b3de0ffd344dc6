//! The model served over vfio-user (rust-vmm `vfio_user`): PCI config space, BAR0 trapped to
//! the model, guest memory from memfd DMA maps, MSI-X through eventfds, firmware work on the
//! engine thread, reset (RIG.md §3.1).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use vfio_bindings::bindings::vfio::{
    vfio_region_info, VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_INFO_NORESIZE, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS,
    VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::{DmaMapFlags, DmaUnmapFlags, IrqInfo, Server, ServerBackend, ServerRegion};

use crate::clock::SimClock;
use crate::config::ModelConfig;
use crate::engine::{Device, Engine};
use crate::guest_memory::GuestMemory;
use crate::hca::Hca;
use crate::pci::{command, PciConfig};

/// Errors of the vfio-user server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The socket could not be created or served.
    #[error("vfio-user server on {path}: {source}")]
    Server {
        /// Socket path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: vfio_user::Error,
    },
    /// The gate closed the client's connection (a message it could not frame, a client that
    /// stopped mid-message, a server that did not answer).
    #[error("vfio-user client on {path}: {source}")]
    Gate {
        /// Socket path.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::vfio_user_gate::GateError,
    },
    /// The trace file could not be created.
    #[error("cannot create trace file {path}: {source}")]
    Trace {
        /// Trace path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

type IrqFds = Arc<Mutex<Vec<Option<File>>>>;

/// One HCA served over vfio-user.
pub struct Backend {
    dev: Arc<Device>,
    _engine: Engine,
    mem: GuestMemory,
    pci: PciConfig,
    cfg: ModelConfig,
    irqs: IrqFds,
}

fn region(index: u32, size: u64, flags: u32) -> ServerRegion {
    ServerRegion {
        region_info: vfio_region_info {
            argsz: size_of::<vfio_region_info>() as u32,
            flags,
            index,
            cap_offset: 0,
            size,
            offset: 0,
        },
        sparse_areas: Vec::new(),
        mmap_fd: None,
    }
}

/// The regions the device offers: BAR0 (trapped, no mmap) and config space (4 KiB, so QEMU
/// treats it as PCI Express); the rest empty.
pub fn regions(cfg: &ModelConfig) -> Vec<ServerRegion> {
    let rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
    (0..VFIO_PCI_NUM_REGIONS)
        .map(|i| match i {
            0 => region(i, cfg.bar0_size as u64, rw),
            VFIO_PCI_CONFIG_REGION_INDEX => region(i, crate::pci::CONFIG_BYTES as u64, rw),
            _ => region(i, 0, 0),
        })
        .collect()
}

/// The interrupts the device offers: INTx (unused), MSI-X with `msix_vectors`, and ERR/REQ
/// with one eventfd each (so QEMU can enable error recovery).
pub fn irqs(cfg: &ModelConfig) -> Vec<IrqInfo> {
    (0..VFIO_PCI_NUM_IRQS)
        .map(|index| {
            let (flags, count) = match index {
                0 => (VFIO_IRQ_INFO_EVENTFD, 1),
                VFIO_PCI_MSIX_IRQ_INDEX => (
                    VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE,
                    u32::from(cfg.msix_vectors),
                ),
                3 | 4 => (VFIO_IRQ_INFO_EVENTFD, 1),
                _ => (0, 0),
            };
            IrqInfo {
                index,
                flags,
                count,
            }
        })
        .collect()
}

impl Backend {
    /// A device `cfg` describes, joined to `fabric` if given; when `trace` is given, every
    /// completed command (and every DMA fault) is appended to it as it happens.
    ///
    /// # Errors
    /// When the trace file cannot be created.
    pub fn new(
        cfg: ModelConfig,
        trace: Option<&Path>,
        fabric: Option<&Arc<crate::fabric::Fabric>>,
    ) -> Result<Self, ServeError> {
        let mem = GuestMemory::new();
        let mut hca = Hca::new(
            cfg.clone(),
            Arc::new(SimClock::real()),
            Arc::new(mem.clone()),
        );
        if let Some(f) = fabric {
            hca.set_fabric(f.clone());
        }
        let dev = Device::new(hca);
        if let Some(f) = fabric {
            f.join(
                cfg.base_lid,
                u16::from(cfg.num_ports) << cfg.lmc.min(7),
                &dev,
            );
        }
        let irqs: IrqFds = Arc::new(Mutex::new(Vec::new()));
        let fds = irqs.clone();
        dev.lock().set_irq_sink(Box::new(move |v| {
            let fds = fds.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(Some(mut f)) = fds.get(usize::from(v)).map(|f| f.as_ref()) {
                let _ = f.write_all(&1u64.to_ne_bytes());
            }
        }));
        // Truncated, then reopened for appending: every writer (this engine, the END line of
        // `serve`) adds at the end of the file and none overwrites another.
        let open = |p: &Path| {
            File::create(p)
                .and_then(|_| std::fs::OpenOptions::new().append(true).open(p))
                .map_err(|source| ServeError::Trace {
                    path: p.into(),
                    source,
                })
        };
        let mut out = match trace {
            Some(p) => Some(open(p)?),
            None => None,
        };
        let (mut cmds, mut faults) = (0, 0);
        let engine = Engine::start(dev.clone(), move |h| {
            if let Some(f) = out.as_mut() {
                for t in h.logs.trace.since(cmds) {
                    let _ = writeln!(f, "CMD {t}");
                }
                for d in h.logs.dma_faults.since(faults) {
                    let _ = writeln!(f, "DMA-FAULT {d}");
                }
            }
            cmds = h.logs.trace.recorded();
            faults = h.logs.dma_faults.recorded();
        });
        Ok(Backend {
            pci: PciConfig::new(&cfg),
            dev,
            _engine: engine,
            mem,
            cfg,
            irqs,
        })
    }

    /// What the device did besides commands, for the trace's `WORK` line: UMR work requests
    /// executed and refused, the port 1 traffic counters, how many queues were created with a
    /// non-zero `page_offset`, how many CQEs carried their data (scatter to CQE), and how many
    /// WQE words came through BlueFlame registers.
    pub fn work_summary(&self) -> String {
        let h = self.dev.lock();
        let (umr_ok, umr_failed) = h.umr_counts();
        let c = h.port_counters(1).unwrap_or_default();
        let mut s = format!(
            "umr_ok={umr_ok} umr_failed={umr_failed} xmit_packets={} rcv_packets={} \
             queues_at_page_offset={} scattered_to_cqe={} blueflame_words={}",
            c.xmit_packets,
            c.rcv_packets,
            h.offset_queues(),
            h.scattered_to_cqe(),
            h.blueflame_words()
        );
        if let Some(w) = h.eth_work() {
            s += &format!(
                " eth_frames_sent={} eth_frames_received={} lso_sends={} lso_segments={} \
                 csum_offloads={} rss_hashed={} eth_rx_dropped={}",
                w.frames_sent,
                w.frames_received,
                w.lso_sends,
                w.lso_segments,
                w.csum_offloads,
                w.rss_hashed,
                w.rx_dropped
            );
        }
        s
    }

    /// The device's state in one line: firmware state, pages held, EQs, UARs, DMA faults.
    pub fn summary(&self) -> String {
        let h = self.dev.lock();
        format!(
            "state={:?} pages_held={} eqs={} uars={} dma_faults={}",
            h.state(),
            h.pages_held(),
            h.objects.eqs.len(),
            h.objects.uars.len(),
            h.logs.dma_faults.recorded()
        )
    }

    /// The guest memory the device sees.
    pub fn memory(&self) -> &GuestMemory {
        &self.mem
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.dev
    }
}

impl ServerBackend for Backend {
    fn region_read(
        &mut self,
        region: u32,
        offset: u64,
        data: &mut [u8],
    ) -> Result<(), std::io::Error> {
        match region {
            0 if offset.saturating_add(data.len() as u64) <= self.cfg.bar0_size as u64 => {
                self.dev.lock().mmio_read_bytes(offset as usize, data)
            }
            VFIO_PCI_CONFIG_REGION_INDEX => self.pci.read(offset as usize, data),
            _ => data.fill(0xff),
        }
        Ok(())
    }

    fn region_write(
        &mut self,
        region: u32,
        offset: u64,
        data: &[u8],
    ) -> Result<(), std::io::Error> {
        match region {
            0 if offset.saturating_add(data.len() as u64) <= self.cfg.bar0_size as u64 => {
                self.dev.lock().mmio_write_bytes(offset as usize, data);
                self.dev.notify();
            }
            VFIO_PCI_CONFIG_REGION_INDEX => {
                self.pci.write(offset as usize, data);
                if self.pci.take_flr() {
                    // Function Level Reset: firmware forgets every object and page, and the
                    // configuration space returns to its reset values.
                    log::info!("function level reset");
                    return self.reset();
                }
                let bm = self.pci.command() & command::BUS_MASTER != 0;
                self.mem.bus_master().store(bm, Ordering::Release);
            }
            _ => log::warn!("write to region {region} at {offset:#x} ignored"),
        }
        Ok(())
    }

    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> Result<(), std::io::Error> {
        let writable = flags.contains(DmaMapFlags::WRITE);
        match self.mem.map(address, size, offset, fd, writable) {
            Ok(()) => Ok(()),
            // A file that can shrink under the mapping is refused (an error reply).
            Err(e @ crate::guest_memory::MapError::Unsealed { .. }) => {
                log::warn!("{e}");
                Err(std::io::Error::other(e.to_string()))
            }
            // DMA there would fault; QEMU also maps ROM areas without an fd, harmlessly.
            Err(e) => {
                log::debug!("{e}");
                Ok(())
            }
        }
    }

    fn dma_unmap(
        &mut self,
        flags: DmaUnmapFlags,
        address: u64,
        size: u64,
    ) -> Result<(), std::io::Error> {
        if flags.contains(DmaUnmapFlags::UNMAP_ALL) {
            self.mem.clear();
        } else {
            self.mem.unmap(address, size);
        }
        Ok(())
    }

    fn reset(&mut self) -> Result<(), std::io::Error> {
        log::info!("device reset");
        self.dev.lock().reset();
        self.pci = PciConfig::new(&self.cfg);
        self.mem.bus_master().store(false, Ordering::Release);
        Ok(())
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> Result<(), std::io::Error> {
        if index != VFIO_PCI_MSIX_IRQ_INDEX {
            return Ok(());
        }
        let mut irqs = self.irqs.lock().unwrap_or_else(|e| e.into_inner());
        if count == 0 {
            irqs.clear();
            return Ok(());
        }
        if flags & VFIO_IRQ_SET_DATA_EVENTFD != 0 {
            let end = start
                .checked_add(count)
                .filter(|&e| e <= self.cfg.msix_vectors.into())
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?
                as usize;
            if irqs.len() < end {
                irqs.resize_with(end, || None);
            }
            let mut fds = fds.into_iter();
            for slot in &mut irqs[start as usize..end] {
                *slot = fds.next();
            }
        }
        Ok(())
    }
}

/// Serves one HCA on the Unix socket `path` until the client disconnects; with `fabric`, it
/// can reach the other HCAs joined to it. Every message passes the gate
/// ([`crate::vfio_user_gate`]) first; the server library listens on a private socket next to
/// `path` that only the gate connects to.
///
/// # Errors
/// When a socket cannot be bound or accepted, or the gate closed the connection (the reason,
/// also logged).
pub fn serve(
    path: &Path,
    cfg: ModelConfig,
    trace: Option<&Path>,
    fabric: Option<&Arc<crate::fabric::Fabric>>,
) -> Result<(), ServeError> {
    let err = |source| ServeError::Server {
        path: path.into(),
        source,
    };
    let io_err = |source: std::io::Error| ServeError::Server {
        path: path.into(),
        source: vfio_user::Error::SocketAccept(source),
    };
    let inner_path = {
        let mut p = path.as_os_str().to_owned();
        p.push(".lib");
        std::path::PathBuf::from(p)
    };
    let _ = std::fs::remove_file(&inner_path);
    let limits = crate::vfio_user_gate::Limits {
        regions: regions(&cfg).iter().map(|r| r.region_info.size).collect(),
        irqs: irqs(&cfg).iter().map(|i| i.count).collect(),
    };
    let server = Server::new(&inner_path, true, irqs(&cfg), regions(&cfg)).map_err(err)?;
    let mut backend = Backend::new(cfg, trace, fabric)?;
    let _ = std::fs::remove_file(path);
    let listener = std::os::unix::net::UnixListener::bind(path).map_err(io_err)?;
    log::info!("serving mlx5 model on {}", path.display());
    // The library serves the gate's connection on its own thread; a panic there (the gate
    // should leave none) ends that connection, not the process.
    let lib = std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.run(&mut backend)));
        (r, backend)
    });
    let inner = std::os::unix::net::UnixStream::connect(&inner_path).map_err(io_err)?;
    let accepted = listener.accept();
    // One client per socket: the path goes once it is taken (or failed).
    drop(listener);
    let _ = std::fs::remove_file(path);
    let (client, _) = accepted.map_err(io_err)?;
    let gate = crate::vfio_user_gate::relay(&client, &inner, &limits);
    if let Err(e) = &gate {
        log::warn!("closing the client on {}: {e}", path.display());
    }
    drop(client);
    drop(inner);
    let (r, backend) = lib
        .join()
        .unwrap_or_else(|_| unreachable!("the library thread catches its panics"));
    let _ = std::fs::remove_file(&inner_path);
    let r = match r {
        Ok(r) => r.map_err(err),
        Err(_) => {
            log::error!("the vfio-user library panicked; connection dropped");
            Ok(())
        }
    };
    let summary = backend.summary();
    let work = backend.work_summary();
    // Stops the engine thread, so its last trace lines are written before the END line.
    drop(backend);
    log::info!("client on {} disconnected: {summary}", path.display());
    if let Some(t) = trace {
        if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(t) {
            let _ = writeln!(f, "WORK {work}");
            let _ = writeln!(f, "END {summary}");
        }
    }
    r?;
    gate.map_err(|e| ServeError::Gate {
        path: path.into(),
        source: e,
    })
}
