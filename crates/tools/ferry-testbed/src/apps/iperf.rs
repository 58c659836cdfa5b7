//! iperf3 servers and clients (TCP bulk flows).

use super::error::{tail, AppError};
use super::process::{listens, run_client, whole_secs, ServerProc, TempDir, LOG_TAIL};
use crate::TestbedNames;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;

/// A persistent `iperf3 -s -p PORT -B ADDR`. It serves one test at a time
/// (a second client gets "the server is busy"), so concurrent flows need
/// one server (port) each. Stopped and its directory removed on drop.
#[derive(Debug)]
pub struct Iperf3Server {
    addr: SocketAddrV4,
    // Dropped before `dir`.
    proc: ServerProc,
    dir: TempDir,
}

impl Iperf3Server {
    /// Starts the server in namespace `ns` and returns once it listens
    /// (at most 5 s).
    pub fn start(
        tb: &TestbedNames,
        ns: &str,
        bind: Ipv4Addr,
        port: u16,
        cpu: Option<usize>,
    ) -> Result<Iperf3Server, AppError> {
        let app = "iperf3-server";
        let addr = SocketAddrV4::new(bind, port);
        let dir = TempDir::new(app)?;
        let args =
            ["-s".to_string(), "-p".into(), port.to_string(), "-B".into(), bind.to_string(), "--forceflush".into()];
        let cmd = tb.exec(ns, "iperf3", args);
        let proc = ServerProc::spawn(app, cmd, cpu, &dir)?;
        let pid = proc.pid();
        proc.wait_ready(app, "listening", &[dir.join("stderr.log"), dir.join("stdout.log")], || listens(pid, addr))?;
        Ok(Iperf3Server { addr, proc, dir })
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    pub fn addr(&self) -> SocketAddrV4 {
        self.addr
    }

    /// The temporary directory (its logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// Options of [`iperf3_client`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IperfOpts {
    /// Test length (`-t`), rounded up to whole seconds (default 2 s),
    /// unless `bytes` is set.
    pub duration: Duration,
    /// Send this many bytes (`-n`) instead of running for `duration`: a
    /// test that counts packets wants a fixed amount of traffic, not
    /// whatever a loaded machine manages to send in a given time.
    pub bytes: Option<u64>,
    /// Pin the client to this CPU.
    pub cpu: Option<usize>,
    /// Client source port of the data connection (`--cport`), for a known
    /// 5-tuple; the control connection keeps an ephemeral port.
    pub cport: Option<u16>,
    /// Target rate in bits/s (`-b`); `None` is unlimited.
    pub bitrate: Option<u64>,
    /// Client source address (`-B`), e.g. client's second address
    /// 10.10.66.2 in `sfc.yaml`.
    pub bind: Option<Ipv4Addr>,
}

impl Default for IperfOpts {
    fn default() -> IperfOpts {
        IperfOpts { duration: Duration::from_secs(2), bytes: None, cpu: None, cport: None, bitrate: None, bind: None }
    }
}

/// What one iperf3 client run measured (from its `-J` report).
#[derive(Debug, Clone, PartialEq)]
pub struct IperfReport {
    /// Goodput seen by the receiver (`end.sum_received.bits_per_second`).
    pub bits_per_second: f64,
    /// Bytes the receiver got (`end.sum_received.bytes`).
    pub bytes_received: u64,
    /// Bytes the sender wrote (`end.sum_sent.bytes`).
    pub bytes_sent: u64,
    /// TCP retransmissions of the sender (`end.sum_sent.retransmits`).
    pub retransmits: u64,
    /// Length of the test (`end.sum_received.seconds`).
    pub seconds: f64,
    /// The data connection's local port (`start.connected[0].local_port`).
    pub local_port: u16,
}

/// One client of [`iperf3_clients`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IperfJob {
    pub server: Ipv4Addr,
    pub port: u16,
    pub opts: IperfOpts,
}

/// Runs `iperf3 -c SERVER -p PORT -J` from namespace `ns`.
pub fn iperf3_client(
    tb: &TestbedNames,
    ns: &str,
    server: Ipv4Addr,
    port: u16,
    opts: IperfOpts,
) -> Result<IperfReport, AppError> {
    let secs = whole_secs(opts.duration);
    let mut args = vec![
        "-c".to_string(),
        server.to_string(),
        "-p".into(),
        port.to_string(),
        "-J".into(),
        "--connect-timeout".into(),
        "3000".into(),
    ];
    // A byte count can take long on a loaded machine: the guard is only
    // against a hang.
    let limit = match opts.bytes {
        Some(bytes) => {
            args.extend(["-n".into(), bytes.to_string()]);
            Duration::from_secs(120)
        }
        None => {
            args.extend(["-t".into(), secs.to_string()]);
            Duration::from_secs(secs + 20)
        }
    };
    if let Some(p) = opts.cport {
        args.extend(["--cport".into(), p.to_string()]);
    }
    if let Some(b) = opts.bitrate {
        args.extend(["-b".into(), b.to_string()]);
    }
    if let Some(a) = opts.bind {
        args.extend(["-B".into(), a.to_string()]);
    }
    let cmd = tb.exec(ns, "iperf3", args);
    let out = run_client("iperf3", cmd, opts.cpu, None, limit)?;
    // iperf3 -J reports most errors in the JSON, sometimes with status 0.
    match parse_iperf_json(&out.stdout_text()) {
        Err(AppError::Reported { message, .. }) => {
            Err(AppError::Reported { app: "iperf3".into(), command: out.command, message })
        }
        Err(e) if !out.status.success() => Err(out.check("iperf3").err().unwrap_or(e)),
        r => r,
    }
}

