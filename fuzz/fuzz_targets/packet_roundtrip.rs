//! Arbitrary structured packets: encode then decode gives the same value.
#![no_main]

use exon::proto::Packet;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|p: Packet| {
    let bytes = p.encode();
    assert_eq!(bytes.len(), p.encoded_len());
    assert_eq!(Packet::decode(&bytes).as_ref(), Ok(&p));
});
