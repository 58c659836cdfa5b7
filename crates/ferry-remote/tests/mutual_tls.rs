//! The control channel on loopback: a client of the deployment's CA is
//! answered; one with a key of another CA, one that expects another host,
//! and one that speaks no TLS are refused before any request is read.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use ferry_chain::proto::Msg;
use ferry_remote::{issue, request, serve, TlsDir};

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-tls-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn only_clients_of_the_deployment_ca_are_answered() {
    let (ours, theirs) = (dir("ours"), dir("theirs"));
    issue(&ours, &["h1".into()]).expect("our CA");
    issue(&theirs, &["h1".into()]).expect("another CA");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let answered = Arc::new(AtomicU32::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (a, s) = (answered.clone(), stop.clone());
    serve(
        listener,
        TlsDir::new(&ours).server("h1").expect("server config"),
        Arc::new(move |m| {
            a.fetch_add(1, Ordering::SeqCst);
            match m {
                Msg::List => Msg::ListReply { chains: Vec::new() },
                _ => Msg::Ok,
            }
        }),
        Arc::new(move || s.load(Ordering::Relaxed)),
    )
    .unwrap();
    let reply = request(&addr, "h1", &ours, &Msg::List).expect("our admin is answered");
    assert!(matches!(reply, Msg::ListReply { .. }), "{reply:?}");
    let foreign = request(&addr, "h1", &theirs, &Msg::List).expect_err("another CA's key");
    eprintln!("refused: {foreign}");
    let wrong_host = request(&addr, "h2", &ours, &Msg::List).expect_err("a server that is not h2");
    assert!(wrong_host.to_string().contains("certificate") || wrong_host.to_string().contains("name"), "{wrong_host}");
    // Plain TCP: the server expects a TLS handshake and answers nothing.
    {
        use std::io::{Read, Write};
        let mut plain = std::net::TcpStream::connect(&addr).unwrap();
        plain.write_all(b"FY\x01\x00\x0d\x00\x00\x00\x0e\x00\x00\x00{\"type\":\"list\"}").unwrap();
        let mut buf = [0u8; 64];
        let n = plain.read(&mut buf).unwrap_or(0);
        assert!(!buf[..n].starts_with(b"FY"), "no frame for a peer without TLS");
    }
    assert_eq!(answered.load(Ordering::SeqCst), 1, "only the authenticated request reached the handler");
    stop.store(true, Ordering::Relaxed);
    let _ = (std::fs::remove_dir_all(&ours), std::fs::remove_dir_all(&theirs));
}
