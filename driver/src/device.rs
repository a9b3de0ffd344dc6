//! The HCA as the driver holds it: the command interface with its one generic `exec`, the
//! pages given to firmware, the asynchronous event queue, and what is known about the device.

use core::time::Duration;

use bareverbs_firmware_cmd::commands::ReadOnly;
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{Command, Eqn, Layout, Opcode, View, ViewMut};
use bareverbs_hal::{Deadline, Hal};
use heapless::{Deque, Vec};

use crate::caps::Caps;
use crate::cmdq::{CmdQueue, Slot};
use crate::config::Config;
use crate::eq::{EventQueue, EQE_BYTES};
use crate::error::{CmdFailure, Error};
use crate::health::{device_gone, HealthMonitor, HealthReport};
use crate::pages::PageManager;
use crate::port::PortInfo;
use crate::trace::{Outcome, Trace, TraceRecord};
use crate::uar::Uar;
use bareverbs_firmware_cmd::ifc::eqe::data as eqe_data;

/// Addresses per MANAGE_PAGES command (2 KiB of addresses, five mailbox blocks): the
/// command is built on the stack, and `no_std` stacks are small (a unikernel's, a kernel
/// thread's), so a request for more pages takes several commands.
pub const PAGES_PER_COMMAND: usize = 256;
const PAGES_MSG: usize = 16 + 8 * PAGES_PER_COMMAND;
/// Ports the driver keeps state for.
pub const MAX_PORTS: usize = 4;
/// Asynchronous events kept until the user reads them.
pub const EVENT_QUEUE_LEN: usize = 32;

/// An asynchronous event the device reported: `struct ibv_async_event`, its type named as
/// `enum ibv_event_type` names it and carrying the object it concerns. mlx5 event types map
/// as Linux 6.12 mlx5_ib does (`mlx5_ib_qp_event`, `mlx5_ib_srq_event`, `mlx5_ib_cq_event`,
/// `handle_port_change`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum AsyncEvent {
    /// A completion event for an armed CQ (`ibv_get_cq_event`).
    Completion {
        /// The CQ.
        cqn: u32,
    },
    /// `IBV_EVENT_CQ_ERR`: the CQ overran or its context is bad (CQ_ERROR).
    CqErr {
        /// The CQ.
        cqn: u32,
        /// Firmware's syndrome (1 overrun, 2 access violation).
        syndrome: u8,
    },
    /// `IBV_EVENT_QP_FATAL` (WQ_CATAS_ERROR).
    QpFatal {
        /// The QP.
        qpn: u32,
    },
    /// `IBV_EVENT_QP_REQ_ERR` (WQ_INVAL_REQ_ERROR).
    QpReqErr {
        /// The QP.
        qpn: u32,
    },
    /// `IBV_EVENT_QP_ACCESS_ERR` (WQ_ACCESS_ERROR).
    QpAccessErr {
        /// The QP.
        qpn: u32,
    },
    /// `IBV_EVENT_COMM_EST`: a message arrived at a QP in RTR (COMM_EST).
    CommEst {
        /// The QP.
        qpn: u32,
    },
    /// `IBV_EVENT_SQ_DRAINED` (SQ_DRAINED).
    SqDrained {
        /// The QP.
        qpn: u32,
    },
    /// `IBV_EVENT_PATH_MIG`: the QP now uses its alternate path (PATH_MIG).
    PathMig {
        /// The QP.
        qpn: u32,
    },
    /// `IBV_EVENT_PATH_MIG_ERR` (PATH_MIG_FAILED).
    PathMigErr {
        /// The QP.
        qpn: u32,
    },
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP on an SRQ went to ERR and will take no more
    /// receives from it (SRQ_LAST_WQE).
    QpLastWqeReached {
        /// The QP.
        qpn: u32,
    },
    /// `IBV_EVENT_SRQ_ERR` (SRQ_CATAS_ERROR).
    SrqErr {
        /// The SRQ.
        srqn: u32,
    },
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: fewer WQEs than the armed limit are posted
    /// (SRQ_RQ_LIMIT); the limit is disarmed.
    SrqLimitReached {
        /// The SRQ.
        srqn: u32,
    },
    /// `IBV_EVENT_PORT_ACTIVE` (PORT_CHANGE, subtype ACTIVE).
    PortActive {
        /// Port number.
        port: u8,
    },
    /// `IBV_EVENT_PORT_ERR` (PORT_CHANGE, subtype DOWN or INITIALIZED).
    PortErr {
        /// Port number.
        port: u8,
    },
    /// `IBV_EVENT_LID_CHANGE` (PORT_CHANGE, subtype LID).
    LidChange {
        /// Port number.
        port: u8,
    },
    /// `IBV_EVENT_PKEY_CHANGE` (PORT_CHANGE, subtype PKEY).
    PkeyChange {
        /// Port number.
        port: u8,
    },
    /// `IBV_EVENT_GID_CHANGE` (PORT_CHANGE, subtype GUID).
    GidChange {
        /// Port number.
        port: u8,
    },
    /// `IBV_EVENT_CLIENT_REREGISTER` (PORT_CHANGE, subtype CLIENT_REREG).
    ClientReregister {
        /// Port number.
        port: u8,
    },
    /// `IBV_EVENT_DEVICE_FATAL`: an INTERNAL_ERROR event, or the first fatal health sensor
    /// that [`Device::poll_events`] or [`Device::check_health`] reads.
    DeviceFatal,
    /// A DCT finished draining (DCT_DRAINED); [`Dct::destroy`](crate::verbs::Dct::destroy)
    /// waits for it and takes it from the queue.
    DctDrained {
        /// The DCT.
        dctn: u32,
    },
    /// A request with a wrong access key reached a DCT armed with
    /// [`Dct::arm_key_violation`](crate::verbs::Dct::arm_key_violation) (DCT_KEY_VIOLATION).
    DctKeyViolation {
        /// The DCT.
        dctn: u32,
    },
    /// Any other event, with its raw type and subtype.
    Other {
        /// Event type.
        event_type: u8,
        /// Event subtype.
        sub_type: u8,
    },
}

