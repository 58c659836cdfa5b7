//! nftables: applying rulesets and reading named counters.

use super::error::{tail, AppError};
use super::process::{run_client, LOG_TAIL};
use crate::TestbedNames;
use std::time::Duration;

const NFT_LIMIT: Duration = Duration::from_secs(10);

/// Applies `ruleset` (nft syntax, several lines) in namespace `ns` with
/// `nft -f -`. nft applies a file atomically: on error nothing changes,
/// and the error carries nft's messages (file:line:column and a caret).
pub fn nft_apply(tb: &TestbedNames, ns: &str, ruleset: &str) -> Result<(), AppError> {
    let cmd = tb.exec(ns, "nft", ["-f", "-"]);
    run_client("nft", cmd, None, Some(ruleset.as_bytes().to_vec()), NFT_LIMIT)?.check("nft")?;
    Ok(())
}

/// `(packets, bytes)` of the named counter `counter` in `family table`
/// (`nft -j list counter FAMILY TABLE NAME`), e.g. `("inet", "ferry",
/// "icmp_fwd")`.
pub fn nft_counter(
    tb: &TestbedNames,
    ns: &str,
    family: &str,
    table: &str,
    counter: &str,
) -> Result<(u64, u64), AppError> {
    let cmd = tb.exec(ns, "nft", ["-j", "list", "counter", family, table, counter]);
    let out = run_client("nft", cmd, None, None, NFT_LIMIT)?.check("nft")?;
    parse_counter_json(&out.stdout_text(), counter)
}

/// Finds the `{"counter": {...}}` object named `name` in `nft -j` output.
pub(crate) fn parse_counter_json(text: &str, name: &str) -> Result<(u64, u64), AppError> {
    let bad = |message: String| AppError::Parse {
        app: "nft".into(),
        what: "nft -j counter listing",
        message,
        output_tail: tail(text.as_bytes(), LOG_TAIL),
    };
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let items = v.get("nftables").and_then(|n| n.as_array()).ok_or_else(|| bad("no `nftables` array".into()))?;
    let c = items
        .iter()
        .filter_map(|i| i.get("counter"))
        .find(|c| c.get("name").and_then(|n| n.as_str()) == Some(name))
        .ok_or_else(|| bad(format!("no counter named {name:?}")))?;
    let field = |f: &str| c.get(f).and_then(|x| x.as_u64()).ok_or_else(|| bad(format!("counter has no `{f}`")));
    Ok((field("packets")?, field("bytes")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from nftables 1.0.6.
    const LISTING: &str = r#"{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}}, {"counter": {"family": "inet", "name": "icmp_fwd", "table": "ferrytest", "handle": 2, "packets": 7, "bytes": 588}}]}"#;

    #[test]
    fn parses_a_counter() {
        assert_eq!(parse_counter_json(LISTING, "icmp_fwd").unwrap(), (7, 588));
        assert!(parse_counter_json(LISTING, "other").is_err());
        assert!(parse_counter_json("{}", "icmp_fwd").is_err());
        assert!(parse_counter_json("", "icmp_fwd").is_err());
    }
}