/// Runs the jobs concurrently (one thread each) from namespace `ns`;
/// reports in job order, or the first job's error.
pub fn iperf3_clients(tb: &TestbedNames, ns: &str, jobs: &[IperfJob]) -> Result<Vec<IperfReport>, AppError> {
    std::thread::scope(|s| {
        let handles: Vec<_> =
            jobs.iter().map(|j| s.spawn(move || iperf3_client(tb, ns, j.server, j.port, j.opts.clone()))).collect();
        handles.into_iter().map(|h| h.join().expect("iperf3 client thread panicked")).collect()
    })
}

/// Parses an `iperf3 -J` client report.
pub(crate) fn parse_iperf_json(text: &str) -> Result<IperfReport, AppError> {
    let bad = |message: String| AppError::Parse {
        app: "iperf3".into(),
        what: "iperf3 JSON report",
        message,
        output_tail: tail(text.as_bytes(), LOG_TAIL),
    };
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    if let Some(err) = v.get("error").and_then(|e| e.as_str()) {
        return Err(AppError::Reported { app: "iperf3".into(), command: String::new(), message: err.to_string() });
    }
    let num = |ptr: &str| {
        v.pointer(ptr).and_then(serde_json::Value::as_f64).ok_or_else(|| bad(format!("no number at {ptr}")))
    };
    let int = |ptr: &str| {
        v.pointer(ptr).and_then(serde_json::Value::as_u64).ok_or_else(|| bad(format!("no integer at {ptr}")))
    };
    Ok(IperfReport {
        bits_per_second: num("/end/sum_received/bits_per_second")?,
        bytes_received: int("/end/sum_received/bytes")?,
        bytes_sent: int("/end/sum_sent/bytes")?,
        // Absent for UDP; 0 then.
        retransmits: v.pointer("/end/sum_sent/retransmits").and_then(serde_json::Value::as_u64).unwrap_or(0),
        seconds: num("/end/sum_received/seconds")?,
        local_port: v
            .pointer("/start/connected/0/local_port")
            .and_then(serde_json::Value::as_u64)
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from iperf 3.12 (`-c 127.0.0.1 -p 15201 -t 1 -J --cport
    // 40001`), intervals and most of `start` cut.
    const REPORT: &str = r#"{
	"start":	{
		"connected":	[{
				"socket":	5,
				"local_host":	"127.0.0.1",
				"local_port":	40001,
				"remote_host":	"127.0.0.1",
				"remote_port":	15201
			}],
		"version":	"iperf 3.12"
	},
	"intervals":	[],
	"end":	{
		"streams":	[],
		"sum_sent":	{
			"start":	0,
			"end":	1.000361,
			"seconds":	1.000361,
			"bytes":	1730150400,
			"bits_per_second":	13836208328.793304,
			"retransmits":	22,
			"sender":	true
		},
		"sum_received":	{
			"start":	0,
			"end":	1.001308,
			"seconds":	1.001308,
			"bytes":	1730019222,
			"bits_per_second":	13822074502.550663,
			"sender":	true
		},
		"cpu_utilization_percent":	{},
		"sender_tcp_congestion":	"cubic",
		"receiver_tcp_congestion":	"cubic"
	}
}"#;

    const REFUSED: &str = r#"{
	"start":	{
		"connected":	[],
		"version":	"iperf 3.12",
		"system_info":	"Linux vm 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0 x86_64"
	},
	"intervals":	[],
	"end":	{
	},
	"error":	"unable to connect to server: Connection refused"
}"#;

    #[test]
    fn parses_the_report() {
        let r = parse_iperf_json(REPORT).unwrap();
        assert!((r.bits_per_second - 13822074502.550663).abs() < 1.0);
        assert_eq!(r.bytes_received, 1730019222);
        assert_eq!(r.bytes_sent, 1730150400);
        assert_eq!(r.retransmits, 22);
        assert_eq!(r.local_port, 40001);
        assert!((r.seconds - 1.001308).abs() < 1e-12);
    }

    #[test]
    fn reported_errors_are_errors() {
        let e = parse_iperf_json(REFUSED).unwrap_err();
        assert!(matches!(&e, AppError::Reported { message, .. } if message.contains("Connection refused")), "{e}");
        let e = parse_iperf_json("not json").unwrap_err();
        assert!(matches!(e, AppError::Parse { .. }), "{e}");
        let e = parse_iperf_json(r#"{"end": {}}"#).unwrap_err();
        assert!(e.to_string().contains("/end/sum_received/bits_per_second"), "{e}");
    }
}