impl AsyncEvent {
    /// Decodes an EQE (not a page request or command completion) into the event it reports.
    pub(crate) fn from_eqe(eqe: &[u8; EQE_BYTES]) -> Self {
        let (ty, sub) = (eqe[1], eqe[3]);
        let Ok(e) = View::<Eqe>::new_checked(eqe) else {
            return AsyncEvent::Other {
                event_type: ty,
                sub_type: sub,
            };
        };
        let obj = eqe_data::<EqeQpSrq>(&e).get32(eqe_qp_srq::qp_srq_n);
        let port = eqe_data::<EqePortState>(&e).get32(eqe_port_state::port) as u8;
        match ty {
            event_type::COMP => AsyncEvent::Completion {
                cqn: eqe_data::<EqeComp>(&e).get32(eqe_comp::cqn),
            },
            event_type::CQ_ERROR => {
                let d = eqe_data::<EqeCqErr>(&e);
                AsyncEvent::CqErr {
                    cqn: d.get32(eqe_cq_err::cqn),
                    syndrome: d.get32(eqe_cq_err::syndrome) as u8,
                }
            }
            event_type::WQ_CATAS_ERROR => AsyncEvent::QpFatal { qpn: obj },
            event_type::WQ_INVAL_REQ_ERROR => AsyncEvent::QpReqErr { qpn: obj },
            event_type::WQ_ACCESS_ERROR => AsyncEvent::QpAccessErr { qpn: obj },
            event_type::COMM_EST => AsyncEvent::CommEst { qpn: obj },
            event_type::SQ_DRAINED => AsyncEvent::SqDrained { qpn: obj },
            event_type::PATH_MIG => AsyncEvent::PathMig { qpn: obj },
            event_type::PATH_MIG_FAILED => AsyncEvent::PathMigErr { qpn: obj },
            event_type::SRQ_LAST_WQE => AsyncEvent::QpLastWqeReached { qpn: obj },
            event_type::SRQ_CATAS_ERROR => AsyncEvent::SrqErr { srqn: obj },
            event_type::SRQ_RQ_LIMIT => AsyncEvent::SrqLimitReached { srqn: obj },
            event_type::INTERNAL_ERROR => AsyncEvent::DeviceFatal,
            event_type::DCT_DRAINED | event_type::DCT_KEY_VIOLATION => {
                let at = 0x20 + EQE_DCT_DCTN;
                let dctn = u32::from_be_bytes([eqe[at], eqe[at + 1], eqe[at + 2], eqe[at + 3]])
                    & 0xff_ffff;
                if ty == event_type::DCT_DRAINED {
                    AsyncEvent::DctDrained { dctn }
                } else {
                    AsyncEvent::DctKeyViolation { dctn }
                }
            }
            event_type::PORT_CHANGE => match sub {
                port_change_subtype::ACTIVE => AsyncEvent::PortActive { port },
                port_change_subtype::DOWN | port_change_subtype::INITIALIZED => {
                    AsyncEvent::PortErr { port }
                }
                port_change_subtype::LID => AsyncEvent::LidChange { port },
                port_change_subtype::PKEY => AsyncEvent::PkeyChange { port },
                port_change_subtype::GUID => AsyncEvent::GidChange { port },
                port_change_subtype::CLIENT_REREG => AsyncEvent::ClientReregister { port },
                _ => AsyncEvent::Other {
                    event_type: ty,
                    sub_type: sub,
                },
            },
            _ => AsyncEvent::Other {
                event_type: ty,
                sub_type: sub,
            },
        }
    }
}

