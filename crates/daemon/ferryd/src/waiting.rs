//! Connections to ferryd's Unix sockets that have not yet said what they
//! want. Anyone may connect to the NF socket, and each waiting connection
//! holds a thread, so they are bounded; yet a flood of silent connections
//! must not keep out a restarting NF, nor root's `ferry chain` on the
//! admin socket. The rules of a [`WaitingRoom`]:
//!
//! * at most `per_peer` connections of one uid wait at once (the kernel
//!   records the peer's uid at connect, SO_PEERCRED: nothing is read);
//! * at most `total` wait in all;
//! * one more closes the oldest *silent* waiting connection of that uid
//!   (or of all), rather than the new one: one whose first message is
//!   already in its socket is never pushed out (if all are, the newcomer
//!   is closed instead), so a restarting NF or root's request is served,
//!   and a uid can push out only its own until the room is full;
//! * a connection closed for room is told [`Msg::Busy`] first, and its
//!   request, should it arrive as it is closed, is never acted on (the
//!   seat is gone when its thread comes to leave it): the client may send
//!   it again, which `proto::ask` does;
//! * seats are taken in the accept loop, before a thread is spawned, so
//!   threads are bounded by the room and "oldest" is the accept order;
//! * each has [`WAIT_TIMEOUT`] to speak.

use std::collections::VecDeque;
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_chain::proto::{self, Msg};

use crate::spawn::peer_cred;

/// How long a connection may wait before its first message.
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(10);

/// One listener's waiting connections and what became of them.
pub struct WaitingRoom {
    per_peer: usize,
    total: usize,
    waiting: Mutex<Waiting>,
    accepted: AtomicU64,
    timed_out: AtomicU64,
    evicted: AtomicU64,
}

#[derive(Default)]
struct Waiting {
    next: u64,
    /// Oldest first: (id, peer uid, a handle to close it by).
    seats: VecDeque<(u64, u32, UnixStream)>,
}

/// A connection's place in the room: it leaves when this is dropped.
pub struct Seat {
    room: Arc<WaitingRoom>,
    id: u64,
}

impl WaitingRoom {
    pub const fn new(per_peer: usize, total: usize) -> WaitingRoom {
        WaitingRoom {
            per_peer,
            total,
            waiting: Mutex::new(Waiting { next: 0, seats: VecDeque::new() }),
            accepted: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        }
    }

    /// Seats `stream` (with a read timeout of [`WAIT_TIMEOUT`]), closing
    /// the connection it pushes out; None when it was closed itself (the
    /// room was full of connections that have spoken).
    pub fn enter(self: &Arc<Self>, stream: &UnixStream) -> std::io::Result<Option<Seat>> {
        let handle = stream.try_clone()?;
        stream.set_read_timeout(Some(WAIT_TIMEOUT))?;
        let uid = peer_cred(stream).map(|(_, uid, _)| uid).map_err(std::io::Error::other)?;
        self.accepted.fetch_add(1, Ordering::Relaxed);
        let mut w = self.waiting.lock().expect("waiting lock");
        let full = [
            (w.seats.iter().filter(|s| s.1 == uid).count() >= self.per_peer).then_some(Some(uid)),
            (w.seats.len() >= self.total).then_some(None),
        ];
        for of in full.into_iter().flatten() {
            let silent = w.seats.iter().position(|s| of.map_or(true, |uid| s.1 == uid) && !has_data(&s.2));
            match silent {
                Some(at) => self.evict(&mut w, at),
                None => {
                    self.close_busy(stream);
                    return Ok(None);
                }
            }
        }
        let id = w.next;
        w.next += 1;
        w.seats.push_back((id, uid, handle));
        Ok(Some(Seat { room: self.clone(), id }))
    }

    /// Closes seat `at`: its thread's read ends at once.
    fn evict(&self, w: &mut Waiting, at: usize) {
        if let Some((_, _, stream)) = w.seats.remove(at) {
            self.close_busy(&stream);
        }
    }

