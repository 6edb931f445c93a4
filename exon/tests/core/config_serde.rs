//! The serde form of the configuration: durations as human-readable text, misspelt or
//! unknown fields refused, missing fields taking their defaults.

use std::time::Duration;

use exon::{Config, EndpointConfig};

#[test]
fn durations_parse_from_human_readable_text() {
    let c: EndpointConfig = serde_json::from_str(
        r#"{ "linger": "250ms", "protocol": { "timers": { "idle_timeout": "2s", "max_rto": "1m 30s" } } }"#,
    )
    .unwrap();
    assert_eq!(c.linger, Duration::from_millis(250));
    assert_eq!(c.protocol.timers.idle_timeout, Duration::from_secs(2));
    assert_eq!(c.protocol.timers.max_rto, Duration::from_secs(90));
    // What is not given keeps its default.
    let d = EndpointConfig::default();
    assert_eq!(c.store_retry, d.store_retry);
    assert_eq!(c.protocol.flow.window, d.protocol.flow.window);
}

#[test]
fn durations_serialize_as_text_and_round_trip() {
    let c = EndpointConfig::default();
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["linger"], "5s");
    assert_eq!(json["protocol"]["timers"]["min_rto"], "5ms");
    assert_eq!(json["protocol"]["acks"]["delay"], "2ms");
    let back: EndpointConfig = serde_json::from_value(json).unwrap();
    assert_eq!(back, c);
}

#[test]
fn a_duration_that_is_not_one_is_refused() {
    let e =
        serde_json::from_str::<Config>(r#"{ "timers": { "idle_timeout": "soon" } }"#).unwrap_err();
    assert!(e.to_string().contains("soon") || e.is_data(), "{e}");
    // The old struct form is refused too: durations are text now.
    assert!(serde_json::from_str::<Config>(
        r#"{ "timers": { "idle_timeout": { "secs": 1, "nanos": 0 } } }"#
    )
    .is_err());
    // A well-formed duration in the same place is taken.
    let c = serde_json::from_str::<Config>(r#"{ "timers": { "idle_timeout": "3s" } }"#).unwrap();
    assert_eq!(c.timers.idle_timeout, Duration::from_secs(3));
}

#[test]
fn unknown_fields_are_refused() {
    let e = serde_json::from_str::<EndpointConfig>(r#"{ "lingre": "1s" }"#).unwrap_err();
    assert!(e.to_string().contains("unknown field `lingre`"), "{e}");
    let e = serde_json::from_str::<EndpointConfig>(r#"{ "protocol": { "flow": { "windw": 8 } } }"#)
        .unwrap_err();
    assert!(e.to_string().contains("unknown field `windw`"), "{e}");
    // A field outside its group (the flat form of earlier versions) is refused, not ignored.
    let e =
        serde_json::from_str::<EndpointConfig>(r#"{ "protocol": { "window": 8 } }"#).unwrap_err();
    assert!(e.to_string().contains("unknown field `window`"), "{e}");
}

#[test]
fn non_exhaustive_configs_are_built_from_their_defaults() {
    let mut c = Config::default();
    c.flow.window = 64;
    let e = EndpointConfig::default().with_protocol(c.clone());
    assert_eq!(e.protocol.flow.window, 64);
}