/// Special memory keys (QUERY_SPECIAL_CONTEXTS).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SpecialKeys {
    /// Reserved lkey.
    pub resd_lkey: u32,
    /// Null mkey (valid when the capability says so).
    pub null_mkey: u32,
    /// Scatter-list terminator mkey.
    pub terminate_scatter_list_mkey: u32,
    /// Dump-fill mkey.
    pub dump_fill_mkey: u32,
}

/// What the driver learned about the device during bring-up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DeviceInfo {
    /// Firmware version: major, minor, subminor.
    pub fw_version: (u16, u16, u16),
    /// Command interface revision.
    pub cmdif_rev: u16,
    /// Interface step sequence id in use.
    pub issi: u16,
    /// The function runs on the adapter's embedded CPU.
    pub embedded_cpu: bool,
    /// Limits and features.
    pub caps: Caps,
    /// IEEE vendor id (OUI).
    pub vendor_id: u32,
    /// Board id (PSID).
    pub psid: [u8; 16],
    /// Special keys.
    pub special: SpecialKeys,
    /// Node GUID.
    pub node_guid: u64,
    /// System image GUID.
    pub sys_image_guid: u64,
}

impl DeviceInfo {
    /// The board id as text.
    pub fn board_id(&self) -> &str {
        let end = self
            .psid
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.psid.len());
        core::str::from_utf8(&self.psid[..end]).unwrap_or("")
    }
}

/// Life-cycle flags, so that every failure path undoes exactly what was done.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Progress {
    pub enabled: bool,
    pub initialized: bool,
}

/// A brought-up mlx5 HCA.
///
/// Control operations take `&self`: the command interface and the rest of the control state
/// sit behind a spin lock, so verbs objects can hold a reference to their device. Dropping it
/// tears the device down (ignoring errors); [`Device::teardown`] does the same and reports
/// them.
pub struct Device<H: Hal> {
    pub(crate) hal: H,
    pub(crate) cfg: Config,
    pub(crate) info: DeviceInfo,
    pub(crate) ctl: spin::Mutex<Control<H>>,
    /// Per-QP bookkeeping shared by posting and polling (never by commands), each QP's in a
    /// slot with its own lock.
    pub(crate) books: crate::wq::book::Books<H>,
    /// Bumped when completions of a destroyed or reset QP wait in `Control::cq_purges` for
    /// their CQ's next poll (see `verbs/cq_clean.rs`).
    pub(crate) purge_epoch: core::sync::atomic::AtomicU32,
    /// Set once a fatal error was reported: posting is refused and CQs complete what was
    /// posted in software (`verbs/cq_flush.rs`).
    pub(crate) fatal: core::sync::atomic::AtomicBool,
    /// Receive rings of the SRQs, by SRQ number, for posting and polling.
    pub(crate) srq_books: crate::wq::srq_ring::SrqBooks<H>,
}

