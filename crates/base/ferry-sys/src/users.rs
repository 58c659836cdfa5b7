//! Looking up accounts, for ferryd (a domain's named `user:`) and for the
//! tools that start processes as a user.

use std::ffi::CString;

/// uid and gid of a user name.
pub fn lookup_user(name: &str) -> Option<(u32, u32)> {
    let c = CString::new(name).ok()?;
    // SAFETY: getpwnam returns NULL or a pointer to static storage, read at
    // once (callers look users up while they set up, from one thread).
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    // SAFETY: non-null result of getpwnam.
    (!pw.is_null()).then(|| unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}
