//! `blob-mutex partitions`: show who owns which partition of a lease set.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Result;
use blob_mutex::{store::LeaseInfo, store::LeaseSetStore, store::LeaseState, BlobLeaseSet};

use crate::cli::PartitionsArgs;
use crate::exit;

/// The prefixes of the set's blobs (see the library's `lease_set` module).
const PARTITIONS: &str = "partitions/";
const MEMBERS: &str = "members/";

/// Runs `blob-mutex partitions` and returns its exit code.
pub(crate) async fn partitions(args: PartitionsArgs) -> Result<u8> {
    let (partitions, members) = match args.target.quorum_store()? {
        Some(quorum) => lists(&quorum).await?,
        None => lists(&args.target.store()?).await?,
    };
    let view = View::new(
        &args.target.container,
        &args.target.set,
        partitions,
        &members,
    );
    if args.json {
        println!("{}", view.json());
    } else {
        print!("{}", view.table());
    }
    Ok(if view.exists {
        exit::OK
    } else {
        exit::FREE_OR_NOT_ACQUIRED
    })
}

/// The set's partitions and members, as `store` lists them.
async fn lists(
    store: &impl LeaseSetStore,
) -> Result<(Vec<(String, LeaseInfo)>, Vec<(String, LeaseInfo)>)> {
    Ok((store.list(PARTITIONS).await?, store.list(MEMBERS).await?))
}

/// One partition as listed.
struct Partition {
    name: String,
    state: LeaseState,
    /// The `holder` metadata while the partition is leased.
    owner: Option<String>,
    /// The epoch of the partition's last term, 0 before any.
    epoch: u64,
    /// When the last term began.
    acquired_at: Option<String>,
    /// What the owner advertised with its stamp, while leased.
    advertised: Option<String>,
}

/// What `partitions` shows, for people and for scripts.
struct View<'a> {
    container: &'a str,
    set: &'a str,
    /// Something was listed under the set.
    exists: bool,
    /// By name.
    partitions: Vec<Partition>,
    /// The live members (holding their member lease), by name, with how
    /// many partitions each owns.
    members: BTreeMap<String, usize>,
}

impl<'a> View<'a> {
    fn new(
        container: &'a str,
        set: &'a str,
        partitions: Vec<(String, LeaseInfo)>,
        members: &[(String, LeaseInfo)],
    ) -> Self {
        let exists = !partitions.is_empty() || !members.is_empty();
        let mut partitions: Vec<Partition> = partitions
            .into_iter()
            .filter_map(|(name, info)| {
                let name = name.strip_prefix(PARTITIONS)?.to_owned();
                let leased = info.state == LeaseState::Leased;
                Some(Partition {
                    name,
                    state: info.state,
                    owner: info.holder.filter(|_| leased),
                    epoch: info.epoch,
                    acquired_at: info.acquired_at.as_deref().map(crate::status::millis),
                    advertised: info.advertised.filter(|_| leased),
                })
            })
            .collect();
        partitions.sort_by(|a, b| a.name.cmp(&b.name));
        // The members the set itself counts: a foreign blob under members/
        // is none.
        let mut members: BTreeMap<String, usize> = members
            .iter()
            .filter_map(|(name, info)| Some((BlobLeaseSet::live_member(name, info)?.to_owned(), 0)))
            .collect();
        for owner in partitions.iter().filter_map(|p| p.owner.as_deref()) {
            if let Some(owns) = members.get_mut(owner) {
                *owns += 1;
            }
        }
        View {
            container,
            set,
            exists,
            partitions,
            members,
        }
    }

    /// A summary, then a table of the partitions and one of the live members.
    fn table(&self) -> String {
        let leased = self.partitions.iter().filter(|p| p.owner.is_some()).count();
        let mut out = String::new();
        let _ = writeln!(out, "{:<12} {}/{}", "set", self.container, self.set);
        if !self.exists {
            let _ = writeln!(out, "{:<12} none (no blobs in the set)", "partitions");
            return out;
        }
        let _ = writeln!(
            out,
            "{:<12} {} ({leased} leased)",
            "partitions",
            self.partitions.len()
        );
        let _ = writeln!(out, "{:<12} {} live", "members", self.members.len());
        if !self.partitions.is_empty() {
            out.push('\n');
            let mut rows = vec![[
                "PARTITION",
                "STATE",
                "OWNER",
                "EPOCH",
                "ACQUIRED AT",
                "ADVERTISED",
            ]
            .map(str::to_owned)];
            rows.extend(self.partitions.iter().map(|p| {
                [
                    p.name.clone(),
                    p.state.as_str().to_owned(),
                    p.owner.clone().unwrap_or_else(|| "-".to_owned()),
                    p.epoch.to_string(),
                    p.acquired_at.clone().unwrap_or_else(|| "-".to_owned()),
                    p.advertised.clone().unwrap_or_else(|| "-".to_owned()),
                ]
            }));
            out.push_str(&columns(&rows));
        }
        if !self.members.is_empty() {
            out.push('\n');
            let mut rows = vec![["MEMBER", "OWNS"].map(str::to_owned)];
            rows.extend(
                self.members
                    .iter()
                    .map(|(holder, owns)| [holder.clone(), owns.to_string()]),
            );
            out.push_str(&columns(&rows));
        }
        out
    }

