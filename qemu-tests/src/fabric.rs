//! The simulated fabric: HCAs joined by LID. A request to a LID another HCA owns is answered
//! by that HCA's responder (mlx5 hardware's transport, reduced to request → response).
//!
//! Each HCA sits behind its own lock. A requester that finds the responder's lock taken (its
//! engine thread is busy, possibly sending the other way) leaves the request queued and retries
//! on its next round, so two HCAs sending to each other cannot deadlock.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::eth::Inbox;
use crate::pcap::Capture;
use crate::request::{Request, Response};

/// An HCA joined to the fabric, as the fabric and the requesters on it reach it
/// ([`Device`](crate::engine::Device), an HCA behind its lock, is the one there is). Each call
/// that needs the HCA takes its lock only if it is free.
pub(crate) trait Station: Send + Sync {
    /// Where its Ethernet frames wait while it is busy (Ethernet HCAs only).
    fn inbox(&self) -> Option<Inbox>;
    /// Its responder answers `req`; `None` when the HCA is busy.
    fn try_respond(&self, req: &Request) -> Option<Response>;
    /// The HCA, held for answering several requests together (a multicast); `None` when it is
    /// busy.
    fn try_enter(&self) -> Option<Box<dyn Responder + '_>>;
    /// The frame arrives at its Ethernet port; false when the HCA is busy.
    fn try_receive_frame(&self, frame: &[u8]) -> bool;
    /// Wakes its engine (after a request or a frame).
    fn notify(&self);
}

/// An HCA held by a requester on another HCA ([`Station::try_enter`]).
pub(crate) trait Responder {
    /// Its responder answers `req`.
    fn respond(&mut self, req: &Request) -> Response;
    /// Its UD QPs attached to multicast group `mgid`.
    fn mcg_members(&self, mgid: &[u8; 16]) -> Vec<u32>;
}

struct Member {
    base_lid: u16,
    lids: u16,
    dev: Weak<dyn Station>,
    /// Where Ethernet frames wait while the HCA is busy (Ethernet HCAs only).
    inbox: Option<Inbox>,
}

/// HCAs that can reach each other.
#[derive(Default)]
pub struct Fabric {
    members: Mutex<Vec<Member>>,
    /// What crosses the fabric, written as InfiniBand packets (`Fabric::capture_to`).
    capture: Mutex<Option<Capture>>,
    capturing: AtomicBool,
    /// A TAP interface on the Ethernet wire (`tap.rs`).
    tap: Mutex<Option<Arc<crate::tap::TapPort>>>,
}

impl Fabric {
    /// An empty fabric.
    pub fn new() -> Arc<Self> {
        Arc::new(Fabric::default())
    }

