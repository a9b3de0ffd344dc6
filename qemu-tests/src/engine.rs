//! The device's own thread: runs firmware work (pending commands, delayed completions) as the
//! doorbell asks or time passes, like the firmware processor of a real HCA. Used by
//! `SimHal`'s background drive and by the vfio-user server.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::eth::Inbox;
use crate::fabric::{Responder, Station};
use crate::hca::Hca;
use crate::request::{Request, Response};

/// How often the engine looks at the device without being woken.
const IDLE_POLL: Duration = Duration::from_micros(200);

/// A device shared between the bus side (MMIO, config) and the engine thread.
pub struct Device {
    hca: Mutex<Hca>,
    wake: Condvar,
    stop: AtomicBool,
}

impl Device {
    /// Wraps `hca`.
    pub fn new(hca: Hca) -> Arc<Self> {
        Arc::new(Device {
            hca: Mutex::new(hca),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        })
    }

    /// Locks the device.
    pub fn lock(&self) -> MutexGuard<'_, Hca> {
        self.hca.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Locks the device unless someone holds it.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, Hca>> {
        match self.hca.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Wakes the engine (after a doorbell).
    pub fn notify(&self) {
        self.wake.notify_one();
    }
}

impl Station for Device {
    fn inbox(&self) -> Option<Inbox> {
        self.lock().eth.as_ref().map(|e| e.inbox.clone())
    }

    fn try_respond(&self, req: &Request) -> Option<Response> {
        Some(self.try_lock()?.respond(req))
    }

    fn try_enter(&self) -> Option<Box<dyn Responder + '_>> {
        Some(Box::new(self.try_lock()?))
    }

    fn try_receive_frame(&self, frame: &[u8]) -> bool {
        let Some(mut hca) = self.try_lock() else {
            return false;
        };
        hca.data_path().eth_receive(frame, false);
        true
    }

    fn notify(&self) {
        Device::notify(self);
    }
}

impl Responder for MutexGuard<'_, Hca> {
    fn respond(&mut self, req: &Request) -> Response {
        self.data_path().respond(req)
    }

    fn mcg_members(&self, mgid: &[u8; 16]) -> Vec<u32> {
        self.objects.mcg_members(mgid)
    }
}

/// The engine thread; stops and joins on drop.
pub struct Engine {
    dev: Arc<Device>,
    thread: Option<JoinHandle<()>>,
}

impl Engine {
    /// Starts the engine for `dev`; `after_run` is called (under the device lock) after each
    /// round of work, e.g. to export the command trace.
    ///
    /// # Panics
    /// When the thread cannot be created.
    pub fn start(dev: Arc<Device>, mut after_run: impl FnMut(&mut Hca) + Send + 'static) -> Self {
        let d = dev.clone();
        let thread = std::thread::Builder::new()
            .name("hca-engine".into())
            .spawn(move || {
                let mut hca = d.lock();
                while !d.stop.load(Ordering::Acquire) {
                    hca.run_due();
                    after_run(&mut hca);
                    hca = match d.wake.wait_timeout(hca, IDLE_POLL) {
                        Ok((g, _)) => g,
                        Err(e) => e.into_inner().0,
                    };
                }
            })
            .unwrap_or_else(|e| panic!("cannot start the model's engine thread: {e}"));
        Engine {
            dev,
            thread: Some(thread),
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.dev.stop.store(true, Ordering::Release);
        self.dev.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
