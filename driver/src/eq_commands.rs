//! An event queue's life on the device: CREATE_EQ over a ring from `eq.rs`, DESTROY_EQ
//! (PRM "CREATE_EQ", mlx5-reference 04 §1; Linux `create_map_eq`).

use bareverbs_firmware_cmd::commands::{CreateEq, DestroyEq};
use bareverbs_firmware_cmd::ifc::*;
use bareverbs_firmware_cmd::{Eqn, Layout, View};
use bareverbs_hal::Hal;

use crate::device::{input, Device};
use crate::eq::{EventQueue, MAX_LOG_SIZE, MAX_PAGES};
use crate::error::Error;
use crate::uar::Uar;

impl<H: Hal> Device<H> {
    /// CREATE_EQ of `1 << log_size` EQEs (at most [`MAX_LOG_SIZE`]) on `uar` for the events in
    /// `mask`, in 4 KiB pages (`log_page_size` 0, one `pas` entry per page, as Linux
    /// `create_map_eq` does). Polled: no interrupt is used.
    pub(crate) fn create_eq(
        &self,
        uar: Uar,
        log_size: u8,
        mask: u64,
    ) -> Result<EventQueue<H>, Error> {
        let log_size = log_size.min(MAX_LOG_SIZE);
        let buf = EventQueue::<H>::alloc(&self.hal, log_size)?;
        let npages = buf.len() / 4096;
        let mut inp = [0u8; CreateEqIn::BYTES + 8 * MAX_PAGES];
        let len = CreateEqIn::BYTES + 8 * npages;
        {
            let mut v = input::<CreateEq>(&mut inp[..len])?;
            v.sub(create_eq_in::eq_context_entry)
                .set(eqc::log_eq_size, log_size)
                .set(eqc::uar_page, uar.index().raw())
                .set(eqc::intr, 0u8)
                .set(eqc::log_page_size, 0u8);
            set_event_bitmask(&mut v, 0, mask);
            for k in 0..npages {
                v.set_array(create_eq_in::pas, k, buf.iova().0 + (k * 4096) as u64)?;
            }
        }
        let mut out = [0u8; CreateEqOut::BYTES];
        let [buf] = self.exec_handing_over::<CreateEq, 1>(&mut inp[..len], &mut out, [buf])?;
        let eqn = Eqn(View::<CreateEqOut>::new_checked(&out)?.get(create_eq_out::eq_number) as u8);
        Ok(EventQueue::new(buf, eqn, log_size, uar))
    }

    /// DESTROY_EQ; the ring is freed, or leaked when the command fails (the device may still
    /// write it).
    pub(crate) fn destroy_eq(&self, eq: EventQueue<H>) -> Result<(), Error> {
        let mut inp = [0u8; DestroyEqIn::BYTES];
        let mut out = [0u8; DestroyEqOut::BYTES];
        let r = input::<DestroyEq>(&mut inp)
            .map(|mut v| {
                v.set(destroy_eq_in::eq_number, eq.eqn.raw());
            })
            .and_then(|()| self.exec::<DestroyEq>(&mut inp, &mut out));
        if r.is_err() {
            eq.buf.leak();
        }
        r
    }
}
