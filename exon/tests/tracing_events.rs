//! What the endpoint logs: its events carry the endpoint's span (with its node id), and a
//! warning that can come at message rate is rate-limited.
//!
//! A binary of its own: tracing decides per callsite, process-wide, whether anyone listens,
//! and a test thread that reaches a callsite first with no subscriber can leave this test's
//! span disabled (seen once in the shared `endpoint` binary: the `peer` span missing from
//! the first "message queued" event). Alone, its subscriber is its thread's default
//! (`set_default`) and its endpoint runs on a current-thread runtime.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use exon::{Endpoint, EndpointConfig, NodeId};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// An event as captured: level, its fields (message included), and the spans it was in,
/// outermost first, as `name{field=value ...}`.
#[derive(Debug, Clone)]
struct Captured {
    level: Level,
    fields: HashMap<String, String>,
    spans: Vec<String>,
}

#[derive(Default)]
struct Fields(Vec<(String, String)>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .push((field.name().to_string(), format!("{value:?}")));
    }
}

/// A subscriber that records every event with its span context (one thread: the tests run
/// on a current-thread runtime).
#[derive(Clone, Default)]
struct Capture {
    next_id: Arc<AtomicU64>,
    spans: Arc<Mutex<HashMap<u64, String>>>,
    stack: Arc<Mutex<Vec<u64>>>,
    events: Arc<Mutex<Vec<Captured>>>,
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let mut f = Fields::default();
        span.record(&mut f);
        let fields: Vec<String> = f.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let text = format!("{}{{{}}}", span.metadata().name(), fields.join(" "));
        self.spans.lock().unwrap().insert(id, text);
        Id::from_u64(id)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let spans = self.spans.lock().unwrap();
        let context = self
            .stack
            .lock()
            .unwrap()
            .iter()
            .filter_map(|id| spans.get(id).cloned())
            .collect();
        self.events.lock().unwrap().push(Captured {
            level: *event.metadata().level(),
            fields: f.0.into_iter().collect(),
            spans: context,
        });
    }

    fn enter(&self, span: &Id) {
        self.stack.lock().unwrap().push(span.into_u64());
    }

    fn exit(&self, span: &Id) {
        let mut stack = self.stack.lock().unwrap();
        if let Some(i) = stack.iter().rposition(|&s| s == span.into_u64()) {
            stack.remove(i);
        }
    }
}

#[test]
fn sends_to_unknown_or_silent_peers_log_no_warning_flood() {
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(capture.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (a_id, nowhere) = (NodeId::from_const(7), NodeId::from_const(8));
        let a = Endpoint::bind(
            "127.0.0.1:0",
            a_id,
            exon::proto::Security::InsecurePlaintext,
            EndpointConfig::default(),
        )
        .await
        .unwrap();
        let mut receipts = Vec::new();
        // A send to an id with no address is refused at once, without a warning.
        let e = a.send(nowhere, Vec::new()).await.unwrap_err();
        assert!(matches!(e, exon::endpoint::Error::UnknownPeer(_)), "{e}");
        // A peer that never answers: every message is queued, none warns.
        let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        a.add_peer(nowhere, silent.local_addr().unwrap());
        for i in 0..1000u32 {
            receipts.push(a.send(nowhere, i.to_be_bytes().to_vec()).await.unwrap());
        }
        // Commands are taken in order: once the counters come back, every send was handled.
        a.stats().await.unwrap();
        a.close(Duration::ZERO).await;
    });
    let events = capture.events.lock().unwrap();
    let warnings: Vec<&Captured> = events
        .iter()
        .filter(|e| e.level == Level::WARN)
        .filter(|e| e.fields["message"].contains("no known address"))
        .collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
    // Each message still gets its own debug event, in the peer's span.
    let queued: Vec<&Captured> = events
        .iter()
        .filter(|e| e.level == Level::DEBUG && e.fields["message"] == "message queued")
        .collect();
    assert_eq!(queued.len(), 1000);
    assert!(
        queued[0].spans.iter().any(|s| s == "peer{peer=n8}"),
        "{:?}",
        queued[0].spans
    );
}