/// The mutable control state: command queue, firmware pages, the async EQ and what it
/// reported, the trace, health and life-cycle flags.
pub(crate) struct Control<H: Hal> {
    pub(crate) cmd: CmdQueue<H>,
    pub(crate) cmd_timeout: Duration,
    pub(crate) pages: PageManager<H>,
    pub(crate) uar: Option<Uar>,
    pub(crate) eq: Option<EventQueue<H>>,
    pub(crate) ports: Vec<PortInfo, MAX_PORTS>,
    pub(crate) events: Deque<AsyncEvent, EVENT_QUEUE_LEN>,
    pub(crate) events_dropped: u64,
    pub(crate) trace: Trace,
    pub(crate) health: HealthMonitor,
    pub(crate) progress: Progress,
    /// The variant byte of the next memory key, so a reused key index gives a new key.
    pub(crate) key_byte: u8,
    /// How many QPs complete into each CQ (a CQ in use cannot be destroyed).
    pub(crate) cq_users: crate::table::Table<u32, { 2 * crate::wq::book::INLINE_QPS }>,
    /// Completions of destroyed or reset QPs each CQ drops at its next poll.
    pub(crate) cq_purges:
        crate::table::Table<crate::wq::cq_tables::Purges, { crate::wq::cq_tables::CQ_TABLE }>,
    /// CQs dropped while in use, destroyed when their last user goes (`cq_orphan.rs`).
    pub(crate) cq_orphans: crate::table::Table<
        crate::wq::cq_tables::Orphan<H::Dma>,
        { crate::wq::cq_tables::CQ_TABLE },
    >,
    /// How many QPs take receives from each SRQ (an SRQ in use cannot be destroyed).
    pub(crate) srq_users: crate::table::Table<u32, { crate::wq::srq_ring::INLINE_SRQS }>,
    /// A fatal error was queued as an event; the device enters its error state.
    pub(crate) fatal: bool,
    /// Completion events of the CQs without a channel, counted per CQ (never dropped).
    pub(crate) cq_events:
        crate::table::Table<crate::wq::cq_tables::CqEvents, { crate::wq::cq_tables::CQ_TABLE }>,
}

/// A zeroed input buffer viewed as a command's input layout.
pub(crate) fn input<C: Command>(buf: &mut [u8]) -> Result<ViewMut<'_, C::In>, Error> {
    Ok(ViewMut::zeroed(buf)?)
}

impl<H: Hal> Device<H> {
    /// Executes a read-only firmware command (a QUERY_*, [`ReadOnly`]): `input` holds the
    /// command's input (the opcode is filled in from `C`), `output` receives its output. It
    /// cannot disturb anything the driver owns, so it is safe.
    ///
    /// ```
    /// use bareverbs::{Config, Device};
    /// use bareverbs_firmware_cmd::commands::QueryHcaVportContext;
    /// use bareverbs_firmware_cmd::ifc::{query_hca_vport_context_in as f, QueryHcaVportContextIn};
    /// use bareverbs_firmware_cmd::{ifc::QueryHcaVportContextOut, Layout, ViewMut};
    /// let hal = bareverbs_model::SimHal::synchronous();
    /// let dev = Device::bring_up(&hal, Config::default()).unwrap();
    /// let mut i = [0u8; QueryHcaVportContextIn::BYTES];
    /// let mut o = [0u8; QueryHcaVportContextOut::BYTES];
    /// ViewMut::<QueryHcaVportContextIn>::zeroed(&mut i).unwrap().set(f::port_num, 1u8);
    /// dev.query::<QueryHcaVportContext>(&mut i, &mut o).unwrap();
    /// ```
    ///
    /// Any other command needs [`Device::exec_raw`]:
    ///
    /// ```compile_fail,E0277
    /// use bareverbs::{Config, Device};
    /// use bareverbs_firmware_cmd::commands::DestroyQp as C;
    /// let hal = bareverbs_model::SimHal::synchronous();
    /// let dev = Device::bring_up(&hal, Config::default()).unwrap();
    /// let _ = dev.query::<C>(&mut [0u8; 16], &mut [0u8; 16]);
    /// ```
    ///
    /// # Errors
    /// As [`Device::exec_raw`].
    pub fn query<C: ReadOnly>(&self, input: &mut [u8], output: &mut [u8]) -> Result<(), Error> {
        self.exec::<C>(input, output)
    }

