//! What the example programs share: rdma-core/perftest style options and the client side of
//! their TCP exchange.

use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// An argument as `(option, value given with it)`: `--size=64` → (`--size`, `64`), `-s64` →
/// (`-s`, `64`), anything else whole with no value (the value, if any, is the next argument).
pub fn split_option(a: &str) -> (String, Option<String>) {
    match a.split_once('=') {
        Some((k, v)) if a.starts_with("--") => (k.to_string(), Some(v.to_string())),
        _ if a.starts_with('-') && !a.starts_with("--") && a.len() > 2 => {
            (a[..2].to_string(), Some(a[2..].to_string()))
        }
        _ => (a.to_string(), None),
    }
}

/// Connects to `host:port`, retrying for 10 s while the server starts.
pub fn connect_retrying(host: &str, port: u16) -> Result<TcpStream, String> {
    let start = Instant::now();
    loop {
        match TcpStream::connect((host, port)) {
            Ok(s) => return Ok(s),
            Err(e) if start.elapsed() > Duration::from_secs(10) => {
                return Err(format!("couldn't connect to {host}:{port}: {e}"))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The one TCP connection of a two-sided program: the client (`server` named) connects to it,
/// the server waits for the client on `port`; reads time out after `stall`.
pub fn link(server: Option<&str>, port: u16, stall: Duration) -> Result<TcpStream, String> {
    let s = match server {
        Some(host) => connect_retrying(host, port)?,
        None => {
            let l = TcpListener::bind(("0.0.0.0", port))
                .map_err(|e| format!("couldn't listen on port {port}: {e}"))?;
            l.accept().map_err(|e| e.to_string())?.0
        }
    };
    s.set_read_timeout(Some(stall)).map_err(|e| e.to_string())?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_split_as_rdma_core_and_perftest_write_them() {
        let s = |a: &str| split_option(a);
        assert_eq!(s("--size=64"), ("--size".into(), Some("64".into())));
        assert_eq!(s("-s64"), ("-s".into(), Some("64".into())));
        assert_eq!(s("-s"), ("-s".into(), None));
        assert_eq!(s("--size"), ("--size".into(), None));
        assert_eq!(s("host"), ("host".into(), None));
    }
}
