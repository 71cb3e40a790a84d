//! `--multichannel`: one session over two connections (SMB multichannel,
//! MS-SMB2 3.3.5.5.2 session binding), and the file read back over both.
//!
//! The primary connection (`--transport`, `--port`) negotiates (advertising
//! CAP_MULTI_CHANNEL), logs on, connects the share and writes `--size-mib`
//! MiB of the seeded content. A second connection then goes to
//! `--second-server` (another address, as to a second interface, or the same
//! one again, as a client does to an RSS interface) over
//! `--second-transport` at `--second-port` (by default the primary's
//! transport and port), negotiates with the same ClientGuid and binds the
//! session to itself with `Connection::bind_session` (a SESSION_SETUP with
//! SMB2_SESSION_FLAG_BINDING, signed). With one connection over TCP and the
//! other over QUIC the session spans transports, as a roaming client's
//! does; `--root-cert` is the QUIC connection's trust anchor. The file is then
//! reopened and read back in READs of `--chunk-mib` MiB (capped at the smaller
//! negotiated MaxReadSize; it must stay above 1 MiB), request `i` going over
//! channel `i % 2` (`File::read_at_channel`), so both channels carry large
//! READs of one open of one tree of one session. The JSON report counts the
//! READs and bytes each channel answered, and what each channel's
//! connection negotiated. The file is deleted at the end.
//!
//! `--multichannel-auto` (TCP only) tries smb-rs's own multichannel instead
//! (`MultiChannelConfig::Always`): `Client::share_connect` connects IPC$,
//! asks the server for FSCTL_QUERY_NETWORK_INTERFACE_INFO and binds the
//! session to every interface other than the one it is connected to. The
//! report lists the interfaces the server gave and the channels smb-rs set
//! up, then reads over all of them; fewer than two channels is a failure.
//!
//! The explicit mode builds its connections with the lower-level
//! `Connection` API rather than `Client`: smb-rs's automatic multichannel
//! runs inside `Client::share_connect` whenever CAP_MULTI_CHANNEL is
//! advertised, and `Client` refuses a second connection to an address it
//! already has one to.
//!
//! smb-rs 0.12.1 encrypts the binding SESSION_SETUP of a session that
//! encrypts (`ChannelMessageHandler::sendo`), which the new connection cannot
//! decrypt (MS-SMB2 3.3.5.2.1.1: smbq disconnects, smbd answers
//! INVALID_PARAMETER): run this against a share and server that only sign.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use smb::connection::MultiChannelConfig;
use smb::{Client, ClientConfig, Connection, ConnectionConfig, File, Guid, ReadAtChannel, UncPath};

use crate::{
    chunks, connect_client, delete_file, open_written, smb_err, transport_config, within, write_file, Args,
    ReadCheck, Report, ShareRoot, Transport,
};

/// READs must be larger than this to count as large (the point of the test).
const ONE_MIB: usize = 1 << 20;

/// What one channel of the session carried.
#[derive(Debug)]
pub(crate) struct ChannelStats {
    id: u32,
    /// "primary", "bound" (our explicit bind) or "auto" (set up by smb-rs).
    role: &'static str,
    /// Where its connection goes, when known.
    address: Option<String>,
    /// "tcp" or "quic", when known.
    transport: Option<&'static str>,
    /// What its connection negotiated, when known: MaxReadSize, dialect,
    /// signing algorithm and cipher (smb-rs's names; none when the server
    /// sent no such context).
    max_read: Option<u32>,
    negotiated: Option<Negotiated>,
    /// READ responses it answered, and the bytes in them.
    reads: u64,
    bytes: u64,
    /// The largest single READ response.
    largest_read: u64,
    /// READ responses of more than 1 MiB.
    reads_over_1mib: u64,
}

/// A connection's negotiated dialect, signing algorithm and cipher.
#[derive(Debug, Clone)]
struct Negotiated {
    dialect: String,
    signing: Option<String>,
    cipher: Option<String>,
}

