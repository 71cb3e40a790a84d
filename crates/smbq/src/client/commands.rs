//! `smbq ls | rm | mkdir | rmdir | mv | cat | stat | shares`, and with the
//! SMB3 POSIX extensions `chmod | chown | ln -s | readlink`: one
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
    /// With --posix: `ls -l` lines (mode, links, uid, gid, size, time, name, `-> target`).
    #[arg(short = 'l', long = "long")]
    pub long: bool,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args)]
pub struct ChmodArgs {
    /// Permission bits in octal (755, 0644, 1777).
    pub mode: String,
    /// smb:// URLs, all on one share.
    #[arg(required = true)]
    pub urls: Vec<String>,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args)]
pub struct ChownArgs {
    /// UID, UID:GID or :GID (numbers).
    pub owner: String,
    /// smb:// URLs, all on one share.
    #[arg(required = true)]
    pub urls: Vec<String>,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args)]
pub struct LnArgs {
    /// Make a symbolic link (the only kind there is here).
    #[arg(short = 's', long = "symbolic")]
    pub symbolic: bool,
    /// What the link points at, stored as given (relative to the link's directory unless it starts with /).
    pub target: String,
    /// smb:// URL of the link to make.
    pub url: String,
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
    /// With --posix.
    #[serde(flatten)]
    pub posix: Option<PosixEntry>,
}

/// What `--json` adds with `--posix`.
#[derive(Serialize)]
pub struct PosixEntry {
    /// `file`, `directory`, `symlink`, `fifo`, `socket`, `char-device`, `block-device`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Permission bits (with setuid, setgid, sticky), as a number.
    pub mode: u32,
    /// Owner and group ids (null when the server names them by other SIDs), and their SIDs.
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub owner: String,
    pub group: String,
    pub links: u32,
    /// A symlink's target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl Entry {
    /// `target`: a symlink's, when known.
    pub fn of(i: &FileInfo, target: Option<String>) -> Entry {
        let secs = |ft| system_time(ft).duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        let posix = i.posix.as_ref().map(|p| PosixEntry {
            kind: file_type(p.mode),
            mode: p.mode & PERMISSIONS,
            uid: p.uid,
            gid: p.gid,
            owner: p.owner.to_string(),
            group: p.group.to_string(),
            links: i.links,
            target,
        });
        Entry { name: i.name.clone(), dir: i.is_dir(), size: i.size, attributes: i.attributes, modified: secs(i.written), created: secs(i.created), file_id: i.file_id, posix }
    }
}

/// Permission bits, setuid, setgid and sticky.
const PERMISSIONS: u32 = 0o7777;

/// The file type of an `st_mode`, by name.
fn file_type(mode: u32) -> &'static str {
    match mode & 0o170000 {
        0o040000 => "directory",
        0o120000 => "symlink",
        0o010000 => "fifo",
        0o140000 => "socket",
        0o020000 => "char-device",
        0o060000 => "block-device",
        _ => "file",
    }
}

