//! Connections to ferryd's Unix sockets that have not yet said what they
//! want. Anyone may connect to the NF socket, and each waiting connection
//! holds a thread, so they are bounded; yet a flood of silent connections
//! must not keep out a restarting NF, nor root's `ferry chain` on the
//! admin socket. The rules of a [`WaitingRoom`]:
//!
//! * at most `per_peer` connections of one uid wait at once (the kernel
//!   records the peer's uid at connect, SO_PEERCRED: nothing is read);
//! * at most `total` wait in all;
//! * one more closes the oldest waiting connection of that uid (or of
//!   all), rather than the new one: a client that speaks at once waits
//!   microseconds, so only silent connections are pushed out, and a uid
//!   can push out only its own until the room is full;
//! * each has [`WAIT_TIMEOUT`] to speak.

use std::collections::VecDeque;
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

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
pub struct Seat<'a> {
    room: &'a WaitingRoom,
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
    /// the connections it pushes out.
    pub fn enter(&self, stream: &UnixStream) -> std::io::Result<Seat<'_>> {
        let handle = stream.try_clone()?;
        stream.set_read_timeout(Some(WAIT_TIMEOUT))?;
        let uid = peer_cred(stream).map(|(_, uid, _)| uid).map_err(std::io::Error::other)?;
        self.accepted.fetch_add(1, Ordering::Relaxed);
        let mut w = self.waiting.lock().expect("waiting lock");
        if w.seats.iter().filter(|s| s.1 == uid).count() >= self.per_peer {
            let oldest = w.seats.iter().position(|s| s.1 == uid).expect("the uid has seats");
            self.evict(&mut w, oldest);
        }
        if w.seats.len() >= self.total {
            self.evict(&mut w, 0);
        }
        let id = w.next;
        w.next += 1;
        w.seats.push_back((id, uid, handle));
        Ok(Seat { room: self, id })
    }

    /// Closes seat `at`: its thread's read ends at once.
    fn evict(&self, w: &mut Waiting, at: usize) {
        if let Some((_, _, stream)) = w.seats.remove(at) {
            let _ = stream.shutdown(Shutdown::Both);
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
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

impl Seat<'_> {
    /// The connection stayed silent past [`WAIT_TIMEOUT`].
    pub fn timed_out(&self) {
        self.room.timed_out.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Seat<'_> {
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
    fn a_full_room_closes_its_oldest_and_seats_the_newcomer() {
        let room = WaitingRoom::new(2, 3);
        let pairs: Vec<(UnixStream, UnixStream)> = (0..3).map(|_| UnixStream::pair().unwrap()).collect();
        // One uid (ours) for every pair: the per-peer limit of 2 rules.
        let seats: Vec<Seat> = pairs.iter().map(|(server, _)| room.enter(server).unwrap()).collect();
        let (mut first, mut second, mut third) =
            (pairs[0].1.try_clone().unwrap(), pairs[1].1.try_clone().unwrap(), pairs[2].1.try_clone().unwrap());
        assert!(closed(&mut first), "the third of one uid pushed out its oldest");
        assert!(!closed(&mut second) && !closed(&mut third));
        assert_eq!(room.counters()[2], ("closed_for_limit", 1));
        drop(seats);
        assert!(room.waiting.lock().unwrap().seats.is_empty(), "dropped seats leave");
    }
}