    /// Executes any firmware command: `input` holds the command's input (the opcode is
    /// filled in from `C`), `output` receives its output. While waiting, page requests from
    /// firmware are served on the page slot.
    ///
    /// A command sent behind the driver's back can break what its safe API relies on, so it
    /// takes a [`RawCommands`](bareverbs_hal::RawCommands): only a caller that takes on the
    /// safety contract of its `promise` can make one, and that contract states what every
    /// command sent with it keeps.
    ///
    /// ```compile_fail,E0133
    /// use bareverbs::{Config, Device};
    /// use bareverbs_firmware_cmd::commands::DestroyQp as C;
    /// use bareverbs_hal::RawCommands;
    /// let hal = bareverbs_model::SimHal::synchronous();
    /// let dev = Device::bring_up(&hal, Config::default()).unwrap();
    /// let promise = RawCommands::promise(); // E0133: the caller must take on its contract
    /// let _ = dev.exec_raw::<C>(&promise, &mut [0u8; 16], &mut [0u8; 16]);
    /// ```
    ///
    /// # Errors
    /// [`Error::Command`] with opcode, status and syndrome when firmware refuses it;
    /// [`Error::CommandTimeout`] (or [`Error::DeviceGone`]) when it never completes, after
    /// which the command interface stays unusable ([`Error::CommandInterfaceWedged`]).
    pub fn exec_raw<C: Command>(
        &self,
        _promise: &bareverbs_hal::RawCommands,
        input: &mut [u8],
        output: &mut [u8],
    ) -> Result<(), Error> {
        self.exec::<C>(input, output)
    }

    /// [`Device::exec_raw`] for the driver's own commands, which keep its invariants.
    pub(crate) fn exec<C: Command>(
        &self,
        input: &mut [u8],
        output: &mut [u8],
    ) -> Result<(), Error> {
        View::<C::In>::new_checked(input)?;
        View::<C::Out>::new_checked(output)?;
        self.ctl
            .lock()
            .exec_on(&self.hal, Slot::Regular, C::OPCODE, input, output)
    }

    /// Executes `C`, a command that hands `bufs` to the device, and gives them back on
    /// success. When firmware refuses the command they are dropped (freed); when it never
    /// completes the device may be using them, so they are leaked, never freed.
    ///
    /// # Errors
    /// As [`Device::exec`].
    pub(crate) fn exec_handing_over<C: Command, const N: usize>(
        &self,
        input: &mut [u8],
        output: &mut [u8],
        bufs: [bareverbs_hal::SharedDma<H::Dma>; N],
    ) -> Result<[bareverbs_hal::SharedDma<H::Dma>; N], Error> {
        match self.exec::<C>(input, output) {
            Ok(()) => Ok(bufs),
            Err(e @ Error::Command(_)) => Err(e),
            Err(e) => {
                bufs.into_iter().for_each(bareverbs_hal::SharedDma::leak);
                Err(e)
            }
        }
    }

    /// Polls for asynchronous events: serves firmware page requests and queues the rest for
    /// [`Device::next_event`]. Returns the number of EQEs consumed. Call it from time to time
    /// (poll mode: nothing runs in the background). Every
    /// [`HEALTH_POLL_INTERVAL`](crate::health::HEALTH_POLL_INTERVAL) it also reads the fatal
    /// health sensors and queues [`AsyncEvent::DeviceFatal`] the first time one fires.
    pub fn poll_events(&self) -> usize {
        let mut c = self.ctl.lock();
        // The fatal sensors, every 2 s as Linux's health poll reads them: a fatal condition
        // is an event (`IBV_EVENT_DEVICE_FATAL`), once.
        let fatal = c.health.poll_due(self.hal.bar0(), self.hal.now());
        if c.health.first_fatal(fatal) {
            c.push_event(AsyncEvent::DeviceFatal);
        }
        let n = c.service_events(&self.hal);
        let fatal = c.fatal;
        drop(c);
        if fatal {
            self.enter_error_state();
        }
        n
    }

    /// The next unread event: a completion event of a CQ without a channel (counted per CQ,
    /// never dropped; reading one counts as `ibv_get_cq_event`, acknowledge it with
    /// [`Cq::ack_events`](crate::verbs::Cq::ack_events)), else the oldest asynchronous event.
    pub fn next_event(&self) -> Option<AsyncEvent> {
        if let Some(e) = self.next_completion() {
            return Some(e);
        }
        let mut c = self.ctl.lock();
        let (e, fatal) = (c.events.pop_front(), c.fatal);
        drop(c);
        // A fatal error queued while a command waited (not by `poll_events`).
        if fatal {
            self.enter_error_state();
        }
        e
    }