impl Negotiated {
    fn of(neg: &smb::connection::connection_info::NegotiatedProperties) -> Self {
        Negotiated {
            dialect: format!("{:?}", neg.dialect_rev),
            signing: neg.signing_algo.map(|a| format!("{a:?}")),
            cipher: neg.encryption_cipher.map(|c| format!("{c:?}")),
        }
    }

    fn describe(&self) -> String {
        let none = || "none".to_string();
        format!(
            "dialect {}, signing {}, cipher {}",
            self.dialect,
            self.signing.clone().unwrap_or_else(none),
            self.cipher.clone().unwrap_or_else(none)
        )
    }
}

impl ChannelStats {
    fn new(id: u32, role: &'static str, address: Option<String>, max_read: Option<u32>) -> Self {
        ChannelStats {
            id,
            role,
            address,
            transport: None,
            max_read,
            negotiated: None,
            reads: 0,
            bytes: 0,
            largest_read: 0,
            reads_over_1mib: 0,
        }
    }

    /// A channel whose connection we made: its transport and negotiation known.
    fn of_connection(
        id: u32,
        role: &'static str,
        address: SocketAddr,
        transport: Transport,
        neg: &smb::connection::connection_info::NegotiatedProperties,
    ) -> Self {
        ChannelStats {
            transport: Some(transport.name()),
            negotiated: Some(Negotiated::of(neg)),
            ..Self::new(id, role, Some(address.to_string()), Some(neg.max_read_size))
        }
    }

    fn count(&mut self, answered: usize) {
        let n = answered as u64;
        self.reads += 1;
        self.bytes += n;
        self.largest_read = self.largest_read.max(n);
        if answered > ONE_MIB {
            self.reads_over_1mib += 1;
        }
    }
}

/// The multichannel part of the report, filled in as the run goes.
#[derive(Debug, Default)]
pub(crate) struct McReport {
    mode: &'static str,
    second_server: Option<String>,
    second_transport: Option<&'static str>,
    second_port: Option<u16>,
    session_id: Option<u64>,
    /// Bytes per READ request.
    read_size: Option<usize>,
    channels: Vec<ChannelStats>,
    /// FSCTL_QUERY_NETWORK_INTERFACE_INFO as the server answered it (auto mode).
    interfaces: Option<Vec<Value>>,
}

impl McReport {
    pub(crate) fn to_json(&self) -> Value {
        let channels: Vec<Value> = self
            .channels
            .iter()
            .map(|c| {
                let neg = c.negotiated.as_ref();
                json!({
                    "id": c.id, "role": c.role, "address": c.address, "transport": c.transport,
                    "max_read_size": c.max_read,
                    "dialect": neg.map(|n| &n.dialect), "signing": neg.and_then(|n| n.signing.as_ref()),
                    "cipher": neg.and_then(|n| n.cipher.as_ref()),
                    "reads": c.reads, "bytes": c.bytes, "largest_read": c.largest_read,
                    "reads_over_1mib": c.reads_over_1mib,
                })
            })
            .collect();
        json!({
            "mode": self.mode,
            "second_server": self.second_server,
            "second_transport": self.second_transport,
            "second_port": self.second_port,
            "session_id": self.session_id,
            "read_size": self.read_size,
            "channels": channels,
            "interfaces": self.interfaces,
        })
    }

    fn channel_mut(&mut self, id: u32) -> Option<&mut ChannelStats> {
        self.channels.iter_mut().find(|c| c.id == id)
    }
}

fn identity(args: &Args) -> Result<sspi::AuthIdentity> {
    let username = sspi::Username::parse(&args.user).map_err(|e| anyhow!("user name {:?}: {e}", args.user))?;
    Ok(sspi::AuthIdentity { username, password: sspi::Secret::from(args.password.clone()) })
}

fn socket_addr(ip: &str, port: u16, what: &str) -> Result<SocketAddr> {
    let ip: IpAddr = ip.parse().with_context(|| format!("{what} {ip:?} is not an IP address"))?;
    Ok(SocketAddr::new(ip, port))
}

/// The second connection of `--multichannel`: its transport and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Second {
    transport: Transport,
    port: u16,
}

