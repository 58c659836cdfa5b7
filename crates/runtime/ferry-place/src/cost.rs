//! What a frame costs in each place an NF after the last process can run,
//! and the choice between them.
//!
//! The NFs between the last process and a port that only sends (the
//! post-server part) can run three ways:
//! - in XDP on a loop device in front of the port: the frame crosses one
//!   more veth pair, then runs one pipeline stage per NF;
//! - fused into the last process's threads (`fuse: auto`): one handler
//!   call per NF in a batch, no crossing;
//! - as processes of their own: one more ring hop per NF.
//!
//! A [`CostModel`] holds the per-frame cost of each unit, measured on the
//! machine by `ferry bench cost`; placement takes the cheapest option the
//! chain file allows, and `--explain` prints the three estimates. Without
//! a model, placement keeps its rules (XDP where it can, fused where the
//! NFs fuse), and says so.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// Per-frame costs, ns, as measured on one machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostModel {
    /// One frame through a veth pair by XDP redirect (the loop device).
    pub loop_crossing_ns: f64,
    /// One NF as a stage of the XDP pipeline.
    pub xdp_stage_ns: f64,
    /// One NF's handler inside a fused NF's thread.
    pub fused_stage_ns: f64,
    /// One more NF process on the path: its ring hop, on top of its
    /// handler.
    pub process_hop_ns: f64,
    /// Where the figures come from (machine, date, command).
    pub origin: String,
}

/// Why a cost model file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CostModelError {
    #[error("{path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: not a cost model ({source}); write one with `ferry bench cost --out {path}`")]
    Parse { path: String, source: serde_json::Error },
    #[error("{path}: {field} is {value}: every cost is a finite number of ns, 0 or more")]
    Value { path: String, field: &'static str, value: f64 },
}

/// The environment variable that names a cost model file when no
/// `--cost-model` does.
pub const COST_MODEL_ENV: &str = "FERRY_COST_MODEL";

impl CostModel {
    /// The model a command was given: the file of its `--cost-model` flag,
    /// else of [`COST_MODEL_ENV`]; None when neither names one.
    pub fn configured(flag: Option<&Path>) -> Result<Option<CostModel>, CostModelError> {
        let env = std::env::var_os(COST_MODEL_ENV).map(std::path::PathBuf::from);
        flag.or(env.as_deref()).map(CostModel::load).transpose()
    }

    /// Reads a model `ferry bench cost --out` wrote.
    pub fn load(path: &Path) -> Result<CostModel, CostModelError> {
        let shown = path.display().to_string();
        let text =
            std::fs::read_to_string(path).map_err(|source| CostModelError::Read { path: shown.clone(), source })?;
        let model: CostModel =
            serde_json::from_str(&text).map_err(|source| CostModelError::Parse { path: shown.clone(), source })?;
        for (field, value) in model.fields() {
            if !(value.is_finite() && value >= 0.0) {
                return Err(CostModelError::Value { path: shown, field, value });
            }
        }
        Ok(model)
    }

    fn fields(&self) -> [(&'static str, f64); 4] {
        [
            ("loop_crossing_ns", self.loop_crossing_ns),
            ("xdp_stage_ns", self.xdp_stage_ns),
            ("fused_stage_ns", self.fused_stage_ns),
            ("process_hop_ns", self.process_hop_ns),
        ]
    }

    /// The three estimates for a post-server part of `nfs` NFs; `fusable`
    /// says whether the chain file lets them fuse with the last process,
    /// `split_nat` whether the last of them is a split NAT (which does not
    /// fuse: fused, it runs whole as the process after the others).
    pub fn estimate(&self, nfs: usize, fusable: bool, split_nat: bool) -> PostEstimate {
        let n = nfs as f64;
        let nat_hop = if split_nat { self.process_hop_ns } else { 0.0 };
        PostEstimate {
            xdp_ns: self.loop_crossing_ns + n * self.xdp_stage_ns,
            fused_ns: fusable.then_some(n * self.fused_stage_ns + nat_hop),
            processes_ns: n * (self.process_hop_ns + self.fused_stage_ns),
        }
    }
}

/// Where a post-server part runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostPlace {
    /// In XDP on a loop device in front of the port.
    Xdp,
    /// In the last process's threads.
    Fused,
    /// As processes of their own.
    Processes,
}