    /// One JSON object on one line.
    fn json(&self) -> String {
        let json = SetJson {
            container: self.container,
            set: self.set,
            exists: self.exists,
            partitions: self
                .partitions
                .iter()
                .map(|p| PartitionJson {
                    name: &p.name,
                    state: p.state.as_str(),
                    owner: p.owner.as_deref(),
                    epoch: p.epoch,
                    acquired_at: p.acquired_at.as_deref(),
                    advertised: p.advertised.as_deref(),
                })
                .collect(),
            members: self
                .members
                .iter()
                .map(|(holder, owns)| MemberJson {
                    holder,
                    owns: *owns,
                })
                .collect(),
        };
        serde_json::to_string(&json).unwrap_or_default()
    }
}

/// `partitions --json`, in its fields' order.
#[derive(serde::Serialize)]
struct SetJson<'a> {
    container: &'a str,
    set: &'a str,
    exists: bool,
    partitions: Vec<PartitionJson<'a>>,
    members: Vec<MemberJson<'a>>,
}

/// A partition of `partitions --json`.
#[derive(serde::Serialize)]
struct PartitionJson<'a> {
    name: &'a str,
    state: &'a str,
    owner: Option<&'a str>,
    epoch: u64,
    acquired_at: Option<&'a str>,
    advertised: Option<&'a str>,
}

/// A live member of `partitions --json`.
#[derive(serde::Serialize)]
struct MemberJson<'a> {
    holder: &'a str,
    owns: usize,
}

/// Rows as left-aligned columns two spaces apart, with no trailing spaces.
fn columns<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(widths) {
            let _ = write!(line, "{cell:<width$}  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(state: LeaseState, holder: &str, epoch: u64) -> LeaseInfo {
        let mut info = LeaseInfo::new(state);
        info.holder = Some(holder.to_owned());
        info.advertised = (holder == "a").then(|| "10.0.0.1:80".to_owned());
        info.epoch = epoch;
        info.acquired_at = Some("2025-01-14T02:00:03.512Z".to_owned());
        info
    }

    fn example() -> View<'static> {
        View::new(
            "leases",
            "ingest",
            vec![
                ("partitions/p2".to_owned(), info(LeaseState::Leased, "b", 4)),
                ("partitions/p1".to_owned(), info(LeaseState::Leased, "a", 7)),
                (
                    "partitions/p3".to_owned(),
                    info(LeaseState::Available, "a", 2),
                ),
            ],
            &[
                ("members/a".to_owned(), info(LeaseState::Leased, "a", 1)),
                ("members/b".to_owned(), info(LeaseState::Leased, "b", 1)),
                (
                    "members/gone".to_owned(),
                    info(LeaseState::Expired, "gone", 1),
                ),
                // Leased, but no member: a foreign blob of member shape, and
                // one of another shape.
                (
                    "members/nightly".to_owned(),
                    info(LeaseState::Leased, "cron", 9),
                ),
                ("members/x/y".to_owned(), info(LeaseState::Leased, "y", 1)),
            ],
        )
    }

    #[test]
    fn owners_are_the_holders_of_leased_partitions_and_members_count_them() {
        let view = example();
        let names: Vec<&str> = view.partitions.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["p1", "p2", "p3"]);
        let owners: Vec<Option<&str>> =
            view.partitions.iter().map(|p| p.owner.as_deref()).collect();
        assert_eq!(owners, [Some("a"), Some("b"), None]);
        assert_eq!(
            view.members.into_iter().collect::<Vec<_>>(),
            [("a".to_owned(), 1), ("b".to_owned(), 1)]
        );
    }

    #[test]
    fn table_and_json() {
        let view = example();
        assert_eq!(
            view.table(),
            "\
set          leases/ingest
partitions   3 (2 leased)
members      2 live

PARTITION  STATE      OWNER  EPOCH  ACQUIRED AT               ADVERTISED
p1         leased     a      7      2025-01-14T02:00:03.512Z  10.0.0.1:80
p2         leased     b      4      2025-01-14T02:00:03.512Z  -
p3         available  -      2      2025-01-14T02:00:03.512Z  -

MEMBER  OWNS
a       1
b       1
"
        );
        assert_eq!(
            view.json(),
            "{\"container\":\"leases\",\"set\":\"ingest\",\"exists\":true,\"partitions\":[\
             {\"name\":\"p1\",\"state\":\"leased\",\"owner\":\"a\",\"epoch\":7,\"acquired_at\":\"2025-01-14T02:00:03.512Z\",\"advertised\":\"10.0.0.1:80\"},\
             {\"name\":\"p2\",\"state\":\"leased\",\"owner\":\"b\",\"epoch\":4,\"acquired_at\":\"2025-01-14T02:00:03.512Z\",\"advertised\":null},\
             {\"name\":\"p3\",\"state\":\"available\",\"owner\":null,\"epoch\":2,\"acquired_at\":\"2025-01-14T02:00:03.512Z\",\"advertised\":null}],\
             \"members\":[{\"holder\":\"a\",\"owns\":1},{\"holder\":\"b\",\"owns\":1}]}"
        );
    }

    #[test]
    fn an_empty_set() {
        let view = View::new("leases", "none", Vec::new(), &[]);
        assert!(!view.exists);
        assert_eq!(
            view.table(),
            "set          leases/none\npartitions   none (no blobs in the set)\n"
        );
        assert_eq!(
            view.json(),
            "{\"container\":\"leases\",\"set\":\"none\",\"exists\":false,\"partitions\":[],\"members\":[]}"
        );
    }
}
