//! NFOS's three case studies on the real NFs: the profiler, run on the
//! "before" configuration, names the root cause and its recipe in its own
//! report, and the recipe lowers the abort rate.
//!
//! Conflicts need both workers running at the same time; on a loaded
//! 2-CPU machine they sometimes are not, so a run that shows too few
//! aborts to judge is repeated (at most 5 times).

use std::sync::Mutex;

use ferry_parallel::profiler::Profile;
use ferry_parallel::workloads::{run_named, workload, CaseStudy, CASE_STUDIES};

/// The case studies saturate both CPUs: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const PACKETS: usize = 60_000;
const ENOUGH_ABORTS: u64 = 20;

fn profile_until_contended(case: &CaseStudy, args: &[String], trace: &[ferry_parallel::runtime::Packet]) -> Profile {
    let mut last = None;
    for _ in 0..5 {
        let run = run_named(case.nf, args, trace, 2).expect("run the case study");
        let aborts = run.report.total_stats().aborts;
        last = Some(run.profile);
        if aborts >= ENOUGH_ABORTS {
            break;
        }
    }
    last.expect("at least one run")
}

fn check(case: &CaseStudy) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (base, trace) = workload(case.nf, PACKETS).expect("workload");
    let before = profile_until_contended(case, &case.args(&base, false), &trace);
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
    let after = run_named(case.nf, &case.args(&base, true), &trace, 2).expect("run after the recipe").profile;
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
