//! Ethernet: raw packet queues on the NIC, flow steering and a DPDK-style burst API.
//!
//! A port ([`Device::open_eth`](crate::Device::open_eth)) shares a PD, a transport domain, a
//! TIS and a NIC receive flow table among its queues. Packets live in a [`PktPool`] of equal
//! DMA buffers; a [`RxQueue`] (an RQ, its CQ and a TIR) hands them over filled with
//! [`RxQueue::rx_burst`], a [`TxQueue`] (an SQ on the TIS and its CQ) sends them with
//! [`TxQueue::tx_burst`] and gives them back to the pool once sent. Rules
//! ([`EthPort::add_rule`]) steer frames by MAC, VLAN, ethertype, IP and ports to a queue or
//! spread them over an [`RssGroup`]. Nothing allocates after set-up.
//!
//! The queues are the SQ and RQ objects Linux mlx5e and mlx5_ib's raw packet QPs build
//! (ConnectX-4 and later have no raw Ethernet QP context: mlx5_ib `create_raw_packet_qp`
//! makes an SQ, an RQ, a TIS and a TIR), not a QP.
//!
//! ```
//! use bareverbs::eth::*;
//! use bareverbs::{Config, Device};
//! use bareverbs_model::{ModelConfig, SimHal};
//!
//! let hal = SimHal::new(ModelConfig { port_type_eth: true, ..ModelConfig::default() },
//!                       bareverbs_model::Drive::Synchronous);
//! let dev = Device::bring_up(&hal, Config::default()).unwrap();
//! let port = dev.open_eth().unwrap();
//! let pool = PktPool::new(&port, 512, 2048).unwrap();
//! let mut rxq = RxQueue::new(&port, &pool, RxQueueAttr::default()).unwrap();
//! let mut txq = TxQueue::new(&port, &pool, TxQueueAttr::default()).unwrap();
//! // Everything sent to the port's own MAC comes back on the port (local loopback).
//! let _rule = port.add_rule(&FlowMatch::any().dmac(port.mac()),
//!                           FlowDest::Queue(&rxq)).unwrap();
//! let mut p = pool.alloc().unwrap();
//! let mut frame = [0u8; 60];
//! frame[..6].copy_from_slice(&port.mac());
//! frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
//! pool.write(&mut p, 0, &frame).unwrap();
//! assert_eq!(txq.tx_burst(&[p]), 1);
//! let mut got = [Pkt::EMPTY; 8];
//! assert_eq!(rxq.rx_burst(&mut got), 1);
//! assert_eq!(got[0].len(), 60);
//! pool.free(got[0]).unwrap();
//! ```

mod cq;
mod flow;
mod pool;
mod port;
mod rxq;
mod txq;

pub use flow::{FlowDest, FlowMatch, FlowRule, RssFields, RssGroup, DEFAULT_RSS_KEY};
pub use pool::{Pkt, PktFlags, PktPool, MAX_POOL_BUFFERS};
pub use port::{EthCaps, EthPort, InlineMode, MAX_FLOW_RULES};
pub use rxq::{RxQueue, RxQueueAttr, MAX_QUEUE_ENTRIES};
pub use txq::{TxQueue, TxQueueAttr, COMPLETION_EVERY};
