//! Queue counter sets: receive queues count their drops into one (ALLOC/QUERY_Q_COUNTER;
//! mlx5_ifc `query_q_counter_out`).

crate::ifc! {
    pub struct AllocQCounterIn => alloc_q_counter_in: 0x80 bits {
        0x0 opcode: 16,
        0x10 uid: 16,
        0x30 op_mod: 16,
    }
    pub struct AllocQCounterOut => alloc_q_counter_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
        0x58 counter_set_id: 8,
    }
    pub struct DeallocQCounterIn => dealloc_q_counter_in: 0x80 bits {
        0x0 opcode: 16,
        0x30 op_mod: 16,
        0x58 counter_set_id: 8,
    }
    pub struct QueryQCounterIn => query_q_counter_in: 0x100 bits {
        0x0 opcode: 16,
        0x30 op_mod: 16,
        0x40 other_vport: 1,
        0x50 vport_number: 16,
        0xc0 clear: 1,
        0xc1 aggregate: 1,
        0xf8 counter_set_id: 8,
    }
    pub struct QueryQCounterOut => query_q_counter_out: 0x800 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
        0x180 out_of_buffer: 32,
    }
    pub struct DeallocQCounterOut => dealloc_q_counter_out: 0x80 bits {
        0x0 status: 8,
        0x20 syndrome: 32,
    }
}
