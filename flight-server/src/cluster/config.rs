//! The `[cluster]` section of the daemon's config file: a static membership list, the same
//! on every node, and which node this one is.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Most nodes a cluster lists.
pub const MAX_NODES: usize = 1024;

/// Fewest bytes of a cluster secret (`secret`, `secret_file`): 16 random bytes written as
/// text are the least that cannot be guessed; `openssl rand -hex 32` gives 64.
pub const MIN_SECRET_BYTES: usize = 16;

/// Most bytes of a cluster secret (it travels in a header of every call between nodes).
pub const MAX_SECRET_BYTES: usize = 1024;

/// The `[cluster]` section: `nodes` (node id = position in the list) and `node_id`.
/// An empty `nodes` list: no cluster (a single daemon, as before).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// Every node's Flight location (`grpc://host:port` or `grpc+tls://host:port`), node
    /// `i` at position `i`: what clients and the other nodes connect to. Environment:
    /// `SHOAL_CLUSTER_NODES` (comma-separated).
    pub nodes: Vec<String>,
    /// This node's id (its position in `nodes`). Unset: the ordinal at the end of the host
    /// name (`shoal-2` → 2, as a Kubernetes StatefulSet names its pods). Environment:
    /// `SHOAL_NODE_ID`.
    pub node_id: Option<usize>,
    /// PEM certificate(s) this node trusts when it calls a `grpc+tls://` node (default:
    /// the system's roots); checked as the CLI checks a server (a certificate given here is
    /// accepted as the node's own, as `openssl req -x509` makes one: [`crate::tls_client`]).
    /// Environment: `SHOAL_CLUSTER_TLS_CA`, flag `--cluster-tls-ca`.
    pub tls_ca: Option<PathBuf>,
    /// The secret the nodes share: every call a node makes to another carries it, and the
    /// calls only nodes make (`cluster_define`, `cluster_forget`) are refused without it,
    /// whether or not client authentication is on. Printable ASCII, [`MIN_SECRET_BYTES`] to
    /// [`MAX_SECRET_BYTES`] bytes; required for a cluster. Environment:
    /// `SHOAL_CLUSTER_SECRET`. Never written back out (not serialized).
    #[serde(skip_serializing)]
    pub secret: Option<String>,
    /// A file whose content (trimmed) is the secret, instead of `secret` (a Kubernetes
    /// Secret mounted as a file). Environment: `SHOAL_CLUSTER_SECRET_FILE`.
    pub secret_file: Option<PathBuf>,
}

impl ClusterConfig {
    /// True when `nodes` lists a cluster.
    #[must_use]
    pub fn is_enabled(&self) -> bool {
        !self.nodes.is_empty()
    }

    /// Checks the list and this node's place in it.
    ///
    /// # Errors
    /// A message naming the location that is not a Flight location, a list longer than
    /// [`MAX_NODES`], a location listed twice, or a node id outside the list (or none
    /// given and none in the host name).
    pub fn validate(&self) -> Result<(), String> {
        if !self.is_enabled() {
            return match self.node_id {
                Some(_) => Err("cluster.node_id is set but cluster.nodes is empty: list the nodes' locations".into()),
                None => Ok(()),
            };
        }
        if self.nodes.len() > MAX_NODES {
            return Err(format!("cluster.nodes lists {} nodes; at most {MAX_NODES}", self.nodes.len()));
        }
        for (i, location) in self.nodes.iter().enumerate() {
            let rest = location.strip_prefix("grpc://").or_else(|| location.strip_prefix("grpc+tls://"));
            if !rest.is_some_and(|r| !r.is_empty() && !r.contains('/')) {
                return Err(format!("cluster.nodes[{i}] = {location:?} is not a Flight location grpc://host:port or grpc+tls://host:port"));
            }
            if self.nodes[..i].contains(location) {
                return Err(format!("cluster.nodes lists {location:?} twice"));
            }
        }
        self.resolve_node_id().map(|_| ())
    }

