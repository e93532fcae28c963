//! The runner's end of the agent protocol (spec/FORMAT.md): one request line, one reply.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// An agent's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Ok(Vec<(String, String)>),
    Err(String),
    Unsupported(String),
}

impl Reply {
    pub fn get(&self, key: &str) -> Option<&str> {
        match self {
            Reply::Ok(kv) => kv.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()),
            _ => None,
        }
    }

    pub fn parse(line: &str) -> Reply {
        let line = line.trim_end();
        let (head, rest) = line.split_once(' ').unwrap_or((line, ""));
        match head {
            "ok" => Reply::Ok(
                rest.split_whitespace()
                    .map(|kv| match kv.split_once('=') {
                        Some((k, v)) => (k.to_string(), v.to_string()),
                        None => (kv.to_string(), String::new()),
                    })
                    .collect(),
            ),
            "unsupported" => Reply::Unsupported(rest.to_string()),
            "err" => Reply::Err(rest.to_string()),
            _ => Reply::Err(format!("the agent answered {line:?}")),
        }
    }
}

/// A connection to an agent.
pub struct Agent {
    r: BufReader<TcpStream>,
    w: TcpStream,
    /// What `hello` said: the target's kind and its RoCE address.
    pub name: String,
    pub ip: IpAddr,
}

/// Longest wait for a reply beyond what the request itself asks to wait.
const SLACK: Duration = Duration::from_secs(20);

impl Agent {
    /// Connects to `addr` (HOST:PORT) and says hello.
    pub fn connect(addr: &str) -> Result<Agent, String> {
        let sa = addr
            .to_socket_addrs()
            .map_err(|e| format!("agent address {addr}: {e}"))?
            .next()
            .ok_or_else(|| format!("agent address {addr}: no address"))?;
        let w = TcpStream::connect_timeout(&sa, Duration::from_secs(10))
            .map_err(|e| format!("cannot reach the agent at {addr}: {e}"))?;
        let _ = w.set_nodelay(true);
        let r = BufReader::new(w.try_clone().map_err(|e| e.to_string())?);
        let mut a = Agent {
            r,
            w,
            name: String::new(),
            ip: IpAddr::from([0, 0, 0, 0]),
        };
        let hello = a.call("hello", Duration::ZERO)?;
        a.name = hello.get("name").unwrap_or("?").to_string();
        a.ip = hello
            .get("ip")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("the agent's hello has no ip=: {hello:?}"))?;
        Ok(a)
    }

    /// Sends `line` and reads the reply; `wait` is how long the request itself may take.
    /// Only a broken connection is an `Err`; the agent's `err` is a `Reply`.
    pub fn call(&mut self, line: &str, wait: Duration) -> Result<Reply, String> {
        let _ = self.w.set_read_timeout(Some(wait + SLACK));
        writeln!(self.w, "{line}").map_err(|e| format!("agent: {e}"))?;
        let mut reply = String::new();
        match self.r.read_line(&mut reply) {
            Ok(0) => Err("the agent closed the connection".into()),
            Ok(_) => Ok(Reply::parse(&reply)),
            Err(e) => Err(format!("no reply from the agent to {line:?}: {e}")),
        }
    }
}