    /// Takes `ev` out of the event queue, if it is there.
    pub(crate) fn take_event(&self, ev: AsyncEvent) -> bool {
        let mut c = self.ctl.lock();
        let Some(at) = c.events.iter().position(|e| *e == ev) else {
            return false;
        };
        // The queue keeps its order: the events before `at` go round to the back.
        for _ in 0..at {
            if let Some(e) = c.events.pop_front() {
                let _ = c.events.push_back(e);
            }
        }
        c.events.pop_front();
        let rest = c.events.len() - at;
        for _ in 0..rest {
            if let Some(e) = c.events.pop_front() {
                let _ = c.events.push_back(e);
            }
        }
        true
    }

    /// Asynchronous events (not completion events, which are never dropped) dropped because
    /// [`EVENT_QUEUE_LEN`] were waiting unread.
    pub fn events_dropped(&self) -> u64 {
        self.ctl.lock().events_dropped
    }

    /// What is known about the device.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Port state read at bring-up or by the last [`Device::query_port`].
    pub fn ports(&self) -> Vec<PortInfo, MAX_PORTS> {
        self.ctl.lock().ports.clone()
    }

    /// Pages the driver has given to firmware.
    pub fn pages_given(&self) -> usize {
        self.ctl.lock().pages.given()
    }

    /// The UAR the driver uses.
    pub fn uar(&self) -> Option<Uar> {
        self.ctl.lock().uar
    }

    /// The asynchronous event queue's number.
    pub fn async_eqn(&self) -> Option<Eqn> {
        self.ctl.lock().eq.as_ref().map(|e| e.eqn)
    }

    /// A copy of the command trace.
    pub fn trace(&self) -> Trace {
        self.ctl.lock().trace.clone()
    }

    /// The configuration the device was brought up with.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The platform.
    pub fn hal(&self) -> &H {
        &self.hal
    }

    /// Reads the health buffer and counter; call it periodically (Linux: every 2 s) to detect
    /// a hung or failed device.
    ///
    /// The first report with a fatal sensor also queues [`AsyncEvent::DeviceFatal`] (Linux
    /// 6.12: `poll_health` enters the error state, mlx5_ib reports IB_EVENT_DEVICE_FATAL);
    /// [`Device::poll_events`] reads the fatal sensors by itself every
    /// [`HEALTH_POLL_INTERVAL`](crate::health::HEALTH_POLL_INTERVAL).
    pub fn check_health(&self) -> HealthReport {
        let mut c = self.ctl.lock();
        let report = c.health.check(self.hal.bar0());
        if c.health.first_fatal(report.fatal) {
            c.push_event(AsyncEvent::DeviceFatal);
        }
        let fatal = c.fatal;
        drop(c);
        if fatal {
            self.enter_error_state();
        }
        report
    }

    /// True once a fatal error was reported ([`AsyncEvent::DeviceFatal`]): the device is in
    /// its error state (Linux `MLX5_DEVICE_STATE_INTERNAL_ERROR`). Posts are refused with
    /// [`Error::DeviceFatal`] and every CQ completes what was posted to its queues with
    /// [`WcStatus::WrFlushErr`](crate::verbs::WcStatus), in software.
    pub fn is_fatal(&self) -> bool {
        self.fatal.load(core::sync::atomic::Ordering::Acquire)
    }

    /// Enters the error state (once): every CQ's next poll takes the flushing path.
    fn enter_error_state(&self) {
        use core::sync::atomic::Ordering;
        if !self.fatal.swap(true, Ordering::AcqRel) {
            warn!("mlx5: fatal error; outstanding work completes flushed");
            // CQs look at the epoch on every poll: moving it sends them to the cold path,
            // which sees the flag (the hot path pays nothing for it).
            self.purge_epoch.fetch_add(1, Ordering::Release);
        }
    }
}

