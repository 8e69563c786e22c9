//! Which host process a probe is, and which GPUs its CUDA ordinals are.
//!
//! The hello's `pid` is the pid inside the probe's PID namespace (a
//! container's pid 1, say). vramtop asks the kernel instead: `SO_PEERCRED`
//! on the connected socket gives the peer's pid as seen from vramtop's own
//! namespace. When that is unavailable (0: the peer is in a namespace
//! vramtop cannot see), `/proc/*/status` `NSpid:` lines are searched for the
//! one process whose innermost pid is the hello's pid.

use std::os::unix::net::UnixStream;

use serde::Serialize;

/// How the host pid of a probe was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PidSource {
    /// `SO_PEERCRED` of the connection.
    PeerCred,
    /// A unique `/proc/<pid>/status` `NSpid:` match.
    NsPid,
    /// Neither worked: the hello's own pid, which may be another
    /// namespace's number.
    Hello,
}

/// The peer's (pid, uid) in vramtop's namespace; pid `None` when the kernel
/// reports 0 (not visible from here).
pub fn peer_credentials(stream: &UnixStream) -> Option<(Option<u32>, u32)> {
    let cred =
        nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials).ok()?;
    let pid = u32::try_from(cred.pid()).ok().filter(|&p| p != 0);
    Some((pid, cred.uid()))
}

/// Whether process `pid` is running here, by `/proc/<pid>` under `proc`
/// (`/proc`): `None` where `proc` cannot tell, so that nobody is told a
/// process is gone that is only hidden: no `proc/self` (not mounted, not
/// Linux), or no `proc/1` (mounted `hidepid`, which hides other users'
/// processes).
pub fn process_running_in(proc: &std::path::Path, pid: u32) -> Option<bool> {
    if !proc.join("self").exists() || !proc.join("1").exists() {
        return None;
    }
    Some(proc.join(pid.to_string()).exists())
}

/// [`process_running_in`] `/proc`.
pub fn process_running(pid: u32) -> Option<bool> {
    process_running_in(std::path::Path::new("/proc"), pid)
}

/// The pids of a `/proc/<pid>/status` `NSpid:` line, outermost first.
pub fn parse_nspid(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|rest| {
            rest.split_whitespace()
                .map_while(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The one process (pid in our namespace) whose innermost pid is
/// `probe_pid`, among `statuses` ((pid, status text) pairs). Several
/// matches (two containers each with a pid 1234) are ambiguous: `None`.
pub fn match_nspid<'a>(
    probe_pid: u32,
    statuses: impl IntoIterator<Item = (u32, &'a str)>,
) -> Option<u32> {
    let mut found = None;
    for (pid, status) in statuses {
        if parse_nspid(status).last() == Some(&probe_pid) {
            if found.is_some() {
                return None;
            }
            found = Some(pid);
        }
    }
    found
}

/// Searches `/proc` for the host pid of `probe_pid` (see [`match_nspid`]).
pub fn host_pid_from_proc(probe_pid: u32) -> Option<u32> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let statuses: Vec<(u32, String)> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()
                .map(|s| (pid, s))
        })
        .collect();
    match_nspid(probe_pid, statuses.iter().map(|(p, s)| (*p, s.as_str())))
}

/// What `CUDA_VISIBLE_DEVICES` says about a process's CUDA ordinals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum VisibleDevices {
    /// Unset: CUDA ordinal = NVML index (assumed; true unless
    /// `CUDA_DEVICE_ORDER` reorders them, see docs/attach.md).
    All,
    /// A list of integers: ordinal `i` is GPU `list[i]`.
    Indices(Vec<u32>),
    /// UUIDs, MIG names or anything else vramtop does not map: the raw
    /// value. The probe's figures are listed, but on no GPU.
    Unresolved(String),
}

impl VisibleDevices {
    /// Parses the variable's value as CUDA does for the integer case: a
    /// comma-separated list, read up to the first invalid entry (a negative
    /// number hides the rest).
    pub fn parse(value: &str) -> Self {
        let value = value.trim();
        let mut out = Vec::new();
        for entry in value.split(',') {
            let entry = entry.trim();
            if entry.starts_with('-') {
                break;
            }
            match entry.parse::<u32>() {
                Ok(i) => out.push(i),
                Err(_) if out.is_empty() && !entry.is_empty() => {
                    return VisibleDevices::Unresolved(value.to_string());
                }
                Err(_) => break,
            }
        }
        VisibleDevices::Indices(out)
    }

    /// Reads `/proc/<pid>/environ` (unreadable or unset: [`VisibleDevices::All`]).
    pub fn of_process(pid: u32) -> Self {
        let Ok(bytes) = std::fs::read(format!("/proc/{pid}/environ")) else {
            return VisibleDevices::All;
        };
        bytes
            .split(|&b| b == 0)
            .find_map(|kv| kv.strip_prefix(b"CUDA_VISIBLE_DEVICES="))
            .map_or(VisibleDevices::All, |v| {
                VisibleDevices::parse(&String::from_utf8_lossy(v))
            })
    }

