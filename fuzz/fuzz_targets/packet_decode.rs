//! Arbitrary bytes into the decoder: never a panic; what decodes re-encodes to the same bytes.
//! The same bytes as a message envelope: never a panic, and what opens re-seals identically.
#![no_main]

use bytes::Bytes;
use exon::envelope::Envelope;
use exon::proto::Packet;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    if let Ok(p) = Packet::decode(&bytes) {
        assert_eq!(
            p.encode(),
            bytes,
            "a valid datagram must re-encode identically"
        );
        assert_eq!(p.encoded_len(), bytes.len());
    }
    if let Ok(e) = Envelope::open(bytes.clone()) {
        let sealed = match &e {
            Envelope::Message(body) => Envelope::message(body.clone()),
            Envelope::Request { call, body } => Envelope::request(*call, body.clone()),
            Envelope::Reply {
                call,
                outcome,
                body,
            } => Envelope::reply(*call, *outcome, body.clone()),
            Envelope::Ordered { place, last, body } => {
                Envelope::ordered(*place, *last, body.clone())
            }
            Envelope::Gap(place) => Envelope::gap(*place),
            Envelope::Reset(place) => Envelope::reset(*place),
            Envelope::Query(place) => Envelope::query(*place),
            Envelope::Over(place) => Envelope::over(*place),
            Envelope::Window {
                flow,
                run,
                messages,
                bytes,
            } => Envelope::window(*flow, *run, *messages, *bytes),
        }
        .to_bytes();
        // Varints have one shortest form; a longer one opens to the same value.
        assert!(sealed.len() <= bytes.len());
        assert_eq!(Envelope::open(sealed), Ok(e));
    }
});
