//! Event queue entries and their per-event data (mlx5-reference 04 §2–3; Linux
//! `struct mlx5_eqe`, `union ev_data`).

crate::ifc! {
    /// One 64-byte EQE.
    pub struct Eqe => eqe: 0x200 bits {
        0x008 r#type: 8,
        0x018 sub_type: 8,
        0x100 data: [u8; 28],
        0x1f0 signature: 8,
        0x1f8 owner: 8,
    }
    /// Data of a command-completion EQE (type 0x0a).
    pub struct EqeCmd => eqe_cmd: 0xe0 bits {
        0x00 vector: 32,
    }
    /// Data of a page-request EQE (type 0x0b).
    pub struct EqePageReq => eqe_page_req: 0xe0 bits {
        0x00 ec_function: 1,
        0x01 release_all_pages: 1,
        0x10 func_id: 16,
        0x20 num_pages: 32,
    }
    /// Data of a port-change EQE (type 0x09): port number in bits 7:4 of data byte 8.
    pub struct EqePortState => eqe_port_state: 0xe0 bits {
        0x40 port: 4,
    }
    /// Data of a completion EQE (type 0x00).
    pub struct EqeComp => eqe_comp: 0xe0 bits {
        0xc8 cqn: 24,
    }
    /// Data of a CQ-error EQE (type 0x04).
    pub struct EqeCqErr => eqe_cq_err: 0xe0 bits {
        0x08 cqn: 24,
        0x58 syndrome: 8,
    }
    /// Data of QP/SRQ asynchronous events.
    pub struct EqeQpSrq => eqe_qp_srq: 0xe0 bits {
        0xa0 r#type: 8,
        0xc8 qp_srq_n: 24,
    }
}

/// Event types (`enum mlx5_event`).
pub mod event_type {
    /// Completion on a CQ.
    pub const COMP: u8 = 0x00;
    /// Path migrated.
    pub const PATH_MIG: u8 = 0x01;
    /// Communication established.
    pub const COMM_EST: u8 = 0x02;
    /// SQ drained.
    pub const SQ_DRAINED: u8 = 0x03;
    /// CQ error.
    pub const CQ_ERROR: u8 = 0x04;
    /// Local work queue catastrophic error.
    pub const WQ_CATAS_ERROR: u8 = 0x05;
    /// Path migration failed.
    pub const PATH_MIG_FAILED: u8 = 0x07;
    /// Fatal internal error.
    pub const INTERNAL_ERROR: u8 = 0x08;
    /// Port state changed.
    pub const PORT_CHANGE: u8 = 0x09;
    /// Command completed.
    pub const CMD: u8 = 0x0a;
    /// Firmware wants pages (or gives them back).
    pub const PAGE_REQUEST: u8 = 0x0b;
    /// Invalid request on a work queue.
    pub const WQ_INVAL_REQ_ERROR: u8 = 0x10;
    /// Access error on a work queue.
    pub const WQ_ACCESS_ERROR: u8 = 0x11;
    /// SRQ catastrophic error.
    pub const SRQ_CATAS_ERROR: u8 = 0x12;
    /// Last WQE reached on an SRQ-attached QP.
    pub const SRQ_LAST_WQE: u8 = 0x13;
    /// SRQ limit reached.
    pub const SRQ_RQ_LIMIT: u8 = 0x14;
    /// A DCT finished draining (DRAIN_DCT); the data names it ([`EQE_DCT_DCTN`](crate::ifc::EQE_DCT_DCTN)).
    pub const DCT_DRAINED: u8 = 0x1c;
    /// A request reached an armed DCT with a wrong access key.
    pub const DCT_KEY_VIOLATION: u8 = 0x1d;
}

/// Port-change subtypes.
pub mod port_change_subtype {
    /// Port went down.
    pub const DOWN: u8 = 1;
    /// Port became active.
    pub const ACTIVE: u8 = 4;
    /// Port initialized.
    pub const INITIALIZED: u8 = 5;
    /// LID changed.
    pub const LID: u8 = 6;
    /// P_Key table changed.
    pub const PKEY: u8 = 7;
    /// GUID (GID table) changed.
    pub const GUID: u8 = 8;
    /// The SM asks clients to re-register.
    pub const CLIENT_REREG: u8 = 9;
}

/// Linux's asynchronous event mask (`MLX5_ASYNC_EVENT_MASK`): QP/CQ/SRQ errors, port change.
pub const ASYNC_EVENT_MASK: u64 = 0x1f_02be;

/// The EQE data area viewed as the event-specific layout `L`.
pub fn data<'a, L: crate::layout::Layout>(
    e: &crate::layout::View<'a, Eqe>,
) -> crate::layout::View<'a, L> {
    match crate::layout::View::new_checked(e.bytes(eqe::data)) {
        Ok(v) => v,
        // All event layouts are 28 bytes, the size of the data area (checked in tests).
        Err(_) => unreachable!("event data layouts are 28 bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, View};

    #[test]
    fn golden_page_request_eqe() {
        // 04 §2: type at byte 1, data at 0x20: ec_function BE16 +0, func_id BE16 +2,
        // num_pages BE32 +4; owner at byte 0x3f.
        let mut b = [0u8; 64];
        b[1] = event_type::PAGE_REQUEST;
        b[0x20..0x28].copy_from_slice(&[0x40, 0, 0, 3, 0xff, 0xff, 0xff, 0xf0]);
        b[0x3f] = 1;
        let e = View::<Eqe>::new_checked(&b).unwrap();
        assert_eq!(e.get(eqe::r#type), 0x0b);
        assert_eq!(e.get(eqe::owner), 1);
        let d = data::<EqePageReq>(&e);
        assert_eq!(d.get(eqe_page_req::release_all_pages), 1);
        assert_eq!(d.get(eqe_page_req::ec_function), 0);
        assert_eq!(d.get(eqe_page_req::func_id), 3);
        assert_eq!(d.get32(eqe_page_req::num_pages) as i32, -16);
        assert_eq!(EqeCmd::BYTES, 28);
    }

    #[test]
    fn golden_comp_and_port_eqe() {
        let mut b = [0u8; 64];
        b[0x20 + 0x08] = 0x10; // port 1 in bits 7:4
        b[0x20 + 0x18..0x20 + 0x1c].copy_from_slice(&[0xff, 0x00, 0x01, 0x02]);
        let e = View::<Eqe>::new_checked(&b).unwrap();
        assert_eq!(data::<EqePortState>(&e).get(eqe_port_state::port), 1);
        assert_eq!(data::<EqeComp>(&e).get(eqe_comp::cqn), 0x102);
        assert_eq!(
            ASYNC_EVENT_MASK,
            (1 << 0x01)
                | (1 << 0x02)
                | (1 << 0x03)
                | (1 << 0x04)
                | (1 << 0x05)
                | (1 << 0x07)
                | (1 << 0x09)
                | (1 << 0x10)
                | (1 << 0x11)
                | (1 << 0x12)
                | (1 << 0x13)
                | (1 << 0x14)
        );
    }
}
