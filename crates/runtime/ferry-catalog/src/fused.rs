//! Fused NFs: a run of adjacent NFs that placement (`fuse: auto`) runs
//! in one NF's threads, each batch through each NF in turn (the `fused`
//! kind; [`crate::host::fused`] runs it).
//!
//! Which kinds fuse: the per-packet NFs that forward what they pass
//! ([`Runner::Packet`], joined `a+b` ones too), the flow monitor (at
//! most one per fused NF: it exports to the one flow table ferryd makes
//! for the fused NF), and `fwd` without `by_port`. They take frames, give
//! a verdict and keep to out-link 0, so a thread can run them back to back
//! and do what their processes would have done. The host's other loops,
//! parallel, hybrid and `exec:` NFs run as processes of their own.
//!
//! A fused NF's arguments are its stages, each `@stage=NAME:KIND:N` then
//! the stage's own N arguments (counted, so that no argument of a stage
//! can pass for the start of another); its counters are each stage's,
//! named `NAME.COUNTER`.

use crate::{runner, KindError, Runner};

/// The `kind:` of a fused NF.
pub const FUSED: &str = "fused";

/// What starts a stage in a fused NF's arguments.
const STAGE: &str = "@stage=";

/// One NF of a fused run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage<'a> {
    /// The NF's name in the chain file.
    pub name: &'a str,
    pub kind: &'a str,
    pub args: &'a [String],
}

/// Why NF kind `kind` with `args` cannot be fused, if it cannot.
pub fn unfusable(kind: &str, args: &[String]) -> Option<String> {
    match runner(kind) {
        Ok(Runner::Packet { .. } | Runner::FlowExport) => None,
        Ok(Runner::HostLoop) if kind == "fwd" && args.iter().all(|a| a == "by_port=0") => None,
        Ok(Runner::HostLoop) if kind == "fwd" => Some("fwd with by_port=1 routes by arrival port".into()),
        Ok(other) => Some(format!("{kind} runs as {}", runner_text(other))),
        Err(e) => Some(e.to_string()),
    }
}

fn runner_text(r: Runner) -> &'static str {
    match r {
        Runner::Packet { .. } => "a per-packet NF",
        Runner::FlowExport => "a flow exporter",
        Runner::HostLoop => "a loop of its own",
        Runner::Parallel { .. } => "a parallel NF on worker threads",
        Runner::Hybrid => "a hybrid NF's control plane",
    }
}

/// The arguments of a fused NF made of `stages`.
pub fn fused_args(stages: &[Stage]) -> Vec<String> {
    let mut args = Vec::new();
    for s in stages {
        args.push(format!("{STAGE}{}:{}:{}", s.name, s.kind, s.args.len()));
        args.extend(s.args.iter().cloned());
    }
    args
}

/// A fused NF's stages, from its arguments.
pub fn stages(args: &[String]) -> Result<Vec<Stage<'_>>, KindError> {
    let invalid = |message: String, index| KindError::Invalid { kind: FUSED.into(), message, index };
    let mut stages = Vec::new();
    let mut at = 0;
    while at < args.len() {
        let head = args[at]
            .strip_prefix(STAGE)
            .ok_or_else(|| invalid(format!("{:?}: expected {STAGE}NAME:KIND:N", args[at]), Some(at)))?;
        let mut parts = head.splitn(3, ':');
        let (name, kind, n) = (parts.next(), parts.next(), parts.next().and_then(|n| n.parse::<usize>().ok()));
        let (Some(name), Some(kind), Some(n)) = (name, kind, n) else {
            return Err(invalid(format!("{head:?}: NAME:KIND:N (N: how many arguments follow)"), Some(at)));
        };
        let end = at + 1 + n;
        if end > args.len() {
            return Err(invalid(format!("{name}: {n} arguments announced, {} given", args.len() - at - 1), Some(at)));
        }
        stages.push(Stage { name, kind, args: &args[at + 1..end] });
        at = end;
    }
    if stages.len() < 2 {
        return Err(invalid(format!("give two or more stages, each {STAGE}NAME:KIND:N then its N arguments"), Some(0)));
    }
    Ok(stages)
}

/// How many counters stage `kind` with `args` adds to a fused NF, and
/// whether it is a flow monitor (one per fused NF): what placement
/// weighs when it cuts a run into fused NFs.
pub fn stage_budget(kind: &str, args: &[String]) -> (usize, bool) {
    let counters = counters(&[Stage { name: "", kind, args }]).map_or(usize::MAX, |c| c.len());
    (counters, runner(kind).ok() == Some(Runner::FlowExport))
}

/// The counter names a fused NF declares: each stage's, as `NAME.COUNTER`.
pub fn counters(stages: &[Stage]) -> Result<Vec<String>, KindError> {
    let mut names = Vec::new();
    for s in stages {
        if s.kind == "fwd" {
            continue;
        }
        let nf = crate::build_packet(s.kind, s.args)?;
        // (The flow monitor builds as a per-packet NF too.)
        names.extend(nf.spec().counters.iter().map(|c| format!("{}.{c}", s.name)));
    }
    Ok(names)
}

