//! A flow monitor's table when the NF runs as a process: a
//! [`UserTable`] with the pipeline's flow-monitor layout (`ferry_pl_flows`:
//! key [`FlowKey`], value [`PlCount`]), so that ferryd reads the flows of a
//! flow monitor the same way wherever it was placed.

use crate::pipeline::{FlowKey, PlCount};
use crate::user_table::{Layout, UserTable};

/// Its name in a welcome's map fds.
pub const MAP_NAME: &str = "ferry_nf_flows";

pub struct Flows;

impl Layout for Flows {
    const NAME: &'static str = MAP_NAME;
    type Key = FlowKey;
    type Value = PlCount;
}

pub type FlowTable = UserTable<Flows>;

impl FlowTable {
    /// Every flow in the table.
    pub fn flows(&self) -> Vec<(FlowKey, PlCount)> {
        self.entries()
    }
}