/// An `st_mode` as `ls -l` shows it: `drwxr-xr-x`, `-rwsr-sr-t`, `lrwxrwxrwx`.
pub fn mode_string(mode: u32) -> String {
    let kind = match mode & 0o170000 {
        0o040000 => 'd',
        0o120000 => 'l',
        0o010000 => 'p',
        0o140000 => 's',
        0o020000 => 'c',
        0o060000 => 'b',
        _ => '-',
    };
    let mut out = String::from(kind);
    // (who's bits, the special bit that shows in its x column, its letter)
    for (shift, special, letter) in [(6, 0o4000, 's'), (3, 0o2000, 's'), (0, 0o1000, 't')] {
        let bits = mode >> shift & 7;
        out.push(if bits & 4 != 0 { 'r' } else { '-' });
        out.push(if bits & 2 != 0 { 'w' } else { '-' });
        out.push(match (bits & 1 != 0, mode & special != 0) {
            (true, true) => letter,
            (false, true) => letter.to_ascii_uppercase(),
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    out
}

/// A uid or gid as `ls -n` prints it, or the SID when it names no Unix id.
fn id_or_sid(id: Option<u32>, sid: &smbq_wire::security::Sid) -> String {
    id.map_or_else(|| sid.to_string(), |n| n.to_string())
}

/// `drwxr-xr-x   2  1000  1000       4096 2026-11-26 15:04 name -> target`
fn posix_line(e: &FileInfo, target: Option<&str>) -> String {
    let (mode, uid, gid) = match &e.posix {
        Some(p) => (mode_string(p.mode), id_or_sid(p.uid, &p.owner), id_or_sid(p.gid, &p.group)),
        None => ("?---------".into(), "?".into(), "?".into()),
    };
    let arrow = target.map(|t| format!(" -> {t}")).unwrap_or_default();
    format!("{mode} {:>3} {uid:>5} {gid:>5} {:>10} {} {}{arrow}", e.links, e.size, utc(e.written), e.name)
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

/// Entries (and their symlink targets) as one JSON array on stdout.
fn print_json(out: &mut impl Write, entries: &[FileInfo], targets: &[Option<String>]) -> anyhow::Result<()> {
    let all: Vec<Entry> = entries.iter().enumerate().map(|(n, i)| Entry::of(i, targets.get(n).cloned().flatten())).collect();
    serde_json::to_writer_pretty(&mut *out, &all)?;
    writeln!(out)?;
    Ok(())
}

/// The target of each symlink among `entries` (at `paths` in the share),
/// none for the others.
async fn targets(s: &mut Share, entries: &[FileInfo], paths: &[String]) -> anyhow::Result<Vec<Option<String>>> {
    let mut out = Vec::with_capacity(entries.len());
    for (e, path) in entries.iter().zip(paths) {
        out.push(if e.is_symlink() { Some(s.readlink(path).await.with_context(|| format!("reading the symlink {path}"))?) } else { None });
    }
    Ok(out)
}

pub async fn ls(a: LsArgs) -> anyhow::Result<()> {
    let (urls, mut s) = one_share(&a.conn, std::slice::from_ref(&a.url)).await?;
    let u = &urls[0];
    let (dir, pattern) = if has_wildcard(u.file_name()) {
        (u.path.rsplit_once('/').map(|(d, _)| d).unwrap_or("").to_string(), u.file_name().to_string())
    } else {
        (u.path.clone(), "*".to_string())
    };
    let (entries, one) = if pattern == "*" {
        let info = s.stat(&dir).await.with_context(|| format!("{u}"))?;
        if info.is_dir() {
            (s.list(&dir, "*").await?, false)
        } else {
            (vec![info], true)
        }
    } else {
        (s.list(&dir, &pattern).await?, false)
    };
    let mut entries = entries;
    entries.sort_by(|x, y| x.name.cmp(&y.name));
    let posix_long = s.posix && (a.long || a.json);
    let targets = if posix_long {
        let paths: Vec<String> = entries.iter().map(|e| if one { u.path.clone() } else { join(&dir, &e.name) }).collect();
        targets(&mut s, &entries, &paths).await?
    } else {
        Vec::new()
    };
    let mut out = std::io::stdout().lock();
    if a.json {
        print_json(&mut out, &entries, &targets)?;
    } else if posix_long {
        for (e, t) in entries.iter().zip(&targets) {
            writeln!(out, "{}", posix_line(e, t.as_deref()))?;
        }
    } else {
        for e in &entries {
            writeln!(out, "{}", long_line(e))?;
        }
    }
    Ok(())
}

/// `dir/name` in the share (`name` at its root).
fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
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
    let paths: Vec<String> = urls.iter().map(|u| u.path.clone()).collect();
    let targets = if s.posix { targets(&mut s, &all, &paths).await? } else { Vec::new() };
    let mut out = std::io::stdout().lock();
    if a.json {
        return print_json(&mut out, &all, &targets);
    }
    for (n, (u, i)) in urls.iter().zip(&all).enumerate() {
        let kind = match &i.posix {
            Some(p) => file_type(p.mode),
            None if i.is_dir() => "directory",
            None => "file",
        };
        writeln!(out, "{u}\n  type: {kind}\n  size: {}\n  allocated: {}\n  attributes: 0x{:08x}\n  modified: {}\n  created: {}\n  file id: {}\n  links: {}", i.size, i.allocation, i.attributes, utc(i.written) + " UTC", utc(i.created) + " UTC", i.file_id, i.links)?;
        if let Some(p) = &i.posix {
            writeln!(out, "  mode: {:04o} ({})\n  uid: {}\n  gid: {}", p.mode & PERMISSIONS, mode_string(p.mode), id_or_sid(p.uid, &p.owner), id_or_sid(p.gid, &p.group))?;
        }
        if let Some(Some(t)) = targets.get(n) {
            writeln!(out, "  target: {t}")?;
        }
    }
    Ok(())
}

/// Parse URLs on one share as [`one_share`] does, after checking that
/// `--posix` was given, which `command` needs.
async fn posix_share(conn: &ConnectArgs, args: &[String], command: &str) -> anyhow::Result<(Vec<SmbUrl>, Share)> {
    conn.require_posix(command)?;
    one_share(conn, args).await
}

/// An octal mode: `755`, `0644`, `1777`.
fn parse_mode(s: &str) -> Result<u32, ClientError> {
    u32::from_str_radix(s, 8).ok().filter(|m| !s.is_empty() && !s.starts_with(['+', '-']) && *m <= PERMISSIONS).ok_or_else(|| ClientError::Usage(format!("mode {s:?} is not octal permission bits (as 755 or 0644)")))
}

/// `UID`, `UID:GID` or `:GID` (numbers).
fn parse_owner(s: &str) -> Result<(Option<u32>, Option<u32>), ClientError> {
    let bad = || ClientError::Usage(format!("owner {s:?} is not UID, UID:GID or :GID (numbers)"));
    let id = |t: &str| if t.is_empty() { Ok(None) } else { t.parse::<u32>().map(Some).map_err(|_| bad()) };
    let (uid, gid) = match s.split_once(':') {
        Some((u, g)) => (id(u)?, id(g)?),
        None => (id(s)?, None),
    };
    if uid.is_none() && gid.is_none() {
        return Err(bad());
    }
    Ok((uid, gid))
}

pub async fn chmod(a: ChmodArgs) -> anyhow::Result<()> {
    let mode = parse_mode(&a.mode)?;
    let (urls, mut s) = posix_share(&a.conn, &a.urls, "chmod").await?;
    for u in &urls {
        s.chmod(&u.path, mode).await.with_context(|| format!("{u}"))?;
    }
    Ok(())
}

pub async fn chown(a: ChownArgs) -> anyhow::Result<()> {
    let (uid, gid) = parse_owner(&a.owner)?;
    let (urls, mut s) = posix_share(&a.conn, &a.urls, "chown").await?;
    for u in &urls {
        s.chown(&u.path, uid, gid).await.with_context(|| format!("{u}"))?;
    }
    Ok(())
}

pub async fn ln(a: LnArgs) -> anyhow::Result<()> {
    if !a.symbolic {
        anyhow::bail!(ClientError::Usage("only symbolic links can be made: ln -s TARGET URL".into()));
    }
    if a.target.is_empty() {
        anyhow::bail!(ClientError::Usage("the symlink's target is empty".into()));
    }
    let (urls, mut s) = posix_share(&a.conn, std::slice::from_ref(&a.url), "ln -s").await?;
    let u = &urls[0];
    if u.path.is_empty() {
        anyhow::bail!(ClientError::Usage(format!("{u} is the share's root")));
    }
    s.symlink(&a.target, &u.path).await.with_context(|| format!("{u} -> {}", a.target))?;
    Ok(())
}

pub async fn readlink(a: UrlsArgs) -> anyhow::Result<()> {
    let (urls, mut s) = posix_share(&a.conn, &a.urls, "readlink").await?;
    let mut all = Vec::new();
    for u in &urls {
        all.push(s.readlink(&u.path).await.with_context(|| format!("{u}"))?);
    }
    let mut out = std::io::stdout().lock();
    if a.json {
        let rows: Vec<_> = urls.iter().zip(&all).map(|(u, t)| serde_json::json!({"url": u.to_string(), "target": t})).collect();
        serde_json::to_writer_pretty(&mut out, &rows)?;
        writeln!(out)?;
    } else {
        for t in &all {
            writeln!(out, "{t}")?;
        }
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
        // Answers to different READs may come in any order (over several
        // QUIC streams they do): pieces ahead of the next byte to write
        // wait here, at most `depth` READs' worth.
        let mut next = 0u64;
        let mut ahead: std::collections::BTreeMap<u64, Vec<u8>> = Default::default();
        let r = s
            .client()
            .read_range(h.fid, 0, h.info.size, chunk, depth, |off, piece| {
                if off != next {
                    ahead.insert(off, piece.to_vec());
                    return Ok(());
                }
                out.write_all(piece).inspect_err(|e| failed = Some(e.kind()))?;
                next += piece.len() as u64;
                while let Some(p) = ahead.remove(&next) {
                    out.write_all(&p).inspect_err(|e| failed = Some(e.kind()))?;
                    next += p.len() as u64;
                }
                Ok(())
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

    #[test]
    fn modes_print_as_ls_does() {
        assert_eq!(mode_string(0o040755), "drwxr-xr-x");
        assert_eq!(mode_string(0o100644), "-rw-r--r--");
        assert_eq!(mode_string(0o120777), "lrwxrwxrwx");
        assert_eq!(mode_string(0o104755), "-rwsr-xr-x");
        assert_eq!(mode_string(0o102644), "-rw-r-Sr--");
        assert_eq!(mode_string(0o041777), "drwxrwxrwt");
        assert_eq!(mode_string(0o041776), "drwxrwxrwT");
        assert_eq!(mode_string(0o010600), "prw-------");
        assert_eq!(mode_string(0o140000), "s---------");
        assert_eq!(mode_string(0o020620), "crw--w----");
        assert_eq!(mode_string(0o060660), "brw-rw----");
        assert_eq!((file_type(0o120777), file_type(0o100600), file_type(0)), ("symlink", "file", "file"));
    }

    #[test]
    fn posix_lines_and_json() {
        use smbq_client::share::Posix;
        use smbq_wire::posix::{unix_group_sid, unix_user_sid};
        let written = smbq_client::share::filetime(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_764_165_900));
        let p = Posix { mode: 0o120777, uid: Some(1000), gid: Some(100), owner: unix_user_sid(1000), group: unix_group_sid(100), reparse_tag: smbq_wire::posix::REPARSE_TAG_SYMLINK };
        let e = FileInfo { name: "l".into(), written, size: 3, links: 1, posix: Some(p.clone()), ..FileInfo::default() };
        assert_eq!(posix_line(&e, Some("a/b")), "lrwxrwxrwx   1  1000   100          3 2025-11-26 14:05 l -> a/b");
        let foreign = Posix { uid: None, owner: smbq_wire::security::Sid::new(5, &[21, 1, 2, 3, 500]), ..p };
        let e2 = FileInfo { posix: Some(foreign), ..e.clone() };
        assert!(posix_line(&e2, None).contains(" S-1-5-21-1-2-3-500   100 "), "{}", posix_line(&e2, None));
        let j = serde_json::to_value(Entry::of(&e, Some("a/b".into()))).unwrap();
        assert_eq!((j["type"].as_str(), j["mode"].as_u64(), j["uid"].as_u64(), j["target"].as_str()), (Some("symlink"), Some(0o777), Some(1000), Some("a/b")));
        // Without POSIX information the JSON is what it always was.
        let plain = serde_json::to_value(Entry::of(&FileInfo::default(), None)).unwrap();
        assert!(plain.get("mode").is_none() && plain.get("type").is_none());
    }

    #[test]
    fn modes_and_owners_parse() {
        assert_eq!(parse_mode("755").unwrap(), 0o755);
        assert_eq!(parse_mode("0644").unwrap(), 0o644);
        assert_eq!(parse_mode("1777").unwrap(), 0o1777);
        for bad in ["", "8", "u+x", "17777", "+7", "-7", "99999999999"] {
            assert!(parse_mode(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_owner("1000").unwrap(), (Some(1000), None));
        assert_eq!(parse_owner("1000:100").unwrap(), (Some(1000), Some(100)));
        assert_eq!(parse_owner(":100").unwrap(), (None, Some(100)));
        assert_eq!(parse_owner("0:").unwrap(), (Some(0), None));
        for bad in ["", ":", "root", "1000:staff", "-1", "1:2:3", "4294967296"] {
            assert!(parse_owner(bad).is_err(), "{bad}");
        }
    }
}
