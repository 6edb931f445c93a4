//! What the endpoint tests share: fast timers, and the test keyring of nodes 1 to 3.

use std::time::Duration;

use exon::endpoint::EndpointConfig;
use exon::proto::Config;
use exon::NodeId;

/// An endpoint configuration with timers fast enough for tests on loopback.
pub fn cfg() -> EndpointConfig {
    EndpointConfig::default().with_protocol({
        let mut conf = Config::default();
        conf.timers.initial_rtt = Duration::from_millis(20);
        conf.timers.probe_interval = Duration::from_millis(50);
        conf.timers.max_probe_interval = Duration::from_millis(200);
        conf.timers.idle_timeout = Duration::from_millis(300);
        conf
    })
}

/// Sealed security for node `id`, with nodes 1 to 3 in its keyring.
pub fn security(id: NodeId) -> exon::proto::Security {
    exon::proto::crypto::insecure_test_security(id, (1..4).map(NodeId::from_const))
}

/// A durable endpoint for node `id` in directory `dir` on loopback, with the rule
/// `durable_flows` as given, acknowledging after processing or not.
pub async fn durable_flows(
    id: NodeId,
    dir: &std::path::Path,
    rule: bool,
    ack_later: bool,
) -> exon::endpoint::Endpoint {
    let mut rules = exon::proto::Rules::ALL;
    rules.durable_flows = rule;
    durable_rules(id, dir, rules, ack_later).await
}

/// A durable endpoint for node `id` in directory `dir` on loopback, with `rules`,
/// acknowledging after processing or not.
pub async fn durable_rules(
    id: NodeId,
    dir: &std::path::Path,
    rules: exon::proto::Rules,
    ack_later: bool,
) -> exon::endpoint::Endpoint {
    let mut c = cfg().with_rules(rules);
    c.ack_after_processing = ack_later;
    bind_durable(id, dir, c, security(id)).await.unwrap()
}

/// A durable endpoint for node `id` in directory `dir` on loopback, with configuration `c`
/// and security `sec`.
pub async fn bind_durable(
    id: NodeId,
    dir: &std::path::Path,
    c: EndpointConfig,
    sec: exon::proto::Security,
) -> Result<exon::endpoint::Endpoint, exon::endpoint::BindError> {
    exon::endpoint::Endpoint::builder(id)
        .security(sec)
        .config(c)
        .durable(dir)
        .bind("127.0.0.1:0")
        .await
}

/// Stops `e` at once, as a crash would (no linger), keeping what its journal synced.
pub async fn stop(e: exon::endpoint::Endpoint) {
    drop(e.close(Duration::ZERO).await);
}