/// Whether NF kind `kind` with `args` exports flows to a table ferryd
/// makes for it: a flow monitor, or a fused NF with one among its stages.
pub fn exports_flows(kind: &str, args: &[String]) -> bool {
    match kind {
        FUSED => stages(args).is_ok_and(|st| st.iter().any(|s| runner(s.kind).ok() == Some(Runner::FlowExport))),
        _ => runner(kind).ok() == Some(Runner::FlowExport),
    }
}

/// A fused NF's arguments are valid: two or more stages, each of a kind
/// that fuses, each with valid arguments, and counters that fit one NF.
pub(crate) fn check(args: &[String]) -> Result<(), KindError> {
    let stages = stages(args)?;
    for s in &stages {
        let head = format!("{STAGE}{}:{}:{}", s.name, s.kind, s.args.len());
        let at = args.iter().position(|a| *a == head);
        if let Some(why) = unfusable(s.kind, s.args) {
            return Err(KindError::Invalid { kind: FUSED.into(), message: format!("{}: {why}", s.name), index: at });
        }
        crate::check(s.kind, s.args).map_err(|e| KindError::Invalid {
            kind: FUSED.into(),
            message: format!("{}: {e}", s.name),
            index: at,
        })?;
    }
    let monitors = stages.iter().filter(|s| runner(s.kind).ok() == Some(Runner::FlowExport)).count();
    if monitors > 1 {
        let message = format!("{monitors} flow monitors: one fused NF exports one flow table");
        return Err(KindError::Invalid { kind: FUSED.into(), message, index: None });
    }
    let n = counters(&stages)?.len();
    if n > ferry_chain::shm::MAX_NF_COUNTERS {
        let message = format!("{n} counters together, more than one NF has ({})", ferry_chain::shm::MAX_NF_COUNTERS);
        return Err(KindError::Invalid { kind: FUSED.into(), message, index: None });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn stages_round_trip_through_the_arguments() {
        let resp_args = strings(&["10.0.1.2=02:00:00:00:01:02", "--", "10.0.1.2"]);
        let none: Vec<String> = Vec::new();
        let want = vec![
            Stage { name: "resp", kind: "arp-responder+icmp-echo", args: &resp_args },
            Stage { name: "l2fwd", kind: "l2fwd", args: &none },
            Stage { name: "fwd", kind: "fwd", args: &none },
        ];
        let args = fused_args(&want);
        assert_eq!(stages(&args).unwrap(), want);
        assert_eq!(args[0], "@stage=resp:arp-responder+icmp-echo:3");
        check(&args).unwrap();
        let names = counters(&want).unwrap();
        assert_eq!(names[0], "resp.rx");
        assert!(names.contains(&"l2fwd.tx".to_string()), "{names:?}");
    }

    #[test]
    fn what_does_not_fuse_is_refused_with_the_reason() {
        assert_eq!(unfusable("l2fwd", &[]), None);
        assert_eq!(unfusable("fwd", &strings(&["by_port=0"])), None);
        assert!(unfusable("fwd", &strings(&["by_port=1"])).unwrap().contains("by_port"));
        assert_eq!(unfusable("flow-monitor", &[]), None);
        let two = strings(&["@stage=a:flow-monitor:0", "@stage=b:flow-monitor:0"]);
        assert!(check(&two).unwrap_err().to_string().contains("2 flow monitors"));
        assert!(unfusable("parallel-nat", &[]).unwrap().contains("worker threads"));
        assert!(unfusable("sink", &[]).unwrap().contains("loop of its own"));
        let one = strings(&["@stage=a:l2fwd:0"]);
        assert!(check(&one).unwrap_err().to_string().contains("two or more stages"));
        let bad = strings(&["@stage=a:l2fwd:0", "@stage=b:sink:0"]);
        let e = check(&bad).unwrap_err();
        assert!(e.to_string().contains("b: sink runs as a loop of its own"), "{e}");
        assert_eq!(e.arg_index(), Some(1));
        assert!(check(&strings(&["l2fwd", "@stage=b:l2fwd:0"])).is_err());
        assert!(check(&strings(&["@stage=a:l2fwd:1", "@stage=b:l2fwd:0"])).is_err(), "counted wrong");
        assert!(check(&strings(&["@stage=a:l2fwd:2", "x"])).is_err(), "fewer than announced");
    }

    #[test]
    fn a_stage_argument_that_looks_like_a_stage_stays_an_argument() {
        // A payload-scan pattern is free text.
        let scan = strings(&["count", "@stage=evil:rxdrop:0"]);
        let none: Vec<String> = Vec::new();
        let want = vec![
            Stage { name: "scan", kind: "payload-scan", args: &scan },
            Stage { name: "f", kind: "l2fwd", args: &none },
        ];
        let args = fused_args(&want);
        assert_eq!(stages(&args).unwrap(), want);
        check(&args).unwrap();
    }
}
