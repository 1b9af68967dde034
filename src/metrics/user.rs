//! The transfers the user asked for, counted apart from the fallback's.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::key::{DispatchKey, NUM_KEYS};

/// The transfers a user asked for, per backend, apart from the fallback's: values read to
/// the host (`bf.Tensor.numpy()`, `__array__`, DLPack, a 0-d tensor made a Python number) and
/// host data put on a device (`Backend.tensor`, `asarray` of host data). No kernel could
/// avoid them, so they are not the fallback's and do not rank in the report.
///
/// ```
/// use boxfall::{metrics, DispatchKey};
/// metrics::record_user_transfer(DispatchKey::NATIVE, metrics::Direction::ToHost, 8);
/// let t = metrics::user_transfers();
/// let (_, native) = t.iter().find(|(k, _)| *k == DispatchKey::NATIVE).unwrap();
/// assert!(native.to_host >= 1 && native.bytes_to_host >= 8);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserTransfers {
    /// Reads of a device tensor's values to the host.
    pub to_host: u64,
    /// Their bytes.
    pub bytes_to_host: u64,
    /// Host data put on the device.
    pub to_device: u64,
    /// Their bytes.
    pub bytes_to_device: u64,
    /// Host-only values (residency: a CPU fallback's result left on the host) put on the
    /// device when it needed them (a kernel of the backend, the payload read, the user's ask).
    pub materialized: u64,
    /// Their bytes.
    pub bytes_materialized: u64,
}

/// Which way a user's transfer went.
///
/// ```
/// assert_ne!(boxfall::metrics::Direction::ToHost, boxfall::metrics::Direction::ToDevice);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the device to the host.
    ToHost,
    /// From the host to the device.
    ToDevice,
    /// A host-only tensor's values to the device, when it first needed them
    /// (`boxfall::resident::materialize`).
    Materialized,
}

/// Per key index: calls and bytes to the host, calls and bytes to the device. Shared atomics:
/// a user's transfer goes through a backend's hooks, which cost far more than a locked add.
static USER: [[AtomicU64; 6]; NUM_KEYS] = [const { [const { AtomicU64::new(0) }; 6] }; NUM_KEYS];

/// Counts one transfer the user asked for, of `bytes`, on `backend`'s device.
///
/// ```
/// use boxfall::{metrics, DispatchKey};
/// metrics::record_user_transfer(DispatchKey::NATIVE, metrics::Direction::ToDevice, 16);
/// assert!(metrics::user_transfers().iter().any(|(k, t)| *k == DispatchKey::NATIVE && t.to_device >= 1));
/// ```
pub fn record_user_transfer(backend: DispatchKey, direction: Direction, bytes: u64) {
    if !super::counting() {
        return;
    }
    let Some(c) = USER.get(backend.index()) else {
        return;
    };
    let at = match direction {
        Direction::ToHost => 0,
        Direction::ToDevice => 2,
        Direction::Materialized => 4,
    };
    c[at].fetch_add(1, Relaxed);
    c[at + 1].fetch_add(bytes, Relaxed);
}

/// The user's transfers since the last reset, for each backend that had one.
///
/// ```
/// assert!(boxfall::metrics::user_transfers().iter().all(|(_, t)| t.to_host + t.to_device + t.materialized > 0));
/// ```
pub fn user_transfers() -> Vec<(DispatchKey, UserTransfers)> {
    USER.iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let [to_host, bytes_to_host, to_device, bytes_to_device, materialized, bytes_materialized] =
                c.each_ref().map(|a| a.load(Relaxed));
            let t = UserTransfers {
                to_host,
                bytes_to_host,
                to_device,
                bytes_to_device,
                materialized,
                bytes_materialized,
            };
            let key = DispatchKey::from_index(i)?;
            (to_host + to_device + materialized > 0).then_some((key, t))
        })
        .collect()
}

/// Zeroes the user's transfers (with the operators' counters, `Dispatcher::reset_metrics`).
///
/// ```
/// boxfall::metrics::reset_user_transfers();
/// ```
pub fn reset_user_transfers() {
    for c in &USER {
        for a in c {
            a.store(0, Relaxed);
        }
    }
}