/// `--second-transport` (default `--transport`) and `--second-port`
/// (default `--port`, which is a port of the other protocol when the
/// transports differ); `--root-cert` needs a QUIC connection to apply to.
fn second_of(args: &Args) -> Result<Second> {
    let transport = args.second_transport.unwrap_or(args.transport);
    let port = match args.second_port {
        Some(p) => p,
        None if transport == args.transport => args.port,
        None => bail!(
            "--second-transport {} differs from --transport {}: give its port with --second-port",
            transport.name(),
            args.transport.name()
        ),
    };
    ensure!(
        args.root_cert.is_none() || args.transport == Transport::Quic || transport == Transport::Quic,
        "--root-cert only applies to a QUIC connection (--transport quic or --second-transport quic)"
    );
    Ok(Second { transport, port })
}

/// Both modes: checks, the connection configuration (CAP_MULTI_CHANNEL on).
pub(crate) async fn run(args: &Args, report: &mut Report) -> Result<()> {
    let limit = args.step_limit();
    let second = if args.multichannel_auto {
        ensure!(args.transport == Transport::Tcp, "--multichannel-auto is implemented over --transport tcp only");
        ensure!(args.root_cert.is_none(), "--root-cert only applies to --transport quic");
        None
    } else {
        Some(second_of(args)?)
    };
    let size = args.size_bytes()?;
    ensure!(args.chunk_mib > 1, "--chunk-mib must be at least 2: the READs must be larger than 1 MiB");
    // The guard keeps a converted DER root certificate until the end.
    let (transport, _der_guard) = transport_config(args.transport, args.root_cert.as_deref())?;
    let config = ConnectionConfig {
        // Advertise CAP_MULTI_CHANNEL: a server grants it only to a client that asks.
        multichannel: MultiChannelConfig::Always,
        ..args.connection_config(transport)
    };
    let name = args.file_name_or_unique("smbrs-mc");
    match second {
        None => run_auto(args, report, config, &name, size, limit).await,
        Some(second) => {
            let (transport, _der_guard2) = transport_config(second.transport, args.root_cert.as_deref())?;
            let config2 = ConnectionConfig { port: Some(second.port), transport, ..config.clone() };
            run_bind(args, report, config, second, config2, &name, size, limit).await
        }
    }
}

