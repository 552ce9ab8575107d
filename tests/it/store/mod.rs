//! The stores: the contract's suite on each, every lease call on Azurite,
//! collection, the epoch's floor, bad input and first contact, bounded calls,
//! and what a caller hands the Azure backends (client options, transport).

mod bad_input;
#[cfg(feature = "official")] // the client options are the official backend's
mod client_options;
mod collect;
#[cfg(feature = "testing")]
mod conformance;
#[cfg(feature = "testing")]
mod conformance_minimal;
// The deletes go through the official SDK's own client.
#[cfg(all(feature = "testing", feature = "official"))]
mod epoch_floor;
#[cfg(feature = "testing")]
mod first_contact;
mod lease_manager;
#[cfg(feature = "official")]
mod official_backend;
#[cfg(all(feature = "testing", feature = "official"))]
// rustls is the official backend's dependency
mod process_globals;
#[cfg(feature = "testing")]
mod silent_endpoint;
#[cfg(feature = "official")] // the transport is the official backend's
mod transport;
