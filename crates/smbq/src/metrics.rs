//! `smbq serve --metrics ADDR:PORT`: Prometheus text exposition at
//! `http://ADDR:PORT/metrics`. The engine (smbq_server::metrics) and the
//! QUIC transport count through the `metrics` facade; this installs the
//! recorder that keeps the counts and the HTTP listener that shows them
//! (on a thread of its own, off the SMB runtime). Without `--metrics`
//! nothing is installed and the engine counts nothing.

use anyhow::Context;
use metrics::{describe_counter, describe_gauge, describe_histogram, gauge, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use smbq_server::metrics::names;
use std::net::SocketAddr;

/// Request latency buckets (seconds): 50 µs to 10 s.
const LATENCY_BUCKETS: &[f64] = &[0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];
/// QUIC RTT buckets (seconds): 100 µs to 1 s.
const RTT_BUCKETS: &[f64] = &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];
/// QUIC congestion window buckets (bytes): 4 KiB to 1 GiB by fours (an
/// initial window is 10 packets, 12-15 KB; 64 MiB fills 1 GiB/s at 50 ms).
const CWND_BUCKETS: &[f64] = &[4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0, 67108864.0, 268435456.0, 1073741824.0];
/// QUIC pacing rate buckets (bits/s): 1 Mbit/s to 100 Gbit/s.
const PACING_BUCKETS: &[f64] = &[1e6, 3e6, 1e7, 3e7, 1e8, 3e8, 1e9, 3e9, 1e10, 3e10, 1e11];

/// Install the recorder and serve it on `addr`; before the server is
/// made (its handles register with the recorder installed then).
pub fn install(addr: SocketAddr) -> anyhow::Result<()> {
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(Matcher::Full(names::REQUEST_DURATION.into()), LATENCY_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(names::QUIC_RTT.into()), RTT_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(names::QUIC_MIN_RTT.into()), RTT_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(names::QUIC_CWND.into()), CWND_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(names::QUIC_PACING_RATE.into()), PACING_BUCKETS)?
        .install()
        .with_context(|| format!("serving metrics on {addr}"))?;
    describe_gauge!(names::CONNECTIONS, "SMB connections open, by transport");
    describe_counter!(names::CONNECTIONS_ACCEPTED, "SMB connections accepted, by transport");
    describe_gauge!(names::SESSIONS, "SMB sessions");
    describe_gauge!(names::OPENS, "Open handles (durable ones waiting for a reconnect too)");
    describe_counter!(names::REQUESTS, "SMB2 requests received, by command");
    describe_histogram!(names::REQUEST_DURATION, Unit::Seconds, "From a request's arrival at the engine to its final response, by command");
    describe_counter!(names::ERRORS, "Error and warning responses, by NTSTATUS");
    describe_counter!(names::READ_BYTES, Unit::Bytes, "File data returned by READ");
    describe_counter!(names::WRITTEN_BYTES, Unit::Bytes, "File data written by WRITE");
    describe_counter!(names::RECEIVED_BYTES, Unit::Bytes, "SMB message bytes received (with the 4-byte framing), by transport");
    describe_counter!(names::SENT_BYTES, Unit::Bytes, "SMB message bytes sent (with the 4-byte framing), by transport");
    describe_histogram!(names::QUIC_RTT, Unit::Seconds, "QUIC smoothed RTT, sampled per connection at its start, every 10 s and at its end");
    describe_histogram!(names::QUIC_MIN_RTT, Unit::Seconds, "QUIC minimum RTT, sampled per connection");
    describe_histogram!(names::QUIC_CWND, Unit::Bytes, "QUIC congestion window, sampled per connection");
    describe_histogram!(names::QUIC_PACING_RATE, "QUIC pacing rate in bits/s, sampled per connection (controllers that give one)");
    describe_counter!(names::QUIC_SENT_PACKETS, "QUIC packets sent");
    describe_counter!(names::QUIC_LOST_PACKETS, "QUIC packets lost (their frames are sent again: the retransmitted packets)");
    describe_counter!(names::QUIC_LOST_BYTES, Unit::Bytes, "Bytes of QUIC packets lost");
    describe_counter!(names::QUIC_CONGESTION_EVENTS, "QUIC congestion events (window cuts for loss or ECN)");
    describe_counter!(names::QUIC_0RTT_ACCEPTED, "QUIC connections resumed with 0-RTT data accepted");
    describe_counter!(names::QUIC_0RTT_REFUSED, "QUIC connections whose 0-RTT data was refused (ticket unknown, used or stale)");
    describe_gauge!(names::CERTIFICATE_EXPIRY, Unit::Seconds, "The QUIC server certificate's notAfter, Unix seconds");
    Ok(())
}

/// The server certificate now in use expires at `not_after_unix`: call
/// whenever a certificate is loaded or replaced (a no-op without --metrics).
pub fn certificate_expiry(not_after_unix: i64) {
    gauge!(names::CERTIFICATE_EXPIRY).set(not_after_unix as f64);
}

/// [`certificate_expiry`] of the leaf of `chain`, if it parses.
pub fn certificate_in_use(chain: &[rustls::pki_types::CertificateDer<'_>]) {
    if let Some(t) = chain.first().and_then(|c| not_after(c)) {
        certificate_expiry(t);
    }
}

/// The notAfter of a DER certificate, in Unix seconds.
fn not_after(der: &[u8]) -> Option<i64> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    Some(cert.validity().not_after.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_after_of_a_certificate() {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        params.not_after = rcgen::date_time_ymd(2031, 5, 17);
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("certificate");
        // 2031-05-17T00:00:00Z
        assert_eq!(not_after(cert.der()), Some(1_936_742_400));
        assert_eq!(not_after(b"not a certificate"), None);
    }
}
