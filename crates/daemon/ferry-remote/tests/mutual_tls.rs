//! The control channel on loopback. An operator of the deployment is
//! answered; a host's key is answered for status only; a client whose key
//! another CA signed (even one that trusts this deployment's hosts), a
//! client that expects another host, and a peer that speaks no TLS are
//! refused before any request reaches the handler.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferry_chain::proto::Msg;
use ferry_remote::{issue, request, request_as, serve, Role, TlsDir, HOSTS_CA};

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-tls-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn only_the_deployments_operators_are_answered_in_full() {
    let (ours, theirs) = (dir("ours"), dir("theirs"));
    issue(&ours, &["h1".into(), "h2".into()]).expect("our keys");
    issue(&theirs, &["h1".into()]).expect("another deployment's keys");
    // Their operator trusts our hosts: only our server's check of the
    // client can refuse it.
    std::fs::remove_file(theirs.join(format!("{HOSTS_CA}.pem"))).unwrap();
    std::fs::copy(ours.join(format!("{HOSTS_CA}.pem")), theirs.join(format!("{HOSTS_CA}.pem"))).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let answered = Arc::new(AtomicU32::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (a, s) = (answered.clone(), stop.clone());
    serve(
        listener,
        TlsDir::new(&ours).server("h1").expect("server config"),
        Arc::new(move |m, role| {
            a.fetch_add(1, Ordering::SeqCst);
            match (m, role) {
                (Msg::List, Role::Operator) => Msg::ListReply { chains: Vec::new() },
                (_, Role::Host) => Msg::Error { message: "a host".into() },
                _ => Msg::Ok,
            }
        }),
        Arc::new(move || s.load(Ordering::Relaxed)),
    )
    .unwrap();
    let reply = request(&addr, "h1", &ours, &Msg::List).expect("our operator is answered");
    assert!(matches!(reply, Msg::ListReply { .. }), "{reply:?}");
    let as_host = request_as(&addr, "h1", &ours, "h2", &Msg::List, Duration::from_secs(30)).expect("h2 is answered");
    assert!(matches!(&as_host, Msg::Error { message } if message == "a host"), "h2 is a host: {as_host:?}");
    let foreign = request(&addr, "h1", &theirs, &Msg::List).expect_err("another CA's operator");
    eprintln!("refused: {foreign}");
    let wrong_host = request(&addr, "h2", &ours, &Msg::List).expect_err("a server that is not h2");
    assert!(wrong_host.to_string().contains("certificate") || wrong_host.to_string().contains("name"), "{wrong_host}");
    // Plain TCP: the server expects a TLS handshake and answers nothing.
    {
        use std::io::{Read, Write};
        let mut plain = std::net::TcpStream::connect(&addr).unwrap();
        plain.write_all(b"FY\x01\x00\x0d\x00\x00\x00\x0f\x00\x00\x00{\"type\":\"list\"}").unwrap();
        let mut buf = [0u8; 64];
        let n = plain.read(&mut buf).unwrap_or(0);
        assert!(!buf[..n].starts_with(b"FY"), "no frame for a peer without TLS");
    }
    assert_eq!(answered.load(Ordering::SeqCst), 2, "only the authenticated requests reached the handler");
    stop.store(true, Ordering::Relaxed);
    let _ = (std::fs::remove_dir_all(&ours), std::fs::remove_dir_all(&theirs));
}

/// Keys are written once, never over a file, never through a symlink; a
/// host may not take a CA's or the operator's name.
#[test]
fn keys_are_never_written_over_anything() {
    let d = dir("again");
    issue(&d, &["h1".into()]).expect("first");
    assert!(issue(&d, &["h1".into()]).is_err(), "a second run over the same keys");
    let fresh = dir("names");
    for bad in ["admin", HOSTS_CA, "h_1", ""] {
        assert!(issue(&fresh, &[bad.to_string()]).is_err(), "{bad:?}");
    }
    let linked = dir("linked");
    std::fs::create_dir_all(&linked).unwrap();
    std::os::unix::fs::symlink("/tmp/ferry-tls-target-never", linked.join(format!("{HOSTS_CA}.key"))).unwrap();
    assert!(issue(&linked, &["h1".into()]).is_err(), "through a symlink");
    assert!(!Path::new("/tmp/ferry-tls-target-never").exists());
    for d in [d, fresh, linked] {
        let _ = std::fs::remove_dir_all(d);
    }
}
