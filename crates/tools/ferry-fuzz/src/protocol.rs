//! The control protocol: what ferryd reads from NF sockets and its admin
//! socket, and ferry-remote from a TLS peer. All three read frames with
//! `ferry_chain::proto::read_msg`.

use ferry_chain::proto::{frame, read_msg, HEADER_LEN, MAX_BODY};

/// A byte stream as a connection delivers it: messages are read until
/// the first error, as a server reads them. Each message read re-frames
/// to a frame that reads back to the same frame, within the body limit.
pub fn control(data: &[u8]) {
    let mut stream = data;
    while let Ok(msg) = read_msg(&mut stream) {
        let framed = frame(&msg).expect("a message read frames again");
        assert!(framed.len() - HEADER_LEN <= MAX_BODY as usize, "a body over the limit was read");
        let again = read_msg(&mut &framed[..]).expect("a framed message reads back");
        assert_eq!(frame(&again).expect("frames"), framed, "a message changed on its way round");
    }
}
