//! Authentication of Flight calls: a static bearer token and/or HTTP basic credentials,
//! carried in the `authorization` header (Arrow Flight's header-based authentication).
//!
//! - `authorization: Bearer TOKEN` is accepted when `TOKEN` is the configured token or a
//!   token this server issued in a handshake.
//! - `authorization: Basic base64(USER:PASSWORD)` is accepted on any call when it matches
//!   the configured credentials. On `Handshake` the server then answers with a response
//!   header `authorization: Bearer <session token>`, which is what pyarrow's
//!   `FlightClient.authenticate_basic_token` and Arrow Java's
//!   `FlightClient.authenticateBasicToken` expect: they send that header on later calls.
//!
//! Session tokens are 32 random bytes (base64), kept in memory: a restart of the daemon
//! invalidates them and clients authenticate again. When nothing is configured every
//! call is allowed.

use std::collections::HashSet;
use std::sync::{PoisonError, RwLock};

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use tonic::metadata::MetadataMap;
use tonic::Status;

/// Base64 of basic credentials, padded or not: RFC 7617 pads, but some Flight clients
/// (arrow-go's `AuthenticateBasicToken`, under ADBC's Flight SQL driver) send it unpadded.
const BASIC_CREDENTIALS: GeneralPurpose =
    GeneralPurpose::new(&base64::alphabet::STANDARD, GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent));

/// The outcome of checking a call's credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credentials {
    /// Authentication is not configured.
    NotRequired,
    /// A valid bearer token.
    Bearer,
    /// Valid basic credentials (a handshake answers them with a session token).
    Basic,
}

/// Checks the `authorization` header of every call. Built from the server's
/// configuration; shared by the interceptor and the `Handshake` handler.
#[derive(Debug, Default)]
pub struct Authenticator {
    bearer_token: Option<String>,
    /// `(user, password)`.
    basic: Option<(String, String)>,
    issued: RwLock<HashSet<String>>,
}

impl Authenticator {
    /// An authenticator accepting `bearer_token` and/or `basic` = `USER:PASSWORD`.
    ///
    /// # Errors
    /// A message when `basic` has no `:` or an empty user name.
    pub fn new(bearer_token: Option<String>, basic: Option<&str>) -> Result<Self, String> {
        let basic = basic
            .map(|text| match text.split_once(':') {
                Some((user, password)) if !user.is_empty() => Ok((user.to_owned(), password.to_owned())),
                _ => Err("basic_auth must be USER:PASSWORD with a non-empty user name".to_owned()),
            })
            .transpose()?;
        Ok(Self { bearer_token, basic, issued: RwLock::new(HashSet::new()) })
    }

    /// True when calls must carry credentials.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.bearer_token.is_some() || self.basic.is_some()
    }

    /// Checks the `authorization` header in `metadata`.
    ///
    /// # Errors
    /// `UNAUTHENTICATED` naming what is missing or wrong (never echoing secrets).
    pub fn check(&self, metadata: &MetadataMap) -> Result<Credentials, Status> {
        if !self.enabled() {
            return Ok(Credentials::NotRequired);
        }
        let accepted = match (self.bearer_token.is_some(), self.basic.is_some()) {
            (true, true) => "`authorization: Bearer <token>` or `authorization: Basic <base64 user:password>`",
            (true, false) => "`authorization: Bearer <token>`",
            _ => "`authorization: Basic <base64 user:password>` (or a bearer token from a handshake)",
        };
        let Some(value) = metadata.get("authorization") else {
            return Err(Status::unauthenticated(format!("this server requires an {accepted} header")));
        };
        let value = value.to_str().map_err(|_| Status::unauthenticated("the authorization header is not ASCII"))?;
        if let Some(token) = strip_scheme(value, "Bearer") {
            let configured = self.bearer_token.as_deref().is_some_and(|t| constant_time_eq(t.as_bytes(), token.as_bytes()));
            if configured || self.issued.read().unwrap_or_else(PoisonError::into_inner).contains(token) {
                return Ok(Credentials::Bearer);
            }
            return Err(Status::unauthenticated("the bearer token is not valid"));
        }
        if let Some(encoded) = strip_scheme(value, "Basic") {
            let Some((user, password)) = &self.basic else {
                return Err(Status::unauthenticated(format!("basic authentication is not enabled; send an {accepted} header")));
            };
            let decoded = BASIC_CREDENTIALS
                .decode(encoded.trim())
                .map_err(|_| Status::unauthenticated("the basic credentials are not valid base64"))?;
            let expected = format!("{user}:{password}");
            if constant_time_eq(expected.as_bytes(), &decoded) {
                return Ok(Credentials::Basic);
            }
            return Err(Status::unauthenticated("wrong user name or password"));
        }
        Err(Status::unauthenticated(format!("unsupported authorization scheme; send an {accepted} header")))
    }

    /// Issues a session token (after valid basic credentials in a handshake).
    ///
    /// # Errors
    /// `INTERNAL` if the operating system has no randomness to give.
    pub fn issue_token(&self) -> Result<String, Status> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| Status::internal(format!("no randomness for a session token: {e}")))?;
        let token = STANDARD.encode(bytes);
        self.issued.write().unwrap_or_else(PoisonError::into_inner).insert(token.clone());
        Ok(token)
    }
}

