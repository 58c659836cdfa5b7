//! wrk, the HTTP load generator, and its report.

use super::error::{tail, AppError};
use super::process::{whole_secs, ClientProc, LOG_TAIL};
use crate::TestbedNames;
use std::time::Duration;

/// Options of [`wrk()`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrkOpts {
    /// Open connections (`-c`), kept alive (default 4).
    pub connections: u32,
    /// Threads (`-t`), at most `connections` (default 1).
    pub threads: u32,
    /// Test length (`-d`), rounded up to whole seconds (default 5 s).
    pub duration: Duration,
    /// Pin wrk to this CPU.
    pub cpu: Option<usize>,
    /// Per-request timeout (`--timeout`), rounded up to whole seconds
    /// (default 2 s, wrk's). A request slower than this counts as a
    /// `timeout` socket error and is not in the latency statistics.
    pub timeout: Duration,
}

impl Default for WrkOpts {
    fn default() -> WrkOpts {
        WrkOpts {
            connections: 4,
            threads: 1,
            duration: Duration::from_secs(5),
            cpu: None,
            timeout: Duration::from_secs(2),
        }
    }
}

/// What one wrk run measured. Latencies are in microseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct WrkReport {
    /// Completed requests.
    pub requests: u64,
    /// wrk's `Requests/sec`.
    pub requests_per_sec: f64,
    /// The run's measured length (`N requests in 2.01s`), seconds.
    pub duration_secs: f64,
    pub latency_avg_us: f64,
    pub latency_stdev_us: f64,
    pub latency_max_us: f64,
    pub latency_p50_us: f64,
    pub latency_p75_us: f64,
    pub latency_p90_us: f64,
    pub latency_p99_us: f64,
    /// Socket errors: connect + read + write + timeout.
    pub socket_errors: u64,
    /// Of which timeouts.
    pub timeouts: u64,
    /// wrk's "Non-2xx or 3xx responses" (status ≥ 400, despite the name).
    pub non_2xx: u64,
}

/// A wrk run in progress (so its pid can be given to a
/// [`super::CpuMeter`]); killed if dropped before [`WrkRun::wait`].
#[derive(Debug)]
pub struct WrkRun {
    proc: ClientProc,
}

impl WrkRun {
    /// Starts `wrk --latency -c -t -d --timeout URL` in namespace `ns`.
    pub fn spawn(tb: &TestbedNames, ns: &str, url: &str, opts: &WrkOpts) -> Result<WrkRun, AppError> {
        if opts.connections == 0 || opts.threads == 0 || opts.threads > opts.connections {
            return Err(AppError::InvalidOptions {
                app: "wrk".into(),
                message: format!(
                    "need 1 <= threads <= connections, got {} threads and {} connections",
                    opts.threads, opts.connections
                ),
            });
        }
        let duration = whole_secs(opts.duration);
        let timeout = whole_secs(opts.timeout);
        let args = [
            "--latency".to_string(),
            "-c".into(),
            opts.connections.to_string(),
            "-t".into(),
            opts.threads.to_string(),
            "-d".into(),
            format!("{duration}s"),
            "--timeout".into(),
            format!("{timeout}s"),
            url.to_string(),
        ];
        let cmd = tb.exec(ns, "wrk", args);
        // wrk stops at its duration; let requests in flight time out first.
        let limit = Duration::from_secs(duration + timeout + 10);
        Ok(WrkRun { proc: ClientProc::spawn("wrk", cmd, opts.cpu, None, limit)? })
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Waits for wrk to finish and parses its report.
    pub fn wait(self) -> Result<WrkReport, AppError> {
        let out = self.proc.wait()?.check("wrk")?;
        parse_wrk_output(&out.stdout_text())
    }
}

/// Runs wrk from namespace `ns` against `url` and parses its report.
pub fn wrk(tb: &TestbedNames, ns: &str, url: &str, opts: WrkOpts) -> Result<WrkReport, AppError> {
    WrkRun::spawn(tb, ns, url, &opts)?.wait()
}

/// A wrk time (`93.00us`, `2.29ms`, `1.35s`, `1.00m`, `1.00h`) in µs.
fn parse_time_us(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, scale) = [("us", 1.0), ("ms", 1e3), ("s", 1e6), ("m", 60e6), ("h", 3600e6)]
        .iter()
        .find_map(|(unit, scale)| s.strip_suffix(unit).map(|n| (n, *scale)))?;
    let v: f64 = num.parse().ok()?;
    v.is_finite().then_some(v * scale)
}

