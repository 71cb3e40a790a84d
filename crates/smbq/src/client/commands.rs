//! `smbq ls | rm | mkdir | rmdir | mv | cat | stat | shares`: one
//! connection, one request or a few per argument.

use super::{url, ConnectArgs};
use anyhow::Context;
use clap::Args;
use serde::Serialize;
use smbq_client::share::{system_time, FileInfo, Share};
use smbq_client::url::SmbUrl;
use smbq_client::ClientError;
use std::io::Write;

#[derive(Args)]
pub struct LsArgs {
    /// smb://[user@]host[:port]/share[/dir or /dir/pattern with * and ?]
    pub url: String,
    /// One JSON array of entries on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args)]
pub struct UrlsArgs {
    /// smb:// URLs, all on one share.
    #[arg(required = true)]
    pub urls: Vec<String>,
    /// JSON on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args)]
pub struct MvArgs {
    pub from: String,
    pub to: String,
    /// Replace `to` if it exists.
    #[arg(long, short = 'f')]
    pub force: bool,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args)]
pub struct SharesArgs {
    /// smb://[user@]host[:port]
    pub url: String,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

/// An entry as `--json` prints it.
#[derive(Serialize)]
pub struct Entry {
    pub name: String,
    pub dir: bool,
    pub size: u64,
    pub attributes: u32,
    /// Seconds since 1970 (UTC).
    pub modified: f64,
    pub created: f64,
    pub file_id: u64,
}

impl Entry {
    pub fn of(i: &FileInfo) -> Entry {
        let secs = |ft| system_time(ft).duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        Entry { name: i.name.clone(), dir: i.is_dir(), size: i.size, attributes: i.attributes, modified: secs(i.written), created: secs(i.created), file_id: i.file_id }
    }
}

fn has_wildcard(s: &str) -> bool {
    s.contains(['*', '?', '<', '>', '"'])
}

/// Parse URLs on one server and share, and connect once for them all.
async fn one_share(conn: &ConnectArgs, args: &[String]) -> anyhow::Result<(Vec<SmbUrl>, Share)> {
    let urls: Vec<SmbUrl> = args.iter().map(|u| url(u)).collect::<Result<_, _>>()?;
    let first = urls.first().ok_or_else(|| ClientError::Usage("no URL".into()))?;
    if let Some(u) = urls.iter().find(|u| (&u.host, u.port, &u.share) != (&first.host, first.port, &first.share)) {
        anyhow::bail!(ClientError::Usage(format!("{u} is on another server or share than {first}: give one share per command")));
    }
    let o = conn.options(first)?;
    let s = conn.share(first, &o).await?;
    Ok((urls, s))
}

/// Entries as one JSON array on stdout.
fn print_json(out: &mut impl Write, entries: &[FileInfo]) -> anyhow::Result<()> {
    serde_json::to_writer_pretty(&mut *out, &entries.iter().map(Entry::of).collect::<Vec<_>>())?;
    writeln!(out)?;
    Ok(())
}

pub async fn ls(a: LsArgs) -> anyhow::Result<()> {
    let (urls, mut s) = one_share(&a.conn, std::slice::from_ref(&a.url)).await?;
    let u = &urls[0];
    let (dir, pattern) = if has_wildcard(u.file_name()) {
        (u.path.rsplit_once('/').map(|(d, _)| d).unwrap_or("").to_string(), u.file_name().to_string())
    } else {
        (u.path.clone(), "*".to_string())
    };
    let entries = if pattern == "*" {
        let info = s.stat(&dir).await.with_context(|| format!("{u}"))?;
        if info.is_dir() {
            s.list(&dir, "*").await?
        } else {
            vec![info]
        }
    } else {
        s.list(&dir, &pattern).await?
    };
    let mut entries = entries;
    entries.sort_by(|x, y| x.name.cmp(&y.name));
    let mut out = std::io::stdout().lock();
    if a.json {
        print_json(&mut out, &entries)?;
    } else {
        for e in &entries {
            writeln!(out, "{}", long_line(e))?;
        }
    }
    Ok(())
}

/// `d  1048576  2026-11-26 15:04  name`
fn long_line(e: &FileInfo) -> String {
    format!("{} {:>14}  {}  {}{}", if e.is_dir() { 'd' } else { '-' }, e.size, utc(e.written), e.name, if e.is_dir() { "/" } else { "" })
}

/// A FILETIME as `2026-11-26 15:04` (UTC).
fn utc(filetime: u64) -> String {
    let t = system_time(filetime).duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let (days, rem) = (t.div_euclid(86400), t.rem_euclid(86400));
    let (y, m, d) = civil(days);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}", rem / 3600, rem % 3600 / 60)
}

/// Days since 1970-01-01 as (year, month, day) (H. Hinnant's civil_from_days).
fn civil(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

pub async fn stat(a: UrlsArgs) -> anyhow::Result<()> {
    let (urls, mut s) = one_share(&a.conn, &a.urls).await?;
    let mut all = Vec::new();
    for u in &urls {
        let mut info = s.stat(&u.path).await.with_context(|| format!("{u}"))?;
        info.name = u.file_name().to_string();
        all.push(info);
    }
    let mut out = std::io::stdout().lock();
    if a.json {
        return print_json(&mut out, &all);
    }
    for (u, i) in urls.iter().zip(&all) {
        writeln!(out, "{u}\n  type: {}\n  size: {}\n  allocated: {}\n  attributes: 0x{:08x}\n  modified: {}\n  created: {}\n  file id: {}\n  links: {}", if i.is_dir() { "directory" } else { "file" }, i.size, i.allocation, i.attributes, utc(i.written) + " UTC", utc(i.created) + " UTC", i.file_id, i.links)?;
    }
    Ok(())
}

/// What `rm`, `mkdir` and `rmdir` do to each URL.
#[derive(Clone, Copy)]
pub enum Each {
    Remove,
    Mkdir,
    Rmdir,
}

pub async fn each(a: UrlsArgs, what: Each) -> anyhow::Result<()> {
    let (urls, mut s) = one_share(&a.conn, &a.urls).await?;
    for u in &urls {
        if u.path.is_empty() {
            anyhow::bail!(ClientError::Usage(format!("{u} is the share's root")));
        }
        let r = match what {
            Each::Remove => s.remove(&u.path).await,
            Each::Mkdir => s.mkdir(&u.path).await,
            Each::Rmdir => s.rmdir(&u.path).await,
        };
        r.with_context(|| format!("{u}"))?;
    }
    Ok(())
}

pub async fn mv(a: MvArgs) -> anyhow::Result<()> {
    let (urls, mut s) = one_share(&a.conn, &[a.from.clone(), a.to.clone()]).await?;
    let (from, to) = (&urls[0], urls[1].clone());
    // Into a directory that exists: keep the name, as mv(1) does.
    let target = match s.stat(&to.path).await {
        Ok(i) if i.is_dir() => to.join(from.file_name()),
        _ => to,
    };
    s.rename(&from.path, &target.smb_path(), a.force).await.with_context(|| format!("{from} -> {target}"))?;
    Ok(())
}

pub async fn cat(a: UrlsArgs) -> anyhow::Result<()> {
    let (urls, mut s) = one_share(&a.conn, &a.urls).await?;
    let mut out = std::io::stdout().lock();
    for u in &urls {
        let h = s.open_read(&u.path).await.with_context(|| format!("{u}"))?;
        let (chunk, depth) = (s.chunk, s.depth);
        let mut failed = None;
        let r = s
            .client()
            .read_range(h.fid, 0, h.info.size, chunk, depth, |_, piece| {
                // Pieces come in order only within one READ: cat asks one at a time.
                out.write_all(piece).inspect_err(|e| failed = Some(e.kind()))
            })
            .await;
        s.close(h.fid).await.ok();
        if failed == Some(std::io::ErrorKind::BrokenPipe) {
            return Ok(());
        }
        r.with_context(|| format!("{u}"))?;
    }
    out.flush()?;
    Ok(())
}

pub async fn shares(a: SharesArgs) -> anyhow::Result<()> {
    let u = url(&a.url)?;
    let o = a.conn.options(&u)?;
    let list = smbq_client::share::list_shares(&u.host, u.port, &o).await.with_context(|| format!("listing the shares of {}", u.host))?;
    let mut out = std::io::stdout().lock();
    if a.json {
        let rows: Vec<_> = list.iter().map(|s| serde_json::json!({"name": s.name, "type": smbq_client::srvsvc::kind_name(s.kind), "comment": s.comment})).collect();
        serde_json::to_writer_pretty(&mut out, &rows)?;
        writeln!(out)?;
    } else {
        for s in &list {
            writeln!(out, "{:<24} {:<8} {}", s.name, smbq_client::srvsvc::kind_name(s.kind), s.comment)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_print_as_utc_calendar_days() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(20_418), (2025, 11, 26));
        assert_eq!(civil(11_016), (2000, 2, 29));
        let e = FileInfo { name: "x".into(), written: smbq_client::share::filetime(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_764_165_900)), size: 5, ..FileInfo::default() };
        assert_eq!(long_line(&e), "-              5  2025-11-26 14:05  x");
    }
}
