//! A fenced register of the chaos runner: a small store on 127.0.0.1 that
//! takes writes `<key> <epoch>` (one line per connection) and answers `OK`,
//! or `REFUSED` when the epoch is lower than the highest it accepted for
//! that key. Workers in modes whose lease blob keeps no fenced state (lease
//! sets, quorums) send each unit of work here (`BLOB_MUTEX_FENCE_ADDR`, see
//! `crates/testkit/examples/fault_worker.rs`), as a downstream system that checks
//! the fencing token would.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};

/// The register; it serves until the test process ends.
pub struct Register {
    addr: String,
}

impl Register {
    /// Starts a register on a free port of 127.0.0.1.
    pub fn start() -> Register {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fenced register");
        let addr = listener.local_addr().expect("its address").to_string();
        let highest: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let highest = highest.clone();
                std::thread::spawn(move || serve(stream, &highest));
            }
        });
        Register { addr }
    }

    /// `127.0.0.1:<port>`, for `BLOB_MUTEX_FENCE_ADDR`.
    pub fn addr(&self) -> &str {
        &self.addr
    }
}

/// Whether a write of `epoch` to `key` is accepted; records it if so.
pub fn accept(highest: &mut HashMap<String, u64>, key: &str, epoch: u64) -> bool {
    let top = highest.entry(key.to_owned()).or_insert(0);
    if epoch < *top {
        return false;
    }
    *top = epoch;
    true
}

fn serve(stream: TcpStream, highest: &Mutex<HashMap<String, u64>>) {
    let mut line = String::new();
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    if BufReader::new(stream).read_line(&mut line).is_err() {
        return;
    }
    let mut words = line.split_whitespace();
    let (Some(key), Some(epoch)) = (words.next(), words.next().and_then(|e| e.parse().ok())) else {
        let _ = writer.write_all(b"BAD\n");
        return;
    };
    let accepted = accept(
        &mut highest.lock().unwrap_or_else(PoisonError::into_inner),
        key,
        epoch,
    );
    let _ = writer.write_all(if accepted { b"OK\n" } else { b"REFUSED\n" });
}
