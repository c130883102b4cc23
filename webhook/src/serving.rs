//! The webhook's TLS settings: TLS 1.2 and 1.3, HTTP/1.1, the certificate resolver's key pair,
//! and, when a client CA is configured, the API server's client certificate.
//!
//! Client certificates are asked for and verified against the configured CA, but not required
//! at the handshake: the API server presents one for admission calls (its
//! `--admission-control-config-file` names a kubeconfig with it), never for CRD conversion calls
//! (Kubernetes has no such setting). So the admission routes refuse a connection without a
//! verified certificate with 403 before they read a byte of the body (`routes`), and the
//! conversion route, which answers only with what it was sent, serves any caller.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use rustls::server::WebPkiClientVerifier;

use crate::certs::resolver::CertResolver;

/// Why the client CA could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ClientCaError {
    #[error("reading the client CA file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the client CA file {path} holds no PEM certificate")]
    Empty { path: String },
    #[error("the client CA file {path} holds a certificate rustls refuses: {message}")]
    Invalid { path: String, message: String },
}

/// The CA certificates in the PEM file at `path`.
pub fn read_client_ca(path: &Path) -> Result<RootCertStore, ClientCaError> {
    let shown = path.display().to_string();
    let pem = std::fs::read(path).map_err(|source| ClientCaError::Read {
        path: shown.clone(),
        source,
    })?;
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(&pem) {
        let certificate = certificate.map_err(|error| ClientCaError::Invalid {
            path: shown.clone(),
            message: error.to_string(),
        })?;
        roots
            .add(certificate)
            .map_err(|error| ClientCaError::Invalid {
                path: shown.clone(),
                message: error.to_string(),
            })?;
    }
    if roots.is_empty() {
        return Err(ClientCaError::Empty { path: shown });
    }
    Ok(roots)
}

/// rustls settings: TLS 1.2+ (rustls offers nothing older), HTTP/1.1, the resolver's key pair;
/// with `client_ca`, client certificates verified against it (optional at the handshake).
pub fn tls_config(
    resolver: Arc<CertResolver>,
    client_ca: Option<RootCertStore>,
) -> Result<rustls::ServerConfig, rustls::server::VerifierBuilderError> {
    let builder = rustls::ServerConfig::builder_with_protocol_versions(&[
        &rustls::version::TLS13,
        &rustls::version::TLS12,
    ]);
    let builder = match client_ca {
        Some(roots) => builder.with_client_cert_verifier(
            WebPkiClientVerifier::builder(Arc::new(roots))
                .allow_unauthenticated()
                .build()?,
        ),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
