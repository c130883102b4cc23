//! The serving certificate: generated (a CA and a leaf for the Service's DNS names, with
//! rcgen, `generate`), kept in one Secret that every replica shares (`secret`, the Secret model
//! and its reads and writes), renewed and its CA rolled over there (what is due is
//! `rotation::plan`; `upkeep` runs it), and published as `caBundle` in the webhook
//! configurations and the CRD's conversion (`publish`); or read from files (cert-manager style,
//! never rotated here). Either way the current key pair sits behind
//! [`resolver::CertResolver`], swapped without a restart. `bundle` has what they all share: the
//! PEM texts, the Secret's keys and the error type.

pub mod bundle;
pub mod follow;
pub mod generate;
pub mod publish;
pub mod resolver;
pub mod secret;
pub mod upkeep;

#[cfg(test)]
mod tests;
