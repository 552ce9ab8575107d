//! Time as every model counts it, in ticks: when an account expires a lease,
//! and the crate's deadline rule read on the slowest clock the drift bound
//! allows. Both extremes are taken, since they are the orders that bring two
//! terms closest.

/// When an account expires a lease granted or renewed at tick `t`: its
/// clock may run `drift` ahead, so the lease lasts `lease − drift`.
pub(crate) fn expires(t: u8, lease: u8, drift: u8) -> u8 {
    t + lease - drift
}

/// The real tick by which a term's task has stopped, for a call sent at
/// `sent`: the crate's rule, sent + D − margin on the instance's clock,
/// which may run `drift` behind real time.
pub(crate) fn deadline(sent: u8, lease: u8, margin: u8, drift: u8) -> u8 {
    sent + lease - margin + drift
}
