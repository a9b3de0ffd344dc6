//! The catalogue of bad inputs: one table across every public verb — device queries, CQs,
//! completion channels, PDs, MRs, AHs, QP creation, every `modify_qp` attribute and
//! transition, posting (sends, the batch API, receives), SRQs, XRC, multicast, the mlx5
//! direct verbs (DC, create flags, indirect keys), and a device in its error state. Each case names the input, runs the verb, and must get its typed error;
//! none may panic, and none of the argument checks may send a command (the cases whose
//! refusal needs the device's answer, a state or an object it holds, are marked and counted
//! apart). `bad_inputs.rs` and `soundness.rs` hold more, closer to the code they test.

use bareverbs::verbs::*;
use bareverbs::{Config, Device, Error};
use bareverbs::{Invalid, Limit};
use bareverbs_hal::Hal;
use bareverbs_model::SimHal;

mod common;
use common::{cap, region, sge, with};

type H<'h> = &'h SimHal;

/// What a case must get.
#[derive(Clone, Copy, Debug)]
enum Want {
    /// Exactly this error.
    Is(Error),
    /// `InvalidArgument` for this reason.
    Bad(Invalid),
    /// `ExceedsLimit` of this limit (the numbers are the device's).
    Over(Limit),
    /// A refusal of the `modify_qp` transition table.
    Table,
    /// A direct-verbs refusal naming this feature.
    Dv(DvFeature),
}

impl Want {
    fn matches(&self, e: &Error) -> bool {
        match self {
            Want::Is(w) => w == e,
            Want::Bad(w) => *e == Error::InvalidArgument { what: *w },
            Want::Over(l) => matches!(e, Error::ExceedsLimit { limit, .. } if limit == l),
            Want::Table => matches!(e, Error::ModifyQp(_)),
            Want::Dv(f) => matches!(e, Error::DvRefused { feature, .. } if feature == f),
        }
    }
}

/// The objects the cases act on.
struct Fx<'a, 'p, 'd, 'h> {
    /// RC QPs: one in RESET, one in INIT (for RTR attributes), one in RTR (for RTS
    /// attributes), one in RTS connected to `peer`.
    reset: &'a mut Qp<'p, 'd, H<'h>>,
    init: &'a mut Qp<'p, 'd, H<'h>>,
    rtr: &'a mut Qp<'p, 'd, H<'h>>,
    rc: &'a mut Qp<'p, 'd, H<'h>>,
    peer: &'a mut Qp<'p, 'd, H<'h>>,
    uc: &'a mut Qp<'p, 'd, H<'h>>,
    ud: &'a mut Qp<'p, 'd, H<'h>>,
    /// An RC QP on `srq`.
    on_srq: &'a mut Qp<'p, 'd, H<'h>>,
    srq: &'a mut Srq<'p, 'd, H<'h>>,
    /// A CQ no QP uses.
    cq: &'a mut Cq<'d, H<'h>>,
    /// On a device in its error state: an RTS QP and an SRQ.
    dead_qp: &'a mut Qp<'p, 'd, H<'h>>,
    dead_srq: &'a Srq<'p, 'd, H<'h>>,
}

type Run<'c> = Box<dyn for<'a, 'p, 'd, 'h> Fn(&mut Fx<'a, 'p, 'd, 'h>) -> Result<(), Error> + 'c>;

fn path() -> AhAttr {
    AhAttr {
        dlid: 1,
        port_num: 1,
        ..AhAttr::default()
    }
}

/// A signaled request `op` over `sg`.
fn wr(sg: &[Sge], op: SendOp) -> SendWr<'_> {
    common::send_wr(1, sg, op)
}

fn recv(sg: &[Sge]) -> [RecvWr<'_>; 1] {
    [RecvWr {
        wr_id: 1,
        sg_list: sg,
    }]
}

fn ud_up(q: &mut Qp<'_, '_, H<'_>>) {
    q.to_init(1, 0, AccessFlags::empty(), 0x11).unwrap();
    q.to_rtr(0, 0, AhAttr::default(), Mtu::Mtu4096).unwrap();
    q.to_rts(0).unwrap();
}

