//! The chain state a `ferryd --persist` leaves in its state directory and
//! the next one adopts: a file either is refused, or every index in it
//! names something in it, and it writes back to a file that reads the
//! same.

use ferryd::persist::ChainState;

pub fn chain_state(data: &[u8]) {
    let Ok(state) = ChainState::from_bytes(data) else { return };
    let plan = &state.plan;
    for (i, nf) in plan.nfs.iter().enumerate() {
        // What adoption indexes, per NF.
        let _ = (&state.nfs[i], state.nf_ids[i], &state.creds[i], &plan.domains[nf.domain]);
    }
    let written = serde_json::to_vec(&state).expect("a state serialises");
    let again = ChainState::from_bytes(&written).expect("a state written back reads back");
    assert_eq!(serde_json::to_vec(&again).expect("serialises"), written, "a state changed on its way round");
}
