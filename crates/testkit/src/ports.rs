//! Free addresses on 127.0.0.1 for the processes a test starts to serve
//! on, claimed so that no other test process takes the same one.

/// `count` distinct free ports on 127.0.0.1 for a process the test starts
/// to bind, each claimed for as long as this test process lives.
///
/// A port the kernel hands out for port 0 comes from the ephemeral range,
/// which every outgoing connection on the machine also draws from: let
/// go, it can become a connection's local port before the process bound it
/// (seen: a test beside one that opens hundreds of connections, whose
/// command then never served). These ports are below that range, checked
/// free by a bind, and claimed in a file named after the port, so that two
/// test processes never take the same one while both live.
pub fn free_addrs(count: usize) -> Vec<String> {
    let (low, high) = below_the_ephemeral_range();
    let mut seed = u64::from(std::process::id()) << 20 ^ now_nanos();
    let mut addrs = Vec::new();
    while addrs.len() < count {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let span = u64::from(high - low);
        let port = low + u16::try_from((seed >> 33) % span).expect("a port in range");
        if let Some(addr) = claim(port) {
            addrs.push(addr);
        }
    }
    addrs
}

/// A free port on 127.0.0.1 (see [`free_addrs`]).
pub fn free_addr() -> String {
    free_addrs(1).remove(0)
}

/// The ports from which [`free_addrs`] chooses: the 10 000 below the start
/// of the kernel's ephemeral range (32 768 unless it says otherwise).
fn below_the_ephemeral_range() -> (u16, u16) {
    let first_ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let high = first_ephemeral.max(2_048);
    (high.saturating_sub(10_000).max(1_024), high)
}

/// Claims `port` for this process, if no other live test process has and
/// nothing listens on it: a file named after the port, made anew, holds
/// the claimer's process id, and the claim of a process that has exited
/// is taken over.
fn claim(port: u16) -> Option<String> {
    let dir = std::env::temp_dir().join("blob-mutex-test-ports");
    std::fs::create_dir_all(&dir).ok()?;
    let path = dir.join(port.to_string());
    let me = std::process::id().to_string();
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path);
    if made.is_err() {
        let claimer = std::fs::read_to_string(&path).ok()?;
        let alive = std::path::Path::new("/proc").join(claimer.trim()).exists();
        if alive || claimer.trim().is_empty() {
            return None;
        }
        // A claim left by a process that has exited.
        std::fs::remove_file(&path).ok()?;
        return claim(port);
    }
    std::io::Write::write_all(&mut made.ok()?, me.as_bytes()).ok()?;
    let addr = format!("127.0.0.1:{port}");
    drop(std::net::TcpListener::bind(&addr).ok()?);
    Some(addr)
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()) ^ d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_below_the_ephemeral_range_and_claimed_once() {
        let (low, high) = below_the_ephemeral_range();
        let addrs = free_addrs(20);
        let ports: std::collections::BTreeSet<u16> = addrs
            .iter()
            .map(|a| a.rsplit_once(':').unwrap().1.parse().unwrap())
            .collect();
        assert_eq!(ports.len(), 20, "{addrs:?}");
        assert!(ports.iter().all(|p| (low..high).contains(p)), "{ports:?}");
        let first = *ports.first().unwrap();
        assert_eq!(claim(first), None, "a claimed port was claimed again");
        // Free to bind for the process the test starts.
        std::net::TcpListener::bind(&addrs[0]).unwrap();
    }
}
