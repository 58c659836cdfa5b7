//! curl: single requests, and several requests on one connection.

use super::error::{tail, AppError};
use super::process::{run_client, LOG_TAIL};
use crate::TestbedNames;
use std::time::Duration;

/// Options of [`curl_get`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurlOpts {
    /// Limit for the whole transfer (`--max-time`) and for connecting
    /// (`--connect-timeout`); default 30 s, a guard against a hang that a
    /// loaded machine's slow but working transfer stays far below.
    pub timeout: Duration,
    /// Source port (`--local-port`), e.g. to make a known 5-tuple.
    pub local_port: Option<u16>,
}

impl Default for CurlOpts {
    fn default() -> CurlOpts {
        CurlOpts { timeout: Duration::from_secs(30), local_port: None }
    }
}

/// One transfer.
#[derive(Debug, Clone, PartialEq)]
pub struct CurlResult {
    /// HTTP status (`%{http_code}`).
    pub status: u16,
    /// The body (lossily decoded as UTF-8).
    pub body: String,
    /// Source port of the connection used (`%{local_port}`).
    pub local_port: u16,
    /// New connections this transfer made (`%{num_connects}`): 0 when it
    /// reused the previous transfer's connection.
    pub num_connects: u32,
    /// `%{time_total}`.
    pub time_total: Duration,
}

/// Written by `-w` after each transfer; the body is everything before it.
const MARK: &str = "\n--ferry-curl-5f1c--";
const WRITE_OUT: &str = "\\n--ferry-curl-5f1c-- %{http_code} %{local_port} %{num_connects} %{time_total}\\n";

fn curl_args(urls: &[String], opts: &CurlOpts) -> Vec<String> {
    let secs = format!("{:.3}", opts.timeout.as_secs_f64());
    let mut args: Vec<String> = vec![
        "-s".into(),
        "-S".into(),
        "--max-time".into(),
        secs.clone(),
        "--connect-timeout".into(),
        secs,
        "-w".into(),
        WRITE_OUT.into(),
    ];
    if let Some(p) = opts.local_port {
        args.extend(["--local-port".into(), p.to_string()]);
    }
    args.extend(urls.iter().cloned());
    args
}

/// Splits curl's stdout into one result per transfer.
pub(crate) fn parse_curl_output(out: &[u8]) -> Result<Vec<CurlResult>, AppError> {
    let text = String::from_utf8_lossy(out);
    let bad = |message: String| AppError::Parse {
        app: "curl".into(),
        what: "curl -w output",
        message,
        output_tail: tail(out, LOG_TAIL),
    };
    let mut results = Vec::new();
    let mut rest: &str = &text;
    while !rest.is_empty() {
        let at = rest.find(MARK).ok_or_else(|| bad("output does not end with the -w marker".into()))?;
        let body = &rest[..at];
        let after = &rest[at + MARK.len()..];
        let end = after.find('\n').ok_or_else(|| bad("unterminated -w line".into()))?;
        let f: Vec<&str> = after[..end].split_whitespace().collect();
        if f.len() != 4 {
            return Err(bad(format!("bad -w line {:?}", &after[..end])));
        }
        let n = |i: usize| f[i].parse::<u64>().map_err(|_| bad(format!("bad -w field {:?}", f[i])));
        let time: f64 = f[3].parse().map_err(|_| bad(format!("bad time_total {:?}", f[3])))?;
        results.push(CurlResult {
            status: u16::try_from(n(0)?).map_err(|_| bad(format!("bad status {}", f[0])))?,
            body: body.to_string(),
            local_port: u16::try_from(n(1)?).map_err(|_| bad(format!("bad port {}", f[1])))?,
            num_connects: u32::try_from(n(2)?).map_err(|_| bad(format!("bad num_connects {}", f[2])))?,
            time_total: Duration::try_from_secs_f64(time).unwrap_or_default(),
        });
        rest = &after[end + 1..];
    }
    Ok(results)
}