    /// Attaches `dev`, whose ports have LIDs `base_lid..base_lid + lids`.
    pub(crate) fn join<S: Station + 'static>(&self, base_lid: u16, lids: u16, dev: &Arc<S>) {
        let inbox = dev.inbox();
        let dev: Weak<S> = Arc::downgrade(dev);
        let mut m = self.members.lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|x| x.dev.strong_count() > 0);
        m.push(Member {
            base_lid,
            lids,
            dev: dev as Weak<dyn Station>,
            inbox,
        });
    }

    /// An Ethernet frame from the HCA (or TAP interface) whose inbox is `from` reaches every
    /// other Ethernet HCA of the fabric and the TAP interface, if any (a hub: each one's flow
    /// steering decides what to keep). An HCA that is busy finds the frame in its inbox on its
    /// next round.
    pub(crate) fn send_frame(&self, from: &Inbox, frame: &[u8]) {
        if self.capturing() {
            self.record_eth(frame);
        }
        let targets: Vec<(Arc<dyn Station>, Inbox)> = {
            let m = self.members.lock().unwrap_or_else(|e| e.into_inner());
            m.iter()
                .filter_map(|x| Some((x.dev.upgrade()?, x.inbox.clone()?)))
                .filter(|(_, i)| !Arc::ptr_eq(i, from))
                .collect()
        };
        let tap = self.tap.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(t) = tap.filter(|t| !Arc::ptr_eq(&t.id, from)) {
            t.write(frame);
        }
        for (dev, inbox) in targets {
            if !dev.try_receive_frame(frame) {
                inbox
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push_back(frame.to_vec());
            }
            dev.notify();
        }
    }

    /// Every HCA of the fabric but the one whose base LID `is_self` recognises.
    pub(crate) fn members_except(&self, is_self: impl Fn(u16) -> bool) -> Vec<Arc<dyn Station>> {
        let m = self.members.lock().unwrap_or_else(|e| e.into_inner());
        m.iter()
            .filter(|x| !is_self(x.base_lid))
            .filter_map(|x| x.dev.upgrade())
            .collect()
    }

    /// The HCA whose LIDs started at `old` now has them from `new` (an SM assigned them).
    pub fn move_lids(&self, old: u16, new: u16) {
        let mut m = self.members.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(x) = m.iter_mut().find(|x| x.base_lid == old) {
            x.base_lid = new;
        }
    }

    /// Writes every packet that crosses the fabric from now on to the pcap file `path`
    /// (`pcap.rs`: InfiniBand in ERF records, what Wireshark and `tshark` dissect), replacing
    /// a capture in progress.
    ///
    /// # Errors
    /// Creating the file.
    pub fn capture_to(&self, path: &Path) -> io::Result<()> {
        let c = Capture::create(path)?;
        *self.capture.lock().unwrap_or_else(|e| e.into_inner()) = Some(c);
        self.capturing.store(true, Ordering::Release);
        Ok(())
    }

    /// Ends the capture: flushes and closes the file; returns the packets written (0 without
    /// a capture).
    ///
    /// # Errors
    /// Writing the file out.
    pub fn stop_capture(&self) -> io::Result<u64> {
        self.capturing.store(false, Ordering::Release);
        let c = self
            .capture
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match c {
            Some(mut c) => {
                c.finish()?;
                Ok(c.packets())
            }
            None => Ok(0),
        }
    }

    /// Whether packets are being captured (cheap: checked on every message).
    pub(crate) fn capturing(&self) -> bool {
        self.capturing.load(Ordering::Acquire)
    }

    /// Appends `pkts` to the capture and flushes it. A write error ends the capture, with a
    /// warning.
    pub(crate) fn record(&self, pkts: &[Vec<u8>]) {
        let mut c = self.capture.lock().unwrap_or_else(|e| e.into_inner());
        let Some(cap) = c.as_mut() else {
            return;
        };
        // Flushed per message: a server stopped by a signal leaves a whole file.
        let r = pkts
            .iter()
            .try_for_each(|p| cap.write_ib(p))
            .and_then(|()| cap.flush());
        if let Err(e) = r {
            log::warn!("model: capture stopped: {e}");
            *c = None;
            self.capturing.store(false, Ordering::Release);
        }
    }

    /// Joins the TAP interface `name` (created if it does not exist) to the wire. A thread
    /// carries the kernel's frames onto the wire until the interface goes away or the fabric
    /// is dropped.
    ///
    /// # Errors
    /// Opening `/dev/net/tun` or creating the interface (root is needed).
    pub fn attach_tap(self: &Arc<Self>, name: &str) -> io::Result<()> {
        let fabric: Weak<Fabric> = Arc::downgrade(self);
        let port = crate::tap::TapPort::open(name, move |id, frame| {
            let Some(f) = fabric.upgrade() else {
                return false;
            };
            f.send_frame(id, frame);
            true
        })?;
        self.set_tap(Some(port));
        Ok(())
    }

    /// Sets the TAP interface on the wire.
    pub(crate) fn set_tap(&self, tap: Option<Arc<crate::tap::TapPort>>) {
        *self.tap.lock().unwrap_or_else(|e| e.into_inner()) = tap;
    }

    /// Appends an Ethernet frame to the capture (see [`Fabric::record`]).
    pub(crate) fn record_eth(&self, frame: &[u8]) {
        let mut c = self.capture.lock().unwrap_or_else(|e| e.into_inner());
        let Some(cap) = c.as_mut() else {
            return;
        };
        if let Err(e) = cap.write_eth(frame).and_then(|()| cap.flush()) {
            log::warn!("model: capture stopped: {e}");
            *c = None;
            self.capturing.store(false, Ordering::Release);
        }
    }

    /// The HCA that owns `lid`.
    pub(crate) fn find(&self, lid: u16) -> Option<Arc<dyn Station>> {
        let m = self.members.lock().unwrap_or_else(|e| e.into_inner());
        m.iter()
            .find(|x| lid >= x.base_lid && lid < x.base_lid.saturating_add(x.lids))
            .and_then(|x| x.dev.upgrade())
    }
}