impl<H: Hal> Control<H> {
    pub(crate) fn exec_on(
        &mut self,
        hal: &H,
        slot: Slot,
        opcode: Opcode,
        input: &mut [u8],
        output: &mut [u8],
    ) -> Result<(), Error> {
        input[..2].copy_from_slice(&opcode.0.to_be_bytes());
        let op_mod = u16::from_be_bytes([input[6], input[7]]);
        self.cmd.post(hal, slot, input, output.len())?;
        let deadline = Deadline::new(hal.now(), self.cmd_timeout);
        while !self.cmd.done(slot) {
            if slot == Slot::Regular && self.eq.is_some() {
                // Firmware may hold this command until it gets pages: serve its requests.
                self.service_events(hal);
            }
            if deadline.expired(hal.now()) {
                self.trace.push(TraceRecord {
                    opcode,
                    op_mod,
                    outcome: Outcome::Timeout,
                });
                self.cmd.wedged = true;
                warn!("{} timed out", opcode);
                return Err(if device_gone(hal.bar0()) {
                    Error::DeviceGone
                } else {
                    Error::CommandTimeout { opcode }
                });
            }
            hal.relax();
        }
        let r = self.cmd.finish(slot, opcode, op_mod, output);
        let outcome = match r {
            Ok(()) => Outcome::Ok,
            Err(Error::Command(e)) => Outcome::Failed(e.failure),
            Err(_) => Outcome::Failed(CmdFailure::Delivery(
                bareverbs_firmware_cmd::DeliveryStatus::FirmwareError,
            )),
        };
        self.trace.push(TraceRecord {
            opcode,
            op_mod,
            outcome,
        });
        if let Err(e) = r {
            debug!("{}", e);
        }
        r
    }

    /// Gives firmware `n` pages (MANAGE_PAGES GIVE in batches of [`PAGES_PER_COMMAND`]).
    pub(crate) fn give_pages(&mut self, hal: &H, n: usize, slot: Slot) -> Result<(), Error> {
        // Every page first (all or nothing), then the commands.
        self.pages.reserve(hal, n)?;
        let r = self.give_reserved(hal, n, slot);
        if r.is_err() {
            self.pages.release_empty();
        }
        r
    }

