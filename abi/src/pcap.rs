//! `ROCE_EMU_PCAP=FILE`: every device a program opens writes every packet it sends and
//! receives to a pcap file, as the tools' `--pcap` does, one frame per packet (decodable
//! by `roce-emu pcap` and tshark). Several programs and devices must not clobber one file:
//! the device's name and the pid go into the name (`FILE` = `run.pcap` gives
//! `run.rxe0.4242.pcap`, and a second open of that device in that process
//! `run.rxe0.4242-2.pcap`). At close or exit the program's stderr gets one line saying
//! where the capture is and how many packets it holds.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// The capture file for a device named `device` being opened now, if `ROCE_EMU_PCAP` asks.
pub fn path(device: &str) -> Option<PathBuf> {
    let base = std::env::var_os("ROCE_EMU_PCAP").filter(|v| !v.is_empty())?;
    static OPENS: AtomicU32 = AtomicU32::new(0);
    let n = OPENS.fetch_add(1, Ordering::Relaxed) + 1;
    Some(name(Path::new(&base), device, std::process::id(), n))
}

/// `base` with `.DEVICE.PID` (and `-N` for the Nth open of a process, N > 1) put before
/// its extension (or at its end, without one).
fn name(base: &Path, device: &str, pid: u32, n: u32) -> PathBuf {
    let seq = if n > 1 {
        format!("-{n}")
    } else {
        String::new()
    };
    let stem = base.file_stem().unwrap_or_default().to_string_lossy();
    let file = match base.extension() {
        Some(ext) => format!("{stem}.{device}.{pid}{seq}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{device}.{pid}{seq}"),
    };
    base.with_file_name(file)
}

/// The capture's summary, on the program's stderr at close or exit.
pub fn report(line: &str) {
    eprintln!("roce-emu: {line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_and_pid_go_before_the_extension() {
        let p = |b: &str, n| name(Path::new(b), "rxe0", 42, n);
        assert_eq!(p("/tmp/run.pcap", 1), Path::new("/tmp/run.rxe0.42.pcap"));
        assert_eq!(p("/tmp/run.pcap", 2), Path::new("/tmp/run.rxe0.42-2.pcap"));
        assert_eq!(p("cap", 1), Path::new("cap.rxe0.42"));
        assert_eq!(p("a.b/c.pcap", 3), Path::new("a.b/c.rxe0.42-3.pcap"));
    }
}
