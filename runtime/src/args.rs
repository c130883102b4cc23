//! The flags every binary shares: where its admin server listens and how it logs. Each binary
//! flattens [`AdminArgs`] into its own `Args` (`#[command(flatten)]`).
//!
//! The flags' spelling differs per binary and is a public interface (the manifests, the chart
//! and users' scripts pass them): each binary's environment variables carry its own prefix
//! (`CRR_WEBHOOK_LOG_FORMAT`, `CRR_NODE_DAEMON_LOG_FORMAT`, …), the operator's address flag is
//! `--admin-addr` where the others' is `--admin-listen`, and the node daemon's address has its own
//! default port. Clap's derive cannot take such names as values, so [`AdminArgs`] takes them
//! as a type: each binary names its spelling with an [`AdminFlagNames`] implementation, and a
//! binary that forgets an environment variable does not compile. The help text and the value
//! types are written once, here.

use std::marker::PhantomData;
use std::net::SocketAddr;

use crate::logging::LogFormat;

/// How one binary spells the shared flags.
pub trait AdminFlagNames {
    /// Long name of the admin address flag.
    const ADDRESS_FLAG: &'static str = "admin-listen";
    /// Environment variable read when the address flag is not given.
    const ADDRESS_ENV: &'static str;
    /// The admin address when neither the flag nor its variable is given.
    const ADDRESS_DEFAULT: &'static str = "0.0.0.0:8080";
    /// Environment variable read when `--log-format` is not given.
    const LOG_FORMAT_ENV: &'static str;
}

/// The admin server's address and the log format, as `Names` spells their flags.
#[derive(Debug, clap::Args)]
pub struct AdminArgs<Names: AdminFlagNames> {
    /// Plain-HTTP address of the admin server (/healthz, /readyz, /metrics).
    #[arg(
        long = Names::ADDRESS_FLAG,
        env = Names::ADDRESS_ENV,
        default_value = Names::ADDRESS_DEFAULT
    )]
    pub address: SocketAddr,

    /// Log format (`RUST_LOG` filters the lines).
    #[arg(long, env = Names::LOG_FORMAT_ENV, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    #[arg(skip)]
    names: PhantomData<Names>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory as _, Parser};

    #[derive(Debug)]
    enum DefaultNames {}

    impl AdminFlagNames for DefaultNames {
        const ADDRESS_ENV: &'static str = "CRR_TEST_ADMIN_LISTEN";
        const LOG_FORMAT_ENV: &'static str = "CRR_TEST_LOG_FORMAT";
    }

    #[derive(Debug)]
    enum OwnNames {}

    impl AdminFlagNames for OwnNames {
        const ADDRESS_FLAG: &'static str = "admin-addr";
        const ADDRESS_ENV: &'static str = "CRR_OTHER_ADMIN_ADDR";
        const ADDRESS_DEFAULT: &'static str = "0.0.0.0:10221";
        const LOG_FORMAT_ENV: &'static str = "CRR_OTHER_LOG_FORMAT";
    }

    #[derive(Debug, Parser)]
    struct Binary<Names: AdminFlagNames> {
        #[command(flatten)]
        admin: AdminArgs<Names>,
        /// A flag of the binary's own.
        #[arg(long)]
        listen: Option<SocketAddr>,
    }

    /// Each shared flag of `Binary<Names>` as [long name, environment variable, default].
    fn spelling<Names: AdminFlagNames>() -> Vec<[String; 3]> {
        let text = |value: Option<&std::ffi::OsStr>| {
            value.map_or_else(String::new, |value| value.to_string_lossy().into_owned())
        };
        Binary::<Names>::command()
            .get_arguments()
            .filter(|arg| ["address", "log_format"].contains(&arg.get_id().as_str()))
            .map(|arg| {
                [
                    arg.get_long().unwrap_or_default().to_owned(),
                    text(arg.get_env()),
                    text(arg.get_default_values().first().map(AsRef::as_ref)),
                ]
            })
            .collect()
    }

    #[test]
    fn the_binary_names_the_flags_and_their_environment_variables() {
        assert_eq!(
            spelling::<DefaultNames>(),
            [
                ["admin-listen", "CRR_TEST_ADMIN_LISTEN", "0.0.0.0:8080"],
                ["log-format", "CRR_TEST_LOG_FORMAT", "text"],
            ]
        );
        assert_eq!(
            spelling::<OwnNames>(),
            [
                ["admin-addr", "CRR_OTHER_ADMIN_ADDR", "0.0.0.0:10221"],
                ["log-format", "CRR_OTHER_LOG_FORMAT", "text"],
            ]
        );
    }

    #[test]
    fn the_shared_flags_parse_beside_the_binarys_own() {
        Binary::<OwnNames>::command().debug_assert();
        let parsed = Binary::<OwnNames>::parse_from([
            "binary",
            "--admin-addr=127.0.0.1:9000",
            "--log-format=json",
            "--listen=0.0.0.0:9443",
        ]);
        assert_eq!(parsed.admin.address, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(parsed.admin.log_format, LogFormat::Json);
        assert_eq!(parsed.listen, Some("0.0.0.0:9443".parse().unwrap()));
        let defaults = Binary::<DefaultNames>::parse_from(["binary"]);
        assert_eq!(defaults.admin.address, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(defaults.admin.log_format, LogFormat::Text);
    }
}
