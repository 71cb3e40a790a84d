//! `smb://[user@]host[:port]/share[/path]` URLs, as smbclient, GNOME and
//! macOS write them (the `smb` URI scheme draft): the host may be a name,
//! an IPv4 address or a bracketed IPv6 address; `%XX` escapes are decoded
//! in the user, share and path.

use crate::ClientError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmbUrl {
    pub user: Option<String>,
    pub host: String,
    pub port: Option<u16>,
    pub share: String,
    /// Path inside the share, `/`-separated, without leading or trailing `/`.
    pub path: String,
}

impl SmbUrl {
    /// Parse a URL; the share may be absent only when `share_optional` (share listing).
    pub fn parse(s: &str) -> Result<SmbUrl, ClientError> {
        let bad = |why: &str| ClientError::Usage(format!("{s:?} is not an smb:// URL: {why}"));
        let rest = s.strip_prefix("smb://").or_else(|| s.strip_prefix("SMB://")).ok_or_else(|| bad("it must start with smb://"))?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (user, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(decode(u).map_err(|e| bad(&e))?).filter(|u| !u.is_empty()), h),
            None => (None, authority),
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| bad("unclosed [ in the host"))?;
            (h.to_string(), after.strip_prefix(':'))
        } else {
            match hostport.split_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (hostport.to_string(), None),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = match port {
            Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| bad("the port must be 1-65535"))?),
            None => None,
        };
        let mut parts = path.split('/').filter(|p| !p.is_empty());
        let share = decode(parts.next().unwrap_or("")).map_err(|e| bad(&e))?;
        let rest: Vec<String> = parts.map(decode).collect::<Result<_, _>>().map_err(|e| bad(&e))?;
        if rest.iter().any(|p| p == "." || p == "..") {
            return Err(bad("`.` and `..` are not allowed in the path"));
        }
        Ok(SmbUrl { user, host, port, share, path: rest.join("/") })
    }

    /// The path as SMB2 CREATE wants it: `\`-separated, relative to the share.
    pub fn smb_path(&self) -> String {
        to_smb_path(&self.path)
    }

    /// `\\host\share` for TREE_CONNECT.
    pub fn unc(&self) -> String {
        format!("\\\\{}\\{}", self.host, self.share)
    }

    /// The same URL with `name` appended to the path.
    pub fn join(&self, name: &str) -> SmbUrl {
        let path = if self.path.is_empty() { name.to_string() } else { format!("{}/{name}", self.path) };
        SmbUrl { path, ..self.clone() }
    }

    /// The last path component (empty at the share's root).
    pub fn file_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or("")
    }
}

impl std::fmt::Display for SmbUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "smb://")?;
        if let Some(u) = &self.user {
            write!(f, "{u}@")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            write!(f, "{}", self.host)?;
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        write!(f, "/{}", self.share)?;
        if !self.path.is_empty() {
            write!(f, "/{}", self.path)?;
        }
        Ok(())
    }
}

/// `a/b/c` as `a\b\c`.
pub fn to_smb_path(p: &str) -> String {
    p.split('/').filter(|c| !c.is_empty()).collect::<Vec<_>>().join("\\")
}

fn decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u8::from_str_radix(h, 16).ok());
            out.push(hex.ok_or_else(|| format!("bad %-escape at byte {i}"))?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "%-escapes that are not UTF-8".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_people_write() {
        let u = SmbUrl::parse("smb://alice@files.example:8443/data/dir/a%20b.txt").unwrap();
        assert_eq!(u, SmbUrl { user: Some("alice".into()), host: "files.example".into(), port: Some(8443), share: "data".into(), path: "dir/a b.txt".into() });
        assert_eq!(u.smb_path(), "dir\\a b.txt");
        assert_eq!(u.unc(), "\\\\files.example\\data");
        assert_eq!(u.file_name(), "a b.txt");
        let v6 = SmbUrl::parse("smb://[::1]:4445/s/").unwrap();
        assert_eq!((v6.host.as_str(), v6.port, v6.share.as_str(), v6.path.as_str()), ("::1", Some(4445), "s", ""));
        assert_eq!(v6.to_string(), "smb://[::1]:4445/s");
        let bare = SmbUrl::parse("smb://host").unwrap();
        assert_eq!((bare.user, bare.port, bare.share.as_str()), (None, None, ""));
        assert_eq!(SmbUrl::parse("smb://h/s").unwrap().join("x").join("y").path, "x/y");
    }

    #[test]
    fn refuses_what_is_not_a_url() {
        for s in ["http://h/s", "smb:///s", "smb://h:0/s", "smb://h:99999/s", "smb://[::1/s", "smb://h/s/%zz", "smb://h/s/../etc", "smb://h/s/%ff%fe"] {
            assert!(SmbUrl::parse(s).is_err(), "{s}");
        }
    }
}
