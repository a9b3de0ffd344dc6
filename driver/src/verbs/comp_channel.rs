//! Completion channels (`ibv_create_comp_channel`, `ibv_get_cq_event`, `ibv_ack_cq_events`):
//! a completion EQ of the channel's own that the CQs created on it report to, read by polling
//! (Linux mlx5_core `create_comp_eq`; rdma-core `mlx5_cq_event` advances the arm sequence
//! number when an event is read).
//!
//! No event is lost. A CQ raises at most one event per arm, and arming first drains the EQ it
//! reports to, so an EQ never holds more than one event per CQ; the EQ is sized for the most
//! CQs a channel serves ([`CHANNEL_CQS`]) plus firmware's spare entries. Events read from the
//! EQ are counted per CQ, never queued, so no count can overflow a queue either.

use bareverbs_firmware_cmd::ifc::event_type;
use bareverbs_firmware_cmd::Eqn;
use bareverbs_hal::{Deadline, Hal};

use crate::device::{AsyncEvent, Device};
use crate::eq::EventQueue;
use crate::error::{Error, Limit};
use crate::table::Table;
use crate::wq::cq_tables::CqEvents;

/// Most CQs one completion channel serves (its EQ is sized for them).
pub const CHANNEL_CQS: usize = 64;

impl<H: Hal> crate::device::Control<H> {
    /// Most CQs without a channel that may be armed at once: as many as the device keeps
    /// event counts for, and at most half the asynchronous EQ's entries, so that their
    /// completion events (one per armed CQ between two drains) leave room for the other
    /// events and the EQ cannot overrun.
    pub(crate) fn armed_cq_limit(&self) -> usize {
        let counts = Table::<CqEvents, { crate::wq::cq_tables::CQ_TABLE }>::capacity();
        let eq = self.eq.as_ref().map_or(0, |e| e.entries() / 2);
        counts.map_or(eq, |c| c.min(eq))
    }
}

/// A completion event read from a channel (`ibv_get_cq_event`'s `cq` and `cq_context`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CqEvent {
    /// The CQ that has completions (it is disarmed until [`Cq::req_notify`] again).
    ///
    /// [`Cq::req_notify`]: crate::verbs::Cq::req_notify
    pub cqn: u32,
    /// The context the CQ was created with.
    pub cq_context: u64,
}

pub(crate) struct ChannelState<H: Hal> {
    eq: Option<EventQueue<H>>,
    pub(crate) cqs: Table<CqEvents, CHANNEL_CQS>,
    /// Completion EQEs for a CQ the channel does not know (destroyed meanwhile).
    stray: u64,
}

/// A completion channel (`struct ibv_comp_channel`). CQs created on it borrow it, so it
/// outlives them; destroyed on drop.
pub struct CompChannel<'d, H: Hal> {
    dev: &'d Device<H>,
    eqn: Eqn,
    pub(crate) state: spin::Mutex<ChannelState<H>>,
}

impl<H: Hal> Device<H> {
    /// Creates a completion channel with a completion EQ of its own
    /// (`ibv_create_comp_channel`).
    ///
    /// # Errors
    /// [`Error::NotUp`], a DMA or command error.
    pub fn create_comp_channel(&self) -> Result<CompChannel<'_, H>, Error> {
        let uar = self.uar().ok_or(Error::NotUp)?;
        let log_size =
            EventQueue::<H>::log_size_for(CHANNEL_CQS as u32).min(self.info().caps.log_max_eq_size);
        // Completion EQs ask for no asynchronous event (Linux create_comp_eq: mask 0); the
        // CQs name the EQ in their context.
        let eq = self.create_eq(uar, log_size, 0)?;
        Ok(CompChannel {
            dev: self,
            eqn: eq.eqn,
            state: spin::Mutex::new(ChannelState {
                eq: Some(eq),
                cqs: Table::new(),
                stray: 0,
            }),
        })
    }

    /// The next completion event of a CQ created without a channel, if any (counted per CQ:
    /// none is lost). Events are read from the asynchronous EQ by [`Device::poll_events`].
    pub(crate) fn next_completion(&self) -> Option<AsyncEvent> {
        let mut ctl = self.ctl.lock();
        let ev = ctl
            .cq_events
            .iter_mut()
            .find_map(|(cqn, e)| e.take().then_some(AsyncEvent::Completion { cqn: *cqn }));
        ev
    }
}

