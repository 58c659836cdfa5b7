//! Argument checking of the C API without ferryd: NULL pointers, bad
//! counter lists and unreachable sockets give errors (and a message), never
//! a crash. Handles are checked by the slot table's unit tests
//! (`src/slots.rs`) and, against a live ferryd, by `tests/c/api_checks.c`.

use std::ffi::{c_char, CStr};
use std::ptr::{null, null_mut};

use ferry::*;
use libc::{EINVAL, ENOENT};

fn last_error() -> String {
    // SAFETY: ferry_last_error always returns a valid C string.
    unsafe { CStr::from_ptr(ferry_last_error()) }.to_string_lossy().into_owned()
}

#[test]
fn null_pointers_are_refused() {
    let mut pkt = FerryPkt::EMPTY;
    let mut pkts = [FerryPkt::EMPTY; 4];
    // SAFETY: every pointer is NULL or valid; NULL is what is being tested.
    unsafe {
        assert_eq!(ferry_nf_threads(null()), -EINVAL);
        assert!(last_error().contains("nf is NULL"), "{}", last_error());
        assert_eq!(ferry_nf_out_links(null()), -EINVAL);
        assert!(ferry_nf_arg(null(), 0).is_null());
        assert!(ferry_thread_open(null_mut(), 0).is_null());
        assert_eq!(ferry_thread_index(null()), -EINVAL);
        assert_eq!(ferry_recv(null_mut(), pkts.as_mut_ptr(), 4), -EINVAL);
        assert!(last_error().contains("th is NULL"), "{}", last_error());
        assert_eq!(ferry_send(null_mut(), &mut pkt, 0), -EINVAL);
        assert_eq!(ferry_reply(null_mut(), &mut pkt), -EINVAL);
        assert_eq!(ferry_drop(null_mut(), &mut pkt), -EINVAL);
        assert_eq!(ferry_alloc(null_mut(), &mut pkt, 64), -EINVAL);
        assert_eq!(ferry_set_len(null_mut(), &mut pkt, 64), -EINVAL);
        assert_eq!(ferry_service(null_mut()), -EINVAL);
        // void functions: no crash, and the failure is recorded.
        ferry_nf_close(null_mut());
        ferry_thread_close(null_mut());
        ferry_flush(null_mut());
        ferry_set_counter(null_mut(), 0, 1);
        assert!(last_error().contains("th is NULL"), "{}", last_error());
    }
}

#[test]
fn bad_connect_arguments_are_refused() {
    let sock = c"/nonexistent/ferryd.sock";
    let name = c"nf";
    let good: [*const c_char; 1] = [c"count".as_ptr()];
    let with_null: [*const c_char; 2] = [c"count".as_ptr(), null()];
    // SAFETY: strings and arrays are valid (or NULL) for what is passed.
    unsafe {
        assert!(ferry_connect(sock.as_ptr(), name.as_ptr(), good.as_ptr(), -1).is_null());
        assert!(last_error().contains("negative"), "{}", last_error());
        assert!(ferry_connect(sock.as_ptr(), name.as_ptr(), null(), 1).is_null());
        assert!(last_error().contains("counter_names is NULL"), "{}", last_error());
        assert!(ferry_connect(sock.as_ptr(), name.as_ptr(), with_null.as_ptr(), 2).is_null());
        assert!(last_error().contains("counter_names[1] is NULL"), "{}", last_error());
        // Valid arguments, nobody listening: the SDK's own error.
        assert!(ferry_connect(sock.as_ptr(), name.as_ptr(), good.as_ptr(), 1).is_null());
        let e = last_error();
        assert!(e.contains("cannot reach ferryd at /nonexistent/ferryd.sock"), "{e}");
        assert!(e.contains(&std::io::Error::from_raw_os_error(ENOENT).to_string()), "{e}");
    }
}

#[test]
fn missing_environment_is_named() {
    // This test alone reads FERRY_SOCKET; the test process never has it.
    assert!(std::env::var_os("FERRY_SOCKET").is_none(), "run outside ferryd");
    // SAFETY: NULLs select the environment.
    unsafe {
        assert!(ferry_connect(null(), null(), null(), 0).is_null());
        assert!(last_error().contains("FERRY_SOCKET is not set"), "{}", last_error());
        // Only the name given: the socket still comes from the environment.
        assert!(ferry_connect(null(), c"nf".as_ptr(), null(), 0).is_null());
        assert!(last_error().contains("FERRY_SOCKET is not set"), "{}", last_error());
    }
}

#[test]
fn last_error_is_per_thread() {
    // SAFETY: NULL is what is being tested.
    assert_eq!(unsafe { ferry_nf_threads(null()) }, -EINVAL);
    assert!(!last_error().is_empty());
    let other = std::thread::spawn(last_error).join().unwrap();
    assert_eq!(other, "", "a fresh thread has no error");
}