/// Explicit binding: primary connection, session, tree; write; second
/// connection (`config2`) bound to the session; read over both; delete;
/// tear down.
#[allow(clippy::too_many_arguments)]
async fn run_bind(
    args: &Args,
    report: &mut Report,
    config: ConnectionConfig,
    second: Second,
    config2: ConnectionConfig,
    name: &str,
    size: u64,
    limit: Duration,
) -> Result<()> {
    report.multichannel = Some(McReport {
        mode: "bind",
        second_server: Some(args.second_server.clone()),
        second_transport: Some(second.transport.name()),
        second_port: Some(second.port),
        ..Default::default()
    });
    let identity = identity(args)?;
    let share = args.share_path()?;
    let primary_addr = socket_addr(&args.server, args.port, "--server")?;
    let second_addr = socket_addr(&args.second_server, second.port, "--second-server")?;
    // One ClientGuid for both connections: a channel joins a session of its own client.
    let client_guid = Guid::generate();

    // Primary: transport, negotiate, NTLM session setup, tree connect.
    let t = Instant::now();
    let conn1 = Connection::build(&args.server, primary_addr, client_guid, config.clone())
        .map_err(smb_err("primary connection"))?;
    let (session, tree) = within(limit, "connect", async {
        conn1.connect().await.map_err(smb_err(format!("connect to {primary_addr}")))?;
        let session =
            conn1.authenticate(identity.clone()).await.map_err(smb_err(format!("session setup on {primary_addr}")))?;
        let tree = session.tree_connect(&share).await.map_err(smb_err(format!("tree connect {share}")))?;
        Ok((session, tree))
    })
    .await?;
    let info = conn1.conn_info().context("primary connection has no negotiated state")?;
    let neg = &info.negotiation;
    report.negotiated(neg);
    ensure!(
        neg.caps.multi_channel(),
        "the server did not grant CAP_MULTI_CHANNEL on the primary connection (capabilities {:?})",
        neg.caps
    );
    let primary_id = session.channel_id();
    if let Some(mc) = report.multichannel.as_mut() {
        mc.session_id = Some(session.session_id());
        mc.channels.push(ChannelStats::of_connection(primary_id, "primary", primary_addr, args.transport, neg));
    }
    report.record(
        "connect",
        t,
        None,
        format!(
            "{} to {primary_addr}, {}, max read/write {}/{} B, session {:#x}, channel {primary_id}",
            args.transport.name(),
            Negotiated::of(neg).describe(),
            neg.max_read_size,
            neg.max_write_size,
            session.session_id()
        ),
    );
    let write_chunk = (args.chunk_mib as usize * ONE_MIB).min(neg.max_write_size as usize);
    ensure!(write_chunk > 0, "server negotiated a zero maximum write size");

    let at = ShareRoot::Tree(&tree);
    write_file(&at, name, args, size, write_chunk, report, |n, sha256| {
        format!("{n} requests of {write_chunk} B, sha256 {sha256}")
    })
    .await?;

    // The second channel: another connection, same ClientGuid, session bound to it.
    let t = Instant::now();
    // The TLS server name (QUIC) is --server's: the address is another one.
    let conn2 = Connection::build(&args.server, second_addr, client_guid, config2)
        .map_err(smb_err("second connection"))?;
    let via = format!("{} to {second_addr}", second.transport.name());
    within(limit, "bind", async {
        conn2.connect().await.map_err(smb_err(format!("connect ({via})")))
    })
    .await?;
    // Negotiated before the bind: reported even when the server refuses it.
    let info2 = conn2.conn_info().context("second connection has no negotiated state")?;
    let neg2 = Negotiated::of(&info2.negotiation);
    let max_read2 = info2.negotiation.max_read_size;
    let bound_id = within(limit, "bind", async {
        conn2.bind_session(&session, identity.clone()).await.map_err(smb_err(format!(
            "bind session {:#x} ({} to {primary_addr}, {}) to the connection ({via}, {})",
            session.session_id(),
            args.transport.name(),
            Negotiated::of(neg).describe(),
            neg2.describe()
        )))
    })
    .await?;
    if let Some(mc) = report.multichannel.as_mut() {
        mc.channels.push(ChannelStats::of_connection(
            bound_id,
            "bound",
            second_addr,
            second.transport,
            &info2.negotiation,
        ));
    }
    report.record(
        "bind",
        t,
        None,
        format!(
            "{via}, {}, max read {max_read2} B, session {:#x} bound as channel {bound_id}",
            neg2.describe(),
            session.session_id()
        ),
    );
    ensure!(bound_id != primary_id, "the bound channel has the primary's id {primary_id}");

    let read_size = (args.chunk_mib as usize * ONE_MIB).min(neg.max_read_size as usize).min(max_read2 as usize);
    ensure!(
        read_size > ONE_MIB,
        "negotiated MaxReadSize {} / {max_read2} B leaves no READ larger than 1 MiB",
        neg.max_read_size
    );
    report.chunk = Some(read_size);
    read_back(args, report, &at, name, size, read_size, &[primary_id, bound_id], limit).await?;

    delete_file(&at, name, limit, report).await?;

    let t = Instant::now();
    within(limit, "disconnect", async {
        tree.disconnect().await.map_err(smb_err("tree disconnect"))?;
        session.logoff().await.map_err(smb_err("logoff"))?;
        conn2.close().await.map_err(smb_err("close second connection"))?;
        conn1.close().await.map_err(smb_err("close primary connection"))
    })
    .await?;
    report.record("disconnect", t, None, String::new());
    Ok(())
}

