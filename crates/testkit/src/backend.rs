//! The storage backend the tests run on: the one `BLOB_MUTEX_BACKEND`
//! names (`official` when unset), for the settings a test makes and for
//! every worker process it starts. `scripts/test` runs the storage tests
//! once per backend: one row more, the same tests.

pub use blob_mutex::azure::Backend;
use blob_mutex::BlobSettings;

use super::sas;

/// The backend of this run.
pub fn current() -> Backend {
    Backend::from_env().expect("BLOB_MUTEX_BACKEND names a backend")
}

/// An empty cluster whose workers reach storage through this run's backend.
pub fn cluster() -> super::workers::Cluster {
    super::workers::Cluster::on_backend(current())
}

/// The connection string of the development account at `endpoint`: its
/// key, which every backend takes.
pub fn connection_string(endpoint: &str) -> String {
    super::azurite::connection_string(endpoint)
}

/// An account SAS with everything the crate does: containers and objects,
/// read, write, delete, list, add, create.
pub fn account_sas() -> String {
    sas::account_sas("co", "rwdlac")
}

/// Settings for `container`/`blob` at `endpoint` from a container URL
/// with an account SAS, as a user with nothing but the URL makes them, on
/// this run's backend.
pub fn container_url_settings(endpoint: &str, container: &str, blob: &str) -> BlobSettings {
    BlobSettings::from_container_url(&format!("{endpoint}/{container}?{}", account_sas()), blob)
        .expect("valid settings from a container URL")
        .with_backend(current())
}

/// What a test asks of a backend.
pub trait BackendExt {
    /// An empty cluster whose workers reach storage through this backend.
    fn cluster(self) -> super::workers::Cluster;
    /// The connection string of the development account at `endpoint`.
    fn connection_string(self, endpoint: &str) -> String;
}

impl BackendExt for Backend {
    fn cluster(self) -> super::workers::Cluster {
        super::workers::Cluster::on_backend(self)
    }

    fn connection_string(self, endpoint: &str) -> String {
        connection_string(endpoint)
    }
}
