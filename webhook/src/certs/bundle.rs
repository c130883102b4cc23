//! What the certificate modules share: a bundle of PEM texts, the keys they are stored under,
//! and the error type.

use std::fmt;

use crate::rotation::RotationStep;
use crate::x509::Expiry;

/// Keys of the Secret, as cert-manager names them: the serving certificate and key, and the CAs
/// to trust (published as `caBundle`; two of them during a CA rollover).
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const CA_CERT: &str = "ca.crt";
/// Keys crr adds (cert-manager and its consumers ignore them): the key of the CA that signs the
/// serving certificate, that CA's certificate (one of `ca.crt`), and a new CA staged during a
/// rollover, with its key. An old CA kept after a rollover needs no key: it stays in `ca.crt`.
pub const CA_KEY: &str = "ca.key";
pub const SIGNING_CA_CERT: &str = "signing-ca.crt";
pub const NEXT_CA_CERT: &str = "next-ca.crt";
pub const NEXT_CA_KEY: &str = "next-ca.key";
/// Unix seconds when the bundle with the staged CA was found in every caBundle.
pub const ANNOTATION_NEXT_CA_PUBLISHED: &str = "crr.apps.kruise.io/next-ca-published-at";
/// Unix seconds since when the CAs of `ca.crt` other than the signing one are the previous CA of
/// a rollover (they leave `ca.crt` an overlap later).
pub const ANNOTATION_PREVIOUS_CA_SINCE: &str = "crr.apps.kruise.io/previous-ca-since";

/// Why a certificate could not be made, read or stored.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("generating the certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the certificate or key is not valid PEM: {0}")]
    Pem(String),
    #[error("the key cannot sign with this TLS provider: {0}")]
    Key(rustls::Error),
    #[error("the Secret {0} lacks {1}")]
    SecretIncomplete(String, &'static str),
    #[error("the CA certificate cannot be read: {0}")]
    CaUnreadable(#[from] crate::x509::ExpiryError),
    #[error("the time {0} is out of range")]
    TimeOutOfRange(i64),
    #[error("{0} needs a CA that the Secret does not hold")]
    NoCaFor(RotationStep),
    #[error("talking to the API server: {0}")]
    Api(#[from] kube::Error),
}

/// PEM texts of a serving certificate, its key and the CAs to trust.
#[derive(Clone, PartialEq, Eq)]
pub struct Bundle {
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_pem: String,
}

impl fmt::Debug for Bundle {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_struct("Bundle").finish_non_exhaustive()
    }
}

impl Bundle {
    /// When its certificates expire; what cannot be read is logged and left `None`.
    pub fn expiry(&self) -> Expiry {
        crate::x509::expiry(&self.cert_pem, &self.ca_pem)
    }
}

/// Reads `tls.crt`, `tls.key` and `ca.crt` from a folder (a mounted Secret).
pub fn read_dir(dir: &std::path::Path) -> Result<Bundle, CertError> {
    let read = |file: &str| {
        std::fs::read_to_string(dir.join(file))
            .map_err(|error| CertError::Pem(format!("{}: {error}", dir.join(file).display())))
    };
    Ok(Bundle {
        cert_pem: read(TLS_CERT)?,
        key_pem: read(TLS_KEY)?,
        ca_pem: read(CA_CERT).unwrap_or_default(),
    })
}
