//! A certificate's validity (`notBefore`, `notAfter`), read from its DER: the one field of X.509
//! the webhook needs (for `crr_webhook_certificate_expiry_timestamp_seconds`, and for the
//! rotation's decisions and the issuer name of its CAs, see `certs`). It walks the few DER
//! elements in front of the validity (RFC 5280 §4.1) and decodes the time; it checks no
//! signature and no other field, and trusts nothing it reads beyond that: a malformed
//! certificate is an error, never a panic.
//!
//! A full X.509 parser (x509-parser, behind an rcgen feature) would bring four crates for one
//! field. The fuzz target `certificate_validity` (fuzz/README.md) holds it to what rcgen signs,
//! cut short and corrupted.

use rustls::pki_types::pem::PemObject as _;

/// When the certificates of a bundle expire (`notAfter`, Unix seconds): `None` for a
/// certificate that is absent or unreadable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expiry {
    /// The serving certificate (the first of `tls.crt`).
    pub serving: Option<i64>,
    /// The CA: of the certificates in `ca.crt`, the one that expires last (while two CAs are
    /// bundled during a rollover, the new one is the one that matters).
    pub ca: Option<i64>,
}

/// Reads when the first certificate of `serving_pem` and the longest-lived of `ca_pem` expire;
/// what cannot be read is logged and left `None`.
pub fn expiry(serving_pem: &str, ca_pem: &str) -> Expiry {
    let read = |what: &str, pem: &str| -> Vec<i64> {
        rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
            .filter_map(|der| {
                let result = der
                    .map_err(|error| error.to_string())
                    .and_then(|der| not_after(&der).map_err(|error| error.to_string()));
                result
                    .inspect_err(|error| tracing::warn!(certificate = what, %error, "reading the certificate's expiry"))
                    .ok()
            })
            .collect()
    };
    Expiry {
        serving: read("serving", serving_pem).first().copied(),
        ca: read("ca", ca_pem).into_iter().max(),
    }
}

/// Why a certificate's expiry could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpiryError {
    /// The bytes are not the DER structure of a certificate (up to its validity).
    #[error("not a DER certificate: {0}")]
    Malformed(&'static str),
    /// The notAfter time is not a UTCTime or GeneralizedTime that names a real instant.
    #[error("the certificate's notAfter {0:?} is not a valid time")]
    BadTime(String),
}

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
/// `[0] EXPLICIT Version` of a v2/v3 certificate.
const VERSION: u8 = 0xA0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// One DER element: its tag and contents, and what follows it.
struct Element<'a> {
    tag: u8,
    contents: &'a [u8],
    rest: &'a [u8],
}

/// Reads one element (single-byte tags; definite lengths of up to four bytes, as DER has).
fn element(input: &[u8]) -> Result<Element<'_>, ExpiryError> {
    let (&tag, input) = input
        .split_first()
        .ok_or(ExpiryError::Malformed("truncated"))?;
    let (&first, input) = input
        .split_first()
        .ok_or(ExpiryError::Malformed("truncated length"))?;
    let (length, input) = if first < 0x80 {
        (usize::from(first), input)
    } else {
        let count = usize::from(first & 0x7F);
        if count == 0 || count > 4 || input.len() < count {
            return Err(ExpiryError::Malformed("unsupported length"));
        }
        let (bytes, input) = input.split_at(count);
        let length = bytes
            .iter()
            .fold(0usize, |length, byte| (length << 8) | usize::from(*byte));
        (length, input)
    };
    if input.len() < length {
        return Err(ExpiryError::Malformed("element longer than the input"));
    }
    let (contents, rest) = input.split_at(length);
    Ok(Element {
        tag,
        contents,
        rest,
    })
}

/// Reads one element that must have `tag`.
fn expect<'a>(input: &'a [u8], tag: u8, what: &'static str) -> Result<Element<'a>, ExpiryError> {
    let found = element(input)?;
    if found.tag != tag {
        return Err(ExpiryError::Malformed(what));
    }
    Ok(found)
}

/// The certificate's notAfter as Unix seconds.
pub fn not_after(der: &[u8]) -> Result<i64, ExpiryError> {
    validity(der).map(|(_, not_after)| not_after)
}

/// The certificate's notBefore and notAfter as Unix seconds.
pub fn validity(der: &[u8]) -> Result<(i64, i64), ExpiryError> {
    let certificate = expect(der, SEQUENCE, "no certificate SEQUENCE")?;
    let tbs = expect(certificate.contents, SEQUENCE, "no tbsCertificate SEQUENCE")?;
    let mut fields = tbs.contents;
    if fields.first() == Some(&VERSION) {
        fields = element(fields)?.rest;
    }
    let serial = expect(fields, INTEGER, "no serialNumber")?;
    let signature = expect(serial.rest, SEQUENCE, "no signature algorithm")?;
    let issuer = expect(signature.rest, SEQUENCE, "no issuer")?;
    let validity = expect(issuer.rest, SEQUENCE, "no validity")?;
    let not_before = element(validity.contents)?;
    let not_after = element(not_before.rest)?;
    Ok((
        unix_seconds(not_before.tag, not_before.contents)?,
        unix_seconds(not_after.tag, not_after.contents)?,
    ))
}

