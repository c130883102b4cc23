//! Reaching the cluster as kubectl does: `--kubeconfig`, else `$KUBECONFIG` (several files
//! merged), else `~/.kube/config`, else in-cluster; `--context` picks a context; the namespace is
//! `-n`, else the context's, else `default`.

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::cli::Connection;
use crate::error::Error;

/// The client and the namespace to work in.
pub async fn connect(connection: &Connection) -> Result<(Client, String), Error> {
    let options = KubeConfigOptions {
        context: connection.context.clone(),
        ..Default::default()
    };
    let config = match (&connection.kubeconfig, &connection.context) {
        (Some(path), _) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|error| Error::Kubeconfig(format!("{}: {error}", path.display())))?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|error| Error::Kubeconfig(error.to_string()))?
        }
        (None, Some(_)) => Config::from_kubeconfig(&options)
            .await
            .map_err(|error| Error::Kubeconfig(error.to_string()))?,
        (None, None) => Config::infer()
            .await
            .map_err(|error| Error::Kubeconfig(error.to_string()))?,
    };
    let namespace = connection
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config).map_err(|error| Error::Connection(error.to_string()))?;
    Ok((client, namespace))
}
