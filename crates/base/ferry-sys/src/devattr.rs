//! A network device's sysfs attributes (`/sys/class/net/<dev>/<attr>`),
//! read and written in the device's own network namespace.
//!
//! sysfs shows the devices of the namespace it was mounted in, not the
//! caller's, so a device in another namespace is reached the way
//! `ip netns exec` reaches it: a fresh thread takes a private mount
//! namespace, joins the network namespace and mounts a sysfs of its own
//! over `/sys`. Nothing of that outlives the thread.

use std::io;

/// Reads attribute `attr` of device `dev` in namespace `ns` (`None`: the
/// caller's), trimmed.
pub fn read(ns: Option<&str>, dev: &str, attr: &str) -> io::Result<String> {
    let path = attr_path(dev, attr)?;
    in_sysfs_of(ns, move || std::fs::read_to_string(&path).map(|s| s.trim().to_string()))
}

/// Writes `value` to attribute `attr` of device `dev` in namespace `ns`.
pub fn write(ns: Option<&str>, dev: &str, attr: &str, value: &str) -> io::Result<()> {
    let path = attr_path(dev, attr)?;
    let value = value.to_string();
    in_sysfs_of(ns, move || std::fs::write(&path, value))
}

/// Writes `value` and returns what was there, for putting it back.
pub fn replace(ns: Option<&str>, dev: &str, attr: &str, value: &str) -> io::Result<String> {
    let old = read(ns, dev, attr)?;
    write(ns, dev, attr, value)?;
    Ok(old)
}

fn attr_path(dev: &str, attr: &str) -> io::Result<String> {
    let plain = |s: &str| !s.is_empty() && !s.contains('/') && s != "." && s != "..";
    if !plain(dev) || !plain(attr) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("not a device attribute: {dev}/{attr}")));
    }
    Ok(format!("/sys/class/net/{dev}/{attr}"))
}

/// Runs `f` where `/sys` is the sysfs of namespace `ns`: on the thread
/// [`crate::in_netns`] runs it on, which first takes a mount namespace of
/// its own (so the new sysfs is seen by nobody else and goes away with the
/// thread) and mounts the sysfs of the network namespace it has joined.
fn in_sysfs_of<T: Send>(ns: Option<&str>, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    if ns.is_none() {
        return f();
    }
    crate::in_netns(ns, || {
        // SAFETY: unshare and mount affect only this thread, which
        // in_netns made for the purpose.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWNS), "unshare(CLONE_NEWNS)")?;
            let none = std::ptr::null::<libc::c_char>();
            check(
                libc::mount(none, c"/".as_ptr(), none, libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()),
                "making mounts private",
            )?;
            check(
                libc::mount(c"sysfs".as_ptr(), c"/sys".as_ptr(), c"sysfs".as_ptr(), 0, std::ptr::null()),
                "mounting the namespace's sysfs",
            )?;
        }
        f()
    })?
}

fn check(rc: libc::c_int, what: &str) -> io::Result<()> {
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    Err(io::Error::new(e.kind(), format!("{what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_names_cannot_leave_the_device_directory() {
        for (dev, attr) in [("../lo", "mtu"), ("lo", "../../x"), ("", "mtu"), ("lo", "")] {
            assert_eq!(read(None, dev, attr).unwrap_err().kind(), io::ErrorKind::InvalidInput, "{dev}/{attr}");
        }
    }

    #[test]
    fn reads_the_loopback_mtu_as_rtnetlink_reports_it() {
        // Every namespace has lo, and sysfs is where the caller mounted it.
        let lo = crate::link::link("lo").unwrap().expect("lo");
        assert_eq!(read(None, "lo", "mtu").unwrap(), lo.mtu.to_string());
    }
}