    /// The cluster's secret: the trimmed content of `secret_file`, else `secret`.
    ///
    /// # Errors
    /// A message when neither is set (a cluster needs one), the file cannot be read, or the
    /// secret is shorter than [`MIN_SECRET_BYTES`], longer than [`MAX_SECRET_BYTES`] or not
    /// printable ASCII (it is sent as a header value).
    pub fn resolve_secret(&self) -> Result<String, String> {
        let (secret, source) = match (&self.secret_file, &self.secret) {
            (Some(path), _) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read cluster.secret_file {}: {e}", path.display()))?;
                (text.trim().to_owned(), format!("cluster.secret_file {}", path.display()))
            }
            (None, Some(secret)) => (secret.clone(), "cluster.secret".to_owned()),
            (None, None) => {
                return Err(
                    "a cluster needs a secret its nodes share (calls between nodes carry it): set cluster.secret_file \
                     (SHOAL_CLUSTER_SECRET_FILE, --cluster-secret-file) or cluster.secret (SHOAL_CLUSTER_SECRET) on every node, \
                     e.g. to the output of `openssl rand -hex 32`"
                        .to_owned(),
                )
            }
        };
        if secret.len() < MIN_SECRET_BYTES || secret.len() > MAX_SECRET_BYTES {
            return Err(format!(
                "{source} holds {} bytes; a cluster secret has {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} (e.g. `openssl rand -hex 32`)",
                secret.len()
            ));
        }
        if !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!("{source} is not printable ASCII without spaces (it is sent as a header value)"));
        }
        Ok(secret)
    }

    /// This node's id: `node_id`, else the host name's ordinal.
    ///
    /// # Errors
    /// When neither gives an id within `nodes`.
    pub fn resolve_node_id(&self) -> Result<usize, String> {
        let id = match self.node_id {
            Some(id) => id,
            None => {
                let host = host_name();
                host_ordinal(&host).ok_or_else(|| {
                    format!(
                        "cluster.node_id is not set and the host name {host:?} does not end in -<ordinal> (as shoal-0, shoal-1, …): \
                         set cluster.node_id or SHOAL_NODE_ID"
                    )
                })?
            }
        };
        if id >= self.nodes.len() {
            return Err(format!("cluster.node_id {id} is not in cluster.nodes (nodes 0..{})", self.nodes.len()));
        }
        Ok(id)
    }
}

/// The ordinal a StatefulSet gives its pods' host names: `shoal-12` → 12.
#[must_use]
pub fn host_ordinal(host: &str) -> Option<usize> {
    let first_label = host.split('.').next().unwrap_or(host);
    let (_, ordinal) = first_label.rsplit_once('-')?;
    if ordinal.is_empty() || !ordinal.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    ordinal.parse().ok()
}

/// The host name: `HOSTNAME` (set in containers), else the operating system's.
pub(crate) fn host_name() -> String {
    if let Ok(name) = std::env::var("HOSTNAME") {
        if !name.is_empty() {
            return name;
        }
    }
    let mut buffer = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length; gethostname NUL-terminates
    // within it (or truncates), and we read up to the first NUL only.
    let result = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) };
    if result != 0 {
        return String::new();
    }
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    String::from_utf8_lossy(&buffer[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statefulset_host_name_gives_the_node_id() {
        assert_eq!(host_ordinal("shoal-0"), Some(0));
        assert_eq!(host_ordinal("shoal-12.shoal.default.svc.cluster.local"), Some(12));
        assert_eq!(host_ordinal("my-shoal-db-3"), Some(3));
        assert_eq!(host_ordinal("shoal"), None);
        assert_eq!(host_ordinal("shoal-"), None);
        assert_eq!(host_ordinal("shoal-a1"), None);
    }

    #[test]
    fn the_list_and_the_node_id_are_checked() {
        let nodes = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let mut config = ClusterConfig { nodes: nodes(&["grpc://a:1", "grpc+tls://b:2"]), node_id: Some(1), ..ClusterConfig::default() };
        config.validate().unwrap();
        config.node_id = Some(2);
        assert!(config.validate().unwrap_err().contains("node_id 2 is not in cluster.nodes"));
        config.node_id = Some(0);
        config.nodes.push("http://c:3".into());
        assert!(config.validate().unwrap_err().contains("cluster.nodes[2]"));
        config.nodes = nodes(&["grpc://a:1", "grpc://a:1"]);
        assert!(config.validate().unwrap_err().contains("twice"));
        let alone = ClusterConfig { nodes: Vec::new(), node_id: Some(0), ..ClusterConfig::default() };
        assert!(alone.validate().unwrap_err().contains("cluster.nodes is empty"));
        ClusterConfig::default().validate().unwrap();
    }

    #[test]
    fn a_cluster_needs_a_secret_of_printable_ascii_and_bounded_length() {
        let mut config = ClusterConfig::default();
        assert!(config.resolve_secret().unwrap_err().contains("a cluster needs a secret"));
        config.secret = Some("short".into());
        assert!(config.resolve_secret().unwrap_err().contains("cluster.secret holds 5 bytes"));
        config.secret = Some("0123456789abcdef 01".into());
        assert!(config.resolve_secret().unwrap_err().contains("not printable ASCII"));
        config.secret = Some("0123456789abcdef".into());
        assert_eq!(config.resolve_secret().unwrap(), "0123456789abcdef");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "  fedcba9876543210fedcba9876543210\n").unwrap();
        config.secret_file = Some(path.clone());
        assert_eq!(config.resolve_secret().unwrap(), "fedcba9876543210fedcba9876543210", "the file wins, trimmed");
        config.secret_file = Some(dir.path().join("missing"));
        assert!(config.resolve_secret().unwrap_err().contains("cannot read cluster.secret_file"));
    }
}
