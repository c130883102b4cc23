//! `certificate_validity`: the webhook's reader of a certificate's validity
//! (`crr_webhook::x509::validity`), a hand-written walk of the DER in front of `notBefore` and
//! `notAfter`.
//!
//! Oracles besides "never panics" (on the raw bytes as a certificate, and on a real certificate
//! cut short or with bytes changed): a certificate rcgen signs with any validity from 1950 to
//! 9999 reads back exactly those two instants, in UTCTime (before 2050) and GeneralizedTime
//! (from 2050) alike; and whatever it reads from any bytes is an instant of the years 0000 to
//! 9999 (a GeneralizedTime may name any four-digit year: the first run found year 96).

use arbitrary::{Arbitrary, Unstructured};
use crr_webhook::x509;

/// 1950-01-01T00:00:00Z and 9999-12-31T23:59:59Z: the validity the certificates signed here
/// get (UTCTime says 1950 to 2049, GeneralizedTime the rest, as RFC 5280 has them).
const EARLIEST: i64 = -631_152_000;
const LATEST: i64 = 253_402_300_799;
/// 0000-01-01T00:00:00Z: a GeneralizedTime can name any four-digit year, RFC 5280's rule or not.
const EARLIEST_READABLE: i64 = -62_167_219_200;

/// One run: a certificate's validity, what it names, and what is done to its bytes afterwards.
#[derive(Arbitrary, Clone, Debug)]
pub struct Input {
    pub not_before: i64,
    pub not_after: i64,
    pub is_ca: bool,
    pub names: Vec<String>,
    /// Cut the DER to this length (modulo its length), if any.
    pub cut: Option<u16>,
    /// Bytes to overwrite: (offset modulo the length, value).
    pub changes: Vec<(u16, u8)>,
}

fn within(seconds: i64) -> i64 {
    EARLIEST + seconds.rem_euclid(LATEST - EARLIEST + 1)
}

fn offset_date_time(seconds: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(seconds).expect("within 1950..=9999")
}

/// What `validity` reads, if anything, is an instant UTCTime or GeneralizedTime can name.
fn check_read(der: &[u8]) {
    if let Ok((not_before, not_after)) = x509::validity(der) {
        for seconds in [not_before, not_after] {
            assert!(
                (EARLIEST_READABLE..=LATEST).contains(&seconds),
                "read {seconds}, outside the years 0000..=9999"
            );
        }
        assert_eq!(x509::not_after(der).ok(), Some(not_after));
    }
}

fn check_signed(input: &Input) {
    let (not_before, not_after) = (within(input.not_before), within(input.not_after));
    let names: Vec<String> = input
        .names
        .iter()
        .take(3)
        .map(|name| {
            let name: String = name
                .chars()
                .filter(|c| c.is_ascii_alphanumeric())
                .take(20)
                .collect::<String>()
                .to_ascii_lowercase();
            if name.is_empty() {
                "crr".to_owned()
            } else {
                name
            }
        })
        .collect();
    let mut params = rcgen::CertificateParams::new(names).expect("plain DNS names");
    params.not_before = offset_date_time(not_before);
    params.not_after = offset_date_time(not_after);
    if input.is_ca {
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    }
    let key = rcgen::KeyPair::generate().expect("a key");
    let der = params
        .self_signed(&key)
        .expect("a certificate")
        .der()
        .to_vec();
    assert_eq!(
        x509::validity(&der),
        Ok((not_before, not_after)),
        "the validity rcgen wrote"
    );
    let mut changed = der.clone();
    if let Some(cut) = input.cut {
        changed.truncate(usize::from(cut) % der.len());
    }
    for (offset, value) in &input.changes {
        if !changed.is_empty() {
            let at = usize::from(*offset) % changed.len();
            changed[at] = *value;
        }
    }
    check_read(&changed);
}

/// The fuzz target's entry.
pub fn run(bytes: &[u8]) {
    check_read(bytes);
    if let Ok(input) = Input::arbitrary(&mut Unstructured::new(bytes)) {
        check_signed(&input);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_time_encodings_read_back() {
        for (not_before, not_after) in [
            (0, 1),
            (EARLIEST, LATEST),
            (2_524_607_999, 2_524_608_000), // 2049-12-31T23:59:59Z, 2050-01-01T00:00:00Z
        ] {
            check_signed(&Input {
                not_before,
                not_after,
                is_ca: true,
                names: vec!["web".to_owned()],
                cut: Some(100),
                changes: vec![(7, 0xff)],
            });
        }
    }
}
