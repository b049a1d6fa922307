//! The TLS connections the daemon and its CLI make (`grpc+tls://`: the CLI's, and a cluster
//! node's to the others): the certificates and checks a pyarrow client (gRPC C++ over
//! BoringSSL) accepts, so that a setup that works from Python works from `shoal` and
//! between nodes too.
//!
//! Two differences from tonic's own TLS (rustls with webpki) matter to a first setup:
//! - **A self-signed certificate made with `openssl req -x509`** is marked a CA
//!   (`basicConstraints CA:TRUE`); webpki refuses a CA certificate as the server's own
//!   ("CaUsedAsEndEntity") even when it is the very certificate the user trusts, which
//!   OpenSSL and BoringSSL accept. Here a server certificate that is byte for byte one of the
//!   certificates given with `--tls-ca` is accepted when it names the host and is within its
//!   validity period.
//! - **Without `--tls-ca`** the system's roots are trusted (`SSL_CERT_FILE`, else the
//!   usual bundle paths), as gRPC does; tonic without a root feature trusted none.
//!
//! Every other check is webpki's (chain to a trusted root, host name, validity, key usage).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// Bundles of the system's root certificates, first found first (Debian/Ubuntu, Fedora/RHEL,
/// openSUSE, Alpine share the first two).
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The certificates to trust: those of `ca` (PEM, one or more), else the system's.
///
/// # Errors
/// A message naming the file: unreadable, or holding no PEM certificate.
fn trusted_certificates(ca: Option<&Path>) -> Result<Vec<CertificateDer<'static>>, String> {
    let path: PathBuf = match ca {
        Some(path) => path.to_path_buf(),
        None => std::env::var_os("SSL_CERT_FILE")
            .map(PathBuf::from)
            .or_else(|| SYSTEM_BUNDLES.iter().map(PathBuf::from).find(|p| p.exists()))
            .ok_or_else(|| "no --tls-ca given and no system certificate bundle found (set SSL_CERT_FILE)".to_owned())?,
    };
    let bytes = std::fs::read(&path).map_err(|e| format!("cannot read the certificates {}: {e}", path.display()))?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: not PEM certificates: {e}", path.display()))?;
    if certificates.is_empty() {
        return Err(format!("{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)", path.display()));
    }
    Ok(certificates)
}

/// webpki's checks, and a server certificate that is itself one of the trusted ones
/// (module docs).
#[derive(Debug)]
struct TrustedOrPinned {
    webpki: Arc<WebPkiServerVerifier>,
    pinned: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for TrustedOrPinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            // webpki checks the certificate's own validity period before its basic
            // constraints: an expired or not yet valid pinned certificate fails with that.
            Err(error) if !outside_validity(&error) && self.pinned.iter().any(|c| c.as_ref() == end_entity.as_ref()) => {
                let parsed = rustls::server::ParsedCertificate::try_from(end_entity).map_err(|_| error)?;
                rustls::client::verify_server_name(&parsed, server_name)?;
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// Whether webpki refused a certificate for its validity period (expired, not yet valid).
fn outside_validity(error: &rustls::Error) -> bool {
    use rustls::CertificateError as E;
    matches!(
        error,
        rustls::Error::InvalidCertificate(E::Expired | E::ExpiredContext { .. } | E::NotValidYet | E::NotValidYetContext { .. })
    )
}

/// A rustls client configuration for the CLI: HTTP/2 by ALPN, the certificates of `ca`
/// (or the system's) trusted, [`TrustedOrPinned`]'s checks.
///
/// # Errors
/// A message naming the certificate file, or why rustls refused the roots.
pub fn client_config(ca: Option<&Path>) -> Result<rustls::ClientConfig, String> {
    let certificates = trusted_certificates(ca)?;
    let mut roots = rustls::RootCertStore::empty();
    let (_, ignored) = roots.add_parsable_certificates(certificates.iter().cloned());
    if roots.is_empty() {
        return Err(format!("none of the {ignored} certificates given is usable as a trust anchor"));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
        .build()
        .map_err(|e| format!("TLS configuration: {e}"))?;
    let pinned = if ca.is_some() { certificates } else { Vec::new() };
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(TrustedOrPinned { webpki, pinned }))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// A connector for tonic's `Endpoint`: TCP to the URI's host and port, then TLS with
/// `config`, the certificate checked against `host`.
fn connector(
    config: Arc<rustls::ClientConfig>,
    host: &str,
) -> impl tower::Service<
    tonic::codegen::http::Uri,
    Response = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
    Error = std::io::Error,
    Future = impl Send,
> + Clone
       + Send
       + 'static {
    let connector = tokio_rustls::TlsConnector::from(config);
    let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']').to_owned())
        .unwrap_or_else(|_| ServerName::try_from("invalid.invalid".to_owned()).expect("a valid name"));
    tower::service_fn(move |uri: tonic::codegen::http::Uri| {
        let (connector, name) = (connector.clone(), name.clone());
        async move {
            let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_owned();
            let port = uri.port_u16().unwrap_or(443);
            let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let stream = connector.connect(name, tcp).await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
        }
    })
}

