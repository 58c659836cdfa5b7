//! `examples/c-nf/mica.c`, the MICA-compatible key-value cache in C, on
//! real frames: compiled against libferry, run by ferryd as an
//! unprivileged NF on a veth port, asked batches of GETs and SETs in
//! MICA's datagram format from an AF_PACKET socket in another namespace,
//! and its replies (sent back out of the port in place) checked value by
//! value with ferry-wire's MICA parser.
//!
//! Needs root and a C compiler; skipped without them, failed under
//! CI=true (as `c_example`).

mod common;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{build_setup, compile, workspace};
use ferry_cli::chainctl;
use ferry_wire::mica::{self, operation, result, MicaBatch, MicaRequestRepr};

const TEST: &str = "mica::a_mica_cache_in_c_answers_gets_and_sets_in_place_and_on_its_out_link";
const KEYS: u64 = 1000;
const VALUE_SIZE: usize = 64;
/// A hang guard only: every wait is for frames or counters.
const HANG_GUARD: Duration = Duration::from_secs(30);

/// A socket on `dev` of the calling thread's namespace that sends and
/// receives whole Ethernet frames.
fn raw_socket(dev: &str) -> OwnedFd {
    // SAFETY: plain syscalls; the fd is owned from here on.
    unsafe {
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, (libc::ETH_P_ALL as u16).to_be() as i32);
        assert!(fd >= 0, "AF_PACKET socket: {}", std::io::Error::last_os_error());
        let fd = OwnedFd::from_raw_fd(fd);
        let name = std::ffi::CString::new(dev).unwrap();
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = libc::if_nametoindex(name.as_ptr()) as i32;
        let r =
            libc::bind(fd.as_raw_fd(), &sll as *const _ as *const libc::sockaddr, std::mem::size_of_val(&sll) as u32);
        assert_eq!(r, 0, "bind to {dev}: {}", std::io::Error::last_os_error());
        fd
    }
}

/// The next frame on `fd` carrying a MICA response batch.
fn recv_response(fd: &OwnedFd) -> Vec<u8> {
    let deadline = Instant::now() + HANG_GUARD;
    let mut buf = vec![0u8; 2048];
    loop {
        assert!(Instant::now() < deadline, "no MICA response within {HANG_GUARD:?}");
        let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd we own.
        if unsafe { libc::poll(&mut pfd, 1, 100) } <= 0 {
            continue;
        }
        // SAFETY: recv into a buffer we own, of its length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n <= 0 {
            continue;
        }
        let frame = &buf[..n as usize];
        let Ok(flow) = ferry_wire::flow::parse(frame) else { continue };
        let Some(l4) = flow.l4_offset else { continue };
        if flow.proto == 17 && MicaBatch::new_checked(&frame[l4 + 8..]).is_ok_and(|b| b.magic() == mica::MAGIC_RESPONSE)
        {
            return frame.to_vec();
        }
    }
}

/// An Ethernet/IPv4/UDP frame from the client to the cache with `batch`
/// as its payload. (The test writes these few header bytes itself; the
/// NF's reply is read with ferry-wire.)
fn request_frame(dst: [u8; 6], src: [u8; 6], sport: u16, requests: &[MicaRequestRepr]) -> Vec<u8> {
    let payload = mica::batch_len(requests);
    let total = (20 + 8 + payload) as u16;
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&[
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        1,
        0,
        0,
        64,
        17,
        0,
        0,
        10,
        0,
        0,
        1,
        10,
        0,
        0,
        2,
    ]);
    let sum = ferry_wire::checksum::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&9999u16.to_be_bytes());
    f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    let at = f.len();
    f.resize(at + payload, 0);
    mica::emit_batch(&mut f[at..], mica::MAGIC_REQUEST, requests);
    f
}

fn get(key: &[u8], opaque: u32) -> MicaRequestRepr<'_> {
    MicaRequestRepr { operation: operation::GET, result: 0, key_hash: mica::key_hash(key), opaque, key, value: &[] }
}

fn set<'a>(key: &'a [u8], value: &'a [u8], opaque: u32) -> MicaRequestRepr<'a> {
    MicaRequestRepr { operation: operation::SET, result: 0, key_hash: mica::key_hash(key), opaque, key, value }
}