/// `value` without a leading `scheme ` (case-insensitive scheme, as HTTP has it).
fn strip_scheme<'v>(value: &'v str, scheme: &str) -> Option<&'v str> {
    let (given, rest) = value.split_once(' ')?;
    given.eq_ignore_ascii_case(scheme).then(|| rest.trim_start())
}

/// Whether the secret `expected` equals the `presented` bytes, in a time that depends on
/// neither the secret's content nor its length: both are hashed (SHA-256, whose time depends
/// only on the input's length; the presented length is the caller's own), and the digests are
/// compared with `subtle`'s constant-time equality.
pub(crate) fn constant_time_eq(expected: &[u8], presented: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    let expected = ring::digest::digest(&ring::digest::SHA256, expected);
    let presented = ring::digest::digest(&ring::digest::SHA256, presented);
    expected.as_ref().ct_eq(presented.as_ref()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> MetadataMap {
        let mut map = MetadataMap::new();
        map.insert("authorization", value.parse().unwrap());
        map
    }

    #[test]
    fn bearer_basic_and_issued_tokens_are_accepted_and_nothing_else() {
        let auth = Authenticator::new(Some("s3cret".into()), Some("ana:pa:ss")).unwrap();
        assert_eq!(auth.check(&headers("Bearer s3cret")).unwrap(), Credentials::Bearer);
        assert_eq!(auth.check(&headers("bearer s3cret")).unwrap(), Credentials::Bearer);
        let basic = format!("Basic {}", STANDARD.encode("ana:pa:ss"));
        assert_eq!(auth.check(&headers(&basic)).unwrap(), Credentials::Basic);
        let unpadded = format!("Basic {}", base64::engine::general_purpose::STANDARD_NO_PAD.encode("ana:pa:ss"));
        assert!(!unpadded.ends_with('='));
        assert_eq!(auth.check(&headers(&unpadded)).unwrap(), Credentials::Basic);
        let token = auth.issue_token().unwrap();
        assert_eq!(auth.check(&headers(&format!("Bearer {token}"))).unwrap(), Credentials::Bearer);
        for bad in ["Bearer s3cre", "Bearer", "Basic !!!", &format!("Basic {}", STANDARD.encode("ana:wrong")), "Digest x"] {
            let status = auth.check(&headers(bad)).unwrap_err();
            assert_eq!(status.code(), tonic::Code::Unauthenticated, "{bad}");
            assert!(!status.message().contains("s3cret") && !status.message().contains("pa:ss"), "{}", status.message());
        }
        assert!(auth.check(&MetadataMap::new()).unwrap_err().message().contains("Bearer"));
    }

    #[test]
    fn token_comparison_matches_only_the_same_bytes_whatever_the_lengths() {
        for (expected, presented, equal) in [
            ("s3cret", "s3cret", true),
            ("s3cret", "s3cre", false),
            ("s3cret", "s3crets3cret", false),
            ("s3cret", "", false),
            ("", "", true),
            ("", "x", false),
            ("ab", "ba", false),
        ] {
            assert_eq!(constant_time_eq(expected.as_bytes(), presented.as_bytes()), equal, "{expected:?} vs {presented:?}");
        }
    }

    #[test]
    fn nothing_configured_allows_every_call_and_bad_basic_config_is_refused() {
        assert_eq!(Authenticator::default().check(&MetadataMap::new()).unwrap(), Credentials::NotRequired);
        assert!(Authenticator::new(None, Some("no-colon")).is_err());
        assert!(Authenticator::new(None, Some(":password")).is_err());
        let basic_only = Authenticator::new(None, Some("u:p")).unwrap();
        assert_eq!(basic_only.check(&headers("Bearer anything")).unwrap_err().code(), tonic::Code::Unauthenticated);
    }
}