/// A DER `UTCTime` (`YYMMDDHHMMSSZ`, years 1950–2049) or `GeneralizedTime` (`YYYYMMDDHHMMSSZ`)
/// as Unix seconds.
fn unix_seconds(tag: u8, text: &[u8]) -> Result<i64, ExpiryError> {
    let bad = || ExpiryError::BadTime(String::from_utf8_lossy(text).into_owned());
    let digits = text.strip_suffix(b"Z").ok_or_else(bad)?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let number = |range: std::ops::Range<usize>| -> Result<i32, ExpiryError> {
        digits
            .get(range)
            .ok_or_else(bad)?
            .iter()
            .try_fold(0i32, |value, digit| {
                value
                    .checked_mul(10)
                    .and_then(|value| value.checked_add(i32::from(digit - b'0')))
            })
            .ok_or_else(bad)
    };
    let (year, rest) = match (tag, digits.len()) {
        (UTC_TIME, 12) => {
            let year = number(0..2)?;
            (if year >= 50 { 1900 + year } else { 2000 + year }, 2)
        }
        (GENERALIZED_TIME, 14) => (number(0..4)?, 4),
        _ => return Err(bad()),
    };
    let field = |index: usize| number(rest + 2 * index..rest + 2 * index + 2);
    let small = |value: i32| u8::try_from(value).map_err(|_| bad());
    let month = time::Month::try_from(small(field(0)?)?).map_err(|_| bad())?;
    let date = time::Date::from_calendar_date(year, month, small(field(1)?)?).map_err(|_| bad())?;
    let at = date
        .with_hms(small(field(2)?)?, small(field(3)?)?, small(field(4)?)?)
        .map_err(|_| bad())?;
    Ok(at.assume_utc().unix_timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, KeyPair};

    fn certificate_expiring(at: time::OffsetDateTime) -> Vec<u8> {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(vec!["crr-webhook".to_owned()]).expect("params");
        params.not_before = time::OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        params.not_after = at;
        params
            .self_signed(&key)
            .expect("certificate")
            .der()
            .to_vec()
    }

    #[test]
    fn reads_not_after_in_both_time_encodings() {
        // Before 2050 a certificate carries UTCTime, from 2050 on GeneralizedTime.
        for unix in [1_800_000_000, 2_600_000_000, 4_102_444_800] {
            let at = time::OffsetDateTime::from_unix_timestamp(unix).unwrap();
            assert_eq!(not_after(&certificate_expiring(at)), Ok(unix), "{at}");
        }
    }

    #[test]
    fn reads_not_before_too() {
        let at = time::OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        assert_eq!(
            validity(&certificate_expiring(at)),
            Ok((1_700_000_000, 1_800_000_000))
        );
    }

    #[test]
    fn decodes_utc_time_centuries_as_rfc_5280_says() {
        assert_eq!(unix_seconds(UTC_TIME, b"491231235959Z"), Ok(2_524_607_999));
        assert_eq!(unix_seconds(UTC_TIME, b"700101000000Z"), Ok(0));
        assert_eq!(
            unix_seconds(GENERALIZED_TIME, b"20500101000000Z"),
            Ok(2_524_608_000)
        );
    }

    #[test]
    fn refuses_bad_times() {
        for (tag, text) in [
            (UTC_TIME, &b"701301000000Z"[..]),
            (UTC_TIME, b"700132000000Z"),
            (UTC_TIME, b"700101250000Z"),
            (UTC_TIME, b"700101000000"),
            (UTC_TIME, b"7001010000Z"),
            (GENERALIZED_TIME, b"700101000000Z"),
            (UTC_TIME, b"70010100000+Z"),
            (0x04, b"700101000000Z"),
        ] {
            assert!(unix_seconds(tag, text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let good =
            certificate_expiring(time::OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap());
        for cut in 0..good.len() {
            assert!(not_after(&good[..cut]).is_err(), "cut at {cut}");
        }
        assert!(not_after(b"not a certificate").is_err());
        assert!(not_after(&[0x30, 0x84, 0xFF, 0xFF, 0xFF, 0xFF]).is_err());
        assert!(not_after(&[0x30, 0x85, 1, 1, 1, 1, 1]).is_err());
    }
}