#[test]
fn every_bad_input_in_the_catalogue_gets_its_typed_error_and_nothing_panics() {
    // Every root first (the objects' lifetimes tie them together).
    let (hal, other_hal, dead_hal) = (
        SimHal::synchronous(),
        SimHal::synchronous(),
        SimHal::synchronous(),
    );
    let dev = Device::bring_up(&hal, Config::default()).unwrap();
    let other = Device::bring_up(&other_hal, Config::default()).unwrap();
    let dead = Device::bring_up(&dead_hal, Config::default()).unwrap();
    let caps = dev.info().caps;
    let pd = dev.alloc_pd().unwrap();
    let other_pd = other.alloc_pd().unwrap();
    let dead_pd = dead.alloc_pd().unwrap();
    let other_cq = other.create_cq(4).unwrap();
    let other_ch = other.create_comp_channel().unwrap();
    let cap = cap(4, 2, 64);
    let srq_attr = |max_wr, max_sge, srq_limit| {
        SrqInitAttr::new(SrqAttr {
            max_wr,
            max_sge,
            srq_limit,
        })
    };
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    // A device in its error state, with an RTS QP and an SRQ.
    let dead_cq = dead.create_cq(8).unwrap();
    let dead_srq = dead_pd.create_srq(&srq_attr(4, 1, 0)).unwrap();
    let dinit = QpInitAttr::new(QpType::Rc, &dead_cq, &dead_cq, cap);
    let mut dead_qp = dead_pd.create_qp(&dinit).unwrap();
    let mut dead_peer = dead_pd.create_qp(&dinit).unwrap();
    common::connect_pair(&mut dead_qp, &mut dead_peer, access, Mtu::Mtu1024);
    dead_hal.model().set_health(1, true);
    dead.check_health();
    assert!(dead.is_fatal());

    let ch = dev.create_comp_channel().unwrap();
    let qcq = dev.create_cq(64).unwrap();
    let mut cq = dev.create_cq(8).unwrap();
    let init_of = |t| QpInitAttr::new(t, &qcq, &qcq, cap);
    let mut reset = pd.create_qp(&init_of(QpType::Rc)).unwrap();
    let mut init = pd.create_qp(&init_of(QpType::Rc)).unwrap();
    let mut rtr = pd.create_qp(&init_of(QpType::Rc)).unwrap();
    let mut rc = pd.create_qp(&init_of(QpType::Rc)).unwrap();
    let mut peer = pd.create_qp(&init_of(QpType::Rc)).unwrap();
    let mut uc = pd.create_qp(&init_of(QpType::Uc)).unwrap();
    let mut uc_peer = pd.create_qp(&init_of(QpType::Uc)).unwrap();
    let mut ud = pd.create_qp(&init_of(QpType::Ud)).unwrap();
    let mut srq = pd.create_srq(&srq_attr(4, 1, 0)).unwrap();
    let mut on_srq = pd
        .create_qp(&with(init_of(QpType::Rc), |a| a.srq = Some(&srq)))
        .unwrap();
    init.to_init(1, 0, access, 0).unwrap();
    rtr.to_init(1, 0, access, 0).unwrap();
    rtr.to_rtr(rc.qpn().raw(), 0, path(), Mtu::Mtu1024).unwrap();
    common::connect_pair(&mut rc, &mut peer, access, Mtu::Mtu1024);
    common::connect_pair(&mut uc, &mut uc_peer, access, Mtu::Mtu1024);
    on_srq.to_init(1, 0, access, 0).unwrap();
    ud_up(&mut ud);
    let mr = region(&pd, 8192, access);
    let xrcd = dev.alloc_xrcd().unwrap();
    let xrc_srq = xrcd
        .create_xrc_srq(&pd, &qcq, srq_attr(4, 1, 0).attr)
        .unwrap();

    let one = [sge(&mr, 0, 8)];
    let many = |n: u32| -> Vec<Sge> { (0..=n).map(|k| sge(&mr, 8 * u64::from(k), 8)).collect() };
    let send_sges = many(rc.cap().max_send_sge);
    let recv_sges = many(peer.cap().max_recv_sge);
    let srq_sges = many(1);
    let flagged = [Sge {
        length: 1 << 31,
        ..sge(&mr, 0, 8)
    }];
    let huge = [Sge {
        length: u32::MAX,
        ..sge(&mr, 0, 8)
    }];
    let big_inline = vec![0u8; rc.cap().max_inline_data as usize + 1];
    let ud_long = [sge(&mr, 0, 4096), sge(&mr, 4096, 1)];
    let write = SendOp::RdmaWrite {
        remote_addr: mr.addr(),
        rkey: mr.rkey().raw(),
    };
    let read = SendOp::RdmaRead {
        remote_addr: mr.addr(),
        rkey: mr.rkey().raw(),
    };
    let fadd = SendOp::AtomicFetchAndAdd {
        remote_addr: mr.addr(),
        rkey: mr.rkey().raw(),
        add: 1,
    };
    let cas = SendOp::AtomicCmpAndSwp {
        remote_addr: mr.addr(),
        rkey: mr.rkey().raw(),
        compare: 0,
        swap: 1,
    };
    let ah = pd.create_ah(path()).unwrap();
    let dest = ah.dest(ud.qpn().raw(), 0x11).unwrap();
    let (rtr_attr, rtr_mask) = common::rc_rtr(rc.qpn().raw(), path());
    let (rts_attr, rts_mask) = common::rc_rts();
    let mut init_attr = QpAttr::default();
    init_attr.qp_state = QpState::Init;
    init_attr.port_num = 1;
    init_attr.qp_access_flags = access;
    let init_mask =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    let mgid = [0xff, 0x12, 0x40, 0x1b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let mut ucast = mgid;
    ucast[0] = 0xfe;
    let foreign_dma = other_hal.dma_alloc(4096, 4096).unwrap().share();
    let foreign_dma = std::cell::RefCell::new(Some(foreign_dma));
    let grh_wc = Wc {
        wc_flags: WcFlags::GRH,
        ..Wc::EMPTY
    };
    let gids = caps.gid_table_len;
    let pkeys = caps.pkey_table_len;

    // (name, verb, what it must get, whether the refusal needs no command)
    let mut cases: Vec<(String, Run<'_>, Want)> = Vec::new();
    macro_rules! case {
        ($name:expr, $want:expr, |$f:ident| $body:expr) => {
            cases.push((
                String::from($name),
                Box::new(move |$f: &mut Fx<'_, '_, '_, '_>| {
                    let _ = &$f;
                    $body
                }),
                $want,
            ))
        };
    }
    let hal_ref = &hal;
    let (dev, pd, ch, other_ch, other_cq, other_pd, xrcd, ah) =
        (&dev, &pd, &ch, &other_ch, &other_cq, &other_pd, &xrcd, &ah);
    let (qcq, xrc_srq, foreign_dma, grh_wc) = (&qcq, &xrc_srq, &foreign_dma, &grh_wc);
    let (one, send_sges, recv_sges, srq_sges) = (&one, &send_sges, &recv_sges, &srq_sges);
    let (flagged, huge, big_inline, ud_long) = (&flagged, &huge, &big_inline, &ud_long);

    // Device queries.
    for port in [0u8, 2, 9, 255] {
        case!(
            format!("query_port {port}"),
            Want::Is(Error::NoSuchPort { port }),
            |f| dev.query_port(port).map(drop)
        );
        case!(
            format!("query_gid port {port}"),
            Want::Is(Error::NoSuchPort { port }),
            |f| dev.query_gid(port, 0).map(drop)
        );
        case!(
            format!("init_ah_from_wc port {port}"),
            Want::Is(Error::NoSuchPort { port }),
            |f| dev.init_ah_from_wc(port, &Wc::EMPTY, None).map(drop)
        );
    }
    for index in [gids, gids + 1, u32::MAX] {
        case!(
            format!("query_gid index {index}"),
            Want::Over(Limit::GidIndex),
            |f| dev.query_gid(1, index).map(drop)
        );
    }
    case!(
        "init_ah_from_wc: GRH flagged, none given",
        Want::Bad(Invalid::GrhMissing),
        |f| dev.init_ah_from_wc(1, grh_wc, None).map(drop)
    );
    case!(
        "create_ah_from_wc: GRH flagged, none given",
        Want::Bad(Invalid::GrhMissing),
        |f| pd.create_ah_from_wc(grh_wc, None, 1).map(drop)
    );
    let mut bad_grh = [0u8; 40];
    bad_grh[0] = 0x45; // IPv4, not IPv6 with the IBA next header
    case!(
        "init_ah_from_wc: an IPv4 header",
        Want::Bad(Invalid::GrhUnsupported),
        |f| dev.init_ah_from_wc(1, grh_wc, Some(&bad_grh)).map(drop)
    );
    let mut unknown_gid = [0u8; 40];
    unknown_gid[0] = 0x60;
    unknown_gid[6] = 0x1b;
    unknown_gid[24..40].copy_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9]);
    case!(
        "init_ah_from_wc: a destination GID the port lacks",
        Want::Bad(Invalid::GidNotFound),
        |f| dev.init_ah_from_wc(1, grh_wc, Some(&unknown_gid)).map(drop)
    );
    let mut mcast_dst = unknown_gid;
    mcast_dst[24] = 0xff;
    case!(
        "init_ah_from_wc: a multicast destination GID",
        Want::Bad(Invalid::GrhUnsupported),
        |f| dev.init_ah_from_wc(1, grh_wc, Some(&mcast_dst)).map(drop)
    );

    // CQs and completion channels.
    case!("create_cq 0", Want::Bad(Invalid::ZeroEntries), |f| dev
        .create_cq(0)
        .map(drop));
    for n in [caps.max_cqe + 1, u32::MAX / 2, u32::MAX] {
        case!(
            format!("create_cq {n}"),
            Want::Over(Limit::CqEntries),
            |f| dev.create_cq(n).map(drop)
        );
    }
    for v in [1u32, 2, u32::MAX] {
        case!(
            format!("create_cq vector {v}"),
            Want::Bad(Invalid::CompVector),
            |f| dev
                .create_cq_with(&with(CqInitAttr::new(4), |a| a.comp_vector = v))
                .map(drop)
        );
        case!(
            format!("create_cq on a channel, vector {v}"),
            Want::Bad(Invalid::CompVector),
            |f| dev
                .create_cq_with(&with(CqInitAttr::new(4), |a| {
                    a.comp_vector = v;
                    a.channel = Some(ch);
                }))
                .map(drop)
        );
    }
    case!(
        "create_cq on another device's channel",
        Want::Bad(Invalid::ForeignObject),
        |f| dev
            .create_cq_with(&with(CqInitAttr::new(4), |a| a.channel = Some(other_ch)))
            .map(drop)
    );
    case!("resize_cq 0", Want::Bad(Invalid::ZeroEntries), |f| f
        .cq
        .resize(0));
    for n in [caps.max_cqe + 1, u32::MAX] {
        case!(
            format!("resize_cq {n}"),
            Want::Over(Limit::CqEntries),
            |f| f.cq.resize(n)
        );
    }
    for n in [0u32, 1, u32::MAX] {
        case!(
            format!("ack_events {n} with none read"),
            Want::Bad(Invalid::AckCount),
            |f| f.cq.ack_events(n)
        );
    }

    // Memory regions.
    case!(
        "reg_mr remote write without local write",
        Want::Bad(Invalid::RemoteWriteWithoutLocalWrite),
        |f| reg(pd, hal_ref, AccessFlags::REMOTE_WRITE)
    );
    case!(
        "reg_mr remote atomic without local write",
        Want::Bad(Invalid::RemoteWriteWithoutLocalWrite),
        |f| reg(pd, hal_ref, AccessFlags::REMOTE_ATOMIC)
    );
    case!(
        "reg_mr remote write and read without local write",
        Want::Bad(Invalid::RemoteWriteWithoutLocalWrite),
        |f| reg(
            pd,
            hal_ref,
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
        )
    );
    case!(
        "reg_mr of another HAL's memory",
        Want::Bad(Invalid::ForeignMemory),
        |f| {
            let taken = foreign_dma.borrow_mut().take();
            match taken {
                Some(m) => pd
                    .reg_mr(m, AccessFlags::LOCAL_WRITE)
                    .map(drop)
                    .map_err(|(e, m)| {
                        *foreign_dma.borrow_mut() = m;
                        e
                    }),
                None => Ok(()),
            }
        }
    );

    // Address handles.
    for (name, attr, want) in [
        (
            "sl 16",
            AhAttr { sl: 16, ..path() },
            Want::Bad(Invalid::AddressVector),
        ),
        (
            "sl 255",
            AhAttr { sl: 255, ..path() },
            Want::Bad(Invalid::AddressVector),
        ),
        (
            "dlid 0",
            AhAttr { dlid: 0, ..path() },
            Want::Bad(Invalid::AddressVector),
        ),
        (
            "port 0",
            AhAttr {
                port_num: 0,
                ..path()
            },
            Want::Is(Error::NoSuchPort { port: 0 }),
        ),
        (
            "port 9",
            AhAttr {
                port_num: 9,
                ..path()
            },
            Want::Is(Error::NoSuchPort { port: 9 }),
        ),
        (
            "static rate 1",
            AhAttr {
                static_rate: 1,
                ..path()
            },
            Want::Bad(Invalid::StaticRate),
        ),
        (
            "static rate 23",
            AhAttr {
                static_rate: 23,
                ..path()
            },
            Want::Bad(Invalid::StaticRate),
        ),
        (
            "static rate 255",
            AhAttr {
                static_rate: 255,
                ..path()
            },
            Want::Bad(Invalid::StaticRate),
        ),
        (
            "sgid index past the table",
            AhAttr {
                is_global: true,
                grh: GlobalRoute {
                    sgid_index: gids as u8,
                    ..GlobalRoute::default()
                },
                ..path()
            },
            Want::Bad(Invalid::AddressVector),
        ),
    ] {
        case!(format!("create_ah {name}"), want, |f| pd
            .create_ah(attr)
            .map(drop));
    }
    for qpn in [1u32 << 24, u32::MAX] {
        case!(
            format!("ah dest qpn {qpn:#x}"),
            Want::Bad(Invalid::DestQpn),
            |f| ah.dest(qpn, 1).map(drop)
        );
    }

    // Creating QPs.
    let qp_caps: Vec<(&str, QpCap, Want)> = vec![
        (
            "max_send_wr past max_qp_wr",
            QpCap {
                max_send_wr: caps.max_qp_wr + 1,
                ..cap
            },
            Want::Over(Limit::QpWr),
        ),
        (
            "max_send_wr u32::MAX",
            QpCap {
                max_send_wr: u32::MAX,
                ..cap
            },
            Want::Over(Limit::QpWr),
        ),
        (
            "max_recv_wr past max_qp_wr",
            QpCap {
                max_recv_wr: caps.max_qp_wr + 1,
                ..cap
            },
            Want::Over(Limit::QpWr),
        ),
        (
            "max_recv_wr u32::MAX",
            QpCap {
                max_recv_wr: u32::MAX,
                ..cap
            },
            Want::Over(Limit::QpWr),
        ),
        (
            "max_send_sge u32::MAX",
            QpCap {
                max_send_sge: u32::MAX,
                ..cap
            },
            Want::Over(Limit::Sge),
        ),
        (
            "max_recv_sge u32::MAX",
            QpCap {
                max_recv_sge: u32::MAX,
                ..cap
            },
            Want::Over(Limit::Sge),
        ),
        (
            "max_inline_data 1 MiB",
            QpCap {
                max_inline_data: 1 << 20,
                ..cap
            },
            Want::Over(Limit::InlineData),
        ),
        (
            "max_inline_data u32::MAX",
            QpCap {
                max_inline_data: u32::MAX,
                ..cap
            },
            Want::Over(Limit::InlineData),
        ),
    ];
    for (name, c, want) in qp_caps {
        for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
            case!(format!("create_qp {t:?} {name}"), want, |f| pd
                .create_qp(&QpInitAttr::new(t, qcq, qcq, c))
                .map(drop));
        }
    }
    case!(
        "create_qp XrcTgt through a PD",
        Want::Bad(Invalid::UnsupportedQpType),
        |f| pd
            .create_qp(&QpInitAttr::new(QpType::XrcTgt, qcq, qcq, cap))
            .map(drop)
    );
    case!(
        "create_qp on another device's CQ",
        Want::Bad(Invalid::ForeignObject),
        |f| pd
            .create_qp(&QpInitAttr::new(QpType::Rc, other_cq, qcq, cap))
            .map(drop)
    );
    case!(
        "create_qp receiving into another device's CQ",
        Want::Bad(Invalid::ForeignObject),
        |f| pd
            .create_qp(&QpInitAttr::new(QpType::Rc, qcq, other_cq, cap))
            .map(drop)
    );
    case!(
        "create_srq 0 entries",
        Want::Bad(Invalid::ZeroEntries),
        |f| pd.create_srq(&srq_attr(0, 1, 0)).map(drop)
    );
    for (wr, sge) in [(u32::MAX, 1), (1 << 31, 1), (1, u32::MAX), (4, 1 << 20)] {
        case!(
            format!("create_srq {wr} x {sge}"),
            if sge > 1 {
                Want::Over(Limit::Sge)
            } else {
                Want::Over(Limit::QpWr)
            },
            |f| pd.create_srq(&srq_attr(wr, sge, 0)).map(drop)
        );
    }
    case!(
        "create_xrc_srq with another device's PD",
        Want::Bad(Invalid::ForeignObject),
        |f| xrcd
            .create_xrc_srq(other_pd, qcq, srq_attr(4, 1, 0).attr)
            .map(drop)
    );
    case!(
        "create_xrc_srq 0 entries",
        Want::Bad(Invalid::ZeroEntries),
        |f| xrcd
            .create_xrc_srq(pd, qcq, srq_attr(0, 1, 0).attr)
            .map(drop)
    );

    // modify_qp: RESET → INIT attributes.
    for (name, a, want) in [
        ("port 0", with(init_attr, |a| a.port_num = 0), Invalid::Port),
        ("port 9", with(init_attr, |a| a.port_num = 9), Invalid::Port),
        (
            "pkey_index past the table",
            with(init_attr, |a| a.pkey_index = pkeys as u16),
            Invalid::PkeyIndex,
        ),
        (
            "pkey_index u16::MAX",
            with(init_attr, |a| a.pkey_index = u16::MAX),
            Invalid::PkeyIndex,
        ),
    ] {
        case!(
            format!("modify RESET→INIT {name}"),
            Want::Bad(want),
            |f| f.reset.modify(&a, init_mask)
        );
    }
    // INIT → RTR.
    let av = |g: fn(&mut AhAttr)| {
        let mut a = rtr_attr;
        g(&mut a.ah_attr);
        a
    };
    for (name, a, want) in [
        (
            "rq_psn 2^24",
            with(rtr_attr, |a| a.rq_psn = 1 << 24),
            Invalid::Psn,
        ),
        (
            "rq_psn u32::MAX",
            with(rtr_attr, |a| a.rq_psn = u32::MAX),
            Invalid::Psn,
        ),
        (
            "dest_qp_num 2^24",
            with(rtr_attr, |a| a.dest_qp_num = 1 << 24),
            Invalid::DestQpn,
        ),
        (
            "dest_qp_num u32::MAX",
            with(rtr_attr, |a| a.dest_qp_num = u32::MAX),
            Invalid::DestQpn,
        ),
        (
            "min_rnr_timer 32",
            with(rtr_attr, |a| a.min_rnr_timer = 32),
            Invalid::MinRnrTimer,
        ),
        (
            "min_rnr_timer 255",
            with(rtr_attr, |a| a.min_rnr_timer = 255),
            Invalid::MinRnrTimer,
        ),
        (
            "max_dest_rd_atomic past the device",
            with(rtr_attr, |a| {
                a.max_dest_rd_atomic = (caps.max_qp_rd_atom + 1).min(255) as u8
            }),
            Invalid::MaxDestRdAtomic,
        ),
        (
            "max_dest_rd_atomic 255",
            with(rtr_attr, |a| a.max_dest_rd_atomic = 255),
            Invalid::MaxDestRdAtomic,
        ),
        ("sl 16", av(|a| a.sl = 16), Invalid::Sl),
        ("sl 255", av(|a| a.sl = 255), Invalid::Sl),
        ("av port 0", av(|a| a.port_num = 0), Invalid::Port),
        ("av port 9", av(|a| a.port_num = 9), Invalid::Port),
        ("av port 255", av(|a| a.port_num = 255), Invalid::Port),
        (
            "static rate 1",
            av(|a| a.static_rate = 1),
            Invalid::StaticRate,
        ),
        (
            "static rate 23",
            av(|a| a.static_rate = 23),
            Invalid::StaticRate,
        ),
        (
            "static rate 255",
            av(|a| a.static_rate = 255),
            Invalid::StaticRate,
        ),
        ("dlid 0 without a GRH", av(|a| a.dlid = 0), Invalid::Dlid),
        (
            "sgid index 255",
            av(|a| {
                a.is_global = true;
                a.grh.sgid_index = 255;
            }),
            Invalid::SgidIndex,
        ),
    ] {
        case!(format!("modify INIT→RTR {name}"), Want::Bad(want), |f| f
            .init
            .modify(&a, rtr_mask));
    }
    let sgid_at_len = {
        let mut a = rtr_attr;
        a.ah_attr.is_global = true;
        a.ah_attr.grh.sgid_index = gids as u8;
        a
    };
    if gids < 255 {
        case!(
            "modify INIT→RTR sgid index at the table's length",
            Want::Bad(Invalid::SgidIndex),
            |f| f.init.modify(&sgid_at_len, rtr_mask)
        );
    }
    let mut alt = rtr_attr;
    alt.alt_ah_attr = path();
    alt.alt_port_num = 1;
    if !caps.apm {
        case!(
            "modify INIT→RTR with an alternate path",
            Want::Bad(Invalid::NoPathMigration),
            |f| f.init.modify(&alt, rtr_mask | QpAttrMask::ALT_PATH)
        );
    }
    // RTR → RTS.
    for (name, a, want) in [
        (
            "sq_psn 2^24",
            with(rts_attr, |a| a.sq_psn = 1 << 24),
            Invalid::Psn,
        ),
        (
            "sq_psn u32::MAX",
            with(rts_attr, |a| a.sq_psn = u32::MAX),
            Invalid::Psn,
        ),
        (
            "retry_cnt 8",
            with(rts_attr, |a| a.retry_cnt = 8),
            Invalid::RetryCount,
        ),
        (
            "retry_cnt 255",
            with(rts_attr, |a| a.retry_cnt = 255),
            Invalid::RetryCount,
        ),
        (
            "rnr_retry 8",
            with(rts_attr, |a| a.rnr_retry = 8),
            Invalid::RnrRetry,
        ),
        (
            "rnr_retry 255",
            with(rts_attr, |a| a.rnr_retry = 255),
            Invalid::RnrRetry,
        ),
        (
            "timeout 32",
            with(rts_attr, |a| a.timeout = 32),
            Invalid::Timeout,
        ),
        (
            "timeout 255",
            with(rts_attr, |a| a.timeout = 255),
            Invalid::Timeout,
        ),
        (
            "max_rd_atomic past the device",
            with(rts_attr, |a| {
                a.max_rd_atomic = (caps.max_qp_init_rd_atom + 1).min(255) as u8
            }),
            Invalid::MaxRdAtomic,
        ),
        (
            "max_rd_atomic 255",
            with(rts_attr, |a| a.max_rd_atomic = 255),
            Invalid::MaxRdAtomic,
        ),
    ] {
        case!(format!("modify RTR→RTS {name}"), Want::Bad(want), |f| f
            .rtr
            .modify(&a, rts_mask));
    }
    // Transitions and masks the table refuses.
    case!("modify RESET→RTR", Want::Table, |f| f
        .reset
        .modify(&rtr_attr, rtr_mask));
    case!("modify RESET→RTS", Want::Table, |f| f
        .reset
        .modify(&rts_attr, rts_mask));
    case!("modify INIT→RTS", Want::Table, |f| f
        .init
        .modify(&rts_attr, rts_mask));
    case!("modify RTS→RTR", Want::Table, |f| f
        .rc
        .modify(&rtr_attr, rtr_mask));
    case!("modify INIT→RTR without the path", Want::Table, |f| f
        .init
        .modify(&rtr_attr, rtr_mask - QpAttrMask::AV));
    case!("modify INIT→RTR without dest_qp_num", Want::Table, |f| f
        .init
        .modify(&rtr_attr, rtr_mask - QpAttrMask::DEST_QPN));
    case!("modify RTR→RTS without sq_psn", Want::Table, |f| f
        .rtr
        .modify(&rts_attr, rts_mask - QpAttrMask::SQ_PSN));
    case!(
        "modify RTR→RTS with rq_psn (not allowed there)",
        Want::Table,
        |f| f.rtr.modify(&rts_attr, rts_mask | QpAttrMask::RQ_PSN)
    );
    case!("modify RESET→INIT without the port", Want::Table, |f| f
        .reset
        .modify(&init_attr, init_mask - QpAttrMask::PORT));
    let mut sqd = QpAttr::default();
    sqd.qp_state = QpState::Sqd;
    case!(
        "modify RTS→SQD (mlx5 has no drain)",
        Want::Bad(Invalid::UnsupportedTransition),
        |f| f.rc.modify(&sqd, QpAttrMask::STATE)
    );
    case!(
        "query_qp with an empty mask",
        Want::Bad(Invalid::QueryMask),
        |f| f.rc.query_qp(QpAttrMask::empty()).map(drop)
    );

    // Posting sends.
    for (name, st) in [("RESET", 0), ("INIT", 1), ("RTR", 2)] {
        case!(
            format!("post_send in {name}"),
            Want::Bad(Invalid::QpState),
            |f| {
                let q = match st {
                    0 => &mut *f.reset,
                    1 => &mut *f.init,
                    _ => &mut *f.rtr,
                };
                q.post_send(&[wr(one, SendOp::Send)]).map_err(|e| e.error)
            }
        );
    }
    let rc_sends: Vec<(&str, SendWr<'_>, Invalid)> = vec![
        (
            "an SGE past max_send_sge",
            wr(send_sges, SendOp::Send),
            Invalid::TooManySge,
        ),
        (
            "an SGE length with bit 31",
            wr(flagged, SendOp::Send),
            Invalid::SgeLength,
        ),
        (
            "an SGE length u32::MAX",
            wr(huge, SendOp::Send),
            Invalid::SgeLength,
        ),
        (
            "a WRITE SGE length with bit 31",
            wr(flagged, write),
            Invalid::SgeLength,
        ),
        (
            "a READ SGE length with bit 31",
            wr(flagged, read),
            Invalid::SgeLength,
        ),
        (
            "inline data past the QP's room",
            SendWr {
                inline_data: big_inline,
                flags: SendFlags::INLINE | SendFlags::SIGNALED,
                ..wr(&[], SendOp::Send)
            },
            Invalid::InlineTooLarge,
        ),
        (
            "inline WRITE past the QP's room",
            SendWr {
                inline_data: big_inline,
                flags: SendFlags::INLINE | SendFlags::SIGNALED,
                ..wr(&[], write)
            },
            Invalid::InlineTooLarge,
        ),
        (
            "an inline READ",
            SendWr {
                flags: SendFlags::INLINE | SendFlags::SIGNALED,
                ..wr(one, read)
            },
            Invalid::OpcodeForQpType,
        ),
        (
            "an inline atomic",
            SendWr {
                flags: SendFlags::INLINE | SendFlags::SIGNALED,
                ..wr(one, fadd)
            },
            Invalid::OpcodeForQpType,
        ),
        (
            "a destination on RC",
            SendWr {
                ud: Some(dest),
                ..wr(one, SendOp::Send)
            },
            Invalid::Destination,
        ),
    ];
    for (name, w, want) in rc_sends {
        case!(format!("post_send RC {name}"), Want::Bad(want), |f| f
            .rc
            .post_send(&[w])
            .map_err(|e| e.error));
        case!(format!("send_batch RC {name}"), Want::Bad(want), |f| f
            .rc
            .send_batch(
            |b| b.post(&w)
        )?);
    }
    for (name, w, want) in [
        ("a READ", wr(one, read), Invalid::OpcodeForQpType),
        ("a fetch-and-add", wr(one, fadd), Invalid::OpcodeForQpType),
        ("a compare-and-swap", wr(one, cas), Invalid::OpcodeForQpType),
        (
            "a destination",
            SendWr {
                ud: Some(dest),
                ..wr(one, SendOp::Send)
            },
            Invalid::Destination,
        ),
        (
            "an SGE past max_send_sge",
            wr(send_sges, SendOp::Send),
            Invalid::TooManySge,
        ),
    ] {
        case!(format!("post_send UC {name}"), Want::Bad(want), |f| f
            .uc
            .post_send(&[w])
            .map_err(|e| e.error));
    }
    for (name, w, want) in [
        (
            "without a destination",
            wr(one, SendOp::Send),
            Invalid::Destination,
        ),
        (
            "a WRITE",
            SendWr {
                ud: Some(dest),
                ..wr(one, write)
            },
            Invalid::OpcodeForQpType,
        ),
        (
            "a READ",
            SendWr {
                ud: Some(dest),
                ..wr(one, read)
            },
            Invalid::OpcodeForQpType,
        ),
        (
            "a fetch-and-add",
            SendWr {
                ud: Some(dest),
                ..wr(one, fadd)
            },
            Invalid::OpcodeForQpType,
        ),
        (
            "a compare-and-swap",
            SendWr {
                ud: Some(dest),
                ..wr(one, cas)
            },
            Invalid::OpcodeForQpType,
        ),
        (
            "past one MTU",
            SendWr {
                ud: Some(dest),
                ..wr(ud_long, SendOp::Send)
            },
            Invalid::UdMessageTooLong,
        ),
        // (Longer than the MTU too, which is checked first.)
        (
            "an SGE length with bit 31",
            SendWr {
                ud: Some(dest),
                ..wr(flagged, SendOp::Send)
            },
            Invalid::UdMessageTooLong,
        ),
    ] {
        case!(format!("post_send UD {name}"), Want::Bad(want), |f| f
            .ud
            .post_send(&[w])
            .map_err(|e| e.error));
    }
    case!(
        "send_batch_xrc on RC",
        Want::Bad(Invalid::XrcRemoteSrq),
        |f| f.rc.send_batch_xrc(|_| ())
    );
    case!(
        "post_send_xrc on RC",
        Want::Bad(Invalid::XrcRemoteSrq),
        |f| f
            .rc
            .post_send_xrc(xrc_srq.srq_num(), &[wr(one, SendOp::Send)])
            .map_err(|e| e.error)
    );
    case!(
        "post_send past the queue's room",
        Want::Is(Error::QueueFull),
        |f| {
            // UC sends complete without a receive, but their space comes back only when their
            // CQ is polled, which no case does.
            let room = f.uc.cap().max_send_wr as usize;
            let ws = vec![wr(one, SendOp::Send); 4 * room + 1];
            let e = f.uc.post_send(&ws).unwrap_err();
            assert!(e.index >= room);
            Err(e.error)
        }
    );

    // Posting receives.
    case!("post_recv in RESET", Want::Bad(Invalid::QpState), |f| f
        .reset
        .post_recv(&recv(one))
        .map_err(|e| e.error));
    for (name, sg, want) in [
        (
            "an SGE past max_recv_sge",
            &recv_sges[..],
            Invalid::TooManySge,
        ),
        (
            "an SGE length with bit 31",
            &flagged[..],
            Invalid::SgeLength,
        ),
        ("an SGE length u32::MAX", &huge[..], Invalid::SgeLength),
    ] {
        case!(format!("post_recv RC {name}"), Want::Bad(want), |f| f
            .peer
            .post_recv(&recv(sg))
            .map_err(|e| e.error));
        case!(format!("post_recv UD {name}"), Want::Bad(want), |f| f
            .ud
            .post_recv(&recv(sg))
            .map_err(|e| e.error));
    }
    case!(
        "post_recv on a QP with an SRQ",
        Want::Bad(Invalid::NoReceiveQueue),
        |f| f.on_srq.post_recv(&recv(one)).map_err(|e| e.error)
    );
    case!(
        "post_recv past the queue's room",
        Want::Is(Error::QueueFull),
        |f| {
            let room = f.uc.cap().max_recv_wr as usize;
            let r = vec![recv(one)[0]; room + 1];
            let e = f.uc.post_recv(&r).unwrap_err();
            assert_eq!(e.index, room);
            Err(e.error)
        }
    );

    // SRQs.
    for (name, sg, want) in [
        ("an SGE past max_sge", &srq_sges[..], Invalid::TooManySge),
        (
            "an SGE length with bit 31",
            &flagged[..],
            Invalid::SgeLength,
        ),
    ] {
        case!(format!("srq post_recv {name}"), Want::Bad(want), |f| f
            .srq
            .post_recv(&recv(sg))
            .map_err(|e| e.error));
        case!(format!("xrc srq post_recv {name}"), Want::Bad(want), |f| {
            xrc_srq.post_recv(&recv(sg)).map_err(|e| e.error)
        });
    }
    case!(
        "srq post_recv past its room",
        Want::Is(Error::QueueFull),
        |f| {
            let r = vec![recv(one)[0]; 64];
            Err(f.srq.post_recv(&r).unwrap_err().error)
        }
    );
    let resize = SrqAttr {
        max_wr: 64,
        max_sge: 1,
        srq_limit: 0,
    };
    case!(
        "modify_srq resize",
        Want::Bad(Invalid::UnsupportedTransition),
        |f| f.srq.modify(&resize, SrqAttrMask::MAX_WR)
    );
    let over = SrqAttr {
        max_wr: 4,
        max_sge: 1,
        srq_limit: u32::MAX,
    };
    case!(
        "modify_srq limit past its size",
        Want::Over(Limit::QpWr),
        |f| f.srq.modify(&over, SrqAttrMask::LIMIT)
    );

    // XRC domains.
    for qpn in [0u32, 0x00ff_ffff] {
        let q = bareverbs_firmware_cmd::Qpn(qpn);
        case!(
            format!("unreg_xrc_rcv_qp {qpn:#x}"),
            Want::Bad(Invalid::UnknownXrcQp),
            |f| xrcd.unreg_xrc_rcv_qp(q)
        );
        case!(
            format!("query_xrc_rcv_qp {qpn:#x}"),
            Want::Bad(Invalid::UnknownXrcQp),
            |f| xrcd.query_xrc_rcv_qp(q).map(drop)
        );
        case!(
            format!("modify_xrc_rcv_qp {qpn:#x}"),
            Want::Bad(Invalid::UnknownXrcQp),
            |f| xrcd.modify_xrc_rcv_qp(q, &init_attr, init_mask)
        );
    }

    // Multicast.
    case!(
        "attach_mcast on RC",
        Want::Bad(Invalid::MulticastQpType),
        |f| f.rc.attach_mcast(&mgid, 0xc001)
    );
    case!(
        "attach_mcast on UC",
        Want::Bad(Invalid::MulticastQpType),
        |f| f.uc.attach_mcast(&mgid, 0xc001)
    );
    case!(
        "attach_mcast a unicast GID",
        Want::Bad(Invalid::MulticastGid),
        |f| f.ud.attach_mcast(&ucast, 0xc001)
    );
    for lid in [0u16, 1, 0xbfff, 0xffff] {
        case!(
            format!("attach_mcast LID {lid:#x}"),
            Want::Bad(Invalid::MulticastLid),
            |f| f.ud.attach_mcast(&mgid, lid)
        );
    }
    case!(
        "detach_mcast not attached",
        Want::Bad(Invalid::NotAttached),
        |f| f.ud.detach_mcast(&mgid, 0xc001)
    );

    // mlx5 direct verbs (seed 004): every refusal by name, before any command.
    let dv = |mask: DvQpInitAttrMask, flags: DvQpCreateFlags| {
        with(DvQpInitAttr::default(), |a| {
            a.comp_mask = mask;
            a.create_flags = flags;
        })
    };
    let cflags = |f| dv(DvQpInitAttrMask::QP_CREATE_FLAGS, f);
    let dv_case = move |t: QpType, a: DvQpInitAttr| {
        move |_f: &mut Fx<'_, '_, '_, '_>| {
            pd.create_qp_dv(&QpInitAttr::new(t, qcq, qcq, cap), &a)
                .map(|_| ())
        }
    };
    for (name, t, a, want) in [
        (
            "create_qp_dv: an unknown comp_mask bit",
            QpType::Rc,
            dv(
                DvQpInitAttrMask::from_bits_retain(1 << 40),
                DvQpCreateFlags::empty(),
            ),
            DvFeature::UnknownCompMask(1 << 40),
        ),
        (
            "create_qp_dv: an unknown create flag",
            QpType::Rc,
            cflags(DvQpCreateFlags::from_bits_retain(1 << 20)),
            DvFeature::UnknownCreateFlags(1 << 20),
        ),
        (
            "create_qp_dv: TUNNEL_OFFLOADS on RC",
            QpType::Rc,
            cflags(DvQpCreateFlags::TUNNEL_OFFLOADS),
            DvFeature::TunnelOffloads,
        ),
        (
            "create_qp_dv: TIR_ALLOW_SELF_LOOPBACK_UC on UD",
            QpType::Ud,
            cflags(DvQpCreateFlags::TIR_ALLOW_SELF_LOOPBACK_UC),
            DvFeature::TirAllowSelfLoopbackUc,
        ),
        (
            "create_qp_dv: TIR_ALLOW_SELF_LOOPBACK_MC on UD",
            QpType::Ud,
            cflags(DvQpCreateFlags::TIR_ALLOW_SELF_LOOPBACK_MC),
            DvFeature::TirAllowSelfLoopbackMc,
        ),
        (
            "create_qp_dv: DISABLE and ALLOW scatter to CQE",
            QpType::Rc,
            cflags(DvQpCreateFlags::DISABLE_SCATTER_TO_CQE | DvQpCreateFlags::ALLOW_SCATTER_TO_CQE),
            DvFeature::DisableScatterToCqe,
        ),
        (
            "create_qp_dv: ALLOW_SCATTER_TO_CQE on UD",
            QpType::Ud,
            cflags(DvQpCreateFlags::ALLOW_SCATTER_TO_CQE),
            DvFeature::AllowScatterToCqe,
        ),
        (
            "create_qp_dv: PACKET_BASED_CREDIT_MODE on UC",
            QpType::Uc,
            cflags(DvQpCreateFlags::PACKET_BASED_CREDIT_MODE),
            DvFeature::PacketBasedCreditMode,
        ),
        (
            "create_qp_dv: SIG_PIPELINING",
            QpType::Rc,
            cflags(DvQpCreateFlags::SIG_PIPELINING),
            DvFeature::SigPipelining,
        ),
        (
            "create_qp_dv: DC on an RC QP",
            QpType::Rc,
            dv(DvQpInitAttrMask::DC, DvQpCreateFlags::empty()),
            DvFeature::Dc,
        ),
        (
            "create_qp_dv: DCI streams past the device's",
            QpType::Driver,
            with(DvQpInitAttr::default(), |x| {
                x.comp_mask = DvQpInitAttrMask::DC | DvQpInitAttrMask::DCI_STREAMS;
                x.dc_init_attr.dc_type = DcType::Dci;
                x.dc_init_attr.dci_streams = DciStreams {
                    log_num_concurent: 31,
                    log_num_errored: 0,
                };
            }),
            DvFeature::DciStreams,
        ),
        (
            "create_qp_dv: MR_LIST on UD",
            QpType::Ud,
            with(DvQpInitAttr::default(), |a| {
                a.comp_mask = DvQpInitAttrMask::SEND_OPS_FLAGS;
                a.send_ops_flags = DvSendOpsFlags::MR_LIST;
            }),
            DvFeature::MrList,
        ),
    ] {
        cases.push((String::from(name), Box::new(dv_case(t, a)), Want::Dv(want)));
    }
    case!(
        "create_qp_dv: a driver QP without DC",
        Want::Bad(Invalid::UnsupportedQpType),
        |f| dv_case(QpType::Driver, DvQpInitAttr::default())(f)
    );
    case!(
        "create_qp: the driver type",
        Want::Bad(Invalid::UnsupportedQpType),
        |f| pd
            .create_qp(&QpInitAttr::new(QpType::Driver, qcq, qcq, cap))
            .map(|_| ())
    );
    case!(
        "create_qp_dv: a DCT without an SRQ",
        Want::Bad(Invalid::DctWithoutSrq),
        |f| dv_case(
            QpType::Driver,
            with(DvQpInitAttr::default(), |a| a.comp_mask =
                DvQpInitAttrMask::DC)
        )(f)
    );
    case!(
        "create_mkey without INDIRECT",
        Want::Bad(Invalid::MkeyFlags),
        |f| pd
            .create_mkey(&MkeyInitAttr::new(MkeyInitFlags::empty(), 4))
            .map(|_| ())
    );
    case!(
        "create_mkey with 0 entries",
        Want::Bad(Invalid::ZeroEntries),
        |f| pd
            .create_mkey(&MkeyInitAttr::new(MkeyInitFlags::INDIRECT, 0))
            .map(|_| ())
    );
    case!(
        "create_mkey with u16::MAX entries",
        Want::Over(Limit::MkeyEntries),
        |f| pd
            .create_mkey(&MkeyInitAttr::new(MkeyInitFlags::INDIRECT, u16::MAX))
            .map(|_| ())
    );
    case!(
        "send_batch_dc on an RC QP",
        Want::Bad(Invalid::DcDestination),
        |f| f.rc.send_batch_dc(|_| ())
    );
    case!(
        "dci_stream_id_reset on an RC QP",
        Want::Bad(Invalid::DcDestination),
        |f| f.rc.dci_stream_id_reset(0)
    );
    case!(
        "dc_dest with a 25-bit DCT number",
        Want::Bad(Invalid::DestQpn),
        |f| ah.dc_dest(1 << 24, 0).map(|_| ())
    );

    // A device in its error state.
    case!(
        "post_send on a fatal device",
        Want::Is(Error::DeviceFatal),
        |f| f
            .dead_qp
            .post_send(&[wr(&[], SendOp::Send)])
            .map_err(|e| e.error)
    );
    case!(
        "send_batch on a fatal device",
        Want::Is(Error::DeviceFatal),
        |f| f.dead_qp.send_batch(|_| ())
    );
    case!(
        "post_recv on a fatal device",
        Want::Is(Error::DeviceFatal),
        |f| f.dead_qp.post_recv(&recv(&[])).map_err(|e| e.error)
    );
    case!(
        "srq post_recv on a fatal device",
        Want::Is(Error::DeviceFatal),
        |f| f.dead_srq.post_recv(&recv(&[])).map_err(|e| e.error)
    );

    let mut fx = Fx {
        reset: &mut reset,
        init: &mut init,
        rtr: &mut rtr,
        rc: &mut rc,
        peer: &mut peer,
        uc: &mut uc,
        ud: &mut ud,
        on_srq: &mut on_srq,
        srq: &mut srq,
        cq: &mut cq,
        dead_qp: &mut dead_qp,
        dead_srq: &dead_srq,
    };
    // Refusals that need what the device holds (its GID table) may send read-only commands.
    let reads_device = ["init_ah_from_wc: a destination GID the port lacks"];
    let mut names = std::collections::HashSet::new();
    let mut wrong = Vec::new();
    for (name, run, want) in &cases {
        assert!(names.insert(name.clone()), "two cases named {name}");
        let before = dev.trace().total();
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&mut fx)));
        match got {
            Err(_) => wrong.push(format!("{name}: panicked")),
            Ok(Ok(())) => wrong.push(format!("{name}: accepted")),
            Ok(Err(e)) if !want.matches(&e) => wrong.push(format!("{name}: {e:?}, want {want:?}")),
            Ok(Err(_)) => {}
        }
        let sent = dev.trace().total() - before;
        if sent != 0 && !reads_device.contains(&name.as_str()) {
            wrong.push(format!("{name}: {sent} commands sent"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
    println!(
        "{} bad inputs, each refused with its typed error",
        cases.len()
    );
    assert!(cases.len() >= 150, "{} cases", cases.len());
    let _ = (&uc_peer, &dead_peer, &other_cq);
}

/// Registers fresh memory of `hal` with `access`.
fn reg(pd: &Pd<'_, H<'_>>, hal: &SimHal, access: AccessFlags) -> Result<(), Error> {
    pd.reg_mr(hal.dma_alloc(4096, 4096).unwrap().share(), access)
        .map(drop)
        .map_err(|(e, _)| e)
}