impl<H: Hal> ChannelState<H> {
    /// Reads every EQE the device wrote into per-CQ counts and tells the device how far.
    pub(crate) fn drain(&mut self, hal: &H) {
        let Some(eq) = self.eq.as_mut() else {
            return;
        };
        let mut n = 0;
        while let Some(eqe) = eq.next() {
            n += 1;
            if eqe[1] != event_type::COMP {
                continue;
            }
            let cqn = u32::from_be_bytes([0, eqe[0x39], eqe[0x3a], eqe[0x3b]]);
            match self.cqs.get_mut(&cqn) {
                Some(e) => e.pending = e.pending.saturating_add(1),
                None => self.stray += 1,
            }
        }
        if n > 0 {
            eq.update_ci(hal, false);
        }
    }
}

impl<'d, H: Hal> CompChannel<'d, H> {
    /// The channel's completion EQ (what its CQs name as `c_eqn`).
    pub fn eqn(&self) -> Eqn {
        self.eqn
    }

    pub(crate) fn device(&self) -> &'d Device<H> {
        self.dev
    }

    /// The next completion event, without waiting (`ibv_get_cq_event` on a non-blocking
    /// channel). Each event read must be acknowledged with [`Cq::ack_events`].
    ///
    /// [`Cq::ack_events`]: crate::verbs::Cq::ack_events
    pub fn get_cq_event(&self) -> Option<CqEvent> {
        let mut st = self.state.lock();
        st.drain(&self.dev.hal);
        let ev = st.cqs.iter_mut().find_map(|(cqn, e)| {
            e.take().then_some(CqEvent {
                cqn: *cqn,
                cq_context: e.context,
            })
        });
        ev
    }

    /// Waits for the next completion event until `deadline` on the HAL's clock, polling
    /// every microsecond (`ibv_get_cq_event` on a blocking channel, bounded). `None` when the
    /// deadline passed with no event.
    pub fn get_cq_event_until(&self, deadline: Deadline) -> Option<CqEvent> {
        loop {
            if let Some(e) = self.get_cq_event() {
                return Some(e);
            }
            if deadline.expired(self.dev.hal.now()) {
                return None;
            }
            self.dev.hal.delay(core::time::Duration::from_micros(1));
        }
    }

    /// Completion EQEs that named a CQ this channel no longer serves (destroyed while its
    /// event was in flight); they are dropped.
    pub fn stray_events(&self) -> u64 {
        self.state.lock().stray
    }

    /// Registers a CQ created on this channel.
    pub(crate) fn add_cq(&self, cqn: u32, context: u64) -> Result<(), Error> {
        let mut st = self.state.lock();
        if st.cqs.len() >= CHANNEL_CQS {
            return Err(cq_count(CHANNEL_CQS));
        }
        st.cqs
            .insert(
                cqn,
                CqEvents {
                    context,
                    ..CqEvents::default()
                },
            )
            .map_err(|_| cq_count(CHANNEL_CQS))
    }

    /// Whether another CQ fits (at most [`CHANNEL_CQS`], with or without `alloc`: the EQ is
    /// sized for them).
    pub(crate) fn has_room(&self) -> bool {
        self.state.lock().cqs.len() < CHANNEL_CQS
    }

    fn destroy_inner(&mut self) -> Result<(), Error> {
        match self.state.get_mut().eq.take() {
            Some(eq) => self.dev.destroy_eq(eq),
            None => Ok(()),
        }
    }

    /// Destroys the channel and its EQ (`ibv_destroy_comp_channel`). CQs on it borrow it, so
    /// none is left.
    ///
    /// # Errors
    /// A command error (the EQ's memory is then leaked, never freed).
    pub fn destroy(mut self) -> Result<(), Error> {
        self.destroy_inner()
    }
}

impl<H: Hal> Drop for CompChannel<'_, H> {
    fn drop(&mut self) {
        if let Err(e) = self.destroy_inner() {
            warn!("DESTROY_EQ {}: {}", self.eqn, e);
        }
    }
}

/// The error for a CQ table that is full.
pub(crate) fn cq_count(max: usize) -> Error {
    Error::ExceedsLimit {
        limit: Limit::CqCount,
        requested: max as u64 + 1,
        max: max as u64,
    }
}
