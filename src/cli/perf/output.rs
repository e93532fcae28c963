//! What a test prints: perftest's banner, address lines, tables, and the JSON figures.

use super::*;

pub(super) fn print_banner(test: Test, args: &Args, size: u32, mtu: Mtu, client: bool) {
    let line = "-".repeat(87);
    println!("{line}");
    if args.lat {
        // ib_write_lat / ib_send_lat: one message in flight, no CQ moderation; the client
        // alone prints its TX depth (shared/captures/write_lat_s8.txt).
        println!("                    {}", test.lat_title());
        println!(" Connection type : RC\t\tUsing SRQ      : OFF");
        if client {
            println!(" TX depth        : 1");
        }
        println!(
            " Mtu             : {}[B]\t\tMessage size   : {size}",
            mtu.bytes()
        );
        println!(
            " Iterations      : {}\t\t{}",
            args.iters.unwrap_or(1000),
            if client { "Client" } else { "Server" }
        );
        println!("{line}");
        return;
    }
    println!("                    {}", test.title());
    println!(" Connection type : RC\t\tUsing SRQ      : OFF");
    println!(
        " TX depth        : {}\t\t{}",
        args.tx_depth,
        if client { "Client" } else { "Server" }
    );
    if test == Test::Atomic {
        println!(" Atomic type     : {}", args.atomic.name());
    }
    println!(
        " Mtu             : {}[B]\t\tMessage size   : {size}",
        mtu.bytes()
    );
    println!(
        " CQ Moderation   : {}\t\tIterations     : {}",
        args.cq_mod,
        args.iters
            .map_or_else(|| "default".to_string(), |n| n.to_string())
    );
    println!("{line}");
}

pub(super) fn print_record(what: &str, r: &Record) {
    println!(
        "{what} LID {:#06x} QPN {:#06x} PSN {:#08x} RKey {:#010x} VAddr {:#018x}",
        r.lid, r.qpn, r.psn, r.rkey, r.vaddr
    );
    let gid: Vec<String> = r.gid.iter().map(|b| format!("{b:02x}")).collect();
    println!(" GID: {}", gid.join(":"));
}

pub(super) fn print_report(r: &Report) {
    let line = "-".repeat(87);
    println!("{line}");
    println!(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]");
    println!(
        " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
        r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
    );
    println!("{line}");
}

pub(super) fn report_json(
    test: Test,
    args: &Args,
    r: &Report,
    mtu: Mtu,
    client: bool,
    bind: IpAddr,
    peer: IpAddr,
) -> serde_json::Value {
    serde_json::json!({
        "test": test.tool(),
        "role": if client { "client" } else { "server" },
        "atomic": (test == Test::Atomic).then_some(args.atomic.name()),
        "bytes": r.size,
        "iterations": r.iters,
        "bw_peak_mb_per_sec": r.bw_peak,
        "bw_average_mb_per_sec": r.bw_avg,
        "msg_rate_mpps": r.msg_rate,
        "mtu": mtu.bytes(),
        "local": bind.to_string(),
        "peer": peer.to_string(),
        "checked": args.check,
    })
}

pub(super) fn print_lat(r: &LatReport) {
    let line = "-".repeat(87);
    println!("{line}");
    println!(
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    \
         t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
    );
    println!(
        " {:<7} {:<10}     {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        r.size, r.iters, r.t_min, r.t_max, r.t_typical, r.t_avg, r.t_stdev, r.p99, r.p999
    );
    println!("{line}");
}

/// The I/O path's counters (the engine's are under "counters").
pub(super) fn io_json(ctx: &Context) -> serde_json::Value {
    let b = ctx.port_stats();
    let io = ctx.io_stats();
    serde_json::json!({
        "tx_datagrams": io.tx_datagrams,
        "rx_datagrams": io.rx_datagrams,
        "gso_sends": b.gso_sends,
        "gso_segments": b.gso_segments,
        "gso_fallbacks": b.gso_fallbacks,
        "gro_datagrams": b.gro_datagrams,
        "gro_segments": b.gro_segments,
        "truncated": b.truncated,
        "tx_stalled": b.tx_stalled,
    })
}

pub(super) fn lat_json(
    test: Test,
    r: &LatReport,
    mtu: Mtu,
    client: bool,
    bind: IpAddr,
    peer: IpAddr,
) -> serde_json::Value {
    serde_json::json!({
        "test": if test == Test::Write { "ib_write_lat" } else { "ib_send_lat" },
        "role": if client { "client" } else { "server" },
        "bytes": r.size,
        "iterations": r.iters,
        "t_min_usec": r.t_min,
        "t_max_usec": r.t_max,
        "t_typical_usec": r.t_typical,
        "t_avg_usec": r.t_avg,
        "t_stdev_usec": r.t_stdev,
        "p99_usec": r.p99,
        "p99_9_usec": r.p999,
        "mtu": mtu.bytes(),
        "local": bind.to_string(),
        "peer": peer.to_string(),
    })
}
