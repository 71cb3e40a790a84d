//! Scenario F, fairness (issue 33): one smbq-quic upload and one Linux TCP
//! CUBIC bulk flow (set on its socket: this kernel's default may be
//! another), both from the client namespace to the server's, share
//! the link emulator's bottleneck (100 Mbit/s each way, a drop-tail queue
//! of one bandwidth-delay product, 20 ms one way) for `secs`; each flow's
//! goodput over that time. A controller that ignores loss can starve a
//! loss-based flow on a shallow queue (BBRv1's known fault); one that backs
//! off on every loss starves itself. The target: neither below a third of
//! the link.

use crate::linkem::{Link, LinkParams};
use crate::suite::RemoteSmb;
use smbq_wire::create::disposition;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The bottleneck of the fairness scenario.
pub fn params() -> LinkParams {
    LinkParams { delay: Duration::from_millis(20), rate_bps: Some(100_000_000), ..LinkParams::default() }.with_bdp_queue()
}

/// Goodput of the QUIC flow (`system`, an smbq-quic row) and of the TCP
/// CUBIC flow, bits/s, run side by side for `secs` over `link` (already
/// set to [`params`]).
pub fn measure(link: &Link, remote: RemoteSmb, system: &str, secs: f64) -> anyhow::Result<(f64, f64)> {
    let time = Duration::from_secs_f64(secs);
    let system = system.to_string();
    let upload = move || -> anyhow::Result<f64> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(async move {
            let mut c = remote.connect(&system).await?;
            let (fid, _) = c.create("fairness.bin", disposition::OVERWRITE_IF, 0).await?;
            let block = bytes::Bytes::from(crate::pattern(1 << 20));
            let written = Arc::new(AtomicU64::new(0));
            let w = written.clone();
            let start = Instant::now();
            // Far more than the link carries in `time`: the timeout ends it.
            let upload = c.write_from(fid, 0, 64 << 30, 1 << 20, 4, |_, len| Ok(block.slice(..len)), move |_, len| {
                w.fetch_add(len, Ordering::Relaxed);
            });
            let _ = tokio::time::timeout(time, upload).await;
            let secs = start.elapsed().as_secs_f64();
            Ok(written.load(Ordering::Relaxed) as f64 * 8.0 / secs)
        })
    };
    // The two flows side by side, each from its own thread.
    std::thread::scope(|s| {
        let tcp = s.spawn(|| link.tcp_bulk(None, time, Some("cubic")));
        let quic = link.in_ns(link.client_ns(), upload);
        let tcp = tcp.join().map_err(|_| anyhow::anyhow!("the TCP flow panicked"))?;
        Ok((quic??, tcp?))
    })
}