/// Connects a channel to `host:port` over TLS with `config`, checking the certificate
/// against `host`. The channel's URI is `http://` (the TLS is this connector's, not
/// tonic's).
///
/// # Errors
/// tonic's transport error (its sources name the cause: refused, certificate, timeout).
pub async fn connect(
    endpoint: tonic::transport::Endpoint,
    config: rustls::ClientConfig,
    host: &str,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    endpoint.connect_with_connector(connector(Arc::new(config), host)).await
}

/// As [`connect`], connecting on first use (a cluster's channel to another node; the
/// endpoint's URI is `http://host:port`).
pub fn connect_lazy(endpoint: tonic::transport::Endpoint, config: Arc<rustls::ClientConfig>, host: &str) -> tonic::transport::Channel {
    endpoint.connect_with_connector_lazy(connector(config, host))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A certificate `openssl req -x509` makes (a CA certificate) for `localhost`, valid
    /// for a day from now, trusted as `--tls-ca`.
    fn self_signed() -> (TrustedOrPinned, CertificateDer<'static>) {
        let dir = std::env::temp_dir().join(format!("shoal-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        let made = std::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"])
            .args(["-addext", "subjectAltName=DNS:localhost", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .expect("openssl (the e2e tests make their certificates with it too)");
        assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
        let certificate = trusted_certificates(Some(&cert)).unwrap().remove(0);
        std::fs::remove_dir_all(&dir).unwrap();
        let verifier = TrustedOrPinned {
            webpki: WebPkiServerVerifier::builder_with_provider(
                Arc::new({
                    let mut roots = rustls::RootCertStore::empty();
                    roots.add(certificate.clone()).unwrap();
                    roots
                }),
                Arc::new(rustls::crypto::ring::default_provider()),
            )
            .build()
            .unwrap(),
            pinned: vec![certificate.clone()],
        };
        (verifier, certificate)
    }

    #[test]
    fn a_pinned_ca_certificate_is_the_servers_own_within_its_validity_and_name() {
        let (verifier, certificate) = self_signed();
        let now = UnixTime::now();
        let localhost = ServerName::try_from("localhost").unwrap();
        assert!(verifier.verify_server_cert(&certificate, &[], &localhost, &[], now).is_ok());
        let other = ServerName::try_from("example.com").unwrap();
        assert!(verifier.verify_server_cert(&certificate, &[], &other, &[], now).is_err(), "another host name");
        let later = UnixTime::since_unix_epoch(std::time::Duration::from_secs(now.as_secs() + 3 * 86_400));
        let expired = verifier.verify_server_cert(&certificate, &[], &localhost, &[], later).unwrap_err();
        assert!(outside_validity(&expired), "{expired}");
        let earlier = UnixTime::since_unix_epoch(std::time::Duration::from_secs(now.as_secs() - 3 * 86_400));
        assert!(outside_validity(&verifier.verify_server_cert(&certificate, &[], &localhost, &[], earlier).unwrap_err()));
    }
}
