//! The process's one rustls crypto provider (ring), installed at the top of every `main`, before
//! the API client or a TLS server is built.

/// Installs ring as the process-wide rustls provider. Idempotent: when a provider is already
/// installed (a second call, or a test harness), that one stays.
pub fn install_crypto_provider() {
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        tracing::debug!("a rustls crypto provider was already installed; keeping it");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installing_twice_keeps_one_provider() {
        install_crypto_provider();
        install_crypto_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