    /// Resolves `GPU-<uuid>` entries (or unique prefixes of them, as CUDA
    /// accepts) against `gpus` ((NVML index, UUID) pairs); integer entries
    /// stay. The list ends at the first entry that resolves to nothing (as
    /// CUDA ends it at an invalid one). `self` when there is nothing to
    /// resolve or no entry resolves.
    pub fn resolve_uuids(&self, gpus: &[(u32, String)]) -> VisibleDevices {
        let VisibleDevices::Unresolved(raw) = self else {
            return self.clone();
        };
        let mut out = Vec::new();
        for entry in raw.split(',').map(str::trim) {
            let found = if let Ok(i) = entry.parse::<u32>() {
                Some(i)
            } else if entry.starts_with("GPU-") {
                let mut matches = gpus.iter().filter(|(_, u)| u.starts_with(entry));
                match (matches.next(), matches.next()) {
                    (Some((i, _)), None) => Some(*i),
                    _ => None,
                }
            } else {
                None
            };
            match found {
                Some(i) => out.push(i),
                None => break,
            }
        }
        if out.is_empty() {
            self.clone()
        } else {
            VisibleDevices::Indices(out)
        }
    }

    /// The NVML index of CUDA ordinal `device`, if known.
    pub fn gpu_index(&self, device: u32) -> Option<u32> {
        match self {
            VisibleDevices::All => Some(device),
            VisibleDevices::Indices(list) => list.get(device as usize).copied(),
            VisibleDevices::Unresolved(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nspid_takes_the_innermost_pid() {
        let status = "Name:\tpython\nPid:\t5678\nNSpid:\t5678\t1234\nPPid:\t1\n";
        assert_eq!(parse_nspid(status), vec![5678, 1234]);
        assert_eq!(parse_nspid("Name:\tx\n"), Vec::<u32>::new());
    }

    #[test]
    fn nspid_match_is_unique_or_nothing() {
        let a = "NSpid:\t5678\t1234\n";
        let b = "NSpid:\t9000\t1234\n";
        let c = "NSpid:\t1234\n";
        assert_eq!(
            match_nspid(1234, [(5678, a), (42, "NSpid:\t42\n")]),
            Some(5678)
        );
        assert_eq!(match_nspid(1234, [(5678, a), (9000, b)]), None);
        assert_eq!(match_nspid(1234, [(1234, c)]), Some(1234));
        assert_eq!(match_nspid(77, [(5678, a)]), None);
    }

    #[test]
    fn cuda_visible_devices_integer_lists_map_ordinals() {
        let v = VisibleDevices::parse("2,3");
        assert_eq!(v.gpu_index(0), Some(2));
        assert_eq!(v.gpu_index(1), Some(3));
        assert_eq!(v.gpu_index(2), None);
        assert_eq!(
            VisibleDevices::parse("1,-1,0"),
            VisibleDevices::Indices(vec![1])
        );
        assert_eq!(VisibleDevices::parse(""), VisibleDevices::Indices(vec![]));
        assert_eq!(VisibleDevices::All.gpu_index(5), Some(5));
    }

    #[test]
    fn cuda_visible_devices_uuids_are_not_guessed() {
        let v = VisibleDevices::parse("GPU-fa4e0000-0000-4000-8000-000000000001");
        assert!(matches!(v, VisibleDevices::Unresolved(_)));
        assert_eq!(v.gpu_index(0), None);
    }

    #[test]
    fn cuda_visible_devices_uuids_resolve_against_the_gpus_uuids() {
        let gpus = vec![
            (0, "GPU-aaaa1111-0000".to_string()),
            (1, "GPU-bbbb2222-0000".to_string()),
            (2, "GPU-bbbb3333-0000".to_string()),
        ];
        let v = VisibleDevices::parse("GPU-bbbb3333-0000,GPU-aaaa").resolve_uuids(&gpus);
        assert_eq!(v, VisibleDevices::Indices(vec![2, 0]));
        // "GPU-bbbb" matches two GPUs: ambiguous, nothing resolved.
        let v = VisibleDevices::parse("GPU-bbbb").resolve_uuids(&gpus);
        assert!(matches!(v, VisibleDevices::Unresolved(_)));
        let v = VisibleDevices::parse("MIG-1234").resolve_uuids(&gpus);
        assert_eq!(v.gpu_index(0), None);
        assert_eq!(
            VisibleDevices::All.resolve_uuids(&gpus),
            VisibleDevices::All
        );
    }

    #[test]
    fn this_process_environment_is_readable() {
        // The test process has no CUDA_VISIBLE_DEVICES unless the runner
        // sets one; either way the call answers without failing.
        let v = VisibleDevices::of_process(std::process::id());
        match std::env::var("CUDA_VISIBLE_DEVICES") {
            Ok(val) => assert_eq!(v, VisibleDevices::parse(&val)),
            Err(_) => assert_eq!(v, VisibleDevices::All),
        }
    }
}