    fn give_reserved(&mut self, hal: &H, n: usize, slot: Slot) -> Result<(), Error> {
        let mut left = n;
        while left > 0 {
            let batch = left.min(PAGES_PER_COMMAND);
            let mut buf = [0u8; PAGES_MSG];
            let len = ManagePagesIn::BYTES + 8 * batch;
            // The pages taken so far are the first `taken` addresses of the command itself.
            let mut taken = 0;
            let mut failed = None;
            {
                let mut v = ViewMut::<ManagePagesIn>::zeroed(&mut buf[..len])?;
                v.set(manage_pages_in::op_mod, manage_pages_op_mod::GIVE)
                    .set(manage_pages_in::input_num_entries, batch as u32);
                for k in 0..batch {
                    match self.pages.take_free(hal) {
                        Ok(iova) => {
                            v.set_array(manage_pages_in::pas, k, iova.0)?;
                            taken += 1;
                        }
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
            }
            if let Some(e) = failed {
                self.put_back_listed(&buf[..len], taken);
                return Err(e);
            }
            let mut out = [0u8; ManagePagesOut::BYTES];
            match self.exec_on(hal, slot, Opcode::MANAGE_PAGES, &mut buf[..len], &mut out) {
                Ok(()) => {}
                Err(e @ Error::Command(_)) => {
                    // Firmware refused them: they are still ours.
                    self.put_back_listed(&buf[..len], taken);
                    return Err(e);
                }
                // Timed out: firmware may hold them; they stay marked given and are never freed.
                Err(e) => return Err(e),
            }
            left -= batch;
        }
        Ok(())
    }

    /// Marks free again the first `n` pages a MANAGE_PAGES GIVE input (`cmd`) lists.
    fn put_back_listed(&mut self, cmd: &[u8], n: usize) {
        let Ok(v) = View::<ManagePagesIn>::new_checked(cmd) else {
            return;
        };
        for k in 0..n {
            if let Some(iova) = v.array(manage_pages_in::pas, k) {
                let _ = self.pages.put_back(iova);
            }
        }
    }

    /// Takes back up to `n` pages (MANAGE_PAGES TAKE); returns how many firmware returned.
    pub(crate) fn take_pages(&mut self, hal: &H, n: usize, slot: Slot) -> Result<usize, Error> {
        let batch = n.min(PAGES_PER_COMMAND);
        let mut inp = [0u8; ManagePagesIn::BYTES];
        input::<bareverbs_firmware_cmd::commands::ManagePages>(&mut inp)?
            .set(manage_pages_in::op_mod, manage_pages_op_mod::TAKE)
            .set(manage_pages_in::input_num_entries, batch as u32);
        let mut out = [0u8; PAGES_MSG];
        let outlen = ManagePagesOut::BYTES + 8 * batch;
        self.exec_on(
            hal,
            slot,
            Opcode::MANAGE_PAGES,
            &mut inp,
            &mut out[..outlen],
        )?;
        let v = View::<ManagePagesOut>::new_checked(&out[..outlen])?;
        let got = v.get32(manage_pages_out::output_num_entries) as usize;
        let mut first_err = None;
        for k in 0..got.min(batch) {
            let iova = v.array(manage_pages_out::pas, k).unwrap_or(0);
            if let Err(e) = self.pages.put_back(iova) {
                first_err.get_or_insert(e);
            }
        }
        if got > batch {
            first_err.get_or_insert(Error::UnknownPage { iova: 0 });
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(got.min(batch)),
        }
    }

    fn handle_page_request(&mut self, hal: &H, eqe: &[u8; EQE_BYTES]) {
        let e = match View::<Eqe>::new_checked(eqe) {
            Ok(e) => e,
            Err(_) => return,
        };
        let d = bareverbs_firmware_cmd::ifc::eqe::data::<EqePageReq>(&e);
        let n = d.get32(eqe_page_req::num_pages) as i32;
        if d.get(eqe_page_req::release_all_pages) != 0 {
            // Firmware already dropped every page of the function; nothing to command.
            warn!("firmware released all pages");
            return;
        }
        if n > 0 {
            if let Err(err) = self.give_pages(hal, n as usize, Slot::Pages) {
                warn!("cannot give {} pages: {}", n, err);
                if !matches!(
                    err,
                    Error::Command(_)
                        | Error::CommandTimeout { .. }
                        | Error::CommandInterfaceWedged
                ) {
                    let mut inp = [0u8; ManagePagesIn::BYTES];
                    if let Ok(mut v) = ViewMut::<ManagePagesIn>::zeroed(&mut inp) {
                        v.set(manage_pages_in::op_mod, manage_pages_op_mod::CANT_GIVE);
                    }
                    let mut out = [0u8; ManagePagesOut::BYTES];
                    let _ =
                        self.exec_on(hal, Slot::Pages, Opcode::MANAGE_PAGES, &mut inp, &mut out);
                }
            }
        } else if n < 0 {
            let mut left = n.unsigned_abs() as usize;
            while left > 0 {
                match self.take_pages(hal, left, Slot::Pages) {
                    Ok(0) | Err(_) => break,
                    Ok(got) => left = left.saturating_sub(got),
                }
            }
        }
    }

    /// Polls the asynchronous EQ once: serves page requests, queues other events.
    /// Queues `ev` for [`Device::next_event`]; when the queue is full the oldest is dropped
    /// (and counted).
    pub(crate) fn push_event(&mut self, ev: AsyncEvent) {
        self.fatal |= ev == AsyncEvent::DeviceFatal;
        if self.events.is_full() {
            self.events.pop_front();
            self.events_dropped += 1;
        }
        let _ = self.events.push_back(ev);
    }

    pub(crate) fn service_events(&mut self, hal: &H) -> usize {
        let mut n = 0;
        while let Some(eqe) = self.eq.as_mut().and_then(EventQueue::next) {
            n += 1;
            let ev = match eqe[1] {
                event_type::PAGE_REQUEST => {
                    self.handle_page_request(hal, &eqe);
                    None
                }
                _ => match AsyncEvent::from_eqe(&eqe) {
                    AsyncEvent::Completion { cqn } if self.cq_events.contains_key(&cqn) => {
                        if let Some(e) = self.cq_events.get_mut(&cqn) {
                            e.pending = e.pending.saturating_add(1);
                        }
                        None
                    }
                    ev => Some(ev),
                },
            };
            if let Some(ev) = ev {
                self.push_event(ev);
            }
        }
        if n > 0 {
            if let Some(eq) = self.eq.as_ref() {
                eq.update_ci(hal, false);
            }
        }
        n
    }
}
