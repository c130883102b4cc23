//! Hands rustls the current serving key pair, swapped without a restart.

use std::sync::{Arc, RwLock};

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::bundle::{Bundle, CertError};
use crate::metrics::CertificateExpiry;

/// The rustls form of a bundle.
pub fn certified_key(bundle: &Bundle) -> Result<CertifiedKey, CertError> {
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(bundle.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|error| CertError::Pem(error.to_string()))?;
    if chain.is_empty() {
        return Err(CertError::Pem("no certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(bundle.key_pem.as_bytes())
        .map_err(|error| CertError::Pem(error.to_string()))?;
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(CertError::Key)?;
    Ok(CertifiedKey::new(chain, signing))
}

/// Hands rustls the current key pair; [`CertResolver::set`] swaps it for new connections. Each
/// bundle it takes (the first and every swap) sets the certificate expiry metric.
#[derive(Debug)]
pub struct CertResolver {
    current: RwLock<(Arc<CertifiedKey>, Bundle)>,
    expiry: CertificateExpiry,
}

impl CertResolver {
    /// A resolver whose certificates' expiry is reported nowhere (tests).
    pub fn new(bundle: Bundle) -> Result<Arc<Self>, CertError> {
        Self::reporting(bundle, CertificateExpiry::default())
    }

    /// A resolver that reports the expiry of the certificates in use to `expiry`.
    pub fn reporting(bundle: Bundle, expiry: CertificateExpiry) -> Result<Arc<Self>, CertError> {
        let key = Arc::new(certified_key(&bundle)?);
        expiry.set(bundle.expiry());
        Ok(Arc::new(Self {
            current: RwLock::new((key, bundle)),
            expiry,
        }))
    }

    /// Installs `bundle` when it differs from the current one; returns whether it did.
    pub fn set(&self, bundle: Bundle) -> Result<bool, CertError> {
        if self.bundle() == bundle {
            return Ok(false);
        }
        let key = Arc::new(certified_key(&bundle)?);
        let expiry = bundle.expiry();
        let mut current = self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *current = (key, bundle);
        drop(current);
        self.expiry.set(expiry);
        Ok(true)
    }

    pub fn bundle(&self) -> Bundle {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .1
            .clone()
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0
                .clone(),
        )
    }
}
