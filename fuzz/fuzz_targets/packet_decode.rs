//! Arbitrary bytes into the decoder: never a panic; what decodes re-encodes to the same bytes.
#![no_main]

use bytes::Bytes;
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
});