impl PostPlace {
    pub fn name(self) -> &'static str {
        match self {
            PostPlace::Xdp => "XDP on a loop device",
            PostPlace::Fused => "fused into the last process",
            PostPlace::Processes => "processes of their own",
        }
    }
}

/// A post-server part's estimated per-frame cost in each place, ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PostEstimate {
    pub xdp_ns: f64,
    /// None when the NFs cannot fuse with the last process.
    pub fused_ns: Option<f64>,
    pub processes_ns: f64,
}

impl PostEstimate {
    /// The cheapest place; on a tie the one placement prefers without a
    /// model (fused, then XDP).
    pub fn cheapest(&self) -> PostPlace {
        let mut best = (PostPlace::Xdp, self.xdp_ns);
        if let Some(f) = self.fused_ns.filter(|&f| f <= best.1) {
            best = (PostPlace::Fused, f);
        }
        if self.processes_ns < best.1 {
            best = (PostPlace::Processes, self.processes_ns);
        }
        best.0
    }

    /// "XDP on a loop device 700 ns, fused 90 ns, processes 270 ns".
    pub fn describe(&self) -> String {
        let fused = self.fused_ns.map_or("fused: cannot".to_string(), |f| format!("fused {f:.0} ns"));
        format!("XDP on a loop device {:.0} ns, {fused}, processes {:.0} ns", self.xdp_ns, self.processes_ns)
    }
}

/// What placement decided for one post-server part, for `--explain`.
#[derive(Debug, Clone, PartialEq)]
pub struct PostCost {
    /// The last process before it, and the port it ends at.
    pub after: String,
    pub port: String,
    pub nfs: Vec<String>,
    pub estimate: PostEstimate,
    pub chosen: PostPlace,
    /// The model's origin; "forced" when `offload: force` decided.
    pub by: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> CostModel {
        CostModel {
            loop_crossing_ns: 100.0,
            xdp_stage_ns: 200.0,
            fused_stage_ns: 30.0,
            process_hop_ns: 40.0,
            origin: "test".into(),
        }
    }

    #[test]
    fn estimates_add_up_per_nf() {
        let e = model().estimate(3, true, false);
        assert_eq!((e.xdp_ns, e.fused_ns, e.processes_ns), (700.0, Some(90.0), 210.0));
        assert_eq!(e.cheapest(), PostPlace::Fused);
        assert_eq!(model().estimate(3, false, false).cheapest(), PostPlace::Processes);
        assert_eq!(model().estimate(3, true, true).fused_ns, Some(130.0), "the whole NAT's hop");
        let cheap_xdp = CostModel { xdp_stage_ns: 10.0, loop_crossing_ns: 5.0, ..model() };
        assert_eq!(cheap_xdp.estimate(3, true, false).cheapest(), PostPlace::Xdp);
        assert_eq!(e.describe(), "XDP on a loop device 700 ns, fused 90 ns, processes 210 ns");
    }

    #[test]
    fn ties_go_to_fused_then_xdp() {
        let flat =
            CostModel { loop_crossing_ns: 0.0, xdp_stage_ns: 1.0, fused_stage_ns: 1.0, process_hop_ns: 0.0, ..model() };
        assert_eq!(flat.estimate(2, true, false).cheapest(), PostPlace::Fused);
        assert_eq!(flat.estimate(2, false, false).cheapest(), PostPlace::Xdp);
    }

    #[test]
    fn a_model_file_is_checked() {
        let dir = std::env::temp_dir().join(format!("ferry-cost-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.json");
        std::fs::write(&path, serde_json::to_string(&model()).unwrap()).unwrap();
        assert_eq!(CostModel::load(&path).unwrap(), model());
        std::fs::write(&path, serde_json::to_string(&CostModel { process_hop_ns: -1.0, ..model() }).unwrap()).unwrap();
        let e = CostModel::load(&path).unwrap_err().to_string();
        assert!(e.contains("process_hop_ns is -1"), "{e}");
        std::fs::write(&path, "{\"loop_crossing_ns\": 1}").unwrap();
        let e = CostModel::load(&path).unwrap_err().to_string();
        assert!(e.contains("not a cost model") && e.contains("ferry bench cost --out"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