/// Parses wrk's text output (with `--latency`). Required: the request
/// count, `Requests/sec`, the latency line and the 50/90/99% lines.
/// Socket-error and non-2xx lines are optional (wrk prints them only when
/// nonzero).
pub fn parse_wrk_output(text: &str) -> Result<WrkReport, AppError> {
    let bad = |message: String| AppError::Parse {
        app: "wrk".into(),
        what: "wrk output",
        message,
        output_tail: tail(text.as_bytes(), LOG_TAIL),
    };
    let mut requests = None;
    let mut duration_secs = None;
    let mut rps = None;
    let mut latency: Option<(f64, f64, f64)> = None;
    let mut pct: [Option<f64>; 4] = [None; 4];
    let (mut socket_errors, mut timeouts, mut non_2xx) = (0u64, 0u64, 0u64);
    let mut in_distribution = false;
    for line in text.lines() {
        let l = line.trim();
        let tok: Vec<&str> = l.split_whitespace().collect();
        if l == "Latency Distribution" {
            in_distribution = true;
        } else if in_distribution && tok.len() == 2 && tok[0].ends_with('%') {
            let slot = match tok[0] {
                "50%" => 0,
                "75%" => 1,
                "90%" => 2,
                "99%" => 3,
                _ => continue,
            };
            pct[slot] = Some(parse_time_us(tok[1]).ok_or_else(|| bad(format!("bad percentile line {l:?}")))?);
        } else if tok.first() == Some(&"Latency") && tok.len() >= 4 {
            let t = |i: usize| parse_time_us(tok[i]).ok_or_else(|| bad(format!("bad latency line {l:?}")));
            latency = Some((t(1)?, t(2)?, t(3)?));
        } else if tok.len() >= 4 && tok[1] == "requests" && tok[2] == "in" {
            in_distribution = false;
            requests = Some(tok[0].parse::<u64>().map_err(|_| bad(format!("bad request count in {l:?}")))?);
            let d = tok[3].trim_end_matches(',');
            duration_secs = Some(parse_time_us(d).ok_or_else(|| bad(format!("bad duration in {l:?}")))? / 1e6);
        } else if let Some(rest) = l.strip_prefix("Socket errors:") {
            // "connect 0, read 0, write 0, timeout 4"
            for part in rest.split(',') {
                let mut it = part.split_whitespace();
                let (Some(kind), Some(n)) = (it.next(), it.next()) else {
                    return Err(bad(format!("bad socket error line {l:?}")));
                };
                let n: u64 = n.parse().map_err(|_| bad(format!("bad socket error line {l:?}")))?;
                socket_errors += n;
                if kind == "timeout" {
                    timeouts = n;
                }
            }
        } else if let Some(rest) = l.strip_prefix("Non-2xx or 3xx responses:") {
            non_2xx = rest.trim().parse().map_err(|_| bad(format!("bad non-2xx line {l:?}")))?;
        } else if let Some(rest) = l.strip_prefix("Requests/sec:") {
            rps = Some(rest.trim().parse::<f64>().map_err(|_| bad(format!("bad Requests/sec line {l:?}")))?);
        }
    }
    let missing = |what: &str| bad(format!("no {what} in the output"));
    let (avg, stdev, max) = latency.ok_or_else(|| missing("`Latency` line"))?;
    let p = |i: usize, name: &str| pct[i].ok_or_else(|| missing(&format!("{name} latency (was --latency given?)")));
    Ok(WrkReport {
        requests: requests.ok_or_else(|| missing("`N requests in` line"))?,
        requests_per_sec: rps.ok_or_else(|| missing("`Requests/sec` line"))?,
        duration_secs: duration_secs.unwrap_or(0.0),
        latency_avg_us: avg,
        latency_stdev_us: stdev,
        latency_max_us: max,
        latency_p50_us: p(0, "50%")?,
        latency_p75_us: p(1, "75%")?,
        latency_p90_us: p(2, "90%")?,
        latency_p99_us: p(3, "99%")?,
        socket_errors,
        timeouts,
        non_2xx,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from wrk 4.1 against nginx 1.22 on this machine.
    const OK: &str = "Running 2s test @ http://127.0.0.1:18080/
  2 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   210.60us  541.57us   8.87ms   94.24%
    Req/Sec    18.95k     5.72k   26.19k    71.43%
  Latency Distribution
     50%   78.00us
     75%  139.00us
     90%  392.00us
     99%    2.75ms
  79146 requests in 2.10s, 12.23MB read
Requests/sec:  37669.49
Transfer/sec:      5.82MB
";

    const NON_2XX: &str = "Running 1s test @ http://127.0.0.1:18080/e
  1 threads and 2 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   311.87us  629.08us   9.76ms   92.35%
    Req/Sec    10.75k     2.00k   13.27k    63.64%
  Latency Distribution
     50%  127.00us
     75%  189.00us
     90%  758.00us
     99%    2.65ms
  11752 requests in 1.10s, 4.19MB read
  Non-2xx or 3xx responses: 11752
Requests/sec:  10685.18
Transfer/sec:      3.81MB
";

    // A throttled 10 MiB download: latencies in seconds, with the trailing
    // space wrk prints after a one-letter unit.
    const SLOW: &str = "Running 4s test @ http://127.0.0.1:18080/big
  1 threads and 2 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.35s     2.10ms   1.35s   100.00%
    Req/Sec     1.00      0.00     1.00    100.00%
  Latency Distribution
     50%    1.35s 
     75%    1.35s 
     90%    1.35s 
     99%    1.35s 
  4 requests in 4.01s, 59.56MB read
Requests/sec:      1.00
Transfer/sec:     14.85MB
";

    // Every request timed out: no latency samples, `-nan%`.
    const TIMEOUTS: &str = "Running 3s test @ http://127.0.0.1:18080/big
  1 threads and 2 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     0.00us    0.00us   0.00us    -nan%
    Req/Sec     1.00      0.00     1.00    100.00%
  Latency Distribution
     50%    0.00us
     75%    0.00us
     90%    0.00us
     99%    0.00us
  4 requests in 3.00s, 45.19MB read
  Socket errors: connect 0, read 0, write 0, timeout 4
Requests/sec:      1.33
Transfer/sec:     15.04MB
";

    #[test]
    fn parses_a_normal_run() {
        let r = parse_wrk_output(OK).unwrap();
        assert_eq!(r.requests, 79146);
        assert_eq!(r.requests_per_sec, 37669.49);
        assert!((r.duration_secs - 2.10).abs() < 1e-9);
        assert!((r.latency_avg_us - 210.60).abs() < 1e-9);
        assert!((r.latency_stdev_us - 541.57).abs() < 1e-9);
        assert!((r.latency_max_us - 8870.0).abs() < 1e-6);
        assert!((r.latency_p50_us - 78.0).abs() < 1e-9);
        assert!((r.latency_p75_us - 139.0).abs() < 1e-9);
        assert!((r.latency_p90_us - 392.0).abs() < 1e-9);
        assert!((r.latency_p99_us - 2750.0).abs() < 1e-6);
        assert_eq!((r.socket_errors, r.timeouts, r.non_2xx), (0, 0, 0));
    }

    #[test]
    fn parses_error_responses() {
        let r = parse_wrk_output(NON_2XX).unwrap();
        assert_eq!(r.requests, 11752);
        assert_eq!(r.non_2xx, 11752);
        assert_eq!(r.socket_errors, 0);
    }

    #[test]
    fn parses_second_units() {
        let r = parse_wrk_output(SLOW).unwrap();
        assert_eq!(r.requests, 4);
        assert!((r.latency_avg_us - 1.35e6).abs() < 1e-3);
        assert!((r.latency_stdev_us - 2100.0).abs() < 1e-6);
        assert!((r.latency_p99_us - 1.35e6).abs() < 1e-3);
        assert!((r.duration_secs - 4.01).abs() < 1e-9);
    }

    #[test]
    fn parses_socket_errors() {
        let r = parse_wrk_output(TIMEOUTS).unwrap();
        assert_eq!(r.socket_errors, 4);
        assert_eq!(r.timeouts, 4);
        assert_eq!(r.latency_p50_us, 0.0);
        let mixed = TIMEOUTS.replace("connect 0, read 0, write 0, timeout 4", "connect 2, read 3, write 1, timeout 4");
        let r = parse_wrk_output(&mixed).unwrap();
        assert_eq!((r.socket_errors, r.timeouts), (10, 4));
    }

    #[test]
    fn time_units() {
        assert_eq!(parse_time_us("93.00us"), Some(93.0));
        assert_eq!(parse_time_us("2.29ms"), Some(2290.0));
        assert_eq!(parse_time_us("1.35s "), Some(1_350_000.0));
        assert_eq!(parse_time_us("1.00m"), Some(60e6));
        assert_eq!(parse_time_us("2.00h"), Some(7200e6));
        assert_eq!(parse_time_us("12"), None);
        assert_eq!(parse_time_us("nanus"), None);
    }

    #[test]
    fn incomplete_output_is_an_error_with_the_text() {
        let e = parse_wrk_output("unable to connect to 127.0.0.1:18080 Connection refused\n").unwrap_err();
        let s = e.to_string();
        assert!(s.contains("no `Latency` line"), "{s}");
        assert!(s.contains("Connection refused"), "{s}");
        let no_latency = OK.replace("Latency Distribution", "");
        let no_pct: String = no_latency.lines().filter(|l| !l.contains("50%")).collect::<Vec<_>>().join("\n");
        assert!(parse_wrk_output(&no_pct).is_err());
    }
}
