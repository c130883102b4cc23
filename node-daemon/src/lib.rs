//! The node daemon: recreates the containers a ContainerRecreateRequest names, through CRI.