/// smb-rs's own multichannel: whatever channels `share_connect` sets up.
async fn run_auto(
    args: &Args,
    report: &mut Report,
    config: ConnectionConfig,
    name: &str,
    size: u64,
    limit: Duration,
) -> Result<()> {
    report.multichannel = Some(McReport { mode: "auto", ..Default::default() });
    let client = Client::new(ClientConfig { dfs: false, connection: config, ..Default::default() });
    let share = args.share_path()?;

    let t = Instant::now();
    let (conn, info) = connect_client(&client, &share, args, report).await?;
    let neg = &info.negotiation;
    let session = client.get_session(&share).await.map_err(smb_err("session"))?;
    let primary_id = session.channel_id();
    let channels = client.get_channels(&share).await.map_err(smb_err("channels"))?;
    let mut ids: Vec<u32> = channels.keys().copied().collect();
    ids.sort_unstable();

    // What the server lists (smb-rs only logs it); IPC$ is connected already
    // if smb-rs got as far as asking, and connecting it again is a no-op.
    let interfaces = async {
        client.ipc_connect(&args.server, &args.user, args.password.clone()).await?;
        let ipc = client.get_tree(&UncPath::ipc_share(&args.server)?).await?;
        ipc.as_ipc_tree()?.query_network_interfaces().await
    };
    let interfaces = match within(limit, "interfaces", async { interfaces.await.map_err(smb_err("query")) }).await {
        Ok(list) => list
            .iter()
            .map(|i| {
                json!({
                    "if_index": i.if_index, "address": i.sockaddr.socket_addr().to_string(),
                    "link_speed": i.link_speed, "rss": i.capability.rss(), "rdma": i.capability.rdma(),
                })
            })
            .collect(),
        Err(e) => vec![json!({"error": format!("{e:#}")})],
    };
    if let Some(mc) = report.multichannel.as_mut() {
        mc.session_id = Some(session.session_id());
        mc.interfaces = Some(interfaces);
        for &id in &ids {
            let primary = id == primary_id;
            mc.channels.push(ChannelStats::new(
                id,
                if primary { "primary" } else { "auto" },
                primary.then(|| info.server_address.to_string()),
                primary.then_some(neg.max_read_size),
            ));
        }
    }
    report.record(
        "connect",
        t,
        None,
        format!("tcp to {}, {} channel(s) {ids:?}, primary {primary_id}", info.server_address, ids.len()),
    );
    ensure!(
        ids.len() >= 2,
        "smb-rs set up no further channel (it binds to listed interfaces other than the one it is connected to; \
         see multichannel.interfaces, and RUST_LOG=smb=debug for its reason)"
    );

    let tree = client.get_tree(&share).await.map_err(smb_err("tree"))?;
    let at = ShareRoot::Tree(&tree);
    let write_chunk = (args.chunk_mib as usize * ONE_MIB).min(neg.max_write_size as usize);
    write_file(&at, name, args, size, write_chunk, report, |n, sha256| {
        format!("{n} requests of {write_chunk} B, sha256 {sha256}")
    })
    .await?;
    let read_size = (args.chunk_mib as usize * ONE_MIB).min(neg.max_read_size as usize);
    ensure!(read_size > ONE_MIB, "negotiated MaxReadSize {} B leaves no READ larger than 1 MiB", neg.max_read_size);
    report.chunk = Some(read_size);
    read_back(args, report, &at, name, size, read_size, &ids, limit).await?;
    delete_file(&at, name, limit, report).await?;

    let t = Instant::now();
    drop((tree, session, conn));
    within(limit, "disconnect", async { client.close().await.map_err(smb_err("disconnect")) }).await?;
    report.record("disconnect", t, None, String::new());
    Ok(())
}

/// Reads exactly `buf.len()` bytes at `off` over `channel`; returns the size
/// of every READ response (more than one after a short read).
async fn read_full_on(file: &File, buf: &mut [u8], off: u64, channel: u32) -> Result<Vec<usize>> {
    let mut done = 0;
    let mut answered = Vec::with_capacity(1);
    while done < buf.len() {
        let at = off + done as u64;
        let n = file
            .read_at_channel(&mut buf[done..], at, Some(channel))
            .await
            .map_err(|e| anyhow!("READ of {} B at offset {at} on channel {channel}: {e}", buf.len() - done))?;
        ensure!(n > 0, "READ at offset {at} on channel {channel}: end of file, {} bytes short", buf.len() - done);
        answered.push(n);
        done += n;
    }
    Ok(answered)
}