const TESTBED: &str = r#"
name: mica
namespaces:
  - name: client
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
  - name: dut
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
  - name: sink
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
links:
  - a: { ns: client, dev: c0, mac: "02:00:00:00:0c:01" }
    b: { ns: dut, dev: d0, mac: "02:00:00:00:0c:02" }
  - a: { ns: dut, dev: d1, mac: "02:00:00:00:0d:02" }
    b: { ns: sink, dev: s0, mac: "02:00:00:00:0d:01" }
"#;

/// Runs the cache (with an out-link to port out when `forward`), sends
/// it two batches from the client, and checks what comes back (to the
/// client) or out (to the sink).
fn serve_and_check(tb: &ferry_testbed::Testbed, dir: &Path, bin: &Path, forward: bool) {
    let (out_port, out_link) = match forward {
        true => (
            format!("  - {{ name: out, netns: {}, netdev: d1 }}\n", tb.ns_name("dut")),
            "  - { from: mica, to: out }\n",
        ),
        false => (String::new(), ""),
    };
    let chain = dir.join("chain.yaml");
    std::fs::write(
        &chain,
        format!(
            "name: kv\ndomains: [ {{ name: main, frames: 2048 }} ]\nports:\n  - {{ name: in, netns: {}, netdev: d0 }}\n\
             {out_port}nfs:\n  - {{ name: mica, domain: main, exec: [\"{}\"], args: [\"keys={KEYS}\", \
             \"value_size={VALUE_SIZE}\", \"log_mb=4\"] }}\nlinks:\n  - {{ from: in, to: mica }}\n{out_link}",
            tb.ns_name("dut"),
            bin.display()
        ),
    )
    .unwrap();
    let quiet = std::env::var_os("FERRY_TEST_VERBOSE").is_none();
    let rc = chainctl::start(&chain, &dir.join("ferryd.sock"), quiet).expect("ferryd starts and the cache connects");
    let (cache, client) = ([2, 0, 0, 0, 0x0c, 2], [2, 0, 0, 0, 0x0c, 1]);

    let keys: Vec<[u8; 8]> = [3u64, 5000, 42, 2000].iter().map(|i| mica::key_of(*i)).collect();
    let (v42, v2000) = (mica::value_of(42, VALUE_SIZE), mica::value_of(2000, VALUE_SIZE));
    let batches: Vec<Vec<MicaRequestRepr>> = vec![
        // A preloaded key, an unknown one, and two SETs (one of a key the
        // cache has, one of a new key).
        vec![get(&keys[0], 1), get(&keys[1], 2), set(&keys[2], &v42, 3), set(&keys[3], &v2000, 4)],
        // The SETs' keys, read back.
        vec![get(&keys[2], 5), get(&keys[3], 6)],
    ];
    // Sockets are opened in their namespaces and used from here.
    let in_ns = |ns: &str, dev: &'static str| {
        ferry_sys::in_netns(Some(tb.ns_name(ns)), move || raw_socket(dev)).expect("enter the namespace")
    };
    let send = in_ns("client", "c0");
    let recv = if forward { in_ns("sink", "s0") } else { in_ns("client", "c0") };
    let replies: Vec<Vec<u8>> = batches
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let f = request_frame(cache, client, 40_000 + i as u16, b);
            // SAFETY: send of a buffer we own.
            let n = unsafe { libc::send(send.as_raw_fd(), f.as_ptr().cast(), f.len(), 0) };
            assert_eq!(n, f.len() as isize, "send: {}", std::io::Error::last_os_error());
            recv_response(&recv)
        })
        .collect();

    let answers: Vec<Vec<(u32, u8, Vec<u8>)>> = replies
        .iter()
        .map(|frame| {
            let flow = ferry_wire::flow::parse(frame).expect("a well-formed reply");
            assert_eq!(
                (flow.src_v4(), flow.dst_v4()),
                (Some([10, 0, 0, 2].into()), Some([10, 0, 0, 1].into())),
                "turned around"
            );
            assert_eq!(&frame[..6], &client, "addressed to the client's MAC");
            let batch = MicaBatch::new_checked(&frame[flow.l4_offset.unwrap() + 8..]).unwrap();
            batch.requests().unwrap().iter().map(|r| (r.opaque, r.result, r.value.to_vec())).collect()
        })
        .collect();
    let value_of_3 = mica::value_of(3, VALUE_SIZE);
    assert_eq!(
        answers[0],
        [
            (1, result::SUCCESS, value_of_3),
            (2, result::NOT_FOUND, vec![]),
            (3, result::SUCCESS, vec![]),
            (4, result::SUCCESS, vec![])
        ]
    );
    assert_eq!(answers[1], [(5, result::SUCCESS, v42), (6, result::SUCCESS, v2000)]);

    // Malformed batches are dropped whole, and counted: a count past the
    // requests there, a key longer than the datagram, and a good SET
    // followed by a truncated request (the SET is not stored).
    let k7777 = mica::key_of(7777);
    let v7777 = mica::value_of(7777, VALUE_SIZE);
    let payload = 14 + 20 + 8;
    let mut too_many = request_frame(cache, client, 40_010, &[get(&keys[0], 10)]);
    too_many[payload + 1] = 3;
    let mut long_key = request_frame(cache, client, 40_011, &[get(&keys[0], 11)]);
    long_key[payload + mica::BATCH_HEADER_LEN + 7] = 200;
    let mut half = request_frame(cache, client, 40_012, &[set(&k7777, &v7777, 12)]);
    half[payload + 1] = 2;
    // An unknown operation is answered (not supported), as MICA does;
    // then the SET's key is looked up: not there.
    let mut unknown = request_frame(cache, client, 40_013, &[get(&keys[0], 13)]);
    unknown[payload + mica::BATCH_HEADER_LEN] = 9;
    let lookup = request_frame(cache, client, 40_014, &[get(&k7777, 14)]);
    let mut later = Vec::new();
    for f in [&too_many, &long_key, &half, &unknown, &lookup] {
        // SAFETY: send of a buffer we own.
        let n = unsafe { libc::send(send.as_raw_fd(), f.as_ptr().cast(), f.len(), 0) };
        assert_eq!(n, f.len() as isize, "send: {}", std::io::Error::last_os_error());
        if std::ptr::eq(f, &unknown) || std::ptr::eq(f, &lookup) {
            let frame = recv_response(&recv);
            let flow = ferry_wire::flow::parse(&frame).unwrap();
            let batch = MicaBatch::new_checked(frame[flow.l4_offset.unwrap() + 8..].to_vec()).unwrap();
            later.extend(batch.requests().unwrap().iter().map(|r| (r.opaque, r.operation, r.result)));
        }
    }
    assert_eq!(later, [(13, 9, result::NOT_SUPPORTED), (14, operation::GET, result::NOT_FOUND)]);

    // Its counters, published after each burst it served.
    let deadline = Instant::now() + HANG_GUARD;
    let s = loop {
        let s = rc.status().expect("status");
        if chainctl::counter(&s, "mica", "requests") == 8 || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let c = |name| chainctl::counter(&s, "mica", name);
    assert_eq!(
        [c("requests"), c("gets"), c("get_hits"), c("get_misses"), c("sets"), c("drop_malformed")],
        [8, 5, 3, 2, 2, 3],
        "{}",
        chainctl::status_table(&s)
    );
    for r in rc.audit().expect("audit") {
        assert!(r.conserved(), "domain {} conserves its frames: {r:?}", r.domain);
    }
    rc.shutdown().expect("shutdown");
}

#[test]
fn a_mica_cache_in_c_answers_gets_and_sets_in_place_and_on_its_out_link() {
    let Some((cc, libdir)) = build_setup(TEST) else { return };
    let dir = std::env::temp_dir().join(format!("ferry-capi-mica-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.join("mica");
    compile(&cc, &workspace().join("examples/c-nf/mica.c"), &bin, &libdir);

    let spec = ferry_testbed::TestbedSpec::from_yaml_str(TESTBED, "mica.yaml").unwrap();
    let tb = ferry_testbed::up(&spec).expect("testbed");
    // Alone, the cache answers back out of its port; in a chain (an
    // out-link to port out), on its out-link.
    for forward in [false, true] {
        serve_and_check(&tb, &dir, &bin, forward);
    }
    tb.down().expect("testbed down");
    let _ = std::fs::remove_dir_all(&dir);
}
