//! Captures in processes: what ferryd asks an NF thread to copy, and the
//! record each copy becomes. Defined once for ferryd (which arms a thread
//! and reads its copies) and the SDK (which takes them).
//!
//! ferryd arms a thread by writing a [`Tap`] into its block's
//! [`crate::shm::T_TAP`] word; the thread reads that word once per burst,
//! so a capture that is off costs one load and one branch per burst. An
//! armed thread copies each frame the tap names into its record ring
//! ([`crate::shm::capture_ring`], a `ferry_ring::RecordRing`): never
//! waiting, a copy that does not fit is lost and counted there, and the
//! frame itself goes on as it would have.

/// A point of a chain a capture names (`ferry chain capture --at`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Point {
    /// `PORT` or `PORT:rx`: frames as port PORT received them.
    PortRx(String),
    /// `PORT:tx`: frames as port PORT sent them.
    PortTx(String),
    /// `A->B`: frames NF A sent to B (an NF or a port).
    Link { from: String, to: String },
    /// `NF:in`: frames NF NF took in.
    NfIn(String),
    /// `NF:out`: frames NF NF sent on.
    NfOut(String),
}

impl std::str::FromStr for Point {
    type Err = String;

    fn from_str(s: &str) -> Result<Point, String> {
        let name = |n: &str| {
            let ok = !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            ok.then(|| n.to_string()).ok_or_else(|| format!("{s:?}: {n:?} is not an NF or port name"))
        };
        if let Some((from, to)) = s.split_once("->") {
            return Ok(Point::Link { from: name(from.trim())?, to: name(to.trim())? });
        }
        match s.rsplit_once(':') {
            None => Ok(Point::PortRx(name(s)?)),
            Some((n, "rx")) => Ok(Point::PortRx(name(n)?)),
            Some((n, "tx")) => Ok(Point::PortTx(name(n)?)),
            Some((n, "in")) => Ok(Point::NfIn(name(n)?)),
            Some((n, "out")) => Ok(Point::NfOut(name(n)?)),
            Some((_, side)) => Err(format!(
                "{s:?}: {side:?} is no side of a point: PORT, PORT:rx or PORT:tx for a port, NF:in or NF:out for an \
                 NF, A->B for a link"
            )),
        }
    }
}

impl std::fmt::Display for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Point::PortRx(p) => write!(f, "{p}:rx"),
            Point::PortTx(p) => write!(f, "{p}:tx"),
            Point::Link { from, to } => write!(f, "{from}->{to}"),
            Point::NfIn(n) => write!(f, "{n}:in"),
            Point::NfOut(n) => write!(f, "{n}:out"),
        }
    }
}

/// Where in a thread a tap takes copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapAt {
    /// Every frame the thread takes in (from its ports and its ring).
    Input,
    /// Frames sent on out-link `hop` (None: every frame sent, replies
    /// out of a port included).
    Output { hop: Option<u16> },
    /// Frames received on the chain's port `port`.
    PortRx { port: u16 },
    /// Frames sent out of the chain's port `port`.
    PortTx { port: u16 },
    /// Frames a fused NF's stage `stage` passes on to the next stage (or
    /// to the out-link, after the last).
    Stage { stage: u16 },
}

/// An armed tap: where, how many bytes of each frame, and the capture it
/// belongs to (never 0: a zero word is "off").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tap {
    pub at: TapAt,
    pub snaplen: u16,
    /// 24 bits; copies carry it, so a late copy of an earlier capture is
    /// told apart.
    pub session: u32,
}

const ANY: u64 = 0xffff;
/// A tap word while its capture drains the ring: no tap (a thread copies
/// nothing), and not free (no other capture takes the slot).
pub const TAP_DRAINING: u64 = u64::MAX;
/// The largest session number a tap word holds.
pub const MAX_SESSION: u32 = (1 << 24) - 1;

impl Tap {
    /// The tap word: kind (bits 0-7), index (8-23), snaplen (24-39),
    /// session (40-63).
    pub fn encode(&self) -> u64 {
        let (kind, index) = match self.at {
            TapAt::Input => (1, ANY),
            TapAt::Output { hop } => (2, hop.map_or(ANY, u64::from)),
            TapAt::PortRx { port } => (3, u64::from(port)),
            TapAt::PortTx { port } => (4, u64::from(port)),
            TapAt::Stage { stage } => (5, u64::from(stage)),
        };
        kind | index << 8 | u64::from(self.snaplen) << 24 | u64::from(self.session & MAX_SESSION) << 40
    }

