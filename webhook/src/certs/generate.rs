//! Key and certificate generation (rcgen): a CA, and a serving certificate it signs for the
//! Service's DNS names.

use std::fmt;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use super::bundle::{Bundle, CertError};
use crate::rotation::Policy;

/// The DNS names a Service `namespace/name` is called by.
pub fn service_dns_names(namespace: &str, name: &str) -> Vec<String> {
    vec![
        name.to_owned(),
        format!("{name}.{namespace}"),
        format!("{name}.{namespace}.svc"),
        format!("{name}.{namespace}.svc.cluster.local"),
    ]
}

/// A CA's certificate and private key (PEM).
#[derive(Clone, PartialEq, Eq)]
pub struct CaPair {
    pub cert_pem: String,
    pub key_pem: String,
}

impl fmt::Debug for CaPair {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_struct("CaPair").finish_non_exhaustive()
    }
}

/// The subject of a CA crr made: unique per CA (two CAs sit in one bundle during a rollover),
/// and derived from the certificate's own notBefore, so that the issuer of a new serving
/// certificate can be rebuilt from the stored certificate without an X.509 parser. Kubernetes
/// names its self-signed CAs the same way (`<host>-ca@<unix seconds>`).
fn ca_common_name(not_before: i64) -> String {
    format!("crr-webhook-ca@{not_before}")
}

fn offset_time(unix: i64) -> Result<time::OffsetDateTime, CertError> {
    time::OffsetDateTime::from_unix_timestamp(unix).map_err(|_| CertError::TimeOutOfRange(unix))
}

/// The parameters of a crr CA valid from `not_before` to `not_after`.
fn ca_params(not_before: i64, not_after: i64) -> Result<rcgen::CertificateParams, CertError> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyUsagePurpose};
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, ca_common_name(not_before));
    // Path length 0: the CA signs serving certificates only, never another CA.
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = offset_time(not_before)?;
    params.not_after = offset_time(not_after)?;
    Ok(params)
}

/// A new CA, valid for `validity` seconds from `now` (backdated, see [`Policy::backdate`]).
pub fn new_ca(now: i64, validity: i64) -> Result<CaPair, CertError> {
    let key = rcgen::KeyPair::generate()?;
    let params = ca_params(now - Policy::backdate(validity), now + validity)?;
    let cert = params.self_signed(&key)?;
    Ok(CaPair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

pub(super) fn first_der(pem: &str) -> Option<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem.as_bytes()).find_map(Result::ok)
}

/// A serving certificate for `dns_names` (and 127.0.0.1) signed by `ca`, valid for `validity`
/// seconds from `now` but never beyond the CA; returns its PEM and its key's PEM.
pub fn issue_serving(
    ca: &CaPair,
    dns_names: &[String],
    now: i64,
    validity: i64,
) -> Result<(String, String), CertError> {
    use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose};
    let ca_der =
        first_der(&ca.cert_pem).ok_or_else(|| CertError::Pem("no CA certificate".into()))?;
    let (ca_not_before, ca_not_after) = crate::x509::validity(&ca_der)?;
    let ca_key = KeyPair::from_pem(&ca.key_pem)?;
    let issuer = rcgen::Issuer::new(ca_params(ca_not_before, ca_not_after)?, ca_key);

    let leaf_key = KeyPair::generate()?;
    let mut names = dns_names.to_vec();
    names.push("127.0.0.1".to_owned());
    let mut params = CertificateParams::new(names)?;
    params.distinguished_name.push(
        DnType::CommonName,
        dns_names.first().cloned().unwrap_or_default(),
    );
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = offset_time((now - Policy::backdate(validity)).max(ca_not_before))?;
    params.not_after = offset_time((now + validity).min(ca_not_after))?;
    let leaf = params.signed_by(&leaf_key, &issuer)?;
    Ok((leaf.pem(), leaf_key.serialize_pem()))
}
/// A new CA and a serving certificate it signs for `dns_names`, valid from `now` for the
/// lifetimes of `policy`: the CA, and the certificate's and its key's PEM.
pub fn new_ca_and_serving(
    dns_names: &[String],
    now: i64,
    policy: &Policy,
) -> Result<(CaPair, String, String), CertError> {
    let ca = new_ca(now, policy.ca_validity)?;
    let (cert_pem, key_pem) = issue_serving(&ca, dns_names, now, policy.serving_validity)?;
    Ok((ca, cert_pem, key_pem))
}

/// A new CA and a serving certificate it signs for `dns_names` (and 127.0.0.1), with the
/// lifetimes of [`Policy::DEFAULT`].
pub fn generate(dns_names: &[String]) -> Result<Bundle, CertError> {
    let (ca, cert_pem, key_pem) = new_ca_and_serving(dns_names, unix_now(), &Policy::DEFAULT)?;
    Ok(Bundle {
        cert_pem,
        key_pem,
        ca_pem: ca.cert_pem,
    })
}

/// Now, in Unix seconds.
pub fn unix_now() -> i64 {
    time_now().unix_timestamp()
}

pub(super) fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}
