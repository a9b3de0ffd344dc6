//! QP states, types and the attribute-mask rules of each state transition.
