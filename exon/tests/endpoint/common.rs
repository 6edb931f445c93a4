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