    /// Tells `stream` [`Msg::Busy`] and closes it. The frame goes without
    /// waiting: a fresh connection's send buffer has room for it.
    fn close_busy(&self, stream: &UnixStream) {
        if let Ok(frame) = proto::frame(&Msg::Busy) {
            // SAFETY: send of a buffer we own on an open socket.
            unsafe {
                libc::send(
                    stream.as_raw_fd(),
                    frame.as_ptr().cast(),
                    frame.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            };
        }
        let _ = stream.shutdown(Shutdown::Both);
        self.evicted.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters by name: connections accepted, those that stayed
    /// silent past [`WAIT_TIMEOUT`], and those closed for the limits.
    pub fn counters(&self) -> [(&'static str, u64); 3] {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            ("accepted", get(&self.accepted)),
            ("timed_out", get(&self.timed_out)),
            ("closed_for_limit", get(&self.evicted)),
        ]
    }
}

/// Whether bytes wait unread on `stream` (its first message has come).
fn has_data(stream: &UnixStream) -> bool {
    let mut p = libc::pollfd { fd: stream.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, no wait.
    unsafe { libc::poll(&mut p, 1, 0) == 1 && p.revents & libc::POLLIN != 0 }
}

impl Seat {
    /// The connection stayed silent past [`WAIT_TIMEOUT`].
    pub fn timed_out(&self) {
        self.room.timed_out.fetch_add(1, Ordering::Relaxed);
    }

    /// Leaves the room once the first message is read: false when the
    /// connection was closed for room meanwhile (its client was told
    /// Busy, so the message must not be acted on).
    pub fn leave(self) -> bool {
        let mut w = self.room.waiting.lock().expect("waiting lock");
        let at = w.seats.iter().position(|s| s.0 == self.id);
        at.map(|at| w.seats.remove(at)).is_some()
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.room.waiting.lock().expect("waiting lock").seats.retain(|s| s.0 != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's view of `s`: whether a read sees its end closed.
    fn closed(s: &mut UnixStream) -> bool {
        use std::io::Read;
        s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
        matches!(s.read(&mut [0u8; 1]), Ok(0))
    }

    #[test]
    fn a_full_room_closes_its_oldest_silent_one_and_seats_the_newcomer() {
        use std::io::Write;
        let room = Arc::new(WaitingRoom::new(2, 3));
        let mut pairs: Vec<(UnixStream, UnixStream)> = (0..4).map(|_| UnixStream::pair().unwrap()).collect();
        // The oldest has spoken: it is never pushed out.
        pairs[0].1.write_all(b"hello").unwrap();
        // One uid (ours) for every pair: the per-peer limit of 2 rules.
        let seats: Vec<Seat> = pairs[..3].iter().map(|(server, _)| room.enter(server).unwrap().unwrap()).collect();
        let [mut spoke, mut silent, mut third] = [0, 1, 2].map(|i| pairs[i].1.try_clone().unwrap());
        assert!(matches!(proto::recv(&silent).unwrap().0, Msg::Busy), "told why");
        assert!(closed(&mut silent), "the third pushed out the oldest silent one");
        assert!(!closed(&mut spoke) && !closed(&mut third));
        assert_eq!(room.counters()[2], ("closed_for_limit", 1));
        // Both seats of the uid have spoken: the newcomer is closed.
        pairs[2].1.write_all(b"hello").unwrap();
        assert!(room.enter(&pairs[3].0).unwrap().is_none(), "no silent seat to free");
        assert!(matches!(proto::recv(&pairs[3].1).unwrap().0, Msg::Busy));
        assert!(closed(&mut pairs[3].1));
        drop(seats);
        assert!(room.waiting.lock().unwrap().seats.is_empty(), "dropped seats leave");
    }

    #[test]
    fn a_request_read_after_its_seat_was_taken_is_not_acted_on() {
        let room = Arc::new(WaitingRoom::new(1, 8));
        let (first, _client) = UnixStream::pair().unwrap();
        let (second, _other) = UnixStream::pair().unwrap();
        let seat = room.enter(&first).unwrap().unwrap();
        let pusher = room.enter(&second).unwrap().unwrap();
        assert!(!seat.leave(), "pushed out before its thread read the request");
        let (third, _c) = UnixStream::pair().unwrap();
        drop(pusher);
        assert!(room.enter(&third).unwrap().unwrap().leave(), "a seat still held is left");
    }
}
