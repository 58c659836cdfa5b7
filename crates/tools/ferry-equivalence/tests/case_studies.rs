//! NFOS's three case studies on the real NFs: the profiler, run on the
//! "before" configuration, names the root cause and its recipe in its own
//! report, and the recipe lowers the abort rate.
//!
//! Free-running workers conflict only when the OS runs their transactions
//! at the same time, which a loaded machine makes rare; so every run here
//! is a lockstep run (`profile_named_lockstep`), whose aborts are the same
//! on every machine under any load.

use ferry_equivalence::workloads::{profile_named_lockstep, workload, CaseStudy, CASE_STUDIES};

const PACKETS: usize = 60_000;
const ENOUGH_ABORTS: u64 = 20;

fn check(case: &CaseStudy) {
    let (base, trace) = workload(case.nf, PACKETS).expect("workload");
    let (_, before) = profile_named_lockstep(case.nf, &case.args(&base, false), &trace, 2).expect("run the case study");
    eprintln!("{before}");
    assert!(before.summary.aborts >= ENOUGH_ABORTS, "{}: too few aborts to judge:\n{before}", case.name);
    let top = before.top_root_cause().expect("a root cause");
    assert_eq!(top.cause, case.cause, "{}: the profiler's top cause:\n{before}", case.name);
    let text = before.to_string();
    for recipe in &top.recipes {
        assert!(
            text.contains(recipe.text()),
            "{}: the report names the recipe {:?}:\n{text}",
            case.name,
            recipe.text()
        );
    }
    assert!(before.to_json().contains(case.cause.name()), "{}: the JSON names the cause", case.name);
    let (_, after) = profile_named_lockstep(case.nf, &case.args(&base, true), &trace, 2).expect("run after the recipe");
    eprintln!("{after}");
    assert!(
        after.summary.abort_rate < before.summary.abort_rate,
        "{}: the recipe lowers the abort rate: {:.3} -> {:.3}",
        case.name,
        before.summary.abort_rate,
        after.summary.abort_rate
    );
}

#[test]
fn anti_ddos_staleness() {
    check(&CASE_STUDIES[0]);
}

#[test]
fn nat_scarce_ports() {
    check(&CASE_STUDIES[1]);
}

#[test]
fn bridge_refresh_interval() {
    check(&CASE_STUDIES[2]);
}