    /// The tap a word holds; None for 0 (off) and for words no tap writes.
    pub fn decode(word: u64) -> Option<Tap> {
        let index = (word >> 8 & ANY) as u16;
        let at = match word & 0xff {
            1 => TapAt::Input,
            2 => TapAt::Output { hop: (index as u64 != ANY).then_some(index) },
            3 => TapAt::PortRx { port: index },
            4 => TapAt::PortTx { port: index },
            5 => TapAt::Stage { stage: index },
            _ => return None,
        };
        let session = (word >> 40) as u32;
        (session != 0).then_some(Tap { at, snaplen: (word >> 24) as u16, session })
    }

    /// Takes a frame the thread received (on `port`, or from its ring).
    pub fn takes_input(&self, port: Option<u16>) -> bool {
        match self.at {
            TapAt::Input => true,
            TapAt::PortRx { port: p } => port == Some(p),
            _ => false,
        }
    }

    /// Takes a frame sent on out-link `hop`, which leads to `port` if it
    /// leads to a port.
    pub fn takes_output(&self, hop: Option<u16>, port: Option<u16>) -> bool {
        match self.at {
            TapAt::Output { hop: None } => true,
            TapAt::Output { hop: Some(h) } => hop == Some(h),
            TapAt::PortTx { port: p } => port == Some(p),
            _ => false,
        }
    }

    /// The caller words of a copy of a frame of `orig_len` bytes taken at
    /// monotonic time `ns`.
    pub fn meta(&self, ns: u64, orig_len: usize) -> [u64; 2] {
        [ns, u64::from(self.session) << 32 | orig_len.min(u32::MAX as usize) as u64]
    }
}

/// A copy read back: when, of which capture, and the frame's own length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyMeta {
    pub monotonic_ns: u64,
    pub session: u32,
    pub orig_len: u32,
}

impl CopyMeta {
    pub fn of(meta: [u64; 2]) -> CopyMeta {
        CopyMeta { monotonic_ns: meta[0], session: (meta[1] >> 32) as u32, orig_len: meta[1] as u32 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_parse_as_the_cli_writes_them() {
        let p = |s: &str| s.parse::<Point>();
        assert_eq!(p("in"), Ok(Point::PortRx("in".into())));
        assert_eq!(p("in:tx"), Ok(Point::PortTx("in".into())));
        assert_eq!(p("fw->mon"), Ok(Point::Link { from: "fw".into(), to: "mon".into() }));
        assert_eq!(p("fw:out"), Ok(Point::NfOut("fw".into())));
        assert_eq!(p("mon:in").unwrap().to_string(), "mon:in");
        assert!(p("fw:sideways").unwrap_err().contains("no side"));
        assert!(p("->mon").is_err() && p("").is_err());
    }

    #[test]
    fn every_tap_survives_its_word() {
        for at in [
            TapAt::Input,
            TapAt::Output { hop: None },
            TapAt::Output { hop: Some(3) },
            TapAt::PortRx { port: 1 },
            TapAt::PortTx { port: 0 },
            TapAt::Stage { stage: 2 },
        ] {
            let t = Tap { at, snaplen: 1514, session: MAX_SESSION };
            assert_eq!(Tap::decode(t.encode()), Some(t));
        }
        assert_eq!(Tap::decode(0), None);
        assert_eq!(Tap::decode(TAP_DRAINING), None);
        assert_eq!(Tap::decode(Tap { at: TapAt::Input, snaplen: 9, session: 0 }.encode()), None);
    }

    #[test]
    fn taps_take_only_what_they_name() {
        let tx0 = Tap { at: TapAt::PortTx { port: 0 }, snaplen: 0, session: 1 };
        assert!(tx0.takes_output(Some(2), Some(0)));
        assert!(!tx0.takes_output(Some(2), Some(1)));
        assert!(!tx0.takes_input(Some(0)));
        let hop1 = Tap { at: TapAt::Output { hop: Some(1) }, snaplen: 0, session: 1 };
        assert!(hop1.takes_output(Some(1), None) && !hop1.takes_output(Some(0), None));
        let rx = Tap { at: TapAt::PortRx { port: 1 }, snaplen: 0, session: 1 };
        assert!(rx.takes_input(Some(1)) && !rx.takes_input(None) && !rx.takes_input(Some(0)));
        let meta = CopyMeta::of(rx.meta(77, 60));
        assert_eq!(meta, CopyMeta { monotonic_ns: 77, session: 1, orig_len: 60 });
    }
}
