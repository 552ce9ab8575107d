//! What each account of a quorum holds, for people: whose lease it carries,
//! as far as the stamps show, and the leader a majority agrees on.

use crate::error::Result;
use crate::store::{LeaseInfo, LeaseState};

use super::votes::majority;

/// One account's lease, as [`QuorumLeaseStore::inspect_each`](super::QuorumLeaseStore::inspect_each)
/// found it.
#[derive(Debug)]
#[non_exhaustive]
pub struct AccountLease {
    /// The account's label: its blob endpoint, or the name given.
    pub account: String,
    /// What inspecting the lease there answered: the state, and the stamp
    /// (holder and epoch) the account carries.
    pub lease: Result<Option<LeaseInfo>>,
    /// Whose lease it is, as far as the stamps of all the accounts show.
    pub holding: Holding,
}

/// Whose lease an account holds. Storage does not show lease ids, so a
/// lease is attributed by the stamp beside it: the holder and epoch of the
/// newest term among the leased accounts, which renewals bring every
/// account they hold up to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Holding {
    /// Leased, under the stamp of the newest term among the leased
    /// accounts: this holder's lease, in the term of this epoch.
    Term {
        /// The term's holder.
        holder: String,
        /// The term's epoch.
        epoch: u64,
    },
    /// Leased, but the stamp there is older than the newest term's, or
    /// there is none: the lease of an earlier holder that has not expired
    /// yet, or the newest holder's on an account not yet brought up to its
    /// stamp. Which one cannot be told.
    Unattributed,
    /// Not leased (free, expired, broken or breaking), or no lease blob.
    NotLeased,
    /// The account did not answer.
    Unknown,
}

impl AccountLease {
    /// The accounts' answers, each with whose lease it holds.
    pub(super) fn attribute(answers: Vec<(String, Result<Option<LeaseInfo>>)>) -> Vec<Self> {
        let leased = |lease: &Result<Option<LeaseInfo>>| match lease {
            Ok(Some(info)) if info.state == LeaseState::Leased => Some(info.clone()),
            _ => None,
        };
        let newest = answers
            .iter()
            .filter_map(|(_, lease)| leased(lease))
            .filter(|info| info.epoch > 0 && info.holder.is_some())
            .max_by_key(|info| info.epoch);
        let newest = newest.as_ref();
        answers
            .into_iter()
            .map(|(account, lease)| {
                let holding = match (&lease, leased(&lease)) {
                    (Err(_), _) => Holding::Unknown,
                    (_, None) => Holding::NotLeased,
                    (_, Some(info)) => match (newest, info.holder) {
                        (Some(n), Some(holder))
                            if n.epoch == info.epoch && n.holder.as_ref() == Some(&holder) =>
                        {
                            Holding::Term {
                                holder,
                                epoch: info.epoch,
                            }
                        }
                        _ => Holding::Unattributed,
                    },
                };
                AccountLease {
                    account,
                    lease,
                    holding,
                }
            })
            .collect()
    }
}

/// The holder and epoch a majority of all `n` accounts holds a lease
/// under: the leader, when one can be named.
pub(super) fn leader(n: usize, each: &[AccountLease]) -> Option<(&str, u64)> {
    let mut terms = each.iter().filter_map(|a| match &a.holding {
        Holding::Term { holder, epoch } => Some((holder.as_str(), *epoch)),
        _ => None,
    });
    let first = terms.next()?;
    // Every account attributed carries the same (newest) stamp.
    let agreeing = 1 + terms.filter(|t| *t == first).count();
    (agreeing >= majority(n)).then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(state: LeaseState, holder: Option<&str>, epoch: u64) -> LeaseInfo {
        let mut info = LeaseInfo::new(state);
        info.holder = holder.map(str::to_owned);
        info.epoch = epoch;
        info
    }

    fn each(leases: Vec<Result<Option<LeaseInfo>>>) -> Vec<AccountLease> {
        let named = leases
            .into_iter()
            .enumerate()
            .map(|(i, lease)| (format!("account-{i}"), lease))
            .collect();
        AccountLease::attribute(named)
    }

    fn holdings(each: &[AccountLease]) -> Vec<Holding> {
        each.iter().map(|a| a.holding.clone()).collect()
    }

    fn term(holder: &str, epoch: u64) -> Holding {
        Holding::Term {
            holder: holder.to_owned(),
            epoch,
        }
    }

    #[test]
    fn a_lease_is_attributed_only_under_the_newest_stamp() {
        use LeaseState::{Available, Leased};
        let accounts = each(vec![
            Ok(Some(info(Leased, Some("b"), 4))),
            Ok(Some(info(Leased, Some("a"), 3))),
            Ok(Some(info(Leased, None, 0))),
            Ok(Some(info(Available, Some("b"), 4))),
            Ok(None),
            Err(crate::Error::transport("inspect", "down")),
        ]);
        assert_eq!(
            holdings(&accounts),
            [
                term("b", 4),
                Holding::Unattributed,
                Holding::Unattributed,
                Holding::NotLeased,
                Holding::NotLeased,
                Holding::Unknown,
            ]
        );
        assert_eq!(leader(6, &accounts), None, "one of six is no majority");
        let accounts = each(vec![
            Ok(Some(info(Leased, Some("b"), 4))),
            Ok(Some(info(Leased, Some("b"), 4))),
            Ok(Some(info(Leased, Some("a"), 3))),
        ]);
        assert_eq!(leader(3, &accounts), Some(("b", 4)));
    }
}