/// Reopens `name` (a handle reads nothing past the size it was opened with)
/// and reads it back, request `i` over `channels[i % channels.len()]`.
#[allow(clippy::too_many_arguments)]
async fn read_back(
    args: &Args,
    report: &mut Report,
    at: &ShareRoot<'_>,
    name: &str,
    size: u64,
    read_size: usize,
    channels: &[u32],
    limit: Duration,
) -> Result<()> {
    ensure!(!channels.is_empty(), "no channel to read over");
    if let Some(mc) = report.multichannel.as_mut() {
        mc.read_size = Some(read_size);
    }
    let t = Instant::now();
    let file = open_written(at, name, size, limit).await?;
    let mut check = ReadCheck::new(args.seed);
    let file_ref = &file;
    let mut reads = stream::iter(chunks(size, read_size).into_iter().enumerate())
        .map(|(i, (off, len))| {
            let channel = channels[i % channels.len()];
            async move {
                let mut buf = vec![0u8; len];
                let answered = within(limit, "READ", read_full_on(file_ref, &mut buf, off, channel)).await?;
                Ok::<_, anyhow::Error>((off, channel, buf, answered))
            }
        })
        .buffered(args.depth);
    let mut failure = None;
    while let Some(r) = reads.next().await {
        let (off, channel, buf, answered) = match r {
            Ok(v) => v,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        if let Some(c) = report.multichannel.as_mut().and_then(|mc| mc.channel_mut(channel)) {
            answered.iter().for_each(|&n| c.count(n));
        }
        check.update(off, &buf);
    }
    drop(reads);
    if let Some(e) = failure {
        return Err(e);
    }
    let read = check.finish(file, limit, report).await?;
    let per_channel = report
        .multichannel
        .as_ref()
        .map(|mc| {
            mc.channels
                .iter()
                .map(|c| {
                    let over = c.transport.map(|t| format!(", {t}")).unwrap_or_default();
                    format!("channel {} ({}{over}): {} READs, {} B", c.id, c.role, c.reads, c.bytes)
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default();
    report.record("read", t, Some(size), format!("{read_size} B per READ; {per_channel}; sha256 {}", read.sha256));
    read.verdict(report)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let base = ["smbrs-client", "--transport", "tcp", "--port", "445", "--user", "u", "--password", "p"];
        <Args as clap::Parser>::try_parse_from(base.iter().chain(extra)).unwrap()
    }

    #[test]
    fn second_connection_defaults_to_the_primary_transport_and_port() {
        let tcp = Second { transport: Transport::Tcp, port: 445 };
        assert_eq!(second_of(&args(&["--multichannel"])).unwrap(), tcp);
        let quic = ["--multichannel", "--second-transport", "quic", "--second-port", "4443", "--root-cert", "c.pem"];
        assert_eq!(second_of(&args(&quic)).unwrap(), Second { transport: Transport::Quic, port: 4443 });
        // Another transport needs its own port; a root certificate needs a QUIC connection.
        assert!(second_of(&args(&["--multichannel", "--second-transport", "quic"])).is_err());
        assert!(second_of(&args(&["--multichannel", "--root-cert", "c.pem"])).is_err());
        // The second connection's options belong to --multichannel.
        let base = ["smbrs-client", "--transport", "tcp", "--port", "1", "--user", "u", "--password", "p"];
        assert!(<Args as clap::Parser>::try_parse_from(base.iter().chain(&["--second-port", "2"])).is_err());
    }

    #[test]
    fn only_reads_over_one_mib_count_as_large() {
        let mut c = ChannelStats::new(1, "bound", None, None);
        c.count(ONE_MIB);
        c.count(ONE_MIB + 1);
        c.count(4 * ONE_MIB);
        assert_eq!((c.reads, c.bytes, c.reads_over_1mib), (3, 6 * ONE_MIB as u64 + 1, 2));
        assert_eq!(c.largest_read, 4 * ONE_MIB as u64);
    }
}