fn run_curl(tb: &TestbedNames, ns: &str, urls: &[String], opts: &CurlOpts) -> Result<Vec<CurlResult>, AppError> {
    let cmd = tb.exec(ns, "curl", curl_args(urls, opts));
    // Each transfer is bounded by --max-time; leave room for all of them.
    let limit = opts.timeout * u32::try_from(urls.len()).unwrap_or(u32::MAX) + Duration::from_secs(5);
    let out = run_client("curl", cmd, None, None, limit)?.check("curl")?;
    let results = parse_curl_output(&out.stdout)?;
    if results.len() != urls.len() {
        return Err(AppError::Parse {
            app: "curl".into(),
            what: "curl -w output",
            message: format!("{} transfers reported for {} URLs", results.len(), urls.len()),
            output_tail: tail(&out.stdout, LOG_TAIL),
        });
    }
    Ok(results)
}

/// `curl -s URL` from namespace `ns`. Any HTTP status is a result; a
/// failed transfer (refused, timed out) is [`AppError::Failed`] with
/// curl's message.
pub fn curl_get(tb: &TestbedNames, ns: &str, url: &str, opts: CurlOpts) -> Result<CurlResult, AppError> {
    let mut v = run_curl(tb, ns, &[url.to_string()], &opts)?;
    Ok(v.remove(0))
}

/// Fetches `urls` in order with one curl invocation, which keeps one TCP
/// connection open across them, and checks that it did: only the first
/// transfer may connect ([`AppError::ConnectionNotReused`] otherwise).
/// The URLs must name the same host and port.
pub fn curl_many_results(
    tb: &TestbedNames,
    ns: &str,
    urls: &[String],
    opts: CurlOpts,
) -> Result<Vec<CurlResult>, AppError> {
    if urls.is_empty() {
        return Ok(Vec::new());
    }
    let results = run_curl(tb, ns, urls, &opts)?;
    let per_transfer: Vec<u32> = results.iter().map(|r| r.num_connects).collect();
    if per_transfer[0] != 1 || per_transfer[1..].iter().any(|&n| n != 0) {
        return Err(AppError::ConnectionNotReused { urls: urls.to_vec(), per_transfer });
    }
    Ok(results)
}

/// Like [`curl_many_results`] with default options, returning the bodies;
/// a non-2xx answer is [`AppError::HttpStatus`].
pub fn curl_many(tb: &TestbedNames, ns: &str, urls: &[String]) -> Result<Vec<String>, AppError> {
    let results = curl_many_results(tb, ns, urls, CurlOpts::default())?;
    results
        .into_iter()
        .zip(urls)
        .map(|(r, url)| {
            if (200..300).contains(&r.status) {
                Ok(r.body)
            } else {
                Err(AppError::HttpStatus { url: url.clone(), status: r.status })
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_transfers() {
        let out = b"backend b1\n\n--ferry-curl-5f1c-- 200 41234 1 0.001234\n\
                    no newline\n--ferry-curl-5f1c-- 404 41234 0 0.000500\n\
                    \n--ferry-curl-5f1c-- 200 41234 0 0.5\n";
        let r = parse_curl_output(out).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].body, "backend b1\n");
        assert_eq!((r[0].status, r[0].local_port, r[0].num_connects), (200, 41234, 1));
        assert_eq!(r[0].time_total, Duration::from_micros(1234));
        assert_eq!(r[1].body, "no newline");
        assert_eq!((r[1].status, r[1].num_connects), (404, 0));
        assert_eq!(r[2].body, "");
        assert_eq!(r[2].time_total, Duration::from_millis(500));
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_curl_output(b"body without marker").is_err());
        assert!(parse_curl_output(b"x\n--ferry-curl-5f1c-- 200 1\n").is_err());
        assert!(parse_curl_output(b"").unwrap().is_empty());
    }

    #[test]
    fn args_carry_timeouts_and_port() {
        let a =
            curl_args(&["http://x/".into()], &CurlOpts { timeout: Duration::from_millis(1500), local_port: Some(7) });
        let s = a.join(" ");
        assert!(s.contains("--max-time 1.500 --connect-timeout 1.500"), "{s}");
        assert!(s.ends_with("--local-port 7 http://x/"), "{s}");
    }
}
